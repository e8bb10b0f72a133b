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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::job::{
    GpuRequest, Job, JobId, JobSpec, JobState, Placement, ReplicaPlacement, Running, Service, StopCause,
};
use crate::model::node::{Device, MigInstance, Node, NodeError, NodeId, NodeState};
use crate::model::resources::{GPU, GpuMilli, KindMask, KindUnits, MigProfile, same_model};
use crate::model::time::Time;
use crate::pass::fragmentation::DemandMix;
use crate::pass::running::RunningJobs;
use crate::pass::shapes::{BaseShape, Shapes};
use crate::pass::shares::{self, SlotShare};
use crate::policies::fairshare::UsageLedger;
use crate::policies::policy::{Ordering, Policy, PreemptKey};
use crate::policies::quota::QueueConfig;

mod health;
mod pending;

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

/// Free resources of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeFree {
    pub(crate) gpus: u64,
    pub(crate) mig: u64,
    pub(crate) cpus: u64,
    pub(crate) mem: u64,
    /// The whole-GPU slots that hold shares, and how much of each is taken
    /// (empty on most nodes, so cloning it costs nothing). A slot listed
    /// here is not in `gpus`.
    pub(crate) shares: Vec<SlotShare>,
}

impl NodeFree {
    /// Takes a replica's devices, CPU and memory. CPU and memory stop at
    /// zero rather than wrap: a claim may name resources its victims still hold.
    pub(crate) fn take(&mut self, r: &ReplicaPlacement) {
        if let Some(share) = r.share {
            shares::take(&mut self.shares, r.gpus, share);
        }
        self.gpus &= !r.gpus;
        self.mig &= !r.mig;
        self.cpus = self.cpus.saturating_sub(r.cpus_milli);
        self.mem = self.mem.saturating_sub(r.memory_mb);
    }

    /// Gives a replica's devices, CPU and memory back (the reverse of [`NodeFree::take`]).
    pub(crate) fn release(&mut self, r: &ReplicaPlacement) {
        match r.share {
            Some(share) => shares::release(&mut self.shares, &mut self.gpus, r.gpus, share),
            None => self.gpus |= r.gpus,
        }
        self.mig |= r.mig;
        self.cpus += r.cpus_milli;
        self.mem += r.memory_mb;
    }
}

/// A node plus the bit masks placement works with.
#[derive(Clone, Debug)]
pub(crate) struct NodeEntry {
    pub(crate) node: Node,
    /// Whole-GPU slot → index into `node.devices`.
    pub(crate) gpu_slots: Vec<usize>,
    /// MIG slot → (index into `node.devices`, index into that device's
    /// instances); [`NO_INSTANCE`] for a slot a GPU keeps for an instance it
    /// may have after a repartition.
    pub(crate) mig_slots: Vec<(usize, usize)>,
    /// The MIG slots that hold an instance.
    pub(crate) mig_exists: u64,
    /// MIG slots nothing new is placed on: their GPU is being emptied for a
    /// repartition (`Snapshot::hold_mig_gpu`).
    pub(crate) mig_held: u64,
    /// MIG slot ranges of the GPUs whose layout gpool may change
    /// (`Snapshot::set_mig_managed`).
    pub(crate) mig_managed: u64,
    /// Each MIG slot range is the GPU's own (`MIG_SLOTS_PER_GPU` per MIG
    /// GPU), so one GPU can be repartitioned while others run jobs.
    pub(crate) mig_ranges: bool,
    /// Per model (index into `Snapshot::models`): mask of whole-GPU slots.
    pub(crate) model_masks: Vec<(usize, u64)>,
    /// Per MIG profile (index into `Snapshot::profiles`): mask of MIG slots.
    pub(crate) profile_masks: Vec<(usize, u64)>,
    /// Per model: mask of MIG slots whose parent GPU is that model.
    pub(crate) mig_model_masks: Vec<(usize, u64)>,
    /// NVLink islands, then NUMA nodes, as masks of whole-GPU slots.
    pub(crate) nvlink_groups: Vec<u64>,
    pub(crate) numa_groups: Vec<u64>,
    /// Quota weight of each MIG slot.
    pub(crate) mig_milli: Vec<u16>,
    /// Jobs holding resources here.
    pub(crate) jobs: BTreeSet<JobId>,
    /// Whole-GPU slots that are degraded, and slots one job is to avoid (`health.rs`).
    pub(crate) degraded: u64,
    pub(crate) avoided_by: Vec<(JobId, u64)>,
    /// Whole-GPU and MIG slots of quarantined GPUs: nothing new goes there (`health.rs`).
    pub(crate) quarantined: u64,
    pub(crate) quarantined_mig: u64,
}

impl NodeEntry {
    pub(crate) fn new(node: Node, models: &mut Vec<ModelInfo>, profiles: &mut Vec<ProfileInfo>) -> NodeEntry {
        let mut e = NodeEntry {
            gpu_slots: Vec::new(),
            mig_slots: Vec::new(),
            mig_exists: 0,
            mig_held: 0,
            mig_managed: 0,
            mig_ranges: false,
            model_masks: Vec::new(),
            profile_masks: Vec::new(),
            mig_model_masks: Vec::new(),
            nvlink_groups: Vec::new(),
            numa_groups: Vec::new(),
            mig_milli: Vec::new(),
            jobs: BTreeSet::new(),
            degraded: 0,
            avoided_by: Vec::new(),
            quarantined: 0,
            quarantined_mig: 0,
            node,
        };
        let mut nvlink: BTreeMap<u32, u64> = BTreeMap::new();
        let mut numa: BTreeMap<u32, u64> = BTreeMap::new();
        let mig_gpus = e.node.devices.iter().filter(|d| d.mig.is_some()).count();
        e.mig_ranges = mig_gpus * MIG_SLOTS_PER_GPU <= 64
            && e.node.devices.iter().all(|d| d.mig.as_ref().is_none_or(|m| m.len() <= MIG_SLOTS_PER_GPU));
        let mut mig_gpus_seen = 0;
        for (di, d) in e.node.devices.iter().enumerate() {
            let m = intern_model(models, d);
            match &d.mig {
                None => {
                    let bit = 1u64 << e.gpu_slots.len();
                    e.gpu_slots.push(di);
                    add_mask(&mut e.model_masks, m, bit);
                    if let Some(g) = d.nvlink_group {
                        *nvlink.entry(g).or_default() |= bit;
                    }
                    if let Some(n) = d.numa_node {
                        *numa.entry(n).or_default() |= bit;
                    }
                }
                Some(instances) => {
                    for (ii, inst) in instances.iter().enumerate() {
                        let bit = 1u64 << e.mig_slots.len();
                        e.mig_slots.push((di, ii));
                        e.mig_exists |= bit;
                        let p = intern_profile(profiles, &inst.profile, inst.memory_mb);
                        add_mask(&mut e.profile_masks, p, bit);
                        add_mask(&mut e.mig_model_masks, m, bit);
                        e.mig_milli.push(inst.profile.gpu_milli() as u16);
                    }
                    if e.mig_ranges {
                        // This GPU's range ends where the next one's starts.
                        mig_gpus_seen += 1;
                        while e.mig_slots.len() < mig_gpus_seen * MIG_SLOTS_PER_GPU {
                            e.mig_slots.push(NO_INSTANCE);
                            e.mig_milli.push(0);
                        }
                    }
                }
            }
        }
        e.nvlink_groups = nvlink.into_values().collect();
        e.numa_groups = numa.into_values().collect();
        e
    }

    pub(crate) fn full(&self) -> NodeFree {
        NodeFree {
            gpus: low_bits(self.gpu_slots.len()),
            mig: self.mig_exists,
            cpus: self.node.cpus_milli,
            mem: self.node.memory_mb,
            shares: Vec::new(),
        }
    }

    pub(crate) fn profile_mask(&self, profile: usize) -> u64 {
        self.profile_masks.iter().find(|(p, _)| *p == profile).map_or(0, |(_, k)| *k)
    }

    /// MIG slots whose parent GPU passes the job's model constraint.
    pub(crate) fn mig_mask_for_model(&self, models: &[ModelInfo], model: Option<&str>) -> u64 {
        match model {
            None => self.mig_exists,
            Some(want) => self
                .mig_model_masks
                .iter()
                .filter(|(m, _)| same_model(&models[*m].name, want))
                .fold(0, |acc, (_, k)| acc | k),
        }
    }

    /// The MIG slots of device `di` (its range), if each MIG GPU has one.
    pub(crate) fn mig_range(&self, di: usize) -> Option<u64> {
        if !self.mig_ranges {
            return None;
        }
        let k = self.node.devices[..di].iter().filter(|d| d.mig.is_some()).count();
        Some(low_bits(MIG_SLOTS_PER_GPU) << (k * MIG_SLOTS_PER_GPU))
    }

    pub(crate) fn mig_units(&self, mask: u64) -> GpuMilli {
        bits(mask).map(|i| GpuMilli::from(self.mig_milli[i])).sum()
    }
}

/// MIG instances a GPU can have at most (seven compute slices).
pub const MIG_SLOTS_PER_GPU: usize = 7;

/// A MIG slot kept free for a GPU's future instances.
pub(crate) const NO_INSTANCE: (usize, usize) = (usize::MAX, usize::MAX);

fn add_mask(masks: &mut Vec<(usize, u64)>, key: usize, bit: u64) {
    match masks.iter_mut().find(|(k, _)| *k == key) {
        Some((_, m)) => *m |= bit,
        None => masks.push((key, bit)),
    }
}

fn intern_model(models: &mut Vec<ModelInfo>, d: &Device) -> usize {
    if let Some(i) = models.iter().position(|m| *m.name == *d.model && m.kind == d.kind) {
        return i;
    }
    models.push(ModelInfo { name: d.model.clone(), memory_mb: d.memory_mb, kind: d.kind });
    models.len() - 1
}

fn intern_profile(profiles: &mut Vec<ProfileInfo>, p: &MigProfile, memory_mb: u64) -> usize {
    if let Some(i) = profiles.iter().position(|x| x.profile == *p) {
        return i;
    }
    profiles.push(ProfileInfo { profile: p.clone(), memory_mb });
    profiles.len() - 1
}

/// A mask with the lowest `n` bits set.
pub(crate) fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Indices of the set bits, lowest first.
pub(crate) fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

/// A GPU model present in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelInfo {
    pub(crate) name: Arc<str>,
    pub(crate) memory_mb: u64,
    pub(crate) kind: crate::model::resources::DeviceKind,
}

/// A MIG profile present in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProfileInfo {
    pub(crate) profile: MigProfile,
    pub(crate) memory_mb: u64,
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
    /// No dependencies and no back-off: the shape alone decides whether it fits.
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
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Changes the policy; re-indexes the pending jobs.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
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
        Ok(id)
    }

    /// Replaces a node's inventory (e.g. after a MIG re-partition). Refused while jobs run there.
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
        Ok(())
    }

    pub fn set_node_state(&mut self, id: NodeId, state: NodeState) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        e.node.state = state;
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

    /// Outcome of a finished job, if the snapshot remembers it (for dependencies).
    /// When the current overload began, as the last pass saw it: the shell
    /// keeps it, so that the gate's count goes on across a restart.
    pub fn overloaded_since(&self) -> Option<Time> {
        self.overloaded_since
    }

    /// The overload state a previous control plane left.
    pub fn restore_overload(&mut self, since: Option<Time>) {
        self.overloaded_since = since;
    }

    pub fn finished(&self, id: JobId) -> Option<bool> {
        self.finished.get(&id).copied()
    }

    /// Records the outcome of a job that ended outside this snapshot's life (e.g. before a restart).
    pub fn record_finished(&mut self, id: JobId, success: bool) {
        self.finished.insert(id, success);
    }

    /// Adds a pending job.
    pub fn submit(&mut self, id: JobId, spec: JobSpec) -> Result<(), SnapshotError> {
        self.insert_job(id, Arc::new(spec), Service::default())?;
        Ok(())
    }

    /// Adds a pending job that already has a history (restored from a store).
    pub fn restore_pending(
        &mut self,
        id: JobId,
        spec: Arc<JobSpec>,
        service: Service,
        not_before: Time,
    ) -> Result<(), SnapshotError> {
        self.insert_job(id, spec, service)?;
        if let Some(j) = self.jobs.get_mut(&id) {
            j.not_before = not_before;
        }
        Ok(())
    }

    fn insert_job(&mut self, id: JobId, spec: Arc<JobSpec>, service: Service) -> Result<(), SnapshotError> {
        if self.jobs.contains_key(&id) {
            return Err(SnapshotError::DuplicateJob(id));
        }
        self.ledger.change_rate(&spec.team, &spec.user, &KindUnits::default(), true);
        self.demand.record(&spec);
        self.jobs.insert(id, Job { id, spec, state: JobState::Pending, service, not_before: Time::MIN });
        self.index_pending(id);
        Ok(())
    }

    /// Delays a pending job (retry back-off, hold).
    pub fn set_not_before(&mut self, id: JobId, t: Time) -> Result<(), SnapshotError> {
        let j = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        j.not_before = t;
        if self.pending_keys.contains_key(&id) {
            self.unindex_pending(id);
            self.index_pending(id);
        }
        Ok(())
    }

    /// Takes a plan's nominations: pending jobs that preempted others and
    /// will take a placement once their victims
    /// are gone. The next pass holds the free part of each such placement
    /// until it examines the job, so that a job the order puts first cannot
    /// take what was freed. For reclaim, that job would be another queue's,
    /// borrowing, and reclaim would take it back again: a loop. For priority,
    /// a higher class borrowing from another queue's guarantee took the
    /// space, the freed job reclaimed it, the preemptor preempted it again:
    /// a loop of three (found by the property tests). A nomination lives
    /// until the job is examined again; it is renewed only while the job
    /// still waits for its victims. Within-class preemptors are held too: a
    /// higher class took what one freed, a reclaim stopped it, and the
    /// preemptor preempted again, the same loop (docs/scheduling.md).
    ///
    /// Also carries the overload state the pass saw (see [`crate::policies::policy::Overload`]).
    pub fn carry_over(&mut self, plan: &crate::pass::plan::Plan) {
        self.overloaded_since = plan.overloaded_since;
        let held_for = |job: JobId| plan.preemptions.iter().any(|p| p.for_job == job);
        let held: BTreeMap<JobId, Placement> = plan
            .nominated
            .iter()
            .filter(|(id, _)| {
                self.pending_keys.contains_key(id) && (held_for(*id) || self.nominations.contains_key(id))
            })
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        self.nominations = held;
    }

    /// Removes a pending job (cancelled, or failed for good).
    pub fn remove_pending(&mut self, id: JobId, success: bool) -> Result<(), SnapshotError> {
        let j = self.jobs.get(&id).ok_or(SnapshotError::UnknownJob(id))?;
        if j.running().is_some() {
            return Err(SnapshotError::NotPending(id));
        }
        self.unindex_pending(id);
        self.jobs.remove(&id);
        self.nominations.remove(&id);
        self.finished.insert(id, success);
        self.clear_avoid(id);
        Ok(())
    }

    /// Starts a pending job on `placement` at `now`.
    pub fn start(&mut self, id: JobId, placement: Placement, now: Time) -> Result<(), SnapshotError> {
        let job = self.jobs.get(&id).ok_or(SnapshotError::UnknownJob(id))?;
        if job.running().is_some() {
            return Err(SnapshotError::NotPending(id));
        }
        if placement.len() != job.spec.replicas as usize {
            return Err(SnapshotError::ReplicaCount { job: id, got: placement.len(), want: job.spec.replicas });
        }
        if let Some(key) = &job.spec.same_label {
            let value = |r: &ReplicaPlacement| self.node(r.node).and_then(|n| n.labels.get(&**key).cloned());
            let first = placement.first().and_then(value);
            if first.is_none() || placement.iter().any(|r| value(r) != first) {
                return Err(SnapshotError::SplitGang { job: id, label: key.to_string() });
            }
        }
        // Check everything before changing anything: a refused start changes
        // nothing. Each replica is taken from a trial copy of its node's free
        // resources, so replicas that share a node are checked together.
        let mut trial: BTreeMap<NodeId, NodeFree> = BTreeMap::new();
        for r in &placement {
            let e = self.nodes.get(r.node.index()).ok_or(SnapshotError::UnknownNode(r.node))?;
            if r.gpus & !low_bits(e.gpu_slots.len()) != 0 || r.mig & !e.mig_exists != 0 {
                return Err(self.busy(id, r.node, "a device that does not exist"));
            }
            let f = trial.entry(r.node).or_insert_with(|| self.free[r.node.index()].clone());
            match r.share {
                Some(share) => {
                    let slot = r.gpus.trailing_zeros() as usize;
                    let device_mb = e.gpu_slots.get(slot).map_or(0, |&di| e.node.devices[di].memory_mb);
                    let room = if f.gpus & r.gpus != 0 {
                        Some((1000, device_mb))
                    } else {
                        shares::left(&f.shares, slot, device_mb)
                    };
                    if r.gpus.count_ones() != 1 || !room.is_some_and(|room| shares::fits(room, share)) {
                        return Err(self.busy(id, r.node, "room on a shared GPU"));
                    }
                }
                None if r.gpus & !f.gpus != 0 => return Err(self.busy(id, r.node, "a GPU")),
                None => {}
            }
            if r.mig & !f.mig != 0 {
                return Err(self.busy(id, r.node, "a MIG instance"));
            }
            if r.cpus_milli > f.cpus {
                return Err(self.busy(id, r.node, "enough CPU"));
            }
            if r.memory_mb > f.mem {
                return Err(self.busy(id, r.node, "enough memory"));
            }
            f.take(r);
        }
        for (node, f) in trial {
            self.free[node.index()] = f;
        }
        let by_kind = self.units_by_kind(&placement);
        let mut units = 0;
        for r in &placement {
            let e = &mut self.nodes[r.node.index()];
            e.jobs.insert(id);
            units += r.gpu_units() + e.mig_units(r.mig);
        }
        self.unindex_pending(id);
        self.nominations.remove(&id);
        let half_life = self.policy.fair_share.half_life;
        self.ledger.advance(now, half_life);
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        self.ledger.change_rate(&job.spec.team, &job.spec.user, &by_kind, true);
        *self.queue_usage.entry(job.spec.queue.clone()).or_default() += units;
        self.queue_kind_usage.entry(job.spec.queue.clone()).or_default().add_all(&by_kind);
        job.state = JobState::Running(Running { placement, started: now, gpu_milli: units, by_kind, stopping: None });
        self.running.insert(job);
        self.clear_avoid(id);
        Ok(())
    }

    fn busy(&self, job: JobId, node: NodeId, what: &'static str) -> SnapshotError {
        let node = self.nodes.get(node.index()).map_or_else(|| node.to_string(), |e| e.node.name.to_string());
        SnapshotError::Busy { job, node, what }
    }

    /// Marks a running job as stopping; it keeps its resources until [`Snapshot::stop`].
    pub fn request_stop(&mut self, id: JobId, cause: StopCause) -> Result<(), SnapshotError> {
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        match &mut job.state {
            JobState::Running(r) => {
                r.stopping = Some(cause);
                self.running.mark_stopping(id);
                Ok(())
            }
            JobState::Pending => Err(SnapshotError::NotRunning(id)),
        }
    }

    /// A running job's processes are gone: frees its resources and either
    /// requeues it or forgets it.
    pub fn stop(&mut self, id: JobId, now: Time, outcome: StopOutcome) -> Result<(), SnapshotError> {
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        let JobState::Running(run) = std::mem::replace(&mut job.state, JobState::Pending) else {
            return Err(SnapshotError::NotRunning(id));
        };
        let ran = now.since(run.started);
        job.service.prior_runtime += ran;
        job.service.prior_gpu_milli_secs =
            job.service.prior_gpu_milli_secs.saturating_add(run.gpu_milli.saturating_mul(ran.as_secs()));
        let spec = job.spec.clone();
        for r in &run.placement {
            if let (Some(f), Some(e)) = (self.free.get_mut(r.node.index()), self.nodes.get_mut(r.node.index())) {
                f.release(r);
                e.jobs.remove(&id);
            }
        }
        self.running.remove(id);
        self.ledger.advance(now, self.policy.fair_share.half_life);
        self.ledger.change_rate(&spec.team, &spec.user, &run.by_kind, false);
        if let Some(u) = self.queue_usage.get_mut(&spec.queue) {
            *u = u.saturating_sub(run.gpu_milli);
        }
        if let Some(u) = self.queue_kind_usage.get_mut(&spec.queue) {
            u.sub_all(&run.by_kind);
        }
        match outcome {
            StopOutcome::Requeue { not_before } => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.service.restarts += 1;
                    job.not_before = not_before;
                }
                self.index_pending(id);
            }
            StopOutcome::Finished { success } => {
                self.jobs.remove(&id);
                self.finished.insert(id, success);
                self.clear_avoid(id);
            }
        }
        Ok(())
    }
}

/// Devices per replica, the key of `pending_by_devices`.
pub(crate) fn device_need(g: &GpuRequest) -> u32 {
    g.device_count()
}
