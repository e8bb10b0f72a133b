//! The proxy's promises (issue 40, point 4), against the proxy itself on
//! loopback and replicas that are small servers of the test: routing by
//! `Host` and by path, an idempotent request retried on another replica
//! when one is dead, 502 for one that cannot be retried, requests held while
//! no replica is ready, and 503 with `Retry-After` past the hold limit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::*;
use crate::plane::controller::{Backend, Route};

/// A replica: answers `/health` and echoes the path of anything else with its name.
fn replica(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().expect("clone"));
                let mut c = c;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    let _ = r.read_exact(&mut body);
                    let text = format!("{name} {path}");
                    let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}", text.len());
                }
            });
        }
    });
    addr
}

struct Running {
    addr: SocketAddr,
    routes: watch::Sender<Arc<Routes>>,
    _rt: tokio::runtime::Runtime,
}

fn route(name: &str, backends: &[(u64, SocketAddr)]) -> Route {
    Route {
        name: name.into(),
        readiness: "/health".into(),
        backends: backends.iter().map(|(job, a)| Backend { job: *job, addr: a.to_string(), draining: false }).collect(),
    }
}

fn start(services: Vec<Route>) -> Running {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (routes, rx) = watch::channel(Arc::new(Routes { services }));
    let (events, _) = std::sync::mpsc::channel();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let limits = crate::plane::listen::Limits { connections: 4096, header_timeout: Duration::from_secs(30) };
    rt.spawn(serve(listener, rx, events, limits, std::future::pending()));
    Running { addr, routes, _rt: rt }
}

/// Sends one request on a new connection; its status, `Retry-After` and body.
fn send(to: SocketAddr, method: &str, path: &str, host: &str, body: &str) -> (u16, Option<String>, String) {
    send_within(to, method, path, host, body, Duration::from_secs(60))
}

/// `send`, giving up on an answer after `wait` (status 0).
fn send_within(
    to: SocketAddr,
    method: &str,
    path: &str,
    host: &str,
    body: &str,
    wait: Duration,
) -> (u16, Option<String>, String) {
    let mut c = TcpStream::connect(to).expect("connect");
    c.set_read_timeout(Some(wait)).expect("timeout");
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    answer(c)
}

fn answer(c: TcpStream) -> (u16, Option<String>, String) {
    let mut text = String::new();
    let _ = BufReader::new(c).read_to_string(&mut text);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let retry =
        text.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after:").map(|v| v.trim().to_string()));
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
    (status, retry, body)
}

/// Retries `f` until it says yes, for at most 30 s.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn requests_go_to_the_service_named_by_host_or_path() {
    let (a, b) = (replica("a"), replica("b"));
    let p = start(vec![route("llm", &[(1, a)]), route("embed", &[(2, b)])]);
    until("the replicas are ready", || send(p.addr, "GET", "/llm/x", "x", "").0 == 200);
    until("b is ready", || send(p.addr, "GET", "/embed/x", "x", "").0 == 200);
    let cases = [
        ("/llm/v1/chat?q=1", "proxy.local", "a /v1/chat?q=1"),
        ("/llm", "proxy.local", "a /"),
        ("/v1/chat", "embed.example.com", "b /v1/chat"),
        ("/v1/chat", "embed.example.com:8080", "b /v1/chat"),
        // A bare host name is no service's: the path decides.
        ("/llm/y", "embed", "a /y"),
    ];
    for (path, host, want) in cases {
        let (status, _, body) = send(p.addr, "GET", path, host, "");
        assert_eq!((status, body.as_str()), (200, want), "{path} with Host {host}");
    }
    let (status, _, body) = send(p.addr, "GET", "/nope/x", "proxy.local", "");
    assert_eq!(status, 404);
    assert!(body.contains("no service \"nope\"") && body.contains("gpool services"), "{body}");
}

/// A replica that answers one readiness probe, then dies (its address refuses connections).
fn dies_after_its_probe() -> (SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let t = std::thread::spawn(move || {
        if let Some(c) = l.incoming().flatten().next() {
            let _ = answer_health(c);
        }
    });
    (addr, t)
}

#[test]
fn an_idempotent_request_is_retried_on_another_replica_and_others_get_502() {
    let live = replica("live");
    let p = start(vec![route("svc", &[(1, live)])]);
    until("the live replica is ready", || send(p.addr, "GET", "/svc/x", "x", "").0 == 200);
    // A second replica is ready, then dies.
    let (doomed, probed) = dies_after_its_probe();
    p.routes.send_replace(Arc::new(Routes { services: vec![route("svc", &[(1, live), (2, doomed)])] }));
    probed.join().expect("probed");
    // Whichever replica a GET goes to first, the live one answers it.
    for _ in 0..6 {
        let (status, _, body) = send(p.addr, "GET", "/svc/x", "x", "");
        assert_eq!((status, body.as_str()), (200, "live /x"));
    }
    // A request with a body is not retried: sent to a dead replica, it gets 502 naming it.
    let (gone, probed) = dies_after_its_probe();
    p.routes.send_replace(Arc::new(Routes { services: vec![route("post", &[(3, gone)])] }));
    probed.join().expect("probed");
    let (status, _, body) = send(p.addr, "POST", "/post/x", "x", "{}");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("replica job 3"), "{body}");
}

/// Answers one readiness probe with 200.
fn answer_health(c: TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
    }
    let mut c = c;
    write!(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

#[test]
fn requests_wait_for_a_replica_up_to_the_hold_limit_then_get_503_with_retry_after() {
    let _ = crate::wiring::raise_open_file_limit();
    let p = start(vec![route("cold", &[])]);
    // HOLD_LIMIT requests wait: a service at zero has no replica yet.
    let held: Vec<TcpStream> = (0..HOLD_LIMIT)
        .map(|_| {
            let mut c = TcpStream::connect(p.addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
            write!(c, "GET /cold/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
            c
        })
        .collect();
    // Once they all wait, the next is refused at once, with when to come back.
    until("a request past the hold limit is refused", || {
        // One that is still held (not all had come in) is given up on here.
        let (status, retry, body) = send_within(p.addr, "GET", "/cold/x", "x", "", Duration::from_millis(500));
        if status != 503 {
            return false;
        }
        assert_eq!(retry.as_deref(), Some("1"), "{body}");
        assert!(body.contains("1000 requests already wait"), "{body}");
        true
    });
    // A replica comes: every held request is answered by it.
    let warm = replica("warm");
    p.routes.send_replace(Arc::new(Routes { services: vec![route("cold", &[(9, warm)])] }));
    let answered: Vec<(u16, Option<String>, String)> = held.into_iter().map(answer).collect();
    let ok = answered.iter().filter(|(s, _, b)| *s == 200 && b == "warm /x").count();
    let refused = answered.iter().filter(|(s, ..)| *s == 503).count();
    assert_eq!(ok + refused, HOLD_LIMIT as usize, "{:?}", answered.iter().find(|(s, ..)| *s != 200 && *s != 503));
    assert!(
        ok >= HOLD_LIMIT as usize - 10,
        "the held requests are served once a replica is ready: {ok} of {HOLD_LIMIT}"
    );
}
