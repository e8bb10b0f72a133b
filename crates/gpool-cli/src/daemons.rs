//! `gpool up | serve | agent` and the hidden `shim`: the processes of gpool.
//!
//! This is the one module of the CLI that names `gpool_daemon`: the client
//! finds the local daemon through the paths re-exported here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::Args;
use gpool_daemon::node::host::NodeConfig;
use gpool_daemon::plane::server::PlaneConfig;
use gpool_daemon::up::UpConfig;

/// Where the local daemon keeps its state, its address (`URL_FILE`) and its admin token (`TOKEN_FILE`).
/// The node pools file, which `gpool sim --pools` reads as the daemons do.
pub(crate) use gpool_daemon::pools_file::read_pools;
pub(crate) use gpool_daemon::wiring::{SOCKET_FILE, SYSTEM_DATA_DIR, TOKEN_FILE, URL_FILE, default_data_dir};

/// A duration flag (`10s`, `500ms`), more than zero.
pub(crate) fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    let d = gpool_api::quantity::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(d)
}

/// A size flag (`64Mi`, `1Gi`, `0`).
/// `3000W`, `3000 W`, `2.5kW`, `3000`: watts.
pub(crate) fn parse_watts(s: &str) -> Result<u32, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, scale) = match t.strip_suffix("kw") {
        Some(n) => (n, 1000.0),
        None => (t.strip_suffix('w').unwrap_or(&t), 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= f64::from(u32::MAX) => Ok((v * scale).round() as u32),
        _ => Err(format!("{s:?} is not a power like 3000W or 2.5kW")),
    }
}

fn parse_bytes_arg(s: &str) -> Result<u64, String> {
    gpool_api::quantity::parse_bytes(s.trim()).map_err(|e| format!("{e} (a size such as 64Mi or 1Gi, or 0)"))
}

/// Settings of a control plane.
#[derive(Args, Debug)]
pub(crate) struct PlaneArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: std::net::SocketAddr,
    /// Scheduling policy: default, fifo, fifo-backfill, sjf, srtf, las, fair.
    #[arg(long, default_value = "default")]
    policy: String,
    /// Where jobs are placed: best-fit (default), spread, or fragmentation (FGD: keeps shared GPUs from stranding capacity).
    #[arg(long, value_parser = clap::value_parser!(gpool_core::PlacementStrategy))]
    placement: Option<gpool_core::PlacementStrategy>,
    /// Change a knob of the policy (repeatable), as `gpool sim --set` does:
    /// try a variant on your trace first, then run it (docs/simulator.md).
    #[arg(long = "policy-set", value_name = "KEY=VALUE")]
    policy_set: Vec<String>,
    /// Quota queues (YAML list of {name, cohort, guaranteeGpus, maxGpus}).
    #[arg(long)]
    queues: Option<PathBuf>,
    /// fsync every commit: survive power loss, not only crashes (slower).
    #[arg(long)]
    fsync: bool,
    /// Data directory (state, logs, tokens).
    #[arg(long, env = "GPOOL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Alert rules (YAML list of {name, scope, metric, above|below, for, severity}); default: built-in rules.
    #[arg(long)]
    alert_rules: Option<PathBuf>,
    /// POST alert notifications here (Alertmanager webhook format).
    #[arg(long)]
    alert_webhook: Option<String>,
    /// Price of a GPU-hour of a model, over the built-in AWS list prices: --gpu-price H100-80GB=4.50 (repeatable).
    #[arg(long = "gpu-price")]
    gpu_prices: Vec<String>,
    /// A node whose agent is silent this long is down and its jobs are requeued; its agent kills them by then.
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg)]
    lease: std::time::Duration,
    /// How long after a GPU is quarantined for a fault its node first checks it (its --health-check program, else the built-in check).
    #[arg(long, default_value = "60s", value_parser = parse_duration_arg)]
    health_check_after: std::time::Duration,
    /// How often a quarantined GPU whose check failed is checked again.
    #[arg(long, default_value = "10m", value_parser = parse_duration_arg)]
    health_check_every: std::time::Duration,
    /// An API connection that does not send a whole request head within this time is closed (idle keep-alive ones too).
    #[arg(long, default_value = "30s", value_parser = parse_duration_arg)]
    http_header_timeout: std::time::Duration,
    /// Room kept beside the SQLite state for when its disk fills: spent then, so that gpool keeps running and refuses new jobs until there is room again (0: none).
    #[arg(long, default_value = "64Mi", value_parser = parse_bytes_arg)]
    state_reserve: u64,
    /// Require a token (role reader, user or admin) for /metrics, whose labels name users, teams and jobs.
    #[arg(long)]
    metrics_auth: bool,
    /// Serve HTTPS with a certificate of gpool's own CA, made on first start in DATA_DIR/tls (its fingerprint is printed for agents).
    #[arg(long)]
    tls: bool,
    /// The CA's directory (implies --tls): share one between a leader and its standbys.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Another name or address for the server certificate (repeatable): the one agents and users connect to.
    #[arg(long = "tls-san")]
    tls_sans: Vec<String>,
    /// The server's certificate chain (PEM, ending with the CA clients trust), from a PKI of your own, instead of gpool's CA; with --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Allow plain HTTP on an address other than loopback (tokens cross the network in the clear).
    #[arg(long)]
    insecure_http: bool,
    /// The Unix socket local users' CLI reaches the daemon on with no token (the kernel names them); default: DATA_DIR/gpool.sock.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Who is an admin (Unix users and groups), local callers' teams by group, and token users' Unix accounts (YAML; see docs/security.md).
    #[arg(long)]
    identities: Option<PathBuf>,
    /// Elastic node pools the autoscaler grows and shrinks, with their prices and providers (YAML; see docs/cost.md).
    #[arg(long)]
    pools: Option<PathBuf>,
    /// Monthly budgets per team or queue (YAML list of {team | queue, dollarsPerMonth, mode: hard|soft, alertAt: [50, 80, 100]}; see docs/cost.md).
    #[arg(long)]
    budgets: Option<PathBuf>,
    /// Serve inference services here: one HTTP proxy in front of their replicas (e.g. 127.0.0.1:8780; see docs/services.md).
    #[arg(long, value_name = "ADDR")]
    proxy_listen: Option<std::net::SocketAddr>,
}

impl PlaneArgs {
    fn config(self) -> PlaneConfig {
        let data_dir = self.data_dir.unwrap_or_else(default_data_dir);
        let tls_dir = self.tls_dir.or_else(|| self.tls.then(|| data_dir.join("tls")));
        PlaneConfig {
            tls_dir,
            tls_sans: self.tls_sans,
            tls_files: self.tls_cert.zip(self.tls_key),
            insecure_http: self.insecure_http,
            data_dir,
            listen: self.listen,
            policy: self.policy,
            placement: self.placement,
            policy_knobs: self.policy_set,
            queues_file: self.queues,
            fsync: self.fsync,
            alert_rules: self.alert_rules,
            alert_webhook: self.alert_webhook,
            gpu_prices: self.gpu_prices,
            lease: self.lease,
            health_check_after: self.health_check_after,
            health_check_every: self.health_check_every,
            http_header_timeout: self.http_header_timeout,
            state_reserve: self.state_reserve,
            metrics_auth: self.metrics_auth,
            socket: self.socket,
            identities: self.identities,
            pools: self.pools,
            budgets: self.budgets,
            proxy_listen: self.proxy_listen,
        }
    }
}

/// Settings of a node.
#[derive(Args, Debug)]
pub(crate) struct NodeArgs {
    /// Run on a simulated inventory instead of discovering GPUs: 8xH100-80GB, 4xA100-80GB,4xL4, 1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2.
    #[arg(long)]
    simulate_gpus: Option<String>,
    /// Where real GPUs are read from: auto (NVML, else nvidia-smi, else amd-smi or rocm-smi, else TPU chips),
    /// nvml, nvidia-smi, amd (amd-smi, else rocm-smi), tpu (device files and tpu-info).
    #[arg(long, default_value = "auto")]
    gpu_backend: String,
    /// How often GPUs and job processes are sampled (e.g. 5s, 1s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg)]
    sample_interval: std::time::Duration,
    /// Node name (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// This node's power budget (3000W, 2.5kW): the scheduler starts nothing that would take it over (docs/daemon.md).
    #[arg(long, value_parser = parse_watts)]
    power_budget: Option<u32>,
    /// CPUs this node offers (default: the host's; 12 per GPU when simulated).
    #[arg(long)]
    cpus: Option<f64>,
    /// Memory this node offers in GiB (default: the host's; 128 per GPU when simulated).
    #[arg(long)]
    memory_gb: Option<u64>,
    /// A node label for selectors and affinity (repeatable): --label zone=a.
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Node pool: on-demand (default), spot, reserved.
    #[arg(long)]
    pool: Option<String>,
    /// Most a replica's log file may hold (over all its attempts); later output is discarded after a marker: 1Gi, 500Mi, or unlimited.
    #[arg(long, default_value = "1Gi")]
    log_limit: String,
    /// Free space of the data directory under which this node starts no new jobs (and says so in `gpool nodes`).
    #[arg(long, default_value = "100Mi")]
    disk_reserve: String,
    /// Whose account jobs run as: user (each job as its submitter's Unix account; needs root) or daemon (single-user mode: every job as this process's account). Default: user as root, daemon otherwise.
    #[arg(long)]
    run_as: Option<String>,
    /// Confine each job with control groups (memory and CPU from its request, a task limit, only its own GPUs' and MIG instances' device files): auto (v1 where the host mounts it, else v2; as root), v1, v2 or off.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off", "v1", "v2"])]
    cgroups: String,
    /// How jobs that ask for a fraction of a GPU share this node's GPUs: time-slicing (memory limits watched and enforced by the agent), mps (NVIDIA MPS runs here: compute and memory limits set by MPS), or off. See docs/sharing.md.
    #[arg(long, default_value = "time-slicing", value_parser = clap::value_parser!(gpool_core::GpuSharing))]
    gpu_sharing: gpool_core::GpuSharing,
    /// MIG GPUs whose layout gpool may change to follow the queue's MIG demand: all, or GPU indices (0,2). An idle managed GPU is repartitioned with nvidia-smi mig (as root); a busy one is drained first. See docs/sharing.md.
    #[arg(long, value_name = "all|INDICES")]
    mig_managed: Option<String>,
    /// A directory on a file system every node mounts: jobs' checkpoints (GPOOL_CHECKPOINT_DIR) go to ROOT/job-ID, so a requeued job resumes on any node.
    #[arg(long, env = "GPOOL_CHECKPOINT_ROOT")]
    checkpoint_root: Option<PathBuf>,
    /// On a spot machine: watch the provider's notice (aws: IMDS spot/instance-action; gcp: instance/preempted; or aws=URL, gcp=URL) and pass it to the control plane, which checkpoints and requeues the jobs here (gpool agent only).
    #[arg(long, value_parser = clap::value_parser!(gpool_daemon::node::spot_watch::SpotSource))]
    spot_notice: Option<gpool_daemon::node::spot_watch::SpotSource>,
    /// Runs jobs that name an image: auto (podman, else docker), podman, docker, none, or a path to either.
    #[arg(long, default_value = "auto")]
    container_runtime: String,
    /// A word added to `podman|docker run` for every job's container (repeatable), e.g. --container-arg=--runtime=runc --container-arg=--ulimit=nofile=1024:1024.
    #[arg(long = "container-arg", allow_hyphen_values = true)]
    container_args: Vec<String>,
    /// Most the images gpool runs may take on this node (e.g. 50Gi): past it, the least recently used image no job needs is removed.
    #[arg(long, value_name = "SIZE", value_parser = |s: &str| gpool_api::quantity::parse_bytes(s).map_err(|e| e.to_string()))]
    image_cache_size: Option<u64>,
    /// A program that checks a GPU taken out for a fault before it takes work again (like Slurm's HealthCheckProgram; e.g. a wrapper of `dcgmi diag -r 1`). Run as this daemon's account with CUDA_VISIBLE_DEVICES, GPOOL_GPU_INDEX and GPOOL_GPU_UUID naming the GPU; exit 0 brings the GPU back. Without it, a built-in check decides (docs/health.md).
    #[arg(long, value_name = "PROGRAM")]
    health_check: Option<PathBuf>,
    /// How long --health-check may run before it counts as failed.
    #[arg(long, default_value = "5m", value_parser = parse_duration_arg)]
    health_check_timeout: std::time::Duration,
}

impl NodeArgs {
    fn config(self) -> anyhow::Result<NodeConfig> {
        let mut labels = BTreeMap::new();
        for l in self.labels {
            let Some((k, v)) = l.split_once('=') else { bail!("--label {l:?}: expected KEY=VALUE") };
            if k.trim().is_empty() {
                bail!("--label {l:?}: the key is empty");
            }
            labels.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(NodeConfig {
            simulate_gpus: self.simulate_gpus,
            gpu_backend: self.gpu_backend,
            sample_interval: self.sample_interval,
            node_name: self.node_name,
            power_budget_w: self.power_budget,
            cpus: self.cpus,
            memory_gb: self.memory_gb,
            labels,
            pool: self.pool,
            log_limit: match self.log_limit.trim() {
                "unlimited" | "none" => None,
                size => Some(gpool_api::quantity::parse_bytes(size).map_err(|e| {
                    anyhow::anyhow!("--log-limit {size:?}: {e} (a size such as 1Gi or 500Mi, or unlimited)")
                })?),
            },
            disk_reserve: gpool_api::quantity::parse_bytes(self.disk_reserve.trim()).map_err(|e| {
                anyhow::anyhow!("--disk-reserve {:?}: {e} (a size such as 100Mi or 2Gi)", self.disk_reserve)
            })?,
            cgroups: gpool_daemon::node::cgroup::Mode::parse(&self.cgroups)
                .map_err(|e| anyhow::anyhow!("--cgroups: {e}"))?,
            gpu_sharing: self.gpu_sharing,
            checkpoint_root: self.checkpoint_root,
            spot_notice: self.spot_notice,
            container_runtime: self.container_runtime,
            container_args: self.container_args,
            image_cache_size: self.image_cache_size,
            health_check: match self.health_check {
                None => None,
                Some(p) if p.is_absolute() => Some((p, self.health_check_timeout)),
                Some(p) => bail!("--health-check {}: give the program's absolute path", p.display()),
            },
            mig_managed: match self.mig_managed.as_deref().map(str::trim) {
                None | Some("none") => None,
                Some("all") => Some(Vec::new()),
                Some(list) => {
                    Some(list.split(',').map(|i| i.trim().parse::<u32>()).collect::<Result<Vec<u32>, _>>().map_err(
                        |_| anyhow::anyhow!("--mig-managed {list:?}: expected all, none or GPU indices such as 0,2"),
                    )?)
                }
            },
            run_as: match self.run_as.as_deref() {
                None => gpool_daemon::node::account::RunAs::default_for_this_process(),
                Some(m) => {
                    gpool_daemon::node::account::RunAs::parse(m).map_err(|e| anyhow::anyhow!("--run-as: {e}"))?
                }
            },
        })
    }
}

/// Arguments of `gpool up`.
#[derive(Args, Debug)]
pub(crate) struct UpArgs {
    /// A TOML file of this command's flags (`listen = "0.0.0.0:7878"`, `gpu-price = ["H100-80GB=2.5"]`); flags and their environment variables win over it. See docs/daemon.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    log: crate::logging::LogArgs,
    #[command(flatten)]
    plane: PlaneArgs,
    #[command(flatten)]
    node: NodeArgs,
}

pub(crate) fn up(a: UpArgs) -> anyhow::Result<()> {
    a.log.init()?;
    if a.node.spot_notice.is_some() {
        bail!(
            "--spot-notice is for `gpool agent` on a spot machine; for gpool up's own node, give the notice with `gpool nodes notice NODE --in 2m`"
        );
    }
    gpool_daemon::up::run(UpConfig { plane: a.plane.config(), node: a.node.config()? })
}

/// Arguments of `gpool serve`.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// A TOML file of this command's flags (`listen = "0.0.0.0:7878"`, `gpu-price = ["H100-80GB=2.5"]`); flags and their environment variables win over it. See docs/daemon.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    log: crate::logging::LogArgs,
    /// The state: postgres://user@host:port/db (several control planes may share it: one leads, the others stand by), or sqlite:///path/state.db (default: in the data directory).
    #[arg(long, env = "GPOOL_DB", hide_env_values = true)]
    db: Option<String>,
    #[command(flatten)]
    plane: PlaneArgs,
}

pub(crate) fn serve(a: ServeArgs) -> anyhow::Result<()> {
    a.log.init()?;
    gpool_daemon::serve::run(gpool_daemon::serve::ServeConfig { plane: a.plane.config(), db: a.db })
}

/// Arguments of `gpool agent`.
#[derive(Args, Debug)]
pub(crate) struct AgentArgs {
    /// A TOML file of this command's flags (`listen = "0.0.0.0:7878"`, `gpu-price = ["H100-80GB=2.5"]`); flags and their environment variables win over it. See docs/daemon.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    log: crate::logging::LogArgs,
    /// The control plane's URL; several, comma-separated, for a leader and its standbys.
    #[arg(long, env = "GPOOL_SERVER", value_delimiter = ',', required = true)]
    server: Vec<String>,
    /// A file holding this node's token (`gpool token create --node --user NAME`), mode 0600; else the token is read from GPOOL_TOKEN. Never on the command line, which every user sees in `ps`.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The control planes' CA certificate (HTTPS).
    #[arg(long, conflicts_with = "ca_fingerprint")]
    ca_file: Option<PathBuf>,
    /// The control planes' CA fingerprint (sha256:…, printed by `gpool serve --tls`): the agent fetches the CA and refuses one that does not match.
    #[arg(long)]
    ca_fingerprint: Option<String>,
    /// Allow a control plane at http:// beyond loopback (the node token crosses the network in the clear); refused with --ca-file or --ca-fingerprint.
    #[arg(long)]
    insecure_http: bool,
    /// Where this node is reached by others (MASTER_ADDR of gangs whose rank 0 runs here); default: the address used to reach the control plane.
    #[arg(long)]
    advertise_addr: Option<String>,
    /// Where other agents ask this one, when no control plane answers them, whether it still hears from one (docs/cluster.md); default: the advertised address and any free port. Give a fixed port where a firewall must let agents reach each other.
    #[arg(long, value_name = "ADDR:PORT")]
    peer_listen: Option<std::net::SocketAddr>,
    /// The address other agents are told for this one's peer listener, when they must reach it through something else (NAT, a proxy); default: the address it listens on.
    #[arg(long, value_name = "HOST:PORT")]
    peer_advertise: Option<String>,
    /// Data directory of the agent (run directories, logs, checkpoints).
    #[arg(long, env = "GPOOL_AGENT_DIR")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    node: NodeArgs,
}

/// The node token: from `--token-file`, else from `GPOOL_TOKEN`.
fn node_token(file: Option<&Path>) -> anyhow::Result<String> {
    let token = match file {
        Some(f) => {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(f).map_err(|e| anyhow::anyhow!("--token-file {}: {e}", f.display()))?;
            if meta.permissions().mode() & 0o044 != 0 {
                eprintln!(
                    "gpool agent: warning: {} can be read by other users; `chmod 600` it (it holds the node's credential)",
                    f.display()
                );
            }
            std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("--token-file {}: {e}", f.display()))?
        }
        None => std::env::var("GPOOL_TOKEN").unwrap_or_default(),
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        bail!(
            "no node token: put it in a file given by --token-file (mode 0600) or in GPOOL_TOKEN \
             (create one with `gpool token create --node --user NODE-NAME`)"
        );
    }
    Ok(token)
}

pub(crate) fn agent(a: AgentArgs) -> anyhow::Result<()> {
    a.log.init()?;
    let data_dir = a.data_dir.unwrap_or_else(|| default_data_dir().join("agent"));
    gpool_daemon::agent::run(gpool_daemon::agent::AgentProcessConfig {
        servers: a.server,
        token: node_token(a.token_file.as_deref())?,
        trust: match (a.ca_file, a.ca_fingerprint) {
            (Some(f), _) => gpool_daemon::node::trust::Trust::CaFile(f),
            (None, Some(p)) => gpool_daemon::node::trust::Trust::Fingerprint(p),
            (None, None) => gpool_daemon::node::trust::Trust::Public,
        },
        data_dir,
        advertise: a.advertise_addr,
        node: a.node.config()?,
        insecure_http: a.insecure_http,
        peer_listen: a.peer_listen,
        peer_advertise: a.peer_advertise,
    })
}

/// Supervises one job replica (`gpool shim DIR`, started by the agent); returns its exit status.
pub(crate) fn shim(dir: &Path) -> u8 {
    gpool_daemon::node::shim::main(dir) as u8
}
