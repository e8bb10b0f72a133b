//! The agent protocol: what `gpool agent` and the control plane say to each
//! other over HTTP/JSON under `/agent/v1` (docs/cluster.md).
//!
//! - `POST /agent/v1/register`: the agent says who it is, what it has and
//!   which replicas run on it; the control plane answers with the node's new
//!   epoch and lease.
//! - `GET /agent/v1/commands?node=N&epoch=E&after=SEQ`: a long poll for
//!   commands; `after` acknowledges every command up to that sequence number.
//! - `POST /agent/v1/report`: exits, starts, telemetry; also a heartbeat.
//! - `POST /agent/v1/logs?node=…&job=…&attempt=…&rank=…&stream=…&offset=…`: a
//!   chunk of a replica's output (the body), appended at `offset`.
//!
//! Every request renews the node's lease. A request with an old epoch gets
//! 409: the agent must register again (the control plane restarted, or
//! declared the node down meanwhile).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A replica, identified across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ReplicaId {
    pub job: u64,
    pub attempt: u32,
    pub rank: u32,
}

/// A MIG instance as an agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MigWire {
    pub profile: String,
    pub uuid: String,
    /// Absent where the agent could not read GPU-instance ids (listing them
    /// may need root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi_id: Option<u32>,
    pub memory_mb: u64,
}

fn nvidia_gpu() -> String {
    "nvidia-gpu".into()
}

fn is_nvidia_gpu(kind: &str) -> bool {
    kind == "nvidia-gpu"
}

/// A GPU as an agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GpuWire {
    /// `nvidia-gpu` (absent: agents from before other kinds), `amd-gpu` or `tpu`.
    #[serde(default = "nvidia_gpu", skip_serializing_if = "is_nvidia_gpu")]
    pub kind: String,
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub model: String,
    pub memory_mb: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Present when MIG is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Vec<MigWire>>,
}

/// `POST /agent/v1/register`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Register {
    pub node: String,
    /// Where other nodes reach this one (`MASTER_ADDR` of gangs whose rank 0 runs here).
    pub addr: String,
    pub cpus: f64,
    pub memory_mb: u64,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Node pool (`on-demand`, `spot`, `reserved`, …).
    #[serde(default)]
    pub pool: Option<String>,
    /// `nvml`, `nvidia-smi`, `simulated` or `none`.
    pub source: String,
    /// What the device layer could not read, and what it used instead
    /// (`MIG placement unknown: …`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<String>,
    pub gpus: Vec<GpuWire>,
    /// How jobs may share its GPUs: `off`, `time-slicing` or `mps`
    /// (absent from agents older than GPU sharing: `off`).
    #[serde(default = "sharing_off")]
    pub gpu_sharing: String,
    /// `podman` or `docker`, for jobs in images; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// Indices of the MIG GPUs whose layout the control plane may change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_managed: Vec<u32>,
    /// Replicas whose shims are alive on this node.
    #[serde(default)]
    pub running: Vec<ReplicaId>,
    pub version: String,
    /// The node's power budget in watts (`gpool agent --power-budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_budget_w: Option<u32>,
    /// Where the other agents reach this one's peer listener (`host:port`),
    /// to ask whether it still hears from a leading control plane
    /// (docs/cluster.md, "When no control plane answers"). Absent: an agent
    /// older than the rule, which no peer can ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
    /// What the agent did while no control plane answered it (it kept its
    /// jobs through an outage), recorded as the node's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The nodes an agent may ask, when no control plane answers it, whether
/// they still hear from one: every node the control plane counts as a
/// member (not declared down), itself included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Roster {
    /// Changes whenever a member joins or is declared down.
    pub version: u64,
    /// The key peers sign their questions and answers with (hex, 32 bytes):
    /// only nodes of the cluster know it.
    pub key: String,
    pub members: Vec<RosterMember>,
}

/// A member of the roster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RosterMember {
    pub node: String,
    /// Its peer listener; absent until its agent registered with this
    /// control plane (a member that cannot be asked counts as not reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
}

/// The answer to a report: the roster, when the agent's is out of date.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reported {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roster: Option<Roster>,
}

/// `GET /agent/v1/peer?from=NODE&nonce=HEX&mac=HEX`, asked of another
/// agent: does it hear from a leading control plane? `mac` is
/// HMAC-SHA256(roster key, "ask\n{from}\n{nonce}") in hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerAnswer {
    /// The node that answers.
    pub node: String,
    /// Whether its session with a leading control plane is alive: its last
    /// request was answered, within a lease, and none failed since.
    pub in_session: bool,
    /// HMAC-SHA256(roster key, "answer\n{node}\n{nonce}\n{in_session}") in hex.
    pub mac: String,
}

/// The answer to a registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Registered {
    /// Incremented at every registration; every later request carries it.
    pub epoch: u64,
    /// A node not heard from for this long is down: its agent must kill its
    /// jobs by then (it writes the lease for its shims; see docs/cluster.md).
    pub lease_ms: u64,
    /// How often to send a report even when there is nothing to say.
    pub heartbeat_ms: u64,
    /// Commands already waiting (also delivered by the next poll).
    pub next_seq: u64,
    /// The nodes to ask when no control plane answers (absent from control
    /// planes older than the rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roster: Option<Roster>,
}

/// What the control plane asks an agent to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Command {
    /// Start a replica (idempotent: a replica already started is not started again).
    Start {
        replica: ReplicaId,
        /// The job owner's login to its image's registry (an auth file); only in this order, never shown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registry_auth: Option<String>,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        /// Working directory on the node; absent: the agent's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// GPU or MIG UUIDs the replica holds.
        devices: Vec<String>,
        /// The submitter's account name (a node running jobs as their users runs it as this account).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// CPUs (thousandths) and memory allocated, which a confining node enforces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpus_milli: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mb: Option<u64>,
        /// The OCI image to run the command in, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
        /// An interactive job: run on a pseudo-terminal, ended when no client
        /// has been attached for this long (milliseconds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty_grace_ms: Option<u64>,
    },
    /// Send a signal (by number) to the replica's process group.
    Signal { replica: ReplicaId, signal: i32 },
    /// Find out what became of a replica the control plane thinks runs here
    /// (after a restart of either side): reported as started, exited or lost.
    Reconcile { replica: ReplicaId, devices: Vec<String> },
    /// A replica that must not run (an old allocation): kill it now.
    Kill { replica: ReplicaId },
    /// Connect the interactive replica's terminal to the control plane for
    /// client session `session`: `GET /agent/v1/terminals/{session}/input`
    /// and `POST /agent/v1/terminals/{session}/output`.
    Attach { replica: ReplicaId, session: String },
    /// Lay MIG GPU `gpu` out as `layout` (no job uses it); the agent says
    /// how it went, and what the GPU then really has, in its next telemetry.
    MigLayout { gpu: u32, layout: Vec<MigSlotWire> },
    /// Profile a replica for `seconds` (`gpool profile`): its Python
    /// stacks (py-spy) and its devices at 10 Hz; answered by an
    /// [`Event::Profiled`] with the same `profile` number.
    Profile {
        replica: ReplicaId,
        profile: u64,
        seconds: u32,
        /// Native frames too (C extensions, BLAS, CUDA): py-spy `--native`, which pauses the process per sample.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        native: bool,
    },
    /// Show (or, with `None`, clear) a fault on a simulated GPU (`gpool
    /// nodes inject`/`restore`); a node with real devices refuses.
    InjectFault {
        gpu: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<FaultWire>,
    },
    /// Check quarantined GPU `gpu` (no job uses it) with the node's health
    /// check program; the verdict comes back in the next telemetry.
    CheckHealth { gpu: u32, uuid: String },
    /// Pull an image now: a job will run in it here once the GPUs it waits for are free.
    Prefetch {
        image: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registry_auth: Option<String>,
    },
}

/// A fault injected into a simulated GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultWire {
    Xid(u64),
    EccUncorrected,
    Gone,
}

/// What a node's health check said of one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthVerdict {
    pub gpu: u32,
    /// `false`: the node has no health-check program; the control plane's
    /// built-in check decides.
    pub program: bool,
    pub passed: bool,
    /// The program's output (its tail) or why it could not run.
    #[serde(default)]
    pub output: String,
}

/// One GPU instance to create: a profile at a start (memory slices).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MigSlotWire {
    pub profile: String,
    pub start: u32,
}

/// How a MIG layout order went, and the node's GPUs as they really are after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigOutcome {
    pub gpu: u32,
    /// Why it failed, if it did (the GPU may be half laid out: `gpus` says how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The node's GPUs read again after the change; absent if they could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuWire>>,
}

/// A command with its sequence number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sequenced {
    pub seq: u64,
    pub command: Command,
}

/// The answer to a poll.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Commands {
    pub commands: Vec<Sequenced>,
}

/// How a replica ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExitWire {
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    pub started_ms: i64,
    pub ended_ms: i64,
    #[serde(default)]
    pub error: Option<String>,
    /// The node's shim killed it because the node lost its lease (an
    /// infrastructure failure, not the job's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fenced: bool,
}

/// Something that happened to a replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The replica runs (acknowledges a start, or answers a reconcile).
    Running {
        replica: ReplicaId,
    },
    Exited {
        replica: ReplicaId,
        exit: ExitWire,
    },
    Lost {
        replica: ReplicaId,
        why: String,
    },
    /// The agent could not start the replica (a fault of the node: its disk
    /// full, no file descriptors left); the job goes back to the queue.
    StartFailed {
        replica: ReplicaId,
        error: String,
    },
    /// What a [`Command::Profile`] recorded.
    Profiled {
        replica: ReplicaId,
        profile: u64,
        capture: ProfileCapture,
    },
}

/// One replica's profile, as its node recorded it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProfileCapture {
    /// The process py-spy attached to, if one was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// py-spy's collapsed stacks (`record --format raw`): `frame;frame COUNT` lines.
    #[serde(default)]
    pub stacks: String,
    /// The replica's devices, sampled about every 100 ms over the same window.
    #[serde(default)]
    pub samples: Vec<DeviceReading>,
    /// Why the stacks are missing (py-spy not installed, ptrace refused, no Python process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One reading of one device during a profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceReading {
    /// Milliseconds since the profile began.
    pub t_ms: u64,
    /// The GPU or MIG UUID.
    pub device: String,
    pub util_pct: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
}

/// A process on a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessWire {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory_mb: Option<u64>,
    /// Its share of the GPU's SM time in percent, where the backend reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_util_pct: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_id: Option<u32>,
}

/// A MIG instance's reading.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigSampleWire {
    pub gi_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mb: Option<u64>,
}

/// One GPU's reading; absent values are left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuSampleWire {
    pub index: u32,
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_free_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_reserved_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_temperature_c: Option<f64>,
    /// The hottest point of the die (AMD's junction or hotspot sensor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub junction_temperature_c: Option<f64>,
    /// Where the GPU starts slowing its clocks for heat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_temperature_c: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_draw_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_mj: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pstate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_corrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_last: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xids_recent: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap_pending: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap_failed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages_pending: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_replays: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enc_util_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dec_util_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_tx_bytes_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_rx_bytes_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows_correctable: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows_uncorrectable: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_fault: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigSampleWire>,
}

/// A node's telemetry at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TelemetryWire {
    pub at_ms: i64,
    pub gpus: Vec<GpuSampleWire>,
    /// CPU cores each replica used since the previous report.
    #[serde(default)]
    pub replicas: Vec<(ReplicaId, f64)>,
    /// The job of each GPU process, by pid.
    #[serde(default)]
    pub pid_jobs: BTreeMap<u32, u64>,
    /// A MIG layout order's outcome, in the first report after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigOutcome>,
    /// Health checks finished since the last report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<HealthVerdict>,
    /// Why the GPUs could not be read, if they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why the node should take no new work now (its disk under the reserve).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
    /// Replicas still pulling their image, and how far along.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pulling: Vec<(ReplicaId, String)>,
}

/// `POST /agent/v1/report`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub node: String,
    pub epoch: u64,
    #[serde(default)]
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryWire>,
    /// The version of the roster this agent has: a different one is answered
    /// with the current roster ([`Reported`]).
    #[serde(default)]
    pub roster_version: u64,
}

fn sharing_off() -> String {
    "off".into()
}
