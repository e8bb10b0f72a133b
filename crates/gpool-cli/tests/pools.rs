//! End-to-end tests of elastic node pools: `gpool serve --pools` with the
//! `local` provider (real `gpool agent --simulate-gpus` processes made and
//! stopped by `gpool local-node`), and `command` providers that fail or
//! whose nodes never register.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Kills whatever agents the local provider left, at drop (a test ending with nodes up, or failing).
struct Agents<'a>(&'a Path);

impl Drop for Agents<'_> {
    fn drop(&mut self) {
        // The provider's agents run with their data under SCRATCH/data/pools/nodes. A
        // `local-node create` the daemon started just before it stopped may spawn one
        // late: kill every such agent until none has appeared for a second (at most 10 s).
        let pattern = self.0.join("data/pools/nodes").display().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut quiet_since = std::time::Instant::now();
        while std::time::Instant::now() < deadline && quiet_since.elapsed() < Duration::from_secs(1) {
            let found =
                std::process::Command::new("pkill").args(["-9", "-f", &pattern]).status().is_ok_and(|s| s.success());
            if found {
                quiet_since = std::time::Instant::now();
            }
            std::thread::sleep(Duration::from_millis(100));
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

    // Each job is charged at the pool's price for the GPU time it held; any grouping adds up to the total.
    let report = |by: &str| -> Value {
        let (ok, out, err) = d.cli(&["cost", "--by", by, "--since", "1d", "-o", "json"]);
        assert!(ok, "{err}");
        serde_json::from_str(&out).expect("JSON")
    };
    let by_job = report("job");
    let rows = by_job["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{by_job}");
    let total = by_job["total_dollars"].as_f64().expect("total");
    assert!(total > 0.0, "{by_job}");
    let sum: f64 = rows.iter().filter_map(|r| r["dollars"].as_f64()).sum();
    assert!((sum - total).abs() < 0.001, "{by_job}");
    for r in rows {
        let (dollars, hours) = (r["dollars"].as_f64().expect("$"), r["gpu_hours"].as_f64().expect("h"));
        assert!((dollars - hours * 24.58 / 2.0).abs() < 0.001, "priced at the pool's $12.29 per GPU-hour: {r}");
    }
    let by_pool = report("pool");
    assert_eq!(by_pool["rows"][0]["key"], "od", "{by_pool}");
    assert!((by_pool["total_dollars"].as_f64().expect("total") - total).abs() < 0.001);
    let (_, metrics) = d.text("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpool_cost_dollars_total{") && l.contains(",queue=\"default\",pool=\"od\"}")),
        "{metrics}"
    );
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

#[test]
fn a_spot_notice_checkpoints_the_job_which_resumes_on_another_node() {
    let s = Scratch::new("pools-spot");
    let _agents = Agents(&s.0);
    let file = s.0.join("pools.yaml");
    std::fs::write(
        &file,
        "pools:\n  - {name: spot, kind: spot, gpus: 1, model: H100-80GB, cpus: 4, memoryGb: 16, min: 2, max: 2, provider: {local: {}}}\n",
    )
    .expect("pools file");
    let ckpt = s.0.join("shared-checkpoints");
    std::fs::create_dir_all(&ckpt).expect("checkpoint root");
    let data = s.0.join("data");
    std::fs::create_dir_all(&data).expect("data");
    // The agents the local provider starts inherit the shared checkpoint root.
    let d = {
        let mut cmd = std::process::Command::new(BIN);
        cmd.env("GPOOL_CHECKPOINT_ROOT", &ckpt);
        Daemon::serve_with(&data, &["--pools", file.to_str().expect("path")], cmd)
    };
    d.until("/api/v1/nodes", Duration::from_secs(60), |v| {
        v.as_array().is_some_and(|n| n.iter().filter(|x| x["state"] == "up").count() == 2)
    });
    let script = r#"c=$(cat "$GPOOL_CHECKPOINT_DIR/count" 2>/dev/null || echo 0); start=$c
trap 'echo "checkpointed at $c"; exit 143' TERM
while [ "$c" -lt 60 ]; do c=$((c+1)); echo "$c" > "$GPOOL_CHECKPOINT_DIR/count"; sleep 0.1; done
echo "done: $c, resumed from $start on $GPOOL_NODE""#;
    let id =
        d.submit(json!({"command": ["sh", "-c", script], "resources": {"nvidia.com/gpu": 1}, "preemptible": true}));
    let running = d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] == "running");
    let first = running["replicas"][0]["node"].as_str().expect("its node").to_string();
    let count = ckpt.join(format!("job-{id}/count"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&count).ok().and_then(|c| c.trim().parse::<u32>().ok()).unwrap_or(0) < 10 {
        assert!(std::time::Instant::now() < deadline, "the job never checkpointed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, out, err) = d.cli(&["nodes", "notice", &first, "--in", "20s"]);
    assert!(ok && out.contains("draining"), "{out}{err}");

    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["attempt"], 2, "{job}");
    let second = job["replicas"][0]["node"].as_str().expect("node").to_string();
    assert_ne!(second, first, "it resumed on the other node");
    let (_, logs, _) = d.cli(&["logs", &id.to_string()]);
    assert!(logs.contains("checkpointed at"), "it stopped by itself within the notice: {logs}");
    let resumed: u32 = logs
        .lines()
        .find_map(|l| l.split("resumed from ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a line saying where it resumed from");
    assert!(resumed >= 10, "it resumed from its checkpoint, not from scratch: {logs}");
    assert!(logs.contains("done: 60"), "{logs}");
    // A notice from someone who may not give one is refused.
    let user = d.token_for("alice");
    let (code, _) = d.req("POST", &format!("/api/v1/nodes/{second}/notice"), &user, Some(&json!({"in": "2m"})));
    assert_eq!(code, 403);
    let (code, v) = d.req("POST", &format!("/api/v1/nodes/{second}/notice"), &d.token, Some(&json!({"in": "soon"})));
    assert!(code == 400 && v.to_string().contains("in:"), "{v}");
}

#[test]
fn a_team_over_its_hard_budget_has_its_next_job_held_with_the_reason() {
    let s = Scratch::new("pools-budget");
    let budgets = s.0.join("budgets.yaml");
    std::fs::write(&budgets, "- {team: admin, dollarsPerMonth: 50, mode: hard, alertAt: [50, 100]}\n")
        .expect("budgets");
    let data = s.0.join("data");
    // $100 a GPU-second: one second of one GPU spends the month's $50.
    let d = Daemon::start(
        &data,
        "1xH100-80GB",
        &["--budgets", budgets.to_str().expect("path"), "--gpu-price", "H100-80GB=360000"],
    );
    let first = d.submit(json!({"command": ["sh", "-c", "sleep 1"], "resources": {"nvidia.com/gpu": 1}}));
    d.wait_ended(&[first], Duration::from_secs(30));
    let cost = d.job(first);
    assert_eq!(cost["state"], "succeeded", "{cost}");
    let second = d.submit(json!({"command": ["true"], "resources": {"nvidia.com/gpu": 1}}));
    let held = d.until(&format!("/api/v1/jobs/{second}"), Duration::from_secs(10), |j| {
        j["reason"].as_str().is_some_and(|r| r.contains("over its hard budget"))
    });
    assert_eq!(held["state"], "pending", "{held}");
    let reason = held["reason"].as_str().expect("reason");
    assert!(reason.contains("team admin") && reason.contains("of $50.00 this month"), "{reason}");
    let seen = events_until(&d, Duration::from_secs(10), |e| count(e, "budget_hold") == 1);
    let alerts = messages(&seen, "budget_alert");
    assert!(alerts.iter().any(|m| m.contains("(100%)") && m.contains("wait until next month")), "{alerts:?}");
    let (ok, out, _) = d.cli(&["show", &second.to_string()]);
    assert!(ok && out.contains("over its hard budget"), "{out}");
    // `gpool budgets` shows the spend, the share used and the job it holds.
    let (ok, out, err) = d.cli(&["budgets", "-o", "json"]);
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("json");
    let b = &list[0];
    assert!(b["scope"] == "team" && b["name"] == "admin" && b["mode"] == "hard", "{b}");
    assert!(
        b["spent_usd"].as_f64().is_some_and(|x| x >= 50.0) && b["percent"].as_f64().is_some_and(|p| p >= 100.0),
        "{b}"
    );
    assert_eq!(b["held_jobs"], 1, "{b}");
    let (ok, out, _) = d.cli(&["budgets"]);
    assert!(ok && out.contains("team admin") && out.contains("hard"), "{out}");
    // An invalid budgets file says what is wrong.
    std::fs::write(&budgets, "- {team: a, queue: b, dollarsPerMonth: 5}\n").expect("budgets");
    let (code, _, err) = gpool(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            s.0.join("d2").to_str().expect("p"),
            "--budgets",
            budgets.to_str().expect("p"),
        ],
        &[],
    );
    assert!(code != Some(0) && err.contains("give either team or queue"), "{err}");
}

#[test]
fn a_job_whose_gpus_stay_idle_is_stopped_where_its_queue_says_so_unless_it_opts_out() {
    let s = Scratch::new("pools-idle");
    let rules = s.0.join("rules.yaml");
    std::fs::write(
        &rules,
        "- {name: AllocatedGpuIdle, scope: allocated_gpu, metric: gpu_util, below: 5, for: 300ms, severity: warning}\n",
    )
    .expect("rules");
    let queues = s.0.join("queues.yaml");
    std::fs::write(&queues, "- {name: default, idle: stop}\n").expect("queues");
    let d = Daemon::start(
        &s.0.join("data"),
        "2xH100-80GB",
        &[
            "--sample-interval",
            "100ms",
            "--alert-rules",
            rules.to_str().expect("path"),
            "--queues",
            queues.to_str().expect("path"),
        ],
    );
    // Simulated GPUs of jobs that declare no load are idle.
    let idle = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    let kept = d.submit(json!({
        "command": "sleep 600", "resources": {"nvidia.com/gpu": 1}, "labels": {"gpool.io/idle": "keep"}
    }));
    let seen = events_until(&d, Duration::from_secs(30), |e| {
        e.iter().any(|x| x["kind"] == "cancelled" && x["job"].as_u64() == Some(idle))
            && e.iter().any(|x| x["kind"] == "idle_warning" && x["job"].as_u64() == Some(kept))
    });
    assert!(messages(&seen, "idle_stop").iter().any(|m| m.contains(&format!("job {idle}"))), "{seen:?}");
    let stopped = d.job(idle);
    assert_eq!(stopped["state"], "cancelled", "{stopped}");
    assert!(stopped["reason"].as_str().is_some_and(|r| r.contains("idle policy")), "{stopped}");
    assert_eq!(d.job(kept)["state"], "running", "it opted out: warned, not stopped");
    // What the idle GPUs cost is counted as paid and wasted.
    let (_, metrics) = d.text("/metrics");
    let wasted: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("gpool_idle_allocated_cost_dollars_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum();
    assert!(wasted > 0.0, "{metrics}");
    let (ok, _, err) = d.cli(&["cancel", &kept.to_string()]);
    assert!(ok, "{err}");
}
