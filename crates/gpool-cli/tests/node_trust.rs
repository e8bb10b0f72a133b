//! Issue 47, end to end: a node token driven by hand against a real
//! `gpool serve` (SQLite), as someone who took over one GPU machine would.
//! A registration no control plane could load is refused and a restarted
//! control plane serves; a node cannot end another node's job nor write its
//! log; revoking a node's token ends its waiting poll at once.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, Scratch};
use gpool_api::agent as wire;
use serde_json::{Value, json};

fn gpus(node: &str, n: u32) -> Vec<wire::GpuWire> {
    (0..n)
        .map(|i| wire::GpuWire {
            kind: "nvidia-gpu".into(),
            index: i,
            uuid: format!("GPU-{node}-{i}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            model: "H100-80GB".into(),
            memory_mb: 81_559,
            pci_bus_id: None,
            nvlink_group: None,
            numa_node: None,
            mig: None,
        })
        .collect()
}

fn registration(node: &str, n: u32) -> Value {
    serde_json::to_value(wire::Register {
        node: node.into(),
        addr: "127.0.0.1".into(),
        cpus: 8.0,
        memory_mb: 64_000,
        labels: Default::default(),
        pool: None,
        source: "by hand".into(),
        degraded: Vec::new(),
        gpus: gpus(node, n),
        gpu_sharing: "off".into(),
        container_runtime: None,
        mig_managed: Vec::new(),
        running: Vec::new(),
        version: "test".into(),
        power_budget_w: None,
        peer_addr: None,
        note: None,
    })
    .expect("json")
}

fn node_token(d: &Daemon, node: &str) -> (String, String) {
    let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": node, "role": "node"})));
    assert_eq!(s, 201, "{v}");
    (v["token"].as_str().expect("token").into(), v["id"].as_str().expect("id").into())
}

fn serve(data: &std::path::Path) -> Daemon {
    Daemon::serve(data, &["--lease", "3s"])
}

#[test]
fn a_registration_no_control_plane_could_load_is_refused_and_a_restart_serves() {
    let s = Scratch::new("node-trust-serve");
    let data = s.0.join("data");
    let token = {
        let d = serve(&data);
        let (token, _) = node_token(&d, "n3");
        let (st, v) = d.req("POST", "/agent/v1/register", &token, Some(&registration("n3", 1)));
        assert_eq!(st, 200, "{v}");
        let (st, v) = d.req("POST", "/agent/v1/register", &token, Some(&registration("n3", 65)));
        assert_eq!(st, 400, "{v}");
        assert!(v.to_string().contains("65 devices"), "{v}");
        token
    };
    let t = Instant::now();
    let d = serve(&data);
    assert!(t.elapsed() < Duration::from_secs(15), "serving again took {:?}", t.elapsed());
    let nodes = d.get("/api/v1/nodes");
    assert_eq!(nodes[0]["name"], "n3", "{nodes}");
    assert_eq!(nodes[0]["devices"].as_array().map(Vec::len), Some(1), "the first registration stands: {nodes}");
    let (st, v) = d.req("POST", "/agent/v1/register", &token, Some(&registration("n3", 1)));
    assert_eq!(st, 200, "the node registers again: {v}");
}

#[test]
fn a_node_cannot_end_another_nodes_job_nor_write_its_log_and_revocation_ends_its_poll_at_once() {
    let s = Scratch::new("node-trust-report");
    let d = serve(&s.0.join("data"));
    let (t1, _) = node_token(&d, "n1");
    let (t3, id3) = node_token(&d, "n3");
    let (st, r1) = d.req("POST", "/agent/v1/register", &t1, Some(&registration("n1", 1)));
    assert_eq!(st, 200, "{r1}");
    let job = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    let (st, r3) = d.req("POST", "/agent/v1/register", &t3, Some(&registration("n3", 0)));
    assert_eq!(st, 200, "{r3}");
    let e3 = r3["epoch"].as_u64().expect("epoch");
    d.until(&format!("/api/v1/jobs/{job}"), Duration::from_secs(10), |j| j["state"] != "pending");

    // n3 says n1's job exited, failed to start, was lost: refused, and the job runs on.
    let replica = wire::ReplicaId { job, attempt: 1, rank: 0 };
    let exit = wire::ExitWire { code: Some(0), signal: None, started_ms: 0, ended_ms: 0, error: None, fenced: false };
    for event in [
        wire::Event::Exited { replica, exit },
        wire::Event::StartFailed { replica, error: "forged".into() },
        wire::Event::Lost { replica, why: "forged".into() },
    ] {
        let report =
            wire::Report { node: "n3".into(), epoch: e3, events: vec![event], telemetry: None, roster_version: 0 };
        let (st, v) = d.req("POST", "/agent/v1/report", &t3, Some(&serde_json::to_value(&report).expect("json")));
        assert_eq!(st, 403, "{v}");
        assert!(v.to_string().contains("runs on node n1"), "{v}");
        let state = d.job(job)["state"].clone();
        assert!(state == "starting" || state == "running", "the job runs on: {state}");
    }
    // Nor its log, nor one for a job that does not exist.
    for path in [
        format!("/agent/v1/logs?job={job}&rank=0&stream=stdout&offset=0"),
        "/agent/v1/logs?job=999&rank=0&stream=stdout&offset=0".to_string(),
    ] {
        let (st, body) = d.raw(&path, &t3, "application/octet-stream", b"injected\n".to_vec());
        assert_eq!(st, 403, "{path}: {body}");
    }

    // Revoking n3's token while it waits on a poll answers the poll within 1 s.
    let url = format!("{}/agent/v1/commands?node=n3&epoch={e3}&after=0", d.url);
    let poller = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let r = agent.get(&url).header("Authorization", format!("Bearer {t3}")).call().expect("the poll");
        (r.status().as_u16(), Instant::now())
    });
    // The poll is parked when the node's outbox is empty; give it a moment to arrive.
    d.until("/api/v1/nodes", Duration::from_secs(5), |n| n.as_array().is_some_and(|a| a.len() == 2));
    std::thread::sleep(Duration::from_millis(300));
    let revoked = Instant::now();
    let (st, v) = d.req("DELETE", &format!("/api/v1/tokens/{id3}"), &d.token, None);
    assert_eq!(st, 200, "{v}");
    let (status, answered) = poller.join().expect("poller");
    assert_eq!(status, 401);
    assert!(answered.duration_since(revoked) < Duration::from_secs(1), "{:?}", answered.duration_since(revoked));
    let nodes = d.get("/api/v1/nodes");
    let n3 = nodes.as_array().and_then(|a| a.iter().find(|n| n["name"] == "n3")).cloned().unwrap_or_default();
    assert_eq!(n3["state"], "down", "{n3}");
}
