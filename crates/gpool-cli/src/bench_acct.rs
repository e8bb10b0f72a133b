//! `gpool bench acct`: how fast `gpool acct` answers over a month of jobs.
//!
//! Seeds a fresh SQLite state (the one `gpool up` keeps) with `--jobs`
//! finished jobs spread evenly over `--days`, of `--users` users, each with
//! the document the control plane writes (a run on one GPU, its usage and
//! exit), then starts the real daemon on it and asks what `gpool acct`
//! asks: pages of 1,000 jobs that ended in a period, by the `jobs_ended`
//! index, through the API.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::bench_daemon::Daemon;

#[derive(Args, Debug)]
pub(crate) struct AcctBenchArgs {
    /// Finished jobs in the store.
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Days they ended over, up to now.
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Users they belong to (round robin).
    #[arg(long, default_value_t = 100)]
    users: u64,
}

/// A finished job's document as the controller stores it (`JobDoc`): what the daemon reads back.
fn doc(id: u64, user: &str, submitted: i64, started: i64, ended: i64) -> Value {
    let ok = !id.is_multiple_of(10);
    json!({
        "id": id, "name": format!("train-{}", id % 1000), "user": user, "team": "ml", "queue": "default",
        "priority": 0, "spec": {"command": ["python", "train.py"], "resources": {"nvidia.com/gpu": 1}},
        "state": if ok { "succeeded" } else { "failed" },
        "end_reason": if ok { "exit code 0" } else { "failed with exit code 1" },
        "submitted_ms": submitted, "started_ms": started, "ended_ms": ended,
        "attempt": 1, "restarts": 0, "failures": u32::from(!ok), "prior_runtime_ms": (ended - started) as u64,
        "prior_gpu_milli_secs": (ended - started) as u64,
        "run": {"attempt": 1, "started_ms": started, "replicas": [{
            "rank": 0, "node": format!("gpu-{:03}", id % 128), "gpus": [id % 8], "mig": [],
            "cpus_milli": 4000, "memory_mb": 32768, "cuda_visible_devices": (id % 8).to_string(),
            "exit": {"code": if ok { 0 } else { 1 }, "signal": null, "started_ms": started, "ended_ms": ended,
                     "error": null, "fenced": false}
        }]},
        "exit": {"code": if ok { 0 } else { 1 }},
        "usage": {"gpu_hours": (ended - started) as f64 / 3.6e6, "idle_gpu_hours": 0.0, "energy_wh": 120.0, "cost_usd": 2.5},
    })
}

/// Writes `jobs` finished jobs into the SQLite state at `path`; the time it took.
fn seed(path: &std::path::Path, a: &AcctBenchArgs, now: i64) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut store = gpool_store::Sqlite::open(path, false).context("open the state")?;
    let span = i64::try_from(a.days * 86_400_000).unwrap_or(i64::MAX) - 3_600_000;
    let step = span / i64::try_from(a.jobs.max(1)).unwrap_or(1);
    let mut batch = Vec::with_capacity(10_000);
    for id in 1..=a.jobs {
        let ended = now - span + step * id as i64;
        let (started, submitted) = (ended - 1_800_000, ended - 2_400_000);
        let user = format!("u{}", id % a.users.max(1));
        batch.push(gpool_store::Write::PutJob(gpool_store::JobRow {
            id,
            user: user.clone(),
            team: "ml".into(),
            queue: "default".into(),
            state: if id.is_multiple_of(10) { "failed" } else { "succeeded" }.into(),
            submitted_ms: submitted,
            ended_ms: Some(ended),
            doc: doc(id, &user, submitted, started, ended).to_string(),
        }));
        if batch.len() == 10_000 || id == a.jobs {
            gpool_store::Store::commit(&mut store, &batch).context("seed the state")?;
            batch.clear();
        }
    }
    Ok(t0.elapsed())
}

/// Pages through `/jobs?QUERY` as `gpool acct` does; (jobs, time to the first page, time to all).
fn page_all(d: &Daemon, query: &str) -> anyhow::Result<(usize, Duration, Duration)> {
    let t0 = Instant::now();
    let (mut n, mut first, mut after) = (0, None, None::<u64>);
    loop {
        let path = match after {
            Some(x) => format!("/api/v1/jobs?{query}&limit=1000&after={x}"),
            None => format!("/api/v1/jobs?{query}&limit=1000"),
        };
        let page: Value = serde_json::from_str(&d.get_text(&path)?)?;
        n += page["jobs"].as_array().map_or(0, Vec::len);
        first.get_or_insert(t0.elapsed());
        match page["next"].as_u64() {
            Some(x) => after = Some(x),
            None => break,
        }
    }
    Ok((n, first.unwrap_or_default(), t0.elapsed()))
}

pub(crate) fn acct(a: AcctBenchArgs) -> anyhow::Result<()> {
    if a.jobs == 0 || a.days == 0 || a.users == 0 {
        bail!("--jobs, --days and --users must be at least 1");
    }
    let dir = std::env::temp_dir().join(format!("gpool-bench-acct-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let _scratch = crate::bench_daemon::Scratch(vec![dir.clone()]);
    let now = crate::top::now_ms();
    let took = seed(&dir.join("state.db"), &a, now)?;
    let size = std::fs::metadata(dir.join("state.db")).map_or(0, |m| m.len());
    println!(
        "seeded {} finished jobs over {} days ({} users) in {:.1} s; state.db {:.0} MiB",
        a.jobs,
        a.days,
        a.users,
        took.as_secs_f64(),
        size as f64 / 1_048_576.0
    );
    let d = Daemon::start_in(&dir, "1xH100-80GB", &[])?;
    let t = |ms: i64| gpool_api::time::rfc3339(ms).replace(':', "%3A");
    let month = format!("ended_since={}", t(now - i64::try_from(a.days * 86_400_000).unwrap_or(0)));
    let day_ago = now - 86_400_000;
    let cases = [
        ("the period, one user's jobs", format!("{month}&user=u7")),
        (
            "one hour a day ago, everyone's",
            format!("ended_since={}&ended_until={}", t(day_ago), t(day_ago + 3_600_000)),
        ),
        ("one day, everyone's", format!("ended_since={}", t(day_ago))),
        ("the period, everyone's (every page)", month.clone()),
    ];
    println!("| query (gpool acct) | jobs | first page of 1,000 | all pages |");
    println!("|---|---:|---:|---:|");
    for (what, q) in cases {
        let (n, first, all) = page_all(&d, &q)?;
        println!("| {what} | {n} | {:.0} ms | {:.2} s |", first.as_secs_f64() * 1000.0, all.as_secs_f64());
    }
    Ok(())
}
