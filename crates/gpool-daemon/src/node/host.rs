//! This host as a node: its settings, its GPUs (discovered or simulated)
//! and the description it gives the control plane.

use anyhow::bail;
use gpool_gpu::simulated::Simulated;
use gpool_gpu::{Backend, GpuError, GpuInfo};

use crate::node::sampler::{self, Replicas};

use crate::protocol::NodeInfo;

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
    /// Most bytes a replica's log file may hold; `None`: no limit.
    pub log_limit: Option<u64>,
    /// Free bytes of the data directory's file system under which the node takes no new work.
    pub disk_reserve: u64,
    /// Whose account jobs run as (`account.rs`).
    pub run_as: crate::node::account::RunAs,
    /// Whether and how jobs are confined with control groups (`cgroup.rs`).
    pub cgroups: crate::node::cgroup::Mode,
    /// Whether and how jobs may share a GPU (docs/sharing.md).
    pub gpu_sharing: gpool_core::GpuSharing,
    /// MIG GPUs whose layout gpool may change: `None` none, `Some([])`
    /// every MIG GPU, else these indices (`--mig-managed`).
    pub mig_managed: Option<Vec<u32>>,
    /// A directory every node mounts (a shared file system): checkpoints go
    /// to `ROOT/job-<id>`, so a job resumes on whichever node it lands on.
    pub checkpoint_root: Option<std::path::PathBuf>,
    /// Watch this provider's metadata service for a spot notice (`gpool agent` only).
    pub spot_notice: Option<crate::node::spot_watch::SpotSource>,
    /// `auto`, `podman`, `docker`, `none` or a path (`container.rs`).
    pub container_runtime: String,
    /// Extra words for `podman|docker run` (`--container-arg`).
    pub container_args: Vec<String>,
    /// Bytes the images gpool runs may take here (`image_cache.rs`); `None`: no limit.
    pub image_cache_size: Option<u64>,
    /// The program that checks a quarantined GPU (`--health-check`), and how
    /// long it may take; `None`: the control plane's built-in check decides.
    pub health_check: Option<(std::path::PathBuf, std::time::Duration)>,
    /// This node's power budget in watts (`--power-budget 3000W`): the scheduler starts nothing that would take it over.
    pub power_budget_w: Option<u32>,
}

/// The node's image cache, when it has a limit and a runtime.
pub fn image_cache(
    cfg: &NodeConfig,
    data_dir: &std::path::Path,
    rt: Option<&crate::node::container::Runtime>,
) -> Option<std::sync::Arc<crate::node::image_cache::ImageCache>> {
    let (limit, rt) = (cfg.image_cache_size?, rt?);
    Some(std::sync::Arc::new(crate::node::image_cache::ImageCache::new(data_dir, limit, rt.clone())))
}

/// The container runtime for jobs in images, said on standard error.
pub fn container_runtime(cfg: &NodeConfig) -> anyhow::Result<Option<crate::node::container::Runtime>> {
    let rt = crate::node::container::Runtime::detect(&cfg.container_runtime, cfg.container_args.clone())
        .map_err(anyhow::Error::msg)?;
    match &rt {
        Some(r) => {
            tracing::info!("jobs with an image run in {}", r.describe());
            r.spawn_self_test();
        }
        None => tracing::warn!("no container runtime (podman or docker): jobs that name an image fail here"),
    }
    Ok(rt)
}

/// Where this node's jobs' control groups go, if it confines them; says on
/// standard error what it found (the daemon's start-up lines).
pub fn cgroups(cfg: &NodeConfig) -> Option<crate::node::cgroup::Hierarchy> {
    if cfg.cgroups == crate::node::cgroup::Mode::Off {
        tracing::warn!("jobs are not confined by control groups (--cgroups off)");
        return None;
    }
    if !rustix::process::geteuid().is_root() {
        tracing::warn!("jobs are not confined by control groups (that needs root)");
        return None;
    }
    match crate::node::cgroup::detect(cfg.cgroups) {
        Ok(layout) => {
            tracing::info!("{}", layout.describe());
            Some(layout)
        }
        Err(why) => {
            tracing::warn!("jobs are not confined by control groups: {why}");
            None
        }
    }
}

pub fn host_name() -> String {
    crate::wiring::host_name().unwrap_or_else(|| "localhost".into())
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

/// This node as it describes itself to the control plane, from discovered devices.
pub fn describe(name: &str, gpus: &[GpuInfo], backend: Option<&dyn Backend>, cfg: &NodeConfig, addr: &str) -> NodeInfo {
    let simulated = cfg.simulate_gpus.is_some();
    let count = gpus.len() as u64;
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let default_cpus = if simulated { (12 * count.max(1)) as f64 } else { host_cpus };
    let default_mem = if simulated { 128 * 1024 * count.max(1) } else { host_memory_mb() };
    NodeInfo {
        name: name.to_string(),
        addr: addr.to_string(),
        source: backend.map_or("none", |b| b.name()).to_string(),
        degraded: backend.map(|b| b.degraded().iter().map(ToString::to_string).collect()).unwrap_or_default(),
        labels: cfg.labels.clone(),
        pool: cfg.pool.clone(),
        cpus: cfg.cpus.unwrap_or(default_cpus),
        memory_mb: cfg.memory_gb.map_or(default_mem, |g| g * 1024),
        gpus: crate::protocol::gpus_to_wire(gpus),
        gpu_sharing: cfg.gpu_sharing.as_str().to_string(),
        container_runtime: crate::node::container::Runtime::detect(&cfg.container_runtime, Vec::new())
            .ok()
            .flatten()
            .map(|r| r.kind_name().to_string()),
        mig_managed: gpus
            .iter()
            .filter(|g| {
                g.mig.is_some() && cfg.mig_managed.as_ref().is_some_and(|m| m.is_empty() || m.contains(&g.index))
            })
            .map(|g| g.index)
            .collect(),
    }
}

type Found = Result<(Vec<GpuInfo>, Box<dyn Backend>), GpuError>;

/// After `before` found no driver, `next`; its failure, else both reasons.
fn next_kind(before: GpuError, next: impl FnOnce() -> Found) -> Found {
    match before {
        GpuError::NoDriver(first) => next().map_err(|e| match e {
            GpuError::NoDriver(second) => GpuError::NoDriver(format!("{first}; {second}")),
            e => e,
        }),
        e => Err(e),
    }
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
        let mut s = gpool_gpu::smi::NvidiaSmi::on_path()?.with_kernel_log();
        Ok((s.inventory()?, Box::new(s)))
    };
    let amd = || -> Result<(Vec<GpuInfo>, Box<dyn Backend>), GpuError> {
        let mut a = gpool_gpu::amd::Amd::on_path()?;
        Ok((a.inventory()?, Box::new(a)))
    };
    let tpu = || -> Result<(Vec<GpuInfo>, Box<dyn Backend>), GpuError> {
        let mut t = gpool_gpu::tpu::Tpu::on_host()?;
        Ok((t.inventory()?, Box::new(t)))
    };
    let found = match cfg.gpu_backend.as_str() {
        "nvml" => nvml(),
        "nvidia-smi" => smi(),
        "amd" => amd(),
        "tpu" => tpu(),
        // NVML first; where it cannot load, nvidia-smi. What is reported is
        // what failed last: an nvidia-smi that is there and fails is a fault
        // of its own, not a missing NVML.
        "auto" => nvml()
            .or_else(|e| {
                smi().map_err(|e2| match (e, e2) {
                (GpuError::NoDriver(nvml), GpuError::NoDriver(_)) => GpuError::NoDriver(nvml),
                (GpuError::NoDriver(nvml), e2) => GpuError::Smi {
                    args: "(used because NVML cannot load)".into(),
                    why: format!(
                        "{}. NVML: {nvml}. Fix what nvidia-smi reports, or pass --simulate-gpus to run without GPUs",
                        gpool_gpu::smi::inventory::refusal(&e2)
                    ),
                },
                (e, e2) => GpuError::Nvml(format!("{e}; nvidia-smi: {e2}")),
            })
            })
            // No NVIDIA driver at all: AMD's tools, then TPU chips (one kind per node).
            .or_else(|e| next_kind(e, amd))
            .or_else(|e| next_kind(e, tpu)),
        other => bail!("--gpu-backend {other:?}: expected auto, nvml, nvidia-smi, amd or tpu"),
    };
    match found {
        Ok((gpus, b)) => {
            if cfg.mig_managed.is_some()
                && gpus.iter().any(|g| g.mig.is_some())
                && let Err(why) = b.mig_changes()
            {
                bail!("--mig-managed: {why}");
            }
            let mig: usize = gpus.iter().filter_map(|g| g.mig.as_ref()).map(Vec::len).sum();
            tracing::info!("{} GPU(s), {mig} MIG device(s), from {}", gpus.len(), b.name());
            // What did not answer, and what was used instead: on the start-up lines.
            for d in b.degraded() {
                tracing::warn!("{d}");
            }
            Ok((gpus, Some(b)))
        }
        Err(e @ GpuError::NoDriver(_)) if cfg.gpu_backend == "auto" => {
            tracing::warn!("{e}. Starting with no GPUs: only CPU jobs can run.");
            Ok((Vec::new(), None))
        }
        Err(e) => Err(e.into()),
    }
}

/// What a node's agent is given, from the node's settings: the same for the
/// agent inside `gpool up` and for `gpool agent` (whose shims also watch a
/// `lease` file). `sampler`: the thread that owns the GPU backend, if any.
#[allow(clippy::too_many_arguments)]
pub fn agent_config(
    cfg: &NodeConfig,
    data_dir: &std::path::Path,
    exe: std::path::PathBuf,
    name: &str,
    lease: Option<std::path::PathBuf>,
    cgroups: Option<crate::node::cgroup::Hierarchy>,
    gpus: &[GpuInfo],
    sampler: Option<std::sync::mpsc::Sender<crate::node::sampler::SamplerCtl>>,
    container: Option<crate::node::container::Runtime>,
) -> crate::node::agent::AgentConfig {
    crate::node::agent::AgentConfig {
        data_dir: data_dir.to_path_buf(),
        exe,
        node: name.to_string(),
        simulated: cfg.simulate_gpus.is_some(),
        lease,
        log_limit: cfg.log_limit,
        run_as: cfg.run_as,
        cgroups,
        device_files: crate::node::devices::DeviceFiles::of(gpus),
        sampler,
        checkpoint_root: cfg.checkpoint_root.clone(),
        image_cache: image_cache(cfg, data_dir, container.as_ref()),
        health_check: cfg.health_check.clone(),
        container,
    }
}
