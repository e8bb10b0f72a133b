//! Issue 11, failure 5: idle and half-sent connections must not make the
//! API unreachable nor job starts fail. The daemon starts under the common
//! soft limit of 1,024 open files; the test holds 1,100 connections open,
//! some silent, some with half a request.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Daemon, Scratch};
use serde_json::json;

#[test]
fn a_thousand_idle_connections_neither_block_the_api_nor_fail_job_starts() {
    // This test process needs its own 1,100 descriptors.
    let limit = gpool_daemon::wiring::raise_open_file_limit();
    assert!(limit.is_none_or(|n| n >= 2_400), "the test needs 2,400 open files, the hard limit is {limit:?}");
    let scratch = Scratch::new("fd-limit");
    let d = Daemon::spawn_with_file_limit(
        &scratch.0,
        &["--simulate-gpus", "2xH100-80GB", "--http-header-timeout", "2s"],
        1_024,
    );
    let addr = d.url.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for i in 0..1_100 {
        let mut c = TcpStream::connect(&addr).expect("connect");
        if i % 2 == 0 {
            // Half a request head, never finished.
            let _ = c.write_all(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n");
        }
        held.push(c);
    }
    // The API answers and jobs start while all of them are open.
    let ids: Vec<u64> =
        (0..10).map(|_| d.submit(json!({"command": ["true"], "resources": {"nvidia.com/gpu": 1}}))).collect();
    d.wait_ended(&ids, Duration::from_secs(60));
    for id in ids {
        let j = d.job(id);
        assert_eq!(j["state"], "succeeded", "job {id}: {j}");
    }
    // A silent connection is closed at the header timeout (bounded wait: 30 s).
    let mut silent = held.pop().expect("a connection");
    silent.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut rest = Vec::new();
    let closed = silent.read_to_end(&mut rest);
    assert!(
        closed.is_ok(),
        "the server closes a connection that sends no request within its header timeout: {closed:?}"
    );
}

/// Issue 11, failure 4 (in part): jobs that write a lot of output filled the
/// data directory. A replica's log now stops at its limit with a marker,
/// and the job itself runs to its end.
#[test]
fn a_log_stops_at_its_limit_and_the_job_still_succeeds() {
    let scratch = Scratch::new("log-limit");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &["--log-limit", "100Ki"]);
    let id = d.submit(json!({
        "command": "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo to-stderr >&2; echo done",
        "resources": {"nvidia.com/gpu": 1},
    }));
    d.wait_ended(&[id], Duration::from_secs(60));
    assert_eq!(d.job(id)["state"], "succeeded", "{}", d.job(id));
    let out = std::fs::read_to_string(scratch.0.join(format!("jobs/{id}/rank0.out"))).expect("stdout log");
    assert!(out.len() <= 100 * 1024 + 200, "the log holds at most its limit and a marker: {} bytes", out.len());
    assert!(out.contains("reached its limit of 102400 bytes"), "one marker says why it stops");
    assert!(!out.contains("done"), "what came after the limit is gone");
    let err = std::fs::read_to_string(scratch.0.join(format!("jobs/{id}/rank0.err"))).expect("stderr log");
    assert_eq!(err.trim(), "to-stderr", "each stream has its own limit");
}
