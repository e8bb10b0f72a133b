//! One scheduling pass: `schedule(&snapshot, now) -> Plan`.
//!
//! The pass walks pending jobs in policy order (see [`crate::pass::order`]) and
//! for each one: checks dependencies, back-off and quota; tries to place every
//! replica on the working copy of free resources; if that fails, tries to find
//! a minimal set of victims to preempt; if that fails too, the job is blocked,
//! and depending on the backfill mode it blocks everyone behind it (strict),
//! gets an EASY reservation (the first such job), or is simply skipped (first
//! fit).
//!
//! The pass stops early when nothing left in the queue can fit and nobody
//! can be preempted; the jobs it did not look at share one reason.
//!
//! What the pass does for a job that does not fit now (victims to preempt,
//! an EASY reservation) is in `schedule/blocked.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::model::job::StopCause;
use crate::model::job::{Job, JobId, Placement};
use crate::model::resources::{DeviceKind, GpuMilli, KindUnits};
use crate::model::time::Time;
use crate::pass::capacity::{Capacity, Held, placement_units};
use crate::pass::order::Candidates;
use crate::pass::plan::{PendingReason, Plan, Start};
use crate::pass::snapshot::{PendingKey, Snapshot, device_need};
use crate::pass::victim_pool::VictimPool;
use crate::policies::policy::{Backfill, Policy, PreemptKey};
use crate::policies::quota::{QuotaBlock, QuotaState};
use blocked::Probe;

mod blocked;
#[cfg(test)]
mod cache_tests;
mod elastic;

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
    /// Per base-shape slot (see [`slot`]): the (CPU, memory) points at which
    /// placement failed, with the reason. Valid for the whole pass, since free
    /// capacity only shrinks during a pass, and for every job of that base
    /// shape that needs at least that much CPU and memory.
    no_fit: Vec<Frontier>,
    /// Per base-shape slot: where placement and preemption both failed: skip the job.
    dead: Vec<Frontier>,
    /// Per base-shape slot: where a preemption search found no victims, with
    /// the protected work the job then waits on. Valid until a preemption or
    /// a shrink of this pass gives devices back, or a nominated job's held
    /// devices are released (then cleared).
    no_victims: Vec<Frontier<Option<Time>>>,
    first_blocked: Option<JobId>,
    strict_blocked: Option<JobId>,
    reservation: Option<(JobId, Time)>,
    /// Tasks of each array with a limit that run, or started in this pass (`ArrayLimit`).
    array_running: BTreeMap<JobId, u32>,
    /// Set by a failed `try_preempt`: the job waits on work protected until then.
    protected_wait: Option<Time>,
    /// Planned ends of the jobs started in this pass (index into `plan.starts`).
    started_ends: Vec<Time>,
    /// Pending jobs not yet examined, by devices per replica (kept only
    /// when no preemption is possible: `nothing_more_fits` reads it then).
    remaining: BTreeMap<u32, u32>,
    /// Free devices held for nominated jobs until they are examined.
    held: BTreeMap<JobId, Vec<Held>>,
    preemption_possible: bool,
    /// Within-class preemption may act in this pass (see
    /// [`crate::policies::policy::Overload`]).
    within_class_acts: bool,
    /// GPUs of the nodes that are up, thousandths.
    capacity: GpuMilli,
    /// Starts of the advance reservations to come, ascending.
    advance_starts: Vec<Time>,
    /// The submit time decides no preemption (see [`Pass::cache_key`]).
    submit_free_keys: bool,
}

/// What the pass knows about a job it is about to examine in full.
#[derive(Clone, Copy)]
struct Look {
    key: PendingKey,
    /// Its shape-cache slot.
    slot: usize,
    cpus: u64,
    mem: u64,
    /// Its planned end if started now.
    ends: Time,
    /// It holds a nomination from an earlier preemption.
    nominated: bool,
}

/// Shape caches keep one entry per base shape and per "may use reserved resources".
/// With advance reservations to come, also per how many of their starts
/// the job ends by (`ahead`, of `starts` in all): that decides which of
/// their GPUs it may use, so jobs of one shape fail alike only within it.
fn slot(base: u32, can_use_reserved: bool, ahead: usize, starts: usize) -> usize {
    (base as usize * 2 + usize::from(can_use_reserved)) * (starts + 1) + ahead
}

/// Failed (CPU, memory, preemption key) points of one base shape, and their
/// reasons. A job needing at least as much CPU and memory, with a key no
/// lower in either part, fails too.
#[derive(Clone, Debug, Default)]
struct Frontier<R = u32>(Vec<(u64, u64, PreemptKey, R)>);

/// The key that every key dominates (for failures that do not depend on it).
const ANY_KEY: PreemptKey = PreemptKey { rank: i64::MIN, submit_ms: i64::MIN };

fn dominates(a: PreemptKey, b: PreemptKey) -> bool {
    a.rank <= b.rank && a.submit_ms <= b.submit_ms
}

impl<R: Copy> Frontier<R> {
    /// The reason of a failed point this request dominates, if any.
    fn covers(&self, cpus: u64, mem: u64, key: PreemptKey) -> Option<R> {
        self.0.iter().find(|(c, m, k, _)| *c <= cpus && *m <= mem && dominates(*k, key)).map(|(_, _, _, r)| *r)
    }

    fn add(&mut self, cpus: u64, mem: u64, key: PreemptKey, reason: R) {
        self.0.retain(|(c, m, k, _)| !(cpus <= *c && mem <= *m && dominates(key, *k)));
        self.0.push((cpus, mem, key, reason));
    }
}

impl<'s> Pass<'s> {
    fn new(snap: &'s Snapshot, now: Time) -> Pass<'s> {
        let policy = snap.policy();
        let mut nominations: BTreeMap<JobId, Vec<JobId>> = BTreeMap::new();
        // Only jobs asked to stop can be stopping for someone.
        for j in snap.running.stopping().filter_map(|e| snap.job(e.id)) {
            if let Some(r) = j.running()
                && let Some(StopCause::Preempted { for_job } | StopCause::Resized { for_job: Some(for_job) }) =
                    &r.stopping
                && snap.job(*for_job).is_some_and(|f| f.running().is_none())
            {
                nominations.entry(*for_job).or_default().push(j.id);
            }
        }
        let quota = QuotaState::new(&snap.queues, snap.queue_usage.iter().map(|(q, u)| (q, *u)))
            .with_kinds(snap.queue_kind_usage.iter().map(|(q, u)| (q, *u)));
        let preemption_possible = !nominations.is_empty() || (policy.preemption.any() && snap.running_count() > 0);
        // The starts of advance reservations to come, ascending (the shape caches' slots, `slot`).
        let mut advance_starts: Vec<Time> =
            snap.reservations.iter().filter(|r| r.start > now && r.end > now).map(|r| r.start).collect();
        advance_starts.sort();
        advance_starts.dedup();
        let slots = snap.shapes.bases.len() * 2 * (advance_starts.len() + 1);
        let mut cap = Capacity::new(snap);
        cap.keep_reservations(now);
        let mut held = BTreeMap::new();
        for (job, placement) in &snap.nominations {
            // An elastic job stopping to restart at another size holds its new placement meanwhile.
            if snap.job(*job).is_some_and(|j| j.running().is_none() || j.is_resizing()) {
                held.insert(*job, placement.iter().map(|r| cap.hold(r)).collect());
            }
        }
        // A victim's unclaimed devices may be claimed by anyone (and waited for).
        let preemption_possible = preemption_possible || !held.is_empty() || !cap.releasing.is_empty();
        // The overload as this pass finds it decides whether within-class
        // preemption acts; what the pass leaves waiting is carried over (`run`).
        let capacity = snap.gpu_capacity();
        // Jobs waiting for others to end are not demand (computed only when a gate needs it).
        let unready = policy.preemption.overload.as_ref().map_or(0, |_| unready_gpu(snap, now));
        let overloaded_since = policy
            .preemption
            .overload
            .as_ref()
            .and_then(|g| g.next(snap.overloaded_since, snap.pending_gpu.saturating_sub(unready), capacity, now));
        let within_class_acts = policy.preemption.overload.as_ref().is_none_or(|g| g.acts(overloaded_since, now));
        let after_now = (Time::from_millis(now.as_millis().saturating_add(1)), JobId(0));
        let promotion = snap.promotions.range(after_now..).next().map(|(t, _)| *t);
        let urgent = snap.urgent.range(after_now..).next().map(|(t, _)| *t);
        // The next begin time: the pass after it may start that job.
        let begin = snap.begins.range(after_now..).next().map(|(t, _)| *t);
        // The next time a queue's window opens or closes, or an advance reservation's.
        let window = snap.queues.values().filter_map(|q| q.windows.as_ref()?.next_change(now)).min();
        let reserved = snap.reservations.iter().flat_map(|r| [r.start, r.end]).filter(|t| *t > now).min();
        let window = window.into_iter().chain(reserved).min();
        Pass {
            snap,
            policy,
            now,
            cap,
            quota,
            plan: Plan {
                now,
                overloaded_since,
                wake_at: promotion.into_iter().chain(begin).chain(window).chain(urgent).min(),
                window_stops: window_stops(snap, now),
                power_stops: crate::pass::power::over_budget_stops(snap),
                late: late_jobs(snap, now),
                // Most pending jobs get a line: one allocation, not a dozen regrowths.
                waiting: Vec::with_capacity(snap.pending_count()),
                ..Plan::default()
            },
            nominations,
            taken: BTreeSet::new(),
            pool: None,
            no_fit: vec![Frontier::default(); slots],
            dead: vec![Frontier::default(); slots],
            no_victims: vec![Frontier::default(); slots],
            first_blocked: None,
            strict_blocked: None,
            reservation: None,
            started_ends: Vec::new(),
            array_running: array_running(snap),
            protected_wait: None,
            remaining: if preemption_possible { BTreeMap::new() } else { snap.pending_by_devices.clone() },
            held,
            preemption_possible,
            within_class_acts,
            capacity,
            advance_starts,
            submit_free_keys: policy.ordering == crate::policies::policy::Ordering::Multifactor
                && policy.weights.age_per_hour == 0.0
                && policy.weights.preemption_age_per_hour == 0.0,
        }
    }

    /// A preemption key as the shape cache compares it: without age weights
    /// the submit time decides no preemption, so a failed search stands for
    /// every job of the shape at that level or above, whenever submitted.
    fn cache_key(&self, k: PreemptKey) -> PreemptKey {
        if self.submit_free_keys { PreemptKey { submit_ms: i64::MIN, ..k } } else { k }
    }

    fn can_use_reserved(&self, ends: Time) -> bool {
        self.reservation.is_none_or(|(_, t)| ends <= t && t != Time::NEVER)
    }

    fn run(mut self) -> Plan {
        let mut candidates = Candidates::new(self.snap, self.now);
        while let Some(key) = candidates.next_job() {
            let id = key.id;
            self.plan.stats.examined += 1;
            let Some((shape, base)) = self.snap.shapes.get(key.shape) else { continue };
            let host = (shape.cpus_milli, shape.memory_mb);
            // Only a pass that can preempt nobody stops early (`nothing_more_fits`).
            if !self.preemption_possible {
                let need = device_need(&base.gpu);
                if let Some(c) = self.remaining.get_mut(&need) {
                    *c = c.saturating_sub(1);
                    if *c == 0 {
                        self.remaining.remove(&need);
                    }
                }
            }
            if let Some(blocked_by) = self.strict_blocked {
                self.plan.wait(id, PendingReason::HeadOfLine { blocked_by });
                self.plan.others = Some(PendingReason::HeadOfLine { blocked_by });
                break;
            }
            let ends = self.now.plus(Duration::from_millis(key.left_ms));
            let ends = if key.left_ms == u64::MAX { Time::NEVER } else { ends };
            let ahead = self.advance_starts.iter().filter(|s| ends <= **s).count();
            let slot = slot(shape.base, self.can_use_reserved(ends), ahead, self.advance_starts.len());
            let nominated = self.held.remove(&id);
            if let Some(held) = &nominated {
                for r in held {
                    self.cap.release(r);
                }
                // Free capacity grows here: what the job does not take stays
                // free for the rest of the pass.
                self.capacity_grew();
            }
            // A reservation's own job is not `simple`: it neither reads nor feeds the caches.
            if key.simple
                && nominated.is_none()
                && let Some(reason) = self.dead[slot].covers(host.0, host.1, self.cache_key(key.pkey))
            {
                self.plan.stats.cache_hits += 1;
                self.plan.waiting.push((id, reason));
                continue;
            }
            let Some(job) = self.snap.jobs.get(&id) else { continue };
            let look = Look { key, slot, cpus: host.0, mem: host.1, ends, nominated: nominated.is_some() };
            // A job of an advance reservation whose window is open runs on its GPUs only.
            self.cap.member = self.member_of(job);
            self.examine(job, &look, &mut candidates);
            self.cap.member = None;
            if self.nothing_more_fits() {
                if self.snap.pending_count() > self.plan.starts.len() + self.plan.waiting.len() {
                    self.plan.others = Some(PendingReason::Queued);
                }
                break;
            }
        }
        if let Some(gate) = &self.policy.preemption.overload {
            let started: GpuMilli =
                self.plan.starts.iter().filter_map(|s| self.snap.job(s.job)).map(|j| j.spec.gpu_units()).sum();
            let waiting =
                self.snap.pending_gpu.saturating_sub(started).saturating_sub(unready_gpu(self.snap, self.now));
            let since = gate.next(self.plan.overloaded_since, waiting, self.capacity, self.now);
            self.plan.overloaded_since = since;
            self.plan.wake_at = [self.plan.wake_at, gate.acts_at(since, self.now)].into_iter().flatten().min();
        }
        self.grow_elastic();
        // Nominated jobs the pass did not reach keep their nominations.
        for job in std::mem::take(&mut self.held).into_keys() {
            if let Some(p) = self.snap.nominations.get(&job) {
                self.plan.nominated.push((job, p.clone()));
            }
        }
        if let Some(pool) = self.pool.take() {
            pool.keep(self.snap);
        }
        self.plan
    }

    /// Looks at one job in full: gates, placement, preemption, backfill.
    fn examine(&mut self, job: &'s Job, look: &Look, candidates: &mut Candidates<'_>) {
        let Look { key, slot, cpus, mem, ends, nominated } = *look;
        let id = job.id;
        if let Some(reason) = self.gate(job) {
            let quota_blocked = matches!(reason, PendingReason::Quota(_));
            let r = self.plan.wait(id, reason);
            // Quota only fills up during a pass: the whole shape is blocked.
            if quota_blocked && key.simple {
                self.dead[slot].add(0, 0, ANY_KEY, r);
            }
            return;
        }
        // An elastic job resized by an earlier pass starts on what was held for it.
        if nominated && self.start_at_nomination(job, ends, candidates) {
            return;
        }
        // A nominated job just got its held devices back: cached failures do not apply to it.
        let cacheable = self.cacheable(key.shape) && !nominated && job.spec.reservation.is_none();
        match self.try_place(job, slot, (cpus, mem), cacheable) {
            Ok(placement) => {
                let units = placement_units(self.snap, &placement);
                let by_kind = self.snap.units_by_kind(&placement);
                let checked = self
                    .quota
                    .check(&self.snap.queues, &job.spec.queue, units)
                    .and_then(|()| self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &by_kind));
                let (placement, units, by_kind) = match checked {
                    Ok(()) => (placement, units, by_kind),
                    Err(block) => {
                        for r in &placement {
                            self.cap.uncommit(r, id);
                        }
                        // An any-GPU job placed on a kind at its queue's maximum tries the other kinds.
                        let QuotaBlock::KindAtMax { kind: full, .. } = &block else {
                            self.plan.wait(id, PendingReason::Quota(block));
                            return;
                        };
                        match self.steer_from(job, *full) {
                            Some(found) => found,
                            None => {
                                self.plan.wait(id, PendingReason::Quota(block));
                                return;
                            }
                        }
                    }
                };
                self.quota.add(&self.snap.queues, &job.spec.queue, units);
                self.quota.add_kinds(&job.spec.queue, &by_kind);
                candidates.started(units);
                self.plan.starts.push(Start { job: id, placement, backfilled: self.first_blocked.is_some() });
                self.started_ends.push(ends);
                self.array_started(job);
            }
            Err(reason) => {
                // Searches that fail alike are cached as placements are (`no_victims`).
                let known = (cacheable && key.simple && !self.nominations.contains_key(&id)).then(|| Probe {
                    slot,
                    cpus,
                    mem,
                    key: self.cache_key(key.pkey),
                });
                if self.try_preempt(job, ends, candidates, known) {
                    return;
                }
                let protected = self.protected_wait.take();
                if matches!(reason, PendingReason::NoFit { .. }) {
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
                // A job waiting on protected work is blocked all the same; its reason says until when.
                let reason = protected.map_or(reason, |until| PendingReason::Protected { until });
                let r = self.plan.wait(id, reason);
                if cacheable && key.simple && !self.nominations.contains_key(&id) {
                    let cached = self.cache_key(key.pkey);
                    self.dead[slot].add(cpus, mem, cached, r);
                }
            }
        }
    }

    /// An any-GPU job whose placement fell on `full`, a kind at its queue's
    /// maximum: a placement on another kind it may use whose maximum has room,
    /// committed, with its units. `None` for a job that named its kind.
    fn steer_from(&mut self, job: &Job, full: DeviceKind) -> Option<(Placement, GpuMilli, KindUnits)> {
        if job.spec.replica.gpu_kind.is_some() {
            return None;
        }
        let ends = planned_end(job, self.now);
        for kind in DeviceKind::ALL.into_iter().filter(|k| *k != full && job.spec.kind_allows(*k)) {
            let mut spec = (*job.spec).clone();
            spec.replica.gpu_kind = Some(kind);
            let on_kind = Job { spec: std::sync::Arc::new(spec), ..job.clone() };
            let Ok(placement) = self.cap.place_job(&on_kind, ends, self.policy.placement) else { continue };
            let units = placement_units(self.snap, &placement);
            let by_kind = self.snap.units_by_kind(&placement);
            let fits = self
                .quota
                .check(&self.snap.queues, &job.spec.queue, units)
                .and_then(|()| self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &by_kind));
            if fits.is_ok() {
                return Some((placement, units, by_kind));
            }
            for r in &placement {
                self.cap.uncommit(r, job.id);
            }
        }
        None
    }

    /// A task of a limited array started in this pass: it counts against its array's limit.
    fn array_started(&mut self, job: &Job) {
        if let Some(a) = job.spec.array {
            *self.array_running.entry(a.of).or_default() += 1;
        }
    }

    /// Reasons that need no placement search: dependencies, back-off, quota.
    fn gate(&self, job: &Job) -> Option<PendingReason> {
        // (job, whether it must have succeeded: Some(true) afterok, Some(false) afternotok, None afterany)
        let deps = (job.spec.dependencies.iter().map(|d| (*d, Some(true))))
            .chain(job.spec.after_not_ok.iter().map(|d| (*d, Some(false))))
            .chain(job.spec.after_any.iter().map(|d| (*d, None)));
        for (d, must) in deps {
            match (self.snap.finished(d), must) {
                (None, _) => return Some(PendingReason::Dependency { on: d }),
                (Some(ok), Some(want)) if ok != want => {
                    return Some(PendingReason::DependencyFailed { on: d, succeeded: ok });
                }
                _ => {}
            }
        }
        if let Some(at) = job.spec.begin.filter(|at| *at > self.now) {
            return Some(PendingReason::Begin { at });
        }
        if let Some(w) = closed_window(self.snap, &job.spec.queue, self.now) {
            return Some(PendingReason::Window { queue: job.spec.queue.clone(), opens: w.next_change(self.now) });
        }
        if job.not_before > self.now {
            return Some(PendingReason::NotBefore { until: job.not_before });
        }
        if let Some(name) = &job.spec.reservation {
            match self.snap.reservations.iter().find(|r| r.name == *name) {
                None => return Some(PendingReason::ReservationGone { name: name.clone() }),
                Some(r) if r.end <= self.now => return Some(PendingReason::ReservationGone { name: name.clone() }),
                Some(r) if !r.admits(&job.spec) => return Some(PendingReason::NotInReservation { name: name.clone() }),
                Some(r) if r.start > self.now => {
                    return Some(PendingReason::ReservationStarts { name: name.clone(), at: r.start });
                }
                Some(_) => {}
            }
        }
        if let Some(a) = job.spec.array
            && self.array_running.get(&a.of).copied().unwrap_or(0) >= a.limit
        {
            return Some(PendingReason::ArrayLimit { of: a.of, limit: a.limit });
        }
        let units = job.spec.gpu_units();
        if let Err(block) = self.quota.check(&self.snap.queues, &job.spec.queue, units) {
            return Some(PendingReason::Quota(block));
        }
        // A job that names its kind is held by that kind's maximum before any search;
        // one that takes any GPU is checked once placed, on the kinds it got.
        let kind = job.spec.replica.gpu_kind?;
        let mut by_kind = crate::model::resources::KindUnits::default();
        by_kind.add(kind, units);
        self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &by_kind).err().map(PendingReason::Quota)
    }

    /// Whether jobs of this shape fail alike (anti-affinity makes placement
    /// Whether jobs of this shape fail alike (anti-affinity makes placement depend on the job itself).
    fn cacheable(&self, shape: u32) -> bool {
        self.snap
            .shapes
            .get(shape)
            .is_some_and(|(_, b)| b.anti_affinity.is_empty() && (!b.has_labels || !self.cap.anti_affinity_in_use))
    }

    fn try_place(
        &mut self,
        job: &'s Job,
        slot: usize,
        (cpus, mem): (u64, u64),
        cacheable: bool,
    ) -> Result<Placement, PendingReason> {
        if cacheable
            && let Some(r) = self.no_fit[slot].covers(cpus, mem, PreemptKey { rank: i64::MAX, submit_ms: i64::MAX })
        {
            self.plan.stats.cache_hits += 1;
            return Err(self.plan.reason_table[r as usize].clone());
        }
        let ends = planned_end(job, self.now);
        if let Ok(p) = self.cap.place_job(job, ends, self.policy.placement) {
            return Ok(p);
        }
        let reason = match self.reservation {
            Some((for_job, at)) if !self.can_use_reserved(ends) => {
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
            _ => self.advance_reason(job, ends).unwrap_or_else(|| self.cap.miss_reason(job)),
        };
        if cacheable {
            self.no_fit[slot].add(cpus, mem, ANY_KEY, self.plan.reason_table.len() as u32);
            self.plan.reason_table.push(reason.clone());
        }
        Err(reason)
    }

    /// The open advance reservation `job` runs in, if any.
    fn member_of(&self, job: &Job) -> Option<usize> {
        let name = job.spec.reservation.as_ref()?;
        self.snap.reservations.iter().position(|r| r.name == *name && r.active(self.now) && r.admits(&job.spec))
    }

    /// When an advance reservation holds GPUs a job does not fit without:
    /// the one it would have been placed on, else one holding free GPUs of
    /// a node it may use (it waits for them as for the rest).
    fn advance_reason(&mut self, job: &Job, ends: Time) -> Option<PendingReason> {
        if self.cap.keeps_no_reservation() || self.cap.member.is_some() {
            return None;
        }
        self.cap.ignore_advance = true;
        let placed = self.cap.place_job(job, ends, self.policy.placement);
        self.cap.ignore_advance = false;
        let i = match placed {
            Ok(p) => {
                for r in &p {
                    self.cap.uncommit(r, job.id);
                }
                p.iter().find_map(|r| self.cap.reservation_over(r.node.0, r.gpus, ends))
            }
            Err(()) => (0..self.cap.node_count())
                .filter(|n| self.cap.eligible(*n, job))
                .find_map(|n| self.cap.reservation_over(n, self.cap.free[n as usize].gpus, ends)),
        }?;
        let r = self.snap.reservations.get(i)?;
        Some(PendingReason::ReservedAhead { name: r.name.clone(), at: r.start })
    }

    /// True when no remaining job could start or preempt.
    fn nothing_more_fits(&self) -> bool {
        if self.preemption_possible {
            return false;
        }
        let Some(&min_need) = self.remaining.keys().next() else { return true };
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

/// GPUs (thousandths) of pending jobs that cannot start yet: a job they
/// depend on has not ended as they need, or their begin time has not come.
/// A pipeline's later stages, or tonight's batch, are not demand now (the
/// overload gate, and so preemption, must not act on them). O(pending jobs
/// with dependencies or begin times).
fn unready_gpu(snap: &Snapshot, now: Time) -> GpuMilli {
    let ready = |spec: &crate::model::job::JobSpec| {
        spec.dependencies.iter().all(|d| snap.finished(*d) == Some(true))
            && spec.after_not_ok.iter().all(|d| snap.finished(*d) == Some(false))
            && spec.after_any.iter().all(|d| snap.finished(*d).is_some())
    };
    let later =
        snap.begins.range((Time::from_millis(now.as_millis().saturating_add(1)), JobId(0))..).map(|(_, id)| *id);
    // Jobs of queues whose windows are closed wait for them to open.
    let closed: BTreeSet<&str> = snap
        .queues
        .values()
        .filter(|q| q.windows.as_ref().is_some_and(|w| !w.is_open(now)))
        .map(|q| &*q.name)
        .collect();
    // Walked only when a window is closed: the walk is over every pending job.
    let shut = (!closed.is_empty())
        .then(|| snap.pending_ids().filter(|id| snap.job(*id).is_some_and(|j| closed.contains(&*j.spec.queue))))
        .into_iter()
        .flatten();
    let unready: BTreeSet<JobId> = snap
        .pending_with_deps
        .iter()
        .copied()
        .filter(|id| snap.job(*id).is_some_and(|j| !ready(&j.spec)))
        .chain(later)
        .chain(shut)
        .collect();
    unready.iter().filter_map(|id| snap.job(*id)).map(|j| j.spec.gpu_units()).sum()
}

/// The windows of `queue`, if it has some and they are closed at `now`.
fn closed_window<'a>(snap: &'a Snapshot, queue: &str, now: Time) -> Option<&'a crate::calendar::windows::QueueWindows> {
    snap.queues.get(queue).and_then(|q| q.windows.as_deref()).filter(|w| !w.is_open(now))
}

/// Running jobs of queues that stop their work when their windows close, and are closed now.
fn window_stops(snap: &Snapshot, now: Time) -> Vec<JobId> {
    let stopping: BTreeSet<&str> = snap
        .queues
        .values()
        .filter(|q| q.windows.as_ref().is_some_and(|w| w.stop_at_end && !w.is_open(now)))
        .map(|q| &*q.name)
        .collect();
    if stopping.is_empty() {
        return Vec::new();
    }
    snap.running_jobs().filter(|j| stopping.contains(&*j.spec.queue)).map(|j| j.id).collect()
}

/// Jobs with deadlines that will miss them: pending ones (all in the
/// `urgent` index) and running ones.
fn late_jobs(snap: &Snapshot, now: Time) -> Vec<(JobId, crate::calendar::deadline::Late)> {
    let pending = snap.urgent.iter().filter_map(|(_, id)| snap.job(*id)).map(|j| (j, None));
    let running =
        snap.running.with_deadlines().filter_map(|e| snap.job(e.id)).map(|j| (j, j.running().map(|r| r.started)));
    pending
        .chain(running)
        .filter_map(|(j, started)| crate::calendar::deadline::late(&j.spec, now, started).map(|l| (j.id, l)))
        .collect()
}

/// Tasks running now of each array that limits its running tasks.
fn array_running(snap: &Snapshot) -> BTreeMap<JobId, u32> {
    snap.running.array_tasks.clone()
}
