//! Issue 17: a three-stage pipeline through the real daemon and CLI. Data
//! preparation (CPU only) writes a file to `$GPOOL_PIPELINE_DIR`; training
//! (two replicas on GPUs) fans out over two learning rates and reads it;
//! evaluation reads every model. Then a pipeline whose training fails:
//! evaluation never runs and the run fails; one cancelled while it runs;
//! and a cron-scheduled job whose occurrence falls while the daemon is down.

mod common;

use std::time::Duration;

use common::{Daemon, Scratch};
use serde_json::Value;

const NIGHTLY: &str = r#"name: nightly
stages:
  - name: prep
    command: echo rows=3 > "$GPOOL_PIPELINE_DIR/data.txt"
    resources: {cpu: 1}
  - name: train
    needs: [prep]
    matrix: {lr: [0.1, 0.01]}
    replicas: 2
    command: cat "$GPOOL_PIPELINE_DIR/data.txt" > "$GPOOL_PIPELINE_DIR/model-{{matrix.lr}}-rank$RANK.txt" && echo "gpu=$CUDA_VISIBLE_DEVICES lr=$GPOOL_MATRIX_LR world=$WORLD_SIZE" >> "$GPOOL_PIPELINE_DIR/model-{{matrix.lr}}-rank$RANK.txt"
    resources: {nvidia.com/gpu: 1}
  - name: eval
    needs: [train]
    command: cat "$GPOOL_PIPELINE_DIR"/model-*.txt
"#;

fn run_file(d: &Daemon, dir: &std::path::Path, name: &str, yaml: &str) -> u64 {
    let file = dir.join(name);
    std::fs::write(&file, yaml).expect("pipeline file");
    let (ok, out, err) = d.cli(&["pipeline", "run", &file.display().to_string()]);
    assert!(ok, "gpool pipeline run: {err}");
    out.trim().parse().unwrap_or_else(|_| panic!("a run id: {out:?}"))
}

fn status(d: &Daemon, run: u64) -> Value {
    let (ok, out, err) = d.cli(&["pipeline", "status", &run.to_string(), "-o", "json"]);
    assert!(ok, "gpool pipeline status: {err}");
    serde_json::from_str(&out).expect("json")
}

fn until_ended(d: &Daemon, run: u64) -> Value {
    d.until(&format!("/api/v1/pipelines/{run}"), Duration::from_secs(60), |v| {
        ["succeeded", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or(""))
    })
}

#[test]
fn three_stages_pass_files_on_and_run_in_the_order_they_need() {
    let s = Scratch::new("pipeline");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let run = run_file(&d, &s.0, "nightly.yaml", NIGHTLY);
    let v = until_ended(&d, run);
    assert_eq!(v["state"], "succeeded", "{v:#}");
    let stages = v["stages"].as_array().expect("stages");
    let labels: Vec<&str> = stages.iter().filter_map(|s| s["label"].as_str()).collect();
    assert_eq!(labels, ["prep", "train[lr=0.1]", "train[lr=0.01]", "eval"]);
    // Each started only after what it needs ended.
    let t = |i: usize, k: &str| stages[i][k].as_str().map(String::from).unwrap_or_default();
    assert!(t(1, "started_at") >= t(0, "ended_at") && t(2, "started_at") >= t(0, "ended_at"), "{v:#}");
    assert!(t(3, "started_at") >= t(1, "ended_at").max(t(2, "ended_at")), "{v:#}");
    // Evaluation read what both trainings wrote from what preparation wrote.
    let eval = stages[3]["job"].as_u64().expect("eval's job");
    let (ok, out, err) = d.cli(&["logs", &eval.to_string(), "--stdout"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches("rows=3").count(), 4, "two ranks of two trainings: {out}");
    assert!(
        out.contains("lr=0.1") && out.contains("lr=0.01") && out.contains("gpu=") && out.contains("world=2"),
        "{out}"
    );
    // The tree, as people read it.
    let (ok, tree, _) = d.cli(&["pipeline", "status", &run.to_string()]);
    assert!(
        ok && tree.contains("nightly") && tree.contains("  train[lr=0.01]") && tree.contains("succeeded"),
        "{tree}"
    );
    let (ok, list, _) = d.cli(&["pipeline", "list"]);
    assert!(ok && list.contains(&run.to_string()) && list.contains("4/4"), "{list}");
}

#[test]
fn a_failed_stage_stops_what_needs_it_and_a_cancelled_run_stops_everything() {
    let s = Scratch::new("pipeline-fail");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let failing = NIGHTLY.replace(
        "command: cat \"$GPOOL_PIPELINE_DIR/data.txt\"",
        "command: test {{matrix.lr}} = 0.1 && cat \"$GPOOL_PIPELINE_DIR/data.txt\"",
    );
    let run = run_file(&d, &s.0, "failing.yaml", &failing);
    let v = until_ended(&d, run);
    assert_eq!(v["state"], "failed", "{v:#}");
    let eval = &v["stages"][3];
    assert_eq!(eval["state"], "failed");
    assert!(eval.get("started_at").is_none(), "eval never started: {eval}");
    assert!(eval["reason"].as_str().is_some_and(|r| r.contains("did not succeed")), "{eval}");

    let slow = "name: slow\nstages:\n  - {name: a, command: sleep 600, resources: {nvidia.com/gpu: 1}}\n  - {name: b, command: 'true', needs: [a]}\n";
    let run = run_file(&d, &s.0, "slow.yaml", slow);
    d.until(&format!("/api/v1/pipelines/{run}"), Duration::from_secs(60), |v| v["state"] == "running");
    let (ok, out, err) = d.cli(&["pipeline", "cancel", &run.to_string()]);
    assert!(ok && out.contains("cancelled"), "{out}{err}");
    let v = until_ended(&d, run);
    assert_eq!(v["state"], "cancelled", "{v:#}");
    assert_eq!(status(&d, run)["stages"][1]["state"], "cancelled");
    // A cycle is refused with the stages named, and nothing runs.
    let (ok, _, err) = d.cli(&["pipeline", "run", "/dev/null"]);
    assert!(!ok, "an empty file is no pipeline");
    let cyclic = s.0.join("cyclic.yaml");
    std::fs::write(&cyclic, "stages:\n  - {name: a, command: x, needs: [b]}\n  - {name: b, command: x, needs: [a]}\n")
        .expect("file");
    let (ok, _, err2) = d.cli(&["pipeline", "run", &cyclic.display().to_string()]);
    assert!(!ok && err2.contains("cycle") && err2.contains("a → b → a"), "{err}{err2}");
}

#[test]
fn a_schedule_is_applied_listed_and_deleted_through_the_cli() {
    let s = Scratch::new("schedule-cli");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let file = s.0.join("nightly.yaml");
    std::fs::write(&file, NIGHTLY).expect("pipeline file");
    let f = file.display().to_string();
    let (ok, out, err) =
        d.cli(&["schedule", "apply", "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Paris", "--pipeline", &f]);
    assert!(ok && out.contains("next run"), "{out}{err}");
    // No zone, no schedule: it is stated, never guessed.
    let (ok, _, err) = d.cli(&["schedule", "apply", "x", "--cron", "0 2 * * *", "--pipeline", &f]);
    assert!(!ok && err.contains("--tz"), "{err}");
    let (ok, _, err) =
        d.cli(&["schedule", "apply", "x", "--cron", "0 2 * * *", "--tz", "Nowhere/Land", "--pipeline", &f]);
    assert!(!ok && err.contains("not a time zone"), "{err}");
    let (ok, out, _) = d.cli(&["schedule", "list", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("json");
    assert!(ok && list.as_array().map(Vec::len) == Some(1), "{out}");
    assert_eq!(list[0]["kind"], "pipeline");
    // 02:00 in Paris is 01:00 or 00:00 UTC: the next run is one of those, at minute 0.
    let next = list[0]["next_at"].as_str().expect("next");
    assert!(next.contains("T01:00:00") || next.contains("T00:00:00"), "{next}");
    let (ok, out, _) = d.cli(&["schedule", "delete", "nightly"]);
    assert!(ok && out.contains("deleted"), "{out}");
    let (ok, out, _) = d.cli(&["schedule", "list"]);
    assert!(ok && out.contains("no schedules"), "{out}");
}

/// An every-minute schedule whose occurrence falls while the daemon is
/// down fires once when it is back, and a second restart at the same
/// moment fires nothing again.
#[test]
fn a_cron_job_whose_time_falls_while_the_daemon_is_down_fires_once_when_it_is_back() {
    let s = Scratch::new("schedule-restart");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "1xH100-80GB", &[]);
    let spec = serde_json::json!({"schedule": "* * * * *", "timeZone": "UTC", "job": {"command": "true"}});
    let (code, v) = d.req("PUT", "/api/v1/schedules/every-minute", &d.token, Some(&spec));
    assert_eq!(code, 200, "{v}");
    d.kill9();
    // Down across the next minute's occurrence (a wait on the wall clock, not a timing assertion).
    let next = gpool_api::time::parse_rfc3339(v["next_at"].as_str().expect("next")).expect("time");
    let wait = next + 1_000 - jiff::Timestamp::now().as_millisecond();
    std::thread::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0)));
    let scheduled = |d: &Daemon| -> Vec<Value> {
        let jobs = d.get("/api/v1/jobs?limit=1000");
        jobs["jobs"].as_array().cloned().unwrap_or_default()
    };
    let d = Daemon::start(&data, "1xH100-80GB", &[]);
    let jobs = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let jobs = scheduled(&d);
            if !jobs.is_empty() || std::time::Instant::now() > deadline {
                break jobs;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let view = d.get("/api/v1/schedules");
    let runs = view[0]["runs"].as_u64().expect("runs");
    assert!(!jobs.is_empty(), "the missed occurrence fired: {view}");
    assert_eq!(jobs.len() as u64, runs, "one job per run: {view}");
    assert!(jobs.iter().all(|j| j["spec"]["labels"]["gpool.io/schedule"] == "every-minute"));
    let last = view[0]["last_at"].as_str().expect("last").to_string();
    assert!(gpool_api::time::parse_rfc3339(&last) >= Some(next), "{view}");
    drop(d);
    // Restarted again within the same minute: the occurrence is not run twice.
    let d = Daemon::start(&data, "1xH100-80GB", &[]);
    let view = d.get("/api/v1/schedules");
    if view[0]["last_at"].as_str() == Some(last.as_str()) {
        assert_eq!(scheduled(&d).len() as u64, runs, "no duplicate run: {view}");
    }
}
