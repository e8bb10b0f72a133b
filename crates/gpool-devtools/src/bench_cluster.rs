//! `gpool-devtools bench cluster`: the control plane at scale. A real `gpool
//! serve` (the `gpool` binary, see `--gpool`) with N simulated nodes, whose agents are lightweight
//! clients in this process speaking the real agent protocol over HTTP
//! (register, long poll, reports with telemetry as heartbeats), and a queue of
//! M jobs. The fake agents "run" each job they are told to start for 30–120
//! simulated seconds (compressed by `--speed`) and report its exit, so the
//! scheduler works under steady churn. Measured: heartbeat (report) latency
//! and rate, scheduling pass time (the daemon's own histogram), API latency.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use gpool_api::agent as wire;
use serde_json::{Value, json};

#[derive(Args, Debug)]
pub(crate) struct ClusterArgs {
    /// Simulated nodes (each a lightweight agent client).
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Jobs queued (1, 2, 4 or 8 GPUs each).
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Seconds to measure once every job is queued.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Node lease (heartbeats come every quarter of it).
    #[arg(long, default_value = "20s")]
    lease: String,
    /// Simulated job durations (30–120 s) are divided by this.
    #[arg(long, default_value_t = 4.0)]
    speed: f64,
    /// The control plane's state (default: SQLite in a scratch directory).
    #[arg(long)]
    db: Option<String>,
    #[command(flatten)]
    print: crate::print::Print,
    /// After measuring, keep the cluster up this many seconds (its nodes
    /// reporting, its jobs in place) and write its URL and admin token to
    /// FILE, for measuring the web dashboard on it (scripts/dashboard-bench.sh).
    #[arg(long, value_name = "SECONDS")]
    hold: Option<u64>,
    #[arg(long, value_name = "FILE", requires = "hold")]
    hold_file: Option<std::path::PathBuf>,
}

struct Serve {
    child: Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn http(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into()
}

/// Latencies in milliseconds.
#[derive(Default)]
struct Lat(Vec<f64>);

impl Lat {
    fn p(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_by(f64::total_cmp);
        let v = self.0[((self.0.len() - 1) as f64 * q).round() as usize];
        (v * 100.0).round() / 100.0
    }
}

/// A deterministic xorshift generator (job durations).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

struct Shared {
    base: String,
    token: String,
    stop: AtomicBool,
    heartbeats: Mutex<Lat>,
    errors: Mutex<Vec<String>>,
}

/// One fake node: registers, polls for commands, reports starts and exits.
fn fake_node(sh: Arc<Shared>, i: usize, gpus: u32, speed: f64) {
    let name = format!("sim{i:04}");
    let gpu_list: Vec<wire::GpuWire> = (0..gpus)
        .map(|g| wire::GpuWire {
            kind: "nvidia-gpu".into(),
            index: g,
            uuid: format!("GPU-{i:08x}-{g:04x}-0000-0000-000000000000"),
            name: "Simulated H100-80GB".into(),
            model: "H100-80GB".into(),
            memory_mb: 81_511,
            pci_bus_id: None,
            nvlink_group: Some(0),
            numa_node: Some(0),
            mig: None,
        })
        .collect();
    let reg = wire::Register {
        node: name.clone(),
        addr: format!("10.0.{}.{}", i / 250, i % 250 + 1),
        cpus: f64::from(gpus) * 12.0,
        memory_mb: u64::from(gpus) * 128 * 1024,
        labels: Default::default(),
        pool: None,
        source: "simulated".into(),
        degraded: Vec::new(),
        gpus: gpu_list,
        gpu_sharing: "time-slicing".into(),
        container_runtime: None,
        mig_managed: Vec::new(),
        running: Vec::new(),
        version: "bench".into(),
        power_budget_w: None,
        peer_addr: None,
        note: None,
    };
    let a = http(Duration::from_secs(60));
    let registered: wire::Registered = match a
        .post(format!("{}/agent/v1/register", sh.base))
        .header("Authorization", format!("Bearer {}", sh.token))
        .send_json(&reg)
        .ok()
        .and_then(|mut r| r.body_mut().read_json().ok())
    {
        Some(r) => r,
        None => {
            if let Ok(mut e) = sh.errors.lock() {
                e.push(format!("{name}: cannot register"));
            }
            return;
        }
    };
    // Replicas "running" here: (replica, when it ends).
    let running: Arc<Mutex<Vec<(wire::ReplicaId, Instant)>>> = Arc::default();
    let started: Arc<Mutex<Vec<wire::ReplicaId>>> = Arc::default();
    {
        let (sh, running, started, name) = (sh.clone(), running.clone(), started.clone(), name.clone());
        let epoch = registered.epoch;
        let mut after = registered.next_seq.saturating_sub(1);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
        let _ = std::thread::Builder::new().stack_size(256 * 1024).spawn(move || {
            let a = http(Duration::from_secs(60));
            while !sh.stop.load(Ordering::Relaxed) {
                let r = a
                    .get(format!("{}/agent/v1/commands", sh.base))
                    .query("node", &name)
                    .query("epoch", epoch.to_string())
                    .query("after", after.to_string())
                    .header("Authorization", format!("Bearer {}", sh.token))
                    .call();
                let Ok(mut r) = r else { continue };
                let Ok(cmds) = r.body_mut().with_config().limit(64 << 20).read_json::<wire::Commands>() else {
                    continue;
                };
                for c in cmds.commands {
                    after = after.max(c.seq);
                    match c.command {
                        wire::Command::Start { replica, .. } => {
                            let secs = (30 + rng.next() % 91) as f64 / speed;
                            if let (Ok(mut run), Ok(mut s)) = (running.lock(), started.lock()) {
                                run.push((replica, Instant::now() + Duration::from_secs_f64(secs)));
                                s.push(replica);
                            }
                        }
                        wire::Command::Signal { replica, .. } | wire::Command::Kill { replica } => {
                            if let Ok(mut run) = running.lock() {
                                for r in run.iter_mut().filter(|(x, _)| *x == replica) {
                                    r.1 = Instant::now();
                                }
                            }
                        }
                        wire::Command::Reconcile { .. }
                        | wire::Command::MigLayout { .. }
                        | wire::Command::Prefetch { .. }
                        | wire::Command::InjectFault { .. }
                        | wire::Command::CheckHealth { .. }
                        | wire::Command::Profile { .. }
                        | wire::Command::Attach { .. } => {}
                    }
                }
            }
        });
    }
    let heartbeat = Duration::from_millis(registered.heartbeat_ms);
    // Spread the first heartbeats over the interval.
    std::thread::sleep(heartbeat.mul_f64((i % 97) as f64 / 97.0));
    while !sh.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut events: Vec<wire::Event> = started
            .lock()
            .map(|mut s| s.drain(..).map(|replica| wire::Event::Running { replica }).collect())
            .unwrap_or_default();
        if let Ok(mut run) = running.lock() {
            run.retain(|(replica, end)| {
                if *end <= now {
                    events.push(wire::Event::Exited {
                        replica: *replica,
                        exit: wire::ExitWire {
                            code: Some(0),
                            signal: None,
                            started_ms: 0,
                            ended_ms: 0,
                            error: None,
                            fenced: false,
                        },
                    });
                    false
                } else {
                    true
                }
            });
        }
        let telemetry = wire::TelemetryWire {
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            gpus: (0..gpus)
                .map(|g| wire::GpuSampleWire {
                    index: g,
                    uuid: format!("GPU-{i:08x}-{g:04x}-0000-0000-000000000000"),
                    gpu_util_pct: Some(f64::from((g * 13) % 100)),
                    memory_used_mb: Some(40_000),
                    memory_total_mb: Some(81_511),
                    temperature_c: Some(55.0),
                    power_draw_w: Some(400.0),
                    ..wire::GpuSampleWire::default()
                })
                .collect(),
            ..wire::TelemetryWire::default()
        };
        let report = wire::Report {
            node: name.clone(),
            epoch: registered.epoch,
            events,
            telemetry: Some(telemetry),
            roster_version: 0,
        };
        let t = Instant::now();
        let ok = a
            .post(format!("{}/agent/v1/report", sh.base))
            .header("Authorization", format!("Bearer {}", sh.token))
            .send_json(&report)
            .is_ok_and(|r| r.status().is_success());
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if ok {
            if let Ok(mut h) = sh.heartbeats.lock() {
                h.0.push(ms);
            }
        } else if let Ok(mut e) = sh.errors.lock() {
            e.push(format!("{name}: a report failed"));
        }
        std::thread::sleep(heartbeat.saturating_sub(t.elapsed()));
    }
}

fn histogram_quantile(metrics: &str, name: &str, q: f64) -> Option<f64> {
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{name}_bucket{{le=\"")))
        .filter_map(|rest| {
            let (le, v) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, v.trim().parse().ok()?))
        })
        .collect();
    let total = buckets.last()?.1;
    buckets.iter().find(|(_, c)| *c >= (total * q).ceil()).map(|(le, _)| *le)
}

fn scalar(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

pub(crate) fn cluster(a: ClusterArgs, gpool: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("gpool-bench-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(gpool);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--lease", &a.lease, "--data-dir"]).arg(&dir);
    if let Some(db) = &a.db {
        cmd.args(["--db", db]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("start gpool serve")?;
    let mut out = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    let url =
        line.split_whitespace().find(|w| w.starts_with("http://")).context("no URL from gpool serve")?.to_string();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = out.read_to_end(&mut sink);
    });
    let serve = Serve { child, url, dir: dir.clone() };
    let admin = std::fs::read_to_string(dir.join("admin.token"))?.trim().to_string();
    let api = http(Duration::from_secs(120));
    let post = |path: &str, body: &Value| -> anyhow::Result<Value> {
        let mut r = api
            .post(format!("{}{path}", serve.url))
            .header("Authorization", format!("Bearer {admin}"))
            .send_json(body)?;
        let status = r.status().as_u16();
        let v: Value = r.body_mut().with_config().limit(64 << 20).read_json()?;
        if status >= 300 {
            bail!("{path}: HTTP {status}: {v}");
        }
        Ok(v)
    };
    let get = |path: &str| -> anyhow::Result<String> {
        let mut r =
            api.get(format!("{}{path}", serve.url)).header("Authorization", format!("Bearer {admin}")).call()?;
        Ok(r.body_mut().with_config().limit(256 << 20).read_to_string()?)
    };
    let node_token = post("/api/v1/tokens", &json!({"user": "*", "role": "node"}))?["token"]
        .as_str()
        .context("node token")?
        .to_string();
    let shared = Arc::new(Shared {
        base: serve.url.clone(),
        token: node_token,
        stop: AtomicBool::new(false),
        heartbeats: Mutex::default(),
        errors: Mutex::default(),
    });
    let t_reg = Instant::now();
    let mut handles = Vec::new();
    for i in 0..a.nodes {
        let sh = shared.clone();
        let (g, speed) = (a.gpus_per_node, a.speed);
        handles.push(std::thread::Builder::new().stack_size(256 * 1024).spawn(move || fake_node(sh, i, g, speed))?);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let nodes: Value = serde_json::from_str(&get("/api/v1/nodes")?)?;
        let up = nodes.as_array().map_or(0, |n| n.iter().filter(|x| x["state"] == "up").count());
        if up >= a.nodes {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {up} of {} nodes registered in 300 s", a.nodes);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let register_s = t_reg.elapsed().as_secs_f64();
    // The queue.
    let t_sub = Instant::now();
    let sizes = [1, 1, 1, 2, 2, 4, 8];
    for chunk in (0..a.jobs).collect::<Vec<_>>().chunks(1000) {
        let specs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"command": ["true"], "name": format!("b{i}"), "resources": {"nvidia.com/gpu": sizes[i % sizes.len()]}}))
            .collect();
        post("/api/v1/jobs", &json!({"jobs": specs}))?;
    }
    let submit_s = t_sub.elapsed().as_secs_f64();
    if let Ok(mut h) = shared.heartbeats.lock() {
        h.0.clear();
    }
    let before = get("/metrics")?;
    // Measure: API probes while the fake nodes report.
    let t0 = Instant::now();
    let (mut list, mut queues, mut submit, mut show) = (Lat::default(), Lat::default(), Lat::default(), Lat::default());
    while t0.elapsed() < Duration::from_secs(a.seconds) {
        let t = Instant::now();
        get("/api/v1/jobs?state=pending&limit=100")?;
        list.0.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        get("/api/v1/queues")?;
        queues.0.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let id = post("/api/v1/jobs", &json!({"command": ["true"], "resources": {"nvidia.com/gpu": 1}}))?["ids"][0]
            .as_u64()
            .unwrap_or(1);
        submit.0.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        get(&format!("/api/v1/jobs/{id}"))?;
        show.0.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = t0.elapsed().as_secs_f64();
    let after = get("/metrics")?;
    if let Some(hold) = a.hold {
        let line = format!("{} {}\n", serve.url, admin);
        if let Some(f) = &a.hold_file {
            std::fs::write(f, &line).with_context(|| format!("write {}", f.display()))?;
        }
        eprintln!("holding the cluster at {} for {hold} s", serve.url);
        std::thread::sleep(Duration::from_secs(hold));
    }
    shared.stop.store(true, Ordering::Relaxed);
    let passes = scalar(&after, "gpool_schedule_pass_seconds_count").unwrap_or(0.0)
        - scalar(&before, "gpool_schedule_pass_seconds_count").unwrap_or(0.0);
    let pass_sum = scalar(&after, "gpool_schedule_pass_seconds_sum").unwrap_or(0.0)
        - scalar(&before, "gpool_schedule_pass_seconds_sum").unwrap_or(0.0);
    let started = scalar(&after, "gpool_allocations_total").unwrap_or(0.0)
        - scalar(&before, "gpool_allocations_total").unwrap_or(0.0);
    let mut hb = shared.heartbeats.lock().map(|mut h| std::mem::take(&mut h.0)).unwrap_or_default();
    let n_hb = hb.len();
    let mut hb = Lat(std::mem::take(&mut hb));
    let errors = shared.errors.lock().map(|e| e.len()).unwrap_or(0);
    let pending = after
        .lines()
        .filter_map(|l| l.strip_prefix("gpool_queue_pending_jobs{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    let v = json!({
        "nodes": a.nodes,
        "gpus": a.nodes as u64 * u64::from(a.gpus_per_node),
        "jobs": a.jobs,
        "db": a.db.as_deref().map_or("sqlite", |d| if d.starts_with("postgres") { "postgres" } else { "sqlite" }),
        "register_all_s": (register_s * 10.0).round() / 10.0,
        "submit_all_s": (submit_s * 10.0).round() / 10.0,
        "measured_s": (wall * 10.0).round() / 10.0,
        "heartbeats_per_s": (n_hb as f64 / wall).round(),
        "heartbeat_p50_ms": hb.p(0.5),
        "heartbeat_p99_ms": hb.p(0.99),
        "passes": passes,
        "pass_mean_ms": if passes > 0.0 { (pass_sum / passes * 1000.0 * 100.0).round() / 100.0 } else { f64::NAN },
        "pass_p50_ms_bucket": histogram_quantile(&after, "gpool_schedule_pass_seconds", 0.5).map(|x| x * 1000.0),
        "pass_p99_ms_bucket": histogram_quantile(&after, "gpool_schedule_pass_seconds", 0.99).map(|x| x * 1000.0),
        "jobs_started": started,
        "pending_at_end": pending,
        "api_list_p50_ms": list.p(0.5),
        "api_list_p99_ms": list.p(0.99),
        "api_queues_p50_ms": queues.p(0.5),
        "api_queues_p99_ms": queues.p(0.99),
        "api_submit_p50_ms": submit.p(0.5),
        "api_submit_p99_ms": submit.p(0.99),
        "api_get_p50_ms": show.p(0.5),
        "api_get_p99_ms": show.p(0.99),
        "errors": errors,
    });
    // A closed standard output (`| head`) must not end the run before the server is stopped.
    let text = a.print.render(&v)?;
    let _ = writeln!(std::io::stdout(), "{text}");
    drop(serve);
    Ok(())
}
