//! The pending index: pending jobs in per-group sorted sets whose keys do
//! not change while a job waits (`order.rs` merges the groups' heads), and
//! the counts a pass reads without looking at every pending job.

use std::cmp::Reverse;
use std::time::Duration;

use super::*;
use crate::policies::policy::WithinLevel;

/// Milli-points a job loses within its level for its Gittins cost in
/// GPU-seconds (`gittins.rs`): 6% of a level per doubling above a minute
/// (60 of the default's 1,000 points), never a whole level, so levels stay
/// strict whatever `service_level_weight` is. A job with no history loses
/// none (it is as fresh as least attained service assumes); one that has
/// outrun every run like it goes to the back of its level.
fn gittins_points(policy: &Policy, job: &Job) -> i64 {
    let level = policy.weights.service_level * 1000.0;
    let back = (level as i64 - 1).max(0);
    let Some(samples) = job.spec.similar_runs.as_deref() else { return 0 };
    let attained = u64::try_from(job.service.prior_runtime.as_millis()).unwrap_or(u64::MAX);
    let Some(cost_ms) = crate::history::gittins::gittins_cost(samples, attained) else { return back };
    let gpu_secs = cost_ms as f64 / 1000.0 * (job.spec.gpu_units().max(1000) as f64 / 1000.0);
    ((0.06 * level * (1.0 + gpu_secs / 60.0).log2()) as i64).clamp(0, back)
}

impl Snapshot {
    pub(super) fn group_of(&self, spec: &JobSpec) -> GroupKey {
        if self.policy.groups_by_user() {
            GroupKey { user: (spec.team.clone(), spec.user.clone()), kinds: spec.fair_share_kinds() }
        } else {
            GroupKey { user: (Arc::from(""), Arc::from("")), kinds: KindMask::ALL }
        }
    }

    /// A pending job's entry in the index: its group and its sort key.
    pub(crate) fn pending_entry(&self, id: JobId) -> Option<&(GroupKey, PendingKey)> {
        self.pending_keys.get(&id)
    }

    /// Points of a pending job that do not change while it waits, in milli-points (higher first).
    pub(crate) fn static_points(&self, job: &Job) -> i64 {
        let p = &self.policy;
        let submit = job.spec.submit_time.as_millis();
        let level = || i64::from(p.service_level(job.service.prior_gpu_milli_secs / 1000));
        let ms = |d: Option<Duration>| d.map_or(i64::MAX / 4, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4));
        match p.ordering {
            Ordering::Fifo | Ordering::MaxMinFair => -submit,
            Ordering::ShortestFirst => -ms(job.spec.planned_runtime()),
            Ordering::ShortestRemaining => -ms(job.remaining(Time::MIN)),
            Ordering::AttainedService => -(level() * 10_000_000_000_000) - submit,
            Ordering::Multifactor => {
                let within = match p.within_level {
                    WithinLevel::Submit => 0,
                    WithinLevel::Gittins => gittins_points(p, job),
                };
                p.multifactor_points(submit, level() as u32) - within
            }
        }
    }

    pub(super) fn index_pending(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else { return };
        let spec = &job.spec;
        let shape = self.shapes.acquire(
            BaseShape {
                gpu: spec.replica.gpu.clone(),
                gpu_model: spec.replica.gpu_model.clone(),
                gpu_kind: spec.replica.gpu_kind,
                same_label: spec.same_label.clone(),
                replicas: spec.replicas,
                node_selector: spec.node_selector.clone(),
                affinity: spec.affinity.clone(),
                anti_affinity: spec.anti_affinity.clone(),
                has_labels: !spec.labels.is_empty(),
                priority: spec.priority,
                queue: spec.queue.clone(),
            },
            spec.replica.cpus_milli,
            spec.replica.memory_mb,
        );
        let left_ms = job.remaining(Time::MIN).map_or(u64::MAX, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let key = PendingKey {
            class: Reverse(spec.priority),
            points: Reverse(self.static_points(job)),
            submit_ms: spec.submit_time.as_millis(),
            id,
            shape,
            simple: spec.dependencies.is_empty()
                && spec.after_any.is_empty()
                && spec.after_not_ok.is_empty()
                && job.not_before == Time::MIN
                && spec.begin.is_none()
                && spec.reservation.is_none(),
            left_ms,
            pkey: crate::pass::running::preemption_key(&self.policy, job, Time::MIN)
                .unwrap_or(PreemptKey { rank: i64::MAX, submit_ms: i64::MAX }),
        };
        if let Some(at) = self.policy.promotion_time(spec, &job.service) {
            self.promotions.insert((at, id));
        }
        if let Some(at) = spec.begin {
            self.begins.insert((at, id));
        }
        if let Some(at) = crate::calendar::deadline::urgent_at(spec) {
            self.urgent.insert((at, id));
        }
        let group = self.group_of(spec);
        *self.pending_by_devices.entry(device_need(&spec.replica.gpu)).or_default() += 1;
        self.pending_gpu += spec.gpu_units();
        if !(spec.dependencies.is_empty() && spec.after_any.is_empty() && spec.after_not_ok.is_empty()) {
            self.pending_with_deps.insert(id);
        }
        self.pending.entry(group.clone()).or_default().insert(key);
        self.pending_keys.insert(id, (group, key));
    }

    pub(super) fn unindex_pending(&mut self, id: JobId) {
        let Some((group, key)) = self.pending_keys.remove(&id) else { return };
        // A pending job's spec and history do not change, so this is the time it was indexed with.
        if let Some(at) = self.jobs.get(&id).and_then(|j| self.policy.promotion_time(&j.spec, &j.service)) {
            self.promotions.remove(&(at, id));
        }
        if let Some(at) = self.jobs.get(&id).and_then(|j| j.spec.begin) {
            self.begins.remove(&(at, id));
        }
        if let Some(at) = self.jobs.get(&id).and_then(|j| crate::calendar::deadline::urgent_at(&j.spec)) {
            self.urgent.remove(&(at, id));
        }
        if let Some(set) = self.pending.get_mut(&group) {
            set.remove(&key);
            if set.is_empty() {
                self.pending.remove(&group);
            }
        }
        self.shapes.release(key.shape);
        self.pending_with_deps.remove(&id);
        if let Some(job) = self.jobs.get(&id) {
            self.pending_gpu = self.pending_gpu.saturating_sub(job.spec.gpu_units());
            let need = device_need(&job.spec.replica.gpu);
            if let Some(c) = self.pending_by_devices.get_mut(&need) {
                *c -= 1;
                if *c == 0 {
                    self.pending_by_devices.remove(&need);
                }
            }
        }
    }
}
