//! The agent's side of an interactive session: told by the control plane
//! (`Order::Attach`), it connects to the replica's shim (`terminal.rs`)
//! and joins the client's session at the plane's relay, copying bytes both
//! ways without reading them. A remote agent joins over two HTTP streams
//! (`GET …/input`, `POST …/output`) with the node's token; the agent inside
//! `gpool up` hands the connection to the relay in-process.
//!
//! When the shim cannot be reached (the job has ended, or its shim is
//! gone), the client still hears why: the agent sends it one notice frame.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use gpool_api::terminal::Frame;

use crate::node::conn::Conn;

/// How long a shim that is starting may take to listen.
pub const SHIM_WITHIN: Duration = Duration::from_secs(20);

/// Connects to the shim of the replica in `dir`, waiting for it to listen.
pub fn connect_shim(dir: &Path) -> std::io::Result<UnixStream> {
    let path = dir.join(crate::node::terminal::SOCKET);
    let deadline = Instant::now() + SHIM_WITHIN;
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(s),
            // Not there yet, or there and not accepting any more.
            Err(_) if Instant::now() < deadline && !dir.join(crate::node::shim::EXIT).exists() => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "the job's terminal cannot be reached ({}: {e}): it has ended or is not interactive",
                        path.display()
                    ),
                ));
            }
        }
    }
}

/// What the client gets when the shim cannot be reached.
pub fn notice(why: &str) -> Vec<u8> {
    Frame::Notice(format!("gpool: {why}")).encode()
}

/// Joins session `session` at a remote control plane with the shim of the
/// replica in `dir`, in the background.
pub(crate) fn relay_remote(conn: Conn, node: String, session: String, dir: std::path::PathBuf) {
    let spawned = std::thread::Builder::new().name("tty-link".into()).spawn(move || {
        if let Err(e) = relay(&conn, &node, &session, &dir) {
            tracing::warn!("interactive session of {}: {e}", dir.display());
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start a thread for an interactive session: {e}");
    }
}

fn relay(conn: &Conn, node: &str, session: &str, dir: &Path) -> anyhow::Result<()> {
    // No overall time limit: a session lasts as long as its client.
    let mut config =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_connect(Some(Duration::from_secs(3)));
    if let Some(t) = &conn.tls {
        config = config.tls_config(t.clone());
    }
    let http: ureq::Agent = config.build().into();
    let url = |half: &str| format!("{}/agent/v1/terminals/{session}/{half}", conn.base);
    let shim = match connect_shim(dir) {
        Ok(s) => s,
        Err(e) => {
            let _ = http
                .post(url("output"))
                .query("node", node)
                .header("Authorization", conn.auth())
                .send(&notice(&e.to_string())[..]);
            return Err(e.into());
        }
    };
    let mut to_shim = shim.try_clone()?;
    let mut from_shim = shim;
    let input = http.get(url("input")).query("node", node).header("Authorization", conn.auth()).call()?;
    anyhow::ensure!(
        input.status().is_success(),
        "the control plane refused the session's input: HTTP {}",
        input.status()
    );
    let mut keys = input.into_body().into_reader();
    let copy_in = std::thread::Builder::new().name("tty-in".into()).spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match keys.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_shim.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        // The client went: the shim hears it, and the output's copy ends too.
        let _ = to_shim.shutdown(std::net::Shutdown::Both);
    })?;
    let out = http
        .post(url("output"))
        .query("node", node)
        .header("Authorization", conn.auth())
        .header("Content-Type", "application/octet-stream")
        .send(ureq::SendBody::from_reader(&mut from_shim));
    let _ = from_shim.shutdown(std::net::Shutdown::Both);
    let _ = copy_in.join();
    let out = out?;
    anyhow::ensure!(out.status().is_success(), "the control plane refused the session's output: HTTP {}", out.status());
    Ok(())
}
