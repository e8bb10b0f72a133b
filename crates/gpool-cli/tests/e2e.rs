//! End-to-end tests of `gpool up` with the real binary, real processes and a
//! simulated GPU inventory on loopback: jobs themselves. No two share a GPU,
//! a daemon killed midway loses none, signals and grace periods, replicas and
//! time limits, retries and preemption, recovery after a restart, dependencies.
//! What people meet at the command line and the API is tests/e2e_cli.rs.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// A job that records `<job> <attempt> <devices> <start ns> <end ns>` into `dir`.
fn recording_job(dir: &Path, gpus: u32, sleep: &str) -> Value {
    let cmd = format!(
        "s=$(date +%s%N); sleep {sleep}; e=$(date +%s%N); echo \"$GPOOL_JOB_ID $GPOOL_ATTEMPT $CUDA_VISIBLE_DEVICES $s $e\" > {}/$GPOOL_JOB_ID.$GPOOL_ATTEMPT",
        dir.display()
    );
    json!({"command": cmd, "resources": {"nvidia.com/gpu": gpus}})
}

struct Record {
    job: u64,
    devices: Vec<u32>,
    start: u128,
    end: u128,
}

fn records(dir: &Path) -> Vec<Record> {
    std::fs::read_dir(dir)
        .expect("records dir")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|t| {
            let f: Vec<&str> = t.split_whitespace().collect();
            Some(Record {
                job: f.first()?.parse().ok()?,
                devices: f.get(2)?.split(',').filter_map(|d| d.parse().ok()).collect(),
                start: f.get(3)?.parse().ok()?,
                end: f.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

/// No two records holding the same GPU overlap in time, and no job's records overlap each other.
fn assert_exclusive(recs: &[Record]) {
    let mut by_gpu: BTreeMap<u32, Vec<(u128, u128, u64)>> = BTreeMap::new();
    let mut by_job: BTreeMap<u64, Vec<(u128, u128)>> = BTreeMap::new();
    for r in recs {
        assert!(!r.devices.is_empty(), "job {} saw no CUDA_VISIBLE_DEVICES", r.job);
        for d in &r.devices {
            assert!(*d < 8, "job {} saw GPU {d}", r.job);
            by_gpu.entry(*d).or_default().push((r.start, r.end, r.job));
        }
        by_job.entry(r.job).or_default().push((r.start, r.end));
    }
    for (gpu, mut v) in by_gpu {
        v.sort();
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "GPU {gpu} held by jobs {} and {} at once", w[0].2, w[1].2);
        }
    }
    for (job, mut v) in by_job {
        v.sort();
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "job {job} ran twice at once");
        }
    }
}

fn mixed_jobs(dir: &Path, n: usize) -> Vec<Value> {
    (0..n).map(|i| recording_job(dir, [1, 1, 2, 1, 4, 1, 2, 8][i % 8], ["0.02", "0.05", "0.1"][i % 3])).collect()
}

#[test]
fn two_hundred_jobs_on_eight_gpus_never_share_a_gpu_and_all_complete() {
    let s = Scratch::new("200");
    let out = s.0.join("records");
    std::fs::create_dir_all(&out).expect("dir");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    let ids = d.submit_batch(mixed_jobs(&out, 200));
    assert_eq!(ids.len(), 200);
    d.wait_ended(&ids, Duration::from_secs(300));
    for id in &ids {
        assert_eq!(d.job(*id)["state"], "succeeded", "job {id}");
    }
    let recs = records(&out);
    assert_eq!(recs.len(), 200, "one record per job");
    assert_exclusive(&recs);
}

#[test]
fn kill_9_of_the_daemon_midway_loses_nothing_and_runs_nothing_twice_at_once() {
    let s = Scratch::new("kill9");
    let out = s.0.join("records");
    std::fs::create_dir_all(&out).expect("dir");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "8xH100-80GB", &[]);
    let ids = d.submit_batch(mixed_jobs(&out, 200));
    // Let part of the work happen, then kill the daemon without warning.
    d.wait_ended(&ids[..40], Duration::from_secs(120));
    d.kill9();
    let done_before = records(&out).len();
    assert!(done_before < 200, "the kill must happen midway ({done_before} done)");
    let d = Daemon::start(&data, "8xH100-80GB", &[]);
    d.wait_ended(&ids, Duration::from_secs(300));
    let list = d.get("/api/v1/jobs?limit=1000");
    let jobs = list["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 200, "every acknowledged job is still known");
    for j in jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let recs = records(&out);
    let mut per_job: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &recs {
        *per_job.entry(r.job).or_default() += 1;
    }
    assert_eq!(per_job.len(), 200, "all 200 jobs ran");
    assert_exclusive(&recs);
}

#[test]
fn a_job_that_forks_into_the_background_leaves_no_process_behind() {
    let s = Scratch::new("fork");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let id = d.submit(json!({
        "command": "setsid sleep 1000 & (sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 & echo forked",
        "resources": {"nvidia.com/gpu": 1}
    }));
    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(processes_of(&d.data, Some(id)), Vec::<i32>::new(), "processes of job {id} survived it");
    // And its GPU is free again at once.
    let nodes = d.get("/api/v1/nodes");
    assert!(nodes[0]["devices"].as_array().expect("devices").iter().all(|g| g.get("job").is_none()), "{nodes}");
}

#[test]
fn cancel_sends_the_stop_signal_then_sigkill_after_the_grace_period() {
    let s = Scratch::new("cancel");
    let marker = s.0.join("checkpointed");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let polite = d.submit(json!({
        "command": format!("trap 'echo saved > {}; exit 0' TERM; echo ready; while true; do sleep 0.05; done", marker.display()),
        "resources": {"nvidia.com/gpu": 1},
        "gracePeriod": "20s"
    }));
    let stubborn = d.submit(json!({
        "command": "trap '' TERM; echo ready; while true; do sleep 0.05; done",
        "resources": {"nvidia.com/gpu": 1},
        "gracePeriod": "1s"
    }));
    // Wait until both print "ready" (their traps are installed).
    for id in [polite, stubborn] {
        let (s, log) = d.req("GET", &format!("/api/v1/jobs/{id}/logs?follow=false"), &d.token, None);
        let _ = (s, log);
    }
    wait_for_output(&d, polite, "ready");
    wait_for_output(&d, stubborn, "ready");
    for id in [polite, stubborn] {
        let (s, v) = d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
        assert_eq!(s, 200, "{v}");
    }
    d.wait_ended(&[polite, stubborn], Duration::from_secs(60));
    let p = d.job(polite);
    assert_eq!(p["state"], "cancelled");
    assert_eq!(p["exit"]["code"], 0, "the polite job exited on its own: {p}");
    assert_eq!(std::fs::read_to_string(&marker).expect("checkpoint marker").trim(), "saved");
    let st = d.job(stubborn);
    assert_eq!(st["state"], "cancelled");
    assert_eq!(st["exit"]["signal"], 9, "the stubborn job was SIGKILLed after its grace: {st}");
    let (s, v) = d.req("POST", &format!("/api/v1/jobs/{polite}/cancel"), &d.token, None);
    assert_eq!(s, 409, "cancelling an ended job: {v}");
}

/// Follows a job's log until `text` appears (the stream ends at job end at the latest).
fn wait_for_output(d: &Daemon, id: u64, text: &str) {
    use std::io::BufRead;
    let resp = ureq::get(format!("{}/api/v1/jobs/{id}/logs?follow=true", d.url))
        .header("Authorization", format!("Bearer {}", d.token))
        .call()
        .expect("logs");
    let mut r = std::io::BufReader::new(resp.into_body().into_reader());
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        if line.contains(text) {
            return;
        }
        line.clear();
    }
    panic!("job {id} never printed {text:?}");
}

#[test]
fn replicas_get_torchrun_variables_and_a_time_limit_is_enforced() {
    let s = Scratch::new("replicas");
    let out = s.0.join("env");
    std::fs::create_dir_all(&out).expect("dir");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    let id = d.submit(json!({
        "command": format!("echo \"$WORLD_SIZE $RANK $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $CUDA_VISIBLE_DEVICES\" > {}/$RANK", out.display()),
        "resources": {"nvidia.com/gpu": 2},
        "replicas": 3
    }));
    let slow = d.submit(json!({"command": "sleep 300", "timeLimit": "1s", "gracePeriod": "1s"}));
    d.wait_ended(&[id, slow], Duration::from_secs(60));
    assert_eq!(d.job(id)["state"], "succeeded");
    let mut gpus = Vec::new();
    let mut ports = Vec::new();
    for rank in 0..3 {
        let line = std::fs::read_to_string(out.join(rank.to_string())).expect("rank env");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((f[0], f[1], f[2], f[3]), ("3", &*rank.to_string(), &*rank.to_string(), "127.0.0.1"), "{line}");
        ports.push(f[4].to_string());
        gpus.extend(f[5].split(',').map(String::from));
    }
    ports.dedup();
    assert_eq!(ports.len(), 1, "one MASTER_PORT for the gang");
    gpus.sort();
    gpus.dedup();
    assert_eq!(gpus.len(), 6, "three replicas, two GPUs each, none shared");
    assert_eq!(d.job(slow)["state"], "timed_out");
}

#[test]
fn failures_retry_and_preempted_jobs_resume_with_the_same_checkpoint_dir() {
    let s = Scratch::new("retry");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    // Fails on the first attempt, succeeds on the second: retried after back-off.
    let flaky = d.submit(json!({
        "command": "if [ \"$GPOOL_RESTART_COUNT\" = 0 ]; then exit 3; fi; echo restarts=$GPOOL_RESTART_COUNT",
        "retries": 1
    }));
    d.wait_ended(&[flaky], Duration::from_secs(60));
    let j = d.job(flaky);
    assert_eq!(
        (j["state"].as_str(), j["restarts"].as_u64(), j["attempt"].as_u64()),
        (Some("succeeded"), Some(1), Some(2)),
        "{j}"
    );

    // A preemptible low-priority job holding the only GPU is preempted by a high-priority one.
    let low = d.submit(json!({
        "command": "echo \"$GPOOL_RESTART_COUNT $GPOOL_CHECKPOINT_DIR\" >> \"$GPOOL_CHECKPOINT_DIR/runs\"; trap 'exit 0' TERM; echo ready; while [ $GPOOL_RESTART_COUNT = 0 ]; do sleep 0.05; done",
        "resources": {"nvidia.com/gpu": 1},
        "preemptible": true,
        "priority": "low"
    }));
    // Once it says "ready" it has recorded its run and installed its handler.
    wait_for_output(&d, low, "ready");
    let high = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 1}, "priority": "high"}));
    d.wait_ended(&[high, low], Duration::from_secs(60));
    assert_eq!(d.job(high)["state"], "succeeded");
    let l = d.job(low);
    assert_eq!((l["state"].as_str(), l["restarts"].as_u64()), (Some("succeeded"), Some(1)), "{l}");
    let runs = std::fs::read_to_string(d.data.join(format!("jobs/{low}/checkpoint/runs"))).expect("runs");
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}");
    assert!(lines[0].starts_with("0 ") && lines[1].starts_with("1 "), "{runs}");
    assert_eq!(lines[0].split(' ').nth(1), lines[1].split(' ').nth(1), "same checkpoint directory");
}

#[test]
fn a_job_whose_processes_vanished_while_the_daemon_was_down_is_requeued_not_failed() {
    let s = Scratch::new("vanished");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "1xH100-80GB", &[]);
    let id =
        d.submit(json!({"command": "echo \"attempt $GPOOL_ATTEMPT\"; sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    wait_for_output(&d, id, "attempt 1");
    d.kill9();
    // The node loses the job too (think: a reboot): its shim first, so that
    // nothing is left to write an exit record, then the job's processes.
    let shims: Vec<String> = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&format!("{}/jobs/{id}/run-1-0", data.display())))
        })
        .map(|p| p.to_string())
        .collect();
    assert_eq!(shims.len(), 1, "one shim runs the job");
    for pid in &shims {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid).status();
    }
    for pid in processes_of(&data, Some(id)) {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    let d = Daemon::start(&data, "1xH100-80GB", &[]);
    wait_for_output(&d, id, "attempt 2");
    let j = d.job(id);
    assert_eq!(j["state"], "running", "{j}");
    assert_eq!(j["restarts"], 1, "{j}");
}

/// Issue 18: a dependency that can never succeed is refused at submission,
/// or fails its dependants at once when it fails later; another user's job
/// is "not found" to a dependency as it is everywhere else.
#[test]
fn dependencies_that_can_never_succeed_are_refused_or_fail_their_dependants() {
    let scratch = Scratch::new("dead-dependencies");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let failed = d.submit(json!({"command": "exit 1"}));
    d.wait_ended(&[failed], Duration::from_secs(60));
    let (s, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&json!({"command": "true", "dependsOn": [failed]})));
    assert_eq!(s, 400, "{v}");
    assert!(v.to_string().contains(&format!("job {failed} failed, so this job could never start")), "{v}");
    // Bob cannot tell another user's job from one that does not exist.
    let bob = d.token_for("bob");
    let (s1, theirs) = d.req("POST", "/api/v1/jobs", &bob, Some(&json!({"command": "true", "dependsOn": [failed]})));
    let (s2, none) = d.req("POST", "/api/v1/jobs", &bob, Some(&json!({"command": "true", "dependsOn": [99_999]})));
    assert_eq!((s1, s2), (400, 400));
    assert_eq!(
        theirs.to_string().replace(&failed.to_string(), "N"),
        none.to_string().replace("99999", "N"),
        "the same answer for another user's job and for none"
    );
    // A chain whose head fails later: its dependants fail at once, not wait forever.
    let head = d.submit(json!({"command": "sleep 0.3; exit 1"}));
    let (s, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&json!({"command": "true", "dependsOn": [head]})));
    assert_eq!(s, 201, "{v}");
    let middle = v["ids"][0].as_u64().expect("id");
    let (s, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&json!({"command": "true", "dependsOn": [middle]})));
    assert_eq!(s, 201, "{v}");
    let tail = v["ids"][0].as_u64().expect("id");
    d.wait_ended(&[head, middle, tail], Duration::from_secs(60));
    for (id, on) in [(middle, head), (tail, middle)] {
        let j = d.job(id);
        assert_eq!(j["state"], "failed", "{j}");
        assert!(
            j["reason"].as_str().is_some_and(|r| r.contains(&format!("job {on} it depends on did not succeed"))),
            "{j}"
        );
    }
}
