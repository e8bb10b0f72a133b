//! `gpool schedule apply|list|delete`: recurring jobs and pipelines, on a
//! cron schedule in a stated time zone (like Slurm's scrontab and
//! Kubernetes CronJobs).

use std::path::PathBuf;

use anyhow::{Context, bail};
use gpool_api::schedule::{ScheduleSpec, ScheduleView};

use super::ListArgs;
use crate::client::Connect;
use crate::output::{Output, emit, text, truncate, when};

/// `gpool schedule apply NAME ...`.
#[derive(clap::Args, Debug)]
pub(crate) struct ApplyArgs {
    /// The schedule's name (letters, digits, '-', '_', '.'); applying it again changes it.
    name: String,
    /// A schedule file: schedule:, timeZone:, and job: or pipeline:.
    #[arg(long, short = 'f', conflicts_with_all = ["cron", "job", "pipeline"])]
    file: Option<PathBuf>,
    /// Cron: minute hour day-of-month month day-of-week ("0 2 * * *"), or @daily, @hourly…
    #[arg(long)]
    cron: Option<String>,
    /// The time zone the cron times are in (Europe/Paris, UTC); stated, never guessed.
    #[arg(long = "tz")]
    time_zone: Option<String>,
    /// A job spec file to submit at each occurrence.
    #[arg(long, conflicts_with = "pipeline")]
    job: Option<PathBuf>,
    /// A pipeline file to run at each occurrence.
    #[arg(long)]
    pipeline: Option<PathBuf>,
    /// Start a run even while the previous one has not ended (by default that occurrence passes).
    #[arg(long)]
    allow_overlap: bool,
    /// Keep it, but submit nothing until applied again without --suspend.
    #[arg(long)]
    suspend: bool,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool schedule delete NAME`.
#[derive(clap::Args, Debug)]
pub(crate) struct DeleteArgs {
    name: String,
    #[command(flatten)]
    connect: Connect,
}

fn yaml<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<T> {
    let body = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    gpool_api::yaml::from_str(&body).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn spec_of(a: &ApplyArgs) -> anyhow::Result<ScheduleSpec> {
    if let Some(f) = &a.file {
        let mut spec: ScheduleSpec = yaml(f)?;
        spec.suspend |= a.suspend;
        if a.allow_overlap {
            spec.concurrency = Some("allow".into());
        }
        return Ok(spec);
    }
    let Some(cron) = a.cron.clone() else {
        bail!(
            "give a schedule: --cron \"0 2 * * *\" --tz Europe/Paris with --job FILE or --pipeline FILE, or -f SCHEDULE.yaml"
        );
    };
    let Some(time_zone) = a.time_zone.clone() else {
        bail!("--tz: say which time zone {cron:?} is in (e.g. --tz Europe/Paris, --tz UTC)");
    };
    let (job, pipeline) = match (&a.job, &a.pipeline) {
        (Some(j), None) => (Some(yaml(j)?), None),
        (None, Some(p)) => (None, Some(super::pipeline::read(p)?)),
        _ => bail!("what runs: --job FILE (a job spec) or --pipeline FILE"),
    };
    Ok(ScheduleSpec {
        schedule: cron,
        time_zone,
        concurrency: a.allow_overlap.then(|| "allow".into()),
        suspend: a.suspend,
        job,
        pipeline,
    })
}

pub(crate) fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let spec = spec_of(&a)?;
    let v: ScheduleView = a.connect.client()?.put(&format!("/schedules/{}", a.name), &spec)?;
    match a.output {
        Output::Json | Output::Yaml => emit(&a.output.data(&v)?),
        Output::Table | Output::Wide => emit(&format!(
            "schedule {} ({} {}, {}): next run {}\n",
            v.name,
            v.schedule,
            v.time_zone,
            v.kind,
            v.next_at.as_deref().map_or_else(|| "never".into(), when)
        )),
    }
    Ok(())
}

pub(crate) fn list(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<ScheduleView> = a.connect.client()?.get("/schedules")?;
    if !a.output.is_data() && list.is_empty() {
        emit("no schedules: gpool schedule apply NAME --cron \"0 2 * * *\" --tz UTC --pipeline FILE\n");
        return Ok(());
    }
    emit(&render(&list, a.output)?);
    Ok(())
}

pub(crate) fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let v: ScheduleView = a.connect.client()?.delete(&format!("/schedules/{}", a.name))?;
    emit(&format!("schedule {} deleted; what it submitted goes on\n", v.name));
    Ok(())
}

pub(crate) fn render(list: &[ScheduleView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(list);
    }
    let mut lines = vec![format!(
        "{:<16} {:<10} {:<16} {:<16} {:<9} {:<23} {:>5} {:>7}  {}",
        "SCHEDULE", "USER", "CRON", "ZONE", "KIND", "NEXT", "RUNS", "SKIPPED", "LAST RUN"
    )];
    for s in list {
        let next = if s.suspended {
            "suspended".to_string()
        } else {
            s.next_at.as_deref().map_or_else(|| "never".into(), when)
        };
        lines.push(format!(
            "{:<16} {:<10} {:<16} {:<16} {:<9} {:<23} {:>5} {:>7}  {}",
            truncate(&s.name, 16),
            truncate(&s.user, 10),
            truncate(&s.schedule, 16),
            truncate(&s.time_zone, 16),
            s.kind,
            next,
            s.runs,
            s.skipped,
            s.last_run.map_or_else(|| "-".into(), |r| r.to_string())
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn schedules_render_as_a_table_and_as_json() {
        crate::output::use_zone(true);
        let spec = ScheduleSpec {
            schedule: "0 2 * * *".into(),
            time_zone: "Europe/Paris".into(),
            concurrency: None,
            suspend: false,
            job: Some(gpool_api::JobSpec::new(vec!["train".into()])),
            pipeline: None,
        };
        let v = ScheduleView {
            name: "nightly".into(),
            user: "ana".into(),
            schedule: spec.schedule.clone(),
            time_zone: spec.time_zone.clone(),
            concurrency: "forbid".into(),
            suspended: false,
            kind: "job".into(),
            next_at: Some("2026-11-27T01:00:00Z".into()),
            last_at: Some("2026-11-26T01:00:00Z".into()),
            last_run: Some(41),
            runs: 3,
            skipped: 1,
            spec,
        };
        assert_snapshot("schedule.list", &render(std::slice::from_ref(&v), Output::Table).expect("table"));
        let back: Vec<ScheduleView> =
            serde_json::from_str(&render(std::slice::from_ref(&v), Output::Json).expect("json")).expect("back");
        assert_eq!(back, vec![v]);
    }
}
