//! Run times learned from history (`gpool_core::runtime_history`): a job
//! submitted without an estimate gets one from the successes of jobs like
//! it, which backfill then plans with; every success is recorded.
//!
//! The draw per GPU of each run that reported power is recorded the same
//! way (`gpool_core::power_history`): power budgets count a job like it at
//! that draw instead of its GPUs' power limit.
//!
//! The history lives in memory. A controller that starts (or takes over)
//! rebuilds it from the successes among the last [`REBUILD_JOBS`] jobs of
//! the store, so the start-up cost is bounded however long the store's history.

use gpool_api as api;
use gpool_core::power_history::{DrawHistory, DrawKey};
use gpool_core::runtime_history::{Learned, RunKey, RuntimeHistory};
use gpool_core::{Job, JobSpec, Policy, Time};
use gpool_store::{JobQuery, Store};

use super::docs::JobDoc;

/// How many of the latest jobs a starting controller learns from.
pub(super) const REBUILD_JOBS: u64 = 20_000;

/// What a job is compared by: its user, name, devices over all replicas and queue.
fn run_key(doc: &JobDoc, core: &JobSpec) -> RunKey {
    RunKey {
        user: core.user.clone(),
        name: doc.name.as_str().into(),
        gpus: core.replica.gpu.device_count() * core.replicas,
        queue: core.queue.clone(),
    }
}

/// What a job's draw is compared by: user, name and GPU model ("" = any).
fn draw_key(user: &str, name: &str, model: &str) -> DrawKey {
    DrawKey { user: user.into(), name: name.into(), model: model.into() }
}

/// The mean draw per GPU of a run from its usage, where power was sampled.
fn watts_per_gpu(u: &api::UsageSummary) -> Option<f64> {
    let wh = u.energy_wh?;
    (u.gpu_hours > 0.0).then(|| wh / u.gpu_hours)
}

pub(super) fn view(l: &Learned, planned: bool) -> api::LearnedEstimate {
    api::LearnedEstimate {
        seconds: l.estimate.as_millis() as f64 / 1000.0,
        samples: l.samples,
        basis: l.basis.as_str().into(),
        planned,
    }
}

/// What the pool learned from finished jobs: run times of successes, and draws per GPU.
pub(super) struct History {
    runs: RuntimeHistory,
    draws: DrawHistory,
}

impl Default for History {
    fn default() -> History {
        History { runs: RuntimeHistory::new(Default::default()), draws: DrawHistory::default() }
    }
}

impl History {
    /// Gives a job that came with no estimate the one its history suggests.
    pub(super) fn learned_estimate(&self, policy: &Policy, doc: &mut JobDoc, core: &mut JobSpec) {
        self.similar_runs(policy, doc, core);
        if core.estimate.is_some() {
            return;
        }
        if let Some(l) = self.runs.estimate(&run_key(doc, core)) {
            let planned = policy.plans_with_learned_estimates();
            if planned {
                core.estimate = Some(l.estimate);
                core.estimate_learned = true;
            }
            doc.learned_estimate = Some(view(&l, planned));
        }
    }

    /// Gives a job the run times of jobs like it, when the policy orders by
    /// them (`within_level=gittins`): at submission, or at a restart for a
    /// job submitted under another policy (from the history as it is then).
    pub(super) fn similar_runs(&self, policy: &Policy, doc: &mut JobDoc, core: &mut JobSpec) {
        if !policy.orders_by_history() {
            return;
        }
        if doc.similar_runs_ms.is_empty()
            && let Some((runs, _)) = self.runs.similar(&run_key(doc, core))
        {
            doc.similar_runs_ms = runs;
        }
        if !doc.similar_runs_ms.is_empty() {
            core.similar_runs = Some(doc.similar_runs_ms.as_slice().into());
        }
    }

    /// A job succeeded at `now`: its total run time (every attempt) joins the history.
    /// Call before the snapshot forgets the job.
    pub(super) fn learn_success(&mut self, doc: &JobDoc, job: &Job, now: i64) {
        let ran = job.runtime(Time::from_millis(now));
        let key = run_key(doc, &job.spec);
        self.runs.record(&key, ran);
    }

    /// The draw per GPU jobs like this one drew at most lately, if any ran.
    pub(super) fn learned_watts(&self, spec: &api::JobSpec, core: &JobSpec) -> Option<u32> {
        let name = spec.name.clone().unwrap_or_else(|| super::docs::default_name(spec));
        let model = core.replica.gpu_model.as_deref().unwrap_or("");
        self.draws.expected(&draw_key(&core.user, &name, model))
    }

    /// A run ended with this usage (from its samples) on a GPU of `model`:
    /// its draw per GPU joins the history.
    pub(super) fn learn_draw(&mut self, doc: &JobDoc, usage: &api::UsageSummary, model: Option<&str>) {
        let Some(w) = watts_per_gpu(usage) else { return };
        let key = draw_key(&doc.user, &doc.name, model.unwrap_or(""));
        self.draws.record(&key, w);
    }

    /// Rebuilds the history from the store's latest jobs.
    pub(super) fn learn_from_store(&mut self, store: &mut dyn Store) -> anyhow::Result<()> {
        let last = store.max_job_id()?;
        let mut after = last.saturating_sub(REBUILD_JOBS);
        loop {
            let q =
                JobQuery { states: vec!["succeeded".into()], after: Some(after), limit: 1000, ..JobQuery::default() };
            let rows = store.jobs(&q)?;
            let Some(end) = rows.last().map(|r| r.id) else { break };
            for row in rows {
                let Ok(doc) = serde_json::from_str::<JobDoc>(&row.doc) else { continue };
                // The last run's start (`started_ms` is the first's); earlier runs are in `prior_runtime_ms`.
                let started = doc.run.as_ref().map(|r| r.started_ms).or(doc.started_ms);
                let (Some(started), Some(ended)) = (started, doc.ended_ms) else { continue };
                let Ok(core) = crate::plane::convert::to_core(&doc.spec, &doc.user, &doc.team, doc.submitted_ms) else {
                    continue;
                };
                if let Some(w) = doc.usage.as_ref().and_then(watts_per_gpu) {
                    self.draws.record(&draw_key(&doc.user, &doc.name, ""), w);
                }
                let ran = doc.prior_runtime_ms + u64::try_from(ended - started).unwrap_or(0);
                self.runs.record(&run_key(&doc, &core), std::time::Duration::from_millis(ran));
            }
            after = end;
        }
        Ok(())
    }
}
