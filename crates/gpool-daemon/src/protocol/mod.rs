//! What a node and the control plane say to each other, in process (`gpool
//! up`'s local agent) or over the agent protocol (`gpool agent`, whose wire
//! form is `gpool_api::agent`): replica keys, the launch of a replica, how
//! it ended, the agent's reports and the node's description of itself.
//!
//! Both wings import this module; it imports neither (checked by
//! `crates/gpool-core/tests/workspace_rules.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

mod orders;
mod telemetry;

pub use orders::{Order, command_of, order_of};

pub use telemetry::{
    NodeReport, fault_from_wire, fault_to_wire, merge_telemetry, telemetry_from_wire, telemetry_to_wire,
};

/// A replica, identified across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaKey {
    pub job: u64,
    pub attempt: u32,
    pub rank: u32,
}

impl From<ReplicaKey> for gpool_api::agent::ReplicaId {
    fn from(k: ReplicaKey) -> Self {
        gpool_api::agent::ReplicaId { job: k.job, attempt: k.attempt, rank: k.rank }
    }
}

impl From<gpool_api::agent::ReplicaId> for ReplicaKey {
    fn from(k: gpool_api::agent::ReplicaId) -> Self {
        ReplicaKey { job: k.job, attempt: k.attempt, rank: k.rank }
    }
}

/// Where a replica's output goes under a data directory: `jobs/<id>/rank<r>.out|.err`
/// (the agent writes it there; a control plane keeps the shipped copy at the same place in its own).
pub fn log_path(data_dir: &Path, job: u64, rank: u32, stream: &str) -> PathBuf {
    data_dir
        .join("jobs")
        .join(job.to_string())
        .join(format!("rank{rank}.{}", if stream == "stderr" { "err" } else { "out" }))
}

/// What the agent tells the controller.
#[derive(Debug)]
pub enum AgentReport {
    /// The replica's process tree is gone; how it ended.
    Exited { key: ReplicaKey, exit: ExitRecord },
    /// The replica's shim disappeared without a record (killed, machine reboot).
    Lost { key: ReplicaKey, why: String },
    /// What the node's devices and replicas are doing.
    Telemetry(NodeReport),
    /// The replica runs: its start took effect (or it was found alive).
    Running { key: ReplicaKey },
    /// The agent could not start the replica (its own files or processes:
    /// a full disk, no file descriptors left): a fault of the node, not of the job.
    StartFailed { key: ReplicaKey, error: String },
    /// What a profile of the replica recorded (`node/profiler.rs`).
    Profiled { key: ReplicaKey, profile: u64, capture: gpool_api::agent::ProfileCapture },
}

/// A profile a node is asked to take of one replica (`node/profiler.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileOrder {
    /// Its number, which the capture carries back.
    pub profile: u64,
    pub seconds: u32,
    /// Native frames too (py-spy `--native`).
    pub native: bool,
}

/// What a restarted agent found for a replica it was told is running.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The shim is alive and now watched again.
    Adopted,
    /// The replica finished while nobody watched; its exit record follows as a report.
    Finished,
    /// Neither: nothing runs it (stray processes were killed); it must be requeued.
    Lost,
}

/// A node as it describes itself when it joins: what the control plane
/// needs to schedule on it (the local agent's, or a remote agent's `Register`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    /// Where other nodes reach this one (`MASTER_ADDR`).
    pub addr: String,
    /// `nvml`, `nvidia-smi`, `simulated` or `none`.
    pub source: String,
    /// What the device layer could not read, and what it used instead.
    pub degraded: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub pool: Option<String>,
    pub cpus: f64,
    pub memory_mb: u64,
    pub gpus: Vec<gpool_api::agent::GpuWire>,
    /// `off`, `time-slicing` or `mps` (`gpool_core::GpuSharing`).
    pub gpu_sharing: String,
    /// `podman` or `docker` (`node/container.rs`), if any.
    pub container_runtime: Option<String>,
    /// Indices of the MIG GPUs whose layout the control plane may change.
    pub mig_managed: Vec<u32>,
}

/// Set by the control plane on each job of a pipeline run (only those): the
/// run's id, from which the node finds the run's directory (`node/pipeline_dir.rs`).
pub const PIPELINE_RUN_ENV: &str = "GPOOL_PIPELINE_RUN";

/// What to run, sent by the agent as JSON on the shim's standard input.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// A lease file (remote agents): the job is killed once the lease it
    /// holds has expired, so that a node cut off from the control plane stops
    /// its jobs before the control plane runs them elsewhere.
    #[serde(default)]
    pub lease: Option<PathBuf>,
    /// Most bytes each of the replica's log files may hold (over all its
    /// attempts); past it output is discarded after a marker line. `None`: no limit.
    #[serde(default)]
    pub log_limit: Option<u64>,
    /// The submitter's account name: a node that runs jobs as their users
    /// (`node/account.rs`) runs this one as it.
    #[serde(default)]
    pub user: Option<String>,
    /// The account the node resolved that name to, which the shim's
    /// hand-over drops to (`handover.rs`); `None`: the agent's own.
    #[serde(default)]
    pub run_as: Option<Ids>,
    /// The CPUs (thousandths) and memory the replica was allocated (0: none asked).
    #[serde(default)]
    pub cpus_milli: u64,
    #[serde(default)]
    pub memory_mb: u64,
    /// Its control groups, when the node confines jobs (set by the agent).
    #[serde(default)]
    pub confine: Option<Confine>,
    /// The OCI image the command runs in (`node/container.rs`).
    #[serde(default)]
    pub image: Option<String>,
    /// The job owner's login to the image's registry (an auth file), if any.
    /// Never serialised: the shim's copy of the launch holds no secret.
    #[serde(skip)]
    pub registry_auth: Option<Secret>,
    /// For a job in an image: how the shim finds the image and pulls it when
    /// it is missing, before the command runs (`node/pull.rs`).
    #[serde(default)]
    pub pull: Option<PullSteps>,
    /// An interactive job (`node/terminal.rs`): the command runs on a
    /// pseudo-terminal once a client has attached, and ends when none has
    /// been for this long (milliseconds).
    #[serde(default)]
    pub tty_grace_ms: Option<u64>,
}

/// The account a replica runs as: uid, gid and supplementary groups, as a
/// login gets them (`initgroups`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    #[serde(default)]
    pub groups: Vec<u32>,
}

/// The runtime's commands that check for an image and pull it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullSteps {
    pub image: String,
    /// Succeeds when the image is here.
    pub exists: Vec<String>,
    pub pull: Vec<String>,
}

/// A secret that `Debug` does not print.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// What a replica's control groups enforce (`node/cgroup.rs`), set by
/// the agent in the launch spec its shim reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confine {
    /// The groups' name, unique on the machine: `NODE-DIRHASH-JOB-ATTEMPT-RANK`.
    pub name: String,
    pub hierarchy: Hierarchy,
    /// 0: no CPU limit.
    pub cpus_milli: u64,
    /// 0: no memory limit.
    pub memory_bytes: u64,
    /// Character devices (major, minor) the replica may not open: the
    /// node's GPU files and MIG capabilities of devices it was not given.
    pub deny: Vec<(u32, u32)>,
}

/// Where a node makes its replicas' control groups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "lowercase")]
pub enum Hierarchy {
    /// cgroup v1: per controller, the agent's own group's directory.
    V1 { memory: PathBuf, cpu: Option<PathBuf>, pids: Option<PathBuf>, devices: Option<PathBuf> },
    /// cgroup v2: the directory replicas' groups are made in, and which of
    /// the controllers gpool uses it passes down (devices are controlled
    /// by a BPF program, which needs no controller).
    V2 { parent: PathBuf, memory: bool, cpu: bool, pids: bool },
}

/// How the replica ended, written atomically by the shim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// Set when the command could not be started at all, or why it was fenced.
    pub error: Option<String>,
    /// Killed by its shim because the node lost its lease: the node failed,
    /// not the job, so the job is requeued rather than failed.
    #[serde(default)]
    pub fenced: bool,
}

impl From<ExitRecord> for gpool_api::agent::ExitWire {
    fn from(e: ExitRecord) -> Self {
        gpool_api::agent::ExitWire {
            code: e.code,
            signal: e.signal,
            started_ms: e.started_ms,
            ended_ms: e.ended_ms,
            error: e.error,
            fenced: e.fenced,
        }
    }
}

impl From<gpool_api::agent::ExitWire> for ExitRecord {
    fn from(e: gpool_api::agent::ExitWire) -> Self {
        ExitRecord {
            code: e.code,
            signal: e.signal,
            started_ms: e.started_ms,
            ended_ms: e.ended_ms,
            error: e.error,
            fenced: e.fenced,
        }
    }
}

/// A signal by name (`SIGTERM`, `TERM`, `15`).
pub fn parse_signal(s: &str) -> Option<Signal> {
    let t = s.trim().to_ascii_uppercase();
    let name = t.strip_prefix("SIG").unwrap_or(&t);
    let sig = match name {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        "HUP" => Signal::HUP,
        "QUIT" => Signal::QUIT,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "KILL" => Signal::KILL,
        n => return n.parse::<i32>().ok().and_then(Signal::from_named_raw),
    };
    Some(sig)
}

/// The wire form of discovered GPUs.
pub fn gpus_to_wire(gpus: &[gpool_gpu::GpuInfo]) -> Vec<gpool_api::agent::GpuWire> {
    gpus.iter()
        .map(|g| gpool_api::agent::GpuWire {
            kind: g.kind.as_str().to_string(),
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            model: g.model.clone(),
            memory_mb: g.memory_mb,
            pci_bus_id: g.pci_bus_id.clone(),
            nvlink_group: g.nvlink_group,
            numa_node: g.numa_node,
            mig: g.mig.as_ref().map(|list| {
                list.iter()
                    .map(|m| gpool_api::agent::MigWire {
                        profile: m.profile.clone(),
                        uuid: m.uuid.clone(),
                        gi_id: m.gi_id,
                        memory_mb: m.memory_mb,
                    })
                    .collect()
            }),
        })
        .collect()
}
