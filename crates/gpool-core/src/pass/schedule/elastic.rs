//! Elastic jobs in a pass (`replicas: {min, max}`, issue 41).
//!
//! An elastic job is placed like any gang of its minimum width; then:
//! - **grow**: devices the pass leaves free, after every pending job it
//!   examined, go to elastic jobs up to their maximum, in the policy's order
//!   (jobs started in this pass first, at no cost; running ones restart at
//!   the larger size, so only once they have run `resize_after` in all: a
//!   job that has run that long is likely to run on long enough to repay
//!   the restart, as run times are heavy-tailed). A
//!   growth uses free devices only as backfill would: never those an EASY
//!   reservation holds for a job that ends later, never under strict order
//!   with a blocked head.
//! - **shrink instead of preempt**: a job that does not fit first looks for
//!   replicas that elastic jobs above their minimum can give up
//!   ([`crate::pass::preempt::Search::shrink`]), under the rules a whole
//!   preemption obeys; only when that is not enough does it look for whole
//!   victims.
//! - **restart at the new size**: a resize stops the job (its grace period
//!   is its checkpoint) and nominates it for the new placement, which the
//!   following passes hold while it stops and start as soon as it is back in
//!   the queue ([`Pass::start_at_nomination`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Pass;
use crate::model::job::{Job, JobId, JobSpec, Placement, ReplicaPlacement};
use crate::model::time::Time;
use crate::pass::capacity::placement_units;
use crate::pass::order::Candidates;
use crate::pass::plan::{PendingReason, Resize, ResizeWhy, Start};
use crate::pass::preempt::Search;
use crate::pass::running::preemption_key;
use crate::policies::policy::Backfill;

impl<'s> Pass<'s> {
    /// An elastic job back in the queue after a resize, with its held
    /// placement free: starts it there, at the size it was resized to.
    pub(super) fn start_at_nomination(&mut self, job: &Job, ends: Time, candidates: &mut Candidates<'_>) -> bool {
        if !job.spec.is_elastic() {
            return false;
        }
        let Some(placement) = self.snap.nominations.get(&job.id) else { return false };
        let sized = (job.spec.replicas as usize..=job.spec.most_replicas() as usize).contains(&placement.len());
        if !sized || !self.cap.fits_free(placement) {
            return false;
        }
        let units = placement_units(self.snap, placement);
        let by_kind = self.snap.units_by_kind(placement);
        let queues = &self.snap.queues;
        if self.quota.check(queues, &job.spec.queue, units).is_err()
            || self.quota.check_kinds(queues, &job.spec.queue, &by_kind).is_err()
        {
            return false;
        }
        for r in placement {
            self.cap.commit(r, job.id);
        }
        self.quota.add(queues, &job.spec.queue, units);
        self.quota.add_kinds(&job.spec.queue, &by_kind);
        candidates.started(units);
        self.plan.starts.push(Start { job: job.id, placement: placement.clone(), backfilled: false });
        self.started_ends.push(ends);
        true
    }

    /// Replicas of elastic jobs this job may take: on success the shrinks
    /// and the job's claim are recorded, and it waits for them.
    pub(super) fn try_shrink(&mut self, job: &Job, ends: Time, prereleased: &[JobId]) -> bool {
        if self.snap.running.elastic == 0 || job.spec.same_label.is_some() {
            return false;
        }
        let key = preemption_key(self.policy, job, self.now).filter(|_| self.within_class_acts);
        let pool = self.pool.get_or_insert_with(|| crate::pass::victim_pool::VictimPool::for_pass(self.snap, self.now));
        let search = Search {
            cap: &self.cap,
            pool,
            quota: &self.quota,
            job,
            key,
            units: job.spec.gpu_units(),
            ends,
            taken: &self.taken,
            prereleased,
            job_q: pool.queue_ix(self.snap, &job.spec.queue),
            ignore_protection: false,
        };
        let Some((shrunk, placement)) = search.shrink() else { return false };
        let by_kind = self.snap.units_by_kind(&placement);
        if self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &by_kind).is_err() {
            return false;
        }
        let mut waits_for: BTreeSet<JobId> = prereleased.iter().copied().collect();
        for s in shrunk {
            let Some(run) = self.snap.job(s.job).and_then(Job::running) else { continue };
            let (given, kept): (Vec<(usize, &ReplicaPlacement)>, Vec<(usize, &ReplicaPlacement)>) =
                run.placement.iter().enumerate().partition(|(k, _)| s.given_up.contains(k));
            let given: Placement = given.into_iter().map(|(_, r)| r.clone()).collect();
            let kept: Placement = kept.into_iter().map(|(_, r)| r.clone()).collect();
            self.taken.insert(s.job);
            self.cap.releasing.add(s.job, &given);
            waits_for.insert(s.job);
            self.plan.nominated.push((s.job, kept.clone()));
            self.plan.resizes.push(Resize {
                job: s.job,
                placement: kept,
                why: ResizeWhy::Shrink { for_job: job.id, why: s.why },
            });
        }
        for r in &placement {
            waits_for.extend(self.cap.claim(r, job.id).into_iter().map(|(from, _)| from));
        }
        self.quota.add(&self.snap.queues, &job.spec.queue, placement_units(self.snap, &placement));
        self.quota.add_kinds(&job.spec.queue, &by_kind);
        self.plan.nominated.push((job.id, placement));
        let victims = (waits_for.len() as u32).max(1);
        self.plan.wait(job.id, PendingReason::WaitingForPreemption { victims });
        true
    }

    /// Gives what the pass left free to elastic jobs below their maximum:
    /// first those it started (their placement just gets wider), then
    /// running ones in the policy's order, as resizes.
    pub(super) fn grow_elastic(&mut self) {
        if self.strict_blocked.is_some() && self.policy.backfill == Backfill::None {
            return;
        }
        for i in 0..self.plan.starts.len() {
            let id = self.plan.starts[i].job;
            let Some(job) = self.snap.job(id).filter(|j| j.spec.is_elastic()) else { continue };
            let have = self.plan.starts[i].placement.len();
            let ends = self.started_ends.get(i).copied().unwrap_or(Time::NEVER);
            let extra = self.grow_by(job, have, ends);
            self.plan.starts[i].placement.extend(extra);
        }
        if self.snap.running.elastic == 0 || self.cap.max_free_devices() == 0 {
            return;
        }
        let mut growable: Vec<(&Job, Time)> = self
            .snap
            .running_jobs()
            .filter(|j| j.spec.is_elastic() && !self.taken.contains(&j.id))
            .filter_map(|j| {
                let r = j.running()?;
                (r.stopping.is_none() && r.placement.len() < j.spec.most_replicas() as usize).then_some((j, r.started))
            })
            .collect();
        // Higher classes first; within a class the job furthest below its
        // maximum (so work shrunk long ago is not left slow for ever, which
        // would lengthen the tail), then the policy's key, then the older job.
        growable.sort_by_key(|(j, _)| {
            let key = preemption_key(self.policy, j, self.now);
            let have = j.running().map_or(0, |r| r.placement.len() as u64);
            let share = have * 1000 / u64::from(j.spec.most_replicas().max(1));
            (std::cmp::Reverse(j.spec.priority), share, key.map(|k| (k.rank, k.submit_ms)), j.id)
        });
        for (job, _) in growable {
            // A job that has run this long, over all its runs, is likely to run on long enough to repay a restart.
            let ready = self.now.plus(self.policy.resize_after.saturating_sub(job.runtime(self.now)));
            if ready > self.now {
                self.plan.wake_at = Some(self.plan.wake_at.map_or(ready, |w| w.min(ready)));
                continue;
            }
            let Some(run) = job.running() else { continue };
            let ends = self.snap.running.get(&job.id).map_or(Time::NEVER, |e| e.expected_end(self.now));
            let extra = self.grow_by(job, run.placement.len(), ends);
            if extra.is_empty() {
                continue;
            }
            let mut placement = run.placement.clone();
            placement.extend(extra);
            self.plan.nominated.push((job.id, placement.clone()));
            self.plan.resizes.push(Resize { job: job.id, placement, why: ResizeWhy::Grow });
        }
    }

    /// Places (and commits) as many more replicas of `job` as fit in what is
    /// free and its queue's quota allows, up to its maximum.
    fn grow_by(&mut self, job: &Job, have: usize, ends: Time) -> Vec<ReplicaPlacement> {
        let most = job.spec.most_replicas() as usize;
        if have >= most || job.spec.same_label.is_some() {
            return Vec::new();
        }
        let one =
            Job { spec: Arc::new(JobSpec { replicas: 1, max_replicas: None, ..(*job.spec).clone() }), ..job.clone() };
        let queues = &self.snap.queues;
        let mut extra = Vec::new();
        while have + extra.len() < most {
            if self.quota.check(queues, &job.spec.queue, one.spec.gpu_units()).is_err() {
                break;
            }
            let Ok(p) = self.cap.place_job(&one, ends, self.policy.placement) else { break };
            let units = placement_units(self.snap, &p);
            let by_kind = self.snap.units_by_kind(&p);
            if self.quota.check(queues, &job.spec.queue, units).is_err()
                || self.quota.check_kinds(queues, &job.spec.queue, &by_kind).is_err()
            {
                for r in &p {
                    self.cap.uncommit(r, job.id);
                }
                break;
            }
            self.quota.add(queues, &job.spec.queue, units);
            self.quota.add_kinds(&job.spec.queue, &by_kind);
            extra.extend(p);
        }
        extra
    }
}
