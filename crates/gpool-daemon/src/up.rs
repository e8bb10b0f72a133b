//! `gpool up`: everything for one node in one process.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use gpool_core::{Device, DeviceKind, MigInstance, Node, Policy, QueueConfig, Snapshot};
use gpool_gpu::simulated::Simulated;
use gpool_gpu::{Backend, GpuError, GpuInfo};
use gpool_store::Sqlite;
use rustix::fs::{FlockOperation, flock};
use serde::Deserialize;

use crate::agent::Agent;
use crate::controller::{Config, Controller, Event, GpuMeta};
use crate::http::{AppState, router};
use crate::prices::Prices;
use crate::sampler::{self, Replicas, Sampler};
use crate::telemetry::TelemetryConfig;
use crate::webhook::Webhook;

/// Settings of `gpool up`.
#[derive(Clone, Debug)]
pub struct UpConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `8xH100-80GB`; None = discover through NVML.
    pub simulate_gpus: Option<String>,
    pub node_name: Option<String>,
    pub cpus: Option<f64>,
    pub memory_gb: Option<u64>,
    pub policy: String,
    pub queues_file: Option<PathBuf>,
    /// fsync every commit (survive power loss, not only process crashes).
    pub fsync: bool,
    /// Where GPUs come from when not simulated: `auto` (NVML, else nvidia-smi), `nvml`, `nvidia-smi`.
    pub gpu_backend: String,
    /// How often the sampler reads the GPUs.
    pub sample_interval: std::time::Duration,
    /// Alert rules (YAML); default: the built-in rules.
    pub alert_rules: Option<PathBuf>,
    /// Where to POST alert notifications.
    pub alert_webhook: Option<String>,
    /// `MODEL=USD` per GPU-hour, over the built-in prices.
    pub gpu_prices: Vec<String>,
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

fn host_name() -> String {
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

/// Builds this node from discovered devices.
pub fn local_node(name: &str, gpus: &[GpuInfo], cpus: Option<f64>, memory_gb: Option<u64>, simulated: bool) -> Node {
    let count = gpus.len() as u64;
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let default_cpus = if simulated { (12 * count.max(1)) as f64 } else { host_cpus };
    let default_mem = if simulated { 128 * 1024 * count.max(1) } else { host_memory_mb() };
    let mut node = Node::new(name, 0, 0);
    node.cpus_milli = (cpus.unwrap_or(default_cpus) * 1000.0) as u64;
    node.memory_mb = memory_gb.map_or(default_mem, |g| g * 1024);
    node.devices = gpus
        .iter()
        .map(|g| Device {
            index: g.index,
            uuid: Arc::from(g.uuid.as_str()),
            kind: DeviceKind::NvidiaGpu,
            model: Arc::from(g.model.as_str()),
            memory_mb: g.memory_mb,
            nvlink_group: g.nvlink_group,
            numa_node: g.numa_node,
            mig: g.mig.as_ref().map(|list| {
                list.iter()
                    .filter_map(|m| {
                        let profile = m.profile.parse().ok()?;
                        Some(MigInstance {
                            profile,
                            uuid: Arc::from(m.uuid.as_str()),
                            gi_id: m.gi_id,
                            memory_mb: m.memory_mb,
                        })
                    })
                    .collect()
            }),
        })
        .collect();
    node
}

/// Runs `gpool up` until SIGINT/SIGTERM. Jobs keep running when the daemon stops;
/// the next `gpool up` on the same data directory re-adopts them.
pub fn run(cfg: UpConfig) -> anyhow::Result<()> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("cannot create the data directory {}", cfg.data_dir.display()))?;
    let _ = std::fs::set_permissions(&cfg.data_dir, std::fs::Permissions::from_mode(0o700));
    let lock =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(cfg.data_dir.join("daemon.lock"))?;
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        bail!("another gpool daemon is using {}; stop it first or pass another --data-dir", cfg.data_dir.display());
    }
    let policy = Policy::by_name(&cfg.policy)?;
    let queues = match &cfg.queues_file {
        Some(p) => read_queues(p)?,
        None => Vec::new(),
    };
    let node_name = cfg.node_name.clone().unwrap_or_else(host_name);
    let replicas: Replicas = Arc::default();
    let (gpus, backend) = discover(&cfg, &node_name, &replicas)?;
    let source = backend.as_ref().map_or("none", |b| b.name());
    let node = local_node(&node_name, &gpus, cfg.cpus, cfg.memory_gb, cfg.simulate_gpus.is_some());
    let rules = match &cfg.alert_rules {
        Some(p) => read_alert_rules(p)?,
        None => gpool_core::alert::Rule::defaults(),
    };
    let prices = Prices::built_in().with_overrides(&cfg.gpu_prices).map_err(anyhow::Error::msg)?;
    let gpu_meta =
        gpus.iter().map(|g| (g.index, GpuMeta { name: g.name.clone(), pci_bus_id: g.pci_bus_id.clone() })).collect();
    let mut snap = Snapshot::new(policy.clone());
    let node_id = snap.add_node(node)?;
    let store = Sqlite::open(&cfg.data_dir.join("state.db"), cfg.fsync)?;
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let (events, _) = tokio::sync::broadcast::channel(4096);
    let exe = std::env::current_exe().context("cannot find the gpool executable for job shims")?;
    let agent = Agent::new(&cfg.data_dir, exe, tx.clone(), replicas.clone(), cfg.simulate_gpus.is_some());
    let webhook = match &cfg.alert_webhook {
        Some(url) => Some(Webhook::spawn(url.clone(), format!("http://{}", cfg.listen))?),
        None => None,
    };
    let config = Config {
        data_dir: cfg.data_dir.clone(),
        node_name: node_name.clone(),
        node_source: source.into(),
        policy,
        queues,
        retry_backoff: std::time::Duration::from_secs(10),
        telemetry: TelemetryConfig { rules, ..TelemetryConfig::default() },
        prices,
        gpu_meta,
        webhook,
    };
    let mut controller = Controller::new(config, Box::new(store), snap, node_id, agent, events.clone(), tx.clone())?;
    let token = admin_token(&cfg.data_dir)?;
    let admin_user = std::env::var("USER").unwrap_or_else(|_| "admin".into());
    controller.ensure_admin_token(&token, &admin_user)?;
    let ctl = std::thread::Builder::new().name("controller".into()).spawn(move || controller.run(rx))?;
    // The sampler stops when this sender is dropped, at the end of `run`.
    let _sampler = match backend {
        Some(b) => Some(sampler::spawn(Sampler::new(node_name.clone(), b, cfg.sample_interval, replicas), tx.clone())?),
        None => None,
    };

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let state = AppState { tx: tx.clone(), events };
    let data_dir = cfg.data_dir.clone();
    let served: anyhow::Result<()> = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        std::fs::write(data_dir.join(URL_FILE), format!("{url}\n"))?;
        println!(
            "gpool is up at {url} ({} GPUs: {source}; node {node_name}; data in {})",
            gpus.len(),
            data_dir.display()
        );
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
    let _ = std::fs::remove_file(cfg.data_dir.join(URL_FILE));
    served
}

/// Finds the node's GPUs and the backend that will sample them.
fn discover(
    cfg: &UpConfig,
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
