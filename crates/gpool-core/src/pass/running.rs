//! The running jobs as a pass reads them: one compact entry per job.
//!
//! Every pass that may preempt ranks all running jobs (see
//! `victim_pool.rs`, which follows the change log kept here). Reading them through the job table
//! costs a few cache misses per job, which at a few hundred running jobs and
//! one pass per event was most of a trace replay's time. The entries here hold
//! just what ranking needs, side by side, and the snapshot keeps them current
//! as jobs start, are asked to stop, and stop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::model::job::{Job, JobId, Placement, Service};
use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::pass::intern::Interner;
use crate::pass::kept::{ChangeLog, Kept};
use crate::policies::policy::{Ordering, Policy, PreemptKey};

/// What a job's preemption key depends on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyInputs {
    pub(crate) submit: Time,
    pub(crate) service: Service,
    pub(crate) planned: Option<Duration>,
    /// The current run: when it started and the GPU share it holds.
    pub(crate) run: Option<(Time, GpuMilli)>,
}

impl KeyInputs {
    pub(crate) fn of(job: &Job) -> KeyInputs {
        KeyInputs {
            submit: job.spec.submit_time,
            service: job.service,
            planned: job.spec.planned_runtime(),
            run: job.running().map(|r| (r.started, r.gpu_milli)),
        }
    }

    /// Same as [`Job::runtime`].
    fn runtime(&self, now: Time) -> Duration {
        self.service.prior_runtime + self.run.map_or(Duration::ZERO, |(started, _)| now.since(started))
    }

    /// Same as [`Job::attained_gpu_milli_secs`].
    fn attained_gpu_milli_secs(&self, now: Time) -> u64 {
        let current = self.run.map_or(0, |(started, milli)| milli.saturating_mul(now.since(started).as_secs()));
        self.service.prior_gpu_milli_secs.saturating_add(current)
    }

    /// Until when the run a starvation-guard promotion started keeps level 0
    /// (while the job's run time stays below the guard's limit); `None`: it
    /// is not such a run.
    fn promoted_until(&self, policy: &Policy) -> Option<Time> {
        let (started, _) = self.run?;
        let guard = policy.starvation_guard.as_ref()?;
        let at = policy.promotion_time_at(self.submit, &self.service)?;
        (at <= started).then(|| started.plus(guard.max_runtime.saturating_sub(self.service.prior_runtime)))
    }

    /// The key a policy compares within one priority class (see [`PreemptKey`]).
    pub(crate) fn key(&self, policy: &Policy, now: Time) -> Option<PreemptKey> {
        self.key_with(policy, now, || self.promoted_until(policy))
    }

    /// [`KeyInputs::key`], with the promotion's end given (`promoted_until`
    /// is asked only by the orderings that promote).
    fn key_with(
        &self,
        policy: &Policy,
        now: Time,
        promoted_until: impl FnOnce() -> Option<Time>,
    ) -> Option<PreemptKey> {
        let level = || i64::from(policy.service_level(self.attained_gpu_milli_secs(now) / 1000));
        match policy.ordering {
            Ordering::AttainedService => Some(PreemptKey { rank: level(), submit_ms: 0 }),
            Ordering::Multifactor => {
                let promoted = promoted_until().is_some_and(|until| now < until);
                let rank = if promoted { 0 } else { level() };
                Some(PreemptKey { rank, submit_ms: self.submit.as_millis() })
            }
            Ordering::ShortestRemaining => Some(PreemptKey {
                rank: self
                    .planned
                    .map(|p| p.saturating_sub(self.runtime(now)))
                    .map_or(i64::MAX, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                submit_ms: 0,
            }),
            Ordering::Fifo | Ordering::ShortestFirst | Ordering::MaxMinFair => None,
        }
    }

    /// A time after which [`KeyInputs::key_with`] may give another key than
    /// at `now`; before it, it gives the same ([`Time::NEVER`]: the same for
    /// as long as the run lasts). Never later than the key's next change,
    /// possibly earlier. `promoted_until` as `key_with` is given it.
    fn same_until(&self, policy: &Policy, now: Time, promoted_until: Option<Time>) -> Time {
        // The attained service only grows, and the level with it: it changes
        // when the service reaches the boundary above the current level.
        let level_until = || {
            let Some((started, milli)) = self.run.filter(|(_, milli)| *milli > 0) else { return Time::NEVER };
            let level = policy.service_level(self.attained_gpu_milli_secs(now) / 1000) as usize;
            let Some(boundary) = policy.service_levels.get(level) else { return Time::NEVER };
            let needed = boundary.saturating_mul(1000).saturating_sub(self.service.prior_gpu_milli_secs);
            // `attained_gpu_milli_secs` counts whole seconds of the run.
            started.plus(Duration::from_secs(needed.div_ceil(milli))).max(now)
        };
        match policy.ordering {
            Ordering::AttainedService => level_until(),
            Ordering::Multifactor => match promoted_until.filter(|until| now < *until) {
                Some(until) => until,
                None => level_until(),
            },
            // The time left shrinks every millisecond.
            Ordering::ShortestRemaining if self.planned.is_some() => now.plus(Duration::from_millis(1)),
            Ordering::ShortestRemaining | Ordering::Fifo | Ordering::ShortestFirst | Ordering::MaxMinFair => {
                Time::NEVER
            }
        }
    }
}

/// A running job, as ranking victims reads it.
#[derive(Clone, Debug)]
pub(crate) struct RunEntry {
    pub(crate) id: JobId,
    pub(crate) class: i32,
    /// Its queue, interned among the running jobs' queues.
    pub(crate) queue: u32,
    pub(crate) preemptible: bool,
    /// A stop was requested: it is no longer anyone's victim.
    pub(crate) stopping: bool,
    pub(crate) started: Time,
    /// Preempted by no one before this (`minRuntime`).
    pub(crate) protected_until: Time,
    pub(crate) units: GpuMilli,
    pub(crate) key: KeyInputs,
    /// The nodes of its replicas in placement order, a node repeated by the
    /// next replica listed once: the first here, the others in `more_nodes`.
    pub(crate) first_node: Option<u32>,
    pub(crate) more_nodes: Box<[u32]>,
    /// What it holds (read by backfill reservations).
    pub(crate) placement: Placement,
    pub(crate) grace: Duration,
    pub(crate) anti_affinity: bool,
    /// An elastic job (`JobSpec::is_elastic`).
    pub(crate) elastic: bool,
    /// Its planned run time is a learned estimate (not a given one or a limit).
    learned: bool,
    /// When its time limit stops it, if it has one.
    limit_end: Option<Time>,
    /// Until when a starvation-guard promotion keeps its run at level 0
    /// ([`KeyInputs::promoted_until`] under the snapshot's policy, kept
    /// because every pass that may preempt asks it of every running job).
    promoted_until: Option<Time>,
    /// It has a deadline (`late_jobs` looks at these only).
    deadline: bool,
    /// The array it is a task of.
    array: Option<JobId>,
}

impl RunEntry {
    /// The entry of a job that has just started (`None` if it is not running).
    pub(crate) fn of(job: &Job, queue: u32, protect: Duration, policy: &Policy) -> Option<RunEntry> {
        let r = job.running()?;
        let mut nodes: Vec<u32> = r.placement.iter().map(|p| p.node.0).collect();
        nodes.dedup();
        let (first_node, more) = match nodes.split_first() {
            Some((first, more)) => (Some(*first), more),
            None => (None, &[][..]),
        };
        let key = KeyInputs::of(job);
        Some(RunEntry {
            promoted_until: key.promoted_until(policy),
            id: job.id,
            class: job.spec.priority,
            queue,
            preemptible: job.spec.preemptible,
            stopping: r.stopping.is_some(),
            started: r.started,
            protected_until: r.started.plus(protect),
            units: r.gpu_milli,
            key,
            first_node,
            more_nodes: more.into(),
            placement: r.placement.clone(),
            grace: job.spec.grace,
            anti_affinity: !job.spec.anti_affinity.is_empty(),
            elastic: job.spec.is_elastic(),
            learned: job.spec.estimate_learned
                && job.spec.estimate.is_some_and(|e| job.spec.time_limit.is_none_or(|l| e < l)),
            limit_end: job.spec.time_limit.map(|l| r.started.plus(l.saturating_sub(job.service.prior_runtime))),
            deadline: job.spec.deadline.is_some(),
            array: job.spec.array.map(|a| a.of),
        })
    }

    /// When it is expected to release its resources, seen at `now`: its
    /// planned end while that is ahead. A given estimate or a limit that ran
    /// out means any moment (`now`). A learned estimate that ran out means
    /// the run goes on as long again as it has lasted (at most to its time
    /// limit): run times are heavy-tailed, so a job that outlived the
    /// median of its kind is likely to run on. Backfilling on "any moment"
    /// would keep a reservation at `now` and let nothing use those devices
    /// until the job ends; Tsafrir, Etsion and Feitelson (2007) extend
    /// predictions that fail the same way.
    pub(crate) fn expected_end(&self, now: Time) -> Time {
        let end = self.planned_end();
        if end > now || !self.learned {
            return end.max(now);
        }
        let again = now.plus(now.since(self.started));
        self.limit_end.map_or(again, |l| again.min(l.max(now)))
    }

    /// Its preemption key at `now` under `policy`, the snapshot's: the same
    /// as [`KeyInputs::key`], with the promotion looked up once at its start.
    pub(crate) fn preemption_key(&self, policy: &Policy, now: Time) -> Option<PreemptKey> {
        self.key.key_with(policy, now, || self.promoted_until)
    }

    /// Until when [`RunEntry::preemption_key`] stays what it is at `now` (see [`KeyInputs::same_until`]).
    pub(crate) fn preemption_key_same_until(&self, policy: &Policy, now: Time) -> Time {
        self.key.same_until(policy, now, self.promoted_until)
    }

    /// When it is planned to end: start + planned run time left; [`Time::NEVER`] without an estimate or limit.
    pub(crate) fn planned_end(&self) -> Time {
        match self.key.planned {
            Some(p) => self.started.plus(p.saturating_sub(self.key.service.prior_runtime)),
            None => Time::NEVER,
        }
    }

    /// Whether it releases its resources at a known time.
    fn known_end(&self) -> bool {
        self.stopping || self.key.planned.is_some()
    }
}

/// The running jobs' entries and the counts a pass checks before walking them.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunningJobs {
    entries: BTreeMap<JobId, RunEntry>,
    /// The running jobs' queues, interned for [`RunEntry::queue`].
    pub(crate) queues: Interner<Arc<str>>,
    /// How many have anti-affinity terms.
    pub(crate) with_anti_affinity: usize,
    /// How many release their resources at a known time: stopping, or with a planned end.
    pub(crate) with_known_end: usize,
    /// Those jobs (an EASY reservation without an open one walks only them).
    known_ends: BTreeSet<JobId>,
    /// How many are elastic (the pass looks for shrinks and growth only when some are).
    pub(crate) elastic: usize,
    /// How many were asked to stop (the pass walks them only when some were).
    pub(crate) stopping: usize,
    /// How many have deadlines.
    with_deadline: usize,
    /// Running tasks per array (by the array's job), for array limits.
    pub(crate) array_tasks: BTreeMap<JobId, u32>,
    /// How many preemptible jobs not stopping each priority class has: a
    /// blocked job builds the victim pool only when one could be a victim.
    preemptible_by_class: BTreeMap<i32, usize>,
    /// The jobs whose entries were added, removed or marked stopping, in
    /// order (the change log).
    /// An entry changes in no other way but to follow a new policy
    /// (`policy_epoch`).
    log: ChangeLog<JobId>,
    /// Moves when the policy changes (see [`RunningJobs::policy_epoch`]).
    policy_epoch: u64,
    /// Where a pass leaves the victim pool (`victim_pool.rs`) for the next.
    kept: Kept,
}

impl RunningJobs {
    /// Records a job that has just started under `policy`; it is protected from preemption for `protect`.
    pub(crate) fn insert(&mut self, job: &Job, protect: Duration, policy: &Policy) {
        let queue = self.queues.acquire(job.spec.queue.clone());
        let Some(e) = RunEntry::of(job, queue, protect, policy) else {
            self.queues.release(queue);
            return;
        };
        self.log(job.id);
        self.with_anti_affinity += usize::from(!job.spec.anti_affinity.is_empty());
        self.elastic += usize::from(e.elastic);
        self.with_known_end += usize::from(e.known_end());
        let known = e.known_end();
        self.stopping += usize::from(e.stopping);
        self.with_deadline += usize::from(e.deadline);
        if let Some(a) = e.array {
            *self.array_tasks.entry(a).or_default() += 1;
        }
        if e.preemptible && !e.stopping {
            *self.preemptible_by_class.entry(e.class).or_default() += 1;
        }
        if let Some(old) = self.entries.insert(job.id, e) {
            self.forget(&old);
        }
        if known {
            self.known_ends.insert(job.id);
        }
    }

    /// The snapshot's policy changed: what entries keep of it follows.
    pub(crate) fn set_policy(&mut self, policy: &Policy) {
        self.policy_epoch += 1;
        for e in self.entries.values_mut() {
            e.promoted_until = e.key.promoted_until(policy);
        }
    }

    /// A stop was requested.
    pub(crate) fn mark_stopping(&mut self, id: JobId) {
        self.log(id);
        if let Some(e) = self.entries.get_mut(&id) {
            let before = e.known_end();
            let counted = e.preemptible && !e.stopping;
            self.stopping += usize::from(!e.stopping);
            e.stopping = true;
            self.with_known_end += usize::from(!before);
            self.known_ends.insert(id);
            if counted {
                uncount(&mut self.preemptible_by_class, e.class);
            }
        }
    }

    /// The jobs that release their resources at a known time (stopping, or with a planned end), by id.
    pub(crate) fn known_ends(&self) -> &BTreeSet<JobId> {
        &self.known_ends
    }

    pub(crate) fn remove(&mut self, id: JobId) {
        self.log(id);
        if let Some(e) = self.entries.remove(&id) {
            self.forget(&e);
        }
    }

    fn forget(&mut self, e: &RunEntry) {
        self.queues.release(e.queue);
        self.with_anti_affinity = self.with_anti_affinity.saturating_sub(usize::from(e.anti_affinity));
        self.elastic = self.elastic.saturating_sub(usize::from(e.elastic));
        self.with_known_end = self.with_known_end.saturating_sub(usize::from(e.known_end()));
        self.known_ends.remove(&e.id);
        self.stopping = self.stopping.saturating_sub(usize::from(e.stopping));
        self.with_deadline = self.with_deadline.saturating_sub(usize::from(e.deadline));
        if let Some(a) = e.array
            && let Some(n) = self.array_tasks.get_mut(&a)
        {
            *n -= 1;
            if *n == 0 {
                self.array_tasks.remove(&a);
            }
        }
        if e.preemptible && !e.stopping {
            uncount(&mut self.preemptible_by_class, e.class);
        }
    }

    /// Keeps `value`, derived from the entries, for a later pass
    /// ([`RunningJobs::take_kept`]); it replaces what was kept. What of it
    /// still holds is for the taker to tell ([`RunningJobs::changed_since`],
    /// [`RunningJobs::policy_epoch`]).
    pub(crate) fn keep<T: std::any::Any + Send>(&self, value: T) {
        self.kept.put(value);
    }

    /// Takes what a pass kept, if it is a `T`.
    pub(crate) fn take_kept<T: std::any::Any>(&self) -> Option<T> {
        self.kept.take()
    }

    /// Records a change to a job's entry. The log keeps its newest part,
    /// at least as long as the entries; whoever followed it to an older
    /// point starts over ([`RunningJobs::changed_since`]).
    fn log(&mut self, id: JobId) {
        self.log.push(id, self.entries.len());
    }

    /// The end of the change log: what a follower has seen once it has read it all.
    pub(crate) fn log_end(&self) -> u64 {
        self.log.end()
    }

    /// The jobs whose entries changed since the log stood at `seen` (a
    /// [`RunningJobs::log_end`]), possibly more than once; `None` when that
    /// part of the log was dropped (or `seen` is not of this log).
    pub(crate) fn changed_since(&self, seen: u64) -> Option<&[JobId]> {
        self.log.since(seen)
    }

    /// Moves whenever the policy changes: what was derived from the entries
    /// under an older policy no longer holds.
    pub(crate) fn policy_epoch(&self) -> u64 {
        self.policy_epoch
    }

    /// Whether a preemptible job that is not stopping runs in class `class`.
    pub(crate) fn preemptible_in(&self, class: i32) -> bool {
        self.preemptible_by_class.contains_key(&class)
    }

    /// Whether a preemptible job that is not stopping runs in a class below `class`.
    pub(crate) fn preemptible_below(&self, class: i32) -> bool {
        self.preemptible_by_class.range(..class).next().is_some()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, id: &JobId) -> Option<&RunEntry> {
        self.entries.get(id)
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &JobId> {
        self.entries.keys()
    }

    /// In job id order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &RunEntry> {
        self.entries.values()
    }

    /// The jobs asked to stop, in job id order.
    pub(crate) fn stopping(&self) -> impl Iterator<Item = &RunEntry> {
        self.counted(self.stopping).filter(|e| e.stopping)
    }

    /// The jobs with deadlines, in job id order.
    pub(crate) fn with_deadlines(&self) -> impl Iterator<Item = &RunEntry> {
        self.counted(self.with_deadline).filter(|e| e.deadline)
    }

    /// Every entry, or none when `count` (of those a caller looks for) is 0:
    /// most passes find none, and the count spares them the walk.
    fn counted(&self, count: usize) -> impl Iterator<Item = &RunEntry> {
        self.entries.values().take(if count == 0 { 0 } else { usize::MAX })
    }
}

fn uncount(counts: &mut BTreeMap<i32, usize>, class: i32) {
    if let Some(n) = counts.get_mut(&class) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&class);
        }
    }
}

/// The key a policy compares within one priority class (see [`PreemptKey`]).
pub(crate) fn preemption_key(policy: &Policy, job: &Job, now: Time) -> Option<PreemptKey> {
    KeyInputs::of(job).key(policy, now)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::model::job::{JobSpec, JobState, ReplicaPlacement, Running};
    use crate::model::node::NodeId;

    fn default_policy() -> Policy {
        Policy::by_name("default").expect("a preset")
    }

    fn running(id: u64, queue: &str, nodes: &[u32], planned: Option<u64>, anti: bool) -> Job {
        let mut spec = JobSpec::new("u", Time::from_secs(id as i64));
        spec.queue = Arc::from(queue);
        spec.estimate = planned.map(Duration::from_secs);
        if anti {
            spec.anti_affinity = vec![BTreeMap::from([("app".to_string(), "x".to_string())])];
        }
        let placement = nodes
            .iter()
            .map(|n| ReplicaPlacement { node: NodeId(*n), gpus: 1, mig: 0, cpus_milli: 0, memory_mb: 0, share: None })
            .collect();
        Job {
            id: JobId(id),
            spec: Arc::new(spec),
            state: JobState::Running(Running {
                placement,
                started: Time::from_secs(100),
                gpu_milli: 1000,
                by_kind: crate::model::resources::KindUnits([1000, 0, 0]),
                stopping: None,
            }),
            service: Service::default(),
            not_before: Time::MIN,
        }
    }

    #[test]
    fn counts_and_queues_follow_starts_stop_requests_and_stops() {
        let mut r = RunningJobs::default();
        r.insert(&running(1, "a", &[0], None, false), Duration::ZERO, &default_policy());
        r.insert(&running(2, "a", &[3, 3, 5, 3], Some(60), true), Duration::ZERO, &default_policy());
        r.insert(&running(3, "b", &[1], None, true), Duration::ZERO, &default_policy());
        assert_eq!((r.len(), r.with_anti_affinity, r.with_known_end), (3, 2, 1));
        let known = |r: &RunningJobs| r.known_ends().iter().map(|j| j.0).collect::<Vec<_>>();
        assert_eq!(known(&r), [2]);
        let e = r.get(&JobId(2)).expect("entry");
        // Consecutive replicas on one node list it once.
        assert_eq!((e.first_node, &*e.more_nodes), (Some(3), &[5, 3][..]));
        assert_eq!(e.planned_end(), Time::from_secs(160));
        let (a, b) = (r.queues.id_of("a"), r.queues.id_of("b"));
        assert!(a.is_some() && b.is_some() && a != b);
        // A stop request makes the end known once, however often it comes.
        r.mark_stopping(JobId(1));
        r.mark_stopping(JobId(1));
        r.mark_stopping(JobId(2));
        assert_eq!((r.with_known_end, known(&r)), (2, vec![1, 2]));
        // A job started again under its id, now without a planned end, has no known end.
        r.insert(&running(2, "a", &[3], None, true), Duration::ZERO, &default_policy());
        assert_eq!((r.with_known_end, known(&r)), (1, vec![1]));
        r.insert(&running(2, "a", &[3, 3, 5, 3], Some(60), true), Duration::ZERO, &default_policy());
        r.mark_stopping(JobId(2));
        assert_eq!((r.with_known_end, known(&r)), (2, vec![1, 2]));
        r.remove(JobId(3));
        assert_eq!((r.with_anti_affinity, r.queues.id_of("b")), (1, None));
        r.remove(JobId(1));
        assert_eq!(r.queues.id_of("a"), a, "job 2 still holds queue a");
        r.remove(JobId(2));
        r.remove(JobId(2));
        assert_eq!((r.len(), r.with_anti_affinity, r.with_known_end, r.queues.id_of("a")), (0, 0, 0, None));
        assert!(known(&r).is_empty());
    }

    /// The change log a kept victim pool follows: every insert, stop
    /// request and removal, in order; a follower too far behind is told to
    /// start over, one at the end sees nothing.
    #[test]
    fn the_change_log_lists_changed_jobs_and_forgets_its_oldest_part() {
        let mut r = RunningJobs::default();
        let start = r.log_end();
        r.insert(&running(1, "a", &[0], None, false), Duration::ZERO, &default_policy());
        r.insert(&running(2, "a", &[1], None, false), Duration::ZERO, &default_policy());
        let middle = r.log_end();
        r.mark_stopping(JobId(1));
        r.remove(JobId(2));
        assert_eq!(r.changed_since(start), Some(&[JobId(1), JobId(2), JobId(1), JobId(2)][..]));
        assert_eq!(r.changed_since(middle), Some(&[JobId(1), JobId(2)][..]));
        assert_eq!(r.changed_since(r.log_end()), Some(&[][..]));
        assert_eq!(r.changed_since(r.log_end() + 1), None, "not a point of this log");
        // Thousands of starts and stops of one job: the log stays short.
        for _ in 0..3_000 {
            r.insert(&running(3, "a", &[0], None, false), Duration::ZERO, &default_policy());
            r.remove(JobId(3));
        }
        assert!(r.log.len() <= 2 * r.len() + 1024, "{}", r.log.len());
        assert_eq!(r.changed_since(start), None, "dropped: start over");
        let recent = r.log_end() - 2;
        assert_eq!(r.changed_since(recent), Some(&[JobId(3), JobId(3)][..]));
    }

    /// `same_until` is never after the key changes, and for service levels
    /// it is the very millisecond it does (checked by asking the key itself
    /// at every second around it).
    #[test]
    fn a_key_stays_the_same_until_the_time_it_is_said_to() {
        let mut job = running(1, "a", &[0], Some(7_200), false);
        // Two GPUs since t=100 s, with 1,000 GPU-s from an earlier run.
        if let JobState::Running(r) = &mut job.state {
            r.gpu_milli = 2_000;
        }
        job.service.prior_gpu_milli_secs = 1_000_000;
        for name in ["default", "las", "srtf", "fifo-backfill"] {
            let policy = Policy::by_name(name).expect("preset");
            let key = KeyInputs::of(&job);
            for now_s in [100, 500, 1_199, 1_200, 1_201, 16_000, 20_000] {
                let now = Time::from_secs(now_s);
                let until = key.same_until(&policy, now, key.promoted_until(&policy));
                assert!(until >= now, "{name} at {now_s} s: {until}");
                let at_now = key.key(&policy, now);
                let mut t = now;
                while t < until && t < Time::from_secs(40_000) {
                    assert_eq!(key.key(&policy, t), at_now, "{name}: from {now_s} s the key changed at {t}");
                    t = t.plus(Duration::from_secs(1));
                }
                // Levels: 3,200 GPU-s at t=1,200 s, 32,000 at t=15,600 s.
                if matches!(name, "las" | "default") && until != Time::NEVER {
                    assert!([1_200, 15_600].contains(&(until.as_millis() / 1000)), "{name} at {now_s} s: {until}");
                    assert_ne!(key.key(&policy, until), at_now, "{name} at {now_s} s: the key changes at {until}");
                }
            }
        }
    }

    /// The counts that spare a pass its walks over every running job:
    /// those stopping, those with deadlines, the tasks of each array.
    #[test]
    fn stops_deadlines_and_array_tasks_are_counted_as_jobs_come_and_go() {
        let job = |id: u64, deadline: bool, array: Option<u64>| {
            let mut j = running(id, "a", &[0], None, false);
            let spec = Arc::make_mut(&mut j.spec);
            spec.deadline = deadline.then_some(Time::from_secs(1_000));
            spec.array = array.map(|of| crate::model::job::ArrayLimit { of: JobId(of), limit: 2 });
            j
        };
        let mut r = RunningJobs::default();
        r.insert(&job(1, true, Some(10)), Duration::ZERO, &default_policy());
        r.insert(&job(2, false, Some(10)), Duration::ZERO, &default_policy());
        r.insert(&job(3, true, Some(20)), Duration::ZERO, &default_policy());
        r.insert(&job(4, false, None), Duration::ZERO, &default_policy());
        assert_eq!(r.with_deadline, 2);
        assert_eq!(r.array_tasks, BTreeMap::from([(JobId(10), 2), (JobId(20), 1)]));
        assert_eq!(r.stopping().count(), 0);
        r.mark_stopping(JobId(2));
        r.mark_stopping(JobId(2));
        r.mark_stopping(JobId(4));
        let stopping: Vec<JobId> = r.stopping().map(|e| e.id).collect();
        assert_eq!((r.stopping, stopping), (2, vec![JobId(2), JobId(4)]));
        r.remove(JobId(2));
        r.remove(JobId(3));
        assert_eq!((r.stopping, r.with_deadline), (1, 1));
        assert_eq!(r.array_tasks, BTreeMap::from([(JobId(10), 1)]), "an array with no task running is gone");
        // Started again (a requeued job): counted as it is now, not twice.
        r.insert(&job(1, false, None), Duration::ZERO, &default_policy());
        r.insert(&job(4, false, None), Duration::ZERO, &default_policy());
        assert_eq!((r.stopping, r.with_deadline, r.array_tasks.len()), (0, 0, 0));
    }

    /// The key a pass ranks victims by is the one the job itself would
    /// give, with the promotion kept at the start: before and after the
    /// promoted run's end, and after the policy changes.
    #[test]
    fn kept_promotions_give_the_jobs_own_preemption_key() {
        use crate::policies::policy::StarvationGuard;
        let mut job = running(1, "a", &[0], None, false);
        // Above the first level before this run (3,200 GPU-seconds), submitted long ago: promoted.
        job.service = Service { prior_runtime: Duration::from_secs(600), prior_gpu_milli_secs: 5_000_000, restarts: 1 };
        let mut policy = default_policy();
        policy.starvation_guard =
            Some(StarvationGuard { after: Duration::from_secs(10), max_runtime: Duration::from_secs(3_600) });
        let other = Policy { starvation_guard: None, ..policy.clone() };
        let mut r = RunningJobs::default();
        r.insert(&job, Duration::ZERO, &policy);
        let check = |r: &RunningJobs, policy: &Policy| {
            let e = r.get(&JobId(1)).expect("entry");
            // Started at 100 s with 600 s behind it: promoted until 3,100 s.
            for t in [100, 3_099, 3_100, 50_000] {
                let now = Time::from_secs(t);
                assert_eq!(e.preemption_key(policy, now), KeyInputs::of(&job).key(policy, now), "at {t} s");
            }
        };
        check(&r, &policy);
        let e = r.get(&JobId(1)).expect("entry");
        assert_eq!(e.preemption_key(&policy, Time::from_secs(3_099)).map(|k| k.rank), Some(0), "promoted");
        assert_eq!(e.preemption_key(&policy, Time::from_secs(3_100)).map(|k| k.rank), Some(1), "the promotion ended");
        r.set_policy(&other);
        check(&r, &other);
        assert_eq!(
            r.get(&JobId(1)).and_then(|e| e.preemption_key(&other, Time::from_secs(200))).map(|k| k.rank),
            Some(1)
        );
    }

    #[test]
    fn preemptible_classes_count_jobs_that_are_not_stopping() {
        let job = |id: u64, class: i32, preemptible: bool| {
            let mut j = running(id, "a", &[0], None, false);
            let spec = Arc::make_mut(&mut j.spec);
            (spec.priority, spec.preemptible) = (class, preemptible);
            j
        };
        let mut r = RunningJobs::default();
        r.insert(&job(1, 0, true), Duration::ZERO, &default_policy());
        r.insert(&job(2, 0, true), Duration::ZERO, &default_policy());
        r.insert(&job(3, 5, true), Duration::ZERO, &default_policy());
        r.insert(&job(4, 2, false), Duration::ZERO, &default_policy());
        assert!(r.preemptible_in(0) && r.preemptible_in(5) && !r.preemptible_in(2), "not preemptible: not counted");
        assert!(!r.preemptible_below(0) && r.preemptible_below(1) && r.preemptible_below(6));
        r.mark_stopping(JobId(1));
        r.mark_stopping(JobId(1));
        assert!(r.preemptible_in(0), "job 2 is still there");
        r.remove(JobId(2));
        assert!(!r.preemptible_in(0) && !r.preemptible_below(5), "a stopping job is no victim");
        r.remove(JobId(1));
        r.insert(&job(3, 5, false), Duration::ZERO, &default_policy());
        assert!(!r.preemptible_in(5), "a job inserted again is counted as it is now");
    }
}
