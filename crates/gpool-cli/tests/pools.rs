//! End-to-end tests of elastic node pools: `gpool serve --pools` with the
//! `local` provider (real `gpool agent --simulate-gpus` processes made and
//! stopped by `gpool local-node`), and `command` providers that fail or
//! whose nodes never register.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Kills whatever agents the local provider left (a failed test), at drop.
struct Agents<'a>(&'a Path);

impl Drop for Agents<'_> {
    fn drop(&mut self) {
        let Ok(dirs) = std::fs::read_dir(self.0.join("pools/nodes")) else { return };
        for d in dirs.flatten() {
            if let Ok(pid) = std::fs::read_to_string(d.path().join("pid")) {
                let _ = std::process::Command::new("kill").args(["-9", &format!("-{}", pid.trim())]).status();
            }
        }
    }
}

/// The events from the start until `enough` says so (read from the event stream).
fn events_until(d: &Daemon, limit: Duration, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    d.read_events("/api/v1/events?after=0", limit, |e| {
        seen.push(e);
        enough(&seen)
    });
    seen
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["kind"] == kind).count()
}

fn messages(events: &[Value], kind: &str) -> Vec<String> {
    events.iter().filter(|e| e["kind"] == kind).filter_map(|e| e["message"].as_str().map(str::to_string)).collect()
}

fn pool(d: &Daemon, name: &str) -> Value {
    d.get("/api/v1/pools").as_array().and_then(|ps| ps.iter().find(|p| p["name"] == name).cloned()).expect("pool")
}

#[test]
fn a_burst_gets_nodes_a_gang_whole_and_they_go_after_the_idle_time() {
    let s = Scratch::new("pools-burst");
    let _agents = Agents(&s.0);
    let file = s.0.join("pools.yaml");
    std::fs::write(
        &file,
        "pools:\n  - {name: od, gpus: 2, model: H100-80GB, cpus: 8, memoryGb: 32, max: 4, idleTimeout: 3s, bootTimeout: 60s, provider: {local: {}}}\n",
    )
    .expect("pools file");
    let data = s.0.join("data");
    let d = Daemon::serve(&data, &["--pools", file.to_str().expect("path")]);
    assert_eq!(pool(&d, "od")["nodes"], 0, "an elastic pool starts empty");

    // A 2-node gang and two 1-GPU jobs: three nodes (the small jobs share one).
    let gang = d.submit(json!({
        "command": ["sh", "-c", "echo rank $RANK of $WORLD_SIZE on $GPOOL_NODE"],
        "resources": {"nvidia.com/gpu": 2}, "replicas": 2
    }));
    let small: Vec<u64> = (0..2)
        .map(|_| d.submit(json!({"command": ["sh", "-c", "sleep 1"], "resources": {"nvidia.com/gpu": 1}})))
        .collect();
    let mut all = vec![gang];
    all.extend(&small);
    d.wait_ended(&all, Duration::from_secs(90));
    for id in &all {
        assert_eq!(d.job(*id)["state"], "succeeded", "job {id}: {}", d.job(*id));
    }
    // Idle for 3 s: every node is deleted, its agent stopped, its token revoked.
    let seen = events_until(&d, Duration::from_secs(60), |e| count(e, "node_deleted") == 3);
    let created = messages(&seen, "node_create");
    assert_eq!(created.len(), 3, "{created:?}");
    assert!(created.iter().filter(|m| m.contains(&format!("job(s) {gang}"))).count() == 2, "{created:?}");
    let gang_nodes: std::collections::BTreeSet<String> = d.job(gang)["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|r| r["node"].as_str().map(str::to_string))
        .collect();
    assert_eq!(gang_nodes.len(), 2, "the gang spans two new nodes");

    let p = d.get("/api/v1/pools");
    assert_eq!((p[0]["nodes"].as_u64(), p[0]["creating"].as_u64()), (Some(0), Some(0)), "{p}");
    let left = std::fs::read_dir(data.join("pools/nodes")).map(|r| r.count()).unwrap_or(0);
    assert_eq!(left, 0, "the local provider removed its nodes' directories");
    let nodes = d.get("/api/v1/nodes");
    assert_eq!(nodes.as_array().map_or(0, Vec::len), 0, "deleted nodes are forgotten: {nodes}");
    let (ok, out, _) = d.cli(&["pools"]);
    assert!(ok && out.contains("od") && out.contains("0-4"), "{out}");
}

#[test]
fn failing_and_silent_pools_are_retried_then_their_jobs_fall_back_to_the_next_pool() {
    let s = Scratch::new("pools-fallback");
    let _agents = Agents(&s.0);
    let file = s.0.join("pools.yaml");
    // The cheapest pool's create fails; the next one's succeeds but its nodes
    // never register (a machine that does not boot); the dearest works.
    std::fs::write(
        &file,
        "pools:\n\
         \x20 - {name: broken, gpus: 1, model: H100-80GB, price: 1, max: 4, retry: {backoff: 200ms}, provider: {command: {create: [sh, -c, 'echo no capacity in zone a >&2; exit 1'], delete: ['true'], timeout: 10s}}}\n\
         \x20 - {name: silent, gpus: 1, model: H100-80GB, price: 2, max: 4, bootTimeout: 2s, retry: {backoff: 200ms}, provider: {command: {create: ['true'], delete: ['true'], timeout: 10s}}}\n\
         \x20 - {name: works, gpus: 1, model: H100-80GB, cpus: 4, memoryGb: 16, price: 3, max: 4, idleTimeout: 1h, provider: {local: {}}}\n",
    )
    .expect("pools file");
    let data = s.0.join("data");
    let d = Daemon::serve(&data, &["--pools", file.to_str().expect("path")]);
    let id = d.submit(json!({"command": ["sh", "-c", "echo done"], "resources": {"nvidia.com/gpu": 1}}));
    d.wait_ended(&[id], Duration::from_secs(90));
    let job = d.job(id);
    assert_eq!(job["state"], "succeeded", "{job}");
    assert!(job["replicas"][0]["node"].as_str().is_some_and(|n| n.starts_with("works-")), "{job}");

    let seen = events_until(&d, Duration::from_secs(10), |e| {
        e.iter().any(|x| x["kind"] == "succeeded" && x["job"].as_u64() == Some(id))
    });
    let failed = messages(&seen, "node_create_failed");
    assert_eq!(failed.len(), 2, "tried twice, then unavailable: {failed:?}");
    assert!(failed.iter().all(|m| m.contains("no capacity in zone a")), "the program's own words: {failed:?}");
    let timed_out: Vec<String> =
        messages(&seen, "node_delete").into_iter().filter(|m| m.contains("boot timeout")).collect();
    assert_eq!(timed_out.len(), 2, "{timed_out:?}");
    for name in ["broken", "silent"] {
        let p = pool(&d, name);
        assert_eq!(p["available"], false, "{p}");
        assert_eq!(p["failures"], 2, "{p}");
    }
    let (ok, out, _) = d.cli(&["pools"]);
    assert!(ok && out.contains("unavailable after 2 failures"), "{out}");
    let (ok, out, _) = d.cli(&["pools", "-o", "json"]);
    assert!(ok && serde_json::from_str::<Value>(&out).is_ok_and(|v| v.as_array().map(Vec::len) == Some(3)), "{out}");
}
