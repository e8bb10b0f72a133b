//! Issue 12, TLS: a control plane with `--tls` speaks only HTTPS with a
//! certificate of its own CA; the CLI trusts the local daemon's CA; an
//! agent pinned to the CA's fingerprint joins and runs a job, and an agent
//! pinned to another fingerprint refuses the server.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Daemon, Scratch, gpool};
use serde_json::json;

#[test]
fn an_agent_joins_over_tls_by_the_ca_fingerprint_and_refuses_another() {
    let s = Scratch::new("tls");
    let data = s.0.join("data");
    let d = Daemon::start(&data, "1xH100-80GB", &["--tls"]);
    assert!(d.url.starts_with("https://"), "{}", d.url);
    let ca = std::fs::read_to_string(data.join("tls/ca.pem")).expect("the CA made on first start");
    assert!(ca.contains("BEGIN CERTIFICATE"));

    // The CLI finds the local daemon's CA by itself; plain HTTP gets nothing.
    let (code, out, err) = gpool(&["nodes", "--data-dir", data.to_str().expect("utf-8")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let plain = d.url.replacen("https://", "http://", 1);
    let (code, _, err) = gpool(&["nodes", "--server", &plain, "--token", &d.token], &[]);
    assert_eq!(code, Some(5), "plain HTTP to a TLS port: {err}");

    // The fingerprint the daemon printed is the CA's.
    let pin = {
        use sha2::Digest;
        let cert = ureq::tls::Certificate::from_pem(ca.as_bytes()).expect("PEM");
        format!("sha256:{}", sha2::Sha256::digest(cert.der()).iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    let (st, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": "far", "role": "node"})));
    assert_eq!(st, 201, "{v}");
    let token_file = s.0.join("far.token");
    std::fs::write(&token_file, v["token"].as_str().expect("token")).expect("write");
    let agent = |pin: &str, dir: &str| {
        Command::new(BIN)
            .args(["agent", "--server", &d.url, "--ca-fingerprint", pin, "--node-name", "far"])
            .args(["--simulate-gpus", "1xH100-80GB", "--label", "where=far", "--run-as", "daemon", "--data-dir"])
            .arg(s.0.join(dir))
            .arg("--token-file")
            .arg(&token_file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpool agent")
    };

    // Pinned to another CA: it refuses the server and exits.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let out = agent(&wrong, "wrong").wait_with_output().expect("the agent exits");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("refusing"), "{err}");

    // Issue 47: pinned, it refuses plain HTTP outright, even to an address that
    // serves the real CA (an impostor could): the token never leaves.
    let out = Command::new(BIN)
        .args(["agent", "--server", &plain, "--ca-fingerprint", &pin, "--node-name", "far", "--data-dir"])
        .arg(s.0.join("plain"))
        .arg("--token-file")
        .arg(&token_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("the agent exits");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("must be https://"), "{err}");

    // Pinned to this CA: it joins, and a job runs on it.
    let mut good = agent(&pin, "good");
    d.until("/api/v1/nodes", Duration::from_secs(30), |n| {
        n.as_array().is_some_and(|n| n.iter().any(|x| x["name"] == "far" && x["state"] == "up"))
    });
    let id = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 1}, "nodeSelector": {"where": "far"}}));
    d.wait_ended(&[id], Duration::from_secs(60));
    assert_eq!(d.job(id)["state"], "succeeded", "{}", d.job(id));
    let _ = good.kill();
    let _ = good.wait();
}

/// A standby of a control plane with `--tls` answers `503 standby` in TLS
/// too: `gpool ping` (the container image's health check) tells it from a
/// dead port, and exits 0 while both answer.
#[test]
fn a_standby_answers_in_tls_and_gpool_ping_tells_it_from_the_leader() {
    let s = Scratch::new("tls-standby");
    let db = format!("sqlite://{}", s.0.join("state.db").display());
    let tls = s.0.join("tls");
    let tls_arg = tls.to_str().expect("path");
    let mut cmd = Command::new(BIN);
    cmd.env("GPOOL_DB", &db);
    let leader = Daemon::serve_with(&s.0.join("a"), &["--tls", "--tls-dir", tls_arg], cmd);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let mut standby = Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--tls", "--tls-dir", tls_arg, "--data-dir"])
        .arg(s.0.join("b"))
        .env("GPOOL_DB", &db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a second control plane");
    let servers = format!("{},https://127.0.0.1:{port}", leader.url);
    let ca = tls.join("ca.pem");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let said = loop {
        let (code, out, err) =
            gpool(&["ping", "--server", &servers, "--ca-file", ca.to_str().expect("path"), "-o", "json"], &[]);
        if code == Some(0) && out.contains("\"standby\"") {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "the standby never answered as one: {out}{err}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let rows: serde_json::Value = serde_json::from_str(&said).expect("json");
    assert_eq!(rows[0]["state"], "up", "{said}");
    assert_eq!(rows[1]["state"], "standby", "{said}");
    let _ = standby.kill();
    let _ = standby.wait();
    // A dead port is down, and ping says so with its exit status.
    let (code, out, _) = gpool(
        &["ping", "--server", &format!("https://127.0.0.1:{port}"), "--ca-file", ca.to_str().expect("path")],
        &[],
    );
    assert_eq!(code, Some(5), "{out}");
    assert!(out.contains("down"), "{out}");
}
