//! Issue 42: a Slurm user's habits. A bare `-t` is minutes, and a batch
//! script's `#SBATCH` lines say what it needs, as sbatch reads them; the
//! job reads Slurm's variables.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn id_of(out: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(out).expect("json")["ids"][0].as_u64().expect("an id")
}

#[test]
fn a_bare_time_limit_is_minutes_as_in_sbatch() {
    let s = Scratch::new("slurm-time");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&["submit", "-t", "90", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let id = id_of(&out);
    let (ok, shown, err) = d.cli(&["show", &id.to_string()]);
    assert!(ok, "{err}");
    assert!(shown.contains("time limit       1h30m"), "{shown}");
    assert_eq!(d.job(id)["spec"]["timeLimit"], "90m");
}

#[test]
fn a_batch_script_runs_with_what_its_sbatch_lines_ask() {
    let s = Scratch::new("slurm-script");
    let d = Daemon::start(&s.0.join("data"), "4xH100-80GB", &[]);
    let script = s.0.join("bars.sbatch");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gres=gpu:2\n#SBATCH --time=1-00:00:00\n#SBATCH --job-name=bars-sb\n\
         #SBATCH --mail-type=END\n\necho \"job=$SLURM_JOB_ID gpus=$SLURM_GPUS_ON_NODE cuda=$CUDA_VISIBLE_DEVICES args=$*\"\n",
    )
    .expect("the script");
    let path = script.display().to_string();
    let (ok, out, err) = d.cli(&["submit", &path, "-o", "json", "--", "one", "two"]);
    assert!(ok, "{err}");
    assert!(err.contains("--mail-type has no effect"), "said what it ignored: {err}");
    let id = id_of(&out);
    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    assert_eq!((job["state"].as_str(), job["name"].as_str()), (Some("succeeded"), Some("bars-sb")), "{job}");
    assert_eq!(job["spec"]["timeLimit"], "1-00:00:00");
    assert_eq!(job["replicas"][0]["gpus"].as_array().map(Vec::len), Some(2), "{job}");
    let (_, logs, err) = d.cli(&["logs", &id.to_string()]);
    let cuda = job["replicas"][0]["cuda_visible_devices"].as_str().unwrap_or("?");
    assert!(logs.contains(&format!("job={id} gpus=2 cuda={cuda} args=one two")), "{logs}{err}");
    let (ok, shown, _) = d.cli(&["show", &id.to_string()]);
    assert!(ok && shown.contains("time limit       24h"), "{shown}");
    // Flags win over the script's lines; what gpool cannot honour is refused before anything is submitted.
    let (ok, out, err) = d.cli(&["submit", &path, "--gpus", "1", "--name", "flag", "-o", "json"]);
    assert!(ok, "{err}");
    let job = d.job(id_of(&out));
    assert_eq!(job["name"], "flag");
    assert_eq!(job["spec"]["resources"]["gpool.io/gpu"].as_f64(), Some(1.0));
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --output=slurm-%j.out\ntrue\n").expect("the script");
    let (ok, _, err) = d.cli(&["submit", &path]);
    assert!(!ok && err.contains("gpool logs"), "{err}");
}

/// Most intervals overlapping at one instant.
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals.iter().flat_map(|(s, e)| [(*s, 1), (*e, -1)]).collect();
    // An end before a start at the same instant: the slot was freed first.
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn an_array_runs_its_tasks_at_most_n_at_once_each_knowing_its_index() {
    let s = Scratch::new("slurm-array");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&[
        "submit",
        "--array",
        "0-9%3",
        "--gpus",
        "1",
        "-o",
        "json",
        "--",
        "sh",
        "-c",
        "echo task $SLURM_ARRAY_TASK_ID $GPOOL_ARRAY_TASK_ID; sleep 0.3",
    ]);
    assert!(ok, "{err}");
    let ids: Vec<u64> = serde_json::from_str::<serde_json::Value>(&out).expect("json")["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    assert_eq!(ids.len(), 10);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "consecutive ids: {ids:?}");
    d.wait_ended(&ids, Duration::from_secs(120));
    let mut intervals = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let job = d.job(*id);
        assert_eq!(job["state"], "succeeded", "{job}");
        assert_eq!((job["array"]["job"].as_u64(), job["array"]["index"].as_u64()), (Some(ids[0]), Some(i as u64)));
        let (_, logs, _) = d.cli(&["logs", &format!("{}_{i}", ids[0])]);
        assert_eq!(logs.trim(), format!("task {i} {i}"), "task {i} by its array id and index");
        let at = |k: &str| gpool_api::time::parse_rfc3339(job[k].as_str().expect(k)).expect(k);
        intervals.push((at("started_at"), at("ended_at")));
    }
    let most = most_at_once(&intervals);
    assert!((2..=3).contains(&most), "at most three at once, and more than one: {most} ({intervals:?})");
    // An array's id cancels every task of it, as scancel does; ID_INDEX one task.
    let (ok, out, err) = d.cli(&["submit", "-a", "1,3,5", "-o", "json", "--begin", "now+1h", "--", "true"]);
    assert!(ok, "{err}");
    let first = serde_json::from_str::<serde_json::Value>(&out).expect("json")["ids"][0].as_u64().expect("id");
    let (ok, _, err) = d.cli(&["cancel", &format!("{first}_3")]);
    assert!(ok, "{err}");
    assert_eq!(d.job(first + 1)["state"], "cancelled");
    assert_eq!(d.job(first)["state"], "pending");
    let (ok, _, err) = d.cli(&["cancel", &first.to_string()]);
    assert!(ok, "{err}");
    assert!((first..first + 3).all(|id| d.job(id)["state"] == "cancelled"));
    let (ok, _, err) = d.cli(&["show", &format!("{first}_4")]);
    assert!(!ok && err.contains("no task 4"), "{err}");
}

/// `gpool run` is srun without a terminal: it waits for resources, prints the
/// job's output as it runs, and exits with the job's status.
#[test]
fn gpool_run_prints_the_jobs_output_and_exits_with_its_status() {
    let s = Scratch::new("slurm-run");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let (code, out, err) =
        d.cli_code(&["run", "--gpus", "1", "--", "sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES; echo oops >&2; exit 7"]);
    assert_eq!(code, Some(7), "{out}{err}");
    assert!(out.starts_with("gpus=") && out.trim().len() > "gpus=".len(), "{out}");
    assert!(err.contains("submitted; waiting") && err.contains("oops"), "{err}");
    // With no terminal here (standard input at its end), the job's terminal reads its end of input.
    let (code, out, err) = d.cli_code(&["run", "--pty", "--", "sh", "-c", "cat; echo after-eof; exit 4"]);
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(out.contains("after-eof"), "{out}");
    let (_, _, err) = d.cli_code(&["run", "--array", "0-3", "--", "true"]);
    assert!(err.contains("nothing was submitted"), "{err}");
    assert_eq!(d.get("/api/v1/jobs")["jobs"].as_array().map(Vec::len), Some(2), "only the two runs' jobs");
}

/// `gpool acct` (sacct): the jobs that ended in the period with elapsed,
/// GPU-hours and exit code, from the store's index on when jobs ended;
/// a running job is listed too unless `--ended-only`.
#[test]
fn acct_lists_what_ended_in_the_period_like_sacct() {
    let s = Scratch::new("slurm-acct");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&["submit", "--gpus", "1", "--name", "ok-job", "-o", "json", "--", "true"]);
    assert!(ok, "{err}");
    let ok_id = id_of(&out);
    let (ok, out, err) =
        d.cli(&["submit", "--gpus", "1", "--name", "bad-job", "-o", "json", "--", "sh", "-c", "exit 3"]);
    assert!(ok, "{err}");
    let bad_id = id_of(&out);
    d.wait_ended(&[ok_id, bad_id], Duration::from_secs(60));
    let (ok, out, err) = d.cli(&["submit", "--gpus", "1", "--name", "still", "-o", "json", "--", "sleep", "600"]);
    assert!(ok, "{err}");
    let running = id_of(&out);
    d.until(&format!("/api/v1/jobs/{running}"), Duration::from_secs(30), |j| j["state"] == "running");

    let (ok, out, err) = d.cli(&["acct", "--since", "1h", "-o", "json"]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    let row = |id: u64| {
        rows.iter()
            .find(|r| r["jobid"].as_str() == Some(id.to_string().as_str()))
            .cloned()
            .unwrap_or_else(|| panic!("{id}: {out}"))
    };
    let (good, bad, live) = (row(ok_id), row(bad_id), row(running));
    assert_eq!((good["state"].as_str(), good["exit_code"].as_str()), (Some("succeeded"), Some("0:0")), "{good}");
    assert_eq!((bad["state"].as_str(), bad["exit_code"].as_str()), (Some("failed"), Some("3:0")), "{bad}");
    assert!(good["elapsed_s"].is_u64() && good["gpu_hours"].is_f64() && good["gpus"] == 1, "{good}");
    assert!(good["nodes"].as_str().is_some_and(|n| !n.is_empty()), "{good}");
    assert_eq!(live["state"], "running");

    let (ok, out, _) =
        d.cli(&["acct", "--since", "1h", "--ended-only", "--state", "failed", "--format", "jobid,name,exitcode"]);
    assert!(ok);
    assert!(
        out.contains("bad-job") && out.contains("3:0") && !out.contains("ok-job") && !out.contains("still"),
        "{out}"
    );
    let (ok, out, _) = d.cli(&["acct", "--since", "1h", "--until", "30m", "--ended-only"]);
    assert!(ok && out.contains("(no jobs ended in the period)"), "nothing ended an hour to half an hour ago: {out}");
    let (ok, _, err) = d.cli(&["acct", "--since", "last week"]);
    assert!(!ok && err.contains("--since \"last week\""), "{err}");
    let (ok, _, err) = d.cli(&["acct", "--format", "jobid,tres"]);
    assert!(!ok && err.contains("\"tres\" is not a field"), "{err}");
    let (status, body) = d.req("GET", "/api/v1/jobs?ended_since=yesterday", &d.token, None);
    assert_eq!(status, 400, "{body}");
    let (ok, _, err) = d.cli(&["cancel", &running.to_string()]);
    assert!(ok, "{err}");
}

/// Advance reservations on the real daemon (the scenario, its start
/// brought near): 8 GPUs, 4 for team vision from a few seconds on. A 6-GPU
/// job of another team waits naming the reservation, a 4-GPU one starts, and
/// vision's job with `--reservation` starts once the window opens.
#[test]
fn a_reservation_keeps_gpus_for_its_team_from_its_start() {
    let s = Scratch::new("slurm-reservation");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&[
        "reservation",
        "create",
        "demo",
        "--gpus",
        "4",
        "--start",
        "now+4s",
        "--duration",
        "10m",
        "--team",
        "vision",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("reservation demo: 4 GPU(s)"), "{out}");
    let (ok, out, _) = d.cli(&["reservation", "list"]);
    assert!(ok && out.contains("demo") && out.contains("upcoming") && out.contains("team vision"), "{out}");
    let (ok, _, err) =
        d.cli(&["reservation", "create", "demo", "--gpus", "1", "--start", "now", "--duration", "1h", "--team", "x"]);
    assert!(!ok && err.contains("exists already"), "{err}");

    // Jobs run as their users' accounts: two of them, in two teams.
    let (ana_user, vi_user) = (
        User::create(&format!("gra{}", std::process::id() % 100_000)),
        User::create(&format!("grv{}", std::process::id() % 100_000)),
    );
    let ana = d.token_for(&ana_user.name);
    let (status, vi) =
        d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": vi_user.name, "team": "vision"})));
    assert_eq!(status, 201, "{vi}");
    let vi = vi["token"].as_str().expect("token").to_string();
    let submit = |token: &str, spec: serde_json::Value| {
        let (status, v) = d.req("POST", "/api/v1/jobs", token, Some(&spec));
        assert_eq!(status, 201, "{v}");
        v["ids"][0].as_u64().expect("id")
    };
    let six =
        submit(&ana, json!({"command": ["sleep", "600"], "resources": {"nvidia.com/gpu": 6}, "timeLimit": "20m"}));
    let four =
        submit(&ana, json!({"command": ["sleep", "600"], "resources": {"nvidia.com/gpu": 4}, "timeLimit": "20m"}));
    let mine = submit(
        &vi,
        json!({"command": ["sleep", "600"], "resources": {"nvidia.com/gpu": 4}, "timeLimit": "5m", "reservation": "demo"}),
    );
    d.until(&format!("/api/v1/jobs/{four}"), Duration::from_secs(30), |j| j["state"] == "running");
    let waiting = d.job(six);
    assert_eq!(waiting["state"], "pending");
    assert!(waiting["reason"].as_str().is_some_and(|r| r.contains("reserved for demo")), "{waiting}");
    let (status, v) = d.req(
        "POST",
        "/api/v1/jobs",
        &ana,
        Some(&json!({"command": ["true"], "resources": {"nvidia.com/gpu": 1}, "reservation": "demo"})),
    );
    assert!(status == 400 && v.to_string().contains(&format!("does not let user {}", ana_user.name)), "{status} {v}");
    d.until(&format!("/api/v1/jobs/{mine}"), Duration::from_secs(30), |j| j["state"] == "running");
    let (ok, out, _) = d.cli(&["reservation", "list", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(ok && list[0]["state"] == "active" && list[0]["running_jobs"] == 1, "{list}");
    let (ok, out, err) = d.cli(&["reservation", "delete", "demo"]);
    assert!(ok && out.contains("deleted reservation demo"), "{err}");
    for id in [six, four, mine] {
        d.cli(&["cancel", &id.to_string()]);
    }
}
