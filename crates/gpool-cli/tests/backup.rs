//! Issue 43: `gpool admin backup` while the daemon runs, and `gpool admin
//! restore` after the state is lost: jobs in every state, tokens and
//! services come back as they were at the backup.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[test]
fn a_backup_taken_under_load_restores_jobs_in_every_state_and_the_tokens() {
    let s = Scratch::new("backup");
    let data = s.0.join("data");
    let data_arg = data.to_str().expect("path");
    let d = Daemon::start(&data, "2xH100-80GB", &[]);
    let ok = d.submit(json!({"command": "true"}));
    let failed = d.submit(json!({"command": "exit 3"}));
    let running = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 2}}));
    let held = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 1}}));
    let (code, v) = d.req("POST", &format!("/api/v1/jobs/{held}/hold"), &d.token, None);
    assert_eq!(code, 200, "{v}");
    let cancelled = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 2}}));
    let (code, v) = d.req("POST", &format!("/api/v1/jobs/{cancelled}/cancel"), &d.token, None);
    assert_eq!(code, 200, "{v}");
    let (code, token) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": "ana", "team": "ml"})));
    assert_eq!(code, 201, "{token}");
    for (id, state) in [(ok, "succeeded"), (failed, "failed"), (running, "running"), (cancelled, "cancelled")] {
        d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] == state);
    }
    let before: Vec<(u64, String)> = [ok, failed, held, cancelled]
        .iter()
        .map(|id| (*id, d.get(&format!("/api/v1/jobs/{id}"))["state"].as_str().unwrap_or_default().to_string()))
        .collect();

    // While the daemon runs: a backup, and a second one to the same file is refused.
    let file = s.0.join("gpool.backup");
    let file_arg = file.to_str().expect("path");
    let (code, out, err) = gpool(&["admin", "backup", file_arg, "--data-dir", data_arg, "-o", "json"], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let said: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(said["jobs"].as_u64().is_some_and(|n| n >= 5) && said["tokens"].as_u64().is_some_and(|n| n >= 1), "{said}");
    let (code, _, err) = gpool(&["admin", "backup", file_arg, "--data-dir", data_arg], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("already exists"), "{err}");
    // A restore under the running daemon is refused.
    let (code, _, err) = gpool(&["admin", "restore", file_arg, "--data-dir", data_arg], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("stop it first"), "{err}");
    let later = d.submit(json!({"command": "true"}));
    drop(d);

    // The state is lost; the backup comes back in its place.
    std::fs::remove_file(data.join("state.db")).expect("lose the state");
    let (code, out, err) = gpool(&["admin", "restore", file_arg, "--data-dir", data_arg], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("restored"), "{out}");
    let d = Daemon::spawn(&data, &["--simulate-gpus", "2xH100-80GB"], None);
    for (id, state) in &before {
        let j = d.get(&format!("/api/v1/jobs/{id}"));
        assert_eq!(j["state"].as_str(), Some(state.as_str()), "job {id}: {j}");
    }
    let j = d.get(&format!("/api/v1/jobs/{running}"));
    assert!(j["state"].is_string(), "the job running at the backup is known: {j}");
    let (code, _) = d.req("GET", &format!("/api/v1/jobs/{later}"), &d.token, None);
    assert_eq!(code, 404, "a job submitted after the backup is not in it");
    let secret = token["token"].as_str().expect("secret");
    let (code, me) = d.req("GET", "/api/v1/whoami", secret, None);
    assert_eq!((code, me["user"].as_str()), (200, Some("ana")), "{me}");
}

#[test]
fn backup_and_restore_refuse_what_they_cannot_do_and_say_what_to_do() {
    let s = Scratch::new("backup-refusals");
    let empty = s.0.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    let (code, _, err) = gpool(&["admin", "backup", "x.db", "--data-dir", empty.to_str().expect("path")], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("no state at") && err.contains("pg_dump"), "{err}");
    let junk = s.0.join("junk");
    std::fs::write(&junk, "hello").expect("junk");
    let (code, _, err) =
        gpool(&["admin", "restore", junk.to_str().expect("path"), "--data-dir", empty.to_str().expect("path")], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("is not a gpool store"), "{err}");
    assert!(!empty.join("state.db").exists(), "nothing was put in place");
}
