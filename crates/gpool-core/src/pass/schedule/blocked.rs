//! What a pass does for a job that does not fit now: look for a minimal set
//! of victims to preempt for it (`try_preempt`, per label value for a gang
//! kept on one slice), and, for the first blocked job under EASY backfill,
//! reserve the earliest place it could start as running jobs end
//! (`make_reservation`).

use std::collections::BTreeSet;

use super::Pass;
use crate::model::job::{Job, JobId, Placement};
use crate::model::resources::DeviceKind;
use crate::model::time::Time;
use crate::pass::backfill::{Release, reserve};
use crate::pass::capacity::placement_units;
use crate::pass::order::Candidates;
use crate::pass::plan::{PendingReason, Preempt, PreemptWhy, Reservation, Start};
use crate::pass::preempt::Search;
use crate::pass::running::{RunEntry, preemption_key};
use crate::pass::victim_pool::VictimPool;
use crate::policies::policy::PreemptKey;
use crate::policies::quota::QuotaBlock;

/// Victims for a blocked job, and the placement they make possible.
type Found = (Vec<(JobId, PreemptWhy)>, Placement);

/// What [`Pass::search_victims`] came to.
enum Searched {
    /// Elastic jobs shrank for the job (recorded).
    Shrunk,
    Found(Found),
    /// Nothing; `bare`: not even without the job's CPU and memory.
    Nothing {
        bare: bool,
    },
}

/// A blocked job whose preemption search fails alike for every job of its
/// shape-cache slot that needs at least its CPU and memory and has a key it
/// dominates (`Pass::no_victims`).
#[derive(Clone, Copy)]
pub(super) struct Probe {
    pub(super) slot: usize,
    pub(super) cpus: u64,
    pub(super) mem: u64,
    /// Its preemption key as the caches compare it.
    pub(super) key: PreemptKey,
}

impl<'s> Pass<'s> {
    /// Looks for victims; on success records the preemptions and the job's claim.
    /// `probe`: the job's failures may be cached, and read from the cache.
    pub(super) fn try_preempt(
        &mut self,
        job: &'s Job,
        ends: Time,
        candidates: &mut Candidates<'_>,
        probe: Option<Probe>,
    ) -> bool {
        let prereleased: Vec<JobId> = self.nominations.get(&job.id).cloned().unwrap_or_default();
        if !self.policy.preemption.any() && prereleased.is_empty() {
            return false;
        }
        #[cfg(test)]
        let probe = probe.filter(|_| !crate::pass::UNCACHED.with(std::cell::Cell::get));
        if let Some(p) = probe
            && let Some(protected) = self.no_victims[p.slot].covers(p.cpus, p.mem, p.key)
        {
            self.protected_wait = protected;
            return false;
        }
        let found = self.search_victims(job, ends, &prereleased, probe);
        let bare = matches!(found, Searched::Nothing { bare: true });
        if self.preempt_for(job, ends, found, &prereleased, candidates) {
            // Devices given back.
            self.capacity_grew();
            return true;
        }
        self.protected_wait = self.waits_on_protection(job, ends, &prereleased);
        if let Some(until) = self.protected_wait {
            self.plan.wake_at = Some(self.plan.wake_at.map_or(until, |w| w.min(until)));
        }
        if let Some(p) = probe {
            // A job that fails without host resources fails with any (the search is monotone in them).
            let (cpus, mem) = if bare { (0, 0) } else { (p.cpus, p.mem) };
            self.no_victims[p.slot].add(cpus, mem, p.key, self.protected_wait);
        }
        false
    }

    /// Free capacity grew during the pass: failed searches may not fail now.
    pub(super) fn capacity_grew(&mut self) {
        self.no_victims.iter_mut().for_each(|f| f.0.clear());
    }

    /// Shrinks elastic jobs or finds victims for `job`. With `probe`, a job
    /// that needs host resources is first searched without them when no
    /// elastic job runs: if that fails, so does the job, for every CPU and
    /// memory ask.
    fn search_victims(&mut self, job: &'s Job, ends: Time, prereleased: &[JobId], probe: Option<Probe>) -> Searched {
        // Elastic jobs above their minimum give up replicas before anyone is preempted whole.
        if self.try_shrink(job, ends, prereleased) {
            return Searched::Shrunk;
        }
        if let Some(p) = probe
            && (p.cpus, p.mem) != (0, 0)
            && self.snap.running.elastic == 0
        {
            let mut spec = (*job.spec).clone();
            spec.replica.cpus_milli = 0;
            spec.replica.memory_mb = 0;
            let bare = Job { spec: std::sync::Arc::new(spec), ..job.clone() };
            if self.find_victims(&bare, ends, prereleased).is_none() {
                return Searched::Nothing { bare: true };
            }
        }
        let mut found = self.find_victims(job, ends, prereleased);
        // Preempting others must not take the queue over a per-kind maximum
        // either: an any-GPU job whose victims are on a kind at its maximum
        // looks again on each other kind it may use, as a start does.
        let full = found.as_ref().and_then(|(_, placement)| {
            match self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &self.snap.units_by_kind(placement)) {
                Ok(()) => None,
                Err(QuotaBlock::KindAtMax { kind, .. }) => Some(Some(kind)),
                Err(_) => Some(None),
            }
        });
        if let Some(full) = full {
            found = None;
            if let Some(full) = full
                && job.spec.replica.gpu_kind.is_none()
            {
                for kind in DeviceKind::ALL.into_iter().filter(|k| *k != full && job.spec.kind_allows(*k)) {
                    let mut spec = (*job.spec).clone();
                    spec.replica.gpu_kind = Some(kind);
                    let on_kind = Job { spec: std::sync::Arc::new(spec), ..job.clone() };
                    let Some((victims, placement)) = self.find_victims(&on_kind, ends, prereleased) else { continue };
                    let by_kind = self.snap.units_by_kind(&placement);
                    if self.quota.check_kinds(&self.snap.queues, &job.spec.queue, &by_kind).is_ok() {
                        found = Some((victims, placement));
                        break;
                    }
                }
            }
        }
        found.map_or(Searched::Nothing { bare: false }, Searched::Found)
    }

    /// Records what [`Pass::search_victims`] found: the preemptions and the
    /// job's claim (or its start, or the shrinks already recorded); whether
    /// anything was found.
    fn preempt_for(
        &mut self,
        job: &'s Job,
        ends: Time,
        found: Searched,
        prereleased: &[JobId],
        candidates: &mut Candidates<'_>,
    ) -> bool {
        let (victims, placement) = match found {
            Searched::Shrunk => return true,
            Searched::Nothing { .. } => return false,
            Searched::Found(found) => found,
        };
        let by_kind = self.snap.units_by_kind(&placement);
        if victims.is_empty() && self.cap.fits_free(&placement) {
            // Fits as is (only reachable when the index and the search disagree): start it.
            for r in &placement {
                self.cap.commit(r, job.id);
            }
            let units = placement_units(self.snap, &placement);
            self.quota.add(&self.snap.queues, &job.spec.queue, units);
            self.quota.add_kinds(&job.spec.queue, &by_kind);
            candidates.started(units);
            self.plan.starts.push(Start { job: job.id, placement, backfilled: self.first_blocked.is_some() });
            self.started_ends.push(ends);
            self.array_started(job);
            return true;
        }
        // Victims keep their quota until they have stopped: releasing it now
        // would let their queue start more work in this pass and overshoot.
        let mut waits_for: BTreeSet<JobId> = prereleased.iter().copied().collect();
        for (v, why) in victims {
            self.taken.insert(v);
            if let Some(e) = self.snap.running.get(&v) {
                self.cap.releasing.add(v, &e.placement);
            }
            waits_for.insert(v);
            self.plan.preemptions.push(Preempt { victim: v, for_job: job.id, why });
        }
        // The claim takes the victims' devices it uses; the rest of them stay
        // releasing, for the next job of this pass.
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

    /// A minimal set of victims for `job` and the placement they make
    /// possible (none needed when victims already stopping or their
    /// leftovers do). A gang that must stay on one value of a label (a TPU
    /// slice) is searched one value at a time, lowest first, as it is placed.
    /// When a job that found no victims could preempt what it needs once the
    /// work protected by a minimum run time is no longer protected: the last
    /// protection of the victims it would then choose.
    fn waits_on_protection(&mut self, job: &Job, ends: Time, prereleased: &[JobId]) -> Option<Time> {
        let pool = self.pool.as_ref().filter(|p| p.any_protected())?;
        let search = Search {
            cap: &self.cap,
            pool,
            quota: &self.quota,
            job,
            key: preemption_key(self.policy, job, self.now).filter(|_| self.within_class_acts),
            units: job.spec.gpu_units(),
            ends,
            taken: &self.taken,
            prereleased,
            job_q: pool.queue_ix(self.snap, &job.spec.queue),
            ignore_protection: true,
        };
        let (victims, _) = search.run()?;
        let until = |id: JobId| pool.list.iter().find(|c| c.id == id).and_then(|c| c.protected_until);
        victims.iter().filter_map(|(id, _)| until(*id)).max()
    }

    /// A superset of the rules of `Search::allowed`, read from counts: whether
    /// any running job could be preempted for `job` by priority, within its
    /// class (when it has a key there), or by reclaim.
    fn victims_conceivable(&self, job: &Job, has_key: bool) -> bool {
        let p = &self.policy.preemption;
        let class = job.spec.priority;
        (p.by_priority && self.snap.running.preemptible_below(class))
            || (p.within_class && has_key && self.snap.running.preemptible_in(class))
            || (p.reclaim && self.quota.within_guarantee(&self.snap.queues, &job.spec.queue, job.spec.gpu_units()))
    }

    fn find_victims(
        &mut self,
        job: &Job,
        ends: Time,
        prereleased: &[JobId],
    ) -> Option<(Vec<(JobId, PreemptWhy)>, Placement)> {
        // Without a key, nothing is preempted within the class.
        let key = preemption_key(self.policy, job, self.now).filter(|_| self.within_class_acts);
        let units = job.spec.gpu_units();
        if prereleased.is_empty() && self.cap.releasing.is_empty() && !self.victims_conceivable(job, key.is_some()) {
            // Nobody running could be a victim: the pool (a walk over every running job) is not built.
            return None;
        }
        let values: Vec<Option<(std::sync::Arc<str>, String)>> = match &job.spec.same_label {
            None => vec![None],
            Some(label) => self.cap.label_values(job, label).into_iter().map(|v| Some((label.clone(), v))).collect(),
        };
        let mut found = None;
        for only in values {
            self.cap.restrict_to(only);
            let pool = self.pool.get_or_insert_with(|| VictimPool::for_pass(self.snap, self.now));
            let search = Search {
                cap: &self.cap,
                pool,
                quota: &self.quota,
                job,
                key,
                units,
                ends,
                taken: &self.taken,
                prereleased,
                job_q: pool.queue_ix(self.snap, &job.spec.queue),
                ignore_protection: false,
            };
            found = if search.possible() {
                self.plan.stats.preemption_searches += 1;
                search.run()
            } else {
                // Nobody to preempt, but a victim's leftover devices may do.
                search.releasing_only().map(|p| (Vec::new(), p))
            };
            if found.is_some() {
                break;
            }
        }
        self.cap.restrict_to(None);
        found
    }

    /// An EASY reservation for a blocked job, when none is held yet: the
    /// earliest time and the nodes it could start on as running jobs end;
    /// jobs behind it may use what it holds only if they end by then.
    pub(super) fn make_reservation(&mut self, job: &Job) {
        // Before `open_reservation_after`, only a reservation at a known time
        // is kept, so jobs without a planned end are not worth releasing.
        let open = self.now.since(job.spec.submit_time) >= self.policy.open_reservation_after;
        let mut releases: Vec<Release<'_>> = Vec::new();
        let release = |e: &'s RunEntry| {
            let at = if e.stopping || self.taken.contains(&e.id) {
                self.now.plus(e.grace)
            } else {
                e.expected_end(self.now)
            };
            (open || at != Time::NEVER).then_some(Release { at, placement: &e.placement })
        };
        if open {
            releases.extend(self.snap.running.values().filter_map(release));
        } else {
            // Only known ends count: jobs stopping or with a planned end, and
            // this pass's victims (any other job's end is `NEVER`), by id as
            // a walk over all would find them.
            let known = self.snap.running.known_ends().union(&self.taken);
            releases.extend(known.filter_map(|id| self.snap.running.get(id)).filter_map(release));
        }
        for (s, at) in self.plan.starts.iter().zip(&self.started_ends) {
            if open || *at != Time::NEVER {
                releases.push(Release { at: *at, placement: &s.placement });
            }
        }
        if releases.is_empty() {
            return;
        }
        if let Some((at, placement)) = reserve(&self.cap, job, releases) {
            if at == Time::NEVER && !open {
                return;
            }
            let mut nodes: Vec<_> = placement.iter().map(|r| r.node).collect();
            nodes.dedup();
            self.cap.set_reservation(&placement, at);
            self.plan.reservation = Some(Reservation { job: job.id, at, nodes });
            self.reservation = Some((job.id, at));
        }
    }
}
