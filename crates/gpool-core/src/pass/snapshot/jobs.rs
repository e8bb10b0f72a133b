//! A job's life in the snapshot, event by event: submitted (or restored
//! pending), delayed, nominated by a plan (`carry_over`), removed, started,
//! asked to stop and stopped. Each event checks its preconditions first and
//! refuses with a `SnapshotError`, changing nothing, instead of corrupting
//! the indexes.

use super::*;

impl Snapshot {
    /// Adds a pending job.
    pub fn submit(&mut self, id: JobId, spec: JobSpec) -> Result<(), SnapshotError> {
        self.insert_job(id, Arc::new(spec), Service::default())?;
        Ok(())
    }

    /// Adds a pending job that already has a history (restored from a store).
    pub fn restore_pending(
        &mut self,
        id: JobId,
        spec: Arc<JobSpec>,
        service: Service,
        not_before: Time,
    ) -> Result<(), SnapshotError> {
        self.insert_job(id, spec, service)?;
        if let Some(j) = self.jobs.get_mut(&id) {
            j.not_before = not_before;
        }
        Ok(())
    }

    fn insert_job(&mut self, id: JobId, spec: Arc<JobSpec>, service: Service) -> Result<(), SnapshotError> {
        if self.jobs.contains_key(&id) {
            return Err(SnapshotError::DuplicateJob(id));
        }
        self.ledger.change_rate(&spec.team, &spec.user, &KindUnits::default(), true);
        self.demand.record(&spec);
        self.jobs.insert(id, Job { id, spec, state: JobState::Pending, service, not_before: Time::MIN });
        self.index_pending(id);
        Ok(())
    }

    /// Delays a pending job (retry back-off, hold).
    pub fn set_not_before(&mut self, id: JobId, t: Time) -> Result<(), SnapshotError> {
        let j = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        j.not_before = t;
        if self.pending_keys.contains_key(&id) {
            self.unindex_pending(id);
            self.index_pending(id);
        }
        Ok(())
    }

    /// Takes a plan's nominations: pending jobs that preempted others and
    /// will take a placement once their victims
    /// are gone. The next pass holds the free part of each such placement
    /// until it examines the job, so that a job the order puts first cannot
    /// take what was freed. For reclaim, that job would be another queue's,
    /// borrowing, and reclaim would take it back again: a loop. For priority,
    /// a higher class borrowing from another queue's guarantee took the
    /// space, the freed job reclaimed it, the preemptor preempted it again:
    /// a loop of three (found by the property tests). A nomination lives
    /// until the job is examined again; it is renewed only while the job
    /// still waits for its victims. Within-class preemptors are held too: a
    /// higher class took what one freed, a reclaim stopped it, and the
    /// preemptor preempted again, the same loop (docs/scheduling.md).
    ///
    /// Also carries the overload state the pass saw (see [`crate::policies::policy::Overload`]).
    pub fn carry_over(&mut self, plan: &crate::pass::plan::Plan) {
        self.overloaded_since = plan.overloaded_since;
        use crate::pass::plan::ResizeWhy;
        let shrunk_for = |job: JobId| {
            plan.resizes.iter().any(|r| matches!(r.why, ResizeWhy::Shrink { for_job, .. } if for_job == job))
        };
        let held_for = |job: JobId| plan.preemptions.iter().any(|p| p.for_job == job) || shrunk_for(job);
        // An elastic job restarting at another size keeps its nomination
        // while it stops, and once back in the queue until it starts.
        let resizing =
            |job: JobId| plan.resizes.iter().any(|r| r.job == job) || self.jobs.get(&job).is_some_and(Job::is_resizing);
        let held: BTreeMap<JobId, Placement> = plan
            .nominated
            .iter()
            .filter(|(id, _)| {
                (self.pending_keys.contains_key(id) && (held_for(*id) || self.nominations.contains_key(id)))
                    || resizing(*id)
            })
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        self.nominations = held;
    }

    /// Removes a pending job (cancelled, or failed for good).
    pub fn remove_pending(&mut self, id: JobId, success: bool) -> Result<(), SnapshotError> {
        let j = self.jobs.get(&id).ok_or(SnapshotError::UnknownJob(id))?;
        if j.running().is_some() {
            return Err(SnapshotError::NotPending(id));
        }
        self.unindex_pending(id);
        self.jobs.remove(&id);
        self.nominations.remove(&id);
        self.finished.insert(id, success);
        self.clear_avoid(id);
        Ok(())
    }

    /// Starts a pending job on `placement` at `now`.
    pub fn start(&mut self, id: JobId, placement: Placement, now: Time) -> Result<(), SnapshotError> {
        let job = self.jobs.get(&id).ok_or(SnapshotError::UnknownJob(id))?;
        if job.running().is_some() {
            return Err(SnapshotError::NotPending(id));
        }
        if !(job.spec.replicas as usize..=job.spec.most_replicas() as usize).contains(&placement.len()) {
            return Err(SnapshotError::ReplicaCount { job: id, got: placement.len(), want: job.spec.replicas });
        }
        if let Some(key) = &job.spec.same_label {
            let value = |r: &ReplicaPlacement| self.node(r.node).and_then(|n| n.labels.get(&**key).cloned());
            let first = placement.first().and_then(value);
            if first.is_none() || placement.iter().any(|r| value(r) != first) {
                return Err(SnapshotError::SplitGang { job: id, label: key.to_string() });
            }
        }
        // Check everything before changing anything: a refused start changes
        // nothing. Each replica is taken from a trial copy of its node's free
        // resources, so replicas that share a node are checked together.
        let mut trial: BTreeMap<NodeId, NodeFree> = BTreeMap::new();
        for r in &placement {
            let e = self.nodes.get(r.node.index()).ok_or(SnapshotError::UnknownNode(r.node))?;
            if r.gpus & !low_bits(e.gpu_slots.len()) != 0 || r.mig & !e.mig_exists != 0 {
                return Err(self.busy(id, r.node, "a device that does not exist"));
            }
            let f = trial.entry(r.node).or_insert_with(|| self.free[r.node.index()].clone());
            match r.share {
                Some(share) => {
                    let slot = r.gpus.trailing_zeros() as usize;
                    let device_mb = e.gpu_slots.get(slot).map_or(0, |&di| e.node.devices[di].memory_mb);
                    let room = if f.gpus & r.gpus != 0 {
                        Some((1000, device_mb))
                    } else {
                        shares::left(&f.shares, slot, device_mb)
                    };
                    if r.gpus.count_ones() != 1 || !room.is_some_and(|room| shares::fits(room, share)) {
                        return Err(self.busy(id, r.node, "room on a shared GPU"));
                    }
                }
                None if r.gpus & !f.gpus != 0 => return Err(self.busy(id, r.node, "a GPU")),
                None => {}
            }
            if r.mig & !f.mig != 0 {
                return Err(self.busy(id, r.node, "a MIG instance"));
            }
            if r.cpus_milli > f.cpus {
                return Err(self.busy(id, r.node, "enough CPU"));
            }
            if r.memory_mb > f.mem {
                return Err(self.busy(id, r.node, "enough memory"));
            }
            f.take(r);
        }
        for (node, f) in trial {
            self.free[node.index()] = f;
            self.touch_node(node.index());
        }
        let by_kind = self.units_by_kind(&placement);
        let mut units = 0;
        for r in &placement {
            let e = &mut self.nodes[r.node.index()];
            e.jobs.insert(id);
            units += r.gpu_units() + e.mig_units(r.mig);
        }
        self.unindex_pending(id);
        self.nominations.remove(&id);
        let half_life = self.policy.fair_share.half_life;
        self.ledger.advance(now, half_life);
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        self.ledger.change_rate(&job.spec.team, &job.spec.user, &by_kind, true);
        *self.queue_usage.entry(job.spec.queue.clone()).or_default() += units;
        self.queue_kind_usage.entry(job.spec.queue.clone()).or_default().add_all(&by_kind);
        job.state = JobState::Running(Running { placement, started: now, gpu_milli: units, by_kind, stopping: None });
        let protect = job
            .spec
            .min_runtime
            .unwrap_or_else(|| self.queues.get(&job.spec.queue).map_or(std::time::Duration::ZERO, |q| q.min_runtime));
        self.running.insert(job, protect, &self.policy);
        self.clear_avoid(id);
        Ok(())
    }

    fn busy(&self, job: JobId, node: NodeId, what: &'static str) -> SnapshotError {
        let node = self.nodes.get(node.index()).map_or_else(|| node.to_string(), |e| e.node.name.to_string());
        SnapshotError::Busy { job, node, what }
    }

    /// Marks a running job as stopping; it keeps its resources until [`Snapshot::stop`].
    pub fn request_stop(&mut self, id: JobId, cause: StopCause) -> Result<(), SnapshotError> {
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        match &mut job.state {
            JobState::Running(r) => {
                r.stopping = Some(cause);
                self.running.mark_stopping(id);
                Ok(())
            }
            JobState::Pending => Err(SnapshotError::NotRunning(id)),
        }
    }

    /// A running job's processes are gone: frees its resources and either
    /// requeues it or forgets it.
    pub fn stop(&mut self, id: JobId, now: Time, outcome: StopOutcome) -> Result<(), SnapshotError> {
        let job = self.jobs.get_mut(&id).ok_or(SnapshotError::UnknownJob(id))?;
        let JobState::Running(run) = std::mem::replace(&mut job.state, JobState::Pending) else {
            return Err(SnapshotError::NotRunning(id));
        };
        let ran = now.since(run.started);
        job.service.prior_runtime += ran;
        job.service.prior_gpu_milli_secs =
            job.service.prior_gpu_milli_secs.saturating_add(run.gpu_milli.saturating_mul(ran.as_secs()));
        let spec = job.spec.clone();
        for r in &run.placement {
            if let (Some(f), Some(e)) = (self.free.get_mut(r.node.index()), self.nodes.get_mut(r.node.index())) {
                f.release(r);
                e.jobs.remove(&id);
                self.node_log.push(r.node.0, self.nodes.len());
            }
        }
        self.running.remove(id);
        self.ledger.advance(now, self.policy.fair_share.half_life);
        self.ledger.change_rate(&spec.team, &spec.user, &run.by_kind, false);
        if let Some(u) = self.queue_usage.get_mut(&spec.queue) {
            *u = u.saturating_sub(run.gpu_milli);
        }
        if let Some(u) = self.queue_kind_usage.get_mut(&spec.queue) {
            u.sub_all(&run.by_kind);
        }
        match outcome {
            StopOutcome::Requeue { not_before } => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.service.restarts += 1;
                    job.not_before = not_before;
                }
                self.index_pending(id);
            }
            StopOutcome::Finished { success } => {
                self.jobs.remove(&id);
                self.finished.insert(id, success);
                self.clear_avoid(id);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::job::{GpuRequest, ReplicaPlacement};
    use crate::pass::running::KeyInputs;
    use crate::policies::policy::StarvationGuard;

    /// A running job's promotion, kept from its start for the victim pool,
    /// follows the snapshot's policy when it changes.
    #[test]
    fn a_new_policy_reaches_the_kept_promotions() {
        let mut guarded = Policy::by_name("default").expect("a preset");
        guarded.starvation_guard =
            Some(StarvationGuard { after: Duration::from_secs(10), max_runtime: Duration::from_secs(3_600) });
        let plain = Policy { starvation_guard: None, ..guarded.clone() };
        let mut snap = Snapshot::new(guarded.clone());
        let node = snap.add_node(Node::with_gpus("n0", 8, "H100-80GB", 81_920)).expect("node");
        let mut spec = JobSpec::new("u", Time::from_secs(0));
        spec.replica.gpu = GpuRequest::Gpus { count: 1 };
        // Above the first service level before this run, submitted long ago: promoted when it starts.
        let service = Service { prior_runtime: Duration::from_secs(600), prior_gpu_milli_secs: 5_000_000, restarts: 1 };
        snap.restore_pending(JobId(1), Arc::new(spec), service, Time::MIN).expect("restore");
        let one_gpu = ReplicaPlacement { node, gpus: 1, mig: 0, cpus_milli: 0, memory_mb: 0, share: None };
        snap.start(JobId(1), vec![one_gpu], Time::from_secs(100)).expect("start");
        let rank = |snap: &Snapshot| {
            let now = Time::from_secs(200);
            let kept = snap.running.get(&JobId(1)).and_then(|e| e.preemption_key(snap.policy(), now));
            let own = snap.job(JobId(1)).and_then(|j| KeyInputs::of(j).key(snap.policy(), now));
            assert_eq!(kept, own);
            kept.map(|k| k.rank)
        };
        assert_eq!(rank(&snap), Some(0), "promoted under the guard");
        snap.set_policy(plain);
        assert_eq!(rank(&snap), Some(1), "no guard, no promotion");
        snap.set_policy(guarded);
        assert_eq!(rank(&snap), Some(0));
    }
}
