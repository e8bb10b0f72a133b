//! End-to-end tests of `gpool profile` with the real binary and a real
//! py-spy (scripts/test.sh installs it, with NumPy, from PyPI into
//! target/pytools): Python jobs on a simulated GPU are profiled, named
//! input-bound or CPU-bound, and each way profiling cannot work is said.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn pytools(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin").join(name)
}

/// py-spy: `GPOOL_PY_SPY`, else scripts/test.sh's, else the one on `PATH`.
fn py_spy() -> String {
    if let Ok(p) = std::env::var("GPOOL_PY_SPY") {
        return p;
    }
    let local = pytools("py-spy");
    if local.exists() {
        return local.display().to_string();
    }
    let found = std::process::Command::new("sh").args(["-c", "command -v py-spy"]).output().expect("sh");
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "no py-spy: scripts/test.sh installs it (pip, in target/pytools), or set GPOOL_PY_SPY=path"
    );
    path
}

/// A Python with NumPy: scripts/test.sh's, else `python3` if it has NumPy.
fn python() -> String {
    let candidates = [pytools("python").display().to_string(), "python3".to_string()];
    for py in candidates {
        let ok =
            std::process::Command::new(&py).args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return py;
        }
    }
    panic!("no Python with NumPy: scripts/test.sh installs one (pip, in target/pytools)");
}

/// Waits until the job runs and its Python process is up (its first line printed).
fn running(d: &Daemon, id: u64) {
    running_ranks(d, id, 1);
}

fn running_ranks(d: &Daemon, id: u64, ranks: u32) {
    d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(60), |j| j["state"] == "running");
    for rank in 0..ranks {
        ready(d, id, rank);
    }
}

fn ready(d: &Daemon, id: u64, rank: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, out) = d.req("GET", &format!("/api/v1/jobs/{id}/logs?rank={rank}"), &d.token, None);
        if out.as_str().is_some_and(|o| o.contains("ready")) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "job {id} rank {rank} never printed ready: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn share(v: &Value, activity: &str) -> f64 {
    v["shares"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["activity"] == activity))
        .and_then(|x| x["share"].as_f64())
        .unwrap_or(0.0)
}

/// Lets py-spy attach where Yama's ptrace_scope is 1 and the tests do not run as root.
const ALLOW_PTRACE: &str = "import ctypes\nctypes.CDLL(None).prctl(0x59616d61, ctypes.c_ulong(2**64 - 1), 0, 0, 0)\n";

const INPUT_BOUND: &str = r#"
import os, time
class Images:
    def __getitem__(self, i):
        time.sleep(0.005)  # reading and decoding one image
        return i
def train(data):
    total, told = 0, False
    for i in range(10**9):
        total += data[i]
        if i == 0:
            print("ready", flush=True)
        # The opt-in of docs/profiling.md: gpool says when a profile runs.
        if i % 50 == 0 and not told and os.path.exists(os.environ["GPOOL_PROFILE_REQUEST"]):
            told = True
            print("profile requested:", open(os.environ["GPOOL_PROFILE_REQUEST"]).read().strip(), flush=True)
train(Images())
"#;

const CPU_BOUND: &str = r#"
import numpy as np
a = np.random.rand(300, 300)
def step():
    return np.dot(a, a).sum()
print("ready", flush=True)
while True:
    step()
"#;

#[test]
fn a_job_waiting_on_its_data_is_input_bound_and_one_in_numpy_is_cpu_bound() {
    let s = Scratch::new("profile");
    let spy = py_spy();
    let d = Daemon::spawn_with_env(
        &s.0.join("data"),
        &["--simulate-gpus", "2xH100-80GB", "--sample-interval", "1s"],
        &[("GPOOL_PY_SPY", &spy)],
    );
    let py = python();
    std::fs::write(s.0.join("input.py"), format!("{ALLOW_PTRACE}{INPUT_BOUND}")).expect("script");
    std::fs::write(s.0.join("cpu.py"), format!("{ALLOW_PTRACE}{CPU_BOUND}")).expect("script");
    let job = |script: &str, load: &str| {
        json!({
            "command": [py, s.0.join(script).display().to_string()],
            "env": {"GPOOL_SIM_LOAD": load, "OPENBLAS_NUM_THREADS": "1"},
            "resources": {"nvidia.com/gpu": 1},
        })
    };
    let input = d.submit(job("input.py", "util=8 mem=30000"));
    let cpu = d.submit(job("cpu.py", "util=3 mem=2000"));
    running(&d, input);
    running(&d, cpu);

    // The CLI: five seconds, the verdict, and the pictures saved.
    let saved = s.0.join("pictures");
    let (ok, out, err) =
        d.cli(&["profile", &input.to_string(), "--seconds", "5", "--save", saved.to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    assert!(out.contains("input-bound") && out.contains("data loading") && out.contains("try:"), "{out}");
    let flame = std::fs::read_to_string(saved.join("flamegraph.svg")).expect("flame graph saved");
    assert!(flame.contains("<svg") && flame.contains("__getitem__"), "the flame graph shows where the time goes");
    let timeline = std::fs::read_to_string(saved.join("timeline.svg")).expect("timeline saved");
    assert!(timeline.contains("<polyline"), "the timeline draws the GPU's readings");

    let v = d.get(&format!("/api/v1/jobs/{input}/profile"));
    assert_eq!(v["bottleneck"], "input-bound", "{v:#}");
    assert!(share(&v, "data loading") >= 0.6, "at least 60% of main-thread samples in data loading: {v:#}");
    assert!(v["main_thread_samples"].as_u64().is_some_and(|n| n >= 200), "about 100 Hz for 5 s: {v:#}");
    // The simulated GPU declared 8%: read about every 100 ms over the window.
    assert!(v["accelerator_busy_pct"].as_f64().is_some_and(|b| (b - 8.0).abs() < 0.5), "{v:#}");
    assert!(v["replicas"][0]["device_readings"].as_u64().is_some_and(|n| n >= 30), "10 Hz for 5 s: {v:#}");

    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{cpu}/profile?seconds=3"), &d.token, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["bottleneck"], "CPU-bound", "{v:#}");
    // With native frames, the time inside NumPy's matrix product (BLAS) is seen as such.
    let (ok, out, err) = d.cli(&["profile", &cpu.to_string(), "--seconds", "3", "--native", "-o", "json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["bottleneck"].as_str(), v["native"].as_bool()), (Some("CPU-bound"), Some(true)), "{v:#}");
    assert!(share(&v, "CPU compute (NumPy)") >= 0.5, "most samples in BLAS: {v:#}");

    // The job was told while the profile ran (the opt-in for a PyTorch profiler trace).
    let (_, log) = d.req("GET", &format!("/api/v1/jobs/{input}/logs"), &d.token, None);
    assert!(log.as_str().is_some_and(|l| l.contains("profile requested: seconds=5")), "{log}");
    let (_, log) = d.req("GET", &format!("/api/v1/jobs/{cpu}/logs"), &d.token, None);
    assert!(!log.as_str().is_some_and(|l| l.contains("profile requested")), "the CPU job has no such check");

    // The advisor repeats the latest profile.
    let a = d.get(&format!("/api/v1/jobs/{input}/advice?minSpan=1s"));
    assert_eq!(a["profile"]["bottleneck"], "input-bound", "{a:#}");

    // Another user may neither profile the job nor read its profile; bad input is refused.
    let bob = d.token_for("bob");
    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{input}/profile?seconds=1"), &bob, None);
    assert_eq!(status, 404, "{v}");
    let (status, v) = d.req("GET", &format!("/api/v1/jobs/{input}/profile/flamegraph.svg"), &bob, None);
    assert_eq!(status, 404, "{v}");
    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{input}/profile?seconds=0"), &d.token, None);
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("1 to 300")), "{v}");
    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{input}/profile?seconds=soon"), &d.token, None);
    assert_eq!(status, 400, "{v}");

    // A job that ended can no longer be profiled, but its profile stays.
    d.req("POST", &format!("/api/v1/jobs/{input}/cancel"), &d.token, None);
    d.wait_ended(&[input], Duration::from_secs(60));
    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{input}/profile?seconds=1"), &d.token, None);
    assert_eq!(status, 409, "{v}");
    let (ok, out, err) = d.cli(&["profile", &input.to_string(), "--latest"]);
    assert!(ok && out.contains("input-bound"), "{out}{err}");
}

/// A stand-in py-spy that refuses as py-spy does where ptrace is not allowed.
fn refusing_py_spy(dir: &std::path::Path) -> PathBuf {
    let bin = dir.join("py-spy");
    std::fs::write(
        &bin,
        "#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\nexit 1\n",
    )
    .expect("stand-in");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    bin
}

#[test]
fn a_missing_py_spy_a_refused_ptrace_and_a_job_without_python_are_each_said() {
    let s = Scratch::new("profile-refused");
    let refusing = refusing_py_spy(&s.0);
    let cases = [
        ("/nonexistent/py-spy".to_string(), "python", "pip install py-spy"),
        (refusing.display().to_string(), "python", "ptrace is refused"),
        (refusing.display().to_string(), "shell", "no Python process"),
    ];
    for (i, (spy, kind, want)) in cases.into_iter().enumerate() {
        let d = Daemon::spawn_with_env(
            &s.0.join(format!("data{i}")),
            &["--simulate-gpus", "1xH100-80GB"],
            &[("GPOOL_PY_SPY", &spy)],
        );
        let command = match kind {
            "python" => json!(["python3", "-c", "import time\nprint('ready', flush=True)\nwhile True: time.sleep(1)"]),
            _ => json!("echo ready; while true; do sleep 1; done"),
        };
        let id = d.submit(json!({"command": command, "resources": {"nvidia.com/gpu": 1}}));
        running(&d, id);
        let (code, out, err) = d.cli_code(&["profile", &id.to_string(), "--seconds", "1"]);
        assert_ne!(code, Some(0), "{out}");
        assert!(err.contains(want) && err.contains("rank 0 on node"), "{kind} with {spy}: {err}");
        let (status, v) = d.req("GET", &format!("/api/v1/jobs/{id}/profile"), &d.token, None);
        assert_eq!(status, 404, "a failed profile is not kept: {v}");
    }
}

/// Kills the agent it holds when dropped.
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_job_on_two_nodes_is_profiled_on_each_through_the_agent_protocol() {
    let s = Scratch::new("profile-nodes");
    let spy = py_spy();
    // gpool up's own node has one GPU; a remote agent brings one more.
    let d = Daemon::spawn_with_env(&s.0.join("data"), &["--simulate-gpus", "1xH100-80GB"], &[("GPOOL_PY_SPY", &spy)]);
    let (status, t) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": "*", "role": "node"})));
    assert_eq!(status, 201, "{t}");
    let token_file = s.0.join("node.token");
    std::fs::write(&token_file, t["token"].as_str().expect("token")).expect("token file");
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let agent = std::process::Command::new(BIN)
        .args(["agent", "--server", &d.url, "--token-file"])
        .arg(&token_file)
        .args(["--node-name", "far", "--simulate-gpus", "1xH100-80GB", "--data-dir"])
        .arg(s.0.join("agent"))
        .env("GPOOL_PY_SPY", &spy)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(s.0.join("agent.log")).expect("log"))
        .spawn()
        .expect("start the agent");
    let _agent = Agent(agent);
    d.until("/api/v1/nodes", Duration::from_secs(30), |n| {
        n.as_array().is_some_and(|n| n.iter().any(|x| x["name"] == "far" && x["state"] == "up"))
    });
    std::fs::write(s.0.join("input.py"), format!("{ALLOW_PTRACE}{INPUT_BOUND}")).expect("script");
    let id = d.submit(json!({
        "command": [python(), s.0.join("input.py").display().to_string()],
        "replicas": 2,
        "env": {"GPOOL_SIM_LOAD": "util=12 mem=1000"},
        "resources": {"nvidia.com/gpu": 1},
    }));
    running_ranks(&d, id, 2);
    let (status, v) = d.req("POST", &format!("/api/v1/jobs/{id}/profile?seconds=3"), &d.token, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["bottleneck"], "input-bound", "{v:#}");
    let replicas = v["replicas"].as_array().expect("replicas");
    let nodes: std::collections::BTreeSet<&str> = replicas.iter().filter_map(|r| r["node"].as_str()).collect();
    assert_eq!((replicas.len(), nodes.len()), (2, 2), "one replica on each node: {v:#}");
    for r in replicas {
        assert!(r["stack_samples"].as_u64().is_some_and(|n| n >= 100) && r["error"].is_null(), "{r}");
        assert!(r["device_readings"].as_u64().is_some_and(|n| n >= 15), "{r}");
    }
    let (status, flame) = d.req("GET", &format!("/api/v1/jobs/{id}/profile/flamegraph.svg"), &d.token, None);
    assert_eq!(status, 200);
    let flame = flame.as_str().expect("SVG text");
    assert!(flame.contains("rank 0 (") && flame.contains("rank 1 ("), "each rank under its own root");
    d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
    d.wait_ended(&[id], Duration::from_secs(60));
}
