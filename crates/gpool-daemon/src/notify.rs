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

#[cfg(test)]
mod tests {
    use super::*;

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
