//! Inference services end to end: `gpool up --proxy-listen` with replicas
//! of `gpool-devtools replica-demo` (answers in 50 ms; `common::devtools`), load from real keep-alive
//! HTTP clients on loopback. Waits are on conditions (the services API),
//! never on the clock; the one timing asserted is that no request fails.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Concurrent keep-alive clients sending `GET /NAME/x` through the proxy until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn new() -> Load {
        Load {
            stop: Arc::new(AtomicBool::new(false)),
            ok: Arc::new(AtomicU64::new(0)),
            failed: Arc::new(AtomicU64::new(0)),
            errors: Arc::default(),
            threads: Vec::new(),
        }
    }

    /// Adds clients up to `n`.
    fn clients(&mut self, addr: &str, path: &str, n: usize) {
        while self.threads.len() < n {
            let (stop, ok, failed, errors) =
                (self.stop.clone(), self.ok.clone(), self.failed.clone(), self.errors.clone());
            let (addr, path) = (addr.to_string(), path.to_string());
            self.threads.push(std::thread::spawn(move || {
                let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
                while !stop.load(Ordering::Acquire) {
                    match get(&mut conn, &addr, &path) {
                        Ok(200) => {
                            ok.fetch_add(1, Ordering::AcqRel);
                        }
                        other => {
                            failed.fetch_add(1, Ordering::AcqRel);
                            errors.lock().expect("errors").push(format!("{other:?}"));
                            conn = None;
                        }
                    }
                }
            }));
        }
    }

    fn stop(mut self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let errors = self.errors.lock().expect("errors").clone();
        (self.ok.load(Ordering::Acquire), self.failed.load(Ordering::Acquire), errors)
    }
}

/// One request on a kept-alive connection (opened when there is none); its status.
fn get(conn: &mut Option<(TcpStream, BufReader<TcpStream>)>, addr: &str, path: &str) -> std::io::Result<u16> {
    exchange(conn, addr, path).map(|(status, _)| status)
}

/// One request; its status and its body as it came, each piece (a chunk of
/// a chunked body, or the whole of a sized one) with when it arrived.
fn exchange(
    conn: &mut Option<(TcpStream, BufReader<TcpStream>)>,
    addr: &str,
    path: &str,
) -> std::io::Result<(u16, Vec<(std::time::Instant, Vec<u8>)>)> {
    if conn.is_none() {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(150)))?;
        let r = BufReader::new(s.try_clone()?);
        *conn = Some((s, r));
    }
    let Some((s, r)) = conn.as_mut() else { unreachable!("just set") };
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (mut length, mut chunked) = (0, false);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Err(std::io::Error::other("closed"));
        }
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        chunked |= h.strip_prefix("transfer-encoding:").is_some_and(|v| v.contains("chunked"));
    }
    let mut pieces = Vec::new();
    if !chunked {
        let mut body = vec![0; length];
        r.read_exact(&mut body)?;
        pieces.push((std::time::Instant::now(), body));
        return Ok((status, pieces));
    }
    loop {
        let mut size = String::new();
        r.read_line(&mut size)?;
        let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|e| std::io::Error::other(format!("a chunk size: {size:?}: {e}")))?;
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk)?;
        chunk.truncate(n);
        if n == 0 {
            return Ok((status, pieces));
        }
        pieces.push((std::time::Instant::now(), chunk));
    }
}

fn service(d: &Daemon, name: &str) -> Value {
    let all = d.get("/api/v1/services");
    all.as_array().and_then(|a| a.iter().find(|s| s["name"] == name).cloned()).unwrap_or(Value::Null)
}

fn until_service(d: &Daemon, name: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let v = d.until("/api/v1/services", limit, |all| {
        all.as_array().and_then(|a| a.iter().find(|s| s["name"] == name)).is_some_and(&done)
    });
    v.as_array().and_then(|a| a.iter().find(|s| s["name"] == name).cloned()).unwrap_or(Value::Null)
}

fn apply(d: &Daemon, spec: &Value) -> Value {
    let name = spec["name"].as_str().expect("a name");
    let (code, v) = d.req("PUT", &format!("/api/v1/services/{name}"), &d.token, Some(spec));
    assert!(code == 200 || code == 201, "apply {name}: {code} {v}");
    v
}

/// `host:port` of the proxy, from a service's endpoint.
fn proxy_addr(endpoint: &str) -> String {
    endpoint.trim_start_matches("http://").split('/').next().expect("host:port").to_string()
}

fn spec(name: &str, min: u32, max: u32, extra: Value) -> Value {
    let mut s = json!({
        "name": name,
        "command": [devtools(), "replica-demo", "--delay", "50ms"],
        "resources": {"nvidia.com/gpu": 1},
        "priority": "high",
        "service": {"readiness": "/health", "replicas": {"min": min, "max": max}, "target": {"inFlight": 4},
                    "scaleDownDelay": "3s", "window": "6s"}
    });
    if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    s
}

#[test]
fn a_service_grows_under_a_load_step_updates_and_shrinks_with_no_failed_request() {
    let s = Scratch::new("services-scale");
    let d = Daemon::start(&s.0, "6xA100-80GB", &["--proxy-listen", "127.0.0.1:0"]);
    // Refused with the field named, before anything runs.
    let (code, v) = d.req("PUT", "/api/v1/services/bad", &d.token, Some(&spec("bad", 3, 2, json!({}))));
    assert_eq!(code, 400, "{v}");
    assert!(v["error"].as_str().unwrap_or("").contains("service.replicas"), "{v}");
    let (code, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&spec("llm", 1, 6, json!({}))));
    assert_eq!(code, 400, "a service is not a job: {v}");

    let created = apply(&d, &spec("llm", 1, 6, json!({})));
    assert_eq!(created["outcome"], "created");
    let addr = proxy_addr(created["endpoint"].as_str().expect("endpoint"));
    until_service(&d, "llm", Duration::from_secs(60), |s| s["ready"] == 1);
    let (code, text, _) = d.cli(&["services"]);
    assert!(code && text.contains("llm") && text.contains("/llm/"), "{text}");
    // A stream passes through as it comes: all five events, as they were
    // sent (100 ms apart), not gathered into one answer.
    let mut c = None;
    let (status, pieces) = exchange(&mut c, &addr, "/llm/stream").expect("stream");
    assert_eq!(status, 200);
    let text: String = pieces.iter().map(|(_, p)| String::from_utf8_lossy(p)).collect();
    assert_eq!(text.matches("data:").count(), 5, "five events: {text:?}");
    let spread = pieces.last().map(|(t, _)| *t).zip(pieces.first().map(|(t, _)| *t)).map(|(l, f)| l - f);
    assert!(spread.is_some_and(|d| d >= Duration::from_millis(300)), "streamed as they came, not at once: {spread:?}");

    let mut load = Load::new();
    load.clients(&addr, "/llm/x", 1);
    until_service(&d, "llm", Duration::from_secs(30), |s| s["requests_total"].as_u64().unwrap_or(0) > 10);
    load.clients(&addr, "/llm/x", 24);
    let grown = until_service(&d, "llm", Duration::from_secs(90), |s| s["ready"].as_u64().unwrap_or(0) >= 5);
    assert!(grown["desired"].as_u64().unwrap_or(0) >= 5, "{grown}");

    // A rolling update under the same load: new replicas ready before old ones go.
    let updated = apply(&d, &spec("llm", 1, 6, json!({"env": {"VERSION": "2"}})));
    assert_eq!(updated["outcome"], "updated");
    until_service(&d, "llm", Duration::from_secs(120), |s| {
        let reps = s["replicas"].as_array().cloned().unwrap_or_default();
        s["ready"].as_u64().unwrap_or(0) >= 5 && !reps.is_empty() && reps.iter().all(|r| r["generation"] == 2)
    });
    let (ok, failed, errors) = load.stop();
    assert_eq!(failed, 0, "{failed} of {} requests failed: {:?}", ok + failed, &errors[..errors.len().min(5)]);
    assert!(ok > 100, "{ok} requests");

    // Load gone: back to min after the down delay.
    until_service(&d, "llm", Duration::from_secs(90), |s| {
        s["desired"] == 1 && s["replicas"].as_array().is_some_and(|r| r.len() == 1)
    });
    let metrics = d.text("/metrics").1;
    assert!(metrics.contains("gpool_service_requests_total{service=\"llm\"}"), "{metrics}");
    assert!(metrics.contains("gpool_service_request_duration_seconds_bucket{service=\"llm\",le=\"0.075\"}"));

    // From zero: a service at min 0 with no load has no replica; the first request waits for one and succeeds.
    apply(&d, &spec("cold", 0, 2, json!({})));
    assert_eq!(service(&d, "cold")["desired"], 0);
    let t0 = Instant::now();
    let mut c = None;
    assert_eq!(get(&mut c, &addr, "/cold/first").expect("cold start"), 200);
    eprintln!("cold start through the proxy: {:?}", t0.elapsed());
    until_service(&d, "cold", Duration::from_secs(60), |s| {
        s["desired"] == 0 && s["replicas"].as_array().is_some_and(Vec::is_empty)
    });
    let (code, _, _) = d.cli_code(&["services", "delete", "cold"]);
    assert_eq!(code, Some(0));
    let mut c = None;
    assert_eq!(get(&mut c, &addr, "/cold/x").expect("answer"), 404, "a deleted service is unknown to the proxy");
}

#[test]
fn a_growing_service_preempts_a_preemptible_batch_job_which_resumes_when_load_falls() {
    let s = Scratch::new("services-preempt");
    let d = Daemon::start(&s.0, "2xA100-80GB", &["--proxy-listen", "127.0.0.1:0"]);
    let batch = d.submit(json!({
        "name": "train", "command": ["sh", "-c", "trap 'echo got TERM; exit 143' TERM; while true; do sleep 0.1; done"],
        "resources": {"nvidia.com/gpu": 1}, "preemptible": true, "priority": "low", "gracePeriod": "5s",
    }));
    d.until(&format!("/api/v1/jobs/{batch}"), Duration::from_secs(30), |j| j["state"] == "running");
    let created = apply(&d, &spec("chat", 1, 2, json!({})));
    let addr = proxy_addr(created["endpoint"].as_str().expect("endpoint"));
    until_service(&d, "chat", Duration::from_secs(60), |s| s["ready"] == 1);
    let mut load = Load::new();
    load.clients(&addr, "/chat/x", 12);
    until_service(&d, "chat", Duration::from_secs(90), |s| s["ready"] == 2);
    let j = d.job(batch);
    assert_ne!(j["state"], "running", "the batch job gave its GPU to the service: {j}");
    // Its grace signal, before the kill (its log is complete once it has stopped).
    d.until(&format!("/api/v1/jobs/{batch}"), Duration::from_secs(30), |j| j["state"] == "pending");
    let (_, log, _) = d.cli(&["logs", &batch.to_string()]);
    assert!(log.contains("got TERM"), "it had its grace signal: {log}");
    let (_, failed, errors) = load.stop();
    assert_eq!(failed, 0, "{:?}", &errors[..errors.len().min(5)]);
    // Load gone: the service gives the GPU back and the batch job runs again.
    d.until(&format!("/api/v1/jobs/{batch}"), Duration::from_secs(90), |j| j["state"] == "running");
    assert_eq!(service(&d, "chat")["desired"], 1);
}

/// Issue 46: the proxy has a header timeout and a connection cap of its own.
/// A thousand requests left half-sent at it neither take the daemon's
/// descriptors nor stop the API or the proxy's other clients being
/// answered, and each is closed once its header timeout passes.
#[test]
fn a_thousand_half_sent_requests_leave_the_proxy_and_the_api_answering() {
    let s = Scratch::new("services-half-sent");
    let d = Daemon::start(&s.0, "1xA100-80GB", &["--proxy-listen", "127.0.0.1:0", "--http-header-timeout", "2s"]);
    let created = apply(&d, &spec("echo", 1, 1, json!({})));
    let addr = proxy_addr(created["endpoint"].as_str().expect("endpoint"));
    until_service(&d, "echo", Duration::from_secs(60), |s| s["ready"] == 1);
    let mut held = Vec::new();
    for _ in 0..1_000 {
        let mut c = TcpStream::connect(&addr).expect("connect to the proxy");
        c.write_all(b"GET /echo/health HTTP/1.1\r\nHost: x\r\n").expect("half a request");
        held.push(c);
    }
    assert_eq!(d.text("/healthz").0, 200, "the API answers");
    let mut conn = None;
    assert_eq!(get(&mut conn, &addr, "/echo/health").expect("the proxy answers another client"), 200);
    let mut half = held.pop().expect("one");
    half.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut rest = Vec::new();
    let closed = half.read_to_end(&mut rest);
    assert!(closed.is_ok(), "a half-sent request is closed at the header timeout: {closed:?}");
}
