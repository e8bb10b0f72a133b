//! `gpool bench …`: benchmarks whose figures go into BENCHMARKS.md.

use anyhow::Context;
use clap::{Args, Subcommand};
use gpool_core::Policy;
use gpool_sim::bench::{ScheduleBench, run as run_schedule};

use crate::progress::Progress;

#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Full scheduling passes on a synthetic cluster and queue.
    Schedule(ScheduleArgs),
    /// Run jobs through a real daemon: submit to all done.
    Jobs(crate::bench_daemon::JobsArgs),
    /// Batch submissions through the API into the store.
    Submit(crate::bench_daemon::SubmitArgs),
    /// Submit-to-start latency on an idle GPU.
    Latency(crate::bench_daemon::LatencyArgs),
    /// The cost of GPU telemetry: sampler CPU and /metrics scrape latency.
    Telemetry(crate::bench_daemon::TelemetryArgs),
    /// The control plane at scale: simulated nodes speaking the agent protocol, a large queue.
    Cluster(crate::bench_cluster::ClusterArgs),
    /// A real cluster under seeded random faults, checked from the jobs' own records.
    Chaos(crate::chaos::ChaosArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ScheduleArgs {
    /// Pending jobs kept in the queue.
    #[arg(long, default_value_t = 10_000)]
    pending: u32,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 1_000)]
    nodes: u32,
    /// GPUs per node (at most 64).
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Passes to run (the first fills the empty cluster and is reported apart).
    #[arg(long, default_value_t = 30)]
    passes: u32,
    /// Scheduling policy preset.
    #[arg(long, default_value = "default")]
    policy: String,
    /// Seed of the synthetic workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Schedule(a) => schedule(a),
        BenchCommand::Jobs(a) => crate::bench_daemon::jobs(a),
        BenchCommand::Submit(a) => crate::bench_daemon::submit(a),
        BenchCommand::Latency(a) => crate::bench_daemon::latency(a),
        BenchCommand::Telemetry(a) => crate::bench_daemon::telemetry(a),
        BenchCommand::Cluster(a) => crate::bench_cluster::cluster(a),
        BenchCommand::Chaos(a) => crate::chaos::run(a),
    }
}

fn schedule(a: ScheduleArgs) -> anyhow::Result<()> {
    if a.gpus_per_node == 0 || a.gpus_per_node > 64 {
        anyhow::bail!("--gpus-per-node must be between 1 and 64, got {}", a.gpus_per_node);
    }
    if a.passes < 2 {
        anyhow::bail!("--passes must be at least 2 (the first pass is reported apart), got {}", a.passes);
    }
    let policy = Policy::by_name(&a.policy)?;
    let cfg = ScheduleBench {
        pending: a.pending,
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        passes: a.passes,
        policy,
        seed: a.seed,
    };
    let mut bar = Progress::new("passes");
    let r =
        run_schedule(&cfg, |done, total| bar.update(u64::from(done), u64::from(total))).context("benchmark failed")?;
    if a.json {
        let v = serde_json::json!({
            "pass_ms": round(r.pass_ms),
            "p90_pass_ms": round(r.p90_pass_ms),
            "max_pass_ms": round(r.max_pass_ms),
            "first_pass_ms": round(r.first_pass_ms),
            "first_pass_started": r.first_pass_started,
            "jobs_started": r.jobs_started,
            "preemptions": r.preemptions,
            "pending": r.pending,
            "running": r.running,
            "examined_per_pass": r.examined,
            "cache_hits_per_pass": r.cache_hits,
            "preemption_searches_per_pass": r.preemption_searches,
            "passes": r.passes,
            "nodes": a.nodes,
            "gpus": r.gpus,
            "policy": a.policy,
        });
        outln!("{v}");
    } else {
        outln!(
            "{} nodes × {} GPUs, {} pending, policy {}\n  median pass {:.2} ms (p90 {:.2}, max {:.2}); first pass {:.2} ms started {}\n  {} jobs started, {} preemptions; {} pending, {} running at the end",
            a.nodes,
            a.gpus_per_node,
            a.pending,
            a.policy,
            r.pass_ms,
            r.p90_pass_ms,
            r.max_pass_ms,
            r.first_pass_ms,
            r.first_pass_started,
            r.jobs_started,
            r.preemptions,
            r.pending,
            r.running
        );
    }
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
