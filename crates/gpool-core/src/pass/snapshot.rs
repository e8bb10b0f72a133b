//! The state a scheduling pass reads, kept up to date event by event.
//!
//! The daemon and the simulator own one [`Snapshot`] each and tell it what
//! happened (a node joined, a job was submitted, started, stopped). The
//! snapshot keeps the derived indexes a pass needs (free devices per node,
//! pending jobs in policy order per user, queue usage, fair-share usage, the
//! running jobs in compact form for ranking victims), so that a pass over
//! 10,000 pending jobs rebuilds nothing.
//!
//! Every mutation checks its preconditions and returns a typed error instead
//! of corrupting state: a start on a busy device is refused, not applied.
//!
//! This file holds the snapshot itself, its errors, its node events and its
//! queries; its parts are beside it in `snapshot/`: a node's slot masks and
//! free resources (`slots.rs`), a job's events from submission to stop
//! (`jobs.rs`), the pending index (`pending.rs`) and the GPUs to avoid or
//! leave out (`health.rs`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::job::{
    GpuRequest, Job, JobId, JobSpec, JobState, Placement, ReplicaPlacement, Running, Service, StopCause,
};
use crate::model::node::{Device, MigInstance, Node, NodeError, NodeId, NodeState};
use crate::model::resources::{GPU, GpuMilli, KindMask, KindUnits};
use crate::model::time::Time;
use crate::pass::fragmentation::DemandMix;
use crate::pass::kept::{ChangeLog, Kept};
use crate::pass::running::RunningJobs;
use crate::pass::shapes::{BaseShape, Shapes};
use crate::pass::shares;
use crate::policies::fairshare::UsageLedger;
use crate::policies::policy::{Ordering, Policy, PreemptKey};
use crate::policies::quota::QueueConfig;

mod health;
mod jobs;
mod pending;
mod reservations;
pub use reservations::ReservationRequest;
mod slots;

pub use slots::MIG_SLOTS_PER_GPU;
pub(crate) use slots::{ModelInfo, NO_INSTANCE, NodeEntry, NodeFree, ProfileInfo, bits, low_bits};

/// Hashing for maps keyed by job id: ids are already well spread integers,
/// so a multiply-shift (Fibonacci hashing) is enough and much cheaper than
/// SipHash. Maps using it are only looked up, never iterated for output, so
/// their order cannot leak into plans.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Group of the pending index: a user (team, user) and the accelerator kinds
/// the group's jobs may run on, since fair share weighs each kind's use
/// apart; a single group ("", "", every kind) when the policy does not order by user.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub(crate) user: (Arc<str>, Arc<str>),
    pub(crate) kinds: KindMask,
}

/// Sort key of a pending job inside its group: best first. Besides the
/// order it carries what a pass needs to skip the job without looking it up:
/// its shape and its planned run time left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PendingKey {
    pub(crate) class: Reverse<i32>,
    /// Policy points that do not change while the job waits (milli-points, higher first).
    pub(crate) points: Reverse<i64>,
    /// Submit time: among equal points, first come first served (the
    /// default has no age term to separate them).
    pub(crate) submit_ms: i64,
    pub(crate) id: JobId,
    /// Interned [`Shape`] of the job.
    pub(crate) shape: u32,
    /// No dependencies, no back-off and no advance reservation (whose jobs
    /// place unlike their shape's others): the shape alone decides whether it fits.
    pub(crate) simple: bool,
    /// Planned run time left in ms; `u64::MAX` if unknown.
    pub(crate) left_ms: u64,
    /// The job's key for within-class preemption (see `running::preemption_key`).
    pub(crate) pkey: PreemptKey,
}

/// What went wrong applying an event to the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("job {0} is already in the snapshot")]
    DuplicateJob(JobId),
    #[error("job {0} is not in the snapshot")]
    UnknownJob(JobId),
    #[error("job {0} is not pending")]
    NotPending(JobId),
    #[error("job {0} is not running")]
    NotRunning(JobId),
    #[error("job {job}: its replicas must all be on nodes with one value of label {label}")]
    SplitGang { job: JobId, label: String },
    #[error("job {job}: placement has {got} replicas, the job has {want}")]
    ReplicaCount { job: JobId, got: usize, want: u32 },
    #[error("no node {0}")]
    UnknownNode(NodeId),
    #[error("job {job} cannot start on {node}: {what} is not free")]
    Busy { job: JobId, node: String, what: &'static str },
    #[error("node {node} still runs {jobs} job(s); its inventory cannot change under them")]
    NodeInUse { node: String, jobs: usize },
    #[error("node {node}: GPU {gpu} cannot be repartitioned: {why}")]
    Repartition { node: String, gpu: u32, why: String },
}

/// How a running job ended, as far as the queue is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// Back to the queue (preempted, node lost, retry); not before the given time.
    Requeue { not_before: Time },
    /// Done; `success` decides whether jobs depending on it may start.
    Finished { success: bool },
}

/// The scheduler's view of the cluster. See the module docs.
#[derive(Clone, Debug)]
pub struct Snapshot {
    policy: Policy,
    pub(crate) nodes: Vec<NodeEntry>,
    node_names: BTreeMap<Arc<str>, NodeId>,
    pub(crate) models: Vec<ModelInfo>,
    pub(crate) profiles: Vec<ProfileInfo>,
    pub(crate) free: Vec<NodeFree>,
    pub(crate) jobs: HashMap<JobId, Job, IdHash>,
    pub(crate) pending: BTreeMap<GroupKey, BTreeSet<PendingKey>>,
    pending_keys: HashMap<JobId, (GroupKey, PendingKey), IdHash>,
    /// Pending jobs the starvation guard promotes, by when (see [`Policy::promotion_time`]).
    pub(crate) promotions: BTreeSet<(Time, JobId)>,
    /// Power budgets the pass keeps (`power.rs`).
    pub(crate) power_budgets: Vec<crate::policies::power_budget::PowerBudget>,
    /// Pending jobs with deadlines, by when they become urgent (`deadline.rs`).
    pub(crate) urgent: BTreeSet<(Time, JobId)>,
    /// Pending jobs with a begin time, by it: a pass wakes at the next one.
    pub(crate) begins: BTreeSet<(Time, JobId)>,
    pub(crate) shapes: Shapes,
    /// Pending jobs by devices per replica (0 = CPU-only), for early exit.
    pub(crate) pending_by_devices: BTreeMap<u32, u32>,
    /// GPUs the pending jobs ask for in all, thousandths (the overload gate's
    /// demand, less what waits on other jobs).
    pub(crate) pending_gpu: GpuMilli,
    /// Pending jobs that name dependencies: whether they are demand yet is
    /// decided at each pass, as their dependencies end (`schedule::unready_gpu`).
    pub(crate) pending_with_deps: BTreeSet<JobId>,
    /// When the current overload began, as the last pass saw it (see [`crate::policies::policy::Overload`]).
    pub(crate) overloaded_since: Option<Time>,
    /// Running jobs, compact (see [`crate::pass::running`]).
    pub(crate) running: RunningJobs,
    pub(crate) queues: BTreeMap<Arc<str>, QueueConfig>,
    pub(crate) queue_usage: BTreeMap<Arc<str>, GpuMilli>,
    /// The same per accelerator kind (queues' per-kind maximums).
    pub(crate) queue_kind_usage: BTreeMap<Arc<str>, crate::model::resources::KindUnits>,
    finished: HashMap<JobId, bool, IdHash>,
    /// Placements promised to pending jobs that preempted others, until they start.
    pub(crate) nominations: BTreeMap<JobId, Placement>,
    pub(crate) ledger: UsageLedger,
    /// The kinds of request submitted so far (fragmentation-aware placement).
    pub(crate) demand: DemandMix,
    /// A bit per [`crate::PoolKind`] some node has had: placement ranks pools only when they differ.
    pool_kinds: u8,
    /// Jobs with GPUs to avoid, and on which nodes; whether any GPU is to be avoided (`health.rs`).
    avoiding: BTreeMap<JobId, Vec<NodeId>>,
    health_in_use: bool,
    /// Advance reservations not yet over (`reservations.rs`).
    pub(crate) reservations: Vec<crate::calendar::reservation::Reservation>,
    /// The nodes whose free resources, state, health marks, MIG holds or
    /// inventory changed, in order: what a kept copy of the free-capacity
    /// indexes (`capacity/base.rs`) brings up to date.
    node_log: ChangeLog<u32>,
    /// Where a pass leaves those indexes for the next.
    pub(crate) kept_capacity: Kept,
}

impl Snapshot {
    /// An empty cluster scheduled by `policy`.
    pub fn new(policy: Policy) -> Snapshot {
        Snapshot {
            policy,
            nodes: Vec::new(),
            node_names: BTreeMap::new(),
            models: Vec::new(),
            profiles: Vec::new(),
            free: Vec::new(),
            jobs: HashMap::default(),
            pending: BTreeMap::new(),
            pending_keys: HashMap::default(),
            promotions: BTreeSet::new(),
            urgent: BTreeSet::new(),
            power_budgets: Vec::new(),
            begins: BTreeSet::new(),
            shapes: Shapes::default(),
            pending_by_devices: BTreeMap::new(),
            pending_gpu: 0,
            pending_with_deps: BTreeSet::new(),
            overloaded_since: None,
            running: RunningJobs::default(),
            queues: BTreeMap::new(),
            queue_usage: BTreeMap::new(),
            queue_kind_usage: BTreeMap::new(),
            finished: HashMap::default(),
            nominations: BTreeMap::new(),
            ledger: UsageLedger::default(),
            demand: DemandMix::default(),
            pool_kinds: 0,
            avoiding: BTreeMap::new(),
            health_in_use: false,
            reservations: Vec::new(),
            node_log: ChangeLog::default(),
            kept_capacity: Kept::default(),
        }
    }

    /// Records a change to node `n` that its free-capacity indexes read.
    pub(crate) fn touch_node(&mut self, n: usize) {
        self.node_log.push(n as u32, self.nodes.len());
    }

    /// The nodes changed since the node log stood at `seen` (see [`crate::pass::kept::ChangeLog::since`]).
    pub(crate) fn nodes_changed_since(&self, seen: u64) -> Option<&[u32]> {
        self.node_log.since(seen)
    }

    /// The end of the node log.
    pub(crate) fn node_log_end(&self) -> u64 {
        self.node_log.end()
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Changes the policy; re-indexes the pending jobs.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
        self.running.set_policy(&self.policy);
        let pending: Vec<JobId> = self.pending_keys.keys().copied().collect();
        self.pending.clear();
        self.pending_keys.clear();
        self.promotions.clear();
        self.urgent.clear();
        self.begins.clear();
        self.pending_by_devices.clear();
        self.pending_gpu = 0;
        self.pending_with_deps.clear();
        self.shapes = Shapes::default();
        for id in pending {
            self.index_pending(id);
        }
    }

    // ----- nodes -----

    /// Adds a node; returns its id.
    pub fn add_node(&mut self, node: Node) -> Result<NodeId, SnapshotError> {
        node.validate()?;
        if self.node_names.contains_key(&node.name) {
            return Err(NodeError::Duplicate { node: node.name.to_string() }.into());
        }
        let id = NodeId(self.nodes.len() as u32);
        self.node_names.insert(node.name.clone(), id);
        self.pool_kinds |= 1 << node.pool.kind as u8;
        let entry = NodeEntry::new(node, &mut self.models, &mut self.profiles);
        self.free.push(entry.full());
        self.nodes.push(entry);
        self.touch_node(id.index());
        Ok(id)
    }

    /// Sets a node's GPU draw for power budgets (`power.rs`); nothing else
    /// of the node changes, whatever runs on it.
    pub fn set_node_power(
        &mut self,
        id: NodeId,
        power: Option<crate::model::node::NodePower>,
    ) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        e.node.power = power;
        Ok(())
    }

    /// Replaces a node's inventory (e.g. after a MIG re-partition). Refused while jobs run there.
    pub fn replace_node(&mut self, id: NodeId, node: Node) -> Result<(), SnapshotError> {
        node.validate()?;
        let old = self.nodes.get(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        if !old.jobs.is_empty() {
            return Err(SnapshotError::NodeInUse { node: old.node.name.to_string(), jobs: old.jobs.len() });
        }
        if old.node.name != node.name {
            self.node_names.remove(&old.node.name);
            self.node_names.insert(node.name.clone(), id);
        }
        self.pool_kinds |= 1 << node.pool.kind as u8;
        let entry = NodeEntry::new(node, &mut self.models, &mut self.profiles);
        self.free[id.index()] = entry.full();
        self.nodes[id.index()] = entry;
        self.touch_node(id.index());
        Ok(())
    }

    pub fn set_node_state(&mut self, id: NodeId, state: NodeState) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        e.node.state = state;
        self.touch_node(id.index());
        Ok(())
    }

    /// Whether nodes of more than one pool kind (on-demand, spot, reserved) have been seen.
    pub(crate) fn mixed_pool_kinds(&self) -> bool {
        self.pool_kinds.count_ones() > 1
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index()).map(|e| &e.node)
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_names.get(name).copied()
    }

    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes.iter().enumerate().map(|(i, e)| (NodeId(i as u32), &e.node))
    }

    /// Jobs holding resources on a node.
    pub fn jobs_on(&self, id: NodeId) -> impl Iterator<Item = JobId> + '_ {
        self.nodes.get(id.index()).into_iter().flat_map(|e| e.jobs.iter().copied())
    }

    /// Free whole GPUs and MIG instances of a node, as slot masks.
    pub fn free_masks(&self, id: NodeId) -> Option<(u64, u64)> {
        self.free.get(id.index()).map(|f| (f.gpus, f.mig))
    }

    /// The devices and MIG instances a replica placement names.
    pub fn replica_devices(&self, p: &ReplicaPlacement) -> (Vec<&Device>, Vec<(&Device, &MigInstance)>) {
        let Some(e) = self.nodes.get(p.node.index()) else {
            return (Vec::new(), Vec::new());
        };
        let gpus = bits(p.gpus).filter_map(|s| e.gpu_slots.get(s)).map(|&d| &e.node.devices[d]).collect();
        let mig = bits(p.mig)
            .filter_map(|s| e.mig_slots.get(s))
            .filter(|&&slot| slot != NO_INSTANCE)
            .filter_map(|&(d, i)| {
                let dev = &e.node.devices[d];
                dev.mig.as_ref().and_then(|m| m.get(i)).map(|inst| (dev, inst))
            })
            .collect();
        (gpus, mig)
    }

    /// Finds the slot masks of devices by driver index and MIG UUID, the inverse of
    /// [`Snapshot::replica_devices`]; used when re-adopting running jobs.
    pub fn slots_of(&self, node: NodeId, gpu_indices: &[u32], mig_uuids: &[&str]) -> Option<(u64, u64)> {
        let e = self.nodes.get(node.index())?;
        let mut gpus = 0;
        for idx in gpu_indices {
            let slot = e.gpu_slots.iter().position(|&d| e.node.devices[d].index == *idx)?;
            gpus |= 1 << slot;
        }
        let mut mig = 0;
        for uuid in mig_uuids {
            let slot = e.mig_slots.iter().position(|&(d, i)| {
                d != usize::MAX
                    && e.node.devices[d].mig.as_ref().and_then(|m| m.get(i)).is_some_and(|inst| &*inst.uuid == *uuid)
            })?;
            mig |= 1 << slot;
        }
        Some((gpus, mig))
    }

    // ----- queues -----

    pub fn set_queue(&mut self, q: QueueConfig) {
        self.queues.insert(q.name.clone(), q);
    }

    /// The power budgets passes keep from now on (`power.rs`); set live, lowered or raised.
    pub fn set_power_budgets(&mut self, budgets: Vec<crate::policies::power_budget::PowerBudget>) {
        self.power_budgets = budgets;
    }

    pub fn power_budgets(&self) -> &[crate::policies::power_budget::PowerBudget] {
        &self.power_budgets
    }

    pub fn queues(&self) -> impl Iterator<Item = &QueueConfig> {
        self.queues.values()
    }

    /// GPU quota (thousandths) a queue's running jobs hold.
    pub fn queue_usage(&self, queue: &str) -> GpuMilli {
        self.queue_usage.get(queue).copied().unwrap_or(0)
    }

    /// A placement's GPU units per accelerator kind: each whole GPU (or
    /// share of one) counts for its device's kind; MIG instances are NVIDIA's.
    pub(crate) fn units_by_kind(&self, placement: &Placement) -> crate::model::resources::KindUnits {
        use crate::model::resources::{DeviceKind, GPU};
        let mut out = crate::model::resources::KindUnits::default();
        for r in placement {
            let Some(e) = self.nodes.get(r.node.index()) else { continue };
            let kind_of = |slot: usize| {
                e.gpu_slots.get(slot).and_then(|di| e.node.devices.get(*di)).map_or(DeviceKind::NvidiaGpu, |d| d.kind)
            };
            match r.share {
                Some(s) => out.add(kind_of(r.gpus.trailing_zeros() as usize), GpuMilli::from(s.milli)),
                None => bits(r.gpus).for_each(|slot| out.add(kind_of(slot), GPU)),
            }
            out.add(DeviceKind::NvidiaGpu, e.mig_units(r.mig));
        }
        out
    }

    /// What every running job holds, per accelerator kind.
    pub fn kind_usage(&self) -> KindUnits {
        let mut out = KindUnits::default();
        for u in self.queue_kind_usage.values() {
            out.add_all(u);
        }
        out
    }

    /// A queue's use per accelerator kind.
    pub fn queue_kind_usage(&self, queue: &str) -> crate::model::resources::KindUnits {
        self.queue_kind_usage.get(queue).copied().unwrap_or_default()
    }

    /// The fair-share usage ledger.
    pub fn usage(&self) -> &UsageLedger {
        &self.ledger
    }

    // ----- jobs -----

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// GPUs of the nodes that are up, thousandths (a MIG-partitioned GPU counts whole).
    pub(crate) fn gpu_capacity(&self) -> GpuMilli {
        self.nodes.iter().filter(|e| e.node.state == NodeState::Up).map(|e| e.node.devices.len() as u64 * GPU).sum()
    }

    pub fn pending_count(&self) -> usize {
        self.pending_keys.len()
    }

    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    pub fn running_jobs(&self) -> impl Iterator<Item = &Job> {
        self.running.ids().filter_map(|id| self.jobs.get(id))
    }

    /// Pending job ids, in no particular order.
    pub fn pending_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.pending_keys.keys().copied()
    }

    /// When the current overload began, as the last pass saw it: the shell
    /// keeps it, so that the gate's count goes on across a restart.
    pub fn overloaded_since(&self) -> Option<Time> {
        self.overloaded_since
    }

    /// The overload state a previous control plane left.
    pub fn restore_overload(&mut self, since: Option<Time>) {
        self.overloaded_since = since;
    }

    /// Outcome of a finished job, if the snapshot remembers it (for dependencies).
    pub fn finished(&self, id: JobId) -> Option<bool> {
        self.finished.get(&id).copied()
    }

    /// Records the outcome of a job that ended outside this snapshot's life (e.g. before a restart).
    pub fn record_finished(&mut self, id: JobId, success: bool) {
        self.finished.insert(id, success);
    }
}

/// Devices per replica, the key of `pending_by_devices`.
pub(crate) fn device_need(g: &GpuRequest) -> u32 {
    g.device_count()
}
