//! systemd's readiness protocol (`sd_notify(3)`), for units of `Type=notify`:
//! `READY=1` once the process does what it is for (the API answers; an
//! agent is registered), `STATUS=` lines `systemctl status` shows, and
//! `STOPPING=1`. A datagram to `$NOTIFY_SOCKET` (a path, or `@name` in the
//! abstract namespace); without the variable (not under systemd) nothing is
//! sent. Best effort: a notification that cannot be sent is logged, never
//! fatal: the daemon works the same, systemd only learns less.

use std::os::unix::net::UnixDatagram;

/// The socket systemd listens on, if any.
fn socket() -> Option<String> {
    std::env::var("NOTIFY_SOCKET").ok().filter(|s| !s.is_empty())
}

/// Sends `state` (`KEY=value` lines) to systemd, if it listens.
pub fn notify(state: &str) {
    let Some(path) = socket() else { return };
    if let Err(e) = send(&path, state) {
        tracing::warn!("cannot tell systemd {state:?} on {path}: {e}");
    }
}

fn send(path: &str, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(state.as_bytes(), path)?;
        }
    }
    Ok(())
}

/// The process serves: `READY=1`, with what it does as its status.
pub fn ready(status: &str) {
    notify(&format!("READY=1\nSTATUS={status}"));
}

/// A change systemd shows in `systemctl status`.
pub fn status(status: &str) {
    notify(&format!("STATUS={status}"));
}

/// The process is stopping.
pub fn stopping() {
    notify("STOPPING=1\nSTATUS=stopping; running jobs keep running");
}

/// systemd's watchdog (`WatchdogSec=`): `WATCHDOG=1` at half the interval
/// systemd gives in `$WATCHDOG_USEC`, sent by the loop whose life it
/// vouches for (the controller's, `controller/shell.rs`): a controller
/// stuck in one turn stops the pings, and systemd restarts the process,
/// which recovers from its store (running jobs keep running under their
/// shims).
#[derive(Debug)]
pub struct Watchdog {
    every: std::time::Duration,
    next: std::time::Instant,
}

impl Watchdog {
    /// The watchdog systemd asked for, if it asked this process
    /// (`$WATCHDOG_PID`, when set, names the process meant).
    pub fn from_env() -> Option<Watchdog> {
        let usec = std::env::var("WATCHDOG_USEC").ok()?;
        let pid = std::env::var("WATCHDOG_PID").ok();
        Watchdog::asked(&usec, pid.as_deref(), std::process::id())
    }

    fn asked(usec: &str, pid: Option<&str>, me: u32) -> Option<Watchdog> {
        if pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(me)) {
            return None;
        }
        let usec: u64 = usec.trim().parse().ok().filter(|u| *u > 0)?;
        let every = std::time::Duration::from_micros(usec / 2);
        Some(Watchdog { every, next: std::time::Instant::now() })
    }

    /// How long until the next ping is due (zero when it is).
    pub fn due_in(&self) -> std::time::Duration {
        self.next.saturating_duration_since(std::time::Instant::now())
    }

    /// Pings if a ping is due: the caller's loop has just turned.
    pub fn alive(&mut self) {
        let now = std::time::Instant::now();
        if now >= self.next {
            notify("WATCHDOG=1");
            self.next = now + self.every;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_the_interval_and_only_for_the_process_meant() {
        let w = Watchdog::asked("30000000", None, 7).expect("asked");
        assert_eq!(w.every, std::time::Duration::from_secs(15));
        assert_eq!(w.due_in(), std::time::Duration::ZERO, "the first ping is due at once");
        assert!(Watchdog::asked("30000000", Some("7"), 7).is_some());
        assert!(Watchdog::asked("30000000", Some("8"), 7).is_none(), "another process's");
        assert!(Watchdog::asked("0", None, 7).is_none());
        assert!(Watchdog::asked("soon", None, 7).is_none());
        let mut w = Watchdog::asked("2000000", None, 7).expect("asked");
        w.alive();
        assert!(w.due_in() > std::time::Duration::from_millis(900), "the next ping in a second");
    }

    /// What a unit of `Type=notify` would receive, on a socket of its own.
    #[test]
    fn ready_reaches_the_notify_socket_and_nothing_is_sent_without_one() {
        let dir = std::env::temp_dir().join(format!("gpool-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify.sock");
        let systemd = UnixDatagram::bind(&path).expect("bind");
        send(path.to_str().expect("path"), "READY=1\nSTATUS=serving http://127.0.0.1:7878").expect("send");
        let mut buf = [0u8; 256];
        let n = systemd.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving http://127.0.0.1:7878");
        // The abstract namespace, as systemd uses when it can.
        let name = format!("gpool-notify-test-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt as _;
        let abstract_addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        let systemd = UnixDatagram::bind_addr(&abstract_addr).expect("bind abstract");
        send(&format!("@{name}"), "STOPPING=1").expect("send");
        let n = systemd.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"STOPPING=1");
        assert!(send(dir.join("nobody").to_str().expect("path"), "READY=1").is_err(), "no listener, an error");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
