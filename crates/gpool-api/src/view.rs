//! What the REST API returns.

use serde::{Deserialize, Serialize};

use crate::spec::JobSpec;

/// Lifecycle states of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for resources, a dependency or its retry back-off.
    Pending,
    /// Devices allocated; processes being started.
    Starting,
    Running,
    /// Stop signal sent (cancel, preemption, time limit); waiting for the processes to exit.
    Stopping,
    Succeeded,
    Failed,
    Cancelled,
    /// Killed at its time limit.
    TimedOut,
}

impl JobState {
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::TimedOut)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Stopping => "stopping",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::TimedOut => "timed_out",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        [
            JobState::Pending,
            JobState::Starting,
            JobState::Running,
            JobState::Stopping,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
            JobState::TimedOut,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

/// Where one replica runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplicaView {
    pub rank: u32,
    pub node: String,
    /// Driver indices of whole GPUs.
    pub gpus: Vec<u32>,
    /// UUIDs of MIG instances.
    pub mig: Vec<String>,
    /// What the replica's `CUDA_VISIBLE_DEVICES` is set to.
    pub cuda_visible_devices: String,
    /// Its share of the one GPU in `gpus`, when it shares that GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<GpuShareView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// A replica's share of a shared GPU: compute in thousandths, memory in MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuShareView {
    pub milli: u16,
    pub memory_mb: u64,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExitView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// A job as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub team: String,
    pub queue: String,
    pub state: JobState,
    /// Why a pending job waits, or why a finished one ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub priority: i32,
    pub submitted_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Runs so far (1 on the first start).
    pub attempt: u32,
    pub restarts: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitView>,
    /// GPU-hours, utilisation and peak memory, once telemetry came in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::telemetry::UsageSummary>,
    /// The run time gpool learned for it from similar jobs, when its spec gave no estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_estimate: Option<LearnedEstimate>,
    /// For a job with a deadline that, as of the last pass, will miss it: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<String>,
    /// When backfill expects it to start, for the job it holds resources
    /// for (the head of the queue that does not fit yet), as of the last pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
    /// The array this job is a task of (`spec.array`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayView>,
    /// Replicas of its current run whose processes have not ended (0 when not running).
    #[serde(default)]
    pub running_replicas: u32,
    /// An elastic job's changes of size, oldest first (the last 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resizes: Vec<ResizeView>,
    pub spec: JobSpec,
}

/// One change of an elastic job's size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResizeView {
    /// When the scheduler decided it (RFC 3339).
    pub at: String,
    pub from: u32,
    pub to: u32,
    /// Why: "idle GPUs", or the job it gave replicas to and the rule that let it.
    pub why: String,
}

/// A task of a job array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArrayView {
    /// The array's id: its first task's job id (`ID_INDEX` names one task).
    pub job: u64,
    /// This task's index (`SLURM_ARRAY_TASK_ID`).
    pub index: u32,
    pub tasks: u32,
    /// The array's lowest and highest index (`SLURM_ARRAY_TASK_MIN`, `_MAX`).
    pub min_index: u32,
    pub max_index: u32,
    /// At most this many of its tasks run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A run time learned from the jobs like this one that succeeded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LearnedEstimate {
    /// To the millisecond.
    pub seconds: f64,
    /// How many successes it was computed from.
    pub samples: u32,
    /// What they had in common with the job: `same` (user, name, GPUs and
    /// queue), `user-name`, `user-gpus` (and queue) or `queue-gpus`.
    pub basis: String,
    /// Whether the scheduler plans with it (policies that order or backfill
    /// by estimates do; gpool's default only shows it).
    #[serde(default)]
    pub planned: bool,
}

/// A page of jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// The answer to a submission.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Submitted {
    pub ids: Vec<u64>,
}

/// A MIG instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MigView {
    pub profile: String,
    pub uuid: String,
    /// The GPU-instance id, where the node's agent could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi_id: Option<u32>,
    pub memory_mb: u64,
    /// A compute instance that takes part of its GPU instance
    /// (`1c.3g.40gb`): `memory_mb` is shared with the instance's other
    /// compute instances, not this device's alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_memory: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// Memory in use, where the device reports it per instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
}

/// A device on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceView {
    pub index: u32,
    pub uuid: String,
    pub kind: String,
    pub model: String,
    pub memory_mb: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigView>,
    /// The job holding the whole device, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// The jobs sharing the device, with their shares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<DeviceShareView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// The latest reading, once the node's sampler has sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<crate::telemetry::DeviceTelemetry>,
    /// Why the GPU is degraded (slowing down for heat), while it is: new
    /// gangs avoid it while another fit exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// Why the GPU is out of service (a fault), while it is: nothing new
    /// is placed on it until a health check passes or an operator restores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<QuarantineView>,
}

/// A GPU out of service for a fault (`gpool health`, `gpool nodes`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuarantineView {
    pub node: String,
    pub gpu: u32,
    /// The fault, e.g. `XID 79 (GPU has fallen off the bus)`.
    pub fault: String,
    /// RFC 3339.
    pub since: String,
    /// What was done: the jobs requeued or ended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// It faulted again within a day: only `gpool nodes restore` brings it back.
    #[serde(default)]
    pub operator_only: bool,
    /// The last health check: when (RFC 3339) and what it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<(String, String)>,
    /// GPU-hours lost to it so far.
    pub lost_gpu_hours: f64,
}

/// One job's share of a shared GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceShareView {
    pub job: u64,
    pub milli: u16,
    pub memory_mb: u64,
}

/// What jobs cost, grouped (`gpool cost`, `GET /api/v1/cost`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostReport {
    /// job, user, team, queue or pool.
    pub by: String,
    pub since: String,
    pub total_dollars: f64,
    /// Largest spend first.
    pub rows: Vec<CostRow>,
    /// The period step by step (hours over a period of two days or less,
    /// else days, UTC): the largest groups' GPU-hours and dollars (jobs in
    /// the step they ended in, running ones in the current one), the others
    /// summed as `others`; empty by job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<CostStep>,
}

/// One group's use in one step of a [`CostReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostStep {
    /// When the step starts (RFC 3339).
    pub at: String,
    /// `hour` or `day`.
    pub step: String,
    pub key: String,
    pub gpu_hours: f64,
    pub dollars: f64,
}

/// One group of a [`CostReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostRow {
    pub key: String,
    pub dollars: f64,
    pub gpu_hours: f64,
    pub jobs: u64,
    /// Energy the GPUs drew for these jobs, watt-hours (where power was sampled).
    #[serde(default)]
    pub energy_wh: f64,
    /// Of the GPU-hours, those with the devices under 5% utilisation.
    #[serde(default)]
    pub idle_gpu_hours: f64,
    /// The jobs' mean GPU utilisation, weighted by their GPU-hours, where sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_gpu_util: Option<f64>,
}

/// An elastic node pool (`gpool pools`, `GET /api/v1/pools`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PoolView {
    pub name: String,
    /// `on-demand`, `spot` or `reserved`.
    pub kind: String,
    pub gpus: u32,
    pub gpu_model: String,
    pub cpus: u32,
    pub memory_gb: u64,
    /// Dollars per node-hour.
    pub price_per_node_hour: f64,
    pub min: u32,
    pub max: u32,
    /// Nodes the pool has now, in any state.
    pub nodes: u32,
    /// Asked for, not registered yet.
    pub creating: u32,
    pub deleting: u32,
    /// Up and running nothing.
    pub idle: u32,
    /// Dollars per hour paid for capacity nothing uses now: idle nodes, and a
    /// reserved pool's committed nodes that run nothing or do not exist.
    #[serde(default)]
    pub unused_per_hour: f64,
    #[serde(default)]
    pub node_names: Vec<String>,
    /// Failed creations since a node last came up.
    pub failures: u32,
    /// False while the pool is left alone after failing repeatedly.
    pub available: bool,
    /// When the pool is tried again, while it backs off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// A node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeView {
    pub name: String,
    /// How jobs may share its GPUs: `off`, `time-slicing` or `mps`.
    #[serde(default = "sharing_off")]
    pub gpu_sharing: String,
    /// `podman` or `docker`, for jobs in images; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    pub state: String,
    pub pool: String,
    pub cpus: f64,
    pub memory_mb: u64,
    pub free_cpus: f64,
    pub free_memory_mb: u64,
    pub labels: std::collections::BTreeMap<String, String>,
    /// Where the devices were found: `nvml`, `nvidia-smi` or `simulated`.
    pub source: String,
    /// What the node's device layer could not read, and what it used
    /// instead (`MIG placement unknown: \`nvidia-smi mig -lgi\` failed …`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<String>,
    /// Where other nodes reach it (a remote agent's address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// `local` (the control plane's own agent), or a remote agent's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub devices: Vec<DeviceView>,
    pub jobs: Vec<u64>,
    /// Why the node takes no new work now (its disk under the reserve).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
}

/// A quota queue and its use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueueView {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    pub guarantee_gpus: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<f64>,
    pub used_gpus: f64,
    /// Maximums per accelerator kind, by resource name (`amd.com/gpu: 4`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub max_per_kind: std::collections::BTreeMap<String, f64>,
    /// Use per accelerator kind in use, by resource name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub used_per_kind: std::collections::BTreeMap<String, f64>,
    pub pending: u64,
    pub running: u64,
    /// For a queue with windows: `open until …` or `closed until …` (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// Something that happened, as sent on the event stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EventView {
    pub seq: u64,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// The owner of the job the event is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `submitted`, `started`, `succeeded`, `failed`, `preempted`, `cancelled`, `requeued`, …
    pub kind: String,
    pub message: String,
}

/// An API error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// A new token (the secret is shown once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenCreated {
    pub token: String,
    /// The token's public id (`gpool token list`, `gpool token revoke ID`).
    #[serde(default)]
    pub id: String,
    pub user: String,
    pub team: String,
    pub role: String,
    /// When it stops being accepted (ms since the epoch); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
}

/// A token as listed: never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenView {
    /// The first 12 hex digits of the secret's SHA-256: names the token, reveals nothing.
    pub id: String,
    pub user: String,
    pub team: String,
    pub role: String,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// To the minute; absent: never used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<i64>,
}

/// A token request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    #[schemars(pattern(crate::patterns::IDENTITY), length(max = 253))]
    pub user: String,
    #[serde(default)]
    #[schemars(pattern(crate::patterns::IDENTITY), length(max = 253))]
    pub team: Option<String>,
    /// `user` (default), `admin`, `node` or `reader` (reads everything, changes nothing).
    #[serde(default)]
    #[schemars(pattern("^(user|admin|node|reader)$"))]
    pub role: Option<String>,
    /// How long it is accepted (`90d`, `12h`); absent: until revoked.
    #[serde(default)]
    #[schemars(pattern(crate::patterns::POSITIVE_DURATION))]
    pub ttl: Option<String>,
}

/// Who the caller is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WhoAmI {
    pub user: String,
    pub team: String,
    pub role: String,
}

fn sharing_off() -> String {
    "off".into()
}

/// An inference service (`gpool services`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceView {
    pub name: String,
    pub user: String,
    /// Where the proxy serves it: a path prefix (`/NAME/`) or the `Host` name `NAME.…`.
    pub endpoint: String,
    /// The spec generation (1, then one more for each changed spec applied).
    pub generation: u64,
    /// Replicas whose readiness probe answers and that take requests.
    pub ready: u32,
    /// Replicas the autoscaler wants now.
    pub desired: u32,
    pub min: u32,
    pub max: u32,
    /// Requests per second through the proxy, over its last sampling period.
    pub requests_per_second: f64,
    /// Latency through the proxy (to the response's head) over the last 10 s, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Requests in flight now, held ones included.
    pub in_flight: f64,
    pub requests_total: u64,
    /// Requests answered 502/503/504 by the proxy (no replica could take them).
    pub failed_total: u64,
    pub replicas: Vec<ServiceReplicaView>,
}

/// One replica of a service: a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceReplicaView {
    pub job: u64,
    pub generation: u64,
    /// The job's state (`pending`, `running`, …).
    pub state: String,
    pub ready: bool,
    pub draining: bool,
    /// `host:port` the proxy sends its requests to, once it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The answer to applying a service spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceApplied {
    pub name: String,
    pub generation: u64,
    /// `created`, `updated` (a rolling update begins) or `unchanged`.
    pub outcome: String,
    pub endpoint: String,
}

/// A login to an image registry, as listed: never its password.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RegistryView {
    pub registry: String,
    pub username: String,
}

/// `PUT /api/v1/registries/{registry}`: a login for the caller's jobs in images from that registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryLogin {
    /// Not blank; no control character.
    #[schemars(pattern("^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"))]
    pub username: String,
    /// Not empty; no line break or NUL.
    #[schemars(pattern("^[^\\n\\x00]+$"))]
    pub password: String,
}

/// A monthly budget and this month's spend (`GET /api/v1/budgets`, `gpool budgets`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BudgetView {
    /// `team` or `queue`.
    pub scope: String,
    /// The team's or queue's name.
    pub name: String,
    pub dollars_per_month: f64,
    /// `hard`: at 100% its jobs wait for next month; `soft`: they run only as preemptible, at the lowest priority.
    pub mode: String,
    /// This month (UTC): jobs that ended in it, and what running jobs have cost so far.
    pub spent_usd: f64,
    pub percent: f64,
    /// Percentages at which an alert goes out.
    pub alert_at: Vec<u32>,
    /// When the month ends and spend starts again (RFC 3339).
    pub resets_at: String,
    /// Pending jobs it holds back (a hard budget at 100%).
    pub held_jobs: u64,
}

/// `PUT /api/v1/power`: a budget set live (admins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerSet {
    /// `node`, `label` or `pool`.
    #[schemars(pattern("^(node|label|pool)$"))]
    pub scope: String,
    /// The node's or pool's name, or the label as `key=value`.
    pub target: String,
    pub watts: u32,
}

/// A power budget and its use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PowerView {
    /// `node n1`, `rack=r12`, `pool spot`.
    pub scope: String,
    pub watts: u32,
    /// What the scheduler counts against it: idle GPUs, and each running job at its expected draw.
    pub counted_watts: u64,
    /// What its GPUs drew at their latest readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_watts: Option<u64>,
    pub nodes: Vec<String>,
    /// Pending jobs the last pass held back for it.
    pub held_back: u64,
}
