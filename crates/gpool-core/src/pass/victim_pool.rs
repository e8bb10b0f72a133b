//! The running jobs that could be preempted, as a victim search reads them
//! (`preempt.rs`): one candidate per job with its rank, the per-queue and
//! per-rank answers most passes need, the per-node lists a search walks, and
//! the upkeep that carries a pool from one pass to the next.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::job::JobId;
use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::pass::running::RunEntry;
use crate::pass::snapshot::Snapshot;
use crate::policies::policy::{Policy, PreemptKey};

/// A running job that could be preempted by someone.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub(crate) id: JobId,
    pub(crate) class: i32,
    pub(crate) key: PreemptKey,
    /// Its queue: an id among [`Snapshot::running_queues`] (searches compare
    /// queues millions of times).
    pub(crate) qix: usize,
    pub(crate) units: GpuMilli,
    pub(crate) preemptible: bool,
    /// Started less than `min_runtime` ago: exempt from within-class preemption.
    pub(crate) young: bool,
    /// Protected from any preemption until then (its queue's or its own `minRuntime`).
    pub(crate) protected_until: Option<Time>,
    /// When its current run started.
    started: Time,
}

/// Candidates' order, most preemptible first: lowest class, worst key
/// (highest rank, newest submission), then the job that would lose the least
/// work (the latest started), then the newest id. Ids are unique, so it is
/// total. Packed into words compared in order, since a pass sorts every
/// running job. It does not depend on the time but through the key.
type Rank = [u64; 5];

impl Candidate {
    fn rank(&self) -> Rank {
        // Flipping the sign bit orders signed values as unsigned; `!` reverses.
        let flip = |x: i64| (x as u64) ^ (1 << 63);
        let started = flip(self.started.as_millis());
        [flip(i64::from(self.class)), !flip(self.key.rank), !flip(self.key.submit_ms), !started, !self.id.0]
    }
}

impl Candidate {
    /// A running entry as a candidate at `now`, its rank, and until when
    /// both stay as they are (see [`VictimPool::same_until`]).
    fn of(e: &RunEntry, policy: &Policy, now: Time) -> (Candidate, Rank, Time) {
        let c = Candidate {
            id: e.id,
            class: e.class,
            key: e.preemption_key(policy, now).unwrap_or(PreemptKey { rank: 0, submit_ms: 0 }),
            qix: e.queue as usize,
            units: e.units,
            preemptible: e.preemptible,
            young: now.since(e.started) < policy.preemption.min_runtime,
            protected_until: (e.protected_until > now).then_some(e.protected_until),
            started: e.started,
        };
        let mut until = e.preemption_key_same_until(policy, now);
        if c.young {
            // Not later than its youth ends (`plus` counts whole milliseconds).
            until = until.min(e.started.plus(policy.preemption.min_runtime));
        }
        if let Some(protected) = c.protected_until {
            until = until.min(protected);
        }
        let rank = c.rank();
        (c, rank, until)
    }
}

/// The running jobs that could be preempted.
///
/// A pool is needed almost every pass of a busy cluster, and most passes
/// only ask [`Search::possible`], which needs the most preemptible candidate
/// per queue and the newest per rank. A search walks each node's candidates
/// in order: per-node lists kept sorted as candidates come and go (a few jobs
/// per node), not sorted again whenever one changed.
///
/// A pass keeps its pool for the next ([`VictimPool::for_pass`]), which
/// makes anew only the candidates of jobs that started, stopped or were
/// asked to stop since (the running jobs' change log), and those whose
/// key, youth or protection may have changed with time (`same_until`).
/// The candidates are in no particular order: every answer is a minimum
/// or maximum over them, and ranks are unique.
pub(crate) struct VictimPool {
    pub(crate) list: Vec<Candidate>,
    pub(crate) ranks: Vec<Rank>,
    /// Per candidate: until when its key, youth and protection stay as they are.
    same_until: Vec<Time>,
    /// Each candidate's first node (`u32::MAX`: none), and its other nodes.
    homes: Vec<u32>,
    more: Vec<Box<[u32]>>,
    /// Where each job's candidate is in the lists.
    at: BTreeMap<JobId, u32>,
    node_count: usize,
    /// Per node: its candidates, each once, most preemptible first (indexes
    /// into `list`); kept up to date with each candidate made anew.
    per_node: Vec<Vec<u32>>,
    /// The nodes hosting a candidate, ascending; worked out again on the
    /// first search after a change.
    nodes: std::cell::OnceCell<Vec<u32>>,
    /// The last answer of [`VictimPool::most_preemptible`] once some are
    /// taken, without and with `old`: (the asking queue, how many were
    /// taken, the answer).
    memo: [std::cell::Cell<Option<(Option<usize>, usize, Option<u32>)>>; 2],
    /// Per queue id: its preemptible candidates, most preemptible first,
    /// and the same among those not young.
    by_queue: Vec<BTreeSet<(Rank, JobId)>>,
    by_queue_old: Vec<BTreeSet<(Rank, JobId)>>,
    /// Per (class, rank): the submissions of preemptible candidates not
    /// young, with how many have each; the newest is the easiest victim of
    /// that rank under multifactor preemption.
    by_rank: BTreeMap<(i32, i64), BTreeMap<i64, u32>>,
    /// Per queue id: how many candidates are in it.
    in_queue: Vec<u32>,
    /// How many candidates are protected by a minimum run time (the indexes above leave them out).
    protected: usize,
    /// When it was last brought up to date, the running jobs' change log
    /// it has followed to (see [`crate::pass::running::RunningJobs::changed_since`]),
    /// and the policy's epoch it was made under.
    built: Time,
    synced: u64,
    policy_epoch: u64,
}

impl VictimPool {
    /// The pool of `snap` at `now`: the one the last pass kept, brought up
    /// to date, or a new one.
    pub(crate) fn for_pass(snap: &Snapshot, now: Time) -> VictimPool {
        // A pass without caches leaves the kept pool to the passes with
        // them, so that the property test follows one pool over many passes.
        #[cfg(test)]
        if crate::pass::UNCACHED.with(std::cell::Cell::get) {
            return VictimPool::new(snap, now);
        }
        let kept = snap.running.take_kept::<VictimPool>().filter(|p| {
            p.built <= now && p.node_count == snap.nodes.len() && p.policy_epoch == snap.running.policy_epoch()
        });
        let Some((mut pool, changed)) = kept.and_then(|p| {
            let changed = snap.running.changed_since(p.synced)?;
            Some((p, changed))
        }) else {
            return VictimPool::new(snap, now);
        };
        // Jobs that started, stopped or were asked to stop, and candidates
        // that time changed, each once.
        let mut redo: Vec<JobId> = changed.to_vec();
        redo.extend(pool.same_until.iter().zip(&pool.list).filter(|(until, _)| **until <= now).map(|(_, c)| c.id));
        redo.sort_unstable();
        redo.dedup();
        let policy = snap.policy();
        for id in &redo {
            pool.remove(*id);
            if let Some(e) = snap.running.get(id).filter(|e| !e.stopping) {
                pool.add(e, policy, now);
            }
        }
        pool.built = now;
        pool.synced = snap.running.log_end();
        pool.memo.iter().for_each(|m| m.set(None));
        if !redo.is_empty() {
            pool.nodes = std::cell::OnceCell::new();
        }
        // The post-condition, in every test that runs a pass: the pool
        // brought up to date is the pool a new one would be.
        #[cfg(test)]
        assert_eq!(pool.digest(), VictimPool::new(snap, now).digest(), "a kept pool went stale");
        pool
    }

    /// What the pool holds, in an order that does not depend on how it was made.
    #[cfg(test)]
    fn digest(&self) -> String {
        let mut candidates: Vec<String> = (0..self.list.len())
            .map(|i| {
                let c = &self.list[i];
                format!("{c:?} {:?} {:?} {} {:?}", self.ranks[i], self.same_until[i], self.homes[i], self.more[i])
            })
            .collect();
        candidates.sort();
        let sets = |v: &[BTreeSet<(Rank, JobId)>]| {
            v.iter().enumerate().filter(|(_, s)| !s.is_empty()).map(|(q, s)| format!("{q}:{s:?}")).collect::<Vec<_>>()
        };
        let counts: Vec<_> = self.in_queue.iter().enumerate().filter(|(_, n)| **n > 0).collect();
        let at: BTreeMap<_, _> = self.at.iter().map(|(id, i)| (*id, self.list[*i as usize].id)).collect();
        let per_node: Vec<Vec<JobId>> =
            self.per_node.iter().map(|v| v.iter().map(|i| self.list[*i as usize].id).collect()).collect();
        format!(
            "{candidates:?} {per_node:?} {:?} {:?} {:?} {counts:?} {} {}",
            sets(&self.by_queue),
            sets(&self.by_queue_old),
            self.by_rank,
            self.protected,
            at.iter().all(|(id, found)| id == found) && at.len() == self.list.len()
        )
    }

    /// Leaves the pool for the next pass of `snap` ([`VictimPool::for_pass`]).
    pub(crate) fn keep(self, snap: &Snapshot) {
        #[cfg(test)]
        if crate::pass::UNCACHED.with(std::cell::Cell::get) {
            return;
        }
        snap.running.keep(self);
    }

    fn new(snap: &Snapshot, now: Time) -> VictimPool {
        let n = snap.running.len();
        let mut pool = VictimPool {
            list: Vec::with_capacity(n),
            ranks: Vec::with_capacity(n),
            same_until: Vec::with_capacity(n),
            homes: Vec::with_capacity(n),
            more: Vec::with_capacity(n),
            at: BTreeMap::new(),
            node_count: snap.nodes.len(),
            per_node: vec![Vec::new(); snap.nodes.len()],
            nodes: std::cell::OnceCell::new(),
            memo: Default::default(),
            by_queue: Vec::new(),
            by_queue_old: Vec::new(),
            by_rank: BTreeMap::new(),
            in_queue: Vec::new(),
            protected: 0,
            built: now,
            synced: snap.running.log_end(),
            policy_epoch: snap.running.policy_epoch(),
        };
        let policy = snap.policy();
        for e in snap.running.values().filter(|e| !e.stopping) {
            pool.add(e, policy, now);
        }
        pool
    }

    /// Adds the candidate of a running job, as it is at `now`.
    fn add(&mut self, e: &RunEntry, policy: &Policy, now: Time) {
        let (c, rank, until) = Candidate::of(e, policy, now);
        self.index(&c, rank, true);
        self.at.insert(e.id, self.list.len() as u32);
        self.list.push(c);
        self.ranks.push(rank);
        self.same_until.push(until);
        self.homes.push(e.first_node.filter(|n| (*n as usize) < self.node_count).unwrap_or(u32::MAX));
        self.more.push(e.more_nodes.clone());
        let i = self.list.len() - 1;
        let (ranks, per_node) = (&self.ranks, &mut self.per_node);
        for &n in Self::nodes_of(&self.homes, &self.more, i) {
            let Some(on) = per_node.get_mut(n as usize) else { continue };
            // A job whose replicas come back to a node is listed there once.
            if !on.contains(&(i as u32)) {
                on.insert(on.partition_point(|x| ranks[*x as usize] < ranks[i]), i as u32);
            }
        }
    }

    /// The nodes of candidate `i` (a node may come twice).
    fn nodes_of<'a>(homes: &'a [u32], more: &'a [Box<[u32]>], i: usize) -> impl Iterator<Item = &'a u32> {
        homes[i..=i].iter().filter(|n| **n != u32::MAX).chain(more[i].iter())
    }

    /// Removes a job's candidate, if it has one; the last takes its place.
    fn remove(&mut self, id: JobId) {
        let Some(i) = self.at.remove(&id) else { return };
        let i = i as usize;
        let (c, rank) = (self.list[i].clone(), self.ranks[i]);
        self.index(&c, rank, false);
        for &n in Self::nodes_of(&self.homes, &self.more, i) {
            if let Some(on) = self.per_node.get_mut(n as usize) {
                on.retain(|x| *x as usize != i);
            }
        }
        let last = self.list.len() - 1;
        self.list.swap_remove(i);
        self.ranks.swap_remove(i);
        self.same_until.swap_remove(i);
        self.homes.swap_remove(i);
        self.more.swap_remove(i);
        if let Some(moved) = self.list.get(i) {
            self.at.insert(moved.id, i as u32);
            // The last candidate moved to `i`: its place in each node's list stays.
            for &n in Self::nodes_of(&self.homes, &self.more, i) {
                for x in self.per_node.get_mut(n as usize).into_iter().flatten() {
                    if *x as usize == last {
                        *x = i as u32;
                    }
                }
            }
        }
    }

    /// Enters a candidate in the per-queue and per-rank indexes, or takes it out.
    fn index(&mut self, c: &Candidate, rank: Rank, enter: bool) {
        let q = c.qix;
        if self.in_queue.len() <= q {
            self.in_queue.resize(q + 1, 0);
            self.by_queue.resize_with(q + 1, BTreeSet::new);
            self.by_queue_old.resize_with(q + 1, BTreeSet::new);
        }
        let count = |n: &mut u32| *n = if enter { *n + 1 } else { n.saturating_sub(1) };
        count(&mut self.in_queue[q]);
        if c.protected_until.is_some() {
            self.protected = if enter { self.protected + 1 } else { self.protected.saturating_sub(1) };
            return;
        }
        if !c.preemptible {
            return;
        }
        if enter {
            self.by_queue[q].insert((rank, c.id));
        } else {
            self.by_queue[q].remove(&(rank, c.id));
        }
        if c.young {
            return;
        }
        if enter {
            self.by_queue_old[q].insert((rank, c.id));
        } else {
            self.by_queue_old[q].remove(&(rank, c.id));
        }
        let submits = self.by_rank.entry((c.class, c.key.rank)).or_default();
        let n = submits.entry(c.key.submit_ms).or_default();
        count(n);
        if *n == 0 {
            submits.remove(&c.key.submit_ms);
            if submits.is_empty() {
                self.by_rank.remove(&(c.class, c.key.rank));
            }
        }
    }

    /// Whether any candidate is protected by a minimum run time.
    pub(crate) fn any_protected(&self) -> bool {
        self.protected > 0
    }

    /// Whether a candidate is in queue `q` (an id among [`Snapshot::running_queues`]).
    pub(crate) fn has_queue(&self, q: usize) -> bool {
        self.in_queue.get(q).is_some_and(|n| *n > 0)
    }

    /// Per rank in `class`, the newest submission among preemptible
    /// candidates not young: (rank, submission).
    pub(crate) fn newest_in(&self, class: i32) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.by_rank
            .range((class, i64::MIN)..=(class, i64::MAX))
            .filter_map(|(&(_, rank), submits)| Some((rank, *submits.last_key_value()?.0)))
    }

    /// The most preemptible candidate that is preemptible, not taken, not
    /// young if `old`, and in a queue `in_queue` accepts. `job_q` is the
    /// asking job's queue: with `taken`, all `in_queue` depends on (see
    /// [`Search::possible`]).
    pub(crate) fn most_preemptible(
        &self,
        taken: &BTreeSet<JobId>,
        old: bool,
        job_q: Option<usize>,
        in_queue: impl Fn(usize) -> bool,
    ) -> Option<&Candidate> {
        let best = if taken.is_empty() {
            // The per-queue minima answer directly.
            let sets = if old { &self.by_queue_old } else { &self.by_queue };
            sets.iter()
                .enumerate()
                .filter(|(q, _)| in_queue(*q))
                .filter_map(|(_, set)| set.first())
                .min()
                .and_then(|(_, id)| self.at.get(id).copied())
        } else {
            // Asked again by each blocked job after a preemption in the
            // pass: the answer is kept for the next job of the same queue.
            // `taken` only grows during a pass, so its size tells its
            // versions apart. Protected candidates are in no index: with
            // any, a walk over every candidate answers.
            let memo = &self.memo[usize::from(old)];
            #[cfg(test)]
            if crate::pass::UNCACHED.with(std::cell::Cell::get) {
                memo.set(None);
            }
            match memo.get() {
                Some((q, n, best)) if q == job_q && n == taken.len() => best,
                _ => {
                    let walk = || {
                        (0..self.list.len() as u32)
                            .filter(|i| {
                                let c = &self.list[*i as usize];
                                c.preemptible && !(old && c.young) && in_queue(c.qix) && !taken.contains(&c.id)
                            })
                            .min_by_key(|i| &self.ranks[*i as usize])
                    };
                    let best = if self.protected == 0 {
                        // The per-queue indexes hold every preemptible candidate
                        // (none is protected), in order: each queue's first not taken.
                        let sets = if old { &self.by_queue_old } else { &self.by_queue };
                        let best = sets
                            .iter()
                            .enumerate()
                            .filter(|(q, _)| in_queue(*q))
                            .filter_map(|(_, set)| set.iter().find(|(_, id)| !taken.contains(id)))
                            .min()
                            .and_then(|(_, id)| self.at.get(id).copied());
                        #[cfg(test)]
                        assert_eq!(best, walk(), "the indexes and the walk disagree");
                        best
                    } else {
                        walk()
                    };
                    memo.set(Some((job_q, taken.len(), best)));
                    best
                }
            }
        };
        best.map(|i| &self.list[i as usize])
    }

    /// A queue's id (`None`: no candidate is in it).
    pub(crate) fn queue_ix(&self, snap: &Snapshot, q: &str) -> Option<usize> {
        let i = snap.running.queues.id_of(q)? as usize;
        self.has_queue(i).then_some(i)
    }

    /// The nodes hosting a candidate, ascending.
    pub(crate) fn nodes(&self) -> &[u32] {
        self.nodes.get_or_init(|| {
            (0..self.per_node.len() as u32).filter(|n| !self.per_node[*n as usize].is_empty()).collect()
        })
    }

    /// The candidates on node `n`, as indexes into `list`.
    pub(crate) fn hosted(&self, n: u32) -> &[u32] {
        self.per_node.get(n as usize).map_or(&[], Vec::as_slice)
    }
}
