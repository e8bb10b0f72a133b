//! Choosing a minimal set of victims so that a blocked job fits.
//!
//! Invariants (checked by property tests):
//! - a victim is preemptible and of a lower priority class, or of the same
//!   class and worse on the policy's preemption key by the policy's margin, or (reclaim)
//!   held by a queue above its guarantee while the preemptor's queue stays
//!   within its own;
//! - victims are chosen only if the job then fits: nothing is preempted in vain;
//! - no victim can be dropped from the set and still let the job fit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::job::{Job, JobId, Placement};
use crate::model::node::NodeId;
use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::pass::capacity::{Capacity, fit_on};
use crate::pass::plan::PreemptWhy;
use crate::pass::snapshot::{NodeFree, Snapshot};
use crate::pass::victim_pool::{Candidate, VictimPool};
use crate::policies::policy::{Ordering, PreemptKey};
use crate::policies::quota::QuotaState;

/// An elastic job that gives up some replicas (indexes into its placement) for a job, and why it may be asked to.
#[derive(Clone, Debug)]
pub(crate) struct Shrunk {
    pub(crate) job: JobId,
    pub(crate) given_up: Vec<usize>,
    pub(crate) why: PreemptWhy,
}

/// A node a replica could go on: (new victims, their GPU units, node), the victims, and the devices.
type NodeChoice = ((usize, GpuMilli, u32), Vec<(usize, PreemptWhy)>, crate::pass::capacity::Fit);

/// Borrowed quota per queue id (see [`Candidate::qix`]), thousandths of a
/// GPU; `NOT_BORROWING` for a queue within its guarantee or without candidates.
type Borrowed = Vec<i64>;
const NOT_BORROWING: i64 = i64::MIN;

/// Everything a victim search reads.
pub(crate) struct Search<'a, 's> {
    pub(crate) cap: &'a Capacity<'s>,
    pub(crate) pool: &'a VictimPool,
    pub(crate) quota: &'a QuotaState,
    pub(crate) job: &'a Job,
    /// The preemptor's key and quota units.
    pub(crate) key: Option<PreemptKey>,
    pub(crate) units: GpuMilli,
    pub(crate) ends: Time,
    pub(crate) taken: &'a BTreeSet<JobId>,
    /// Jobs already stopping for this job: counted as gone.
    pub(crate) prereleased: &'a [JobId],
    /// The preemptor's queue id ([`VictimPool::queue_ix`]).
    pub(crate) job_q: Option<usize>,
    /// Search as if no candidate were protected by a minimum run time (to
    /// say until when a job waits on them; nothing found so is preempted).
    pub(crate) ignore_protection: bool,
}

/// A working view of free resources with some jobs' resources given back.
struct Trial<'a, 's> {
    cap: &'a Capacity<'s>,
    ends: Time,
    over: BTreeMap<u32, NodeFree>,
}

impl<'a, 's> Trial<'a, 's> {
    /// What the job may use on node `n`: free, or given back by a victim.
    fn get(&self, n: u32) -> NodeFree {
        self.over.get(&n).cloned().unwrap_or_else(|| {
            let mut f = self.cap.usable(n, self.ends);
            self.cap.releasing.overlay(n, &mut f);
            f.exclude(self.cap.snap.nodes[n as usize].out_of_service());
            f
        })
    }

    fn release(&mut self, snap: &Snapshot, id: JobId) {
        let Some(r) = snap.job(id).and_then(Job::running) else {
            return;
        };
        for p in &r.placement {
            self.release_one(snap, p);
        }
    }

    fn release_one(&mut self, snap: &Snapshot, p: &crate::model::job::ReplicaPlacement) {
        let mut f = self.get(p.node.0);
        f.release(p);
        f.exclude(snap.nodes[p.node.0 as usize].out_of_service());
        self.over.insert(p.node.0, f);
    }
}

impl Search<'_, '_> {
    fn snap(&self) -> &Snapshot {
        self.cap.snap
    }

    /// Why `v` may be preempted for this job, if it may.
    fn allowed(&self, v: &Candidate, borrowed_left: &[i64]) -> Option<PreemptWhy> {
        // The rules first: most candidates fail them, and `taken` is a set lookup.
        self.by_rule(v, borrowed_left).filter(|_| !self.taken.contains(&v.id) && v.id != self.job.id)
    }

    /// [`Search::allowed`] before asking whether `v` is already taken or is this job.
    fn by_rule(&self, v: &Candidate, borrowed_left: &[i64]) -> Option<PreemptWhy> {
        let policy = self.snap().policy();
        let j = &self.job.spec;
        if v.protected_until.is_some() && !self.ignore_protection {
            return None;
        }
        // Another queue's guarantee is not overridden by priority: across
        // queues only borrowed capacity can be taken (Kueue's rule). Without
        // this, priority and reclaim can each undo the other forever.
        let borrowed = || borrowed_left.get(v.qix).is_some_and(|left| *left >= v.units as i64);
        let same_queue = Some(v.qix) == self.job_q;
        let same_queue_or_borrowed = same_queue || borrowed();
        if v.preemptible && policy.preemption.by_priority && v.class < j.priority && same_queue_or_borrowed {
            return Some(PreemptWhy::HigherPriority);
        }
        if v.preemptible
            && same_queue_or_borrowed
            && !v.young
            && policy.preemption.within_class
            && v.class == j.priority
            && let Some(k) = self.key
            && policy.outranks(k, v.key)
        {
            return Some(match policy.ordering {
                Ordering::ShortestRemaining => PreemptWhy::LongerRemaining,
                _ => PreemptWhy::MoreService,
            });
        }
        if !same_queue && borrowed() && self.may_reclaim() {
            let queue = self.snap().running.queues.get(v.qix as u32).cloned().unwrap_or_else(|| Arc::from(""));
            return Some(PreemptWhy::Reclaim { queue });
        }
        None
    }

    /// Whether this job may take replicas above an elastic job's minimum
    /// that a whole preemption could not: its class is no lower, and the
    /// replicas are its queue's or borrowed (see [`PreemptWhy::AboveMinimum`]).
    fn lendable(&self, v: &Candidate, borrowed_left: &[i64]) -> Option<PreemptWhy> {
        if self.taken.contains(&v.id) || v.id == self.job.id {
            return None;
        }
        if v.protected_until.is_some() && !self.ignore_protection {
            return None;
        }
        let queue_ok =
            Some(v.qix) == self.job_q || borrowed_left.get(v.qix).is_some_and(|left| *left >= v.units as i64);
        (queue_ok && v.class <= self.job.spec.priority).then_some(PreemptWhy::AboveMinimum)
    }

    /// Whether this job may reclaim at all: its queue stays within its guarantee.
    fn may_reclaim(&self) -> bool {
        self.snap().policy().preemption.reclaim
            && self.quota.within_guarantee(&self.snap().queues, &self.job.spec.queue, self.units)
    }

    /// Cheap test: could any running job be a victim for this job?
    pub(crate) fn possible(&self) -> bool {
        if !self.prereleased.is_empty() {
            return true;
        }
        // The most preemptible candidate decides for priority and within-class preemption.
        let borrowed = self.borrowed();
        // The priority class is monotone along the list; only candidates the
        // queue rule lets us take count.
        let in_queue = |q: usize| Some(q) == self.job_q || borrowed.get(q).is_some_and(|o| *o > 0);
        let by_priority = self.pool.most_preemptible(self.taken, false, self.job_q, in_queue);
        if by_priority.is_some_and(|c| self.allowed(c, &borrowed).is_some()) {
            return true;
        }
        // Within a class, only a single-part key is monotone along the list.
        let policy = self.snap().policy();
        if policy.preemption.within_class && self.key.is_some() {
            let found = match (policy.ordering, self.key) {
                // A newer victim of a rank is easier to preempt than an older
                // one, so the newest of each rank decides (conservatively: it
                // may already be taken; the search then finds out).
                (Ordering::Multifactor, Some(k)) => self
                    .pool
                    .newest_in(self.job.spec.priority)
                    .any(|(rank, submit_ms)| policy.outranks(k, PreemptKey { rank, submit_ms })),
                _ => {
                    let within = self.pool.most_preemptible(self.taken, true, self.job_q, in_queue);
                    within.is_some_and(|c| self.allowed(c, &borrowed).is_some())
                }
            };
            if found {
                return true;
            }
        }
        self.may_reclaim() && borrowed.iter().enumerate().any(|(i, o)| *o > 0 && Some(i) != self.job_q)
    }

    /// Borrowed quota per queue (usage above guarantee) that preemption from
    /// other queues may take, thousandths of a GPU: judged on usage before
    /// this pass (jobs started in the pass are not taken in the same pass),
    /// less victims already taken.
    fn borrowed(&self) -> Borrowed {
        let snap = self.snap();
        let mut over: Borrowed = (0..snap.running.queues.len())
            .map(|i| match snap.running.queues.get(i as u32) {
                Some(q) if self.pool.has_queue(i) => {
                    let used = snap.queue_usage.get(q).copied().unwrap_or(0) as i64;
                    used - snap.queues.get(q).map_or(0, |c| c.guarantee) as i64
                }
                _ => 0,
            })
            .collect();
        for id in self.taken {
            if let Some(e) = snap.running.get(id)
                && let Some(o) = over.get_mut(e.queue as usize)
                && self.pool.has_queue(e.queue as usize)
            {
                *o -= e.units as i64;
            }
        }
        for o in &mut over {
            if *o <= 0 {
                *o = NOT_BORROWING;
            }
        }
        over
    }

    /// A minimal victim set and the placement it makes possible.
    pub(crate) fn run(&self) -> Option<(Vec<(JobId, PreemptWhy)>, Placement)> {
        let mut borrowed = self.borrowed();
        let mut chosen: Vec<(usize, PreemptWhy)> = Vec::new();
        let mut placement = self.place_all(&mut chosen, &mut borrowed, true, &[])?;
        // Minimality: drop every victim the job can do without.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            let mut fixed = without.clone();
            if let Some(p) = self.place_all(&mut fixed, &mut Vec::new(), false, &[]) {
                chosen = without;
                placement = p;
            }
        }
        Some((chosen.into_iter().map(|(i, why)| (self.pool.list[i].id, why)).collect(), placement))
    }

    /// A placement on free devices and devices that victims give back, with
    /// no new victim: for a job that may not preempt, or finds nobody to.
    pub(crate) fn releasing_only(&self) -> Option<Placement> {
        if self.cap.releasing.is_empty() {
            return None;
        }
        self.place_all(&mut Vec::new(), &mut Vec::new(), false, &[])
    }

    /// Replicas that elastic jobs above their minimum could give up for this
    /// job, found before any whole victim (`pass/elastic.rs`): the fewest,
    /// most preemptible jobs' highest ranks first, each allowed by the same
    /// rules as a whole preemption (priority, within class, reclaim; never a
    /// job protected by its minimum run time), and the placement they make
    /// possible. `None` when shrinking every such job to its minimum is not
    /// enough.
    pub(crate) fn shrink(&self) -> Option<(Vec<Shrunk>, Placement)> {
        let snap = self.snap();
        // (candidate, replica index, its GPU units), in the order they are given up.
        let mut spares: Vec<(usize, usize, GpuMilli)> = Vec::new();
        for (i, c) in self.pool.list.iter().enumerate() {
            let Some(j) = snap.job(c.id).filter(|j| j.spec.is_elastic() && !self.taken.contains(&c.id)) else {
                continue;
            };
            let Some(r) = j.running() else { continue };
            let min = j.spec.replicas as usize;
            spares.extend((min..r.placement.len()).rev().map(|k| (i, k, r.placement[k].gpu_units())));
        }
        if spares.is_empty() {
            return None;
        }
        // Stable: within one job, the highest rank goes first.
        spares.sort_by(|a, b| self.pool.ranks[a.0].cmp(&self.pool.ranks[b.0]));
        let mut borrowed = self.borrowed();
        let mut chosen: Vec<(usize, usize, PreemptWhy)> = Vec::new();
        let mut placement = None;
        for (ci, k, units) in spares {
            let mut c = self.pool.list[ci].clone();
            c.units = units;
            let Some(why) = self.allowed(&c, &borrowed).or_else(|| self.lendable(&c, &borrowed)) else { continue };
            if Some(c.qix) != self.job_q
                && let Some(l) = borrowed.get_mut(c.qix)
            {
                *l = l.saturating_sub(units as i64);
            }
            chosen.push((ci, k, why));
            let given: Vec<(usize, usize)> = chosen.iter().map(|(c, k, _)| (*c, *k)).collect();
            if let Some(p) = self.place_all(&mut Vec::new(), &mut Vec::new(), false, &given) {
                placement = Some(p);
                break;
            }
        }
        let mut placement = placement?;
        // Minimality: keep every replica the job can do without.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            let given: Vec<(usize, usize)> = without.iter().map(|(c, k, _)| (*c, *k)).collect();
            if let Some(p) = self.place_all(&mut Vec::new(), &mut Vec::new(), false, &given) {
                chosen = without;
                placement = p;
            }
        }
        let mut by_job: BTreeMap<JobId, Shrunk> = BTreeMap::new();
        for (ci, k, why) in chosen {
            let id = self.pool.list[ci].id;
            by_job.entry(id).or_insert_with(|| Shrunk { job: id, given_up: Vec::new(), why }).given_up.push(k);
        }
        Some((by_job.into_values().collect(), placement))
    }

    /// Places every replica, adding victims node by node when `grow`.
    /// `given_up`: replicas (candidate, replica index) of elastic jobs counted as gone.
    fn place_all(
        &self,
        chosen: &mut Vec<(usize, PreemptWhy)>,
        borrowed: &mut Borrowed,
        grow: bool,
        given_up: &[(usize, usize)],
    ) -> Option<Placement> {
        let snap = self.snap();
        // The jobs already stopping for this one are in `cap.releasing`.
        let mut trial = Trial { cap: self.cap, ends: self.ends, over: BTreeMap::new() };
        for &(i, _) in chosen.iter() {
            trial.release(snap, self.pool.list[i].id);
        }
        for &(i, k) in given_up {
            if let Some(p) = snap.job(self.pool.list[i].id).and_then(Job::running).and_then(|r| r.placement.get(k)) {
                trial.release_one(snap, p);
            }
        }
        let job = self.job;
        // A single replica did not fit anywhere as things are, so only nodes
        // where something can be given back are worth a look; a gang may put
        // some replicas on free nodes and needs them all.
        let nodes: Vec<u32> = if job.spec.replicas == 1 {
            // Ascending, each once: sorted lists merged (a set's inserts, one
            // per node hosting a candidate, were a tenth of a loaded pass).
            let mut n: Vec<u32> = self.cap.releasing.nodes().chain(trial.over.keys().copied()).collect();
            if grow {
                n.extend_from_slice(self.pool.nodes());
            }
            n.sort_unstable();
            n.dedup();
            n
        } else {
            (0..snap.nodes.len() as u32).collect()
        };
        let reclaims = std::cell::OnceCell::new();
        let mut placement = Vec::with_capacity(job.spec.replicas as usize);
        for _ in 0..job.spec.replicas {
            // (new victims, their GPU units, node) → fewest victims, least GPU work lost, lowest node.
            let mut best: Option<NodeChoice> = None;
            for &n in &nodes {
                // Power budgets are left to the start: the victims give back their watts too.
                if !self.cap.eligible_ignoring_power(n, job) {
                    continue;
                }
                let e = &snap.nodes[n as usize];
                let mut nf = trial.get(n);
                if let Some(fit) = fit_on(snap, e, &nf, job) {
                    // No victim on the lowest such node: the nodes come in
                    // ascending order, so no later node does better.
                    best = Some(((0, 0, n), Vec::new(), fit));
                    break;
                }
                if !grow {
                    continue;
                }
                let hosted = self.pool.hosted(n);
                let mut added: Vec<(usize, PreemptWhy)> = Vec::new();
                // Copied only if a victim from another queue uses up some of its borrowed quota.
                let mut left: Option<Borrowed> = None;
                for &vi in hosted {
                    let vi = vi as usize;
                    let v = &self.pool.list[vi];
                    // A node's candidates come by class, lowest first: past the job's
                    // own class only reclaim could allow one.
                    if v.class > job.spec.priority && !*reclaims.get_or_init(|| self.may_reclaim()) {
                        break;
                    }
                    if chosen.iter().any(|(c, _)| *c == vi) {
                        continue;
                    }
                    let Some(why) = self.allowed(v, left.as_ref().unwrap_or(borrowed)) else {
                        continue;
                    };
                    if Some(v.qix) != self.job_q
                        && let Some(l) = left.get_or_insert_with(|| borrowed.clone()).get_mut(v.qix)
                    {
                        *l = l.saturating_sub(v.units as i64);
                    }
                    if let Some(r) = snap.job(v.id).and_then(Job::running) {
                        for p in r.placement.iter().filter(|p| p.node.0 == n) {
                            nf.release(p);
                        }
                        nf.exclude(e.out_of_service());
                    }
                    added.push((vi, why));
                    if let Some(fit) = fit_on(snap, e, &nf, job) {
                        let units = added.iter().map(|(i, _)| self.pool.list[*i].units).sum();
                        let cost = (added.len(), units, n);
                        if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                            best = Some((cost, added, fit));
                        }
                        break;
                    }
                    // One more victim here would make more than the best node needs.
                    if best.as_ref().is_some_and(|((victims, _, _), _, _)| added.len() >= *victims) {
                        break;
                    }
                }
            }
            let ((_, _, n), added, fit) = best?;
            for (vi, why) in added {
                // Any victim of another queue comes out of that queue's borrowed quota.
                let v = &self.pool.list[vi];
                if Some(v.qix) != self.job_q
                    && let Some(l) = borrowed.get_mut(v.qix)
                {
                    *l = l.saturating_sub(v.units as i64);
                }
                trial.release(snap, self.pool.list[vi].id);
                chosen.push((vi, why));
            }
            let r = fit.replica(NodeId(n), &job.spec.replica);
            let mut f = trial.get(n);
            f.take(&r);
            trial.over.insert(n, f);
            placement.push(r);
        }
        Some(placement)
    }
}
