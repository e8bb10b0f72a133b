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

use crate::capacity::{Capacity, fit_on};
use crate::job::{Job, JobId, Placement, ReplicaPlacement};
use crate::node::NodeId;
use crate::plan::PreemptWhy;
use crate::policy::{Ordering, Policy, PreemptKey};
use crate::quota::QuotaState;
use crate::resources::GpuMilli;
use crate::snapshot::{NodeFree, Snapshot};
use crate::time::Time;

/// A running job that could be preempted by someone.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub(crate) id: JobId,
    pub(crate) class: i32,
    pub(crate) key: PreemptKey,
    pub(crate) queue: Arc<str>,
    /// Its queue's index in [`VictimPool::queues`] (searches compare queues millions of times).
    pub(crate) qix: usize,
    pub(crate) units: GpuMilli,
    pub(crate) preemptible: bool,
    /// Started less than `min_runtime` ago: exempt from within-class preemption.
    pub(crate) young: bool,
}

/// A node a replica could go on: (new victims, their GPU units, node), the victims, and the devices.
type NodeChoice = ((usize, GpuMilli, u32), Vec<(usize, PreemptWhy)>, crate::capacity::Fit);

/// Running jobs ordered from most to least preemptible, and per node.
pub(crate) struct VictimPool {
    pub(crate) list: Vec<Candidate>,
    by_node: BTreeMap<u32, Vec<usize>>,
    /// Per (class, rank) of preemptible candidates: the newest submission,
    /// the easiest victim of that rank under multifactor preemption.
    newest: BTreeMap<(i32, i64), i64>,
    /// The candidates' queues, interned.
    queues: Vec<Arc<str>>,
}

/// Borrowed quota per queue of the pool (by [`Candidate::qix`]), thousandths
/// of a GPU; `NOT_BORROWING` for a queue within its guarantee.
type Borrowed = Vec<i64>;
const NOT_BORROWING: i64 = i64::MIN;

/// The key a policy compares within one priority class (see [`PreemptKey`]).
pub(crate) fn preemption_key(policy: &Policy, job: &Job, now: Time) -> Option<PreemptKey> {
    let level = || i64::from(policy.service_level(job.attained_gpu_milli_secs(now) / 1000));
    match policy.ordering {
        Ordering::AttainedService => Some(PreemptKey { rank: level(), submit_ms: 0 }),
        Ordering::Multifactor => {
            // The run a starvation-guard promotion started keeps level 0 while
            // the job's run time stays below the guard's limit.
            let promoted = job.running().is_some_and(|r| {
                policy.promotion_time(&job.spec, &job.service).is_some_and(|at| at <= r.started)
                    && policy.starvation_guard.as_ref().is_some_and(|g| job.runtime(now) < g.max_runtime)
            });
            let rank = if promoted { 0 } else { level() };
            Some(PreemptKey { rank, submit_ms: job.spec.submit_time.as_millis() })
        }
        Ordering::ShortestRemaining => Some(PreemptKey {
            rank: job.remaining(now).map_or(i64::MAX, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            submit_ms: 0,
        }),
        Ordering::Fifo | Ordering::ShortestFirst | Ordering::MaxMinFair => None,
    }
}

impl VictimPool {
    pub(crate) fn new(snap: &Snapshot, now: Time) -> VictimPool {
        let policy = snap.policy();
        let mut queues: Vec<Arc<str>> = Vec::new();
        let mut list: Vec<(Candidate, std::time::Duration)> = snap
            .running_jobs()
            .filter_map(|j| {
                let r = j.running()?;
                if r.stopping.is_some() {
                    return None;
                }
                // Jobs of one queue usually share one name allocation: compare pointers first.
                let qix = match queues.iter().position(|q| Arc::ptr_eq(q, &j.spec.queue) || *q == j.spec.queue) {
                    Some(i) => i,
                    None => {
                        queues.push(j.spec.queue.clone());
                        queues.len() - 1
                    }
                };
                Some((
                    Candidate {
                        id: j.id,
                        class: j.spec.priority,
                        key: preemption_key(policy, j, now).unwrap_or(PreemptKey { rank: 0, submit_ms: 0 }),
                        queue: j.spec.queue.clone(),
                        qix,
                        units: r.gpu_milli,
                        preemptible: j.spec.preemptible,
                        young: now.since(r.started) < policy.preemption.min_runtime,
                    },
                    now.since(r.started),
                ))
            })
            .collect();
        // Most preemptible first: lowest class, worst key, then the job that would lose the least work.
        list.sort_by(|(a, ra), (b, rb)| {
            (a.class, std::cmp::Reverse(a.key), ra, std::cmp::Reverse(a.id)).cmp(&(
                b.class,
                std::cmp::Reverse(b.key),
                rb,
                std::cmp::Reverse(b.id),
            ))
        });
        let list: Vec<Candidate> = list.into_iter().map(|(c, _)| c).collect();
        let mut by_node: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, c) in list.iter().enumerate() {
            if let Some(r) = snap.job(c.id).and_then(Job::running) {
                let mut nodes: Vec<u32> = r.placement.iter().map(|p| p.node.0).collect();
                nodes.dedup();
                for n in nodes {
                    by_node.entry(n).or_default().push(i);
                }
            }
        }
        let mut newest: BTreeMap<(i32, i64), i64> = BTreeMap::new();
        for c in list.iter().filter(|c| c.preemptible && !c.young) {
            let e = newest.entry((c.class, c.key.rank)).or_insert(i64::MIN);
            *e = (*e).max(c.key.submit_ms);
        }
        VictimPool { list, by_node, newest, queues }
    }

    /// A queue's index among the candidates' queues (`None`: no candidate is in it).
    pub(crate) fn queue_ix(&self, q: &str) -> Option<usize> {
        self.queues.iter().position(|x| **x == *q)
    }
}

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
    /// The preemptor's queue among the pool's ([`VictimPool::queue_ix`]).
    pub(crate) job_q: Option<usize>,
}

/// A working view of free resources with some jobs' resources given back.
struct Trial<'a, 's> {
    cap: &'a Capacity<'s>,
    ends: Time,
    over: BTreeMap<u32, NodeFree>,
}

impl<'a, 's> Trial<'a, 's> {
    fn get(&self, n: u32) -> NodeFree {
        self.over.get(&n).cloned().unwrap_or_else(|| self.cap.usable(n, self.ends))
    }

    fn release(&mut self, snap: &Snapshot, id: JobId) {
        let Some(r) = snap.job(id).and_then(Job::running) else {
            return;
        };
        for p in &r.placement {
            let mut f = self.get(p.node.0);
            give(&mut f, p);
            self.over.insert(p.node.0, f);
        }
    }
}

fn give(f: &mut NodeFree, p: &ReplicaPlacement) {
    f.gpus |= p.gpus;
    f.mig |= p.mig;
    f.cpus += p.cpus_milli;
    f.mem += p.memory_mb;
}

impl Search<'_, '_> {
    fn snap(&self) -> &Snapshot {
        self.cap.snap
    }

    /// Why `v` may be preempted for this job, if it may.
    fn allowed(&self, v: &Candidate, borrowed_left: &[i64]) -> Option<PreemptWhy> {
        let policy = self.snap().policy();
        let j = &self.job.spec;
        if self.taken.contains(&v.id) || v.id == self.job.id {
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
            return Some(PreemptWhy::Reclaim { queue: v.queue.clone() });
        }
        None
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
        let takeable = |c: &&Candidate| {
            c.preemptible
                && !self.taken.contains(&c.id)
                && (Some(c.qix) == self.job_q || borrowed.get(c.qix).is_some_and(|o| *o > 0))
        };
        let by_priority = self.pool.list.iter().find(takeable);
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
                    .newest
                    .range((self.job.spec.priority, i64::MIN)..=(self.job.spec.priority, i64::MAX))
                    .any(|(&(_, rank), &submit_ms)| policy.outranks(k, PreemptKey { rank, submit_ms })),
                _ => {
                    let mut within = self.pool.list.iter().filter(|c| takeable(c) && !c.young);
                    within.next().is_some_and(|c| self.allowed(c, &borrowed).is_some())
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
        let mut over: Borrowed = self
            .pool
            .queues
            .iter()
            .map(|q| {
                let used = snap.queue_usage.get(q).copied().unwrap_or(0) as i64;
                used - snap.queues.get(q).map_or(0, |c| c.guarantee) as i64
            })
            .collect();
        for id in self.taken {
            if let Some(j) = snap.job(*id)
                && let (Some(r), Some(i)) = (j.running(), self.pool.queue_ix(&j.spec.queue))
            {
                over[i] -= r.gpu_milli as i64;
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
        let mut placement = self.place_all(&mut chosen, &mut borrowed, true)?;
        // Minimality: drop every victim the job can do without.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            let mut fixed = without.clone();
            if let Some(p) = self.place_all(&mut fixed, &mut Vec::new(), false) {
                chosen = without;
                placement = p;
            }
        }
        Some((chosen.into_iter().map(|(i, why)| (self.pool.list[i].id, why)).collect(), placement))
    }

    /// Places every replica, adding victims node by node when `grow`.
    fn place_all(
        &self,
        chosen: &mut Vec<(usize, PreemptWhy)>,
        borrowed: &mut Borrowed,
        grow: bool,
    ) -> Option<Placement> {
        let snap = self.snap();
        let mut trial = Trial { cap: self.cap, ends: self.ends, over: BTreeMap::new() };
        for &id in self.prereleased {
            trial.release(snap, id);
        }
        for &(i, _) in chosen.iter() {
            trial.release(snap, self.pool.list[i].id);
        }
        let job = self.job;
        // A single replica did not fit anywhere as things are, so only nodes
        // where something can be given back are worth a look; a gang may put
        // some replicas on free nodes and needs them all.
        let nodes: Vec<u32> = if job.spec.replicas == 1 {
            let mut n: BTreeSet<u32> = self.pool.by_node.keys().copied().collect();
            n.extend(trial.over.keys().copied());
            n.into_iter().collect()
        } else {
            (0..snap.nodes.len() as u32).collect()
        };
        let mut placement = Vec::with_capacity(job.spec.replicas as usize);
        for _ in 0..job.spec.replicas {
            // (new victims, their GPU units, node) → fewest victims, least GPU work lost, lowest node.
            let mut best: Option<NodeChoice> = None;
            for &n in &nodes {
                if !self.cap.eligible(n, job) {
                    continue;
                }
                let e = &snap.nodes[n as usize];
                let mut nf = trial.get(n);
                if let Some(fit) = fit_on(snap, e, &nf, job) {
                    let cost = (0, 0, n);
                    if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                        best = Some((cost, Vec::new(), fit));
                    }
                    continue;
                }
                if !grow {
                    continue;
                }
                let Some(hosted) = self.pool.by_node.get(&n) else {
                    continue;
                };
                let mut added: Vec<(usize, PreemptWhy)> = Vec::new();
                // Copied only if a victim from another queue uses up some of its borrowed quota.
                let mut left: Option<Borrowed> = None;
                for &vi in hosted {
                    if chosen.iter().any(|(c, _)| *c == vi) {
                        continue;
                    }
                    let v = &self.pool.list[vi];
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
                            give(&mut nf, p);
                        }
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
            let r = ReplicaPlacement {
                node: NodeId(n),
                gpus: fit.gpus,
                mig: fit.mig,
                cpus_milli: job.spec.replica.cpus_milli,
                memory_mb: job.spec.replica.memory_mb,
            };
            let mut f = trial.get(n);
            f.gpus &= !r.gpus;
            f.mig &= !r.mig;
            f.cpus = f.cpus.saturating_sub(r.cpus_milli);
            f.mem = f.mem.saturating_sub(r.memory_mb);
            trial.over.insert(n, f);
            placement.push(r);
        }
        Some(placement)
    }

    /// CPU and memory the victims (and pre-released jobs) give back on a node,
    /// so that the nominated job's claim only takes what is free now.
    pub(crate) fn released_on(&self, victims: &[JobId], node: NodeId) -> (u64, u64) {
        let snap = self.snap();
        victims
            .iter()
            .chain(self.prereleased)
            .filter_map(|id| snap.job(*id).and_then(Job::running))
            .flat_map(|r| r.placement.iter())
            .filter(|p| p.node == node)
            .fold((0, 0), |(c, m), p| (c + p.cpus_milli, m + p.memory_mb))
    }
}
