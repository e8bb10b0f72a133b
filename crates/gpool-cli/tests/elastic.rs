//! Issue 41, end to end on the real daemon: an elastic job
//! (`--replicas 2:8`) on 8 simulated GPUs starts with 8 replicas, shrinks
//! to 4 for a 4-GPU job of a higher class (never preempted whole: it never
//! shows 0 running replicas), and grows back to 8 when that job ends. Every
//! incarnation's ranks read the `WORLD_SIZE` they ran at.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn id_of(out: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(out).expect("json")["ids"][0].as_u64().expect("an id")
}

/// Polls `gpool show ID -o json` until `done` holds, returning the fewest
/// running replicas seen while the job was running or stopping.
fn watch(d: &Daemon, id: u64, limit: Duration, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> u64 {
    let deadline = Instant::now() + limit;
    let mut fewest = u64::MAX;
    loop {
        let (ok, out, err) = d.cli(&["show", &id.to_string(), "-o", "json"]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        let job = if v.is_array() { v[0].clone() } else { v };
        if matches!(job["state"].as_str(), Some("running" | "stopping")) {
            fewest = fewest.min(job["running_replicas"].as_u64().unwrap_or(0));
        }
        if done(&job) {
            return fewest;
        }
        assert!(Instant::now() < deadline, "{what} within {limit:?}: {job}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the job's ranks have printed `want` start lines in all (its
/// processes run: a stop before that would find no handler installed yet).
fn started_lines(d: &Daemon, id: u64, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, logs, _) = d.cli(&["logs", "--all-ranks", &id.to_string()]);
        let n = logs.lines().filter(|l| l.contains(" size=")).count();
        if n >= want {
            return;
        }
        assert!(Instant::now() < deadline, "{n} of {want} ranks started: {logs}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_elastic_job_shrinks_instead_of_being_preempted_and_grows_back() {
    let s = Scratch::new("elastic-jobs");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    // The example that checkpoints at each stop and resumes at the new size (examples/elastic, docs/elastic.md).
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/elastic/checkpoint_demo.py");
    let ckpt = s.0.join("ckpt");
    std::fs::create_dir_all(&ckpt).expect("checkpoint dir");
    let ckpt = ckpt.display().to_string();
    let (ok, out, err) = d.cli(&[
        "submit",
        "--replicas",
        "2:8",
        "--gpus",
        "1",
        "--preemptible",
        "-p",
        "low",
        "--grace",
        "5s",
        "-o",
        "json",
        "--",
        "python3",
        demo,
        &ckpt,
    ]);
    assert!(ok, "{err}");
    let e = id_of(&out);
    watch(&d, e, Duration::from_secs(30), "8 running replicas", |j| j["running_replicas"] == 8);
    started_lines(&d, e, 8);
    // Some progress saved first (every 10 steps), so that the next size has a step to resume from.
    let saved = std::path::Path::new(&ckpt).join("checkpoint.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&saved).is_ok_and(|t| !t.contains("\"step\": 0")) {
        assert!(Instant::now() < deadline, "the first size never checkpointed");
        std::thread::sleep(Duration::from_millis(100));
    }

    let (ok, out, err) = d.cli(&["submit", "--gpus", "4", "-p", "high", "-o", "json", "--", "sleep", "3"]);
    assert!(ok, "{err}");
    let high = id_of(&out);
    let fewest =
        watch(&d, e, Duration::from_secs(30), "shrunk to 4", |j| j["state"] == "running" && j["running_replicas"] == 4);
    assert!(fewest > 0, "never 0 running replicas: it was not preempted whole");
    started_lines(&d, e, 12);
    assert_ne!(d.job(high)["state"], "pending", "the 4-GPU job runs");

    d.wait_ended(&[high], Duration::from_secs(60));
    let ended = Instant::now();
    let fewest =
        watch(&d, e, Duration::from_secs(60), "back to 8", |j| j["state"] == "running" && j["running_replicas"] == 8);
    assert!(fewest > 0, "never 0 running replicas while it grew");
    started_lines(&d, e, 20);
    assert!(ended.elapsed() < Duration::from_secs(60));

    let job = d.job(e);
    let sizes: Vec<(u64, u64)> = job["resizes"]
        .as_array()
        .expect("resizes")
        .iter()
        .map(|r| (r["from"].as_u64().unwrap_or(0), r["to"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(sizes, [(8, 4), (4, 8)], "{job}");
    let (ok, shown, _) = d.cli(&["show", &e.to_string()]);
    assert!(ok && shown.contains("8 of 2:8 replicas running") && shown.contains("8 → 4"), "{shown}");

    // Every rank of every incarnation was told the size it ran at.
    let (_, logs, err) = d.cli(&["logs", "--all-ranks", &e.to_string()]);
    let mut seen = std::collections::BTreeMap::new();
    // Rank 0's step at the start of each incarnation, in order: each resumes where the last checkpointed.
    let mut resumed = Vec::new();
    for line in logs.lines().filter_map(|l| l.split_once("size=").map(|(_, rest)| rest)) {
        let mut parts = line.split_whitespace();
        let size: u32 = parts.next().and_then(|s| s.parse().ok()).expect("a size");
        let rank: u32 =
            parts.next().and_then(|r| r.strip_prefix("rank=")).and_then(|r| r.parse().ok()).expect("a rank");
        assert!(rank < size, "rank {rank} of a world of {size}: {logs}");
        assert_eq!(parts.next(), Some("nnodes=2:8"));
        let step: u64 =
            parts.next().and_then(|s| s.strip_prefix("step=")).and_then(|s| s.parse().ok()).expect("a step");
        if rank == 0 {
            resumed.push((size, step));
        }
        *seen.entry(size).or_insert(0) += 1;
    }
    assert_eq!(seen, [(4, 4), (8, 16)].into_iter().collect(), "{logs}{err}");
    let sizes: Vec<u32> = resumed.iter().map(|(s, _)| *s).collect();
    assert_eq!(sizes, [8, 4, 8], "{logs}");
    assert!(
        resumed[0].1 == 0 && resumed[1].1 > 0 && resumed[2].1 > resumed[1].1,
        "resumed from checkpoints: {resumed:?}"
    );
    let (ok, _, err) = d.cli(&["cancel", &e.to_string()]);
    assert!(ok, "{err}");
}
