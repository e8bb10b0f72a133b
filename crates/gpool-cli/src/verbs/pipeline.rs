//! `gpool pipeline run|status|list|cancel`: pipelines of stages that pass
//! files to each other (`docs/pipelines.md`).

use std::path::PathBuf;

use anyhow::Context;
use gpool_api as api;
use gpool_api::pipeline::{PipelineCreated, PipelineList, PipelineSpec, PipelineView};

use crate::client::Connect;
use crate::output::{Output, emit, text, truncate, when};

/// `gpool pipeline run FILE`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    /// The pipeline file (YAML or JSON): name, and stages with needs: and matrix:.
    file: PathBuf,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool pipeline status RUN` and `gpool pipeline cancel RUN`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunIdArgs {
    /// The run's id, as `gpool pipeline run` printed it.
    run: u64,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool pipeline list`.
#[derive(clap::Args, Debug)]
pub(crate) struct ListArgs {
    /// How many of the latest runs.
    #[arg(long, default_value_t = 20)]
    limit: u32,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Reads a pipeline file; a missing name is the file's stem.
pub(crate) fn read(path: &std::path::Path) -> anyhow::Result<PipelineSpec> {
    let body = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut spec: PipelineSpec =
        gpool_api::yaml::from_str(&body).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if spec.name.is_none() {
        spec.name = path.file_stem().map(|s| s.to_string_lossy().replace(char::is_whitespace, "-"));
    }
    Ok(spec)
}

pub(crate) fn run(a: RunArgs) -> anyhow::Result<()> {
    let spec = read(&a.file)?;
    let created: PipelineCreated = a.connect.client()?.post("/pipelines", &spec)?;
    match a.output {
        Output::Json | Output::Yaml => emit(&a.output.data(&created)?),
        Output::Table | Output::Wide => emit(&format!("{}\n", created.run)),
    }
    Ok(())
}

pub(crate) fn status(a: RunIdArgs) -> anyhow::Result<()> {
    let v: PipelineView = a.connect.client()?.get(&format!("/pipelines/{}", a.run))?;
    emit(&render(&v, a.output)?);
    Ok(())
}

pub(crate) fn cancel(a: RunIdArgs) -> anyhow::Result<()> {
    let v: PipelineView = a.connect.client()?.post_empty(&format!("/pipelines/{}/cancel", a.run))?;
    match a.output {
        Output::Json | Output::Yaml => emit(&a.output.data(&v)?),
        Output::Table | Output::Wide => {
            let left = v.stages.iter().filter(|s| !s.state.is_terminal()).count();
            emit(&format!("pipeline run {} ({}) cancelled; {left} job(s) still stopping\n", v.run, v.name))
        }
    }
    Ok(())
}

pub(crate) fn list(a: ListArgs) -> anyhow::Result<()> {
    let l: PipelineList = a.connect.client()?.get(&format!("/pipelines?limit={}", a.limit.clamp(1, 200)))?;
    if a.output.is_data() {
        emit(&a.output.data(&l)?);
        return Ok(());
    }
    if l.runs.is_empty() {
        emit("no pipeline runs: start one with gpool pipeline run FILE (see docs/pipelines.md)\n");
        return Ok(());
    }
    emit(&render_list(&l.runs));
    Ok(())
}

fn done(v: &PipelineView) -> usize {
    v.stages.iter().filter(|s| s.state == api::JobState::Succeeded).count()
}

/// A run as a tree: each job indented by its depth in the DAG, with its state and reason.
pub(crate) fn render(v: &PipelineView, output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(v);
    }
    let mut lines = vec![format!(
        "pipeline run {} ({}) of {}: {}, {} of {} job(s) succeeded; submitted {}",
        v.run,
        v.name,
        v.user,
        v.state,
        done(v),
        v.stages.len(),
        when(&v.submitted_at)
    )];
    let width = v.stages.iter().map(|s| s.label.chars().count() + 2 * s.depth as usize).max().unwrap_or(5).max(5);
    lines.push(format!("{:<width$}  {:>6}  {:<10}  {}", "STAGE", "JOB", "STATE", "NEEDS / REASON"));
    for s in &v.stages {
        let name = format!("{}{}", "  ".repeat(s.depth as usize), s.label);
        let mut tail = Vec::new();
        if !s.needs.is_empty() {
            tail.push(format!("needs {}", s.needs.join(", ")));
        }
        if let Some(r) = &s.reason {
            tail.push(r.clone());
        }
        let tail = if output == Output::Wide { tail.join("; ") } else { truncate(&tail.join("; "), 70) };
        lines.push(format!("{name:<width$}  {:>6}  {:<10}  {tail}", s.job, s.state.as_str()));
    }
    Ok(text(lines))
}

fn render_list(runs: &[PipelineView]) -> String {
    let mut lines =
        vec![format!("{:>6}  {:<20} {:<10} {:<10} {:>5}  {}", "RUN", "NAME", "USER", "STATE", "DONE", "SUBMITTED")];
    for v in runs {
        lines.push(format!(
            "{:>6}  {:<20} {:<10} {:<10} {:>5}  {}",
            v.run,
            truncate(&v.name, 20),
            truncate(&v.user, 10),
            v.state,
            format!("{}/{}", done(v), v.stages.len()),
            when(&v.submitted_at)
        ));
    }
    text(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;
    use gpool_api::pipeline::StageView;

    fn stage(
        label: &str,
        job: u64,
        depth: u32,
        needs: &[&str],
        state: api::JobState,
        reason: Option<&str>,
    ) -> StageView {
        StageView {
            stage: label.split('[').next().unwrap_or(label).into(),
            label: label.into(),
            job,
            needs: needs.iter().map(|s| s.to_string()).collect(),
            matrix: Default::default(),
            depth,
            state,
            reason: reason.map(String::from),
            started_at: None,
            ended_at: None,
        }
    }

    fn run() -> PipelineView {
        use api::JobState::*;
        PipelineView {
            run: 41,
            name: "nightly".into(),
            user: "ana".into(),
            state: "running".into(),
            submitted_at: "2026-11-26T02:00:00Z".into(),
            stages: vec![
                stage("prep", 41, 0, &[], Succeeded, Some("exit code 0")),
                stage("train[lr=0.1]", 42, 1, &["prep"], Running, None),
                stage("train[lr=0.01]", 43, 1, &["prep"], Pending, Some("waiting for 1 GPU(s)")),
                stage("eval", 44, 2, &["train"], Pending, Some("waiting for job 42 it depends on")),
            ],
        }
    }

    #[test]
    fn a_run_renders_as_a_tree_and_as_json() {
        crate::output::use_zone(true);
        let v = run();
        assert_snapshot("pipeline.status", &render(&v, Output::Table).expect("table"));
        assert_snapshot("pipeline.list", &render_list(std::slice::from_ref(&v)));
        let back: PipelineView = serde_json::from_str(&render(&v, Output::Json).expect("json")).expect("parses back");
        assert_eq!(back, v);
    }

    #[test]
    fn a_pipeline_file_is_read_with_the_stage_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("gpool-pipeline-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let good = dir.join("nightly build.yaml");
        std::fs::write(&good, "stages:\n  - name: a\n    command: echo a\n").expect("write");
        assert_eq!(read(&good).expect("valid").name.as_deref(), Some("nightly-build"), "named after the file");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "stages:\n  - name: a\n    command: echo a\n    gpu: 1\n").expect("write");
        let err = read(&bad).expect_err("unknown field").to_string();
        assert!(err.contains("bad.yaml") && err.contains(r#"stage "a""#) && err.contains("gpu"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
