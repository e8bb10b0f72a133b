//! How each call of the call table (`calls.rs`) is answered: the caller is
//! identified by its token, its access checked, and the call carried out.

use gpool_api as api;
use gpool_core::JobId;
use gpool_store::JobQuery;

use super::budgets::BudgetMode;
use super::calls::{ApiError, Call, ListQuery, LogTarget};
use super::docs::{JobDoc, Stop, default_name};
use super::{Controller, faults};
use crate::plane::auth::{Caller, Credential};
use crate::plane::convert::to_core;

impl Controller {
    /// Answers the views of `batch` (calls that only read, `Call::only_reads`)
    /// at once and leaves the rest in it: the shell sends these answers
    /// before the turn that handles the rest. They read the state the last
    /// turn committed, so a view never shows what is not durable yet, and it
    /// does not wait behind the batch's reports or a scheduling pass.
    pub fn answer_views(&mut self, batch: &mut Vec<super::Event>) -> Vec<super::Answer> {
        let now = self.clock.now_ms();
        let is_view = |e: &super::Event| matches!(e, super::Event::Api { call, .. } if call.only_reads());
        if !batch.iter().any(is_view) {
            return Vec::new();
        }
        let (views, rest): (Vec<_>, Vec<_>) = std::mem::take(batch).into_iter().partition(is_view);
        *batch = rest;
        // Answers of the turn under way are the shell's already: these are only the views'.
        let before = self.out.replies.len();
        for e in views {
            if let super::Event::Api { who, call } = e {
                self.api(&who, call, now);
            }
        }
        self.out.replies.split_off(before)
    }

    /// Identifies the caller, checks its access and carries the call out.
    pub(super) fn api(&mut self, who: &Credential, call: Call, now: i64) {
        let caller = match self.tokens.identify(who, &self.cfg, &mut self.out, now) {
            Ok(c) => c,
            Err(err) => return self.out.replies.push(call.refuse(err)),
        };
        if let Err(err) = call.access().check(caller.role) {
            return self.out.replies.push(call.refuse(err));
        }
        match call {
            Call::Notice { node, within_ms, from, reply } => {
                let r = super::spot::notice(
                    &caller,
                    &node,
                    within_ms,
                    &from,
                    &self.snap,
                    &mut self.links,
                    &mut self.out,
                    now,
                )
                .and_then(|acts| {
                    self.act(acts, now);
                    self.reading().node_view(&node)
                });
                self.reply(reply, r);
            }
            Call::Drain { node, draining, from, reply } => {
                let r = self.set_draining(&caller, &node, draining, &from, now);
                self.reply(reply, r);
            }
            Call::InjectFault { node, gpu, fault, from, reply } => {
                let source = self.reading().node_doc(&node).map(|d| d.source.clone()).unwrap_or_default();
                let r = faults::GpuFaults::inject(
                    &caller,
                    &node,
                    gpu,
                    fault,
                    &source,
                    &from,
                    &self.snap,
                    &mut self.out,
                    now,
                )
                .and_then(|acts| {
                    self.act(acts, now);
                    self.reading().node_view(&node)
                });
                self.reply(reply, r);
            }
            Call::RestoreGpu { node, gpu, from, reply } => {
                let simulated = self.reading().node_doc(&node).is_some_and(|d| d.source == "simulated");
                let r = self
                    .faults
                    .restore_gpu(&caller, &node, gpu, simulated, &from, &mut self.snap, &mut self.out, now)
                    .and_then(|acts| {
                        self.act(acts, now);
                        self.reading().node_view(&node)
                    });
                self.reply(reply, r);
            }
            Call::Register { reg, reply } => {
                let r = super::tokens::check_node_identity(&caller, &reg.node).and_then(|()| self.register(reg, now));
                self.reply(reply, r);
            }
            Call::Poll { node, epoch, after, reply } => match super::tokens::check_node_identity(&caller, &node) {
                Ok(()) => self.poll(&node, epoch, after, reply, now),
                Err(e) => self.reply(reply, Err(e)),
            },
            Call::Report { report, reply } => {
                let r = super::tokens::check_node_identity(&caller, &report.node)
                    .and_then(|()| self.agent_report(report, now));
                self.reply(reply, r);
            }
            Call::ShipLog { node, job, rank, reply } => {
                let r = super::node_trust::may_ship_log(
                    &self.jobs,
                    self.store.as_mut(),
                    &caller,
                    node.as_deref(),
                    job,
                    rank,
                );
                self.reply(reply, r);
            }
            Call::Submit { specs, reply } => {
                let r = self.submit(&caller, specs, now);
                self.reply(reply, r);
            }
            Call::SubmitPipeline { spec, reply } => {
                let r = self.submit_pipeline(&caller, *spec, now);
                self.reply(reply, r);
            }
            Call::Pipeline { run, reply } => {
                let r = self.pipeline_view(&caller, run);
                self.reply(reply, r);
            }
            Call::Pipelines { limit, reply } => {
                let r = self.pipelines(&caller, limit);
                self.reply(reply, r);
            }
            Call::Power { reply } => {
                let r = Ok(self.reading().power_views());
                self.reply(reply, r);
            }
            Call::SetPower { req, from, reply } => {
                let r = self
                    .power
                    .set(&caller, req, &from, &mut self.snap, &mut self.out, now)
                    .map(|()| self.reading().power_views());
                self.reply(reply, r);
            }
            Call::ApplySchedule { name, spec, reply } => {
                let r = super::schedules::Schedules::check(&name, &spec)
                    .and_then(|()| self.check_schedule_submits(&caller, &spec, now))
                    .and_then(|()| self.schedules.apply(&caller, &name, *spec, &mut self.timers, &mut self.out, now));
                self.reply(reply, r);
            }
            Call::Schedules { reply } => {
                let r = Ok(self.schedules.views(&caller));
                self.reply(reply, r);
            }
            Call::DeleteSchedule { name, reply } => {
                let r = self.schedules.delete(&caller, &name, &mut self.out, now);
                self.reply(reply, r);
            }
            Call::CancelPipeline { run, from, reply } => {
                let r = self.cancel_pipeline(&caller, run, &from, now);
                self.reply(reply, r);
            }
            Call::RegistryLogin { registry, req, reply } => {
                let r = self.registries.login(&caller, &registry, req, &mut self.out, now);
                self.reply(reply, r);
            }
            Call::RegistryLogout { registry, reply } => {
                let r = self.registries.logout(&caller, &registry, &mut self.out);
                self.reply(reply, r);
            }
            Call::Registries { reply } => {
                let r = Ok(self.registries.views(&caller));
                self.reply(reply, r);
            }
            Call::ApplyService { name, spec, reply } => {
                let r = self.services.check(&name, *spec).and_then(|(spec, cfg, probe)| {
                    // A replica must be a job this caller could submit.
                    self.checked(&caller, std::slice::from_ref(&probe), now)?;
                    self.services.apply(&caller, &name, (spec, cfg), &mut self.out, now)
                });
                self.reply(reply, r);
            }
            Call::DeleteService { name, reply } => {
                let world = super::services::World { jobs: &self.jobs, snap: &self.snap, links: &self.links };
                let r = self.services.delete(&caller, &name, &world, &mut self.out, now).map(|(view, acts)| {
                    self.act(acts, now);
                    view
                });
                self.reply(reply, r);
            }
            Call::Services { reply } => {
                let world = super::services::World { jobs: &self.jobs, snap: &self.snap, links: &self.links };
                let r = Ok(self.services.views(&caller, &world));
                self.reply(reply, r);
            }
            Call::Get { id, reply } => {
                let r = self.visible(&caller, id).map(|d| self.reading().view(&d));
                self.reply(reply, r);
            }
            Call::List { query, reply } => {
                let r = self.list(&caller, query);
                self.reply(reply, r);
            }
            Call::Cancel { id, from, reply } => {
                let r = self.cancel(&caller, id, &from, now);
                self.reply(reply, r);
            }
            Call::Hold { id, hold, from, reply } => {
                let r = self
                    .visible(&caller, id)
                    .and_then(|doc| {
                        super::holds::hold(
                            &caller,
                            doc,
                            hold,
                            &from,
                            &mut self.snap,
                            &mut self.jobs,
                            &mut self.out,
                            now,
                        )
                    })
                    .map(|d| self.reading().view(&d));
                self.reply(reply, r);
            }
            Call::Logs { id, rank, stream, reply } => {
                let r = self.visible(&caller, id).and_then(|d| {
                    if rank >= d.spec.replicas {
                        return Err(ApiError::new(
                            400,
                            format!("rank {rank}: job {id} has {} replica(s)", d.spec.replicas),
                        ));
                    }
                    Ok(LogTarget {
                        path: crate::protocol::log_path(&self.cfg.data_dir, id, rank, &stream),
                        finished: d.state.is_terminal(),
                    })
                });
                self.reply(reply, r);
            }
            Call::Nodes { page, reply } => {
                let (offset, limit) = page.unwrap_or((0, usize::MAX));
                let r = Ok(self.reading().nodes_page(offset, limit));
                self.reply(reply, r);
            }
            Call::Cost { by, since, reply } => {
                let since_ms = now.saturating_sub(i64::try_from(since.as_millis()).unwrap_or(i64::MAX / 2));
                let (costs, snap, telemetry) = (&self.costs, &self.snap, &self.telemetry);
                let usage = |d: &JobDoc| costs.usage_summary(snap, telemetry, d, now);
                let r = costs.report(&caller, &by, since_ms, snap, &self.jobs, self.store.as_mut(), &usage, now);
                self.reply(reply, r);
            }
            Call::Budgets { reply } => {
                let live = self.costs.live_costs(&self.snap, &self.jobs, now);
                let r = Ok(self.budgets.views(&self.jobs, &live, now));
                self.reply(reply, r);
            }
            Call::Pools { reply } => {
                let r = Ok(self.fleet.views(now));
                self.reply(reply, r);
            }
            Call::Queues { reply } => {
                let r = Ok(self.reading().queues());
                self.reply(reply, r);
            }
            Call::Events { after, job, reply } => {
                let r = self.history(&caller, after, job);
                self.reply(reply, r);
            }
            Call::CreateToken { req, from, reply } => {
                let r = self.tokens.create(&caller, req, self.cfg.single_user.as_deref(), &from, &mut self.out, now);
                self.reply(reply, r);
            }
            Call::Tokens { reply } => {
                let r = Ok(self.tokens.list(&caller));
                self.reply(reply, r);
            }
            Call::RevokeToken { id, from, reply } => {
                let r = self.tokens.revoke(&caller, &id, &from, &mut self.out, now).map(|(view, node)| {
                    // A node's token revoked: the node is cut off now, not at its next request.
                    if let Some(node) = node {
                        let why = format!("its token {} was revoked", view.id);
                        let lease = self.lease_ms();
                        let (snap, links, timers, out) =
                            (&mut self.snap, &mut self.links, &mut self.timers, &mut self.out);
                        super::node_trust::cut_off(&node, &why, lease, snap, links, timers, out, now);
                    }
                    view
                });
                self.reply(reply, r);
            }
            Call::Metrics { reply } => {
                let r = Ok(self.reading().scrape(now));
                self.reply(reply, r);
            }
            Call::WhoAmI { reply } => {
                let r = Ok(api::WhoAmI {
                    user: caller.user.clone(),
                    team: caller.team.clone(),
                    role: caller.role.as_str().into(),
                });
                self.reply(reply, r);
            }
            Call::Usage { id, reply } => {
                let r = self.visible(&caller, id).and_then(|d| reading!(self).usage(self.store.as_mut(), &d));
                self.reply(reply, r);
            }
            Call::Advice { id, min_span, reply } => {
                let r =
                    self.visible(&caller, id).and_then(|d| reading!(self).advice(self.store.as_mut(), &d, min_span));
                self.reply(reply, r);
            }
            Call::Profile { id, seconds, native, reply } => {
                match self.visible(&caller, id).and_then(|d| self.profiling.targets(&caller, &d, seconds, &self.snap)) {
                    Err(e) => self.reply(reply, Err(e)),
                    Ok(targets) => {
                        let acts =
                            self.profiling.start(&caller, id, targets, seconds, native, reply, &mut self.timers, now);
                        self.act(acts, now);
                    }
                }
            }
            Call::LatestProfile { id, reply } => {
                let r = self
                    .visible(&caller, id)
                    .and_then(|_| super::profiles::latest(self.store.as_mut(), id))
                    .and_then(|p| {
                        p.ok_or_else(|| {
                            ApiError::new(
                                404,
                                format!(
                                    "job {id} has not been profiled: `gpool profile {id}` profiles it while it runs"
                                ),
                            )
                        })
                    })
                    .map(Box::new);
                self.reply(reply, r);
            }
            Call::Alerts { reply } => {
                let r = Ok(self.reading().alerts(&caller));
                self.reply(reply, r);
            }
            Call::Overview { reply } => {
                let r = Ok(self.reading().overview(&caller, now));
                self.reply(reply, r);
            }
            Call::Health { reply } => {
                let r = Ok(self.faults.views(now));
                self.reply(reply, r);
            }
        }
    }

    pub(super) fn submit(
        &mut self,
        caller: &Caller,
        specs: Vec<api::JobSpec>,
        now: i64,
    ) -> Result<api::Submitted, ApiError> {
        if specs.is_empty() {
            return Err(ApiError::new(400, "jobs: the batch is empty"));
        }
        self.state_disk.room_for_new_work(&self.cfg.data_dir)?;
        let cores = self.checked(caller, &specs, now)?;
        self.admit(caller, specs, cores, now)
    }

    /// Checks a batch of specs as a submission would; their core specs.
    pub(super) fn checked(
        &mut self,
        caller: &Caller,
        specs: &[api::JobSpec],
        now: i64,
    ) -> Result<Vec<gpool_core::JobSpec>, ApiError> {
        let batch = specs.len() > 1;
        self.checked_as(caller, specs, now, &|i, msg| if batch { format!("jobs[{i}].{msg}") } else { msg })
    }

    /// [`Self::checked`], with `at` saying which spec of the batch an error is about.
    pub(super) fn checked_as(
        &mut self,
        caller: &Caller,
        specs: &[api::JobSpec],
        now: i64,
        at: &dyn Fn(usize, String) -> String,
    ) -> Result<Vec<gpool_core::JobSpec>, ApiError> {
        // Check everything first: a batch is accepted whole or not at all.
        let mut cores = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            if spec.service.is_some() {
                return Err(ApiError::new(
                    400,
                    at(i, "service: a service is applied with PUT /api/v1/services/NAME (`gpool submit -f` does it), not submitted as a job".into()),
                ));
            }
            crate::plane::input::spec(spec, caller.role == crate::plane::auth::Role::Admin)
                .map_err(|r| ApiError::new(400, at(i, format!("{}: {}", r.field, r.message))))?;
            self.check_queue(spec.queue.as_deref()).map_err(|m| ApiError::new(400, at(i, m)))?;
            let mut core =
                to_core(spec, &caller.user, &caller.team, now).map_err(|e| ApiError::new(400, at(i, e.to_string())))?;
            if spec.spot.is_none()
                && let Some(p) = self.snap.queues().find(|q| q.name == core.queue).and_then(|q| q.spot)
            {
                core.spot = p;
            }
            // Over a soft budget: it runs only as preemptible, at the lowest priority.
            if let Some((b, _)) = self.exhausted_budget(&caller.team, &core.queue, now)
                && b.mode == BudgetMode::Soft
            {
                core.preemptible = true;
                core.priority = i32::MIN;
            }
            core.watts_per_gpu = self.history.learned_watts(spec, &core);
            if let Err(why) = self.snap.check_feasible(&core)
                && !self.fleet.could_run(&core)
            {
                return Err(ApiError::new(400, at(i, format!("rejected: {why}"))));
            }
            // Whether it exists is for the node to find, as the job's user
            // (`node/handover.rs`): checked here, as root, the answer would
            // tell anyone whether a path they cannot see exists.
            if let Some(dir) = &spec.workdir
                && spec.image.is_none()
                && !std::path::Path::new(dir).is_absolute()
            {
                return Err(ApiError::new(
                    400,
                    at(i, format!("workdir: {dir:?} is not an absolute path; name the directory from /")),
                ));
            }
            // (job, field, whether it must have succeeded: afterok, afternotok; None: afterany)
            let deps = (spec.depends_on.iter().map(|d| (*d, "dependsOn", Some(true))))
                .chain(spec.after_not_ok.iter().map(|d| (*d, "afterNotOk", Some(false))))
                .chain(spec.after_any.iter().map(|d| (*d, "afterAny", None)));
            for (d, field, must) in deps {
                // Another user's job is "not found" as everywhere else (admins see every job).
                let Ok(dep) = self.visible(caller, d) else {
                    return Err(ApiError::new(400, at(i, format!("{field}: job {d} does not exist"))));
                };
                if dep.state.is_terminal() {
                    let ok = dep.state == api::JobState::Succeeded;
                    self.snap.record_finished(JobId(d), ok);
                    if must == Some(true) && !ok {
                        return Err(ApiError::new(
                            400,
                            at(
                                i,
                                format!(
                                    "dependsOn: job {d} {}, so this job could never start; submit it without the dependency, or depend on a new run of job {d}",
                                    dep.state.as_str()
                                ),
                            ),
                        ));
                    }
                    if must == Some(false) && ok {
                        return Err(ApiError::new(
                            400,
                            at(
                                i,
                                format!(
                                    "afterNotOk: job {d} succeeded, so this job (to run only if it fails) could never start; use afterAny to run after it whatever its end"
                                ),
                            ),
                        ));
                    }
                }
            }
            cores.push(core);
        }
        Ok(cores)
    }

    /// Takes checked specs into the queue.
    pub(super) fn admit(
        &mut self,
        caller: &Caller,
        specs: Vec<api::JobSpec>,
        cores: Vec<gpool_core::JobSpec>,
        now: i64,
    ) -> Result<api::Submitted, ApiError> {
        let mut ids = Vec::new();
        for (spec, mut core) in specs.into_iter().zip(cores) {
            let id = self.next_id;
            self.next_id += 1;
            let mut doc = JobDoc {
                id,
                name: spec.name.clone().unwrap_or_else(|| default_name(&spec)),
                user: caller.user.clone(),
                team: caller.team.clone(),
                queue: core.queue.to_string(),
                priority: core.priority,
                spec,
                state: api::JobState::Pending,
                end_reason: None,
                submitted_ms: now,
                started_ms: None,
                ended_ms: None,
                attempt: 0,
                restarts: 0,
                failures: 0,
                not_before_ms: None,
                prior_runtime_ms: 0,
                prior_gpu_milli_secs: 0,
                run: None,
                earlier_nodes: Vec::new(),
                exit: None,
                queued_ms: Some(now),
                usage: None,
                pool: None,
                budget_hold: None,
                learned_estimate: None,
                similar_runs_ms: Vec::new(),
                learned_watts_per_gpu: core.watts_per_gpu,
                held_by: None,
                pipeline: None,
                late: None,
            };
            self.history.learned_estimate(self.snap.policy(), &mut doc, &mut core);
            let over_hard =
                self.exhausted_budget(&caller.team, &core.queue, now).filter(|(b, _)| b.mode == BudgetMode::Hard);
            if let Err(e) = self.snap.submit(JobId(id), core) {
                return Err(ApiError::new(500, format!("internal error: {e}")));
            }
            let said = format!("job {id} ({}) submitted by {}", doc.name, doc.user);
            self.event_of(now, Some(id), Some(doc.user.clone()), "submitted", said);
            self.jobs.insert(id, doc);
            self.out.touch(id);
            ids.push(id);
            if let Some((b, spent)) = over_hard {
                let (_, next) = super::budgets::month_bounds(now);
                let text = super::budgets::Budgets::hold_text(&b, spent, next);
                super::budgets::hold_for_budget(id, &text, next, &mut self.snap, &mut self.jobs, &mut self.out);
                self.event(now, Some(id), "budget_hold", format!("job {id}: {text}"));
            } else if self.snap.job(JobId(id)).is_some_and(|j| j.spec.priority == i32::MIN) {
                self.event(
                    now,
                    Some(id),
                    "budget_soft",
                    format!("job {id}: its team or queue is over its soft budget; it runs preemptible, at the lowest priority"),
                );
            }
        }
        self.out.reschedule();
        Ok(api::Submitted { ids })
    }

    /// The budget at or over 100% a job of this team and queue would be under, if any.
    fn exhausted_budget(&self, team: &str, queue: &str, now: i64) -> Option<(super::budgets::Budget, f64)> {
        if self.budgets.is_empty() {
            return None;
        }
        let live = self.costs.live_costs(&self.snap, &self.jobs, now);
        self.budgets.exhausted(team, queue, &self.jobs, &live)
    }

    /// With queues configured, a job must name one of them (a job naming
    /// none goes to `default`, which must then be one): a misspelled queue
    /// would otherwise be a new queue without a quota.
    fn check_queue(&self, queue: Option<&str>) -> Result<(), String> {
        if self.cfg.queues.is_empty() {
            return Ok(());
        }
        let name = queue.unwrap_or("default");
        if self.cfg.queues.iter().any(|q| &*q.name == name) {
            return Ok(());
        }
        let known: Vec<&str> = self.cfg.queues.iter().map(|q| &*q.name).collect();
        Err(match queue {
            Some(q) => format!("queue: unknown queue {q:?}; the queues are {}", known.join(", ")),
            None => format!("queue: this cluster has no default queue; name one of {}", known.join(", ")),
        })
    }

    /// Brings every service's replicas toward what its scaler and rollout want (`services.rs`).
    pub(super) fn reconcile_services(&mut self, now: i64) {
        let (acts, actions) = self.services.reconcile(&self.jobs, &mut self.timers, now);
        self.act(acts, now);
        for a in actions {
            for _ in 0..a.start {
                let Some((owner, spec, generation)) = self.services.next_replica(&a.name, self.next_id) else { break };
                let submitted = self
                    .checked(&owner, std::slice::from_ref(&spec), now)
                    .and_then(|cores| self.admit(&owner, vec![spec], cores, now))
                    .map(|s| s.ids);
                self.services.replica_submitted(&a.name, generation, submitted, &mut self.timers, &mut self.out, now);
            }
        }
    }

    /// What a schedule submits must be what its owner could submit now.
    fn check_schedule_submits(
        &mut self,
        caller: &Caller,
        spec: &api::schedule::ScheduleSpec,
        now: i64,
    ) -> Result<(), ApiError> {
        let at = |what: &str, e: ApiError| ApiError::new(e.status, format!("{what}: {}", e.message));
        match (&spec.job, &spec.pipeline) {
            (Some(job), None) => {
                self.checked(caller, std::slice::from_ref(job), now).map(drop).map_err(|e| at("job", e))
            }
            (None, Some(p)) => self.prepare_pipeline(caller, p, now).map(drop).map_err(|e| at("pipeline", e)),
            _ => Ok(()),
        }
    }

    /// Submits a schedule's job or pipeline run as its owner.
    pub(super) fn submit_scheduled(&mut self, d: &super::schedules::ScheduleDoc, now: i64) -> Result<u64, ApiError> {
        let owner = super::schedules::owner(d);
        match (&d.spec.job, &d.spec.pipeline) {
            (Some(job), _) => {
                let mut job = job.clone();
                job.labels.insert("gpool.io/schedule".into(), d.name.clone());
                self.submit(&owner, vec![job], now)?.ids.first().copied().ok_or_else(|| ApiError::new(500, "no job"))
            }
            (None, Some(p)) => Ok(self.submit_pipeline(&owner, p.clone(), now)?.run),
            (None, None) => Err(ApiError::new(400, "it names neither a job nor a pipeline")),
        }
    }

    /// A job the caller may see: their own, or any for admins and readers. Others' jobs are "not found".
    pub(super) fn visible(&mut self, caller: &Caller, id: u64) -> Result<JobDoc, ApiError> {
        let doc = match self.jobs.get(&id) {
            Some(d) => Some(d.clone()),
            None => self
                .store
                .job(id)
                .map_err(|e| ApiError::new(500, e.to_string()))?
                .and_then(|r| serde_json::from_str::<JobDoc>(&r.doc).ok()),
        };
        match doc {
            Some(d) if caller.sees_all() || d.user == caller.user => Ok(d),
            _ => Err(ApiError::new(404, format!("job {id} not found"))),
        }
    }

    pub(super) fn list(&mut self, caller: &Caller, q: ListQuery) -> Result<api::JobList, ApiError> {
        let user = if caller.sees_all() { q.user } else { Some(caller.user.clone()) };
        let limit = q.limit.clamp(1, 1000);
        let rows = self
            .store
            .jobs(&JobQuery {
                user,
                queue: q.queue,
                states: q.states.iter().map(|s| s.as_str().to_string()).collect(),
                after: q.after,
                limit: limit + 1,
            })
            .map_err(|e| ApiError::new(500, e.to_string()))?;
        let more = rows.len() > limit as usize;
        let mut jobs = Vec::new();
        for r in rows.into_iter().take(limit as usize) {
            let doc = match self.jobs.get(&r.id) {
                Some(d) => d.clone(),
                None => serde_json::from_str(&r.doc).map_err(|e| ApiError::new(500, e.to_string()))?,
            };
            jobs.push(self.reading().view(&doc));
        }
        let next = if more { jobs.last().map(|j| j.id) } else { None };
        Ok(api::JobList { jobs, next })
    }

    pub(super) fn cancel(&mut self, caller: &Caller, id: u64, from: &str, now: i64) -> Result<api::JobView, ApiError> {
        let doc = self.visible(caller, id)?;
        if doc.user != caller.user && !doc.state.is_terminal() {
            self.out.audit(caller, from, &format!("cancelled job {id} of {}", doc.user), now);
        }
        match doc.state {
            s if s.is_terminal() => return Err(ApiError::new(409, format!("job {id} already ended ({})", s.as_str()))),
            api::JobState::Pending => {
                let _ = self.snap.remove_pending(JobId(id), false);
                let ended =
                    self.finish_terminal(id, api::JobState::Cancelled, format!("cancelled by {}", caller.user), now);
                self.out.reschedule();
                // Its final document is not in the store until this turn commits.
                if let Some(d) = ended {
                    return Ok(self.reading().view(&d));
                }
            }
            _ => {
                self.stop_run(id, Stop::Cancel { by: caller.user.clone() }, now);
                self.event(
                    now,
                    Some(id),
                    "cancelling",
                    format!("job {id} cancelled by {}; stop signal sent", caller.user),
                );
            }
        }
        let d = self.jobs.get(&id).cloned().or_else(|| self.visible(caller, id).ok()).unwrap_or(doc);
        Ok(self.reading().view(&d))
    }

    pub(super) fn history(
        &mut self,
        caller: &Caller,
        after: u64,
        job: Option<u64>,
    ) -> Result<Vec<api::EventView>, ApiError> {
        if let Some(j) = job {
            self.visible(caller, j)?;
        } else if !caller.sees_all() {
            return Err(ApiError::new(
                403,
                "only admins and readers may read every job's events; ask for one of your jobs' (gpool events --job ID; in the API, ?job=ID)",
            ));
        }
        let rows = self
            .store
            .events(after, job, super::calls::EVENTS_PAGE as u32)
            .map_err(|e| ApiError::new(500, e.to_string()))?;
        Ok(rows
            .into_iter()
            .map(|e| api::EventView {
                seq: e.seq,
                at: api::time::rfc3339(e.at_ms),
                job: e.job,
                user: None,
                kind: e.kind,
                message: e.message,
            })
            .collect())
    }
}
