//! Issue 17: `gpool submit --begin`. A job with a begin time waits, says
//! why, and starts once the time has come (the control plane wakes for it:
//! nothing else happens in between).

mod common;

use std::time::Duration;

use common::*;

#[test]
fn a_job_waits_for_its_begin_time_then_starts() {
    let s = Scratch::new("begin");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&["submit", "--begin", "now+3s", "--gpus", "1", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let id = serde_json::from_str::<serde_json::Value>(&out).expect("json")["ids"][0].as_u64().expect("id");
    let job = d.job(id);
    let begin = job["spec"]["beginAt"].as_str().expect("an absolute begin time").to_string();
    assert_eq!(job["state"], "pending", "{job}");
    assert_eq!(job["reason"], format!("waiting for its begin time, {begin}"), "{job}");
    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    assert_eq!(job["state"], "succeeded", "{job}");
    let started = job["started_at"].as_str().expect("started");
    assert!(
        gpool_api::time::parse_rfc3339(started) >= gpool_api::time::parse_rfc3339(&begin),
        "started {started}, before its begin time {begin}"
    );
    // A time the control plane cannot place is refused with the forms it takes.
    let (ok, _, err) = d.cli(&["submit", "--begin", "tomorrow", "--", "true"]);
    assert!(!ok && err.contains("now+2h"), "{err}");
    let (code, body) = d.req(
        "POST",
        "/api/v1/jobs",
        &d.token,
        Some(&serde_json::json!({"command": "true", "beginAt": "2026-12-01T02:00"})),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("beginAt") && body.to_string().contains("zone"), "{body}");
}

/// `--deadline`: a job whose time limit cannot fit before its deadline is
/// shown late by `gpool show`, and runs all the same.
#[test]
fn a_job_that_cannot_make_its_deadline_is_shown_late_and_runs() {
    let s = Scratch::new("deadline");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let (ok, out, err) =
        d.cli(&["submit", "--deadline", "now+1m", "-t", "2h", "--gpus", "1", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let id = serde_json::from_str::<serde_json::Value>(&out).expect("json")["ids"][0].as_u64().expect("id");
    d.wait_ended(&[id], Duration::from_secs(60));
    assert_eq!(d.job(id)["state"], "succeeded");
    let events = d.history(id, Duration::from_secs(30));
    assert!(events.iter().any(|e| e["kind"] == "deadline_at_risk"), "{events:?}");
    let (ok, _, err) = d.cli(&["submit", "--deadline", "someday", "--", "true"]);
    assert!(!ok && err.contains("--deadline"), "{err}");
}
