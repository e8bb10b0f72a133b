//! End-to-end tests of `gpool up` with the real binary, real processes and a
//! simulated GPU inventory on loopback: what people meet at the command line
//! and the API. Exit codes, who may see and cancel what, refused input, logs
//! and long lists, config files, the daemon's own logs, `gpool top` in a terminal.
//! The jobs themselves (placement, signals, retries, recovery) are tests/e2e.rs.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Asserts that `gpool ARGS` exited with `code`, saying `why` on standard error.
fn assert_exit((code, out, err): (Option<i32>, String, String), want: i32, why: &str, args: &str) {
    assert_eq!(code, Some(want), "gpool {args}: exit code {code:?}\nstdout: {out}\nstderr: {err}");
    assert!(err.contains(why), "gpool {args}: {why:?} not in the error: {err}");
}

#[test]
fn failures_exit_with_the_documented_codes() {
    let s = Scratch::new("exit-codes");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    let done = d.submit(json!({"command": "true"}));
    d.wait_ended(&[done], Duration::from_secs(60));
    let (code, out, err) = d.cli_code(&["show", &done.to_string()]);
    assert_eq!(code, Some(0), "{out}{err}");

    // 3: not found (HTTP 404), for every verb that names a job or a node.
    for args in [
        vec!["show", "987654"],
        vec!["show", "987654", "-o", "json"],
        vec!["logs", "987654"],
        vec!["advise", "987654"],
        vec!["cancel", "987654"],
        vec!["drain", "no-such-node"],
    ] {
        assert_exit(d.cli_code(&args), 3, "not found (HTTP 404)", &args.join(" "));
    }
    // Several ids, one missing: show prints nothing and exits 3.
    let (code, out, err) = d.cli_code(&["show", &done.to_string(), "987654"]);
    assert_eq!((code, out.as_str()), (Some(3), ""), "{err}");

    // 4: a bad token (HTTP 401), a user's token where an admin's is needed (403), no token at all.
    assert_exit(d.cli_code(&["queue", "--token", "gp_not-a-token"]), 4, "(HTTP 401)", "queue --token bad");
    let user = d.token_for("bob");
    assert_exit(
        d.cli_code(&["token", "create", "--user", "eve", "--token", &user]),
        4,
        "(HTTP 403)",
        "token create as a user",
    );
    let no_token = s.0.join("no-token");
    std::fs::create_dir_all(&no_token).expect("dir");
    std::fs::write(no_token.join("server.url"), &d.url).expect("url file");
    let dir = no_token.display().to_string();
    assert_exit(gpool(&["queue"], &[("GPOOL_DATA_DIR", &dir)]), 4, "no token", "queue without a token");

    // 5: nothing listens there, or no local daemon to find.
    let (args, env) = (["queue", "--server", "http://127.0.0.1:1"], [("GPOOL_TOKEN", d.token.as_str())]);
    assert_exit(gpool(&args, &env), 5, "cannot reach the gpool daemon at http://127.0.0.1:1", "queue --server :1");
    assert_exit(d.cli_code(&["show", "1", "--server", "http://127.0.0.1:1"]), 5, "cannot reach", "show --server :1");
    let empty = s.0.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    let dir = empty.display().to_string();
    assert_exit(gpool(&["queue"], &[("GPOOL_DATA_DIR", &dir)]), 5, "no gpool daemon found", "queue, no daemon");

    // 2 stays clap's usage error, 1 any other failure (here HTTP 409).
    assert_exit(d.cli_code(&["show", "not-a-number"]), 2, "invalid value", "show not-a-number");
    assert_exit(d.cli_code(&["cancel", &done.to_string()]), 1, "(HTTP 409)", "cancel an ended job");
}

/// Declares a 5 MiB body and sends none: the limit is enforced from the header.
fn status_of_oversized_submit(d: &Daemon) -> u16 {
    use std::io::{Read, Write};
    let addr = d.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let req = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        d.token,
        5 * 1024 * 1024
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("status line");
    String::from_utf8_lossy(&head[9..12]).parse().expect("status code")
}

#[test]
fn users_see_and_cancel_only_their_own_jobs() {
    let s = Scratch::new("auth");
    // Jobs run as their users' accounts (a daemon in single-user mode
    // refuses tokens for anyone else): two real accounts.
    let tag = std::process::id() % 100_000;
    let (ua, ub) = (common::User::create(&format!("gpva{tag}")), common::User::create(&format!("gpvb{tag}")));
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &["--run-as", "user"]);
    let alice = d.token_for(&ua.name);
    let bob = d.token_for(&ub.name);
    let (st, v) = d.req(
        "POST",
        "/api/v1/jobs",
        &alice,
        Some(&json!({"command": "sleep 30", "resources": {"nvidia.com/gpu": 1}})),
    );
    assert_eq!(st, 201, "{v}");
    let id = v["ids"][0].as_u64().expect("id");
    assert_eq!(d.req("GET", &format!("/api/v1/jobs/{id}"), &alice, None).0, 200);
    assert_eq!(d.req("GET", &format!("/api/v1/jobs/{id}"), &bob, None).0, 404, "bob cannot see alice's job");
    assert_eq!(d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &bob, None).0, 404, "bob cannot cancel it");
    assert_eq!(d.req("DELETE", &format!("/api/v1/jobs/{id}"), &bob, None).0, 404);
    let (_, list) = d.req("GET", "/api/v1/jobs", &bob, None);
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "bob's listing: {list}");
    let (_, list) = d.req("GET", &format!("/api/v1/jobs?user={}", ua.name), &bob, None);
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "a user filter does not widen a user's view");
    assert_eq!(
        d.req("POST", "/api/v1/tokens", &bob, Some(&json!({"user": "mallory"}))).0,
        403,
        "users cannot mint tokens"
    );
    assert_eq!(d.req("GET", "/api/v1/jobs", "not-a-token", None).0, 401);
    assert_eq!(d.job(id)["user"], ua.name.as_str(), "admins see everyone's jobs");
    assert_eq!(d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &alice, None).0, 200, "alice can cancel her own");
}

#[test]
fn bad_input_is_refused_with_the_field_named_and_nothing_is_lost() {
    let s = Scratch::new("bad");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &[]);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"command": ["true"], "gpus": 4}), 400, "unknown field `gpus`"),
        (json!({"command": ["true"], "resources": {"nvidia.com/gpu": "lots"}}), 400, "resources.nvidia.com/gpu"),
        (json!({"command": ["true"], "resources": {"nvidia.com/gpu": 16}}), 400, "no node could ever run it"),
        (json!({"command": ["true"], "resources": {"nvidia.com/gpu": 1}, "gpuModel": "B200"}), 400, "B200"),
        (json!({"command": ["true"], "timeLimit": "tomorrow"}), 400, "timeLimit"),
        (json!({"command": ["true"], "dependsOn": [999]}), 400, "dependsOn: job 999 does not exist"),
        (json!({"command": 5}), 400, "command"),
        (json!({"jobs": [{"command": ["true"]}, {"command": ["true"], "replicas": 0}]}), 400, "jobs[1].replicas"),
    ];
    for (body, status, text) in cases {
        let (s, v) = d.req("POST", "/api/v1/jobs", &d.token, Some(&body));
        assert_eq!(s, status, "{body}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| e.contains(text)), "{body}: {v}");
    }
    let (s, body) = d.raw("/api/v1/jobs", &d.token, "application/json", b"{not json".to_vec());
    assert_eq!(s, 400, "{body}");
    assert_eq!(status_of_oversized_submit(&d), 413, "bodies are size-limited");
    let (s, body) = d.raw(
        "/api/v1/jobs",
        &d.token,
        "application/yaml",
        b"command: [true]\nresources: {nvidia.com/gpu: 1}\n".to_vec(),
    );
    assert_eq!(s, 201, "YAML is accepted too: {body}");
    let (s, v) = d.req("GET", "/api/v1/jobs?state=sleeping", &d.token, None);
    assert_eq!(s, 400, "{v}");
    // Nothing half-submitted: only the YAML job exists.
    assert_eq!(d.get("/api/v1/jobs")["jobs"].as_array().map(Vec::len), Some(1));
    assert_eq!(d.get("/healthz"), Value::String("ok\n".into()));
    let doc = d.get("/api/v1/openapi.json");
    assert_eq!(doc["openapi"], "3.1.0");
}

#[test]
fn follow_streams_a_log_until_the_job_ends() {
    let s = Scratch::new("follow");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let id = d.submit(json!({"command": "for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done"}));
    let resp = ureq::get(format!("{}/api/v1/jobs/{id}/logs?follow=true", d.url))
        .header("Authorization", format!("Bearer {}", d.token))
        .call()
        .expect("logs");
    let text = resp.into_body().read_to_string().expect("text");
    assert_eq!(text, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    assert_eq!(d.job(id)["state"], "succeeded");
}

/// Issue 18: `gpool logs` shows both streams by default (a job that died
/// of a traceback printed it to standard error), standard error after a
/// header line; `--stdout` and `--stderr` pick one; `-f` follows both.
#[test]
fn logs_show_both_streams_unless_one_is_asked_for() {
    let scratch = Scratch::new("logs-both");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let id = d.submit(json!({"command": "echo to-out; echo Traceback to-err >&2; exit 1"}));
    d.wait_ended(&[id], Duration::from_secs(60));
    let id_s = id.to_string();
    let (_, out, err) = d.cli(&["logs", &id_s]);
    assert!(out.contains("to-out") && !out.contains("to-err"), "{out}");
    assert!(err.contains(&format!("== job {id} rank 0: stderr ==\nTraceback to-err")), "{err}");
    let (_, out, err) = d.cli(&["logs", &id_s, "--stderr"]);
    assert!(out.contains("Traceback to-err") && !out.contains("to-out") && !err.contains("=="), "{out}{err}");
    let (_, out, _) = d.cli(&["logs", &id_s, "--stdout"]);
    assert_eq!(out.trim(), "to-out");
    // Following ends with the job's status: it failed with exit code 1.
    let (code, out, err) = d.cli_code(&["logs", &id_s, "-f"]);
    assert!(out.contains("to-out") && err.contains("Traceback to-err"), "{out}{err}");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("job {id} failed")), "{err}");
    // Every rank at once, each line marked with its rank.
    let gang = d.submit(json!({"command": "echo out-$RANK; echo err-$RANK >&2", "replicas": 2}));
    d.wait_ended(&[gang], Duration::from_secs(60));
    let (code, out, err) = d.cli_code(&["logs", &gang.to_string(), "--all-ranks"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("[rank 0] out-0\n") && out.contains("[rank 1] out-1\n"), "{out}");
    assert!(err.contains("[rank 0] err-0\n") && err.contains("[rank 1] err-1\n") && !out.contains("err-"), "{err}");
    let (code, out, err) = d.cli_code(&["logs", &gang.to_string(), "-a", "-f", "--stdout"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("[rank 1] out-1\n") && !err.contains("err-"), "{out}{err}");
    // A job that wrote nothing to standard error shows no header.
    let quiet = d.submit(json!({"command": "echo only-out"}));
    d.wait_ended(&[quiet], Duration::from_secs(60));
    let (_, out, err) = d.cli(&["logs", &quiet.to_string()]);
    assert!(out.contains("only-out") && !err.contains("stderr =="), "{out}{err}");
}

/// Issue 18: lists do not end silently. Over 1,000 events, `?after=0`
/// replays every one of them, in order, before the live ones; `gpool queue`
/// over 1,000 jobs says where its limit cut.
#[test]
fn long_histories_are_replayed_whole_and_a_cut_list_says_so() {
    let scratch = Scratch::new("long-lists");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let blocker = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    let specs: Vec<Value> = (0..1200).map(|_| json!({"command": "true", "resources": {"nvidia.com/gpu": 1}})).collect();
    let ids = d.submit_batch(specs);
    let last = *ids.last().expect("ids");
    let mut seqs = Vec::new();
    let mut submitted = 0;
    d.read_events("/api/v1/events?after=0", Duration::from_secs(60), |e| {
        seqs.push(e["seq"].as_u64().expect("seq"));
        submitted += usize::from(e["kind"] == "submitted");
        e["kind"] == "submitted" && e["job"].as_u64() == Some(last)
    });
    assert_eq!(submitted, 1201, "every submitted event, the blocker's too");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "no gap in the replay");
    let (ok, out, err) = d.cli(&["queue", "-o", "json"]);
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("json").as_array().map(Vec::len), Some(1000));
    assert!(err.contains("showing the first 1000 jobs; more match"), "{err}");
    let (ok, out, err) = d.cli(&["queue", "--limit", "2000", "-o", "json"]);
    assert!(ok && !err.contains("showing"), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("json").as_array().map(Vec::len), Some(1201));
    let _ = blocker;
}

/// Issue 18: `gpool cancel -u USER --state pending`, as scancel takes them.
/// (Alice has no Unix account here, so only jobs that never start are hers.)
#[test]
fn cancel_takes_a_user_and_a_state_as_scancel_does() {
    let scratch = Scratch::new("cancel-filters");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let alice = d.token_for("alice");
    let submit = |token: &str, command: &str| {
        let (s, v) = d.req(
            "POST",
            "/api/v1/jobs",
            token,
            Some(&json!({"command": command, "resources": {"nvidia.com/gpu": 1}})),
        );
        assert_eq!(s, 201, "{v}");
        v["ids"][0].as_u64().expect("id")
    };
    let running = submit(&d.token, "sleep 600");
    d.until(&format!("/api/v1/jobs/{running}"), Duration::from_secs(30), |j| j["state"] == "running");
    let admin = d.job(running)["user"].as_str().expect("user").to_string();
    let hers = [submit(&alice, "true"), submit(&alice, "true")];
    let mine = submit(&d.token, "true");
    let as_alice = [("GPOOL_SERVER", d.url.as_str()), ("GPOOL_TOKEN", alice.as_str())];
    let as_admin = [("GPOOL_SERVER", d.url.as_str()), ("GPOOL_TOKEN", d.token.as_str())];
    let (code, _, err) = gpool(&["cancel"], &as_alice);
    assert_ne!(code, Some(0));
    assert!(err.contains("give job ids, or -u USER"), "{err}");
    // A user's filter only ever reaches their own jobs.
    let (code, out, err) = gpool(&["cancel", "--state", "pending"], &as_alice);
    assert_eq!(code, Some(0), "{err}");
    for id in hers {
        assert!(out.contains(&format!("{id}: cancelled")), "{out}{err}");
        assert_eq!(d.job(id)["state"], "cancelled");
    }
    assert_eq!(d.job(mine)["state"], "pending", "not alice's: left alone");
    let (code, _, err) = gpool(&["cancel", "-u", "alice"], &as_admin);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("no job matches"), "{err}");
    let (code, out, err) = gpool(&["cancel", "-u", &admin, "--state", "pending"], &as_admin);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("{mine}: cancelled")), "{out}{err}");
    assert_eq!(d.job(running)["state"], "running", "not pending: left alone");
    let (code, _, err) = gpool(&["cancel", "-u", &admin], &as_admin);
    assert_eq!(code, Some(0), "{err}");
    d.until(&format!("/api/v1/jobs/{running}"), Duration::from_secs(30), |j| j["state"] == "cancelled");
}

/// Issue 18: `gpool submit --wait` follows the job to its end and exits with
/// its status, as `sbatch --wait` does.
#[test]
fn submit_wait_exits_with_the_jobs_status() {
    let scratch = Scratch::new("submit-wait");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let (code, out, err) = d.cli_code(&["submit", "--wait", "--gpus", "1", "--", "sh", "-c", "sleep 0.3; exit 0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let id: u64 = out.trim().parse().expect("the id first");
    assert_eq!(d.job(id)["state"], "succeeded", "it returned only once the job had ended");
    assert!(err.contains(&format!("job {id} succeeded")), "{err}");
    let (code, _, err) = d.cli_code(&["submit", "--wait", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3), "the job's own exit code: {err}");
    assert!(err.contains("failed"), "{err}");
    let (code, _, err) = d.cli_code(&["submit", "--wait", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code, Some(137), "128 + SIGKILL: {err}");
}

/// Issue 18: `~/.config/gpool/config.toml` (here `$GPOOL_CONFIG`) names the
/// server and token; a flag wins over it; a misspelt key is named with its line.
#[test]
fn the_cli_reads_its_server_and_token_from_a_config_file() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("config-file");
    let d = Daemon::start(&scratch.0.join("data"), "1xH100-80GB", &[]);
    let file = scratch.0.join("config.toml");
    std::fs::write(&file, format!("server = \"{}\"\ntoken = \"{}\"\n", d.url, d.token)).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let cfg = file.to_str().expect("utf-8");
    let nowhere = scratch.0.join("no-daemon-here");
    let env = [("GPOOL_CONFIG", cfg), ("GPOOL_DATA_DIR", nowhere.to_str().expect("utf-8"))];
    let (code, out, err) = gpool(&["whoami"], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("admin"), "{out}");
    assert!(!err.contains("warning"), "a private file draws no warning: {err}");
    let (code, _, err) = gpool(&["whoami", "--token", "gp_not_a_token"], &env);
    assert_eq!(code, Some(4), "the flag wins: {err}");
    // Times in the local zone, named; --utc overrides.
    let id = d.submit(json!({"command": "true"}));
    let new_york = [env[0], env[1], ("TZ", "EST5EDT,M3.2.0,M11.1.0")];
    let (code, out, err) = gpool(&["show", &id.to_string()], &new_york);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(" EST\n") || out.contains(" EDT\n"), "local zone named: {out}");
    let (_, out, _) = gpool(&["show", "--utc", &id.to_string()], &new_york);
    assert!(out.contains(" UTC\n") && !out.contains(" EST\n"), "--utc: {out}");
    // The default output format, from the file, and -o winning over it.
    let with_output = format!("server = \"{}\"\ntoken = \"{}\"\noutput = \"json\"\n", d.url, d.token);
    std::fs::write(&file, with_output).expect("write");
    let (code, out, err) = gpool(&["queue", "-a"], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok_and(|v| v.is_array()), "json by default: {out}");
    let (_, out, _) = gpool(&["queue", "-a", "-o", "table"], &env);
    assert!(out.starts_with("    ID"), "-o wins: {out}");
    std::fs::write(&file, format!("server = \"{}\"\ntoken = \"{}\"\n", d.url, d.token)).expect("write");
    std::fs::write(&file, format!("server = \"{}\"\ntokn = \"x\"\n", d.url)).expect("write");
    let (code, _, err) = gpool(&["whoami"], &env);
    assert_eq!(code, Some(1));
    assert!(err.contains("tokn") && err.contains("line 2") && err.contains(cfg), "{err}");
    let (code, _, err) = gpool(&["whoami"], &[("GPOOL_CONFIG", "/nonexistent/gpool.toml")]);
    assert_eq!(code, Some(1));
    assert!(err.contains("/nonexistent/gpool.toml"), "{err}");
}

/// Issue 18: `gpool up --config FILE` takes every flag from a TOML file;
/// the command line wins over it, and a misspelt key is named with its line.
#[test]
fn the_daemon_reads_its_flags_from_a_config_file() {
    let scratch = Scratch::new("daemon-config");
    let file = scratch.0.join("gpool.toml");
    std::fs::write(&file, "simulate_gpus = \"2xH100-80GB\"\nmetrics-auth = true\ngpu-price = [\"H100-80GB=9.5\"]\n")
        .expect("write");
    let cfg = file.to_str().expect("utf-8");
    let d = Daemon::spawn(&scratch.0.join("data"), &["--config", cfg], None);
    let nodes = d.get("/api/v1/nodes");
    assert_eq!(nodes[0]["devices"].as_array().map(Vec::len), Some(2), "simulate-gpus from the file: {nodes}");
    let (status, _) = d.text("/metrics");
    assert_eq!(status, 401, "metrics-auth = true from the file");
    drop(d);
    // The command line wins over the file.
    let d = Daemon::spawn(&scratch.0.join("data2"), &["--config", cfg, "--simulate-gpus", "1xA100-80GB"], None);
    let nodes = d.get("/api/v1/nodes");
    assert_eq!(nodes[0]["devices"].as_array().map(Vec::len), Some(1), "the flag wins: {nodes}");
    drop(d);
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nsimulate-gpu = \"1xA100-80GB\"\n").expect("write");
    let (code, _, err) = gpool(&["up", "--config", cfg], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("simulate-gpu") && err.contains("line 2") && err.contains("simulate-gpus"), "{err}");
}

/// Issue 18: `--log-format json` logs JSON lines with levels; every state
/// change of a job is one line of target `gpool::event`; GPOOL_LOG filters.
#[test]
fn the_daemon_logs_json_lines_with_each_job_change_once() {
    let scratch = Scratch::new("daemon-logs");
    let log = scratch.0.join("daemon.log");
    let d = Daemon::spawn_logged(
        &scratch.0.join("data"),
        &["--simulate-gpus", "1xH100-80GB", "--log-format", "json"],
        &log,
    );
    let id = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 1}}));
    d.wait_ended(&[id], Duration::from_secs(30));
    // The event is committed, then logged: wait for its line rather than sleep.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&log).expect("log");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
            .collect();
        let ended = lines.iter().any(|l| l["job"] == id && l["kind"] == "succeeded");
        if ended || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::yield_now();
    };
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{lines:?}");
    for kind in ["submitted", "started", "succeeded"] {
        let n = lines.iter().filter(|l| l["target"] == "gpool::event" && l["job"] == id && l["kind"] == kind).count();
        assert_eq!(n, 1, "{kind} logged once: {lines:?}");
    }
    drop(d);
    // A bad filter is refused, naming the variable.
    let (code, _, err) =
        gpool(&["up", "--listen", "127.0.0.1:0", "--simulate-gpus", "1xH100-80GB"], &[("GPOOL_LOG", "gpool=loud")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("GPOOL_LOG"), "{err}");
}

/// Issue 18: `gpool top` in a terminal (a pseudo-terminal from `script`)
/// gives the terminal back, raw mode off and the main screen restored, when
/// it is sent SIGTERM or SIGHUP.
#[test]
fn top_restores_the_terminal_on_sigterm_and_sighup() {
    let scratch = Scratch::new("top-signals");
    let d = Daemon::start(&scratch.0.join("data"), "2xH100-80GB", &[]);
    for sig in ["TERM", "HUP"] {
        let typescript = scratch.0.join(format!("top-{sig}.txt"));
        let pid_file = scratch.0.join(format!("top-{sig}.pid"));
        let line = format!(
            "stty cols 120 rows 40; echo $$ > {}; exec {BIN} top --server {} --token {} --interval 1s",
            pid_file.display(),
            d.url,
            d.token
        );
        /// Kills what is left of `script` and top if the test fails midway.
        struct Reap(std::process::Child, std::path::PathBuf);
        impl Drop for Reap {
            fn drop(&mut self) {
                if let Ok(pid) = std::fs::read_to_string(&self.1) {
                    let _ = std::process::Command::new("kill").args(["-KILL", pid.trim()]).status();
                }
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut script = Reap(
            std::process::Command::new("script")
                .args(["-qfec", &line])
                .arg(&typescript)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("script (util-linux) runs"),
            pid_file.clone(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let drawn = || std::fs::read(&typescript).is_ok_and(|b| String::from_utf8_lossy(&b).contains("allocated,"));
        while !drawn() {
            assert!(std::time::Instant::now() < deadline, "top never drew a frame");
            std::thread::yield_now();
        }
        let pid = std::fs::read_to_string(&pid_file).expect("pid").trim().to_string();
        let killed = std::process::Command::new("kill").args([&format!("-{sig}"), &pid]).status().expect("kill");
        assert!(killed.success());
        let status = loop {
            if let Some(s) = script.0.try_wait().expect("wait") {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "top did not end on SIG{sig}");
            std::thread::yield_now();
        };
        assert!(status.success(), "SIG{sig}: top exits cleanly, not killed: {status}");
        let text = String::from_utf8_lossy(&std::fs::read(&typescript).expect("typescript")).to_string();
        let entered = text.find("\x1b[?1049h").expect("top entered the alternate screen");
        let left = text.rfind("\x1b[?1049l").unwrap_or_else(|| panic!("SIG{sig}: the main screen is not restored"));
        assert!(left > entered && text[left..].contains("\x1b[?25h"), "SIG{sig}: cursor shown again after leaving");
    }
}

/// Issue 18: `gpool logs -f` of a pending job waits for it, prints its
/// output, and exits with its status.
#[test]
fn logs_follow_waits_for_a_pending_job_and_exits_with_its_status() {
    let scratch = Scratch::new("logs-follow-status");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let blocker = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    d.until(&format!("/api/v1/jobs/{blocker}"), Duration::from_secs(30), |j| j["state"] == "running");
    let id = d.submit(json!({"command": "echo from-the-job; exit 4", "resources": {"nvidia.com/gpu": 1}}));
    assert_eq!(d.job(id)["state"], "pending");
    let follower = {
        let url = d.url.clone();
        let token = d.token.clone();
        std::thread::spawn(move || {
            gpool(&["logs", "-f", &id.to_string()], &[("GPOOL_SERVER", url.as_str()), ("GPOOL_TOKEN", token.as_str())])
        })
    };
    let (ok, _, err) = d.cli(&["cancel", &blocker.to_string()]);
    assert!(ok, "{err}");
    let (code, out, err) = follower.join().expect("follower");
    assert!(out.contains("from-the-job"), "{out}{err}");
    assert_eq!(code, Some(4), "the job's exit code: {err}");
}
