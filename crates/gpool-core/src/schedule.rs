//! One scheduling pass: `schedule(&snapshot, now) -> Plan`.
//!
//! The pass walks pending jobs in policy order (see [`crate::order`]) and for
//! each one: checks dependencies, back-off and quota; tries to place every
//! replica on the working copy of free resources; if that fails, tries to
//! find a minimal set of victims to preempt; if that fails too, the job is
//! blocked, and depending on the backfill mode it blocks everyone behind it
//! (strict), gets an EASY reservation (the first such job), or is simply
//! skipped (first fit).
//!
//! The pass stops early when nothing left in the queue can fit and nobody
//! can be preempted; the jobs it did not look at share one reason.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::backfill::{Release, reserve};
use crate::capacity::{Capacity, placement_units};
use crate::job::StopCause;
use crate::job::{Job, JobId, JobSpec, Placement};
use crate::order::Candidates;
use crate::plan::{PendingReason, Plan, Preempt, Reservation, Start};
use crate::policy::{Backfill, Policy};
use crate::preempt::{Search, VictimPool, preemption_key};
use crate::quota::QuotaState;
use crate::snapshot::{Snapshot, device_need};
use crate::time::Time;

/// Runs one scheduling pass over `snap` at time `now`. Pure: equal inputs give equal plans.
pub fn schedule(snap: &Snapshot, now: Time) -> Plan {
    Pass::new(snap, now).run()
}

struct Pass<'s> {
    snap: &'s Snapshot,
    policy: &'s Policy,
    now: Time,
    cap: Capacity<'s>,
    quota: QuotaState,
    plan: Plan,
    /// Jobs stopping for a pending job (preempted for it in an earlier pass).
    nominations: BTreeMap<JobId, Vec<JobId>>,
    taken: BTreeSet<JobId>,
    pool: Option<VictimPool>,
    /// Placement failures by job shape: valid for the whole pass, since free capacity only shrinks.
    fit_failures: HashMap<u64, Vec<(&'s JobSpec, bool, PendingReason)>>,
    /// Preemption failures by shape: (spec, best key that failed).
    preempt_failures: HashMap<u64, Vec<(&'s JobSpec, i64)>>,
    first_blocked: Option<JobId>,
    strict_blocked: Option<JobId>,
    reservation: Option<(JobId, Time)>,
    /// Planned ends of the jobs started in this pass (index into `plan.starts`).
    started_ends: Vec<Time>,
    /// Pending jobs not yet examined, by devices per replica.
    remaining: BTreeMap<u32, u32>,
    preemption_possible: bool,
}

impl<'s> Pass<'s> {
    fn new(snap: &'s Snapshot, now: Time) -> Pass<'s> {
        let policy = snap.policy();
        let mut nominations: BTreeMap<JobId, Vec<JobId>> = BTreeMap::new();
        let mut usage: Vec<(&Arc<str>, u64)> = Vec::new();
        for j in snap.running_jobs() {
            if let Some(r) = j.running() {
                if let Some(StopCause::Preempted { for_job }) = &r.stopping
                    && snap.job(*for_job).is_some_and(|f| f.running().is_none())
                {
                    nominations.entry(*for_job).or_default().push(j.id);
                }
                usage.push((&j.spec.queue, r.gpu_milli));
            }
        }
        let quota = QuotaState::new(&snap.queues, usage.into_iter());
        let preemption_possible = !nominations.is_empty() || (policy.preemption.any() && snap.running_count() > 0);
        Pass {
            snap,
            policy,
            now,
            cap: Capacity::new(snap),
            quota,
            plan: Plan { now, ..Plan::default() },
            nominations,
            taken: BTreeSet::new(),
            pool: None,
            fit_failures: HashMap::new(),
            preempt_failures: HashMap::new(),
            first_blocked: None,
            strict_blocked: None,
            reservation: None,
            started_ends: Vec::new(),
            remaining: snap.pending_by_devices.clone(),
            preemption_possible,
        }
    }

    fn run(mut self) -> Plan {
        let mut candidates = Candidates::new(self.snap, self.now);
        while let Some(id) = candidates.next_job() {
            let Some(job) = self.snap.jobs.get(&id) else {
                continue;
            };
            self.plan.stats.examined += 1;
            let need = device_need(&job.spec.replica.gpu);
            if let Some(c) = self.remaining.get_mut(&need) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    self.remaining.remove(&need);
                }
            }
            if let Some(blocked_by) = self.strict_blocked {
                self.plan.waiting.push((id, PendingReason::HeadOfLine { blocked_by }));
                self.plan.others = Some(PendingReason::HeadOfLine { blocked_by });
                break;
            }
            if let Some(reason) = self.gate(job) {
                self.plan.waiting.push((id, reason));
                continue;
            }
            let ends = planned_end(job, self.now);
            match self.try_place(job, ends) {
                Ok(placement) => {
                    let units = placement_units(self.snap, &placement);
                    if let Err(block) = self.quota.check(&self.snap.queues, &job.spec.queue, units) {
                        for r in &placement {
                            self.cap.uncommit(r, id);
                        }
                        self.plan.waiting.push((id, PendingReason::Quota(block)));
                        continue;
                    }
                    self.quota.add(&self.snap.queues, &job.spec.queue, units);
                    candidates.started(units);
                    self.plan.starts.push(Start { job: id, placement, backfilled: self.first_blocked.is_some() });
                    self.started_ends.push(ends);
                }
                Err(reason) => {
                    if self.try_preempt(job, ends, &mut candidates) {
                        continue;
                    }
                    let capacity_blocked = matches!(reason, PendingReason::NoFit { .. });
                    if capacity_blocked {
                        self.first_blocked.get_or_insert(id);
                        match self.policy.backfill {
                            Backfill::None => self.strict_blocked = Some(id),
                            Backfill::FirstFit => {}
                            Backfill::Easy => {
                                if self.reservation.is_none() {
                                    self.make_reservation(job);
                                }
                            }
                        }
                    }
                    self.plan.waiting.push((id, reason));
                }
            }
            if self.nothing_more_fits() {
                if self.snap.pending_count() > self.plan.starts.len() + self.plan.waiting.len() {
                    self.plan.others = Some(PendingReason::Queued);
                }
                break;
            }
        }
        self.plan
    }

    /// Reasons that need no placement search: dependencies, back-off, quota.
    fn gate(&self, job: &Job) -> Option<PendingReason> {
        for &d in &job.spec.dependencies {
            match self.snap.finished(d) {
                Some(true) => {}
                Some(false) => return Some(PendingReason::DependencyFailed { on: d }),
                None => return Some(PendingReason::Dependency { on: d }),
            }
        }
        if job.not_before > self.now {
            return Some(PendingReason::NotBefore { until: job.not_before });
        }
        let units = job.spec.replica.gpu.min_units() * u64::from(job.spec.replicas);
        self.quota.check(&self.snap.queues, &job.spec.queue, units).err().map(PendingReason::Quota)
    }

    fn cacheable(&self, job: &Job) -> bool {
        job.spec.anti_affinity.is_empty() && (job.spec.labels.is_empty() || !self.cap.anti_affinity_in_use)
    }

    fn try_place(&mut self, job: &'s Job, ends: Time) -> Result<Placement, PendingReason> {
        let can_use_reserved = self.reservation.is_none_or(|(_, t)| ends <= t && t != Time::NEVER);
        let cacheable = self.cacheable(job);
        let key = shape_hash(&job.spec, can_use_reserved);
        if cacheable
            && let Some(hit) = self.fit_failures.get(&key).and_then(|v| {
                v.iter().find(|(s, c, _)| *c == can_use_reserved && same_shape(s, &job.spec)).map(|(_, _, r)| r.clone())
            })
        {
            self.plan.stats.cache_hits += 1;
            return Err(hit);
        }
        if let Ok(p) = self.cap.place_job(job, ends, self.policy.placement) {
            return Ok(p);
        }
        let reason = match self.reservation {
            Some((for_job, at)) if !can_use_reserved => {
                match self.cap.place_job(job, Time::MIN, self.policy.placement) {
                    Ok(p) => {
                        for r in &p {
                            self.cap.uncommit(r, job.id);
                        }
                        PendingReason::Reserved { for_job, at }
                    }
                    Err(()) => self.cap.miss_reason(job),
                }
            }
            _ => self.cap.miss_reason(job),
        };
        if cacheable {
            self.fit_failures.entry(key).or_default().push((&job.spec, can_use_reserved, reason.clone()));
        }
        Err(reason)
    }

    /// Looks for victims; on success records the preemptions and the job's claim.
    fn try_preempt(&mut self, job: &'s Job, ends: Time, candidates: &mut Candidates<'_>) -> bool {
        let prereleased: &[JobId] = self.nominations.get(&job.id).map_or(&[], Vec::as_slice);
        if !self.policy.preemption.any() && prereleased.is_empty() {
            return false;
        }
        let key = preemption_key(self.policy, job, self.now);
        let cache_key = shape_hash(&job.spec, true);
        let cacheable = self.cacheable(job) && prereleased.is_empty();
        let k = key.unwrap_or(i64::MAX);
        if cacheable
            && self.preempt_failures.get(&cache_key).is_some_and(|v| {
                v.iter().any(|(s, failed)| {
                    *failed <= k
                        && same_shape(s, &job.spec)
                        && s.priority == job.spec.priority
                        && s.queue == job.spec.queue
                })
            })
        {
            return false;
        }
        let pool = self.pool.get_or_insert_with(|| VictimPool::new(self.snap, self.now));
        let units = job.spec.replica.gpu.min_units() * u64::from(job.spec.replicas);
        let search =
            Search { cap: &self.cap, pool, quota: &self.quota, job, key, units, ends, taken: &self.taken, prereleased };
        if !search.possible() {
            return false;
        }
        self.plan.stats.preemption_searches += 1;
        let Some((victims, placement)) = search.run() else {
            if cacheable {
                self.preempt_failures.entry(cache_key).or_default().push((&job.spec, k));
            }
            return false;
        };
        let victim_ids: Vec<JobId> = victims.iter().map(|(v, _)| *v).collect();
        let released: Vec<(u64, u64)> = placement.iter().map(|r| search.released_on(&victim_ids, r.node)).collect();
        let waiting_on = (victims.len() + prereleased.len()) as u32;
        if waiting_on == 0 {
            // Fits as is (only reachable when the index and the search disagree): start it.
            for r in &placement {
                self.cap.commit(r, job.id);
            }
            let units = placement_units(self.snap, &placement);
            self.quota.add(&self.snap.queues, &job.spec.queue, units);
            candidates.started(units);
            self.plan.starts.push(Start { job: job.id, placement, backfilled: self.first_blocked.is_some() });
            self.started_ends.push(ends);
            return true;
        }
        // Victims keep their quota until they have stopped: releasing it now
        // would let their queue start more work in this pass and overshoot.
        for (v, why) in victims {
            self.taken.insert(v);
            self.plan.preemptions.push(Preempt { victim: v, for_job: job.id, why });
        }
        for (r, (cpus, mem)) in placement.iter().zip(released) {
            self.cap.claim(r, cpus, mem, job.id);
        }
        self.quota.add(&self.snap.queues, &job.spec.queue, placement_units(self.snap, &placement));
        self.plan.nominated.push((job.id, placement));
        self.plan.waiting.push((job.id, PendingReason::WaitingForPreemption { victims: waiting_on }));
        true
    }

    fn make_reservation(&mut self, job: &Job) {
        let mut releases: Vec<Release<'_>> = Vec::new();
        for j in self.snap.running_jobs() {
            let Some(r) = j.running() else { continue };
            let at = if r.stopping.is_some() || self.taken.contains(&j.id) {
                self.now.plus(j.spec.grace)
            } else {
                planned_end(j, r.started).max(self.now)
            };
            releases.push(Release { at, placement: &r.placement });
        }
        for (s, at) in self.plan.starts.iter().zip(&self.started_ends) {
            releases.push(Release { at: *at, placement: &s.placement });
        }
        if let Some((at, placement)) = reserve(&self.cap, job, releases) {
            let mut nodes: Vec<_> = placement.iter().map(|r| r.node).collect();
            nodes.dedup();
            self.cap.set_reservation(&placement, at);
            self.plan.reservation = Some(Reservation { job: job.id, at, nodes });
            self.reservation = Some((job.id, at));
            // What failed before the reservation may fail for another reason now.
            self.fit_failures.clear();
        }
    }

    /// True when no remaining job could start or preempt.
    fn nothing_more_fits(&self) -> bool {
        if self.preemption_possible {
            return false;
        }
        let Some(&min_need) = self.remaining.keys().next() else {
            return true;
        };
        if min_need == 0 {
            return !self.cap.any_cpu_free();
        }
        self.cap.max_free_devices() < min_need
    }
}

/// When a job started at `started` is planned to end: start + planned run time
/// left; [`Time::NEVER`] without an estimate or limit.
fn planned_end(job: &Job, started: Time) -> Time {
    match job.spec.planned_runtime() {
        Some(p) => started.plus(p.saturating_sub(job.service.prior_runtime)),
        None => Time::NEVER,
    }
}

fn shape_hash(spec: &JobSpec, flag: bool) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    spec.replica.hash(&mut h);
    spec.replicas.hash(&mut h);
    spec.node_selector.hash(&mut h);
    spec.affinity.hash(&mut h);
    flag.hash(&mut h);
    h.finish()
}

fn same_shape(a: &JobSpec, b: &JobSpec) -> bool {
    a.replica == b.replica && a.replicas == b.replicas && a.node_selector == b.node_selector && a.affinity == b.affinity
}
