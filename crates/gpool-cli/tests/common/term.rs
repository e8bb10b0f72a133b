//! The `gpool` CLI driven from a pseudo-terminal, as a person's shell runs
//! it (`gpool run --pty`, `gpool attach`): keys typed, the window resized,
//! the screen read.

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::BIN;

/// The `gpool` CLI on a pseudo-terminal of this test's, as a person's shell runs it.
pub struct Term {
    pub child: Child,
    master: File,
    screen: Arc<(Mutex<Vec<u8>>, Condvar)>,
}

impl Term {
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Term {
        // The shim's own way of opening one.
        let gpool_daemon::node::terminal::Pty { master, slave } =
            gpool_daemon::node::terminal::open_pty(None).expect("a pseudo-terminal");
        let size = rustix::termios::Winsize { ws_row: 33, ws_col: 111, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&master, size).expect("a window size");
        let mut cmd = Command::new(BIN);
        cmd.args(args);
        for var in ["GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_DATA_DIR", "GPOOL_SOCKET", "GPOOL_CONFIG"] {
            cmd.env_remove(var);
        }
        let child = cmd
            .envs(env.iter().copied())
            .stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("run gpool");
        let master = File::from(master);
        let screen: Arc<(Mutex<Vec<u8>>, Condvar)> = Arc::default();
        let (mut from, seen) = (master.try_clone().expect("dup"), Arc::clone(&screen));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.0.lock().expect("lock").extend_from_slice(&buf[..n]);
                seen.1.notify_all();
            }
        });
        Term { master, child, screen }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.0.lock().expect("lock")).into_owned()
    }

    /// Waits until the screen shows `what`.
    pub fn expect(&self, what: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut shown = self.screen.0.lock().expect("lock");
        while !String::from_utf8_lossy(&shown).contains(what) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "never shown: {what:?}; the screen:\n{}", String::from_utf8_lossy(&shown));
            shown = self.screen.1.wait_timeout(shown, left).expect("lock").0;
        }
    }

    pub fn keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).expect("type");
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        let size = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&self.master, size).expect("resize");
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::WINCH).expect("SIGWINCH");
    }

    /// The CLI's exit code, once it exits.
    pub fn exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "gpool did not exit; the screen:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
