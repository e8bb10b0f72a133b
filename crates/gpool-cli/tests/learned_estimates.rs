//! Issue 17: run times learned from history. Jobs of the same user and name
//! that succeed teach gpool how long the next one takes: from the second
//! success on, a job submitted without an estimate gets the median of the
//! recent ones, `gpool show` says so, and a restarted daemon still knows.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn train(d: &Daemon, secs: f64) -> u64 {
    d.submit(json!({"name": "train", "command": format!("sleep {secs}"), "resources": {"nvidia.com/gpu": 1}}))
}

fn learned(d: &Daemon, id: u64) -> Value {
    d.job(id)["learned_estimate"].clone()
}

#[test]
fn repeated_jobs_teach_their_run_time_and_a_restart_keeps_it() {
    let s = Scratch::new("learned");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "2xH100-80GB", &[]);
    // Three runs of "train": 0.4 s, 0.6 s, 0.5 s.
    let mut seen = Vec::new();
    for secs in [0.4, 0.6, 0.5] {
        let id = train(&d, secs);
        seen.push(learned(&d, id));
        d.wait_ended(&[id], Duration::from_secs(60));
        assert_eq!(d.job(id)["state"], "succeeded");
    }
    assert_eq!(seen[0], Value::Null, "nothing known before the first success");
    assert_eq!(seen[1], Value::Null, "one success is not enough");
    assert_eq!(seen[2]["samples"], 2, "{}", seen[2]);
    // The fourth: the median of three, from the same user, name, GPU count and queue.
    let id = train(&d, 0.1);
    let l = learned(&d, id);
    assert_eq!((l["samples"].as_u64(), l["basis"].as_str()), (Some(3), Some("same")), "{l}");
    let secs = l["seconds"].as_f64().expect("seconds");
    assert!((0.5..0.9).contains(&secs), "about the median run, 0.5 s plus start-up: {secs}");
    let (ok, out, err) = d.cli(&["show", &id.to_string()]);
    assert!(ok, "{err}");
    assert!(out.contains("learned from 3 similar jobs (same user, name, GPUs and queue)"), "{out}");
    d.wait_ended(&[id], Duration::from_secs(60));
    // A job that gives its own estimate keeps it.
    let given =
        d.submit(json!({"name": "train", "command": "true", "estimate": "2h", "resources": {"nvidia.com/gpu": 1}}));
    assert_eq!(learned(&d, given), Value::Null);
    let (_, out, _) = d.cli(&["show", &given.to_string()]);
    assert!(out.contains("estimate         2h (given)"), "{out}");
    d.wait_ended(&[given], Duration::from_secs(60));
    // Another name on one GPU: the user's one-GPU jobs in the queue answer.
    let other = d.submit(json!({"name": "eval", "command": "true", "resources": {"nvidia.com/gpu": 1}}));
    assert_eq!(learned(&d, other)["basis"], "user-gpus");
    d.wait_ended(&[other], Duration::from_secs(60));
    // A restarted daemon rebuilds what it learned from the store.
    d.kill9();
    let d = Daemon::start(&data, "2xH100-80GB", &[]);
    let id = train(&d, 0.1);
    let l = learned(&d, id);
    assert_eq!(l["samples"], 5, "four trains and the one with its own estimate: {l}");
}
