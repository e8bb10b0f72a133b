//! How each call of the call table (`calls.rs`) is answered: the caller is
//! identified by its token, its access checked, and the call carried out.

use gpool_api as api;
use gpool_core::JobId;
use gpool_store::JobQuery;

use super::calls::{ApiError, Call, ListQuery, LogTarget};
use super::docs::{JobDoc, Stop};
use super::{Controller, faults};
use crate::plane::auth::{Caller, Credential};

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
                let r = admission!(self).submit(&caller, specs, now);
                self.reply(reply, r);
            }
            Call::SubmitPipeline { spec, reply } => {
                let r = admission!(self).submit_pipeline(&caller, *spec, now);
                self.reply(reply, r);
            }
            Call::Pipeline { run, reply } => {
                let r = reading!(self).pipeline_view(self.store.as_mut(), &caller, run);
                self.reply(reply, r);
            }
            Call::Pipelines { limit, reply } => {
                let last = self.next_id.saturating_sub(1);
                let r = reading!(self).pipelines(self.store.as_mut(), &caller, limit, last);
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
            Call::CreateReservation { req, reply } => {
                let r = self.reservations.create(&caller, req, &mut self.snap, &mut self.out, now);
                self.reply(reply, r);
            }
            Call::Reservations { reply } => {
                let r = Ok(self.reservations.views(&self.snap, now));
                self.reply(reply, r);
            }
            Call::DeleteReservation { name, reply } => {
                let r = self.reservations.delete(&caller, &name, &mut self.snap, &mut self.out, now);
                self.reply(reply, r);
            }
            Call::Registries { reply } => {
                let r = Ok(self.registries.views(&caller));
                self.reply(reply, r);
            }
            Call::ApplyService { name, spec, reply } => {
                let r = self.services.check(&name, *spec).and_then(|(spec, cfg, probe)| {
                    // A replica must be a job this caller could submit.
                    admission!(self).checked(&caller, std::slice::from_ref(&probe), now)?;
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
                    // No such replica, so no such log.
                    if rank >= d.spec.replicas.max {
                        return Err(ApiError::new(
                            404,
                            format!("rank {rank}: job {id} has at most {} replica(s)", d.spec.replicas.max),
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
            Call::Attach { id, session, reply } => {
                let found = self.visible(&caller, id).and_then(|d| {
                    let exposed = d.spec.expose.iter().filter_map(|p| self.services.exposed_url(id, *p)).collect();
                    super::terminals::attach(&caller, &d, session, exposed, &self.snap)
                });
                match found {
                    Err(e) => self.reply(reply, Err(e)),
                    Ok((acts, view)) => {
                        self.act(acts, now);
                        self.reply(reply, Ok(view));
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

    /// Brings every service's replicas toward what its scaler and rollout want (`services.rs`).
    pub(super) fn reconcile_services(&mut self, now: i64) {
        let (acts, actions) = self.services.reconcile(&self.jobs, &mut self.timers, now);
        self.act(acts, now);
        for a in actions {
            for _ in 0..a.start {
                let Some((owner, spec, generation)) = self.services.next_replica(&a.name, self.next_id) else { break };
                let mut admission = admission!(self);
                let submitted = admission
                    .checked(&owner, std::slice::from_ref(&spec), now)
                    .and_then(|cores| admission.admit(&owner, vec![spec], cores, now))
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
                admission!(self).checked(caller, std::slice::from_ref(job), now).map(drop).map_err(|e| at("job", e))
            }
            (None, Some(p)) => {
                admission!(self).prepare_pipeline(caller, p, now).map(drop).map_err(|e| at("pipeline", e))
            }
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
                admission!(self)
                    .submit(&owner, vec![job], now)?
                    .ids
                    .first()
                    .copied()
                    .ok_or_else(|| ApiError::new(500, "no job"))
            }
            (None, Some(p)) => Ok(admission!(self).submit_pipeline(&owner, p.clone(), now)?.run),
            (None, None) => Err(ApiError::new(400, "it names neither a job nor a pipeline")),
        }
    }

    /// A job the caller may see: their own, or any for admins and readers. Others' jobs are "not found".
    pub(super) fn visible(&mut self, caller: &Caller, id: u64) -> Result<JobDoc, ApiError> {
        super::docs::visible(&self.jobs, self.store.as_mut(), caller, id)
    }

    /// Cancels every job of a run that has not ended, those that need others first.
    pub(super) fn cancel_pipeline(
        &mut self,
        caller: &Caller,
        run: u64,
        from: &str,
        now: i64,
    ) -> Result<api::pipeline::PipelineView, ApiError> {
        let docs = reading!(self).run_docs(self.store.as_mut(), caller, run)?;
        if docs.iter().all(|d| d.state.is_terminal()) {
            return Err(ApiError::new(409, format!("pipeline run {run} already ended")));
        }
        let mut docs = docs;
        for d in docs.iter_mut().rev().filter(|d| !d.state.is_terminal()) {
            // One that ended meanwhile (409) is left as it ended. A job ended
            // now is in the store only once this turn commits: its answer says how it stands.
            if let Ok(v) = self.cancel(caller, d.id, from, now) {
                d.state = v.state;
                d.end_reason = v.reason;
            }
        }
        Ok(self.reading().run_view(&docs))
    }

    pub(super) fn list(&mut self, caller: &Caller, q: ListQuery) -> Result<api::JobList, ApiError> {
        let user = if caller.sees_all() { q.user } else { Some(caller.user.clone()) };
        let limit = q.limit.clamp(1, 1000);
        let rows = self
            .store
            .jobs(&JobQuery {
                user,
                team: q.team,
                queue: q.queue,
                states: q.states.iter().map(|s| s.as_str().to_string()).collect(),
                ended_from: q.ended_from,
                ended_before: q.ended_before,
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
