//! Issue 12: jobs run as their submitters' Unix accounts. Two real users
//! created by the test (`useradd`; the test needs root, as the deployment
//! it checks does): each one's jobs run with its uid, groups and home, and
//! cannot read the other's logs or checkpoints, the daemon's state or any
//! token. A user without an account on the node gets a job that fails
//! saying so.

mod common;

use std::time::Duration;

use common::{Daemon, Scratch, User, gpool};
use serde_json::json;

#[test]
fn each_users_jobs_run_as_that_user_and_cannot_read_the_others_files() {
    let scratch = Scratch::new("multiuser");
    let tag = std::process::id() % 100_000;
    let (alice, bob) = (User::create(&format!("gpa{tag}")), User::create(&format!("gpb{tag}")));
    let data = scratch.0.join("data");
    let d = Daemon::start(&data, "2xH100-80GB", &["--run-as", "user"]);
    let token = |u: &User| {
        let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": u.name, "team": "t"})));
        assert_eq!(s, 201, "{v}");
        v["token"].as_str().expect("secret").to_string()
    };
    let (ta, tb) = (token(&alice), token(&bob));
    let submit = |t: &str, command: String| {
        let (s, v) =
            d.req("POST", "/api/v1/jobs", t, Some(&json!({"command": command, "resources": {"nvidia.com/gpu": 1}})));
        assert_eq!(s, 201, "{v}");
        v["ids"][0].as_u64().expect("id")
    };
    // Alice's job says who it is and leaves a secret in its checkpoint directory and its log.
    let a = submit(
        &ta,
        "echo uid=$(id -u) home=$HOME user=$USER pwd=$(pwd); echo alice-secret > $GPOOL_CHECKPOINT_DIR/s; \
         echo 50 > $GPOOL_SIM_LOAD_FILE && echo load-declared; echo alice-log-secret"
            .into(),
    );
    d.wait_ended(&[a], Duration::from_secs(60));
    assert_eq!(d.job(a)["state"], "succeeded", "{}", d.job(a));
    let out = std::fs::read_to_string(data.join(format!("jobs/{a}/rank0.out"))).expect("alice's log");
    let home = format!("/home/{}", alice.name);
    assert!(
        out.contains(&format!("uid={} home={home} user={} pwd={home}", alice.uid, alice.name)),
        "alice's job runs as alice, at home: {out}"
    );
    assert!(out.contains("load-declared"), "a job declares its simulated GPU load as its own user: {out}");
    // Bob's job tries to read everything that is not his.
    let paths = [
        data.join(format!("jobs/{a}/checkpoint/s")),
        data.join(format!("jobs/{a}/rank0.out")),
        data.join("state.db"),
        data.join("admin.token"),
        data.join("jobs"),
    ];
    let probes: Vec<String> = paths
        .iter()
        .map(|p| {
            // A directory is read by listing it, a file by reading it.
            let read = if p.is_dir() { "ls" } else { "cat" };
            format!("if {read} {0} >/dev/null 2>&1; then echo READ {0}; else echo DENIED {0}; fi", p.display())
        })
        .collect();
    let b = submit(&tb, format!("echo uid=$(id -u); {}", probes.join("; ")));
    d.wait_ended(&[b], Duration::from_secs(60));
    let out = std::fs::read_to_string(data.join(format!("jobs/{b}/rank0.out"))).expect("bob's log");
    assert!(out.contains(&format!("uid={}", bob.uid)), "{out}");
    assert!(!out.contains("READ"), "bob read what is not his: {out}");
    assert_eq!(out.matches("DENIED").count(), paths.len(), "{out}");
    // A user with no account on the node: the job fails, saying why.
    let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": "no-such-account-gp"})));
    assert_eq!(s, 201, "{v}");
    let c = submit(v["token"].as_str().expect("secret"), "true".into());
    d.wait_ended(&[c], Duration::from_secs(60));
    let j = d.job(c);
    assert_eq!(j["state"], "failed", "{j}");
    let events = d.history(c, Duration::from_secs(10));
    assert!(
        events.iter().any(|e| e["message"].as_str().is_some_and(|m| m.contains("has no Unix account"))),
        "{events:?}"
    );
}

/// On the daemon's machine the CLI needs no token: over the daemon's Unix
/// socket the kernel names the caller, who cannot pass for anyone else. A
/// user's jobs run as that user, who sees and cancels only those; the
/// identity file makes another user an admin and gives a team by Unix
/// group; a token, if one is given, speaks instead; and a single-user
/// daemon lets no other user through its socket.
#[test]
fn the_cli_identifies_a_local_user_over_the_unix_socket_with_no_token() {
    let scratch = Scratch::new("local-socket");
    let tag = std::process::id() % 100_000;
    let (ana, bo) = (User::create(&format!("gpc{tag}")), User::create(&format!("gpd{tag}")));
    let ids = scratch.0.join("identities.yaml");
    // useradd gives each account a group of its own name: ana's team comes from hers.
    std::fs::write(
        &ids,
        format!(
            "admins:\n  users: [{}]\nteams:\n  {}: vision\naccounts:\n  ana@example.com: {}\n",
            bo.name, ana.name, ana.name
        ),
    )
    .expect("identity file");
    let data = scratch.0.join("data");
    let d = Daemon::start(&data, "2xH100-80GB", &["--run-as", "user", "--identities", ids.to_str().expect("utf-8")]);
    let dir = data.to_str().expect("utf-8");
    let env = [("GPOOL_DATA_DIR", dir)];
    let (code, out, err) = ana.gpool(&["whoami"], &env);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("{} (team vision, user)", ana.name));
    let (code, out, err) = bo.gpool(&["whoami"], &env);
    assert_eq!((code, out.trim()), (Some(0), format!("{} (team default, admin)", bo.name).as_str()), "{err}");
    // Ana's job runs as ana.
    let (code, out, err) = ana.gpool(&["submit", "--gpus", "1", "--", "sh", "-c", "echo uid=$(id -u)"], &env);
    assert_eq!(code, Some(0), "{err}");
    let mine: u64 = out.trim().parse().expect("a job id");
    d.wait_ended(&[mine], Duration::from_secs(60));
    let log = std::fs::read_to_string(data.join(format!("jobs/{mine}/rank0.out"))).expect("log");
    assert!(log.contains(&format!("uid={}", ana.uid)), "{log}");
    // Someone else's job: ana neither sees nor cancels it; bo, an admin by the identity file, does.
    let other = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    let (code, out, _) = ana.gpool(&["queue", "-a", "-o", "json"], &env);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let jobs = v.as_array().or_else(|| v["jobs"].as_array()).expect("a list of jobs");
    let listed: Vec<u64> = jobs.iter().filter_map(|j| j["id"].as_u64()).collect();
    assert!(listed.contains(&mine) && !listed.contains(&other), "ana sees her jobs only: {out}");
    let (code, _, err) = ana.gpool(&["cancel", &other.to_string()], &env);
    assert_ne!(code, Some(0), "ana cancelled someone else's job");
    assert!(err.contains("not found"), "{err}");
    assert_eq!(d.job(other)["state"], "running");
    let (code, _, err) = bo.gpool(&["cancel", &other.to_string()], &env);
    assert_eq!(code, Some(0), "an admin by the identity file cancels any job: {err}");
    // A token's user runs as the Unix account the identity file maps it to.
    let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": "ana@example.com"})));
    assert_eq!(s, 201, "{v}");
    let remote = v["token"].as_str().expect("secret");
    let (s, v) = d.req(
        "POST",
        "/api/v1/jobs",
        remote,
        Some(&json!({"command": "echo uid=$(id -u)", "resources": {"nvidia.com/gpu": 1}})),
    );
    assert_eq!(s, 201, "{v}");
    let mapped = v["ids"][0].as_u64().expect("id");
    d.wait_ended(&[mapped], Duration::from_secs(60));
    let log = std::fs::read_to_string(data.join(format!("jobs/{mapped}/rank0.out"))).expect("log");
    assert!(log.contains(&format!("uid={}", ana.uid)), "ana@example.com's job runs as {}: {log}", ana.name);
    // A token given is the caller instead, and a bad one is refused, not ignored.
    let (code, _, err) = ana.gpool(&["whoami"], &[("GPOOL_DATA_DIR", dir), ("GPOOL_TOKEN", "gp_not-a-token")]);
    assert_ne!(code, Some(0));
    assert!(err.contains("invalid token"), "{err}");
    drop(d);
    assert!(!data.join("gpool.sock").exists(), "the socket goes with its daemon");

    // A single-user daemon (its jobs all run as its own account) keeps its socket to itself.
    let single = scratch.0.join("single");
    let d = Daemon::start(&single, "1xH100-80GB", &["--run-as", "daemon"]);
    let env = [("GPOOL_DATA_DIR", single.to_str().expect("utf-8"))];
    let (code, _, err) = ana.gpool(&["whoami"], &env);
    assert_ne!(code, Some(0), "another user reached a single-user daemon");
    assert!(err.contains("ermission denied"), "{err}");
    let (code, out, err) = gpool(&["whoami"], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("admin"), "the daemon's own account is its admin: {out}");
    drop(d);
}

/// py-spy: `GPOOL_PY_SPY`, else scripts/test.sh's in target/pytools.
fn py_spy() -> String {
    std::env::var("GPOOL_PY_SPY").unwrap_or_else(|_| {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin/py-spy");
        assert!(p.exists(), "no py-spy at {}: scripts/test.sh installs it, or set GPOOL_PY_SPY", p.display());
        p.display().to_string()
    })
}

/// A job running as its user can read the request file a profile posts
/// (docs/profiling.md's opt-in), though the daemon's files are private.
#[test]
fn a_job_running_as_its_user_sees_its_profile_request() {
    let scratch = Scratch::new("multiuser-profile");
    let user = User::create(&format!("gpp{}", std::process::id() % 100_000));
    let spy = py_spy();
    let d = Daemon::spawn_with_env(
        &scratch.0.join("data"),
        &["--simulate-gpus", "1xH100-80GB", "--run-as", "user"],
        &[("GPOOL_PY_SPY", &spy)],
    );
    let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": user.name, "team": "t"})));
    assert_eq!(s, 201, "{v}");
    let token = v["token"].as_str().expect("secret").to_string();
    let script = "import os, time\nr = os.environ['GPOOL_PROFILE_REQUEST']\nprint('ready', flush=True)\n\
                  while not os.path.exists(r): time.sleep(0.01)\nprint('request:', open(r).read().strip(), flush=True)\n\
                  time.sleep(600)\n";
    let (s, v) = d.req(
        "POST",
        "/api/v1/jobs",
        &token,
        // The system's Python: one under root's home (pyenv) is not the user's to run.
        Some(&json!({"command": ["/usr/bin/python3", "-c", script], "resources": {"nvidia.com/gpu": 1}})),
    );
    assert_eq!(s, 201, "{v}");
    let id = v["ids"][0].as_u64().expect("id");
    let log = |d: &Daemon| {
        d.req("GET", &format!("/api/v1/jobs/{id}/logs"), &d.token, None).1.as_str().unwrap_or("").to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !log(&d).contains("ready") {
        assert!(std::time::Instant::now() < deadline, "never ready: {} {}", log(&d), d.job(id));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, v) = d.req("POST", &format!("/api/v1/jobs/{id}/profile?seconds=2"), &token, None);
    assert!(s == 200 || s == 422, "{s} {v}");
    // A refusal (422: py-spy cannot attach here) can come back before the job
    // has looked for its request again (every 10 ms): wait for its line.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !log(&d).contains("request: seconds=2") {
        assert!(
            std::time::Instant::now() < deadline,
            "the job, running as {}, read its request: {}",
            user.name,
            log(&d)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
    d.wait_ended(&[id], Duration::from_secs(60));
}
