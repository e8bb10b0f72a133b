//! Issue 12: jobs run as their submitters' Unix accounts. Two real users
//! created by the test (`useradd`; the test needs root, as the deployment
//! it checks does): each one's jobs run with its uid, groups and home, and
//! cannot read the other's logs or checkpoints, the daemon's state or any
//! token. A user without an account on the node gets a job that fails
//! saying so.

mod common;

use std::time::Duration;

use common::{Daemon, Scratch, User};
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
