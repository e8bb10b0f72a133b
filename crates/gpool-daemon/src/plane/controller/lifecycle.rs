//! The life of a job's runs: stopping one (cancel, preemption, time limit,
//! a failed gang member), a replica's end, and what follows the end of a run
//! (success, failure and retry with back-off, requeue, a terminal state).

use gpool_api as api;
use gpool_core::{JobId, Placement, StopCause, StopOutcome, Time};
use rustix::process::Signal;

use super::docs::{JobDoc, ReplicaDoc, Stop, merge_usage, put_job};
use super::timers::Timer;
use super::{Controller, Order, launch, orders};
use crate::protocol::{ExitRecord, ReplicaKey, parse_signal};

impl Controller {
    /// Says once of each job with a deadline that a pass found will miss it.
    pub(super) fn report_late(&mut self, late: &[(JobId, gpool_core::deadline::Late)], now: i64) {
        for (id, why) in late {
            let Some(doc) = self.jobs.get_mut(&id.0).filter(|d| d.late.is_none()) else { continue };
            let text = match why {
                gpool_core::deadline::Late::Passed { deadline } => {
                    format!("its deadline {} passed", api::time::rfc3339(deadline.as_millis()))
                }
                gpool_core::deadline::Late::CannotMake { deadline, expected_end } => format!(
                    "it cannot make its deadline {}: at its expected run time it would end {}",
                    api::time::rfc3339(deadline.as_millis()),
                    api::time::rfc3339(expected_end.as_millis())
                ),
            };
            doc.late = Some(text.clone());
            self.out.touch(id.0);
            self.event(now, Some(id.0), "deadline_at_risk", format!("job {id}: {text}"));
        }
    }

    /// Stops the running jobs a pass found past their queue's window
    /// (`stopAtEnd`) or over a power budget; they are requeued.
    pub(super) fn stop_for_plan(&mut self, plan: &gpool_core::Plan, now: i64) {
        for id in &plan.power_stops {
            if self.jobs.get(&id.0).is_some_and(|d| d.state == api::JobState::Running) {
                self.stop_run(id.0, Stop::Power, now);
                let said = format!(
                    "job {id} stopped: a power budget over its nodes is below what runs there, and it is the lowest-priority work"
                );
                self.event(now, Some(id.0), "power_stop", said);
            }
        }
        for id in &plan.window_stops {
            let Some(queue) =
                self.jobs.get(&id.0).filter(|d| d.state == api::JobState::Running).map(|d| d.queue.clone())
            else {
                continue;
            };
            self.stop_run(id.0, Stop::Window { queue: queue.clone() }, now);
            let said = format!("job {id} stopped: queue {queue}'s window closed (stopAtEnd); it resumes in the next");
            self.event(now, Some(id.0), "window_closed", said);
        }
    }

    /// Sends the stop signal to every live replica of a running job and arms the SIGKILL timer.
    /// An agent could not start a replica: the replica is lost (its job
    /// requeued) and its node held.
    pub(super) fn on_start_failed(&mut self, key: ReplicaKey, error: String, now: i64) {
        let node = self
            .jobs
            .get(&key.job)
            .and_then(|d| d.run.as_ref())
            .filter(|r| r.attempt == key.attempt)
            .and_then(|r| r.replicas.iter().find(|x| x.rank == key.rank))
            .and_then(|r| self.snap.node_id(&r.node));
        self.on_replica_end(key, None, Some(format!("its agent could not start it: {error}")), now);
        if let Some(id) = node {
            let (links, timers, out) = (&mut self.links, &mut self.timers, &mut self.out);
            super::conditions::hold_after_failed_start(&mut self.snap, links, id, key.job, &error, timers, out, now);
        }
    }

    /// Starts a run of job `id` on the placement the pass chose (`launch.rs` writes its orders).
    pub(super) fn start(&mut self, id: u64, placement: Placement, now: i64) {
        if let Err(e) = self.snap.start(JobId(id), placement.clone(), Time::from_millis(now)) {
            tracing::error!("internal error: the plan's start of job {id} was refused: {e}");
            return;
        }
        let registry_auth = self
            .jobs
            .get(&id)
            .and_then(|d| d.spec.image.as_deref().and_then(|i| self.registries.auth(&d.user, i)))
            .map(crate::protocol::Secret);
        let ground =
            launch::Ground { snap: &self.snap, links: &self.links, identities: &self.cfg.identities, registry_auth };
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        self.pass.allocations += 1;
        self.pass.wait.observe((now - doc.queued_ms.unwrap_or(doc.submitted_ms)).max(0) as f64 / 1000.0);
        doc.attempt += 1;
        doc.state = api::JobState::Running;
        doc.started_ms.get_or_insert(now);
        doc.not_before_ms = None;
        let attempt = doc.attempt;
        let started = launch::plan(doc, &placement, &ground, &mut self.ports, now);
        // The nodes of the run it replaces: their output may still be on its way.
        if let Some(old) = &doc.run {
            for r in &old.replicas {
                if !doc.earlier_nodes.contains(&r.node) {
                    doc.earlier_nodes.push(r.node.clone());
                }
            }
            let over = doc.earlier_nodes.len().saturating_sub(super::docs::EARLIER_NODES);
            doc.earlier_nodes.drain(..over);
        }
        let devices = (started.run.replicas.iter())
            .map(|x| format!("{}:{}", x.node, x.cuda_visible_devices))
            .collect::<Vec<_>>()
            .join(" ");
        doc.run = Some(started.run);
        if let Some(limit) = self.snap.job(JobId(id)).and_then(|j| j.spec.time_limit) {
            self.timers.at(now + limit.as_millis() as i64, Timer::TimeLimit { job: id, attempt });
        }
        self.out.touch(id);
        let remote = started.starts.iter().any(|(n, _)| self.links.get(n).is_some_and(|l| !l.is_local()));
        for (node, order) in started.starts {
            orders::order(&mut self.links, &mut self.out, node, order);
        }
        if remote {
            self.timers.at(now + self.start_bound_ms(), Timer::Unseen { job: id, attempt });
        }
        let said = format!("job {id} attempt {attempt} started on {devices} (node:CUDA_VISIBLE_DEVICES)");
        self.event(now, Some(id), "started", said);
    }

    /// Closes a run's telemetry: its last rows, its usage into the job's record.
    pub(super) fn account_run(&mut self, id: u64, now: i64) {
        // The run's last full-resolution series, so that a short job can be
        // advised after it ends (its minute rows are too few).
        if let Some(series) = self.telemetry.job_usage(id).filter(|u| u.devices.iter().any(|d| !d.points.is_empty())) {
            let key = crate::plane::usage_rows::final_series_key(id);
            self.out.write(gpool_store::Write::PutMeta(key, crate::plane::usage_rows::encode_final_series(&series)));
        }
        let (rows, summary, mut transitions) = self.telemetry.end_job(id);
        if !rows.is_empty() {
            self.out.write(gpool_store::Write::AppendSamples(rows));
        }
        // The GPUs it held (whole, or the parents of its MIG instances).
        let held: Vec<(String, u32)> = self
            .snap
            .job(JobId(id))
            .and_then(|j| j.running())
            .map(|r| {
                r.placement
                    .iter()
                    .flat_map(|p| {
                        let name = self.snap.node(p.node).map_or_else(String::new, |n| n.name.to_string());
                        let (gpus, mig) = self.snap.replica_devices(p);
                        let idx: Vec<u32> =
                            gpus.iter().map(|d| d.index).chain(mig.iter().map(|(d, _)| d.index)).collect();
                        idx.into_iter().map(move |i| (name.clone(), i))
                    })
                    .collect()
            })
            .unwrap_or_default();
        transitions.extend(self.telemetry.release_gpus(&held));
        self.publish_alerts(transitions, now);
        if let Some(s) = &summary
            && let Some(d) = self.jobs.get(&id)
        {
            let model = super::costs::model_of(&self.snap, d);
            self.history.learn_draw(d, s, model.as_deref());
        }
        let hours = super::costs::allocated_hours(&self.snap, id, now);
        // Charged from allocation to release: samples start a moment
        // after the allocation and stop a moment before its end.
        let mut summary = match (summary, hours) {
            (Some(s), Some(h)) => Some(api::UsageSummary { gpu_hours: h, ..s }),
            (None, Some(h)) if h > 0.0 => Some(api::UsageSummary { gpu_hours: h, ..api::UsageSummary::default() }),
            (s, _) => s,
        };
        if let Some(d) = self.jobs.get_mut(&id) {
            if let Some(h) = hours
                && let Some(dollars) = self.costs.charge_run(&self.snap, d, h, &mut summary)
            {
                self.budgets.charge(&d.team, &d.queue, dollars);
            }
            d.usage = merge_usage(d.usage.take(), summary);
        }
    }

    /// A job its room no longer wants (a service's replica): pending, it is
    /// cancelled at once; running, it gets its stop signal.
    pub(super) fn withdraw(&mut self, job: u64, by: String, now: i64) {
        let Some(state) = self.jobs.get(&job).map(|d| d.state) else { return };
        if state == api::JobState::Pending {
            let _ = self.snap.remove_pending(JobId(job), false);
            self.finish_terminal(job, api::JobState::Cancelled, format!("cancelled by {by}"), now);
            self.out.reschedule();
        } else {
            self.stop_run(job, Stop::Cancel { by }, now);
        }
    }

    /// A run's grace period is over: SIGKILL whatever of it is left.
    pub(super) fn kill_what_is_left(&mut self, job: u64, attempt: u32) {
        let left: Vec<_> = self
            .jobs
            .get(&job)
            .and_then(|d| d.run.as_ref())
            .filter(|r| r.attempt == attempt)
            .map(|run| {
                run.replicas
                    .iter()
                    .filter(|r| !r.ended())
                    .filter_map(|r| Some((self.snap.node_id(&r.node)?, r.rank)))
                    .collect()
            })
            .unwrap_or_default();
        for (node, rank) in left {
            let key = ReplicaKey { job, attempt, rank };
            super::orders::order(&mut self.links, &mut self.out, node, Order::Signal { key, signal: Signal::KILL });
        }
    }

    /// The run reached its time limit: it is stopped, if it still runs.
    pub(super) fn time_limit(&mut self, job: u64, attempt: u32, now: i64) {
        let live = self.jobs.get(&job).and_then(|d| d.run.as_ref()).is_some_and(|r| r.attempt == attempt);
        if live {
            self.stop_run(job, Stop::TimeLimit, now);
            self.event(now, Some(job), "time_limit", format!("job {job} reached its time limit; stop signal sent"));
        }
    }

    /// An elastic job changes size (`Plan::resizes`): it stops with its
    /// grace period (its checkpoint) and restarts on the placement the
    /// snapshot holds for it; the change and its reason are kept on the job.
    pub(super) fn resize(&mut self, r: &gpool_core::Resize, now: i64) {
        let id = r.job.0;
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        let from = doc.run.as_ref().map_or(0, |run| run.replicas.len() as u32);
        let to = r.placement.len() as u32;
        let (for_job, why) = match &r.why {
            gpool_core::ResizeWhy::Grow => (None, "idle GPUs".to_string()),
            gpool_core::ResizeWhy::Shrink { for_job, why } => {
                (Some(for_job.0), format!("for job {for_job} ({})", why_text(why)))
            }
        };
        doc.resizes.push(super::docs::ResizeDoc { at_ms: now, from, to, why: why.clone() });
        if doc.resizes.len() > super::docs::RESIZES_KEPT {
            doc.resizes.remove(0);
        }
        self.pass.resizes += 1;
        self.stop_run(id, Stop::Resize { from, to, for_job }, now);
        let verb = if to > from { "grows" } else { "shrinks" };
        self.event(now, Some(id), "resized", format!("job {id} {verb} from {from} to {to} replicas: {why}"));
    }

    pub(super) fn stop_run(&mut self, id: u64, cause: Stop, now: i64) {
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        let Some(run) = doc.run.as_mut() else { return };
        // A cancel overrides an earlier cause (a preempted job that is cancelled does not come back).
        let upgrade = (matches!(cause, Stop::Cancel { .. }) && !matches!(run.stop, Some(Stop::Cancel { .. })))
            // The GPU failed under a job stopping for an XID of its own: not the job's failure after all.
            || (matches!(cause, Stop::GpuFault { .. }) && matches!(run.stop, Some(Stop::GpuXid { .. })));
        if run.stop.is_some() && !upgrade {
            return;
        }
        let core_cause = match &cause {
            Stop::Preempt { for_job } => StopCause::Preempted { for_job: JobId(*for_job) },
            Stop::Resize { for_job, .. } => StopCause::Resized { for_job: for_job.map(JobId) },
            _ => StopCause::Cancelled,
        };
        let mut grace = self.snap.job(JobId(id)).map_or(crate::plane::convert::DEFAULT_GRACE, |j| j.spec.grace);
        if let Stop::Reclaim { at_ms, .. } = &cause {
            // A spot notice: the time left is all the grace there is.
            grace = grace.min(std::time::Duration::from_millis(u64::try_from(*at_ms - now).unwrap_or(0)));
        }
        let sig = doc.spec.stop_signal.as_deref().and_then(parse_signal).unwrap_or(Signal::TERM);
        let first = run.stop.is_none();
        run.stop = Some(cause);
        doc.state = api::JobState::Stopping;
        let _ = self.snap.request_stop(JobId(id), core_cause);
        let mut signals = Vec::new();
        if first {
            let kill_at = now + grace.as_millis() as i64;
            run.kill_at_ms = Some(kill_at);
            for r in run.replicas.iter().filter(|r| !r.ended()) {
                if let Some(node) = self.snap.node_id(&r.node) {
                    let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                    signals.push((node, Order::Signal { key, signal: sig }));
                }
            }
            self.timers.at(kill_at, Timer::Kill { job: id, attempt: run.attempt });
        }
        for (node, order) in signals {
            super::orders::order(&mut self.links, &mut self.out, node, order);
        }
        self.out.touch(id);
    }

    pub(super) fn on_replica_end(&mut self, key: ReplicaKey, exit: Option<ExitRecord>, lost: Option<String>, now: i64) {
        let Some(doc) = self.jobs.get_mut(&key.job) else { return };
        let Some(run) = doc.run.as_mut().filter(|r| r.attempt == key.attempt) else { return };
        let Some(rep) = run.replicas.iter_mut().find(|r| r.rank == key.rank) else { return };
        if rep.ended() {
            return;
        }
        // A replica its shim killed because the node lost its lease ended by
        // an infrastructure failure: it counts as lost (requeued), not as the job's failure.
        let lost = lost.or_else(|| {
            let e = exit.as_ref().filter(|e| e.fenced)?;
            Some(e.error.clone().unwrap_or_else(|| "its node lost its lease".into()))
        });
        let failed = lost.is_some() || exit.as_ref().is_none_or(|e| e.code != Some(0));
        if let Some(e) = &exit {
            rep.exit = Some(e.clone());
        }
        if exit.is_none() || lost.is_some() {
            rep.lost = true;
        }
        let all_ended = run.replicas.iter().all(ReplicaDoc::ended);
        let live = run.replicas.iter().any(|r| !r.ended());
        let stopping = run.stop.is_some();
        if lost.is_some() && !stopping && !live {
            // Nothing left to stop, but the run ends because a replica was
            // lost, not because the job failed: it goes back to the queue.
            run.stop = Some(Stop::Lost);
        }
        self.out.touch(key.job);
        if let Some(why) = &lost {
            self.event(now, Some(key.job), "lost", format!("job {} rank {} lost: {why}", key.job, key.rank));
        }
        if failed && live && !stopping {
            // Gang semantics: one replica failing ends the others.
            let cause = if lost.is_some() { Stop::Lost } else { Stop::GangFailure { rank: key.rank } };
            self.stop_run(key.job, cause, now);
        }
        if all_ended {
            self.finish_run(key.job, now);
        }
    }

    /// All replicas of the current run are gone: free the devices and decide what next.
    pub(super) fn finish_run(&mut self, id: u64, now: i64) {
        self.account_run(id, now);
        self.ports.release(id);
        let Some(doc) = self.jobs.get(&id).cloned() else { return };
        let Some(run) = doc.run.clone() else { return };
        let exits: Vec<&ExitRecord> = run.replicas.iter().filter_map(|r| r.exit.as_ref()).collect();
        let all_ok = !run.replicas.iter().any(|r| r.lost) && exits.iter().all(|e| e.code == Some(0));
        let first_bad = run.replicas.iter().find(|r| r.lost || r.exit.as_ref().is_some_and(|e| e.code != Some(0)));
        let exit_view = first_bad
            .or_else(|| run.replicas.first())
            .and_then(|r| r.exit.as_ref())
            .map(|e| api::ExitView { code: e.code, signal: e.signal });
        let describe = |e: &Option<api::ExitView>| match e {
            Some(api::ExitView { code: Some(c), .. }) => format!("exit code {c}"),
            Some(api::ExitView { signal: Some(s), .. }) => format!("signal {s}"),
            _ => "lost".to_string(),
        };
        enum Next {
            Done(api::JobState, String),
            Requeue(String, i64, bool),
        }
        let next = match &run.stop {
            Some(Stop::Cancel { by }) => Next::Done(api::JobState::Cancelled, format!("cancelled by {by}")),
            Some(Stop::TimeLimit) => Next::Done(api::JobState::TimedOut, "killed at its time limit".into()),
            Some(Stop::Idle { gpus }) => Next::Done(
                api::JobState::Cancelled,
                format!(
                    "stopped by its queue's idle policy: its {gpus} GPU(s) stayed idle; label it gpool.io/idle=keep to opt out"
                ),
            ),
            Some(Stop::GpuMemory { gpu, used_mb, limit_mb }) => Next::Done(
                api::JobState::Failed,
                format!(
                    "stopped: it used {used_mb} MiB of GPU {gpu}'s memory, over its share of {limit_mb} MiB; \
                     ask for more (gpool.io/gpu-memory, --gpu-memory) or for a whole GPU"
                ),
            ),
            Some(Stop::Preempt { for_job }) => Next::Requeue(format!("preempted for job {for_job}"), now, false),
            Some(Stop::Resize { from, to, for_job }) => {
                let why = for_job.map_or_else(|| "into idle GPUs".to_string(), |j| format!("for job {j}"));
                Next::Requeue(format!("resized from {from} to {to} replicas {why}; restarting"), now, false)
            }
            Some(Stop::Power) => {
                Next::Requeue("stopped for a power budget lowered below what ran; requeued".into(), now, false)
            }
            Some(Stop::Straggler { device }) => Next::Requeue(
                format!("its replica on {device} held the gang back (onStraggler: requeue); requeued away from it"),
                now,
                false,
            ),
            Some(Stop::Window { queue }) => Next::Requeue(
                format!("stopped when queue {queue}'s window closed; requeued for its next window"),
                now,
                false,
            ),
            Some(Stop::GpuFault { node, gpu, fault }) => Next::Requeue(
                format!(
                    "GPU {gpu} of node {node} faulted ({fault}): an infrastructure failure, not the job's; \
                     requeued away from it (retries unchanged)"
                ),
                now,
                false,
            ),
            Some(Stop::GpuXid { node, gpu, xid }) if doc.failures >= doc.spec.retries => Next::Done(
                api::JobState::Failed,
                format!(
                    "failed: GPU {gpu} of node {node} raised {xid}, an error of the application (NVIDIA: restart it)"
                ),
            ),
            Some(Stop::GpuXid { node, gpu, xid }) => Next::Requeue(
                format!("GPU {gpu} of node {node} raised {xid}; retry {} of {}", doc.failures + 1, doc.spec.retries),
                now,
                true,
            ),
            Some(Stop::Reclaim { node, .. }) => Next::Requeue(
                format!("its node {node} was taken back (spot); requeued to resume from its checkpoint"),
                now,
                false,
            ),
            Some(Stop::Lost) if doc.spec.on_node_failure == Some(api::spec::NodeFailure::Fail) => Next::Done(
                api::JobState::Failed,
                "a replica was lost (its node failed) and the job asked not to be requeued (onNodeFailure: fail)"
                    .into(),
            ),
            Some(Stop::Lost) => Next::Requeue("a replica was lost; requeued".into(), now, false),
            Some(Stop::GangFailure { .. }) | None if all_ok => {
                Next::Done(api::JobState::Succeeded, "exit code 0".into())
            }
            _ => {
                if doc.failures < doc.spec.retries {
                    let backoff = self.cfg.retry_backoff.as_millis() as i64 * (1i64 << doc.failures.min(16));
                    let backoff = backoff.min(600_000);
                    Next::Requeue(
                        format!(
                            "failed with {}; retry {} of {}",
                            describe(&exit_view),
                            doc.failures + 1,
                            doc.spec.retries
                        ),
                        now + backoff,
                        true,
                    )
                } else {
                    // What the node said went wrong, when it said (a command that cannot start, no account).
                    let why = first_bad
                        .and_then(|r| r.exit.as_ref())
                        .and_then(|e| e.error.as_deref())
                        .map_or_else(String::new, |e| format!(": {e}"));
                    // 125: podman's and docker's own failure (no such image, refused credentials, a runtime error).
                    let runtime = match (&doc.spec.image, &exit_view) {
                        (Some(image), Some(api::ExitView { code: Some(125), .. })) => format!(
                            "; the container runtime could not run image {image}: its message is in `gpool logs {}`",
                            doc.id
                        ),
                        _ => String::new(),
                    };
                    Next::Done(api::JobState::Failed, format!("failed with {}{why}{runtime}", describe(&exit_view)))
                }
            }
        };
        match next {
            Next::Done(state, reason) => {
                if state == api::JobState::Succeeded
                    && let (Some(doc), Some(job)) = (self.jobs.get(&id), self.snap.job(JobId(id)))
                {
                    self.history.learn_success(doc, job, now);
                }
                let _ = self.snap.stop(
                    JobId(id),
                    Time::from_millis(now),
                    StopOutcome::Finished { success: state == api::JobState::Succeeded },
                );
                if let Some(d) = self.jobs.get_mut(&id) {
                    d.exit = exit_view;
                }
                self.finish_terminal(id, state, reason, now);
            }
            Next::Requeue(reason, not_before, failure) => {
                let nb = if not_before > now { Time::from_millis(not_before) } else { Time::MIN };
                let _ = self.snap.stop(JobId(id), Time::from_millis(now), StopOutcome::Requeue { not_before: nb });
                if let Some(d) = self.jobs.get_mut(&id) {
                    d.state = api::JobState::Pending;
                    d.queued_ms = Some(now);
                    d.restarts += 1;
                    d.failures += u32::from(failure);
                    d.not_before_ms = (not_before > now).then_some(not_before);
                    d.exit = exit_view;
                    d.end_reason = Some(reason.clone());
                    if let Some(j) = self.snap.job(JobId(id)) {
                        d.prior_runtime_ms = j.service.prior_runtime.as_millis() as u64;
                        d.prior_gpu_milli_secs = j.service.prior_gpu_milli_secs;
                    }
                }
                if not_before > now {
                    self.timers.at(not_before, Timer::Wake);
                }
                self.out.touch(id);
                self.event(now, Some(id), "requeued", format!("job {id}: {reason}"));
            }
        }
        self.out.reschedule();
    }

    /// Moves a job to a terminal state and out of the active set.
    pub(super) fn finish_terminal(
        &mut self,
        id: u64,
        state: api::JobState,
        reason: String,
        now: i64,
    ) -> Option<JobDoc> {
        let mut doc = self.jobs.remove(&id)?;
        doc.state = state;
        doc.ended_ms = Some(now);
        doc.end_reason = Some(reason.clone());
        self.costs.ledger_add(&doc);
        self.out.touched.remove(&id);
        self.out.write(put_job(&doc));
        let said = format!("job {id} {}: {reason}", state.as_str());
        self.event_of(now, Some(id), Some(doc.user.clone()), state.as_str(), said);
        Some(doc)
    }

    /// A running job whose replicas cannot be accounted for goes back to the queue.
    pub(super) fn requeue_after_loss(&mut self, id: u64, why: &str, now: i64) {
        let _ = self.snap.stop(JobId(id), Time::from_millis(now), StopOutcome::Requeue { not_before: Time::MIN });
        if let Some(d) = self.jobs.get_mut(&id) {
            d.state = api::JobState::Pending;
            d.queued_ms = Some(now);
            d.restarts += 1;
            d.end_reason = Some(format!("requeued: {why}"));
        }
        self.out.touch(id);
        self.event(now, Some(id), "requeued", format!("job {id} requeued: {why}"));
        self.out.reschedule();
    }

    /// Pending jobs the pass found can never start (a job they depend on
    /// did not succeed) fail at once, saying which, instead of waiting
    /// forever; their own dependants follow in the next pass.
    pub(super) fn fail_never_startable(&mut self, plan: &gpool_core::Plan, now: i64) {
        let never: Vec<(u64, String)> = plan
            .waiting
            .iter()
            .filter_map(|&(job, r)| match plan.reason_table.get(r as usize) {
                Some(reason @ gpool_core::PendingReason::DependencyFailed { .. }) => Some((job.0, reason.to_string())),
                _ => None,
            })
            .collect();
        for (id, why) in never {
            if self.snap.remove_pending(JobId(id), false).is_ok() {
                self.finish_terminal(id, api::JobState::Failed, why, now);
                self.out.reschedule();
            }
        }
    }
}

/// Why a job may be preempted or shrunk, in words.
pub(super) fn why_text(why: &gpool_core::PreemptWhy) -> String {
    match why {
        gpool_core::PreemptWhy::HigherPriority => "higher priority".into(),
        gpool_core::PreemptWhy::MoreService => "it had more GPU service".into(),
        gpool_core::PreemptWhy::LongerRemaining => "it had longer to run".into(),
        gpool_core::PreemptWhy::Reclaim { queue } => format!("queue {queue} borrowed the GPUs and they were reclaimed"),
        gpool_core::PreemptWhy::AboveMinimum => "replicas above its minimum are lent".into(),
    }
}
