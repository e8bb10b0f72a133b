//! Pipeline runs (issue 17). A run's stage instances are submitted as one
//! batch of ordinary jobs with consecutive ids (the run's id is the first),
//! each depending (`afterok`) on the instances it needs, so queues, fair
//! share, quotas and retries apply to stages as to any job, and a stage
//! whose dependency failed or was cancelled fails without starting
//! (`lifecycle.rs`, `fail_never_startable`). Everything about a run lives
//! in its jobs' documents: a restarted control plane knows its runs.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_api::pipeline::{PipelineCreated, PipelineList, PipelineSpec, PipelineView, StageView};
use gpool_core::JobId;
use gpool_core::pipeline::{self, Instance, StageShape, StageState};

use gpool_store::Store;

use super::admission::Admission;
use super::calls::ApiError;
use super::docs::{JobDoc, PipelineRef, visible};
use super::views::Reading;
use crate::plane::auth::Caller;

/// A pipeline checked and made into its jobs' specs.
pub(super) struct Prepared {
    name: String,
    shapes: Vec<StageShape>,
    instances: Vec<Instance>,
    labels: Vec<String>,
    specs: Vec<api::JobSpec>,
    cores: Vec<gpool_core::JobSpec>,
}

/// How many of the latest jobs a listing of runs looks through.
const LIST_WINDOW: u64 = 5000;

impl Admission<'_> {
    pub(super) fn submit_pipeline(
        &mut self,
        caller: &Caller,
        spec: PipelineSpec,
        now: i64,
    ) -> Result<PipelineCreated, ApiError> {
        let p = self.prepare_pipeline(caller, &spec, now)?;
        let Prepared { name, shapes, instances, labels, mut specs, mut cores } = p;
        let run = *self.next_id;
        // Each instance after those it needs: their ids are the run's id on.
        for (i, inst) in instances.iter().enumerate() {
            let deps: Vec<u64> = inst.needs.iter().map(|&n| run + n as u64).collect();
            specs[i].depends_on.extend(&deps);
            cores[i].dependencies.extend(deps.iter().map(|&d| JobId(d)));
        }
        let ids = self.admit(caller, specs, cores, now)?.ids;
        if ids.first() != Some(&run) || ids.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(ApiError::new(500, format!("internal error: a run's jobs got ids {ids:?}")));
        }
        let depths = depths(&instances);
        let jobs = ids.len() as u32;
        for ((id, inst), label) in ids.iter().zip(&instances).zip(labels) {
            if let Some(doc) = self.jobs.get_mut(id) {
                doc.pipeline = Some(PipelineRef {
                    run,
                    name: name.clone(),
                    stage: shapes[inst.stage].name.clone(),
                    label,
                    needs: shapes[inst.stage].needs.clone(),
                    matrix: inst.values.clone(),
                    depth: depths[(id - run) as usize],
                    jobs,
                });
            }
        }
        let said = format!("pipeline {name} run {run} submitted by {}: {} job(s)", caller.user, ids.len());
        self.out.event_of(now, Some(run), Some(caller.user.clone()), "pipeline_submitted", said);
        Ok(PipelineCreated { run, jobs: ids })
    }

    /// Checks a pipeline as its submission would, and makes its jobs' specs
    /// (without their dependencies on each other, whose ids are not known yet).
    pub(super) fn prepare_pipeline(
        &mut self,
        caller: &Caller,
        spec: &PipelineSpec,
        now: i64,
    ) -> Result<Prepared, ApiError> {
        let bad = |m: String| ApiError::new(400, m);
        if let Some(kind) = spec.kind.as_deref().filter(|k| *k != "Pipeline") {
            return Err(bad(format!("kind: {kind:?}; a pipeline file says kind: Pipeline (or nothing)")));
        }
        let name = spec.name.clone().unwrap_or_else(|| "pipeline".into());
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(format!("name: {name:?}: a pipeline's name is one word (it prefixes its jobs' names)")));
        }
        let shapes: Vec<StageShape> = spec
            .stages
            .iter()
            .map(|s| StageShape { name: s.name.clone(), needs: s.needs.clone(), matrix: s.matrix.clone() })
            .collect();
        let instances = pipeline::expand(&shapes).map_err(|e| bad(e.to_string()))?;
        let labels: Vec<String> = instances.iter().map(|i| i.label(&shapes[i.stage].name)).collect();
        let mut specs = Vec::with_capacity(instances.len());
        for (inst, label) in instances.iter().zip(&labels) {
            let stage = &spec.stages[inst.stage];
            let mut job = instantiate(&stage.job, &inst.values).map_err(|m| bad(format!("stage {label:?}: {m}")))?;
            job.name = Some(format!("{name}.{label}"));
            job.env.insert("GPOOL_PIPELINE_NAME".into(), name.clone());
            job.env.insert("GPOOL_STAGE".into(), stage.name.clone());
            for (k, v) in &inst.values {
                job.env.insert(format!("GPOOL_MATRIX_{}", k.to_ascii_uppercase()), v.clone());
            }
            specs.push(job);
        }
        self.state_disk.room_for_new_work(self.data_dir)?;
        let at = |i: usize, msg: String| format!("stage {:?}: {msg}", labels[i]);
        let cores = self.checked_as(caller, &specs, now, &at)?;
        Ok(Prepared { name, shapes, instances, labels, specs, cores })
    }
}

impl Reading<'_> {
    /// A run's jobs, in order; 404 when `run` is not the first job of a run the caller may see.
    pub(super) fn run_docs(&self, store: &mut dyn Store, caller: &Caller, run: u64) -> Result<Vec<JobDoc>, ApiError> {
        let first = visible(self.jobs, store, caller, run)
            .map_err(|_| ApiError::new(404, format!("pipeline run {run} not found")))?;
        let Some(p) = first.pipeline.clone() else {
            return Err(ApiError::new(
                404,
                format!("pipeline run {run} not found: job {run} is not part of a pipeline"),
            ));
        };
        if p.run != run {
            return Err(ApiError::new(
                404,
                format!("pipeline run {run} not found: job {run} is stage {} of run {}", p.label, p.run),
            ));
        }
        let mut docs = vec![first];
        for id in run + 1..run + u64::from(p.jobs) {
            docs.push(visible(self.jobs, store, caller, id)?);
        }
        Ok(docs)
    }

    pub(super) fn pipeline_view(
        &self,
        store: &mut dyn Store,
        caller: &Caller,
        run: u64,
    ) -> Result<PipelineView, ApiError> {
        let docs = self.run_docs(store, caller, run)?;
        Ok(self.run_view(&docs))
    }

    pub(super) fn run_view(&self, docs: &[JobDoc]) -> PipelineView {
        let mut stages = Vec::with_capacity(docs.len());
        let mut states = Vec::with_capacity(docs.len());
        for d in docs {
            let Some(p) = &d.pipeline else { continue };
            let v = self.view(d);
            states.push(stage_state(d.state));
            stages.push(StageView {
                stage: p.stage.clone(),
                label: p.label.clone(),
                job: d.id,
                needs: p.needs.clone(),
                matrix: p.matrix.clone(),
                depth: p.depth,
                state: d.state,
                reason: v.reason,
                started_at: v.started_at,
                ended_at: v.ended_at,
            });
        }
        let first = &docs[0];
        PipelineView {
            run: first.id,
            name: first.pipeline.as_ref().map_or_else(String::new, |p| p.name.clone()),
            user: first.user.clone(),
            state: pipeline::run_state(&states).to_string(),
            submitted_at: api::time::rfc3339(first.submitted_ms),
            stages,
        }
    }

    /// Runs among the latest jobs, newest first.
    /// `last`: the newest job's id.
    pub(super) fn pipelines(
        &self,
        store: &mut dyn Store,
        caller: &Caller,
        limit: u32,
        last: u64,
    ) -> Result<PipelineList, ApiError> {
        let limit = limit.clamp(1, 200) as usize;
        let query = gpool_store::JobQuery {
            user: (!caller.sees_all()).then(|| caller.user.clone()),
            after: Some(last.saturating_sub(LIST_WINDOW)),
            limit: LIST_WINDOW as u32,
            ..gpool_store::JobQuery::default()
        };
        let rows = store.jobs(&query).map_err(|e| ApiError::new(500, e.to_string()))?;
        let firsts: Vec<u64> = rows
            .iter()
            .rev()
            .filter(|r| {
                let run = match self.jobs.get(&r.id) {
                    Some(d) => d.pipeline.as_ref().map(|p| p.run),
                    None => serde_json::from_str::<JobDoc>(&r.doc).ok().and_then(|d| d.pipeline).map(|p| p.run),
                };
                run == Some(r.id)
            })
            .map(|r| r.id)
            .take(limit)
            .collect();
        let mut runs = Vec::with_capacity(firsts.len());
        for run in firsts {
            if let Ok(docs) = self.run_docs(store, caller, run) {
                runs.push(self.run_view(&docs));
            }
        }
        Ok(PipelineList { runs })
    }
}

fn stage_state(s: api::JobState) -> StageState {
    match s {
        api::JobState::Pending => StageState::Waiting,
        api::JobState::Starting | api::JobState::Running | api::JobState::Stopping => StageState::Running,
        api::JobState::Succeeded => StageState::Succeeded,
        api::JobState::Failed | api::JobState::TimedOut => StageState::Failed,
        api::JobState::Cancelled => StageState::Cancelled,
    }
}

/// Each instance's depth: how many lie before it on its longest chain of needs.
fn depths(instances: &[Instance]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(instances.len());
    for inst in instances {
        let d = inst.needs.iter().filter_map(|&n| out.get(n)).map(|d| d + 1).max().unwrap_or(0);
        out.push(d);
    }
    out
}

/// A stage's job spec for one matrix combination: `{{matrix.KEY}}` in its
/// command, environment values and working directory replaced.
fn instantiate(job: &api::JobSpec, values: &BTreeMap<String, String>) -> Result<api::JobSpec, String> {
    let mut out = job.clone();
    out.command = match &job.command {
        api::Command::Shell(s) => api::Command::Shell(substitute(s, values)?),
        api::Command::Argv(v) => api::Command::Argv(v.iter().map(|a| substitute(a, values)).collect::<Result<_, _>>()?),
    };
    for v in out.env.values_mut() {
        *v = substitute(v, values)?;
    }
    if let Some(w) = &mut out.workdir {
        *w = substitute(w, values)?;
    }
    Ok(out)
}

/// Replaces each `{{matrix.KEY}}` (spaces inside the braces allowed); other
/// `{{…}}` are left as written (they may be the job's own templates).
pub(super) fn substitute(text: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}") else { break };
        let inner = rest[open + 2..open + close].trim();
        out.push_str(&rest[..open]);
        match inner.strip_prefix("matrix.") {
            Some(key) => match values.get(key) {
                Some(v) => out.push_str(v),
                None if values.is_empty() => {
                    return Err(format!("{{{{{inner}}}}}: the stage has no matrix (add matrix: {{{key}: [...]}})"));
                }
                None => {
                    let keys: Vec<&str> = values.keys().map(String::as_str).collect();
                    return Err(format!(
                        "{{{{{inner}}}}}: its matrix has no key {key:?} (its keys: {})",
                        keys.join(", ")
                    ));
                }
            },
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}
