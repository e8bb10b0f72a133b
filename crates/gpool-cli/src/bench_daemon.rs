//! `gpool bench jobs` and `gpool bench submit`: the daemon end to end.
//!
//! Both start a real `gpool up` (this binary) on a scratch data directory
//! with a simulated inventory, talk to it over HTTP on loopback, and stop it.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

pub(crate) struct Daemon {
    child: Child,
    url: String,
    token: String,
    agent: ureq::Agent,
}

/// Scratch directories of the runs, removed when the benchmark ends (not between
/// runs: deleting thousands of inodes right before a run slows ext4's inode allocation).
pub(crate) struct Scratch(pub(crate) Vec<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Daemon {
    fn start(gpus: &str, scratch: &mut Scratch) -> anyhow::Result<Daemon> {
        Daemon::start_with(gpus, &[], scratch)
    }

    fn start_with(gpus: &str, extra: &[&str], scratch: &mut Scratch) -> anyhow::Result<Daemon> {
        let dir = std::env::temp_dir().join(format!("gpool-bench-{}-{}", std::process::id(), scratch.0.len()));
        let _ = std::fs::remove_dir_all(&dir);
        scratch.0.push(dir.clone());
        Daemon::start_in(&dir, gpus, extra)
    }

    /// Starts `gpool up` on `dir` as it is (a state prepared beforehand).
    pub(crate) fn start_in(dir: &std::path::Path, gpus: &str, extra: &[&str]) -> anyhow::Result<Daemon> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["up", "--simulate-gpus", gpus, "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start gpool up")?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .context("the daemon did not say where it listens")?
            .to_string();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        let token = std::fs::read_to_string(dir.join("admin.token"))?.trim().to_string();
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Ok(Daemon { child, url, token, agent })
    }

    fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let mut r = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .send_json(body)?;
        let status = r.status().as_u16();
        let v: Value = r.body_mut().read_json()?;
        if status >= 300 {
            bail!("{path}: HTTP {status}: {v}");
        }
        Ok(v)
    }

    /// Follows the event stream until `n` jobs have ended; returns when the last one did.
    fn wait_for(&self, n: usize, from_seq: u64) -> anyhow::Result<Instant> {
        let mut r = self
            .agent
            .get(format!("{}/api/v1/events?after={from_seq}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()?;
        let mut reader = BufReader::new(r.body_mut().as_reader());
        let mut line = String::new();
        let mut ended = 0;
        while ended < n {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                bail!("the event stream ended after {ended} of {n} jobs");
            }
            if line.starts_with("event: succeeded") || line.starts_with("event: failed") {
                ended += 1;
            }
        }
        Ok(Instant::now())
    }
}

impl Daemon {
    pub(crate) fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let mut r = self
            .agent
            .get(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()?;
        if !r.status().is_success() {
            let status = r.status().as_u16();
            bail!("{path}: HTTP {status}: {}", r.body_mut().read_to_string().unwrap_or_default());
        }
        Ok(r.body_mut().with_config().limit(64 * 1024 * 1024).read_to_string()?)
    }

    /// CPU time (user + system, seconds) of the daemon's threads named `name`, or of all with `None`.
    fn cpu_secs(&self, name: Option<&str>) -> f64 {
        let pid = self.child.id();
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0.0 };
        tasks
            .filter_map(|t| t.ok())
            .filter(|t| {
                name.is_none_or(|n| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == n))
            })
            .filter_map(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
                let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
                let u: f64 = rest.get(11)?.parse().ok()?;
                let s: f64 = rest.get(12)?.parse().ok()?;
                Some((u + s) / ticks)
            })
            .sum()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

#[derive(Args, Debug)]
pub(crate) struct JobsArgs {
    /// Jobs to run.
    #[arg(long, default_value_t = 300)]
    jobs: usize,
    /// Simulated GPUs.
    #[arg(long, default_value = "8xH100-80GB")]
    gpus: String,
    /// What each job runs (a shell line), one GPU each.
    #[arg(long, default_value = "true")]
    command: String,
    /// Repetitions (a fresh daemon each); the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// A flag for the daemon (repeatable), e.g. --daemon-arg=--cgroups=off to measure what confinement costs.
    #[arg(long = "daemon-arg", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// Also run each repetition with `--run-as=daemon --cgroups=off`,
    /// interleaved with the runs as configured, and report the ratio of the
    /// two (what confinement costs, measured side by side).
    #[arg(long)]
    compare_unconfined: bool,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

/// The flags that run jobs as the daemon's account with no control groups.
const UNCONFINED: [&str; 2] = ["--run-as=daemon", "--cgroups=off"];

/// Submits `jobs` one-GPU jobs in one batch and times submit → all done.
pub(crate) fn jobs(a: JobsArgs) -> anyhow::Result<()> {
    let mut extra: Vec<&str> = a.daemon_args.iter().map(String::as_str).collect();
    if a.compare_unconfined && extra.iter().any(|f| f.starts_with("--run-as") || f.starts_with("--cgroups")) {
        bail!("--compare-unconfined sets {} itself: drop them from --daemon-arg", UNCONFINED.join(" "));
    }
    // The container runtime's self-test (a `podman run` of an empty image,
    // about 0.15 s of CPU) would share the cores with the first jobs; these
    // jobs run no image.
    if !extra.iter().any(|f| f.starts_with("--container-runtime")) {
        extra.push("--container-runtime=none");
    }
    let unconfined: Vec<&str> = extra.iter().copied().chain(UNCONFINED).collect();
    let mut scratch = Scratch(Vec::new());
    let (mut confined_runs, mut unconfined_runs) = (Vec::new(), Vec::new());
    for _ in 0..a.runs.max(1) {
        confined_runs.push(jobs_run(&a, &extra, &mut scratch)?);
        if a.compare_unconfined {
            unconfined_runs.push(jobs_run(&a, &unconfined, &mut scratch)?);
        }
    }
    let summary = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        let median = runs[runs.len() / 2];
        (median, a.jobs as f64 / median)
    };
    let (median, rate) = summary(&mut confined_runs);
    let compared = (!unconfined_runs.is_empty()).then(|| summary(&mut unconfined_runs));
    if let Some(format) = a.print.data() {
        let mut out = json!({"jobs": a.jobs, "command": a.command, "gpus": a.gpus, "seconds": (median * 1000.0).round() / 1000.0, "jobs_per_s": rate.round(), "runs": confined_runs});
        if let Some((u_median, u_rate)) = compared {
            out["unconfined"] = json!({"seconds": (u_median * 1000.0).round() / 1000.0, "jobs_per_s": u_rate.round(), "runs": unconfined_runs});
            out["ratio"] = json!((rate / u_rate * 1000.0).round() / 1000.0);
        }
        crate::output::print_data(format, &out)?;
    } else {
        outln!(
            "{} jobs of `{}` on {}: {:.2} s from submit to all done (median of {}), {:.0} jobs/s; runs: {:?}",
            a.jobs,
            a.command,
            a.gpus,
            median,
            confined_runs.len(),
            rate,
            confined_runs
        );
        if let Some((u_median, u_rate)) = compared {
            outln!(
                "with {}, interleaved: {u_median:.2} s, {u_rate:.0} jobs/s; runs: {unconfined_runs:?}; ratio {:.2}",
                UNCONFINED.join(" "),
                rate / u_rate
            );
        }
    }
    Ok(())
}

/// One run on a fresh daemon started with `extra`: seconds from submit to all done.
fn jobs_run(a: &JobsArgs, extra: &[&str], scratch: &mut Scratch) -> anyhow::Result<f64> {
    let d = Daemon::start_with(&a.gpus, extra, scratch)?;
    let specs: Vec<Value> =
        (0..a.jobs).map(|_| json!({"command": a.command, "resources": {"nvidia.com/gpu": 1}})).collect();
    let t0 = Instant::now();
    d.post("/api/v1/jobs", &json!({"jobs": specs}))?;
    let end = d.wait_for(a.jobs, 0)?;
    Ok(end.duration_since(t0).as_secs_f64())
}

#[derive(Args, Debug)]
pub(crate) struct SubmitArgs {
    /// Jobs per request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Requests.
    #[arg(long, default_value_t = 50)]
    requests: usize,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

/// Times batch submissions while every GPU is held, so nothing starts and only the API and the store are measured.
pub(crate) fn submit(a: SubmitArgs) -> anyhow::Result<()> {
    let mut scratch = Scratch(Vec::new());
    let d = Daemon::start("8xH100-80GB", &mut scratch)?;
    let blocker = d.post("/api/v1/jobs", &json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 8}}))?["ids"]
        [0]
    .as_u64()
    .context("id")?;
    let specs: Vec<Value> = (0..a.batch)
        .map(|i| json!({"command": ["true"], "name": format!("j{i}"), "resources": {"nvidia.com/gpu": 1}}))
        .collect();
    let body = json!({"jobs": specs});
    let mut lat = Vec::new();
    let t0 = Instant::now();
    for _ in 0..a.requests {
        let t = Instant::now();
        d.post("/api/v1/jobs", &body)?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let total = t0.elapsed();
    d.post(&format!("/api/v1/jobs/{blocker}/cancel"), &json!({}))?;
    lat.sort_by(f64::total_cmp);
    let jobs = a.batch * a.requests;
    let rate = jobs as f64 / total.as_secs_f64();
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    if let Some(format) = a.print.data() {
        crate::output::print_data(
            format,
            &json!({"batch": a.batch, "requests": a.requests, "jobs": jobs, "jobs_per_s": rate.round(), "p50_ms": (p(0.5) * 100.0).round() / 100.0, "p99_ms": (p(0.99) * 100.0).round() / 100.0}),
        )?;
    } else {
        outln!(
            "{jobs} jobs in {} requests of {}: {:.0} jobs/s accepted and committed; request latency p50 {:.1} ms, p99 {:.1} ms",
            a.requests,
            a.batch,
            rate,
            p(0.5),
            p(0.99)
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct LatencyArgs {
    /// Jobs, one at a time on an idle GPU.
    #[arg(long, default_value_t = 50)]
    samples: usize,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

/// Submit → "started" event, one job at a time on an idle GPU.
pub(crate) fn latency(a: LatencyArgs) -> anyhow::Result<()> {
    let mut scratch = Scratch(Vec::new());
    let d = Daemon::start("8xH100-80GB", &mut scratch)?;
    let mut lat = Vec::new();
    for _ in 0..a.samples.max(1) {
        let mut stream = d
            .agent
            .get(format!("{}/api/v1/events", d.url))
            .header("Authorization", format!("Bearer {}", d.token))
            .call()?;
        let t = Instant::now();
        let id = d.post("/api/v1/jobs", &json!({"command": "true", "resources": {"nvidia.com/gpu": 1}}))?["ids"][0]
            .as_u64()
            .context("id")?;
        let mut reader = BufReader::new(stream.body_mut().as_reader());
        let mut line = String::new();
        let mut is_started = false;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                bail!("the event stream ended");
            }
            if line.starts_with("event: started") {
                is_started = true;
            } else if is_started && line.starts_with("data:") && line.contains(&format!("\"job\":{id},")) {
                break;
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    if let Some(format) = a.print.data() {
        crate::output::print_data(
            format,
            &json!({"samples": lat.len(), "p50_ms": (p(0.5) * 100.0).round() / 100.0, "p99_ms": (p(0.99) * 100.0).round() / 100.0, "max_ms": (p(1.0) * 100.0).round() / 100.0}),
        )?;
    } else {
        outln!(
            "submit → started on an idle GPU, {} samples: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            lat.len(),
            p(0.5),
            p(0.99),
            p(1.0)
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct TelemetryArgs {
    /// Simulated GPUs.
    #[arg(long, default_value = "8xH100-80GB")]
    gpus: String,
    /// Jobs in the daemon: one running per GPU (each declaring a changing load), the rest pending.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Sampling interval.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// How long to measure the sampler's CPU use, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// `/metrics` scrapes to time.
    #[arg(long, default_value_t = 200)]
    scrapes: usize,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

/// The cost of telemetry: CPU of the sampler thread and of the controller
/// while GPUs are sampled at `--interval`, and the latency of a `/metrics` scrape.
pub(crate) fn telemetry(a: TelemetryArgs) -> anyhow::Result<()> {
    let mut scratch = Scratch(Vec::new());
    let d = Daemon::start_with(&a.gpus, &["--sample-interval", &a.interval], &mut scratch)?;
    let gpus: usize = d.get_text("/api/v1/nodes").map(|t| t.matches("\"index\"").count())?;
    let running: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({
                "name": format!("train{i}"),
                "command": "i=0; while true; do i=$(( (i + 37) % 100 )); echo \"util=$i mem=40000\" > \"$GPOOL_SIM_LOAD_FILE\"; sleep 1; done",
                "resources": {"nvidia.com/gpu": 1}
            })
        })
        .collect();
    let running_ids: Vec<u64> = d.post("/api/v1/jobs", &json!({"jobs": running}))?["ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let pending: Vec<Value> = (0..a.jobs.saturating_sub(gpus))
        .map(|i| json!({"name": format!("wait{i}"), "command": "true", "resources": {"nvidia.com/gpu": 1}}))
        .collect();
    for chunk in pending.chunks(500) {
        d.post("/api/v1/jobs", &json!({"jobs": chunk}))?;
    }
    // Let every GPU job start and the sampler settle.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (s0, c0, all0) = (d.cpu_secs(Some("sampler")), d.cpu_secs(Some("controller")), d.cpu_secs(None));
    let t0 = Instant::now();
    std::thread::sleep(std::time::Duration::from_secs(a.seconds.max(1)));
    let wall = t0.elapsed().as_secs_f64();
    let (s1, c1, all1) = (d.cpu_secs(Some("sampler")), d.cpu_secs(Some("controller")), d.cpu_secs(None));
    let pct = |x: f64| (x / wall * 100.0 * 1000.0).round() / 1000.0;
    let mut lat = Vec::new();
    let mut bytes = 0;
    for _ in 0..a.scrapes.max(1) {
        let t = Instant::now();
        let text = d.get_text("/metrics")?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        bytes = text.len();
    }
    // The load jobs never end by themselves: stop them (jobs outlive their daemon by design).
    for id in running_ids {
        d.post(&format!("/api/v1/jobs/{id}/cancel"), &json!({}))?;
    }
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| (lat[((lat.len() - 1) as f64 * q).round() as usize] * 100.0).round() / 100.0;
    let v = json!({
        "gpus": gpus,
        "jobs": a.jobs,
        "interval": a.interval,
        "measured_s": (wall * 10.0).round() / 10.0,
        "sampler_cpu_pct_of_core": pct(s1 - s0),
        "controller_cpu_pct_of_core": pct(c1 - c0),
        "daemon_cpu_pct_of_core": pct(all1 - all0),
        "scrape_p50_ms": p(0.5),
        "scrape_p99_ms": p(0.99),
        "scrape_bytes": bytes,
    });
    if let Some(format) = a.print.data() {
        crate::output::print_data(format, &v)?;
    } else {
        outln!(
            "{gpus} GPUs sampled every {} for {:.0} s with {} jobs: sampler {:.3}% of a core, controller {:.3}%, whole daemon {:.3}%\n/metrics ({} bytes): p50 {:.2} ms, p99 {:.2} ms over {} scrapes",
            a.interval,
            wall,
            a.jobs,
            pct(s1 - s0),
            pct(c1 - c0),
            pct(all1 - all0),
            bytes,
            p(0.5),
            p(0.99),
            lat.len()
        );
    }
    Ok(())
}
