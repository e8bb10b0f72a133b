//! `gpool up`: everything for one node in one process.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use gpool_core::{Policy, QueueConfig};
use gpool_gpu::simulated::Simulated;
use gpool_gpu::{Backend, GpuError, GpuInfo};
use gpool_store::Sqlite;
use rustix::fs::{FlockOperation, flock};
use serde::Deserialize;

use crate::agent::{Agent, AgentConfig, AgentReport, ReportSink};
use crate::controller::{Config, Controller, Event, NodeDoc, gpus_to_wire};
use crate::http::{AppState, router};
use crate::prices::Prices;
use crate::sampler::{self, Replicas, Sampler};
use crate::telemetry::TelemetryConfig;
use crate::webhook::Webhook;

/// Settings of a control plane (`gpool up`, `gpool serve`).
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub policy: String,
    pub queues_file: Option<PathBuf>,
    /// fsync every commit (survive power loss, not only process crashes).
    pub fsync: bool,
    /// Alert rules (YAML); default: the built-in rules.
    pub alert_rules: Option<PathBuf>,
    /// Where to POST alert notifications.
    pub alert_webhook: Option<String>,
    /// `MODEL=USD` per GPU-hour, over the built-in prices.
    pub gpu_prices: Vec<String>,
    /// A remote node silent for this long is down.
    pub lease: std::time::Duration,
}

/// Settings of a node (`gpool up`'s own, or a `gpool agent`).
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    /// `8xH100-80GB`; None = discover real GPUs.
    pub simulate_gpus: Option<String>,
    /// Where GPUs come from when not simulated: `auto` (NVML, else nvidia-smi), `nvml`, `nvidia-smi`.
    pub gpu_backend: String,
    /// How often the sampler reads the GPUs.
    pub sample_interval: std::time::Duration,
    pub node_name: Option<String>,
    pub cpus: Option<f64>,
    pub memory_gb: Option<u64>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub pool: Option<String>,
}

/// Settings of `gpool up`.
#[derive(Clone, Debug)]
pub struct UpConfig {
    pub plane: PlaneConfig,
    pub node: NodeConfig,
}

/// The default data directory: `$XDG_DATA_HOME/gpool`, else `~/.local/share/gpool`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("gpool");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/share/gpool")
}

/// Files the CLI reads to find a local daemon.
pub const URL_FILE: &str = "server.url";
pub const TOKEN_FILE: &str = "admin.token";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueueFile {
    name: String,
    #[serde(default)]
    cohort: Option<String>,
    #[serde(default)]
    guarantee_gpus: f64,
    #[serde(default)]
    max_gpus: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    name: String,
    scope: String,
    metric: String,
    #[serde(default)]
    above: Option<f64>,
    #[serde(default)]
    below: Option<f64>,
    #[serde(default, rename = "for")]
    hold: Option<String>,
    #[serde(default)]
    severity: Option<String>,
}

/// Reads an alert rules YAML file: a list of
/// `{name, scope, metric, above|below, for, severity}` (docs/telemetry.md).
pub fn read_alert_rules(path: &Path) -> anyhow::Result<Vec<gpool_core::alert::Rule>> {
    use gpool_core::alert::{Comparison, Metric, Rule, Scope, Severity};
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<RuleFile> =
        serde_yaml::from_str(&text).with_context(|| format!("{}: expected a list of alert rules", path.display()))?;
    let p = path.display();
    list.into_iter()
        .map(|r| {
            let scope = Scope::parse(&r.scope).with_context(|| {
                format!("{p}: rule {}: scope {:?} is not gpu, allocated_gpu or job", r.name, r.scope)
            })?;
            let metric = Metric::parse(&r.metric).with_context(|| {
                let names: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
                format!("{p}: rule {}: metric {:?} is not one of {}", r.name, r.metric, names.join(", "))
            })?;
            let (comparison, threshold) = match (r.above, r.below) {
                (Some(a), None) => (Comparison::Above, a),
                (None, Some(b)) => (Comparison::Below, b),
                _ => bail!("{p}: rule {}: give exactly one of `above: N` or `below: N`", r.name),
            };
            let hold = match &r.hold {
                Some(h) => gpool_api::quantity::parse_duration(h)
                    .map_err(|e| anyhow::anyhow!("{p}: rule {}: for: {e}", r.name))?,
                None => std::time::Duration::ZERO,
            };
            let severity = match r.severity.as_deref() {
                None => Severity::Warning,
                Some(s) => Severity::parse(s).with_context(|| {
                    format!("{p}: rule {}: severity {s:?} is not info, warning or critical", r.name)
                })?,
            };
            Ok(Rule { name: r.name, scope, metric, comparison, threshold, hold, severity })
        })
        .collect()
}

/// Reads a queues YAML file: a list of `{name, cohort, guaranteeGpus, maxGpus}`.
pub fn read_queues(path: &Path) -> anyhow::Result<Vec<QueueConfig>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<QueueFile> =
        serde_yaml::from_str(&text).with_context(|| format!("{}: expected a list of queues", path.display()))?;
    list.into_iter()
        .map(|q| {
            let valid = |x: f64| x.is_finite() && x >= 0.0;
            if !valid(q.guarantee_gpus) || q.max_gpus.is_some_and(|m| !valid(m)) {
                bail!("{}: queue {}: quotas must be numbers of GPUs ≥ 0", path.display(), q.name);
            }
            Ok(QueueConfig {
                name: Arc::from(q.name.as_str()),
                cohort: q.cohort.map(|c| Arc::from(c.as_str())),
                guarantee: (q.guarantee_gpus * 1000.0).round() as u64,
                max: q.max_gpus.map(|m| (m * 1000.0).round() as u64),
            })
        })
        .collect()
}

pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn host_memory_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(16 * 1024, |kb| kb / 1024)
}

/// This node as the controller will know it, from discovered devices.
pub fn node_doc(name: &str, gpus: &[GpuInfo], source: &str, cfg: &NodeConfig, addr: &str) -> NodeDoc {
    let simulated = cfg.simulate_gpus.is_some();
    let count = gpus.len() as u64;
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let default_cpus = if simulated { (12 * count.max(1)) as f64 } else { host_cpus };
    let default_mem = if simulated { 128 * 1024 * count.max(1) } else { host_memory_mb() };
    NodeDoc {
        name: name.to_string(),
        addr: addr.to_string(),
        source: source.to_string(),
        labels: cfg.labels.clone(),
        pool: cfg.pool.clone(),
        cpus: cfg.cpus.unwrap_or(default_cpus),
        memory_mb: cfg.memory_gb.map_or(default_mem, |g| g * 1024),
        gpus: gpus_to_wire(gpus),
        epoch: 0,
        draining: false,
        local: false,
    }
}

/// The controller's settings from a control plane's.
pub fn controller_config(p: &PlaneConfig) -> anyhow::Result<Config> {
    let policy = Policy::by_name(&p.policy)?;
    let queues = match &p.queues_file {
        Some(f) => read_queues(f)?,
        None => Vec::new(),
    };
    let rules = match &p.alert_rules {
        Some(f) => read_alert_rules(f)?,
        None => gpool_core::alert::Rule::defaults(),
    };
    let prices = Prices::built_in().with_overrides(&p.gpu_prices).map_err(anyhow::Error::msg)?;
    let webhook = match &p.alert_webhook {
        Some(url) => Some(Webhook::spawn(url.clone(), format!("http://{}", p.listen))?),
        None => None,
    };
    if p.lease < std::time::Duration::from_millis(500) {
        bail!("--lease must be at least 500ms, got {:?}", p.lease);
    }
    Ok(Config {
        data_dir: p.data_dir.clone(),
        policy,
        queues,
        retry_backoff: std::time::Duration::from_secs(10),
        telemetry: TelemetryConfig { rules, ..TelemetryConfig::default() },
        prices,
        webhook,
        lease: p.lease,
        master_ports: 29_500..30_500,
    })
}

/// Creates the data directory (mode 0700).
pub fn data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    Ok(())
}

/// Runs the controller thread and the HTTP API until SIGINT/SIGTERM; `banner`
/// is printed once listening (its first line names the URL).
pub fn serve(
    plane: &PlaneConfig,
    mut controller: Controller,
    tx: std::sync::mpsc::Sender<Event>,
    rx: std::sync::mpsc::Receiver<Event>,
    events: tokio::sync::broadcast::Sender<gpool_api::EventView>,
    banner: impl FnOnce(&str) -> String + Send + 'static,
) -> anyhow::Result<()> {
    let token = admin_token(&plane.data_dir)?;
    let admin_user = std::env::var("USER").unwrap_or_else(|_| "admin".into());
    controller.ensure_admin_token(&token, &admin_user)?;
    let ctl = std::thread::Builder::new().name("controller".into()).spawn(move || controller.run(rx))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let state = AppState { tx: tx.clone(), events, data_dir: plane.data_dir.clone() };
    let data_dir = plane.data_dir.clone();
    let listen = plane.listen;
    let served: anyhow::Result<()> = rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        std::fs::write(data_dir.join(URL_FILE), format!("{url}\n"))?;
        println!("{}", banner(&url));
        println!("admin token in {}", data_dir.join(TOKEN_FILE).display());
        let _ = std::io::stdout().flush();
        // Small request/response exchanges: without TCP_NODELAY, Nagle and
        // delayed ACKs add ~40 ms to a submit.
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router(state)).with_graceful_shutdown(shutdown_signal()).await?;
        Ok(())
    });
    let _ = tx.send(Event::Shutdown);
    let _ = ctl.join();
    let _ = std::fs::remove_file(plane.data_dir.join(URL_FILE));
    served
}

/// Runs `gpool up` until SIGINT/SIGTERM. Jobs keep running when the daemon stops;
/// the next `gpool up` on the same data directory re-adopts them.
pub fn run(cfg: UpConfig) -> anyhow::Result<()> {
    let plane = &cfg.plane;
    data_dir(&plane.data_dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(plane.data_dir.join("daemon.lock"))?;
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        bail!("another gpool daemon is using {}; stop it first or pass another --data-dir", plane.data_dir.display());
    }
    let config = controller_config(plane)?;
    let node_name = cfg.node.node_name.clone().unwrap_or_else(host_name);
    let replicas: Replicas = Arc::default();
    let (gpus, backend) = discover(&cfg.node, &node_name, &replicas)?;
    let source = backend.as_ref().map_or("none", |b| b.name()).to_string();
    let mut doc = node_doc(&node_name, &gpus, &source, &cfg.node, "127.0.0.1");
    doc.local = true;
    let store = Sqlite::open(&plane.data_dir.join("state.db"), plane.fsync)?;
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let (events, _) = tokio::sync::broadcast::channel(4096);
    let exe = std::env::current_exe().context("cannot find the gpool executable for job shims")?;
    let sink_tx = tx.clone();
    let sink: ReportSink = Arc::new(move |r| {
        let _ = sink_tx.send(Event::Agent(r));
    });
    let agent_cfg = AgentConfig {
        data_dir: plane.data_dir.clone(),
        exe,
        node: node_name.clone(),
        simulated: cfg.node.simulate_gpus.is_some(),
        lease: None,
    };
    let agent = Agent::new(agent_cfg, sink, replicas.clone());
    let controller = Controller::new(config, Box::new(store), Some((doc, agent)), events.clone(), tx.clone())?;
    // The sampler stops when this sender is dropped, at the end of `run`.
    let _sampler = match backend {
        Some(b) => {
            let t = tx.clone();
            let sampler = Sampler::new(node_name.clone(), b, cfg.node.sample_interval, replicas);
            Some(sampler::spawn(sampler, move |r| t.send(Event::Agent(AgentReport::Telemetry(r))).is_ok())?)
        }
        None => None,
    };
    let n = gpus.len();
    let dir = plane.data_dir.display().to_string();
    serve(plane, controller, tx, rx, events, move |url| {
        format!("gpool is up at {url} ({n} GPUs: {source}; node {node_name}; data in {dir})")
    })
}

/// Finds the node's GPUs and the backend that will sample them.
pub fn discover(
    cfg: &NodeConfig,
    node_name: &str,
    replicas: &Replicas,
) -> anyhow::Result<(Vec<GpuInfo>, Option<Box<dyn Backend>>)> {
    if let Some(spec) = &cfg.simulate_gpus {
        let mut sim = Simulated::parse(spec, node_name)?;
        let gpus = sim.inventory()?;
        return Ok((gpus, Some(Box::new(sim.with_loads(sampler::sim_loads(replicas.clone()))))));
    }
    let nvml = || -> Result<(Vec<GpuInfo>, Box<dyn Backend>), GpuError> {
        let mut n = gpool_gpu::nvml::Nvml::load()?;
        Ok((n.inventory()?, Box::new(n)))
    };
    let smi = || -> Result<(Vec<GpuInfo>, Box<dyn Backend>), GpuError> {
        let mut s = gpool_gpu::smi::NvidiaSmi::on_path()?;
        Ok((s.inventory()?, Box::new(s)))
    };
    let found = match cfg.gpu_backend.as_str() {
        "nvml" => nvml(),
        "nvidia-smi" => smi(),
        "auto" => nvml().or_else(|e| {
            smi().map_err(|e2| match e {
                GpuError::NoDriver(_) => e,
                _ => GpuError::Nvml(format!("{e}; nvidia-smi: {e2}")),
            })
        }),
        other => bail!("--gpu-backend {other:?}: expected auto, nvml or nvidia-smi"),
    };
    match found {
        Ok((gpus, b)) => Ok((gpus, Some(b))),
        Err(e @ GpuError::NoDriver(_)) if cfg.gpu_backend == "auto" => {
            eprintln!("gpool: warning: {e}. Starting with no GPUs: only CPU jobs can run.");
            Ok((Vec::new(), None))
        }
        Err(e) => Err(e.into()),
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    println!("gpool: stopping; running jobs keep running and are re-adopted by the next `gpool up`");
}

/// Reads or creates the admin token file (mode 0600).
fn admin_token(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(TOKEN_FILE);
    if let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_string());
    }
    let secret = crate::auth::new_secret().map_err(anyhow::Error::msg)?;
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&path)?;
    writeln!(f, "{secret}")?;
    Ok(secret)
}
