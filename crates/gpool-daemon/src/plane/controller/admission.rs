//! Admission: a batch of job specs checked as one (a batch is accepted
//! whole or not at all: queue, feasibility, budgets, dependencies, paths)
//! and taken into the queue with consecutive ids. Submissions, pipeline
//! runs, service replicas and scheduled runs all come in through here.

use std::collections::BTreeMap;
use std::path::Path;

use gpool_api as api;
use gpool_core::{JobId, QueueConfig, Snapshot};
use gpool_store::Store;

use super::budgets::{BudgetMode, Budgets};
use super::calls::ApiError;
use super::conditions::StateDisk;
use super::costs::Costs;
use super::docs::{JobDoc, default_name};
use super::elastic::Fleet;
use super::history::History;
use super::outbox::Outbox;
use crate::plane::auth::Caller;
use crate::plane::convert::to_core;

/// What admission reads and writes: the queue (snapshot, live jobs, the
/// next id), the store (dependencies on ended jobs) and what decides
/// whether a job may come in.
pub(super) struct Admission<'a> {
    pub(super) snap: &'a mut Snapshot,
    pub(super) jobs: &'a mut BTreeMap<u64, JobDoc>,
    pub(super) next_id: &'a mut u64,
    pub(super) store: &'a mut dyn Store,
    pub(super) out: &'a mut Outbox,
    /// The configured queues (`Config::queues`).
    pub(super) queues: &'a [QueueConfig],
    pub(super) data_dir: &'a Path,
    pub(super) state_disk: &'a StateDisk,
    pub(super) costs: &'a Costs,
    pub(super) budgets: &'a Budgets,
    pub(super) history: &'a History,
    pub(super) fleet: &'a Fleet,
    pub(super) reservations: &'a super::reservations::Reservations,
}

impl Admission<'_> {
    pub(super) fn submit(
        &mut self,
        caller: &Caller,
        specs: Vec<api::JobSpec>,
        now: i64,
    ) -> Result<api::Submitted, ApiError> {
        if specs.is_empty() {
            return Err(ApiError::new(400, "jobs: the batch is empty"));
        }
        self.state_disk.room_for_new_work(self.data_dir)?;
        let (specs, tasks) = expand_arrays(specs)?;
        let mut cores = self.checked(caller, &specs, now)?;
        // A task's array is its first task's id: ids are given in order from the next one.
        let first_id = *self.next_id;
        for (core, task) in cores.iter_mut().zip(&tasks) {
            if let Some(t) = task {
                core.array = t.limit.map(|limit| gpool_core::ArrayLimit { of: JobId(first_id + t.job), limit });
            }
        }
        let submitted = self.admit(caller, specs, cores, now)?;
        for (id, task) in submitted.ids.iter().zip(&tasks) {
            if let (Some(t), Some(doc)) = (task, self.jobs.get_mut(id)) {
                doc.array = Some(api::ArrayView { job: first_id + t.job, ..*t });
            }
        }
        Ok(submitted)
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
            if let Some(name) = &spec.reservation {
                self.reservations
                    .check(name, &caller.user, &caller.team, now)
                    .map_err(|m| ApiError::new(400, at(i, format!("reservation: {m}"))))?;
            }
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
                let Ok(dep) = super::docs::visible(self.jobs, self.store, caller, d) else {
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
            let id = *self.next_id;
            *self.next_id += 1;
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
                array: None,
                late: None,
                resizes: Vec::new(),
            };
            self.history.learned_estimate(self.snap.policy(), &mut doc, &mut core);
            let over_hard =
                self.exhausted_budget(&caller.team, &core.queue, now).filter(|(b, _)| b.mode == BudgetMode::Hard);
            if let Err(e) = self.snap.submit(JobId(id), core) {
                return Err(ApiError::new(500, format!("internal error: {e}")));
            }
            let said = format!("job {id} ({}) submitted by {}", doc.name, doc.user);
            self.out.job_event(now, &doc, "submitted", said);
            self.jobs.insert(id, doc);
            self.out.touch(id);
            ids.push(id);
            if let Some((b, spent)) = over_hard {
                let (_, next) = super::budgets::month_bounds(now);
                let text = super::budgets::Budgets::hold_text(&b, spent, next);
                super::budgets::hold_for_budget(id, &text, next, self.snap, self.jobs, self.out);
                self.out.event_of(now, Some(id), Some(caller.user.clone()), "budget_hold", format!("job {id}: {text}"));
            } else if self.snap.job(JobId(id)).is_some_and(|j| j.spec.priority == i32::MIN) {
                self.out.event_of(now, Some(id), Some(caller.user.clone()),
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
        let live = self.costs.live_costs(self.snap, self.jobs, now);
        self.budgets.exhausted(team, queue, self.jobs, &live)
    }

    /// With queues configured, a job must name one of them (a job naming
    /// none goes to `default`, which must then be one): a misspelled queue
    /// would otherwise be a new queue without a quota.
    fn check_queue(&self, queue: Option<&str>) -> Result<(), String> {
        if self.queues.is_empty() {
            return Ok(());
        }
        let name = queue.unwrap_or("default");
        if self.queues.iter().any(|q| &*q.name == name) {
            return Ok(());
        }
        let known: Vec<&str> = self.queues.iter().map(|q| &*q.name).collect();
        Err(match queue {
            Some(q) => format!("queue: unknown queue {q:?}; the queues are {}", known.join(", ")),
            None => format!("queue: this cluster has no default queue; name one of {}", known.join(", ")),
        })
    }
}

/// Each array spec made into its tasks (one spec per index, in order), with
/// each task's place: `job` is its array's offset in the batch until ids are
/// known. A batch without arrays comes back as it was.
#[allow(clippy::type_complexity)]
fn expand_arrays(specs: Vec<api::JobSpec>) -> Result<(Vec<api::JobSpec>, Vec<Option<api::ArrayView>>), ApiError> {
    let batch = specs.len() > 1;
    let mut out = Vec::with_capacity(specs.len());
    let mut tasks = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let Some(text) = spec.array.clone() else {
            out.push(spec);
            tasks.push(None);
            continue;
        };
        let at = if batch { format!("jobs[{i}].array") } else { "array".to_string() };
        let a = api::spec::parse_array(&text).map_err(|e| ApiError::new(400, format!("{at}: {e}")))?;
        if spec.service.is_some() {
            return Err(ApiError::new(400, format!("{at}: a service scales itself; it is not an array")));
        }
        let offset = out.len() as u64;
        let count = a.indexes.len() as u32;
        if out.len() + a.indexes.len() > api::spec::MAX_ARRAY_TASKS {
            return Err(ApiError::new(
                400,
                format!("{at}: at most {} jobs in one submission, arrays' tasks included", api::spec::MAX_ARRAY_TASKS),
            ));
        }
        let (min_index, max_index) = (a.indexes.iter().min().copied(), a.indexes.iter().max().copied());
        let (min_index, max_index) = (min_index.unwrap_or(0), max_index.unwrap_or(0));
        for index in a.indexes {
            out.push(spec.clone());
            let task = api::ArrayView { job: offset, index, tasks: count, limit: a.limit, min_index, max_index };
            tasks.push(Some(task));
        }
    }
    Ok((out, tasks))
}
