//! The order a pass looks at pending jobs in.
//!
//! The snapshot keeps pending jobs in per-user sorted sets whose keys do not
//! change while a job waits. A pass merges the users' heads through a heap
//! keyed by the part of the order that does change (a user's fair-share
//! factor, or for max-min fairness the GPUs the user holds right now), so it
//! costs O(users + examined · log users), not a sort of every pending job.
//!
//! Jobs the starvation guard has promoted by `now` (see
//! [`crate::policies::policy::StarvationGuard`]) enter the heap once more under
//! their promoted points and are skipped when their group reaches them; so do
//! jobs whose deadlines made them urgent (`deadline.rs`), first in their class.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::model::job::JobId;
use crate::model::resources::{GpuMilli, KindUnits};
use crate::model::time::Time;
use crate::pass::snapshot::{GroupKey, PendingKey, Snapshot};
use crate::policies::policy::Ordering;

/// A heap entry: the order's fields and where its job's key is. Kept small
/// (the key itself is not in it): a pass moves heads once per job it walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Head {
    class: i32,
    /// Orders groups before points (max-min fairness); 0 otherwise.
    primary: i64,
    points: i64,
    submit_ms: Reverse<i64>,
    id: Reverse<JobId>,
    /// A group's index (its job's key in `current`), or [`PROMOTED`] plus
    /// the index of a promoted job's key in `promoted_keys`. A promoted
    /// job's own entry sorts before its group's entry for the same job.
    entry: u32,
}

/// Pending jobs, best first, with feedback when one starts.
pub(crate) struct Candidates<'s> {
    snap: &'s Snapshot,
    groups: Vec<&'s GroupKey>,
    /// Each group's pending jobs not yet pushed, in order (looked up once:
    /// group keys compare as strings).
    sets: Vec<std::collections::btree_set::Iter<'s, PendingKey>>,
    /// Dynamic points per group (fair share), milli-points.
    group_points: Vec<i64>,
    /// GPUs (thousandths) each group holds, for max-min fairness.
    rates: Vec<GpuMilli>,
    shares: Vec<f64>,
    /// Each group's best job not yet returned, and promoted jobs. After a
    /// call, its top is the job just returned: the next call replaces it by
    /// its group's successor (after feedback), one sift instead of two.
    heap: BinaryHeap<Head>,
    /// Each group's job in the heap (`None` once the group is done).
    current: Vec<Option<PendingKey>>,
    /// The keys of promoted jobs' own entries, under their promoted points.
    promoted_keys: Vec<PendingKey>,
    /// The entry of the job just returned, at the top of the heap.
    deferred: Option<u32>,
    max_min: bool,
    /// Jobs promoted by the starvation guard, sorted.
    promoted: Vec<JobId>,
}

/// Entries from here on are promoted jobs' own: they have no successor.
const PROMOTED: u32 = 1 << 31;

impl<'s> Candidates<'s> {
    pub(crate) fn new(snap: &'s Snapshot, now: Time) -> Candidates<'s> {
        let policy = snap.policy();
        let (groups, sets): (Vec<&GroupKey>, Vec<_>) = snap.pending.iter().map(|(g, s)| (g, s.iter())).unzip();
        let max_min = policy.ordering == Ordering::MaxMinFair;
        let mut group_points = vec![0; groups.len()];
        if policy.ordering == Ordering::Multifactor && policy.weights.fair_share != 0.0 {
            let factors = snap.ledger.factor_table(now, &policy.fair_share);
            for (i, g) in groups.iter().enumerate() {
                let f = factors.get(&g.user, g.kinds).unwrap_or(1.0);
                group_points[i] = (f * policy.weights.fair_share * 1000.0) as i64;
            }
        }
        let (mut rates, mut shares) = (vec![0; groups.len()], vec![1.0; groups.len()]);
        if max_min {
            let held: BTreeMap<_, KindUnits> = snap.ledger.rates().collect();
            for (i, g) in groups.iter().enumerate() {
                rates[i] = held.get(&g.user).map_or(0, |u| g.kinds.sum(u));
                shares[i] = policy.fair_share.team_share(&g.user.0) * policy.fair_share.user_share(&g.user.1);
            }
        }
        let mut c = Candidates {
            snap,
            groups,
            sets,
            group_points,
            rates,
            shares,
            heap: BinaryHeap::new(),
            current: Vec::new(),
            promoted_keys: Vec::new(),
            deferred: None,
            max_min,
            promoted: Vec::new(),
        };
        c.promote(now);
        let mut current = Vec::with_capacity(c.groups.len());
        for g in 0..c.groups.len() {
            let first = c.sets[g].next().copied();
            if let Some(first) = &first {
                let head = c.head(g, first);
                c.heap.push(head);
            }
            current.push(first);
        }
        c.current = current;
        c
    }

    /// Pushes every job promoted by `now` under its promoted points: its
    /// age and fair share, no attained-service level.
    fn promote(&mut self, now: Time) {
        let snap = self.snap;
        let policy = snap.policy();
        // Jobs with deadlines that became urgent: first in their class, earliest deadline first.
        for &(_, id) in snap.urgent.range(..=(now, JobId(u64::MAX))) {
            let (Some((group, key)), Some(job)) = (snap.pending_entry(id), snap.job(id)) else { continue };
            let (Ok(g), Some(deadline)) = (self.groups.binary_search(&group), job.spec.deadline) else { continue };
            self.heap.push(Head {
                class: key.class.0,
                primary: crate::calendar::deadline::urgent_rank(deadline),
                points: key.points.0.saturating_add(self.group_points[g]),
                submit_ms: Reverse(key.submit_ms),
                id: Reverse(id),
                entry: PROMOTED + self.promoted_keys.len() as u32,
            });
            self.promoted_keys.push(*key);
            self.promoted.push(id);
        }
        self.promoted.sort_unstable();
        let urgent = self.promoted.len();
        for &(_, id) in snap.promotions.range(..=(now, JobId(u64::MAX))) {
            if self.promoted[..urgent].binary_search(&id).is_ok() {
                continue;
            }
            let (Some((group, key)), Some(job)) = (snap.pending_entry(id), snap.job(id)) else { continue };
            let Ok(g) = self.groups.binary_search(&group) else { continue };
            let points = policy.multifactor_points(job.spec.submit_time.as_millis(), 0);
            if points <= key.points.0 {
                continue;
            }
            let key = PendingKey { points: Reverse(points), ..*key };
            self.heap.push(Head {
                class: key.class.0,
                primary: 0,
                points: points.saturating_add(self.group_points[g]),
                submit_ms: Reverse(key.submit_ms),
                id: Reverse(id),
                entry: PROMOTED + self.promoted_keys.len() as u32,
            });
            self.promoted_keys.push(key);
            self.promoted.push(id);
        }
        self.promoted.sort_unstable();
    }

    fn head(&self, group: usize, key: &PendingKey) -> Head {
        let primary = if self.max_min { -((self.rates[group] as f64 / self.shares[group]) as i64) } else { 0 };
        Head {
            class: key.class.0,
            primary,
            points: key.points.0.saturating_add(self.group_points[group]),
            submit_ms: Reverse(key.submit_ms),
            id: Reverse(key.id),
            entry: group as u32,
        }
    }

    /// Tells the order that a job of the last returned group started holding `units`.
    pub(crate) fn started(&mut self, units: GpuMilli) {
        if let Some(g) = self.deferred
            && g < PROMOTED
        {
            self.rates[g as usize] += units;
        }
    }

    /// The next job to look at.
    pub(crate) fn next_job(&mut self) -> Option<PendingKey> {
        loop {
            if let Some(g) = self.deferred.take() {
                let g = g as usize;
                match self.sets.get_mut(g).and_then(|s| s.next().copied()) {
                    Some(next) => {
                        let head = self.head(g, &next);
                        self.current[g] = Some(next);
                        if let Some(mut top) = self.heap.peek_mut() {
                            *top = head;
                        }
                    }
                    None => {
                        self.heap.pop();
                    }
                }
            }
            let head = *self.heap.peek()?;
            self.deferred = Some(head.entry);
            if head.entry >= PROMOTED {
                return self.promoted_keys.get((head.entry - PROMOTED) as usize).copied();
            }
            // A promoted job comes once, under its promoted points.
            if self.promoted.binary_search(&head.id.0).is_err() {
                return self.current.get(head.entry as usize).copied().flatten();
            }
        }
    }
}
