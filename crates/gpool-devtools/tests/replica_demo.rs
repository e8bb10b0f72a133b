//! `gpool-devtools replica-demo` on its own: it answers /health at once,
//! anything else with the job that answered, and /stream with five events.
//! (The services and promtool tests of gpool-cli run it as a service's
//! replicas; the chaos test runs the suite: both through `common::devtools`.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One request on a new connection (`Connection: close`); the whole answer.
fn get(port: u16, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => panic!("replica-demo never listened on {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
    let mut answer = String::new();
    BufReader::new(conn).read_to_string(&mut answer).expect("read");
    answer
}

#[test]
fn the_replica_demo_answers_health_requests_and_streams() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpool-devtools"))
        .args(["replica-demo", "--bind", "127.0.0.1", "--delay", "0", "--port", &port.to_string()])
        .env("GPOOL_JOB_ID", "42")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpool-devtools replica-demo");
    let mut said = String::new();
    BufReader::new(child.stderr.take().expect("stderr")).read_line(&mut said).expect("its first line");
    let _demo = Demo(child);
    assert!(said.contains("job 42 listening on 127.0.0.1"), "{said}");
    let health = get(port, "/health");
    assert!(health.starts_with("HTTP/1.1 200 OK") && health.ends_with("job 42 answered GET /health\n"), "{health}");
    let other = get(port, "/v1/x");
    assert!(other.ends_with("job 42 answered GET /v1/x\n"), "{other}");
    let stream = get(port, "/stream");
    assert!(stream.contains("text/event-stream"), "{stream}");
    assert_eq!(stream.matches("data: event").count(), 5, "{stream}");
}
