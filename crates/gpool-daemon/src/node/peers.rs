//! Agents asking each other, when no control plane answers them, whether
//! they are in a session with a leading one (`outage.rs`):
//! `GET /agent/v1/peer?from=NODE&nonce=HEX&mac=HEX`, answered with a
//! [`wire::PeerAnswer`].
//!
//! Only nodes of the cluster can ask or answer: both sides sign with the
//! roster's key (HMAC-SHA256), which the control plane hands to registered
//! agents only; an answer is bound to the question's fresh nonce, so it
//! cannot be replayed, and a forged or unsigned one counts as no answer.
//! The listener is small on purpose: one request per connection, its head
//! at most 8 KiB, read within 2 s, 64 connections at once.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gpool_api::agent as wire;
use sha2::{Digest, Sha256};

use crate::node::outage::{Asked, Contact};

/// The path peers ask on.
pub const PATH: &str = "/agent/v1/peer";
const MAX_HEAD: usize = 8 * 1024;
const MAX_CONNECTIONS: usize = 64;

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`, in hex.
pub fn mac(key: &str, msg: &str) -> String {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key.as_bytes()));
    } else {
        k[..key.len()].copy_from_slice(key.as_bytes());
    }
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(msg.as_bytes()).finalize();
    let outer = Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two MACs in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn ask_text(from: &str, nonce: &str) -> String {
    format!("ask\n{from}\n{nonce}")
}

fn answer_text(node: &str, nonce: &str, in_session: bool) -> String {
    format!("answer\n{node}\n{nonce}\n{in_session}")
}

/// Binds the peer listener and answers in a thread; returns the address bound.
pub fn listen(addr: SocketAddr, contact: Arc<Contact>) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind(addr).map_err(|e| {
        anyhow::anyhow!("--peer-listen {addr}: cannot listen there ({e}); pick another address or port")
    })?;
    let bound = l.local_addr()?;
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("peers".into()).spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                open.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let (contact, done) = (contact.clone(), open.clone());
            let spawned = std::thread::Builder::new().name("peer".into()).spawn(move || {
                answer(c, &contact);
                done.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    })?;
    Ok(bound)
}

/// The address peers are told: the bound one, with the advertised host when
/// bound to every interface.
pub fn advertised(bound: SocketAddr, host: &str) -> String {
    if bound.ip().is_unspecified() {
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
        format!("{host}:{}", bound.port())
    } else {
        bound.to_string()
    }
}

fn answer(mut c: TcpStream, contact: &Contact) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = c.set_write_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > MAX_HEAD {
            return respond(&mut c, 431, "the request's head is too large");
        }
    }
    let text = String::from_utf8_lossy(&head);
    let target = text.lines().next().and_then(|l| l.strip_prefix("GET ")).and_then(|l| l.split(' ').next());
    let Some(query) = target.and_then(|t| t.strip_prefix(PATH)).and_then(|q| q.strip_prefix('?')) else {
        return respond(&mut c, 404, "only GET /agent/v1/peer is answered here");
    };
    let param = |k: &str| query.split('&').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')).unwrap_or("");
    let (from, nonce, their_mac) = (param("from"), param("nonce"), param("mac"));
    let Some(key) = contact.key() else { return respond(&mut c, 503, "this node has not registered yet") };
    let valid = |s: &str| {
        !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if !valid(from) || !valid(nonce) || !same(&mac(&key, &ask_text(from, nonce)), their_mac) {
        return respond(&mut c, 403, "not signed with this cluster's roster key");
    }
    let in_session = contact.in_session();
    let node = contact.node().to_string();
    let body = wire::PeerAnswer { mac: mac(&key, &answer_text(&node, nonce, in_session)), node, in_session };
    let json = serde_json::to_string(&body).unwrap_or_default();
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    );
}

fn respond(c: &mut TcpStream, status: u16, text: &str) {
    let _ = write!(
        c,
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{text}\n",
        if status == 403 { "Forbidden" } else { "Error" },
        text.len() + 1
    );
}

/// A fresh nonce: 16 random bytes in hex.
fn nonce() -> Option<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Asks one peer, within `timeout`, signing as `me`.
pub fn ask(member: &wire::RosterMember, me: &str, key: &str, timeout: Duration) -> Asked {
    let Some(addr) = &member.peer_addr else {
        return Asked::Unreached("its agent has not registered with this control plane".into());
    };
    let Some(nonce) = nonce() else { return Asked::Unreached("no randomness for a nonce".into()) };
    let http: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into();
    let url = format!("http://{addr}{PATH}?from={me}&nonce={nonce}&mac={}", mac(key, &ask_text(me, &nonce)));
    let mut r = match http.get(&url).call() {
        Ok(r) => r,
        Err(e) => return Asked::Unreached(format!("{addr}: {e}")),
    };
    if !r.status().is_success() {
        return Asked::Unreached(format!("{addr}: HTTP {}", r.status().as_u16()));
    }
    let Ok(a) = r.body_mut().with_config().limit(4096).read_json::<wire::PeerAnswer>() else {
        return Asked::Unreached(format!("{addr}: not an answer"));
    };
    if a.node != member.node || !same(&mac(key, &answer_text(&a.node, &nonce, a.in_session)), &a.mac) {
        return Asked::Unreached(format!("{addr}: an answer not signed by node {}", member.node));
    }
    Asked::Answered { in_session: a.in_session }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 of RFC 4231.
        assert_eq!(
            mac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    fn member(addr: SocketAddr, node: &str) -> wire::RosterMember {
        wire::RosterMember { node: node.into(), peer_addr: Some(addr.to_string()) }
    }

    #[test]
    fn peers_answer_only_questions_signed_with_the_key_and_their_answers_are_checked() {
        let dir = std::env::temp_dir().join(format!("gpool-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key = "cd".repeat(32);
        let b = Contact::new(dir.join("lease"), "b".into());
        let addr = listen("127.0.0.1:0".parse().expect("addr"), b.clone()).expect("listen");
        let t = Duration::from_secs(2);
        // Not registered yet: no key, no answer.
        assert!(matches!(ask(&member(addr, "b"), "a", &key, t), Asked::Unreached(e) if e.contains("503")));
        let roster = wire::Roster { version: 1, key: key.clone(), members: vec![] };
        b.opened(crate::node::lease::monotonic_ms(), 60_000, Some(roster));
        assert_eq!(ask(&member(addr, "b"), "a", &key, t), Asked::Answered { in_session: true });
        b.closed();
        assert_eq!(ask(&member(addr, "b"), "a", &key, t), Asked::Answered { in_session: false });
        // A stranger without the key is refused.
        let wrong = "ef".repeat(32);
        assert!(matches!(ask(&member(addr, "b"), "a", &wrong, t), Asked::Unreached(e) if e.contains("403")));
        // An answer from another node than the roster names does not count.
        assert!(matches!(ask(&member(addr, "c"), "a", &key, t), Asked::Unreached(e) if e.contains("not signed")));
        // Garbage, an oversized head and a silent client leave the listener answering.
        for junk in [b"GET / HTTP/1.1\r\n\r\n".to_vec(), vec![b'x'; 20_000], b"GET /agent/v1/peer?from=a".to_vec()] {
            let mut s = TcpStream::connect(addr).expect("connect");
            let _ = s.write_all(&junk);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            assert!(!out.contains("200 OK"), "{out}");
        }
        let idle: Vec<TcpStream> = (0..10).filter_map(|_| TcpStream::connect(addr).ok()).collect();
        assert_eq!(ask(&member(addr, "b"), "a", &key, t), Asked::Answered { in_session: false });
        drop(idle);
        // No peer there at all.
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
        assert!(matches!(ask(&member(closed, "b"), "a", &key, t), Asked::Unreached(_)));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_advertised_address_names_a_reachable_host() {
        assert_eq!(advertised("0.0.0.0:7000".parse().expect("a"), "10.1.2.3"), "10.1.2.3:7000");
        assert_eq!(advertised("[::]:7000".parse().expect("a"), "fe80::1"), "[fe80::1]:7000");
        assert_eq!(advertised("127.0.0.2:7000".parse().expect("a"), "x"), "127.0.0.2:7000");
    }
}
