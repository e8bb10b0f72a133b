//! The working copy of free resources a pass places jobs into, with the
//! indexes that make a placement search cheap: per GPU model, the nodes
//! ordered by how many GPUs of that model they have free.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::job::{
    GpuRequest, GpuShare, Job, JobId, JobSpec, Placement, ReplicaPlacement, ReplicaRequest, SpotPolicy,
};
use crate::model::node::{GpuSharing, NodeId, NodeState, PoolKind};
use crate::model::resources::{GpuMilli, same_model};
use crate::model::time::Time;
use crate::pass::fragmentation::node_fragmentation;
use crate::pass::plan::{Need, PendingReason};
use crate::pass::releasing::{Pieces, Releasing};
use crate::pass::shares;
use crate::pass::snapshot::{NodeEntry, NodeFree, Snapshot, bits};
use crate::policies::policy::PlacementStrategy;

/// Resources held back for the EASY reservation on one node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reserve {
    /// Whole GPUs.
    pub(crate) gpus: u64,
    /// Shares of GPUs: (the GPU's bit, the share).
    pub(crate) shares: Vec<(u64, GpuShare)>,
    pub(crate) mig: u64,
    pub(crate) cpus: u64,
    pub(crate) mem: u64,
}

/// One feasible spot for a replica on a node.
#[derive(Clone, Debug)]
pub(crate) struct Fit {
    pub(crate) gpus: u64,
    pub(crate) mig: u64,
    /// 2 = one NVLink island (or topology unknown), 1 = one NUMA node, 0 = scattered.
    pub(crate) topology: u8,
    /// How many matching devices the node had usable (best fit prefers fewer).
    pub(crate) avail: u32,
    /// The share of the one GPU in `gpus`, for a [`GpuRequest::Share`].
    pub(crate) share: Option<GpuShare>,
    /// How the strategy ranks this fit against other nodes' when `avail`
    /// alone does not say (shares, fragmentation); greater is better.
    pub(crate) rank: Option<i64>,
    /// No device of it is one the job should avoid (`snapshot/health.rs`).
    pub(crate) healthy: bool,
}

impl Fit {
    /// The replica this fit places on `node`: its devices, and the CPU and memory `req` asks for.
    pub(crate) fn replica(&self, node: NodeId, req: &ReplicaRequest) -> ReplicaPlacement {
        ReplicaPlacement {
            node,
            gpus: self.gpus,
            mig: self.mig,
            cpus_milli: req.cpus_milli,
            memory_mb: req.memory_mb,
            share: self.share,
        }
    }
}

/// The working copy of free resources during a pass.
pub(crate) struct Capacity<'s> {
    pub(crate) snap: &'s Snapshot,
    pub(crate) free: Vec<NodeFree>,
    /// Per model: (usable free GPUs of that model, node) for up nodes with at least one.
    by_model: Vec<BTreeSet<(u32, u32)>>,
    /// Up nodes with a free MIG instance.
    mig_nodes: BTreeSet<u32>,
    /// Up nodes with a shared GPU that has compute left.
    share_nodes: BTreeSet<u32>,
    reserved: BTreeMap<u32, Reserve>,
    reserved_until: Time,
    /// Jobs placed during this pass, by node, for anti-affinity.
    placed: Vec<(u32, JobId)>,
    /// Whether any job on the cluster or placed in this pass has anti-affinity terms.
    pub(crate) anti_affinity_in_use: bool,
    /// What preempted jobs give back once stopped that nobody has claimed:
    /// not free, but a job may claim it and wait (see [`Capacity::claim`]).
    pub(crate) releasing: Releasing,
    /// While a `same_label` gang is tried on one value: (label, value).
    pub(crate) only: Option<(std::sync::Arc<str>, String)>,
    /// Power budgets and their use (`power.rs`), when any is set.
    power: Option<crate::pass::power::PowerState>,
}

/// What [`Capacity::hold`] took for a nominated job: free resources and releasing ones.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    free: ReplicaPlacement,
    releasing: Pieces,
}

impl<'s> Capacity<'s> {
    pub(crate) fn new(snap: &'s Snapshot) -> Capacity<'s> {
        let mut c = Capacity {
            snap,
            free: snap.free.clone(),
            by_model: vec![BTreeSet::new(); snap.models.len()],
            mig_nodes: BTreeSet::new(),
            share_nodes: BTreeSet::new(),
            reserved: BTreeMap::new(),
            reserved_until: Time::NEVER,
            placed: Vec::new(),
            anti_affinity_in_use: snap.running.with_anti_affinity > 0,
            releasing: Releasing::default(),
            only: None,
            power: crate::pass::power::PowerState::new(snap),
        };
        for e in snap.running.values().filter(|e| e.stopping) {
            let preempted = snap
                .job(e.id)
                .and_then(|j| j.running())
                .is_some_and(|r| matches!(r.stopping, Some(crate::model::job::StopCause::Preempted { .. })));
            if preempted {
                c.releasing.add(e.id, &e.placement);
            }
        }
        for n in 0..snap.nodes.len() {
            // Held MIG GPUs and quarantined GPUs take nothing new.
            c.free[n].mig &= !snap.nodes[n].mig_held;
            c.free[n].exclude(snap.nodes[n].out_of_service());
            c.index_node(n as u32);
        }
        c
    }

    /// Nodes of the snapshot, eligible or not.
    pub(crate) fn node_count(&self) -> u32 {
        self.free.len() as u32
    }

    pub(crate) fn entry(&self, n: u32) -> &'s NodeEntry {
        &self.snap.nodes[n as usize]
    }

    fn is_up(&self, n: u32) -> bool {
        self.entry(n).node.state == NodeState::Up
    }

    fn index_node(&mut self, n: u32) {
        if !self.is_up(n) {
            return;
        }
        let e = self.entry(n);
        let f = &self.free[n as usize];
        for &(m, mask) in &e.model_masks {
            let c = (f.gpus & mask).count_ones();
            if c > 0 {
                self.by_model[m].insert((c, n));
            }
        }
        if f.mig != 0 {
            self.mig_nodes.insert(n);
        }
        if f.shares.iter().any(|s| s.milli < 1000) {
            self.share_nodes.insert(n);
        }
    }

    fn unindex_node(&mut self, n: u32) {
        if !self.is_up(n) {
            return;
        }
        let e = self.entry(n);
        let f = &self.free[n as usize];
        for &(m, mask) in &e.model_masks {
            let c = (f.gpus & mask).count_ones();
            if c > 0 {
                self.by_model[m].remove(&(c, n));
            }
        }
        self.mig_nodes.remove(&n);
        self.share_nodes.remove(&n);
    }

    /// Largest number of devices (whole GPUs of one model, or MIG instances) free on one up node.
    pub(crate) fn max_free_devices(&self) -> u32 {
        let gpus = self.by_model.iter().filter_map(|s| s.last()).map(|&(c, _)| c).max().unwrap_or(0);
        let mig = self.mig_nodes.iter().map(|&n| self.free[n as usize].mig.count_ones()).max().unwrap_or(0);
        let share = u32::from(!self.share_nodes.is_empty());
        gpus.max(mig).max(share)
    }

    /// Whether any up node has CPU left.
    pub(crate) fn any_cpu_free(&self) -> bool {
        (0..self.free.len()).any(|n| self.is_up(n as u32) && self.free[n].cpus > 0)
    }

    /// Marks resources as held back for a reservation until `until`.
    pub(crate) fn set_reservation(&mut self, placement: &Placement, until: Time) {
        self.reserved_until = until;
        for r in placement {
            let e = self.reserved.entry(r.node.0).or_default();
            match r.share {
                Some(share) => e.shares.push((r.gpus, share)),
                None => e.gpus |= r.gpus,
            }
            e.mig |= r.mig;
            e.cpus += r.cpus_milli;
            e.mem += r.memory_mb;
        }
    }

    /// What a job ending at `ends` may use on node `n`.
    pub(crate) fn usable(&self, n: u32, ends: Time) -> NodeFree {
        let f = &self.free[n as usize];
        match self.reserved.get(&n) {
            Some(r) if ends > self.reserved_until || self.reserved_until == Time::NEVER => {
                let mut nf = NodeFree {
                    gpus: f.gpus & !r.gpus,
                    mig: f.mig & !r.mig,
                    cpus: f.cpus.saturating_sub(r.cpus),
                    mem: f.mem.saturating_sub(r.mem),
                    shares: f.shares.clone(),
                };
                // A reserved share leaves the rest of its GPU to others. It is
                // taken only from a GPU free now: on a GPU shared or held now,
                // the holders that leave by the reservation make its room, and
                // holding their part back too would count it twice (and have
                // jobs preempt for room that is coming anyway).
                for &(bit, share) in &r.shares {
                    if nf.gpus & bit != 0 {
                        nf.take(&ReplicaPlacement {
                            node: NodeId(n),
                            gpus: bit,
                            mig: 0,
                            cpus_milli: 0,
                            memory_mb: 0,
                            share: Some(share),
                        });
                    }
                }
                nf
            }
            _ => f.clone(),
        }
    }

    /// Whether `job` may go on node `n` at all (state, selector, affinity, anti-affinity).
    pub(crate) fn eligible(&self, n: u32, job: &Job) -> bool {
        let power_ok = self.power.as_ref().is_none_or(|p| p.fits(n, self.replica_watts(n, job)));
        power_ok && self.eligible_ignoring_power(n, job)
    }

    /// [`Self::eligible`] without power budgets (preemption: the victims give back their watts).
    pub(crate) fn eligible_ignoring_power(&self, n: u32, job: &Job) -> bool {
        let e = self.entry(n);
        if e.node.state != NodeState::Up || !job.spec.node_matches(&e.node) {
            return false;
        }
        if let Some(key) = &job.spec.same_label {
            let value = e.node.labels.get(&**key);
            if value.is_none() || self.only.as_ref().is_some_and(|(_, v)| Some(v) != value) {
                return false;
            }
        }
        if !self.anti_affinity_in_use && job.spec.anti_affinity.is_empty() {
            return true;
        }
        let conflicts = |other: &JobSpec| job.spec.repels(&other.labels) || other.repels(&job.spec.labels);
        let running = e.jobs.iter().filter_map(|id| self.snap.jobs.get(id)).any(|o| conflicts(&o.spec));
        let placed = self
            .placed
            .iter()
            .filter(|(pn, _)| *pn == n)
            .filter_map(|(_, id)| self.snap.jobs.get(id))
            .any(|o| conflicts(&o.spec));
        !(running || placed)
    }

    pub(crate) fn place_gang(&mut self, job: &Job, ends: Time, strategy: PlacementStrategy) -> Result<Placement, ()> {
        let mut placement = Vec::with_capacity(job.spec.replicas as usize);
        for _ in 0..job.spec.replicas {
            match self.place_replica(job, ends, strategy) {
                Some(r) => {
                    self.commit(&r, job.id);
                    placement.push(r);
                }
                None => {
                    for r in placement.iter().rev() {
                        self.uncommit(r, job.id);
                    }
                    return Err(());
                }
            }
        }
        Ok(placement)
    }

    /// Watts one replica of `job` would add on node `n` (`power.rs`).
    fn replica_watts(&self, n: u32, job: &Job) -> u64 {
        let Some(power) = self.entry(n).node.power else { return 0 };
        let units = job.spec.gpu_units() / GpuMilli::from(job.spec.replicas.max(1));
        crate::pass::power::replica_watts(job, &power, units)
    }

    /// Takes a replica's resources.
    pub(crate) fn commit(&mut self, r: &ReplicaPlacement, job: JobId) {
        let n = r.node.0;
        self.power_delta(r, job, true);
        self.unindex_node(n);
        self.free[n as usize].take(r);
        self.index_node(n);
        self.placed.push((n, job));
        if self.snap.jobs.get(&job).is_some_and(|j| !j.spec.anti_affinity.is_empty()) {
            self.anti_affinity_in_use = true;
        }
    }

    /// A replica's watts added to (or taken from) the budgets over its node.
    fn power_delta(&mut self, r: &ReplicaPlacement, job: JobId, add: bool) {
        let (Some(power), Some(j)) = (self.entry(r.node.0).node.power, self.snap.jobs.get(&job)) else { return };
        let units = r.gpu_units() + self.entry(r.node.0).mig_units(r.mig);
        let watts = crate::pass::power::replica_watts(j, &power, units);
        if let Some(p) = &mut self.power {
            if add { p.add(r.node.0, watts) } else { p.remove(r.node.0, watts) }
        }
    }

    pub(crate) fn uncommit(&mut self, r: &ReplicaPlacement, job: JobId) {
        self.power_delta(r, job, false);
        let n = r.node.0;
        self.unindex_node(n);
        self.free[n as usize].release(r);
        self.index_node(n);
        if let Some(pos) = self.placed.iter().rposition(|&(pn, j)| pn == n && j == job) {
            self.placed.remove(pos);
        }
    }

    /// The nominated job's claim: takes `r`'s share of what preempted jobs
    /// will give back (CPU and memory from them first) and the rest from what
    /// is free now. Returns the pieces taken from releasing jobs: the job
    /// waits for those.
    pub(crate) fn claim(&mut self, r: &ReplicaPlacement, job: JobId) -> Pieces {
        let n = r.node.0;
        let pieces = self.releasing.take(r);
        let (released_cpus, released_mem) =
            pieces.iter().fold((0, 0), |(c, m), (_, p)| (c + p.cpus_milli, m + p.memory_mb));
        self.unindex_node(n);
        let free_now = ReplicaPlacement {
            cpus_milli: r.cpus_milli.saturating_sub(released_cpus),
            memory_mb: r.memory_mb.saturating_sub(released_mem),
            ..r.clone()
        };
        let f = &mut self.free[n as usize];
        let slot = r.gpus.trailing_zeros() as usize;
        let shared_now = r.share.is_some() && shares::left(&f.shares, slot, 0).is_some();
        if r.share.is_some() && f.gpus & r.gpus == 0 && !shared_now {
            // A share of a GPU a victim still holds whole: nothing else may
            // be placed on it in this pass, shared or whole.
            let full = GpuShare { milli: 1000, memory_mb: u64::MAX / 2 };
            f.take(&ReplicaPlacement { share: Some(full), ..free_now });
        } else {
            f.take(&free_now);
        }
        self.index_node(n);
        self.placed.push((n, job));
        pieces
    }

    /// Whether `placement` fits in what is free now, without anything releasing.
    pub(crate) fn fits_free(&self, placement: &Placement) -> bool {
        placement.iter().all(|r| {
            let f = &self.free[r.node.0 as usize];
            let devices = match r.share {
                // A share fits on a free GPU, or on a shared one with room for it.
                Some(sh) => {
                    let e = self.entry(r.node.0);
                    let slot = r.gpus.trailing_zeros() as usize;
                    let device_mb = e.gpu_slots.get(slot).map_or(0, |&di| e.node.devices[di].memory_mb);
                    f.gpus & r.gpus != 0
                        || shares::left(&f.shares, slot, device_mb).is_some_and(|room| shares::fits(room, sh))
                }
                None => r.gpus & !f.gpus == 0,
            };
            devices && r.mig & !f.mig == 0 && r.cpus_milli <= f.cpus && r.memory_mb <= f.mem
        })
    }

    /// Takes what is free of `r` and returns exactly what was taken, so it can be given back.
    pub(crate) fn hold(&mut self, r: &ReplicaPlacement) -> Held {
        let n = r.node.0;
        if n as usize >= self.free.len() {
            let none = ReplicaPlacement { gpus: 0, mig: 0, cpus_milli: 0, memory_mb: 0, share: None, ..r.clone() };
            return Held { free: none, releasing: Vec::new() };
        }
        // What preempted jobs will give back first, then what is free.
        let releasing = self.releasing.take(r);
        let (rel_cpus, rel_mem) = releasing.iter().fold((0, 0), |(c, m), (_, p)| (c + p.cpus_milli, m + p.memory_mb));
        self.unindex_node(n);
        let e = &self.snap.nodes[n as usize];
        let f = &mut self.free[n as usize];
        // A share is held if its GPU is free or shared with room for it.
        let share = r.share.filter(|&sh| {
            let slot = r.gpus.trailing_zeros() as usize;
            let device_mb = e.gpu_slots.get(slot).map_or(0, |&di| e.node.devices[di].memory_mb);
            let room =
                if f.gpus & r.gpus != 0 { Some((1000, device_mb)) } else { shares::left(&f.shares, slot, device_mb) };
            room.is_some_and(|room| shares::fits(room, sh))
        });
        let taken = ReplicaPlacement {
            node: r.node,
            gpus: if r.share.is_some() { if share.is_some() { r.gpus } else { 0 } } else { f.gpus & r.gpus },
            mig: f.mig & r.mig,
            cpus_milli: f.cpus.min(r.cpus_milli.saturating_sub(rel_cpus)),
            memory_mb: f.mem.min(r.memory_mb.saturating_sub(rel_mem)),
            share,
        };
        f.take(&taken);
        self.index_node(n);
        Held { free: taken, releasing }
    }

    /// Gives back what [`Capacity::hold`] took.
    pub(crate) fn release(&mut self, held: &Held) {
        let n = held.free.node.0;
        self.unindex_node(n);
        self.free[n as usize].release(&held.free);
        self.index_node(n);
        self.releasing.give_back(&held.releasing);
    }

    /// The best node and devices for one replica of `job`, given the indexes.
    pub(crate) fn place_replica(&self, job: &Job, ends: Time, strategy: PlacementStrategy) -> Option<ReplicaPlacement> {
        let req = &job.spec.replica;
        let found = match &req.gpu {
            GpuRequest::None => self.search_all(job, ends, strategy),
            GpuRequest::Gpus { count } => self.search_gpus(job, ends, strategy, *count, None),
            GpuRequest::Mig { profile, count } => {
                let p = self.snap.profiles.iter().position(|x| x.profile == *profile)?;
                self.search_mig(job, ends, strategy, p, *count)
            }
            GpuRequest::Memory { min_mb, count } => self.search_memory(job, ends, strategy, *min_mb, *count),
            GpuRequest::Share { milli, memory_mb } => self.search_share(job, ends, strategy, *milli, *memory_mb),
        }?;
        let (n, fit) = found;
        Some(fit.replica(NodeId(n), req))
    }

    /// Smallest-memory device first: MIG profiles and whole-GPU models that have enough memory.
    fn search_memory(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        min_mb: u64,
        count: u32,
    ) -> Option<(u32, Fit)> {
        // (memory, is_gpu, index)
        let mut options: Vec<(u64, bool, usize)> = Vec::new();
        if count == 1 {
            for (i, p) in self.snap.profiles.iter().enumerate() {
                if p.memory_mb >= min_mb {
                    options.push((p.memory_mb, false, i));
                }
            }
        }
        for (i, m) in self.snap.models.iter().enumerate() {
            if m.memory_mb >= min_mb && job.model_allows_index(self.snap, i) {
                options.push((m.memory_mb, true, i));
            }
        }
        options.sort();
        options.into_iter().find_map(|(_, is_gpu, i)| {
            if is_gpu {
                self.search_gpus(job, ends, s, count, Some(i))
            } else {
                self.search_mig(job, ends, s, i, count)
            }
        })
    }

    /// Whole GPUs of one model on one node, best fit through the per-model index.
    fn search_gpus(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        count: u32,
        only: Option<usize>,
    ) -> Option<(u32, Fit)> {
        let frag = s == PlacementStrategy::Fragmentation;
        let scan_all = frag || job.spec.has_preferences() || self.snap.mixed_pool_kinds() || self.snap.health_in_use();
        let mut best: Option<(Score, u32, Fit)> = None;
        for m in 0..self.snap.models.len() {
            if only.is_some_and(|o| o != m) || !job.model_allows_index(self.snap, m) {
                continue;
            }
            let set = &self.by_model[m];
            let mut first_free: Option<u32> = None;
            let mut visit = |&(free, n): &(u32, u32)| -> bool {
                if let Some(ff) = first_free
                    && !scan_all
                    && free != ff
                {
                    return false; // left the bucket of the first feasible node
                }
                if !self.eligible(n, job) {
                    return true;
                }
                let e = self.entry(n);
                let nf = self.usable(n, ends);
                let Some(mut fit) = fit_gpus(e, &nf, job, count, Some(m)) else {
                    return true;
                };
                if frag {
                    fit.rank = Some(-self.fragmentation_growth(e, &nf, job, fit.gpus, None));
                }
                first_free.get_or_insert(free);
                let score = Score::new(self.snap, job, e, &fit, s);
                let perfect = fit.topology == 2 && fit.healthy;
                if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                    best = Some((score, n, fit));
                }
                scan_all || !perfect
            };
            match s {
                PlacementStrategy::BestFit | PlacementStrategy::Fragmentation => {
                    for item in set.range((count, 0)..) {
                        if !visit(item) {
                            break;
                        }
                    }
                }
                PlacementStrategy::Spread => {
                    for item in set.range((count, 0)..).rev() {
                        if !visit(item) {
                            break;
                        }
                    }
                }
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    fn search_mig(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        profile: usize,
        count: u32,
    ) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for &n in &self.mig_nodes {
            if !self.eligible(n, job) {
                continue;
            }
            let e = self.entry(n);
            let nf = self.usable(n, ends);
            if let Some(fit) = fit_mig(self.snap, e, &nf, job, profile, count) {
                let score = Score::new(self.snap, job, e, &fit, s);
                if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                    best = Some((score, n, fit));
                }
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// A share of one GPU: over every up node that shares its GPUs.
    fn search_share(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        milli: Option<u16>,
        memory_mb: Option<u64>,
    ) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for n in 0..self.free.len() as u32 {
            let e = self.entry(n);
            if e.node.sharing == GpuSharing::Off || e.gpu_slots.is_empty() || !self.eligible(n, job) {
                continue;
            }
            let nf = self.usable(n, ends);
            let Some(fit) = fit_share(self.snap, e, &nf, job, (milli, memory_mb), s, |gpu, share| {
                self.fragmentation_growth(e, &nf, job, gpu, Some(share))
            }) else {
                continue;
            };
            let score = Score::new(self.snap, job, e, &fit, s);
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, n, fit));
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// How much node `e`'s fragmentation (weighted by the demand mix) grows
    /// if a replica of `job` takes `gpus` whole, or `share` of the GPU in `gpus`.
    fn fragmentation_growth(&self, e: &NodeEntry, nf: &NodeFree, job: &Job, gpus: u64, share: Option<u16>) -> i64 {
        let mix = &self.snap.demand;
        if mix.is_empty() {
            return 0;
        }
        let mut left = gpu_left(e, nf);
        let before = node_fragmentation(mix, &left, nf.cpus);
        for slot in bits(gpus) {
            left[slot] = match share {
                Some(m) => left[slot].saturating_sub(m),
                None => 0,
            };
        }
        let after = node_fragmentation(mix, &left, nf.cpus.saturating_sub(job.spec.replica.cpus_milli));
        after as i64 - before as i64
    }

    /// CPU-only work: prefer nodes with the fewest free GPUs, to keep GPU nodes for GPU work.
    fn search_all(&self, job: &Job, ends: Time, s: PlacementStrategy) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for n in 0..self.free.len() as u32 {
            if !self.eligible(n, job) {
                continue;
            }
            let nf = self.usable(n, ends);
            if !fits_host(&nf, job) {
                continue;
            }
            // Under fragmentation-aware placement, CPU-only work avoids taking
            // the CPUs that a node's free GPUs need.
            let rank = (s == PlacementStrategy::Fragmentation)
                .then(|| -self.fragmentation_growth(self.entry(n), &nf, job, 0, None));
            let fit = Fit {
                gpus: 0,
                mig: 0,
                topology: 2,
                avail: nf.gpus.count_ones() + nf.mig.count_ones(),
                share: None,
                rank,
                healthy: true,
            };
            let score = Score::new(self.snap, job, self.entry(n), &fit, s);
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, n, fit));
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// The reason a job that did not fit gets.
    pub(crate) fn miss_reason(&self, job: &Job) -> PendingReason {
        let need = Need {
            replicas: job.spec.replicas,
            gpu: job.spec.replica.gpu.clone(),
            model: job.spec.replica.gpu_model.clone(),
            kind: job.spec.replica.gpu_kind,
        };
        let hosts = (0..self.free.len() as u32).any(|n| {
            let e = self.entry(n);
            e.node.state == NodeState::Up && job.spec.node_matches(&e.node) && could_host(self.snap, e, job)
        });
        if !hosts {
            let (mut draining, mut down) = (0, 0);
            for n in 0..self.free.len() as u32 {
                let e = self.entry(n);
                if e.node.state != NodeState::Up && job.spec.node_matches(&e.node) && could_host(self.snap, e, job) {
                    match e.node.state {
                        NodeState::Draining => draining += 1,
                        _ => down += 1,
                    }
                }
            }
            if draining + down > 0 {
                return PendingReason::NodesUnavailable { need, draining, down };
            }
            return PendingReason::NoMatchingNode { need };
        }
        // Room on a node, but not in a budget over it.
        if let Some(p) = &self.power {
            let blocked = (0..self.free.len() as u32)
                .filter(|&n| self.is_up(n) && job.spec.node_matches(&self.entry(n).node))
                .filter(|&n| fit_on(self.snap, self.entry(n), &self.free[n as usize], job).is_some())
                .find_map(|n| p.blocking(n, self.replica_watts(n, job)));
            if let Some((b, used)) = blocked {
                return PendingReason::Power { budget: b.scope.to_string().into(), used_watts: used, watts: b.watts };
            }
        }
        let best_free = match &job.spec.replica.gpu {
            GpuRequest::None => 0,
            GpuRequest::Gpus { .. } | GpuRequest::Memory { .. } | GpuRequest::Share { .. } => {
                (0..self.snap.models.len())
                    .filter(|&m| job.model_allows_index(self.snap, m))
                    .filter_map(|m| self.by_model[m].last().map(|&(c, _)| c))
                    .max()
                    .unwrap_or(0)
            }
            GpuRequest::Mig { profile, .. } => match self.snap.profiles.iter().position(|x| x.profile == *profile) {
                Some(p) => self
                    .mig_nodes
                    .iter()
                    .map(|&n| (self.free[n as usize].mig & self.entry(n).profile_mask(p)).count_ones())
                    .max()
                    .unwrap_or(0),
                None => 0,
            },
        };
        let quarantined = (0..self.free.len() as u32)
            .filter(|&n| self.entry(n).out_of_service() != (0, 0))
            .filter(|&n| self.is_up(n) && job.spec.node_matches(&self.entry(n).node))
            .map(|n| self.snap.quarantined_gpus(NodeId(n)).len() as u32)
            .sum();
        PendingReason::NoFit { need, best_free, quarantined }
    }
}

/// Ranks candidate nodes for one replica; greater is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    /// A fit without GPUs to avoid first, while there is one.
    healthy: bool,
    preference: u32,
    /// Where pool kinds differ: capacity paid for anyway (reserved) first,
    /// then spot (unless the job never runs there), then on-demand.
    pool: u8,
    topology: u8,
    /// Best fit: fewer usable devices left is better (negated); spread: more.
    /// Or the fit's own rank, where it has one.
    fit: i64,
    /// Between equal ranks: the best-fit (or spread) term.
    tiebreak: i64,
}

impl Score {
    fn new(snap: &Snapshot, job: &Job, e: &NodeEntry, fit: &Fit, s: PlacementStrategy) -> Score {
        let by_avail = match s {
            PlacementStrategy::BestFit | PlacementStrategy::Fragmentation => -i64::from(fit.avail),
            PlacementStrategy::Spread => i64::from(fit.avail),
        };
        let (fit_term, tiebreak) = match fit.rank {
            Some(rank) => (rank, by_avail),
            None => (by_avail, 0),
        };
        let preference = if job.spec.has_preferences() { job.spec.node_preference(&e.node) } else { 0 };
        let pool = if snap.mixed_pool_kinds() {
            match e.node.pool.kind {
                PoolKind::Reserved => 2,
                PoolKind::Spot if job.spec.spot != SpotPolicy::Never => 1,
                _ => 0,
            }
        } else {
            0
        };
        Score { healthy: fit.healthy, preference, pool, topology: fit.topology, fit: fit_term, tiebreak }
    }
}

fn fits_host(nf: &NodeFree, job: &Job) -> bool {
    nf.cpus >= job.spec.replica.cpus_milli && nf.mem >= job.spec.replica.memory_mb
}

/// The lowest `count` set bits of `mask`.
fn lowest(mask: u64, count: u32) -> u64 {
    bits(mask).take(count as usize).fold(0, |acc, i| acc | 1 << i)
}

/// Picks `count` whole GPUs of model `m` on a node, preferring one NVLink island, then one NUMA node.
pub(crate) fn fit_gpus(e: &NodeEntry, nf: &NodeFree, job: &Job, count: u32, m: Option<usize>) -> Option<Fit> {
    if !fits_host(nf, job) {
        return None;
    }
    let mut best: Option<Fit> = None;
    for &(model, mask) in &e.model_masks {
        if m.is_some_and(|m| m != model) {
            continue;
        }
        let avail = nf.gpus & mask;
        if avail.count_ones() < count {
            continue;
        }
        // GPUs to avoid only when there is no fit without them.
        let healthy = avail & !e.avoided_slots(job.id);
        let fit = if healthy.count_ones() >= count {
            choose_devices(e, healthy, count)
        } else {
            // As few of them as it takes.
            let fill = lowest(avail & !healthy, count - healthy.count_ones());
            Fit { healthy: false, avail: avail.count_ones(), ..choose_devices(e, healthy | fill, count) }
        };
        let key = |f: &Fit| (f.healthy, f.topology, std::cmp::Reverse(f.avail));
        if best.as_ref().is_none_or(|b| key(&fit) > key(b)) {
            best = Some(fit);
        }
    }
    best
}

fn choose_devices(e: &NodeEntry, avail: u64, count: u32) -> Fit {
    let total = avail.count_ones();
    let fit = |gpus, topology| Fit { gpus, mig: 0, topology, avail: total, share: None, rank: None, healthy: true };
    if count <= 1 || e.nvlink_groups.is_empty() && e.numa_groups.is_empty() {
        return fit(lowest(avail, count), 2);
    }
    for (groups, topology) in [(&e.nvlink_groups, 2), (&e.numa_groups, 1)] {
        // Best fit inside the node too: the island with the fewest free GPUs that still fits.
        let best = groups
            .iter()
            .map(|g| avail & g)
            .filter(|g| g.count_ones() >= count)
            .min_by_key(|g| (g.count_ones(), g.trailing_zeros()));
        if let Some(g) = best {
            return fit(lowest(g, count), topology);
        }
    }
    let topology = if e.nvlink_groups.is_empty() { 2 } else { 0 };
    fit(lowest(avail, count), topology)
}

/// Picks `count` MIG instances of `profile` on a node.
pub(crate) fn fit_mig(
    snap: &Snapshot,
    e: &NodeEntry,
    nf: &NodeFree,
    job: &Job,
    profile: usize,
    count: u32,
) -> Option<Fit> {
    if !fits_host(nf, job) {
        return None;
    }
    let avail =
        nf.mig & e.profile_mask(profile) & e.mig_mask_for_model(&snap.models, job.spec.replica.gpu_model.as_deref());
    (avail.count_ones() >= count).then(|| Fit {
        gpus: 0,
        mig: lowest(avail, count),
        topology: 2,
        avail: avail.count_ones(),
        share: None,
        rank: None,
        healthy: true,
    })
}

/// Each whole GPU's unallocated part in thousandths: 1000 free, 0 held whole.
fn gpu_left(e: &NodeEntry, nf: &NodeFree) -> Vec<u16> {
    (0..e.gpu_slots.len())
        .map(
            |slot| {
                if nf.gpus & (1 << slot) != 0 { 1000 } else { shares::left(&nf.shares, slot, 0).map_or(0, |(m, _)| m) }
            },
        )
        .collect()
}

/// Picks the GPU of node `e` for a share (`ask`: fraction, memory). Best fit
/// takes the shared GPU it fills most, else a free one; spread the GPU with
/// most left; fragmentation the GPU where `growth` (how much the node's
/// fragmentation grows) is least. Never a MIG GPU, never on a node that does
/// not share.
pub(crate) fn fit_share(
    snap: &Snapshot,
    e: &NodeEntry,
    nf: &NodeFree,
    job: &Job,
    ask: (Option<u16>, Option<u64>),
    s: PlacementStrategy,
    growth: impl Fn(u64, u16) -> i64,
) -> Option<Fit> {
    if e.node.sharing == GpuSharing::Off || !fits_host(nf, job) {
        return None;
    }
    let free_gpus = nf.gpus.count_ones();
    let mut best: Option<Fit> = None;
    // Free GPUs of one model and memory rank alike: rank the first only.
    let mut free_seen: Vec<(usize, u64)> = Vec::new();
    for (slot, &di) in e.gpu_slots.iter().enumerate() {
        let d = &e.node.devices[di];
        let model = snap.models.iter().position(|m| *m.name == *d.model);
        if !model.is_some_and(|m| job.model_allows_index(snap, m)) {
            continue;
        }
        let bit = 1u64 << slot;
        let is_free = nf.gpus & bit != 0;
        let room = if is_free {
            let key = (model.unwrap_or(usize::MAX), d.memory_mb);
            if free_seen.contains(&key) {
                continue;
            }
            free_seen.push(key);
            (1000, d.memory_mb)
        } else {
            match shares::left(&nf.shares, slot, d.memory_mb) {
                Some(room) => room,
                None => continue,
            }
        };
        let Some(share) = GpuShare::on_device(ask.0, ask.1, d.memory_mb) else { continue };
        if !shares::fits(room, share) {
            continue;
        }
        let after = i64::from(room.0 - share.milli);
        let rank = match s {
            PlacementStrategy::BestFit if is_free => -i64::from(free_gpus),
            PlacementStrategy::BestFit => 1_000_000 - after,
            PlacementStrategy::Spread if is_free => 1_000_000 + i64::from(free_gpus),
            PlacementStrategy::Spread => after,
            PlacementStrategy::Fragmentation => -growth(bit, share.milli),
        };
        if best.as_ref().is_none_or(|b| b.rank < Some(rank)) {
            best = Some(Fit {
                gpus: bit,
                mig: 0,
                topology: 2,
                avail: free_gpus,
                share: Some(share),
                rank: Some(rank),
                healthy: true,
            });
        }
    }
    best
}

/// Whether one replica of `job` fits node `e` given free resources `nf`, and where.
pub(crate) fn fit_on(snap: &Snapshot, e: &NodeEntry, nf: &NodeFree, job: &Job) -> Option<Fit> {
    match &job.spec.replica.gpu {
        GpuRequest::None => fits_host(nf, job).then_some(Fit {
            gpus: 0,
            mig: 0,
            topology: 2,
            avail: 0,
            share: None,
            rank: None,
            healthy: true,
        }),
        GpuRequest::Share { milli, memory_mb } => {
            fit_share(snap, e, nf, job, (*milli, *memory_mb), PlacementStrategy::BestFit, |_, _| 0)
        }
        GpuRequest::Gpus { count } => (0..snap.models.len())
            .filter(|&m| job.model_allows_index(snap, m))
            .filter_map(|m| fit_gpus(e, nf, job, *count, Some(m)))
            .max_by_key(|f| f.topology),
        GpuRequest::Mig { profile, count } => {
            let p = snap.profiles.iter().position(|x| x.profile == *profile)?;
            fit_mig(snap, e, nf, job, p, *count)
        }
        GpuRequest::Memory { min_mb, count } => {
            let mut options: Vec<(u64, bool, usize)> = Vec::new();
            if *count == 1 {
                options.extend(
                    snap.profiles
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.memory_mb >= *min_mb)
                        .map(|(i, p)| (p.memory_mb, false, i)),
                );
            }
            options.extend(
                snap.models
                    .iter()
                    .enumerate()
                    .filter(|(i, m)| m.memory_mb >= *min_mb && job.model_allows_index(snap, *i))
                    .map(|(i, m)| (m.memory_mb, true, i)),
            );
            options.sort();
            options.into_iter().find_map(|(_, is_gpu, i)| {
                if is_gpu { fit_gpus(e, nf, job, *count, Some(i)) } else { fit_mig(snap, e, nf, job, i, *count) }
            })
        }
    }
}

/// Whether node `e`, empty, could hold one replica of `job`.
pub(crate) fn could_host(snap: &Snapshot, e: &NodeEntry, job: &Job) -> bool {
    fit_on(snap, e, &e.full(), job).is_some()
}

/// Quota units (thousandths of a GPU) a placement holds.
pub(crate) fn placement_units(snap: &Snapshot, placement: &Placement) -> GpuMilli {
    placement.iter().map(|r| r.gpu_units() + snap.nodes[r.node.index()].mig_units(r.mig)).sum()
}

impl Job {
    /// Whether GPU model `m` (an index into the snapshot's models) is allowed for this job.
    /// (And of kind: a model is interned per kind.)
    pub(crate) fn model_allows_index(&self, snap: &Snapshot, m: usize) -> bool {
        self.spec.kind_allows(snap.models[m].kind)
            && match &self.spec.replica.gpu_model {
                None => true,
                Some(want) => same_model(want, &snap.models[m].name),
            }
    }
}
