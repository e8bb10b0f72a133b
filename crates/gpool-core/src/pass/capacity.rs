//! The working copy of free resources a pass places jobs into, with the
//! indexes that make a placement search cheap: per GPU model, the nodes
//! ordered by how many GPUs of that model they have free.
//!
//! This file keeps the index and the accounting: what a pass commits, claims
//! from releasing jobs, holds for a nominated job and gives back, and what a
//! reservation holds back. The search for the best node is in
//! `capacity/search.rs`, and where one replica fits on one node in
//! `capacity/fit.rs`.

use std::collections::BTreeMap;

use crate::model::job::{GpuShare, Job, JobId, JobSpec, Placement, ReplicaPlacement};
use crate::model::node::{NodeId, NodeState};
use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::pass::releasing::{Pieces, Releasing};
use crate::pass::shares;
use crate::pass::snapshot::{NodeEntry, NodeFree, Snapshot};
use crate::policies::policy::PlacementStrategy;

mod base;
mod fit;
mod search;
mod sorted;

use base::{Base, NodeIndexes};

pub(crate) use fit::{Fit, fit_on};

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

/// The working copy of free resources during a pass.
pub(crate) struct Capacity<'s> {
    pub(crate) snap: &'s Snapshot,
    pub(crate) free: Vec<NodeFree>,
    /// Per model the nodes by free GPUs, and the nodes with free MIG instances or shares.
    ix: NodeIndexes,
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
    /// Advance reservations not over, per node: (their GPUs there, when
    /// they start, their index in the snapshot's list) (`keep_reservations`).
    advance: BTreeMap<u32, Vec<(u64, Time, usize)>>,
    /// The reservation whose window is open for the job being placed: it
    /// uses that reservation's GPUs and no others.
    pub(crate) member: Option<usize>,
    /// Advance reservations are not kept (to tell whether one is what stops a job).
    pub(crate) ignore_advance: bool,
}

/// What [`Capacity::hold`] took for a nominated job: free resources and releasing ones.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    free: ReplicaPlacement,
    releasing: Pieces,
}

impl<'s> Capacity<'s> {
    pub(crate) fn new(snap: &'s Snapshot) -> Capacity<'s> {
        // The free capacity and its indexes as the last pass left them,
        // brought up to date (`capacity/base.rs`), copied for this pass.
        let base = Base::for_pass(snap);
        let mut c = Capacity {
            snap,
            free: base.free.clone(),
            ix: base.ix.clone(),
            reserved: BTreeMap::new(),
            reserved_until: Time::NEVER,
            placed: Vec::new(),
            anti_affinity_in_use: snap.running.with_anti_affinity > 0,
            releasing: Releasing::default(),
            only: None,
            power: crate::pass::power::PowerState::new(snap),
            advance: BTreeMap::new(),
            member: None,
            ignore_advance: false,
        };
        base.keep(snap);
        for e in snap.running.stopping() {
            let preempted = snap.job(e.id).and_then(|j| j.running()).is_some_and(|r| {
                use crate::model::job::StopCause;
                matches!(r.stopping, Some(StopCause::Preempted { .. } | StopCause::Resized { .. }))
            });
            if preempted {
                c.releasing.add(e.id, &e.placement);
            }
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
        self.ix.enter(self.entry(n), &self.free[n as usize], n);
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
                self.ix.by_model[m].remove(&(c, n));
            }
        }
        self.ix.mig_nodes.remove(&n);
        self.ix.share_nodes.remove(&n);
    }

    /// Largest number of devices (whole GPUs of one model, or MIG instances) free on one up node.
    pub(crate) fn max_free_devices(&self) -> u32 {
        let gpus = self.ix.by_model.iter().filter_map(|s| s.last()).map(|&(c, _)| c).max().unwrap_or(0);
        let mig = self.ix.mig_nodes.iter().map(|&n| self.free[n as usize].mig.count_ones()).max().unwrap_or(0);
        let share = u32::from(!self.ix.share_nodes.is_empty());
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

    /// Keeps the GPUs of the advance reservations not over at `now`: a job
    /// not in one may use its GPUs only if it ends by its start
    /// (`calendar/reservation.rs`).
    pub(crate) fn keep_reservations(&mut self, now: Time) {
        for (i, r) in self.snap.reservations.iter().enumerate().filter(|(_, r)| r.end > now) {
            for &(node, mask) in &r.devices {
                self.advance.entry(node.0).or_default().push((mask, r.start, i));
            }
        }
    }

    /// A reservation of the advance ones that holds, on node `n`, GPUs of
    /// `gpus` a job ending at `ends` (not its member) may not use.
    pub(crate) fn reservation_over(&self, n: u32, gpus: u64, ends: Time) -> Option<usize> {
        self.advance
            .get(&n)?
            .iter()
            .find(|(mask, start, i)| mask & gpus != 0 && ends > *start && self.member != Some(*i))
            .map(|x| x.2)
    }

    /// Whether no advance reservation is kept in this pass.
    pub(crate) fn keeps_no_reservation(&self) -> bool {
        self.advance.is_empty()
    }

    /// What a job ending at `ends` may use on node `n`.
    pub(crate) fn usable(&self, n: u32, ends: Time) -> NodeFree {
        let mut nf = self.usable_ignoring_advance(n, ends);
        if self.ignore_advance {
            return nf;
        }
        let held = self.advance.get(&n);
        if let Some(m) = self.member {
            // A reservation's job runs on its GPUs only.
            let mine = held.into_iter().flatten().filter(|x| x.2 == m).fold(0, |a, x| a | x.0);
            nf.gpus &= mine;
            nf.shares.retain(|s| mine & (1u64 << (s.slot % 64)) != 0);
        }
        for &(mask, start, i) in held.into_iter().flatten() {
            if self.member != Some(i) && ends > start {
                nf.gpus &= !mask;
                nf.shares.retain(|s| mask & (1u64 << (s.slot % 64)) == 0);
            }
        }
        nf
    }

    /// [`Self::usable`] as if no advance reservation held anything.
    fn usable_ignoring_advance(&self, n: u32, ends: Time) -> NodeFree {
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
}

/// Quota units (thousandths of a GPU) a placement holds.
pub(crate) fn placement_units(snap: &Snapshot, placement: &Placement) -> GpuMilli {
    placement.iter().map(|r| r.gpu_units() + snap.nodes[r.node.index()].mig_units(r.mig)).sum()
}
