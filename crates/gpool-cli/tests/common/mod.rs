//! A harness that runs the real `gpool` binary: a daemon on loopback with a
//! simulated inventory, and HTTP helpers.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub mod fleet;
pub mod image;
/// The chaos suite's cuttable TCP proxy, shared rather than copied.
#[path = "../../../gpool-devtools/src/chaos/proxy.rs"]
pub mod proxy;
pub mod term;

pub const BIN: &str = env!("CARGO_BIN_EXE_gpool");

/// The `gpool-devtools` binary (the chaos suite, the replica demo), next to
/// [`BIN`]. A test can name only its own package's binaries
/// (`CARGO_BIN_EXE_gpool`), and `gpool` must not depend on its developer
/// tools, so the first call builds the other package's binary into the same
/// target directory and profile with the cargo that runs the tests: up to
/// date at once when `cargo test --workspace` has built it already, and
/// never stale after a change to gpool-devtools (issue 37).
pub fn devtools() -> &'static str {
    static DEVTOOLS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEVTOOLS.get_or_init(|| {
        let exe = Path::new(BIN).with_file_name("gpool-devtools");
        // BIN is <target>/<profile>/gpool, or <target>/<triple>/<profile>/gpool.
        let profile_dir = Path::new(BIN).parent().expect("the binary's directory");
        let target_dir = profile_dir
            .ancestors()
            .find(|d| d.join("CACHEDIR.TAG").is_file())
            .or(profile_dir.parent())
            .expect("cargo's target directory");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut build = Command::new(cargo);
        // Not this test's package variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, …): a
        // build script that watches one (ring's) would run again, and everything above it
        // be rebuilt, in this build and in the next plain `cargo build`.
        let package_vars = ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_TARGET_TMPDIR"];
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| package_vars.iter().any(|p| k.starts_with(p))) {
                build.env_remove(k);
            }
        }
        build
            .args(["build", "--quiet", "-p", "gpool-devtools", "--bin", "gpool-devtools", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                build.arg("--release");
            }
            Some(other) => {
                build.args(["--profile", other]);
            }
        }
        if let Some(triple) = profile_dir.parent().filter(|p| *p != target_dir).and_then(Path::file_name) {
            build.arg("--target").arg(triple);
        }
        let status = build.status().expect("run cargo build -p gpool-devtools");
        assert!(status.success() && exe.is_file(), "cargo build -p gpool-devtools: {status}, {}", exe.display());
        exe.display().to_string()
    })
}

/// A scratch directory removed at drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("gpool-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // GPOOL_KEEP_SCRATCH=1 keeps it (the logs of a failed test).
        if std::env::var_os("GPOOL_KEEP_SCRATCH").is_some() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_terminal(e: &Value) -> bool {
    matches!(e["kind"].as_str(), Some("succeeded" | "failed" | "cancelled" | "timed_out"))
}

/// A running `gpool up`.
pub struct Daemon {
    pub child: Child,
    pub url: String,
    pub token: String,
    pub data: PathBuf,
    agent: ureq::Agent,
}

/// `gpool up ARGS` on a free port, with `path_first` put in front of `PATH`.
fn up_command(data: &Path, args: &[&str], path_first: Option<&Path>) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["up", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data).args(args);
    if let Some(dir) = path_first {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", dir.display()));
    }
    cmd
}

impl Daemon {
    /// Starts a daemon on a simulated inventory and waits for the line saying where it listens.
    pub fn start(data: &Path, gpus: &str, extra: &[&str]) -> Daemon {
        let mut args = vec!["--simulate-gpus", gpus];
        args.extend_from_slice(extra);
        Daemon::spawn(data, &args, None)
    }

    /// Starts `gpool up ARGS`, with `path_first` put in front of `PATH` (a stand-in `nvidia-smi`).
    pub fn spawn(data: &Path, args: &[&str], path_first: Option<&Path>) -> Daemon {
        Daemon::from_command(up_command(data, args, path_first), data)
    }

    /// `gpool up ARGS` with these variables set in the daemon's environment.
    pub fn spawn_with_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = up_command(data, args, None);
        cmd.envs(env.iter().copied());
        Daemon::from_command(cmd, data)
    }

    /// `spawn`, with the daemon's standard error (its log) written to `log`.
    pub fn spawn_logged(data: &Path, args: &[&str], log: &Path) -> Daemon {
        Daemon::spawn_logged_with_path(data, args, None, log)
    }

    /// `spawn` with `path_first`, and the daemon's log written to `log`.
    pub fn spawn_logged_with_path(data: &Path, args: &[&str], path_first: Option<&Path>, log: &Path) -> Daemon {
        let mut cmd = up_command(data, args, path_first);
        cmd.stderr(std::fs::File::create(log).expect("log file"));
        Daemon::from_command(cmd, data)
    }

    /// Starts `gpool serve ARGS` (a control plane with no node of its own; SQLite in DATA).
    pub fn serve(data: &Path, args: &[&str]) -> Daemon {
        Daemon::serve_with(data, args, Command::new(BIN))
    }

    /// `serve`, from a prepared command of the binary (its environment set).
    pub fn serve_with(data: &Path, args: &[&str], mut cmd: Command) -> Daemon {
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data).args(args);
        Daemon::from_command(cmd, data)
    }

    /// Starts `gpool up ARGS` with a hard limit of `files` open files (soft
    /// and hard, `ulimit -n`): the daemon cannot raise it, so the limit is real.
    pub fn spawn_with_file_limit(data: &Path, args: &[&str], files: u64) -> Daemon {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(BIN)
            .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(args);
        Daemon::from_command(cmd, data)
    }

    /// Starts a prepared `gpool up` command and waits for the line saying where it listens.
    fn from_command(mut cmd: Command, data: &Path) -> Daemon {
        // Standard error goes where the command says (spawn_logged), else to the test's.
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start gpool up");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("first line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        // Keep draining stdout so the daemon never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
        let mut config =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(60)));
        // A daemon started with --tls: trust its CA.
        if let Ok(pem) = std::fs::read(data.join("tls/ca.pem")) {
            let cert = ureq::tls::Certificate::from_pem(&pem).expect("the daemon's CA");
            let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![cert]));
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let agent: ureq::Agent = config.build().into();
        Daemon { child, url, token, data: data.to_path_buf(), agent }
    }

    /// `kill -9`: no chance to clean anything up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn req(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {token}");
        let resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", &auth).call(),
            ("PUT", Some(b)) => self.agent.put(&url).header("Authorization", &auth).send_json(b),
            (_, Some(b)) => self.agent.post(&url).header("Authorization", &auth).send_json(b),
            (_, None) => self.agent.post(&url).header("Authorization", &auth).send_empty(),
        };
        let mut resp = resp.expect("daemon reachable");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub fn raw(&self, path: &str, token: &str, content_type: &str, body: Vec<u8>) -> (u16, String) {
        let mut resp = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", content_type)
            .send(&body[..])
            .expect("daemon reachable");
        (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default())
    }

    pub fn get(&self, path: &str) -> Value {
        let (s, v) = self.req("GET", path, &self.token, None);
        assert_eq!(s, 200, "GET {path}: {v}");
        v
    }

    pub fn submit(&self, spec: Value) -> u64 {
        let (s, v) = self.req("POST", "/api/v1/jobs", &self.token, Some(&spec));
        assert_eq!(s, 201, "submit {spec}: {v}");
        v["ids"][0].as_u64().expect("id")
    }

    pub fn submit_batch(&self, specs: Vec<Value>) -> Vec<u64> {
        let (s, v) = self.req("POST", "/api/v1/jobs", &self.token, Some(&serde_json::json!({ "jobs": specs })));
        assert_eq!(s, 201, "batch: {v}");
        v["ids"].as_array().expect("ids").iter().filter_map(Value::as_u64).collect()
    }

    pub fn job(&self, id: u64) -> Value {
        self.get(&format!("/api/v1/jobs/{id}"))
    }

    /// Reads the event stream at `path` (SSE) and hands each event to `done`
    /// until it says so; fails after `limit`.
    pub fn read_events(&self, path: &str, limit: Duration, mut done: impl FnMut(Value) -> bool) {
        let resp = self
            .agent
            .get(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .config()
            .timeout_global(Some(limit))
            .build()
            .call();
        let Ok(mut resp) = resp else { panic!("cannot open the event stream") };
        let mut reader = BufReader::new(resp.body_mut().as_reader());
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => panic!("{path}: what was awaited did not happen within {limit:?}"),
                Ok(_) => {}
            }
            let Some(data) = line.trim_end().strip_prefix("data:") else { continue };
            let Ok(e) = serde_json::from_str::<Value>(data.trim()) else { continue };
            if done(e) {
                return;
            }
        }
    }

    /// Reads the event stream (history from the start, then live) until every
    /// job in `ids` has had a terminal event; fails after `limit`.
    pub fn wait_ended(&self, ids: &[u64], limit: Duration) {
        let mut left: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
        if left.is_empty() {
            return;
        }
        self.read_events("/api/v1/events?after=0", limit, |e| {
            if is_terminal(&e)
                && let Some(j) = e["job"].as_u64()
            {
                left.remove(&j);
            }
            left.is_empty()
        });
    }

    /// A job's events from the start, read from the event stream until it ended.
    pub fn history(&self, job: u64, limit: Duration) -> Vec<Value> {
        let mut out = Vec::new();
        self.read_events(&format!("/api/v1/events?after=0&job={job}"), limit, |e| {
            let end = is_terminal(&e);
            out.push(e);
            end
        });
        out
    }

    /// GETs a text body without a token (`/metrics`).
    pub fn text(&self, path: &str) -> (u16, String) {
        let mut resp = self.agent.get(format!("{}{path}", self.url)).call().expect("daemon reachable");
        (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// Runs the `gpool` CLI against this daemon; returns (exit code, stdout, stderr).
    pub fn cli_code(&self, args: &[&str]) -> (Option<i32>, String, String) {
        gpool(args, &[("GPOOL_SERVER", &self.url), ("GPOOL_TOKEN", &self.token)])
    }

    /// Runs the `gpool` CLI against this daemon; returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(BIN)
            .args(args)
            .env("GPOOL_SERVER", &self.url)
            .env("GPOOL_TOKEN", &self.token)
            .output()
            .expect("run gpool");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Asks `GET path` until `done` accepts the answer; fails after `limit`.
    /// For conditions that depend on other processes (samplers, scrapers):
    /// it waits for the condition, it does not time anything.
    pub fn until(&self, path: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let v = self.get(path);
            if done(&v) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "GET {path} never satisfied the condition: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn token_for(&self, user: &str) -> String {
        let (s, v) =
            self.req("POST", "/api/v1/tokens", &self.token, Some(&serde_json::json!({"user": user, "team": "ml"})));
        assert_eq!(s, 201, "{v}");
        v["token"].as_str().expect("token").to_string()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        // Jobs outlive their daemon by design; a test must not leave them running.
        for pid in processes_of(&self.data, None) {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
    }
}

/// Runs the `gpool` CLI with these of its variables set and the others
/// (`GPOOL_SERVER`, `GPOOL_TOKEN`, `GPOOL_DATA_DIR`, `GPOOL_SOCKET`) unset; returns (exit code, stdout, stderr).
pub fn gpool(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in ["GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_DATA_DIR", "GPOOL_SOCKET", "GPOOL_CONFIG"] {
        cmd.env_remove(var);
    }
    let out = cmd.envs(env.iter().copied()).output().expect("run gpool");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Processes started by jobs of the daemon using `data` (job `id`, or any job with `None`).
/// Tests run in parallel and every daemon numbers its jobs from 1, so the job
/// id alone is not enough: a job's checkpoint directory lies in its daemon's data directory.
pub fn processes_of(data: &Path, id: Option<u64>) -> Vec<i32> {
    let job = id.map(|i| format!("GPOOL_JOB_ID={i}"));
    let dir = format!("GPOOL_CHECKPOINT_DIR={}/", data.display());
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/environ"))
                        .map(|env| {
                            let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                            vars.iter().any(|kv| kv.starts_with(dir.as_bytes()))
                                && job.as_ref().is_none_or(|j| vars.contains(&j.as_bytes()))
                        })
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Unix account that lives as long as the test (`userdel -r` at drop).
pub struct User {
    pub name: String,
    pub uid: u32,
}

impl User {
    pub fn create(name: &str) -> User {
        let _ = Command::new("userdel").args(["-r", name]).output();
        let out = Command::new("useradd").args(["-m", "-s", "/bin/sh", name]).output().expect("run useradd");
        assert!(
            out.status.success(),
            "this test creates Unix users, which needs root and useradd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let uid = String::from_utf8_lossy(&Command::new("id").args(["-u", name]).output().expect("id").stdout)
            .trim()
            .parse()
            .expect("a uid");
        User { name: name.into(), uid }
    }
}

impl User {
    /// Runs the `gpool` CLI as this user (through `setpriv`, with its
    /// groups), with these of its variables set and the others unset.
    pub fn gpool(&self, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid)).args([&format!("--regid={}", self.name), "--init-groups", "--", BIN]);
        cmd.args(args).env("HOME", format!("/home/{}", self.name));
        for var in ["GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_DATA_DIR", "GPOOL_SOCKET", "GPOOL_CONFIG"] {
            cmd.env_remove(var);
        }
        let out = cmd.envs(env.iter().copied()).output().expect("run setpriv");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("pkill").args(["-KILL", "-u", &self.name]).output();
        let _ = Command::new("userdel").args(["-r", &self.name]).output();
    }
}
