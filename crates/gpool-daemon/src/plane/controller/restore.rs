//! Restore: the controller rebuilt from the store after a restart or a
//! fail-over. Unfinished jobs go back into the snapshot; runs are mapped
//! onto today's inventory and reconciled with what still runs (the local
//! agent at once, remote agents when they register).

use std::collections::BTreeSet;
use std::time::Duration;

use gpool_api as api;
use gpool_core::{JobId, Placement, StopCause, Time, job::Service};
use gpool_store::{TokenRow, Write};

use super::docs::{ACTIVE, JobDoc, Stop};
use super::timers::Timer;
use super::{Controller, Order};
use crate::plane::auth::hash_token;
use crate::plane::convert::to_core;
use crate::protocol::ReplicaKey;

impl Controller {
    /// Ensures an admin token with this secret exists.
    pub fn ensure_admin_token(&mut self, secret: &str, user: &str) -> anyhow::Result<()> {
        let hash = hash_token(secret);
        if !self.tokens.knows(&hash) {
            let row = TokenRow {
                hash: hash.clone(),
                user: user.into(),
                team: "admin".into(),
                role: "admin".into(),
                created_ms: self.clock.now_ms(),
                expires_ms: None,
                last_used_ms: None,
            };
            self.store.commit(&[Write::PutToken(row.clone())])?;
            self.tokens.learn(row);
        }
        Ok(())
    }

    /// Loads unfinished jobs into the snapshot and reconciles running replicas with the agent.
    pub(super) fn restore(&mut self) -> anyhow::Result<()> {
        self.history.learn_from_store(self.store.as_mut())?;
        let rows = self.store.jobs_in_states(&ACTIVE)?;
        let mut deps = BTreeSet::new();
        for row in rows {
            // A record that does not load is set aside, said, and the rest served.
            let doc: JobDoc = match serde_json::from_str(&row.doc) {
                Ok(doc) => doc,
                Err(e) => {
                    let why = format!("job {}: its stored record is set aside, it does not load: {e}", row.id);
                    tracing::error!("{why}");
                    let now = self.clock.now_ms();
                    self.event(now, Some(row.id), "job", why);
                    continue;
                }
            };
            deps.extend(doc.spec.depends_on.iter().chain(&doc.spec.after_any).chain(&doc.spec.after_not_ok).copied());
            self.jobs.insert(doc.id, doc);
        }
        for d in deps {
            if !self.jobs.contains_key(&d)
                && let Some(row) = self.store.job(d)?
            {
                self.snap.record_finished(JobId(d), row.state == "succeeded");
            }
        }
        let now = self.clock.now_ms();
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(mut doc) = self.jobs.get(&id).cloned() else { continue };
            let Ok(mut core) = to_core(&doc.spec, &doc.user, &doc.team, doc.submitted_ms) else {
                self.finish_terminal(
                    id,
                    api::JobState::Failed,
                    "its spec is no longer valid for this gpool".into(),
                    now,
                );
                continue;
            };
            core.watts_per_gpu = doc.learned_watts_per_gpu;
            core.array = doc
                .array
                .and_then(|a| a.limit.map(|limit| gpool_core::ArrayLimit { of: gpool_core::JobId(a.job), limit }));
            // Kept ones, or (a job submitted under another policy) today's history's.
            self.history.similar_runs(self.snap.policy(), &mut doc, &mut core);
            if let Some(d) = self.jobs.get_mut(&id).filter(|d| d.similar_runs_ms.is_empty()) {
                d.similar_runs_ms.clone_from(&doc.similar_runs_ms);
            }
            if let Some(l) = doc.learned_estimate.as_ref().filter(|l| l.planned) {
                core.estimate = Some(Duration::from_secs_f64(l.seconds.max(0.0)));
                core.estimate_learned = true;
            }
            let service = Service {
                prior_runtime: Duration::from_millis(doc.prior_runtime_ms),
                prior_gpu_milli_secs: doc.prior_gpu_milli_secs,
                restarts: doc.restarts,
            };
            let not_before = match doc.held_by {
                Some(_) => Time::NEVER,
                None => doc.not_before_ms.map_or(Time::MIN, Time::from_millis),
            };
            if let Err(e) = self.snap.restore_pending(JobId(id), std::sync::Arc::new(core), service, not_before) {
                let why = format!("job {id}: its stored record is set aside, it does not load: {e}");
                tracing::error!("{why}");
                self.jobs.remove(&id);
                self.event(now, Some(id), "job", why);
                continue;
            }
            let Some(run) = doc.run.clone().filter(|_| doc.state != api::JobState::Pending) else { continue };
            // The run's devices, mapped onto today's inventory.
            let placement: Option<Placement> = run
                .replicas
                .iter()
                .map(|r| {
                    let node = self.snap.node_id(&r.node)?;
                    let mig: Vec<&str> = r.mig.iter().map(String::as_str).collect();
                    let (gpus, mig) = self.snap.slots_of(node, &r.gpus, &mig)?;
                    Some(gpool_core::ReplicaPlacement {
                        node,
                        gpus,
                        mig,
                        cpus_milli: r.cpus_milli,
                        memory_mb: r.memory_mb,
                        share: r.gpu_share.map(|s| gpool_core::GpuShare { milli: s.milli, memory_mb: s.memory_mb }),
                    })
                })
                .collect();
            match placement.map(|p| self.snap.start(JobId(id), p, Time::from_millis(run.started_ms))) {
                Some(Ok(())) => {}
                _ => {
                    // Its devices are gone or taken: nothing can run it there any more.
                    for r in &run.replicas {
                        let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                        let Some(node) = self.snap.node_id(&r.node) else { continue };
                        match self.links.get(&node) {
                            Some(l) if l.is_local() => self.out.local.push(Order::Abandon { key }),
                            Some(_) => super::orders::push_command(
                                &mut self.links,
                                &mut self.out,
                                node,
                                api::agent::Command::Kill { replica: key.into() },
                            ),
                            None => {}
                        }
                    }
                    self.requeue_after_loss(id, "its devices are no longer in its nodes' inventory", now);
                    continue;
                }
            }
            if let Some(node) = run.replicas.first().and_then(|r| self.snap.node_id(&r.node)) {
                for port in run.master_port.into_iter().chain(run.port) {
                    self.ports.restored(node, port, id);
                }
            }
            match &run.stop {
                Some(Stop::Preempt { for_job }) => {
                    let _ = self.snap.request_stop(JobId(id), StopCause::Preempted { for_job: JobId(*for_job) });
                }
                // The placement it was to restart on was not kept: it restarts wherever it fits.
                Some(Stop::Resize { for_job, .. }) => {
                    let cause = StopCause::Resized { for_job: for_job.map(JobId) };
                    let _ = self.snap.request_stop(JobId(id), cause);
                }
                Some(_) => {
                    let _ = self.snap.request_stop(JobId(id), StopCause::Cancelled);
                }
                None => {}
            }
            if let Some(k) = run.kill_at_ms {
                self.timers.at(k, Timer::Kill { job: id, attempt: run.attempt });
            }
            if let Some(limit) = self.snap.job(JobId(id)).and_then(|j| j.spec.time_limit) {
                self.timers
                    .at(run.started_ms + limit.as_millis() as i64, Timer::TimeLimit { job: id, attempt: run.attempt });
            }
            // A start that no agent acknowledged before the restart gets a new bound.
            let unseen_remote = run.replicas.iter().any(|r| {
                !r.seen
                    && !r.ended()
                    && self.snap.node_id(&r.node).and_then(|n| self.links.get(&n)).is_some_and(|l| !l.is_local())
            });
            if unseen_remote {
                self.timers.at(now + self.start_bound_ms(), Timer::Unseen { job: id, attempt: run.attempt });
            }
            // Replicas on this process's own node are reconciled now; remote
            // ones when their agents register.
            // (A replica the local agent cannot find comes back as a `Lost` report.)
            for r in run.replicas.iter().filter(|r| !r.ended()) {
                let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                let local = self.snap.node_id(&r.node).and_then(|n| self.links.get(&n)).is_some_and(|l| l.is_local());
                if local {
                    let devices = self.reading().device_uuids(r);
                    self.out.local.push(Order::Reconcile { key, devices });
                }
            }
        }
        Ok(())
    }
}
