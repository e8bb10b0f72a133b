//! Issue 38, GPU faults with the real daemon and simulated GPUs: an XID 79
//! injected into GPU 1 under a 2-GPU job takes the GPU out and the job runs
//! again elsewhere within 10 s (restarts 1, not counted as a failure); a
//! 4-GPU job waits naming the quarantine and starts once an operator
//! restores the GPU; an application's XID ends only its job; a quarantine
//! outlives the daemon.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Waits until `check` holds, saying what it saw last if it never does.
fn within(limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(()) => return,
            Err(seen) if Instant::now() > deadline => panic!("not within {limit:?}: {seen}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The GPU indices of a job's current run, sorted.
fn gpus_of(j: &Value) -> Vec<u64> {
    let mut g: Vec<u64> = j["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["gpus"].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x.as_u64())
        .collect();
    g.sort_unstable();
    g
}

fn node_name(d: &Daemon) -> String {
    d.get("/api/v1/nodes")[0]["name"].as_str().expect("a node").to_string()
}

fn quarantine(d: &Daemon, gpu: usize) -> Value {
    let (ok, out, err) = d.cli(&["nodes", "-o", "json"]);
    assert!(ok, "{err}");
    let nodes: Value = serde_json::from_str(&out).expect("JSON");
    nodes[0]["devices"][gpu]["quarantine"].clone()
}

fn cli_ok(d: &Daemon, args: &[&str]) -> String {
    let (ok, out, err) = d.cli(args);
    assert!(ok, "gpool {args:?}: {out}{err}");
    out
}

#[test]
fn an_xid_79_takes_its_gpu_out_and_its_job_runs_again_elsewhere_until_an_operator_restores_it() {
    let s = Scratch::new("gpu-faults");
    let data = s.0.join("data");
    let d = Daemon::start(&data, "4xH100-80GB", &["--sample-interval", "500ms"]);
    let node = node_name(&d);
    let id = d.submit(json!({"command": "sleep 300", "resources": {"nvidia.com/gpu": 2}, "gracePeriod": "5s"}));
    within(Duration::from_secs(30), || {
        let j = d.job(id);
        if j["state"] == "running" && gpus_of(&j) == [0, 1] { Ok(()) } else { Err(j.to_string()) }
    });
    let injected = Instant::now();
    cli_ok(&d, &["nodes", "inject", &node, "--gpu", "1", "--xid", "79"]);
    within(Duration::from_secs(10), || {
        let j = d.job(id);
        let reason = j["reason"].as_str().unwrap_or_default();
        let again = j["state"] == "running" && j["restarts"] == 1 && !gpus_of(&j).contains(&1);
        if again && reason.contains("XID 79") { Ok(()) } else { Err(j.to_string()) }
    });
    let took = injected.elapsed();
    assert_eq!(gpus_of(&d.job(id)).len(), 2);
    let q = quarantine(&d, 1);
    assert!(q["fault"].as_str().is_some_and(|f| f.contains("XID 79")), "{q}");
    assert_eq!(q["action"], format!("job {id} requeued"), "{q}");
    assert!(q["since"].as_str().is_some(), "{q}");
    let shown = cli_ok(&d, &["nodes"]);
    assert!(shown.contains("quarantined: XID 79 (GPU has fallen off the bus)"), "{shown}");
    let (_, text) = d.text("/metrics");
    assert!(text.contains(&format!("gpool_gpu_health{{node=\"{node}\",gpu=\"1\",state=\"quarantined\"}} 1")), "{text}");
    // A 4-GPU job waits and names the quarantine, also once the 2-GPU job is gone.
    let big = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 4}}));
    cli_ok(&d, &["cancel", &id.to_string()]);
    d.wait_ended(&[id], Duration::from_secs(30));
    within(Duration::from_secs(10), || {
        let j = d.job(big);
        let r = j["reason"].as_str().unwrap_or_default();
        if j["state"] == "pending" && r.contains("1 GPU(s) quarantined for faults") {
            Ok(())
        } else {
            Err(j.to_string())
        }
    });
    let health = cli_ok(&d, &["health"]);
    assert!(
        health.contains(&node) && health.contains("XID 79") && health.contains("1 GPU(s) out of service"),
        "{health}"
    );
    // Not for users.
    let user = d.token_for("ana");
    let (status, body) = d.req("POST", &format!("/api/v1/nodes/{node}/restore"), &user, Some(&json!({"gpu": 1})));
    assert_eq!(status, 403, "{body}");
    let (status, body) = d.req("POST", &format!("/api/v1/nodes/{node}/inject"), &d.token, Some(&json!({"gpu": 1})));
    assert_eq!(status, 400, "no fault named: {body}");
    cli_ok(&d, &["nodes", "restore", &node, "--gpu", "1"]);
    d.wait_ended(&[big], Duration::from_secs(30));
    assert_eq!(d.job(big)["state"], "succeeded");
    assert!(quarantine(&d, 1).is_null());
    eprintln!("XID 79 to running again elsewhere: {took:?}");
}

#[test]
fn an_application_xid_ends_its_job_and_a_quarantine_outlives_the_daemon() {
    let s = Scratch::new("gpu-faults-xid13");
    let data = s.0.join("data");
    let mut d = Daemon::start(&data, "2xH100-80GB", &["--sample-interval", "500ms"]);
    let node = node_name(&d);
    let id = d.submit(json!({"command": "sleep 300", "resources": {"nvidia.com/gpu": 1}, "gracePeriod": "5s"}));
    within(Duration::from_secs(30), || {
        let j = d.job(id);
        if j["state"] == "running" && gpus_of(&j) == [0] { Ok(()) } else { Err(j.to_string()) }
    });
    cli_ok(&d, &["nodes", "inject", &node, "--gpu", "0", "--xid", "13"]);
    d.wait_ended(&[id], Duration::from_secs(15));
    let j = d.job(id);
    assert_eq!(j["state"], "failed", "{j}");
    assert!(j["reason"].as_str().is_some_and(|r| r.contains("XID 13 (graphics engine exception)")), "{j}");
    assert!(quarantine(&d, 0).is_null(), "the GPU stays in service");
    // An uncorrectable ECC error takes GPU 1 out; the next daemon keeps it out.
    cli_ok(&d, &["nodes", "inject", &node, "--gpu", "1", "--ecc-uncorrected"]);
    within(Duration::from_secs(10), || {
        let q = quarantine(&d, 1);
        if q["fault"].as_str().is_some_and(|f| f.contains("uncorrectable ECC")) { Ok(()) } else { Err(q.to_string()) }
    });
    d.kill9();
    drop(d);
    let d = Daemon::start(&data, "2xH100-80GB", &["--sample-interval", "500ms"]);
    let q = quarantine(&d, 1);
    assert!(q["fault"].as_str().is_some_and(|f| f.contains("uncorrectable ECC")), "kept across the restart: {q}");
    let two = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 2}}));
    within(Duration::from_secs(10), || {
        let j = d.job(two);
        let r = j["reason"].as_str().unwrap_or_default();
        if r.contains("quarantined") { Ok(()) } else { Err(j.to_string()) }
    });
}

#[test]
fn a_health_check_program_decides_when_a_quarantined_gpu_comes_back() {
    let s = Scratch::new("gpu-faults-check");
    let (script, healthy, seen) = (s.0.join("check.sh"), s.0.join("healthy"), s.0.join("seen"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv > {seen}.$GPOOL_GPU_INDEX\n[ -e {healthy} ] || {{ echo 'dcgmi diag: memory test failed'; exit 1; }}\necho 'dcgmi diag: pass'\n",
            seen = seen.display(),
            healthy = healthy.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let check = script.display().to_string();
    let args = [
        "--sample-interval",
        "500ms",
        "--health-check",
        &check,
        "--health-check-after",
        "1s",
        "--health-check-every",
        "1s",
    ];
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &args);
    let node = node_name(&d);
    cli_ok(&d, &["nodes", "inject", &node, "--gpu", "1", "--ecc-uncorrected"]);
    within(Duration::from_secs(15), || {
        let q = quarantine(&d, 1);
        let said = q["last_check"][1].as_str().unwrap_or_default();
        if said.contains("exited with 1: dcgmi diag: memory test failed") { Ok(()) } else { Err(q.to_string()) }
    });
    // The program saw the GPU it checks, in the daemon's fixed environment.
    let env = std::fs::read_to_string(format!("{}.1", seen.display())).expect("the program ran for GPU 1");
    assert!(env.contains("GPOOL_GPU_INDEX=1") && env.contains("CUDA_VISIBLE_DEVICES=GPU-"), "{env}");
    assert!(!env.contains("GPOOL_JOB_ID"), "{env}");
    std::fs::write(&healthy, "").expect("marker");
    within(Duration::from_secs(15), || {
        let q = quarantine(&d, 1);
        if q.is_null() { Ok(()) } else { Err(q.to_string()) }
    });
    let mut said = String::new();
    d.read_events("/api/v1/events?after=0", Duration::from_secs(10), |e| {
        said = e["message"].as_str().unwrap_or_default().to_string();
        e["kind"] == "gpu_restored"
    });
    assert!(said.contains("the node's health check passed: dcgmi diag: pass"), "{said}");
}

/// Bad requests get an error that says what was wrong (a node with real
/// devices refusing injection is a controller test: `tests/faults.rs`).
#[test]
fn bad_fault_requests_are_refused_saying_why() {
    let s = Scratch::new("gpu-faults-bad");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let node = node_name(&d);
    let (status, body) =
        d.req("POST", &format!("/api/v1/nodes/{node}/inject"), &d.token, Some(&json!({"gpu": 5, "gone": true})));
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("has no GPU 5")), "{body}");
    let (status, body) =
        d.req("POST", &format!("/api/v1/nodes/{node}/inject"), &d.token, Some(&json!({"gpu": 0, "xid": "x"})));
    assert_eq!(status, 400, "{body}");
}

/// A process killed at drop, its standard error in a log.
struct Proc(std::process::Child);

impl Proc {
    fn spawn(args: &[String], log: &std::path::Path, out: std::process::Stdio) -> Proc {
        let child = std::process::Command::new(BIN)
            .args(args)
            .stdout(out)
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("spawn gpool");
        Proc(child)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_gang_across_two_agents_is_requeued_whole_without_the_faulty_gpu_and_a_standby_keeps_it_out() {
    let s = Scratch::new("gpu-faults-cluster");
    let db = format!("sqlite://{}", s.0.join("state.db").display());
    let leader = Daemon::serve(&s.0.join("cp-a"), &["--db", &db, "--lease", "3s"]);
    // A standby on the same database: it leads once the leader is gone.
    let free = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let standby_args: Vec<String> = ["serve", "--db", &db, "--lease", "3s", "--listen", &format!("127.0.0.1:{free}")]
        .iter()
        .map(|x| x.to_string())
        .chain(["--data-dir".to_string(), s.0.join("cp-b").display().to_string()])
        .collect();
    let standby = Proc::spawn(&standby_args, &s.0.join("cp-b.log"), std::process::Stdio::null());
    let (status, v) = leader.req("POST", "/api/v1/tokens", &leader.token, Some(&json!({"user": "*", "role": "node"})));
    assert_eq!(status, 201, "{v}");
    let token_file = s.0.join("node.token");
    std::fs::write(&token_file, v["token"].as_str().expect("token")).expect("token file");
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let servers = format!("{},http://127.0.0.1:{free}", leader.url);
    let agent = |name: &str| -> Proc {
        let args: Vec<String> = [
            "agent",
            "--server",
            &servers,
            "--token-file",
            &token_file.display().to_string(),
            "--node-name",
            name,
            "--simulate-gpus",
            "3xH100-80GB",
            "--sample-interval",
            "500ms",
            "--data-dir",
            &s.0.join(name).display().to_string(),
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        Proc::spawn(&args, &s.0.join(format!("{name}.log")), std::process::Stdio::null())
    };
    let _agents = [agent("a1"), agent("a2")];
    leader.until("/api/v1/nodes", Duration::from_secs(30), |n| {
        n.as_array().is_some_and(|n| n.iter().filter(|x| x["state"] == "up").count() == 2)
    });
    // Two replicas of two GPUs each: three-GPU nodes hold one each.
    let id = leader.submit(json!({
        "command": "sleep 300", "replicas": 2, "resources": {"nvidia.com/gpu": 2}, "gracePeriod": "5s"
    }));
    // Every (node, GPU) the gang holds.
    let placed = |j: &Value| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = j["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| {
                let node = r["node"].as_str().unwrap_or_default().to_string();
                r["gpus"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(move |g| Some((node.clone(), g.as_u64()?)))
            })
            .collect();
        v.sort();
        v
    };
    within(Duration::from_secs(30), || {
        let j = leader.job(id);
        if j["state"] == "running" && placed(&j).len() == 4 { Ok(()) } else { Err(j.to_string()) }
    });
    let (node, gpu) = placed(&leader.job(id))[0].clone();
    let faulty = (node.clone(), gpu);
    let started = Instant::now();
    let (ok, out, err) = leader.cli(&["nodes", "inject", &node, "--gpu", &gpu.to_string(), "--xid", "48"]);
    assert!(ok, "{out}{err}");
    within(Duration::from_secs(15), || {
        let j = leader.job(id);
        let p = placed(&j);
        if j["state"] == "running" && j["restarts"] == 1 && p.len() == 4 && !p.contains(&faulty) {
            Ok(())
        } else {
            Err(j.to_string())
        }
    });
    eprintln!("gang requeued whole and running again without {faulty:?} in {:?}", started.elapsed());
    // The leader goes; the standby takes over and keeps the GPU out.
    drop(leader);
    let b = format!("http://127.0.0.1:{free}");
    let admin = std::fs::read_to_string(s.0.join("cp-a/admin.token")).expect("token").trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        let answer = ureq::get(format!("{b}/api/v1/health"))
            .header("Authorization", format!("Bearer {admin}"))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .ok()
            .filter(|r| r.status() == 200)
            .and_then(|mut r| r.body_mut().read_json::<Value>().ok());
        if let Some(v) = answer {
            break v;
        }
        assert!(Instant::now() < deadline, "the standby never took over");
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = health.as_array().expect("a list");
    assert_eq!(out.len(), 1, "{health}");
    assert_eq!((out[0]["node"].as_str(), out[0]["gpu"].as_u64()), (Some(node.as_str()), Some(gpu)), "{health}");
    drop(standby);
}
