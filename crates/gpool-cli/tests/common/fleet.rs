//! A cluster of real processes for the tests: `gpool serve` and `gpool
//! agent` processes killed at drop, an API client, and the job script that
//! records a job running twice or a GPU held twice.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::BIN;

/// A `gpool serve` or `gpool agent` process, killed at drop.
pub struct Proc {
    pub child: Child,
    /// The URL it printed (control planes), once it printed one.
    pub url: mpsc::Receiver<String>,
}

impl Proc {
    pub fn spawn(args: &[String], log: &Path) -> Proc {
        let err = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
        let mut child = Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(err).spawn().expect("spawn gpool");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Some(u) = line.split_whitespace().find(|w| w.starts_with("http://") || w.starts_with("https://"))
                {
                    let _ = tx.send(u.to_string());
                }
                line.clear();
            }
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
        });
        Proc { child, url: rx }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub struct Api {
    pub base: String,
    pub token: String,
    pub http: ureq::Agent,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        Api::trusting(base, token, None)
    }

    /// An API client that trusts the CA in `ca` (a control plane with `--tls`).
    pub fn trusting(base: &str, token: &str, ca: Option<&Path>) -> Api {
        let mut config =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(30)));
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).expect("the CA");
            let cert = ureq::tls::Certificate::from_pem(&pem).expect("PEM");
            let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![cert]));
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let http: ureq::Agent = config.build().into();
        Api { base: base.into(), token: token.into(), http }
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        let mut r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.body_mut().with_config().limit(64 << 20).read_json().ok()
    }

    /// Whether this control plane leads: it answers, and not from memory
    /// with its database away (`X-Gpool-Store-Away`).
    pub fn leads(&self) -> bool {
        let r = self
            .http
            .get(format!("{}/api/v1/nodes", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call();
        r.is_ok_and(|r| r.status().is_success() && !r.headers().contains_key("x-gpool-store-away"))
    }

    pub fn post(&self, path: &str, body: &Value) -> Value {
        let mut r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .send_json(body)
            .expect("reachable");
        let status = r.status().as_u16();
        let v: Value = r.body_mut().read_json().unwrap_or(Value::Null);
        assert!(status < 300, "POST {path}: {status} {v}");
        v
    }

    /// Every job, all pages.
    pub fn jobs(&self) -> Option<Vec<Value>> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self.get(&format!("/api/v1/jobs?limit=1000&after={after}"))?;
            let jobs = page["jobs"].as_array()?.clone();
            out.extend(jobs);
            match page["next"].as_u64() {
                Some(n) => after = n,
                None => return Some(out),
            }
        }
    }

    pub fn succeeded(&self) -> usize {
        self.jobs().map_or(0, |j| j.iter().filter(|x| x["state"] == "succeeded").count())
    }

    pub fn nodes(&self) -> Vec<Value> {
        self.get("/api/v1/nodes").and_then(|v| v.as_array().cloned()).unwrap_or_default()
    }
}

/// Waits for a condition that other processes bring about; fails after `limit`.
pub fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The job every test job runs: it holds a lock per GPU it was given (and
/// one for itself), so two processes holding a GPU at once, or two runs of
/// one job at once, leave a violation record; then it records its master and
/// its completion.
pub fn job_script(dir: &Path) -> PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        r#"#!/bin/bash
D="$1"
echo "job $GPOOL_JOB_ID attempt $GPOOL_ATTEMPT rank ${RANK:-0} on $GPOOL_NODE"
for g in ${CUDA_VISIBLE_DEVICES//,/ }; do
  exec {fd}>"$D/locks/$GPOOL_NODE-gpu$g"
  flock -n "$fd" || echo "job $GPOOL_JOB_ID: $GPOOL_NODE gpu$g held by another process" >> "$D/violations"
done
exec {me}>"$D/locks/job-$GPOOL_JOB_ID-rank${RANK:-0}"
flock -n "$me" || echo "job $GPOOL_JOB_ID rank ${RANK:-0} runs twice at once" >> "$D/violations"
echo "$GPOOL_JOB_ID $GPOOL_ATTEMPT ${RANK:-0}" >> "$D/started"
if [ -n "$MASTER_ADDR" ]; then echo "$GPOOL_JOB_ID $GPOOL_ATTEMPT $RANK $GPOOL_NODE $MASTER_ADDR $MASTER_PORT $NODE_RANK" >> "$D/masters"; fi
sleep "$2"
echo "$GPOOL_JOB_ID $GPOOL_ATTEMPT ${RANK:-0} $GPOOL_NODE" >> "$D/done"
"#,
    )
    .expect("script");
    std::fs::create_dir_all(dir.join("locks")).expect("locks");
    path
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| t.lines().map(String::from).collect()).unwrap_or_default()
}

/// A node token any agent of the test may use (user `*`), in a file of
/// mode 0600 under `dir`: agents read it there, never from their command line.
pub fn node_token_file(api: &Api, dir: &std::path::Path) -> String {
    let token = api.post("/api/v1/tokens", &json!({"user": "*", "role": "node"}))["token"]
        .as_str()
        .expect("node token")
        .to_string();
    let path = dir.join("node.token");
    std::fs::write(&path, token).expect("write the node token");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    path.display().to_string()
}
