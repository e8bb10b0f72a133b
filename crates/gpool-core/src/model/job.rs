//! Jobs: what they ask for and where they are in their life.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::model::node::{Labels, Node, NodeId};
use crate::model::resources::{DeviceKind, GPU, GpuMilli, MigProfile, same_model};
use crate::model::time::Time;

/// A job's identity, assigned by whoever submits to the snapshot (the daemon
/// or the simulator). Smaller ids were submitted earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The accelerator part of one replica's request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum GpuRequest {
    /// CPU-only.
    #[default]
    None,
    /// Whole GPUs (`nvidia.com/gpu: N`), all of one model, on one node.
    Gpus { count: u32 },
    /// MIG instances of one profile (`nvidia.com/mig-1g.10gb: N`), on one node.
    Mig { profile: MigProfile, count: u32 },
    /// Devices with at least this much memory each: a MIG instance or a whole
    /// GPU, whichever is smallest and fits. With `count > 1` only whole GPUs
    /// qualify, because CUDA shows a process a single MIG instance.
    Memory { min_mb: u64, count: u32 },
    /// A share of one whole GPU that other shares may use too
    /// (`gpool.io/gpu-fraction`, `gpool.io/gpu-memory`). At least one of the
    /// two is given; the other follows from the GPU it lands on (see
    /// [`GpuShare::on_device`]). Never on a MIG GPU, never beside a whole-GPU job.
    Share { milli: Option<u16>, memory_mb: Option<u64> },
}

impl GpuRequest {
    /// Number of devices (GPUs or MIG instances) asked for.
    pub fn device_count(&self) -> u32 {
        match self {
            GpuRequest::None => 0,
            GpuRequest::Gpus { count } | GpuRequest::Mig { count, .. } | GpuRequest::Memory { count, .. } => *count,
            GpuRequest::Share { .. } => 1,
        }
    }

    /// The least quota this request can be charged, in thousandths of a GPU.
    pub(crate) fn min_units(&self) -> GpuMilli {
        match self {
            GpuRequest::None => 0,
            GpuRequest::Gpus { count } => u64::from(*count) * GPU,
            GpuRequest::Mig { profile, count } => u64::from(*count) * u64::from(profile.gpu_milli()),
            // The smallest MIG slice is 1/7 of a GPU.
            GpuRequest::Memory { count: 1, .. } => GPU.div_ceil(7),
            GpuRequest::Memory { count, .. } => u64::from(*count) * GPU,
            GpuRequest::Share { milli, .. } => milli.map_or(1, GpuMilli::from),
        }
    }
}

/// What one replica holds of a shared GPU: a compute share in thousandths
/// and a memory limit, both concrete once placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpuShare {
    pub milli: u16,
    pub memory_mb: u64,
}

impl GpuShare {
    /// The share a request takes of a GPU of `device_mb` memory: a fraction
    /// alone gets that fraction of the memory too, a memory limit alone the
    /// compute share its memory is worth (so neither can be over-committed).
    /// `None` when the GPU is too small or the request is empty.
    pub fn on_device(milli: Option<u16>, memory_mb: Option<u64>, device_mb: u64) -> Option<GpuShare> {
        if device_mb == 0 {
            return None;
        }
        let (milli, memory_mb) = match (milli, memory_mb) {
            (Some(m), Some(mb)) => (m, mb),
            (Some(m), None) => (m, device_mb * u64::from(m) / 1000),
            (None, Some(mb)) => (u16::try_from((mb * 1000).div_ceil(device_mb)).unwrap_or(u16::MAX).max(1), mb),
            (None, None) => return None,
        };
        ((1..=1000).contains(&milli) && memory_mb <= device_mb).then_some(GpuShare { milli, memory_mb })
    }
}

/// What each replica of a job needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReplicaRequest {
    pub gpu: GpuRequest,
    /// Only GPUs of this model (case-insensitive, `H100-80GB`).
    pub gpu_model: Option<Arc<str>>,
    /// Only accelerators of this kind (`nvidia.com/gpu`, `amd.com/gpu`,
    /// `google.com/tpu`); `None`: any GPU, NVIDIA or AMD, never a TPU.
    pub gpu_kind: Option<DeviceKind>,
    pub cpus_milli: u64,
    pub memory_mb: u64,
}

/// How a label expression compares.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// One Kubernetes-style match expression on labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelExpr {
    pub key: String,
    pub op: LabelOp,
}

impl LabelExpr {
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (LabelOp::In(vals), Some(v)) => vals.iter().any(|x| x == v),
            (LabelOp::In(_), None) => false,
            (LabelOp::NotIn(vals), Some(v)) => !vals.iter().any(|x| x == v),
            (LabelOp::NotIn(_), None) => true,
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::DoesNotExist, v) => v.is_none(),
        }
    }
}

/// Kubernetes-style node affinity: required expressions all hold; preferred
/// ones add their weight to a node's score.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct NodeAffinity {
    pub required: Vec<LabelExpr>,
    pub preferred: Vec<(u32, LabelExpr)>,
}

/// Everything a job asks for. Immutable after submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub user: Arc<str>,
    pub team: Arc<str>,
    /// Quota queue (a Kueue ClusterQueue, a Slurm partition/account).
    pub queue: Arc<str>,
    /// Priority class value: higher classes are ordered first and may preempt lower ones.
    pub priority: i32,
    pub replica: ReplicaRequest,
    /// Gang width: every replica is placed in the same plan, or none is.
    /// For an elastic job, the fewest replicas it may run with.
    pub replicas: u32,
    /// An elastic job (`replicas: {min, max}`): it may run with any number
    /// of replicas from `replicas` up to this, grows into idle devices and
    /// shrinks instead of being preempted whole (`pass/elastic.rs`).
    pub max_replicas: Option<u32>,
    /// Labels the node must have, exactly.
    pub node_selector: Labels,
    /// Every replica on nodes that share this label's value (e.g.
    /// `gpool.io/tpu-slice`: the hosts of one multi-host TPU slice).
    pub same_label: Option<Arc<str>>,
    pub affinity: NodeAffinity,
    /// The job's own labels, for other jobs' anti-affinity.
    pub labels: Labels,
    /// Do not place this job on a node running a job whose labels match all of
    /// these key/values. A selector matching the job's own labels spreads its
    /// replicas over distinct nodes.
    pub anti_affinity: Vec<Labels>,
    pub preemptible: bool,
    /// Time between the stop signal and SIGKILL, for checkpointing.
    pub grace: Duration,
    /// Hard limit on run time; also what backfill plans with when there is no estimate.
    pub time_limit: Option<Duration>,
    /// The user's (or an oracle's) guess of the total run time.
    pub estimate: Option<Duration>,
    /// The estimate was learned from similar jobs (`runtime_history`), not
    /// given: once a run outlives it, backfill expects the run to go on
    /// (see `RunEntry::expected_end`) instead of ending any moment.
    pub estimate_learned: bool,
    /// Run times in ms of the latest successes of jobs like it
    /// (`runtime_history`): a policy that orders by the Gittins index
    /// (`gittins.rs`) reads them; nothing plans with them.
    pub similar_runs: Option<Arc<[u64]>>,
    /// Not to start before this time (`--begin`, `beginAt`).
    pub begin: Option<Time>,
    /// A soft deadline (`--deadline`): it rises in the order as it nears (`deadline.rs`).
    pub deadline: Option<Time>,
    /// What each of its GPUs is expected to draw, learned from its history (`power.rs`);
    /// `None`: the GPU's power limit.
    pub watts_per_gpu: Option<u32>,
    /// Jobs that must finish successfully before this one may start (Slurm's `afterok`).
    pub dependencies: Vec<JobId>,
    /// Jobs that must have ended, however, before it may start (`afterany`).
    pub after_any: Vec<JobId>,
    /// Jobs that must have failed (or been cancelled) before it may start (`afternotok`).
    pub after_not_ok: Vec<JobId>,
    /// Whether the job may run on spot nodes, which the provider can take back.
    pub spot: SpotPolicy,
    pub submit_time: Time,
    /// A task of a job array that runs at most `limit` tasks at once (sbatch's `--array=…%N`).
    pub array: Option<ArrayLimit>,
    /// Once started, preempted by no one for this long (`minRuntime`); `None`: its queue's.
    pub min_runtime: Option<Duration>,
    /// The advance reservation it runs in (`--reservation`): only on its GPUs, only in its window.
    pub reservation: Option<Arc<str>>,
}

/// The array a task belongs to (its first task's id) and how many of its tasks may run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrayLimit {
    pub of: JobId,
    pub limit: u32,
}

/// Whether a job may run on spot capacity (`spot: never | allowed | preferred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SpotPolicy {
    /// Never on a node of a spot pool.
    Never,
    /// Anywhere; the autoscaler picks the cheapest pool that fits.
    #[default]
    Allowed,
    /// Spot nodes first, here and in the autoscaler.
    Preferred,
}

impl SpotPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SpotPolicy::Never => "never",
            SpotPolicy::Allowed => "allowed",
            SpotPolicy::Preferred => "preferred",
        }
    }
}

impl std::str::FromStr for SpotPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "never" | "no" | "false" => Ok(SpotPolicy::Never),
            "allowed" | "yes" | "true" => Ok(SpotPolicy::Allowed),
            "preferred" | "prefer" => Ok(SpotPolicy::Preferred),
            other => Err(format!("spot: {other:?} is not one of never, allowed, preferred")),
        }
    }
}

/// The preference weight `spot: preferred` gives a spot node, above any
/// weight users give in `preferredDuringScheduling` (at most 100 each).
pub const SPOT_PREFERENCE_WEIGHT: u32 = 1000;

impl JobSpec {
    /// A one-replica, non-preemptible job of `user` in queue `default` with no request.
    pub fn new(user: &str, submit_time: Time) -> JobSpec {
        JobSpec {
            user: Arc::from(user),
            team: Arc::from("default"),
            queue: Arc::from("default"),
            priority: 0,
            replica: ReplicaRequest::default(),
            replicas: 1,
            max_replicas: None,
            node_selector: Labels::new(),
            same_label: None,
            affinity: NodeAffinity::default(),
            labels: Labels::new(),
            anti_affinity: Vec::new(),
            preemptible: false,
            grace: Duration::from_secs(30),
            time_limit: None,
            estimate: None,
            estimate_learned: false,
            similar_runs: None,
            begin: None,
            deadline: None,
            watts_per_gpu: None,
            dependencies: Vec::new(),
            after_any: Vec::new(),
            after_not_ok: Vec::new(),
            spot: SpotPolicy::Allowed,
            submit_time,
            array: None,
            min_runtime: None,
            reservation: None,
        }
    }

    /// The most replicas it may run with: `max_replicas` for an elastic job, else `replicas`.
    pub fn most_replicas(&self) -> u32 {
        self.max_replicas.map_or(self.replicas, |m| m.max(self.replicas))
    }

    /// Whether it may run at more than one size.
    pub fn is_elastic(&self) -> bool {
        self.most_replicas() > self.replicas
    }

    /// The least quota all replicas can be charged, thousandths of a GPU.
    pub(crate) fn gpu_units(&self) -> GpuMilli {
        self.replica.gpu.min_units() * u64::from(self.replicas)
    }

    /// The run time backfill and shortest-job policies plan with.
    pub fn planned_runtime(&self) -> Option<Duration> {
        match (self.estimate, self.time_limit) {
            (Some(e), Some(l)) => Some(e.min(l)),
            (e, l) => e.or(l),
        }
    }

    /// Whether this node passes the job's selector and required affinity.
    pub fn node_matches(&self, node: &Node) -> bool {
        self.node_selector.iter().all(|(k, v)| node.label(k) == Some(v.as_str()))
            && self.affinity.required.iter().all(|e| e.matches(node.label(&e.key)))
            && !(self.spot == SpotPolicy::Never && node.pool.kind == crate::model::node::PoolKind::Spot)
    }

    /// Sum of the preferred-affinity weights this node earns.
    pub fn node_preference(&self, node: &Node) -> u32 {
        let spot = if self.spot == SpotPolicy::Preferred && node.pool.kind == crate::model::node::PoolKind::Spot {
            SPOT_PREFERENCE_WEIGHT
        } else {
            0
        };
        spot + self
            .affinity
            .preferred
            .iter()
            .filter(|(_, e)| e.matches(node.label(&e.key)))
            .map(|(w, _)| *w)
            .sum::<u32>()
    }

    /// Whether placement ranks nodes by preference at all.
    pub fn has_preferences(&self) -> bool {
        !self.affinity.preferred.is_empty() || self.spot == SpotPolicy::Preferred
    }

    /// Whether the node has any device this job's model constraint allows.
    pub fn model_allows(&self, model: &str) -> bool {
        self.replica.gpu_model.as_deref().is_none_or(|m| same_model(m, model))
    }

    /// The accelerator kinds whose use weighs on this job's fair share: those
    /// it may run on, or every kind for a job that asks for none.
    pub fn fair_share_kinds(&self) -> crate::model::resources::KindMask {
        use crate::model::resources::{DeviceKind, KindMask};
        if self.gpu_units() == 0 {
            return KindMask::ALL;
        }
        KindMask::of(DeviceKind::ALL.into_iter().filter(|k| self.kind_allows(*k)))
    }

    /// Whether a device of this kind may serve the job's GPU request.
    pub fn kind_allows(&self, kind: DeviceKind) -> bool {
        match self.replica.gpu_kind {
            Some(want) => want == kind,
            None => kind != DeviceKind::Tpu,
        }
    }

    /// Whether `other` (a job's labels) is repelled by this job's anti-affinity.
    pub fn repels(&self, other: &Labels) -> bool {
        self.anti_affinity.iter().any(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| other.get(k) == Some(v)))
    }

    /// The GPUs all replicas request, in thousandths (the least a memory
    /// request can be charged): what a pending job waits for.
    pub fn requested_gpu_milli(&self) -> GpuMilli {
        self.replica.gpu.min_units().saturating_mul(u64::from(self.replicas))
    }

    /// Whether placement, quota and fair share need to look at the job's GPUs at all.
    pub fn wants_gpus(&self) -> bool {
        self.replica.gpu.device_count() > 0
    }
}

/// Where one replica runs: a node and bit masks over that node's allocatable
/// devices (see [`crate::Snapshot::replica_devices`] to resolve them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaPlacement {
    pub node: NodeId,
    /// Bit `i` set = the node's `i`-th whole (MIG-off) GPU.
    pub gpus: u64,
    /// Bit `i` set = the node's MIG slot `i`: the `k`-th MIG-enabled GPU's instances
    /// have slots `7k..7k+7` (its instances in order), or, on a node of more than nine
    /// MIG GPUs, the node's instances are counted over its MIG GPUs in order.
    pub mig: u64,
    pub cpus_milli: u64,
    pub memory_mb: u64,
    /// `Some` when the replica holds a share of the one GPU in `gpus`.
    pub share: Option<GpuShare>,
}

impl ReplicaPlacement {
    /// Thousandths of a GPU this replica's whole GPUs (or GPU share) are worth;
    /// MIG instances are counted by their node (`NodeEntry::mig_units`).
    pub fn gpu_units(&self) -> GpuMilli {
        match self.share {
            Some(s) => GpuMilli::from(s.milli),
            None => u64::from(self.gpus.count_ones()) * GPU,
        }
    }
}

/// Where every replica of a job runs; index = rank.
pub type Placement = Vec<ReplicaPlacement>;

/// What the core knows about a job's history, which some policies order by.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Service {
    /// Run time summed over previous runs (not counting the current one).
    pub prior_runtime: Duration,
    /// GPU-time consumed by previous runs, in thousandths of a GPU × seconds.
    pub prior_gpu_milli_secs: u64,
    /// How often the job was stopped and put back in the queue.
    pub restarts: u32,
}

/// A running job's allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Running {
    pub placement: Placement,
    pub started: Time,
    /// Thousandths of a GPU the placement holds (MIG instances count by compute slices).
    pub gpu_milli: GpuMilli,
    /// The same, per accelerator kind (for the queues' per-kind maximums).
    pub by_kind: crate::model::resources::KindUnits,
    /// `Some` once a stop was requested (preemption, cancel, time limit): the
    /// job still holds its devices until its processes are gone.
    pub stopping: Option<StopCause>,
}

/// Why a running job is being stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// Preempted so that this job can run; it goes back to the queue.
    Preempted { for_job: JobId },
    /// Cancelled by a user or a limit; it will not come back.
    Cancelled,
    /// An elastic job restarting at another size (`Plan::resizes`): it goes
    /// back to the queue holding a nomination for its new placement; shrunk
    /// for `for_job`, or grown (`None`).
    Resized { for_job: Option<JobId> },
}

/// Where a job is.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    Pending,
    Running(Running),
}

/// A job in the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub spec: Arc<JobSpec>,
    pub state: JobState,
    pub service: Service,
    /// Not before this time (retry back-off, a hold). [`Time::MIN`] = any time.
    pub not_before: Time,
}

impl Job {
    pub fn running(&self) -> Option<&Running> {
        match &self.state {
            JobState::Running(r) => Some(r),
            JobState::Pending => None,
        }
    }

    /// Whether it is stopping to restart at another size (an elastic job's resize).
    pub fn is_resizing(&self) -> bool {
        self.running().is_some_and(|r| matches!(r.stopping, Some(StopCause::Resized { .. })))
    }

    /// Run time of all runs so far, including the current one.
    pub fn runtime(&self, now: Time) -> Duration {
        self.service.prior_runtime + self.running().map_or(Duration::ZERO, |r| now.since(r.started))
    }

    /// GPU-seconds (in thousandths of a GPU) consumed so far, the "attained service" of LAS schedulers.
    pub fn attained_gpu_milli_secs(&self, now: Time) -> u64 {
        let current = self.running().map_or(0, |r| r.gpu_milli.saturating_mul(now.since(r.started).as_secs()));
        self.service.prior_gpu_milli_secs.saturating_add(current)
    }

    /// Planned time still to run, if the job has an estimate or limit.
    pub fn remaining(&self, now: Time) -> Option<Duration> {
        self.spec.planned_runtime().map(|p| p.saturating_sub(self.runtime(now)))
    }
}
