//! `gpool show`: jobs in detail, with their usage and the advisor's verdicts.

use gpool_api as api;
use gpool_api::quantity::format_duration;

use super::IdArgs;
use crate::output::{Output, emit, gpus_of, text, usage_lines, when};

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
    let jobs: Vec<api::JobView> = crate::job_ref::resolve(&client, &a.ids, None)?
        .iter()
        .map(|id| client.get(&format!("/jobs/{id}")))
        .collect::<anyhow::Result<_>>()?;
    let shown: Vec<Shown> = jobs
        .into_iter()
        .map(|job| {
            let (mut curve, mut advice) = (Vec::new(), None);
            // Usage and advice are extras: a job without them is still shown.
            if !a.output.is_data() && job.usage.is_some() {
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
    if output.is_data() {
        let jobs: Vec<&api::JobView> = shown.iter().map(|s| &s.job).collect();
        return if jobs.len() == 1 { output.data(jobs[0]) } else { output.data(&jobs) };
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
        if let Some(l) = &j.learned_estimate {
            lines.push(format!(
                "  estimate         {}, learned from {} similar jobs ({}){}",
                if l.seconds < 10.0 {
                    format!("{:.1}s", l.seconds.max(0.0))
                } else {
                    format_duration(std::time::Duration::from_secs_f64(l.seconds))
                },
                l.samples,
                basis_text(&l.basis),
                if l.planned { "" } else { "; shown, not planned with (see docs/scheduling.md)" }
            ));
        } else if let Some(e) = &j.spec.estimate {
            lines.push(format!("  estimate         {} (given)", e.text()));
        }
        if let Some(t) = &j.spec.time_limit {
            let text = t.text();
            let shown = match gpool_api::quantity::parse_duration(&text) {
                Ok(d) => format_duration(d),
                Err(_) => text,
            };
            lines.push(format!("  time limit       {shown}"));
        }
        if let Some(d) = &j.spec.deadline {
            let late = j.late.as_deref().map_or_else(String::new, |l| format!(" — late: {l}"));
            lines.push(format!("  deadline         {}{late}", when(d)));
        }
        lines.push(format!("  submitted        {}", when(&j.submitted_at)));
        if let Some(s) = &j.started_at {
            lines.push(format!("  started          {}", when(s)));
        }
        if let Some(e) = &j.ended_at {
            lines.push(format!("  ended            {}", when(e)));
        }
        lines.push(format!("  attempt/restarts {}/{}", j.attempt, j.restarts));
        if j.spec.replicas.is_elastic() {
            let (min, max) = (j.spec.replicas.min, j.spec.replicas.max);
            lines.push(format!("  elastic          {} of {min}:{max} replicas running", j.running_replicas));
            // Each change of size and why: the job's size over time.
            for r in &j.resizes {
                lines.push(format!("  resized          {}  {} → {}  {}", when(&r.at), r.from, r.to, r.why));
            }
        }
        for r in &j.replicas {
            lines.push(format!("  rank {:<3} on {}  CUDA_VISIBLE_DEVICES={}", r.rank, r.node, r.cuda_visible_devices));
        }
        if let Some(x) = &j.exit {
            lines.push(format!("  exit             {}", exit_text(x.code, x.signal)));
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

/// What the similar jobs of a learned estimate had in common with it.
fn basis_text(basis: &str) -> &str {
    match basis {
        "same" => "same user, name, GPUs and queue",
        "user-name" => "same user and name",
        "user-gpus" => "same user, GPUs and queue",
        "queue-gpus" => "same queue and GPUs",
        other => other,
    }
}

/// How a process ended, as a shell would say it: `code 0`, `killed by
/// signal 9 (SIGKILL)`.
fn exit_text(code: Option<i32>, signal: Option<i32>) -> String {
    const NAMES: [&str; 16] = [
        "", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1",
        "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM",
    ];
    match (code, signal) {
        (_, Some(s)) => match NAMES.get(s as usize).filter(|n| !n.is_empty()) {
            Some(name) => format!("killed by signal {s} ({name})"),
            None => format!("killed by signal {s}"),
        },
        (Some(c), None) => format!("code {c}"),
        (None, None) => "unknown (no exit record)".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_exit_reads_as_a_shell_would_say_it() {
        assert_eq!(super::exit_text(Some(0), None), "code 0");
        assert_eq!(super::exit_text(Some(137), None), "code 137");
        assert_eq!(super::exit_text(None, Some(9)), "killed by signal 9 (SIGKILL)");
        assert_eq!(super::exit_text(None, Some(40)), "killed by signal 40");
        assert_eq!(super::exit_text(None, None), "unknown (no exit record)");
    }

    use super::*;
    use crate::testkit::{advice, assert_snapshot, finding, job, usage};
    use gpool_api::JobState;

    fn shown(job: api::JobView) -> Shown {
        Shown { job, curve: Vec::new(), advice: None }
    }

    #[test]
    fn show_says_where_a_learned_estimate_comes_from() {
        let mut j = job(4).gpus(1).build();
        j.learned_estimate =
            Some(api::LearnedEstimate { seconds: 7800.0, samples: 14, basis: "same".into(), planned: true });
        let text = render(&[shown(j)], Output::Table).unwrap();
        assert!(
            text.contains("  estimate         2h10m, learned from 14 similar jobs (same user, name, GPUs and queue)\n"),
            "{text}"
        );
        let mut j = job(5).build();
        j.learned_estimate =
            Some(api::LearnedEstimate { seconds: 0.54, samples: 2, basis: "queue-gpus".into(), planned: false });
        let text = render(&[shown(j)], Output::Table).unwrap();
        assert!(
            text.contains("0.5s, learned from 2 similar jobs (same queue and GPUs); shown, not planned with"),
            "{text}"
        );
    }

    #[test]
    fn show_prints_a_pending_job() {
        let one = [shown(job(3).name("sweep-7").gpus(8).priority(100).reason("waiting for 8 GPUs").build())];
        assert_snapshot("show-pending.txt", &render(&one, Output::Table).unwrap());
        assert_snapshot("show-pending.json", &render(&one, Output::Json).unwrap());
    }

    #[test]
    fn show_prints_usage_and_advice_of_finished_jobs() {
        let done = job(7)
            .name("train")
            .gpus(2)
            .replicas(2)
            .running_on("node-a", &["0,1", "2,3"])
            .state(JobState::Failed)
            .reason("exit code 1")
            .ended("2025-03-01T10:30:00Z")
            .exit(Some(1), None)
            .attempt(2, 1)
            .usage(usage(3.25, 1.5).util(41.6).peak_memory_mb(61_440).cpu(7.25).cost(13.0).energy_wh(1_862.0))
            .build();
        let curve: Vec<f64> = (0..120).map(|i| f64::from(i % 40) * 2.5).collect();
        let adv = advice(7)
            .finding(finding("not_enough_data", "not enough telemetry yet"))
            .finding(finding("input_bound", "input-pipeline bound: the GPU is busy only 42% of the time"));
        let killed = job(8)
            .name("shell")
            .shell("python serve.py --port 8000")
            .state(JobState::Cancelled)
            .ended("2025-03-01T09:05:00Z")
            .exit(None, Some(9))
            .usage(usage(0.001, 0.001))
            .build();
        let both = [Shown { job: done, curve, advice: Some(adv.build()) }, shown(killed)];
        assert_snapshot("show-finished.txt", &render(&both, Output::Table).unwrap());
        assert_snapshot("show-finished.json", &render(&both, Output::Json).unwrap());
    }

    #[test]
    fn show_prints_an_elastic_jobs_size_and_each_resize() {
        let mut j = crate::testkit::job(7).state(gpool_api::JobState::Running).build();
        j.spec.replicas = gpool_api::spec::Replicas { min: 2, max: 8 };
        j.running_replicas = 4;
        j.resizes = vec![gpool_api::ResizeView {
            at: "2025-03-01T09:00:05Z".into(),
            from: 8,
            to: 4,
            why: "for job 9 (higher priority)".into(),
        }];
        let out = render(&[shown(j)], Output::Table).expect("render");
        assert!(out.contains("elastic          4 of 2:8 replicas running"), "{out}");
        assert!(out.contains("8 → 4  for job 9 (higher priority)"), "{out}");
    }
}
