//! An interactive replica's terminal, on the shim's side (`gpool run --pty`).
//!
//! The shim opens a pseudo-terminal, listens on `DIR/tty.sock` (root's,
//! mode 0600: only the agent connects) and waits for a first client before
//! it starts the command, whose standard input, output and error are the
//! terminal's slave side. From then on it copies what the job writes to the
//! job's log (within its limit), to a ring of the last [`RING`] bytes and
//! to the client attached now, and what the client sends (keystrokes,
//! window sizes, pings) to the terminal. The frames are
//! `gpool_api::terminal`'s, end to end from the client.
//!
//! - One client at a time: a new one takes the session over (the old one
//!   is told and closed) and first gets the ring, so it sees the prompt.
//! - A client that sends nothing for [`SILENCE`] (it pings every few
//!   seconds) or cannot take output for [`WRITE_TIMEOUT`] is gone; the job
//!   never waits for a client.
//! - With no client for the job's grace period (and before the first one),
//!   the session hangs up: `SIGHUP` to the job's process group, `SIGKILL`
//!   [`HANGUP_TO_KILL`] later; its GPUs are released as for any ended job.
//! - When the command ends, the client gets its exit status as the last frame.
//!
//! Everything here runs in the shim, which outlives the daemon: a session
//! survives a restart of the agent or a fail-over of the control plane,
//! and a client re-attaches (`gpool attach`) within the grace period.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpool_api::terminal::{ExitFrame, Frame, read_frame};
use rustix::process::{Pid, Signal, kill_process_group};

use crate::protocol::Ids;

/// The session's socket in the replica's directory.
pub const SOCKET: &str = "tty.sock";
/// Output kept for a client that attaches later.
pub const RING: usize = 16 * 1024;
/// A client silent this long is gone.
pub const SILENCE: Duration = Duration::from_secs(20);
/// A client that cannot take output this long is gone.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// From the hang-up to the kill of a job that ignores it.
pub const HANGUP_TO_KILL: Duration = Duration::from_secs(10);

/// A pseudo-terminal: the shim keeps the master, the job gets the slave.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal whose slave side belongs to `owner` (as a login's
/// does), so that the job may reopen it by name.
pub fn open_pty(owner: Option<&Ids>) -> std::io::Result<Pty> {
    use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = ioctl_tiocgptpeer(&master, flags)?;
    if let Some(ids) = owner {
        use rustix::fs::{Gid, Uid};
        rustix::fs::fchown(&slave, Some(Uid::from_raw(ids.uid)), Some(Gid::from_raw(ids.gid)))?;
    }
    // Only its owner may open it by name: no one else writes to the job's screen or holds its terminal open.
    rustix::fs::fchmod(&slave, rustix::fs::Mode::from_raw_mode(0o600))?;
    Ok(Pty { master, slave })
}

/// Listens on the session's socket in `dir`, for the agent only.
pub fn listen(dir: &Path) -> std::io::Result<UnixListener> {
    let path = dir.join(SOCKET);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot listen on {} for the terminal's clients: {e}", path.display()))
    })?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(listener)
}

/// How a wait for the first client ended.
pub enum First {
    Client(UnixStream),
    /// None came within the grace.
    None,
    /// `stop` said why the job must not start (killed, or the lease ran out).
    Stopped(String),
}

/// The first client, if one connects within `grace`; `stop` is asked each
/// second whether the job may still start.
pub fn first_client(
    listener: &UnixListener,
    grace: Duration,
    stop: impl Fn() -> Option<String>,
) -> std::io::Result<First> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let deadline = Instant::now() + grace;
    loop {
        if let Some(why) = stop() {
            return Ok(First::Stopped(why));
        }
        let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(1));
        if left.is_zero() {
            return Ok(First::None);
        }
        let timeout = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let mut fds = [PollFd::new(listener, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => return listener.accept().map(|(s, _)| First::Client(s)),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Applies a client's first frames before the command starts, up to its
/// window size (the client sends it first) or its first keystrokes, which
/// the terminal keeps for the command; pings are skipped. Waits at most 2 s.
pub fn first_frame(client: &mut UnixStream, master: &OwnedFd) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
    loop {
        match read_frame(client) {
            Ok(Some(Frame::Resize { rows, cols })) => return resize(master, rows, cols),
            Ok(Some(Frame::Input(bytes))) => {
                if let Ok(fd) = master.try_clone() {
                    let _ = File::from(fd).write_all(&bytes);
                }
                return;
            }
            Ok(Some(_)) => {}
            _ => return,
        }
    }
}

fn resize(master: &OwnedFd, rows: u16, cols: u16) {
    let size = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    let _ = rustix::termios::tcsetwinsize(master, size);
}

/// One session: who is attached, what they missed, and whether the job ended.
pub struct Session {
    state: Mutex<State>,
    changed: Condvar,
    /// The terminal's master side, for keystrokes and window sizes.
    master: OwnedFd,
    grace: Duration,
}

#[derive(Default)]
struct State {
    /// The client attached now, numbered.
    client: Option<(u64, UnixStream)>,
    attached: u64,
    ring: VecDeque<u8>,
    /// Since when no client has been attached.
    alone_since: Option<Instant>,
    /// The command has ended.
    done: bool,
    /// The session hung up for want of a client.
    hung_up: bool,
}

impl Session {
    /// A session whose first client is `first`.
    pub fn start(master: OwnedFd, first: UnixStream, grace: Duration) -> Arc<Session> {
        let session = Arc::new(Session { state: Mutex::default(), changed: Condvar::new(), master, grace });
        session.attach(first);
        session
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes new clients from `listener` for the rest of the shim's life.
    pub fn serve(self: &Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new().name("tty-accept".into()).spawn(move || {
            for stream in listener.incoming().flatten() {
                me.attach(stream);
            }
        })?;
        Ok(())
    }

    /// Hangs the job up once it has had no client for the grace period
    /// (`job_pid` is its process group); returns when the job has ended.
    pub fn watch(self: &Arc<Self>, job_pid: i32) -> std::io::Result<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new().name("tty-watch".into()).spawn(move || me.hang_up_when_alone(job_pid))?;
        Ok(())
    }

    fn hang_up_when_alone(&self, job_pid: i32) {
        let mut st = self.lock();
        loop {
            if st.done {
                return;
            }
            let Some(since) = st.alone_since else {
                st = self.changed.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            };
            let left = self.grace.saturating_sub(since.elapsed());
            if !left.is_zero() {
                st = self.changed.wait_timeout(st, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                continue;
            }
            st.hung_up = true;
            drop(st);
            let Some(pgid) = Pid::from_raw(job_pid) else { return };
            let _ = kill_process_group(pgid, Signal::HUP);
            let st = self.lock();
            let (st, _) = self
                .changed
                .wait_timeout_while(st, HANGUP_TO_KILL, |s| !s.done)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !st.done {
                let _ = kill_process_group(pgid, Signal::KILL);
            }
            return;
        }
    }

    /// Why the session ended the job, if it did.
    pub fn hung_up(&self) -> Option<String> {
        self.lock().hung_up.then(|| {
            format!(
                "no terminal was attached for {} s: the interactive session ended (`gpool attach` within that time keeps it)",
                self.grace.as_secs()
            )
        })
    }

    /// A new client takes the session over.
    fn attach(self: &Arc<Self>, stream: UnixStream) {
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.set_read_timeout(Some(SILENCE));
        let Ok(reader) = stream.try_clone() else { return };
        let mut st = self.lock();
        if st.done {
            return;
        }
        if let Some((_, mut old)) = st.client.take() {
            let _ = old.write_all(&Frame::TakenOver.encode());
            let _ = old.shutdown(std::net::Shutdown::Both);
        }
        let mut stream = stream;
        let (front, back) = st.ring.as_slices();
        if !front.is_empty() || !back.is_empty() {
            let replay = Frame::Output([front, back].concat()).encode();
            if stream.write_all(&replay).is_err() {
                st.alone_since.get_or_insert_with(Instant::now);
                self.changed.notify_all();
                return;
            }
        }
        st.attached += 1;
        let id = st.attached;
        st.client = Some((id, stream));
        st.alone_since = None;
        self.changed.notify_all();
        drop(st);
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("tty-client".into()).spawn(move || me.read_client(id, reader));
        if spawned.is_err() {
            self.detach(id);
        }
    }

    /// Carries one client's frames to the terminal until it goes.
    fn read_client(&self, id: u64, mut from: UnixStream) {
        let Ok(mut keys) = self.master.try_clone().map(File::from) else { return self.detach(id) };
        loop {
            match read_frame(&mut from) {
                Ok(Some(Frame::Input(bytes))) => {
                    if keys.write_all(&bytes).is_err() {
                        break;
                    }
                }
                Ok(Some(Frame::Resize { rows, cols })) => resize(&self.master, rows, cols),
                Ok(Some(_)) => {}
                // Closed, silent too long, or not speaking frames.
                Ok(None) | Err(_) => break,
            }
        }
        self.detach(id);
    }

    /// Client `id` is gone (if it is still the one attached).
    fn detach(&self, id: u64) {
        let mut st = self.lock();
        if st.client.as_ref().is_some_and(|(c, _)| *c == id) {
            st.client = None;
            st.alone_since = Some(Instant::now());
            self.changed.notify_all();
        }
    }

    /// What the job wrote: kept in the ring and sent to the client.
    pub fn output(&self, bytes: &[u8]) {
        let mut st = self.lock();
        st.ring.extend(bytes);
        let over = st.ring.len().saturating_sub(RING);
        st.ring.drain(..over);
        let failed = match st.client.as_mut() {
            Some((_, c)) => c.write_all(&Frame::Output(bytes.to_vec()).encode()).is_err(),
            None => false,
        };
        if failed && let Some((_, c)) = st.client.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
            st.alone_since = Some(Instant::now());
            self.changed.notify_all();
        }
    }

    /// The command ended: the client gets its status, the watch stops.
    pub fn finish(&self, exit: ExitFrame) {
        let mut st = self.lock();
        st.done = true;
        if let Some((_, mut c)) = st.client.take() {
            let _ = c.write_all(&Frame::Exit(exit).encode());
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.changed.notify_all();
    }
}

/// The terminal's output as a reader for the log's copier, which also goes
/// to the session as it is read.
pub struct Tee {
    pub master: File,
    pub session: Arc<Session>,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.master.read(buf)?;
        if n > 0 {
            self.session.output(&buf[..n]);
        }
        Ok(n)
    }
}

/// Before an interactive job starts: its terminal, and its first client
/// within `grace` (with that client's window size applied); or why it does
/// not start.
pub fn interactive(
    listener: &UnixListener,
    grace: Duration,
    owner: Option<&Ids>,
    stop: impl Fn() -> Option<String>,
) -> Result<(Pty, UnixStream), String> {
    let pty = open_pty(owner).map_err(|e| format!("cannot open a pseudo-terminal for the interactive job: {e}"))?;
    match first_client(listener, grace, stop) {
        Ok(First::Client(mut first)) => {
            first_frame(&mut first, &pty.master);
            Ok((pty, first))
        }
        Ok(First::Stopped(why)) => Err(why),
        Ok(First::None) => Err(format!(
            "no terminal attached within {} s of the start: the interactive session ended unused (`gpool run --pty` attaches at once)",
            grace.as_secs()
        )),
        Err(e) => Err(format!("cannot take the interactive job's first client: {e}")),
    }
}

/// Tells an interactive job's first client that the job could not start, and why.
pub fn refuse(mut first: UnixStream, code: i32, why: &str) {
    let _ = first
        .write_all(&Frame::Exit(ExitFrame { code: Some(code), signal: None, error: Some(why.to_string()) }).encode());
    let _ = first.shutdown(std::net::Shutdown::Both);
}

/// How long the end of a job's output may take once the job is gone (a
/// process outside it holding the terminal open would hold it forever).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(5);

/// A running interactive job's session and the copy of its output.
pub struct Attended {
    session: Arc<Session>,
    copied: std::sync::mpsc::Receiver<crate::node::output::Copied>,
}

impl Attended {
    /// Serves the terminal of the job `job_pid` (its process group), which
    /// runs on `pty`'s slave side (the shim's copy of which is closed here).
    pub fn start(
        pty: Pty,
        first: UnixStream,
        listener: UnixListener,
        launch: &crate::protocol::Launch,
        job_pid: i32,
    ) -> std::io::Result<Attended> {
        let Pty { master, slave } = pty;
        // The job's copies only: the master reads end of file once the job and all it started are gone.
        drop(slave);
        let grace = Duration::from_millis(launch.tty_grace_ms.unwrap_or(0));
        let session = Session::start(master.try_clone()?, first, grace);
        session.serve(listener)?;
        session.watch(job_pid)?;
        let tee = Tee { master: File::from(master), session: Arc::clone(&session) };
        let (log, limit) = (launch.stdout.clone(), launch.log_limit.unwrap_or(u64::MAX));
        let (done, copied) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("tty-output".into()).spawn(move || {
            let _ = done.send(crate::node::output::copy_limited(tee, &log, limit));
        })?;
        Ok(Attended { session, copied })
    }

    /// Once the job and everything it started are gone: the rest of its
    /// output to the log and the client (for at most [`OUTPUT_DRAIN`]), then
    /// its status to the client, with `why` gpool ended it if it did.
    /// Returns why the session ended the job, if it did.
    pub fn finish(self, dir: &Path, status: &std::process::ExitStatus, why: Option<String>) -> Option<String> {
        use std::os::unix::process::ExitStatusExt as _;
        match self.copied.recv_timeout(OUTPUT_DRAIN) {
            Ok(copied) => {
                if let Some(e) = copied.error {
                    eprintln!("gpool shim {}: terminal output lost: {e}", dir.display());
                }
            }
            Err(_) => {
                eprintln!("gpool shim {}: the terminal is still held open; its last output is lost", dir.display())
            }
        }
        let hung_up = self.session.hung_up();
        let error = why.or_else(|| hung_up.clone());
        self.session.finish(ExitFrame { code: status.code(), signal: status.signal(), error });
        let _ = std::fs::remove_file(dir.join(SOCKET));
        hung_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(s: &mut UnixStream) -> Frame {
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        read_frame(s).expect("a frame").expect("not the end")
    }

    #[test]
    fn a_new_client_takes_over_and_sees_what_it_missed_and_the_last_gets_the_status() {
        let pty = open_pty(None).expect("a pseudo-terminal");
        let (mut a, a_shim) = UnixStream::pair().expect("pair");
        let session = Session::start(pty.master, a_shim, Duration::from_secs(60));
        session.output(b"prompt$ ");
        assert_eq!(next(&mut a), Frame::Output(b"prompt$ ".to_vec()));
        let (mut b, b_shim) = UnixStream::pair().expect("pair");
        session.attach(b_shim);
        assert_eq!(next(&mut a), Frame::TakenOver, "the old client is told");
        assert_eq!(next(&mut b), Frame::Output(b"prompt$ ".to_vec()), "the new one sees what it missed");
        session.finish(ExitFrame { code: Some(7), ..Default::default() });
        assert_eq!(next(&mut b), Frame::Exit(ExitFrame { code: Some(7), ..Default::default() }));
        assert_eq!(session.hung_up(), None, "a client was there: nobody hung the job up");
    }

    #[test]
    fn the_ring_keeps_only_the_last_bytes() {
        let pty = open_pty(None).expect("a pseudo-terminal");
        let (a, a_shim) = UnixStream::pair().expect("pair");
        let session = Session::start(pty.master, a_shim, Duration::from_secs(60));
        drop(a);
        let big: Vec<u8> = (0..RING + 100).map(|i| (i % 251) as u8).collect();
        session.output(&big);
        let (mut b, b_shim) = UnixStream::pair().expect("pair");
        session.attach(b_shim);
        assert_eq!(next(&mut b), Frame::Output(big[100..].to_vec()));
    }
}
