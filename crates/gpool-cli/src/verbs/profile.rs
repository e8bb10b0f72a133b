//! `gpool profile JOB`: where a running job's time goes. Its nodes sample
//! the job's Python stacks (py-spy) and its accelerators (10 Hz) for a few
//! seconds; the answer names the bottleneck and the fix to try. `--save DIR`
//! writes the flame graph and the timeline as SVG files.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use gpool_api as api;

use crate::client::{Client, Connect};
use crate::output::{Output, emit, text};

#[derive(Args, Debug)]
pub(crate) struct ProfileArgs {
    /// Job id.
    id: u64,
    /// How long to profile (1 to 300 seconds).
    #[arg(long, default_value_t = 5)]
    seconds: u32,
    /// Sample native frames too (C extensions, BLAS, the CUDA runtime): shows what NumPy or
    /// PyTorch calls do, at about four times py-spy's CPU, and pauses the job for each sample.
    #[arg(long)]
    native: bool,
    /// Show the job's latest profile instead of taking one (works after the job ended).
    #[arg(long)]
    latest: bool,
    /// Write flamegraph.svg and timeline.svg into this directory.
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: ProfileArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let view: api::ProfileView = if a.latest {
        client.get(&format!("/jobs/{}/profile", a.id))?
    } else {
        if !a.output.is_data() {
            eprintln!("profiling job {} for {} s…", a.id, a.seconds);
        }
        client.post_empty(&format!("/jobs/{}/profile?seconds={}&native={}", a.id, a.seconds, a.native))?
    };
    if let Some(dir) = &a.save {
        save(&client, &view, dir)?;
    }
    emit(&render(&view, a.output)?);
    Ok(())
}

fn save(client: &Client, view: &api::ProfileView, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (url, name) in [(&view.flamegraph, "flamegraph.svg"), (&view.timeline, "timeline.svg")] {
        let path = dir.join(name);
        let mut file = std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        let api_path = url.strip_prefix("/api/v1").unwrap_or(url);
        client.stream(api_path, &mut file).with_context(|| format!("cannot fetch {name}"))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The verdict, the shares of the main thread's samples as bars, each
/// replica, the fix, and where the pictures are.
pub(crate) fn render(v: &api::ProfileView, output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(v);
    }
    let mut lines = vec![
        format!(
            "job {} (run {}): {}, profiled {} s{} from {}",
            v.job,
            v.attempt,
            v.bottleneck,
            v.seconds,
            if v.native { " with native frames" } else { "" },
            v.taken_at
        ),
        format!("  {}", v.why),
        String::new(),
        format!("main thread, {} samples:", v.main_thread_samples),
    ];
    for s in &v.shares {
        let bar = "█".repeat((s.share * 30.0).round() as usize);
        lines.push(format!("  {:<24} {:>4.0}%  {bar}", s.activity, s.share * 100.0));
    }
    match v.accelerator_busy_pct {
        Some(b) => lines.push(format!("accelerators busy {b:.0}% (mean over the window)")),
        None => lines.push("accelerators: no readings (none allocated, or their tool did not answer)".into()),
    }
    for r in &v.replicas {
        let pid = r.pid.map_or_else(|| "no process".to_string(), |p| format!("pid {p}"));
        let mut line = format!(
            "  rank {} on {}: {pid}, {} stack samples, {} device readings",
            r.rank, r.node, r.stack_samples, r.device_readings
        );
        if let Some(e) = &r.error {
            line.push_str(&format!(" ({e})"));
        }
        lines.push(line);
    }
    lines.push(String::new());
    lines.push(format!("try: {}", v.fix));
    lines.push(format!(
        "flame graph and timeline: gpool profile {} --latest --save DIR (or GET {} and {})",
        v.job, v.flamegraph, v.timeline
    ));
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, profile_view};

    #[test]
    fn profile_prints_the_bottleneck_the_shares_and_the_fix() {
        let v = profile_view(12);
        assert_snapshot("profile.txt", &render(&v, Output::Table).unwrap());
        assert_snapshot("profile.json", &render(&v, Output::Json).unwrap());
    }
}
