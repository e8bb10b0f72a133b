//! The control plane's relay of interactive sessions (`gpool run --pty`,
//! `gpool attach`): it joins a client's two streams to a node's two, byte
//! for byte, and reads none of the frames inside (`gpool_api::terminal`).
//!
//! A session is opened by `POST /api/v1/jobs/{id}/attach` (the controller
//! checks who may attach and orders the node to connect) and then has four
//! halves, each taken once, within [`JOIN_WITHIN`]:
//!
//! ```text
//!  client ──POST …/terminals/S/input──▶ relay ──GET /agent/v1/terminals/S/input──▶ agent ──▶ shim (tty.sock)
//!  client ◀──GET …/terminals/S/output── relay ◀─POST /agent/v1/terminals/S/output── agent ◀── shim
//! ```
//!
//! The agent inside `gpool up` joins in-process ([`Relay::join_local`]).
//! The channels are bounded ([`DEPTH`] chunks): a client that reads nothing
//! holds up only its own session, and the shim drops a client that cannot
//! keep up; the job never waits. When either side goes, its streams end,
//! the other side's end in turn, and the shim counts the session detached.
//!
//! The session's name is a 128-bit secret handed to its caller and to the
//! node only; the client halves also check that the caller is the one who
//! opened it, and the node halves that the caller is a node the controller
//! lets ship that replica's logs (the node that runs it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use tokio::sync::mpsc;

/// How long the halves of a session may take to be joined.
pub const JOIN_WITHIN: Duration = Duration::from_secs(30);
/// Chunks in flight each way.
pub const DEPTH: usize = 64;

/// Sessions whose halves are not all taken yet.
#[derive(Default)]
pub struct Relay {
    open: Mutex<HashMap<String, Halves>>,
}

struct Halves {
    /// Whose session it is (a fingerprint of the caller's credential).
    owner: String,
    job: u64,
    rank: u32,
    opened: Instant,
    client_input: Option<mpsc::Sender<Bytes>>,
    node_input: Option<mpsc::Receiver<Bytes>>,
    node_output: Option<mpsc::Sender<Bytes>>,
    client_output: Option<mpsc::Receiver<Bytes>>,
}

impl Halves {
    fn all_taken(&self) -> bool {
        self.client_input.is_none()
            && self.node_input.is_none()
            && self.node_output.is_none()
            && self.client_output.is_none()
    }
}

/// Why a half cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    #[error(
        "no such terminal session (it was never opened, was joined already, or was not joined within {} s): attach again",
        JOIN_WITHIN.as_secs()
    )]
    NoSession,
    #[error("this terminal session was opened by another caller")]
    NotYours,
}

impl Relay {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Halves>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a session on replica `rank` of job `job` for `owner`; returns its name.
    pub fn open(&self, owner: String, job: u64, rank: u32) -> Result<String, String> {
        let name = crate::plane::auth::new_secret()?;
        let (input_tx, input_rx) = mpsc::channel(DEPTH);
        let (output_tx, output_rx) = mpsc::channel(DEPTH);
        let mut open = self.lock();
        // Sessions never joined are dropped here, not by a timer.
        open.retain(|_, h| h.opened.elapsed() < JOIN_WITHIN);
        open.insert(
            name.clone(),
            Halves {
                owner,
                job,
                rank,
                opened: Instant::now(),
                client_input: Some(input_tx),
                node_input: Some(input_rx),
                node_output: Some(output_tx),
                client_output: Some(output_rx),
            },
        );
        Ok(name)
    }

    /// Drops a session that will not be joined (the controller refused it).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    fn take<T>(
        &self,
        name: &str,
        owner: Option<&str>,
        half: impl FnOnce(&mut Halves) -> Option<T>,
    ) -> Result<T, RelayError> {
        let mut open = self.lock();
        let h = open.get_mut(name).filter(|h| h.opened.elapsed() < JOIN_WITHIN).ok_or(RelayError::NoSession)?;
        if owner.is_some_and(|o| o != h.owner) {
            return Err(RelayError::NotYours);
        }
        let got = half(h).ok_or(RelayError::NoSession)?;
        if h.all_taken() {
            open.remove(name);
        }
        Ok(got)
    }

    /// The replica (job, rank) session `name` is for, while it is open.
    pub fn replica_of(&self, name: &str) -> Result<(u64, u32), RelayError> {
        let open = self.lock();
        let h = open.get(name).filter(|h| h.opened.elapsed() < JOIN_WITHIN).ok_or(RelayError::NoSession)?;
        Ok((h.job, h.rank))
    }

    /// The client's keystrokes go in here.
    pub fn client_input(&self, name: &str, owner: &str) -> Result<mpsc::Sender<Bytes>, RelayError> {
        self.take(name, Some(owner), |h| h.client_input.take())
    }

    /// The job's output comes out here for the client.
    pub fn client_output(&self, name: &str, owner: &str) -> Result<mpsc::Receiver<Bytes>, RelayError> {
        self.take(name, Some(owner), |h| h.client_output.take())
    }

    /// The node's side of the keystrokes.
    pub fn node_input(&self, name: &str) -> Result<mpsc::Receiver<Bytes>, RelayError> {
        self.take(name, None, |h| h.node_input.take())
    }

    /// The node's side of the output.
    pub fn node_output(&self, name: &str) -> Result<mpsc::Sender<Bytes>, RelayError> {
        self.take(name, None, |h| h.node_output.take())
    }

    /// The agent in this process (`gpool up`) joins session `name` with its
    /// connection to the shim: two threads copy until either side ends.
    pub fn join_local(&self, name: &str, shim: std::os::unix::net::UnixStream) -> std::io::Result<()> {
        let mut input = self.node_input(name).map_err(std::io::Error::other)?;
        let output = self.node_output(name).map_err(std::io::Error::other)?;
        let mut to_shim = shim.try_clone()?;
        let mut from_shim = shim;
        std::thread::Builder::new().name("tty-in".into()).spawn(move || {
            use std::io::Write as _;
            while let Some(chunk) = input.blocking_recv() {
                if to_shim.write_all(&chunk).is_err() {
                    break;
                }
            }
            // The client went: the shim hears it.
            let _ = to_shim.shutdown(std::net::Shutdown::Both);
        })?;
        std::thread::Builder::new().name("tty-out".into()).spawn(move || {
            use std::io::Read as _;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match from_shim.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if output.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = from_shim.shutdown(std::net::Shutdown::Both);
        })?;
        Ok(())
    }
}

impl Relay {
    /// Ends session `name` for its client with `frame` (why the node could not join).
    pub fn say_and_close(&self, name: &str, frame: &[u8]) {
        if let Ok(output) = self.node_output(name) {
            let _ = output.blocking_send(Bytes::copy_from_slice(frame));
        }
        self.forget(name);
    }
}

/// Who opened a session, as the relay compares it: the caller's token, or
/// its uid on the Unix socket.
pub fn owner_of(credential: &crate::plane::auth::Credential) -> String {
    use sha2::Digest as _;
    match credential {
        crate::plane::auth::Credential::Token(t) => {
            let digest = sha2::Sha256::digest(t.as_bytes());
            format!("token:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
        }
        crate::plane::auth::Credential::Local(u) => format!("uid:{}", u.uid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_half_is_taken_once_and_only_by_its_owner() {
        let relay = Relay::default();
        let s = relay.open("uid:1000".into(), 7, 0).expect("randomness");
        assert_eq!(relay.client_input(&s, "uid:1001").err(), Some(RelayError::NotYours));
        assert!(relay.client_input(&s, "uid:1000").is_ok());
        assert_eq!(relay.client_input(&s, "uid:1000").err(), Some(RelayError::NoSession), "taken already");
        assert!(relay.client_output(&s, "uid:1000").is_ok());
        assert_eq!(relay.replica_of(&s), Ok((7, 0)));
        assert!(relay.node_input(&s).is_ok());
        assert!(relay.node_output(&s).is_ok());
        assert_eq!(relay.node_output(&s).err(), Some(RelayError::NoSession), "all taken: gone");
        assert_eq!(relay.client_output("not-a-session", "uid:1000").err(), Some(RelayError::NoSession));
        let t = relay.open("uid:1000".into(), 8, 0).expect("randomness");
        relay.forget(&t);
        assert_eq!(relay.node_input(&t).err(), Some(RelayError::NoSession));
    }

    #[tokio::test]
    async fn bytes_cross_the_relay_both_ways() {
        let relay = Relay::default();
        let s = relay.open("uid:0".into(), 1, 0).expect("randomness");
        let keys = relay.client_input(&s, "uid:0").expect("input");
        let mut screen = relay.client_output(&s, "uid:0").expect("output");
        let mut at_node = relay.node_input(&s).expect("node input");
        let from_node = relay.node_output(&s).expect("node output");
        keys.send(Bytes::from_static(b"ls\r")).await.expect("send");
        assert_eq!(at_node.recv().await.as_deref(), Some(&b"ls\r"[..]));
        from_node.send(Bytes::from_static(b"a b c")).await.expect("send");
        assert_eq!(screen.recv().await.as_deref(), Some(&b"a b c"[..]));
        drop(keys);
        assert_eq!(at_node.recv().await, None, "the client went: the node's stream ends");
    }
}
