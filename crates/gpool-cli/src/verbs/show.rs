//! `gpool show`: jobs in detail, with their usage and the advisor's verdicts.

use gpool_api as api;

use super::IdArgs;
use crate::output::{Output, emit, gpus_of, json, text, usage_lines};

/// A job and what `show` prints with it once it has telemetry.
pub(crate) struct Shown {
    pub(crate) job: api::JobView,
    /// Its GPU utilisation curve, for the sparkline.
    pub(crate) curve: Vec<f64>,
    /// The advisor's findings, if the daemon gave them.
    pub(crate) advice: Option<api::AdviceView>,
}

/// Fetches every job first: the first id that fails ends the command with
/// its error (exit code 3 for a job that does not exist) and nothing printed.
pub(crate) fn run(a: IdArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let jobs: Vec<api::JobView> =
        a.ids.iter().map(|id| client.get(&format!("/jobs/{id}"))).collect::<anyhow::Result<_>>()?;
    let shown: Vec<Shown> = jobs
        .into_iter()
        .map(|job| {
            let (mut curve, mut advice) = (Vec::new(), None);
            // Usage and advice are extras: a job without them is still shown.
            if a.output == Output::Table && job.usage.is_some() {
                curve = client
                    .get::<api::JobUsageView>(&format!("/jobs/{}/usage", job.id))
                    .map(|v| v.points.iter().filter_map(|p| p.gpu_util).collect())
                    .unwrap_or_default();
                advice = client.get::<api::AdviceView>(&format!("/jobs/{}/advice", job.id)).ok();
            }
            Shown { job, curve, advice }
        })
        .collect();
    emit(&render(&shown, a.output)?);
    Ok(())
}

/// Each job in detail; in JSON, the job itself (one id) or a list (several).
pub(crate) fn render(shown: &[Shown], output: Output) -> anyhow::Result<String> {
    if output == Output::Json {
        let jobs: Vec<&api::JobView> = shown.iter().map(|s| &s.job).collect();
        return if jobs.len() == 1 { json(jobs[0]) } else { json(&jobs) };
    }
    let mut lines = Vec::new();
    for Shown { job: j, curve, advice } in shown {
        lines.push(format!("job {} ({})", j.id, j.name));
        lines.push(format!("  user/team/queue  {}/{}/{}", j.user, j.team, j.queue));
        lines.push(format!("  state            {}", j.state.as_str()));
        if let Some(r) = &j.reason {
            lines.push(format!("  reason           {r}"));
        }
        lines.push(format!("  priority         {}", j.priority));
        lines.push(format!("  command          {}", j.spec.command.argv().join(" ")));
        lines.push(format!("  resources        {}", gpus_of(j)));
        lines.push(format!("  submitted        {}", j.submitted_at));
        if let Some(s) = &j.started_at {
            lines.push(format!("  started          {s}"));
        }
        if let Some(e) = &j.ended_at {
            lines.push(format!("  ended            {e}"));
        }
        lines.push(format!("  attempt/restarts {}/{}", j.attempt, j.restarts));
        for r in &j.replicas {
            lines.push(format!("  rank {:<3} on {}  CUDA_VISIBLE_DEVICES={}", r.rank, r.node, r.cuda_visible_devices));
        }
        if let Some(x) = &j.exit {
            lines.push(format!("  exit             code {:?} signal {:?}", x.code, x.signal));
        }
        if let Some(u) = &j.usage {
            lines.extend(usage_lines(u, curve));
            // The advisor's one-line verdicts; `gpool advise` has the evidence.
            for f in advice.iter().flat_map(|a| &a.findings).filter(|f| f.kind != "not_enough_data") {
                lines.push(format!("  advice           {} (gpool advise {})", f.summary, j.id));
            }
        }
    }
    Ok(text(lines))
}
