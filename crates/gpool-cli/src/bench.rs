//! `gpool bench …`: benchmarks whose figures go into BENCHMARKS.md, those a
//! user runs to measure a set-up of their own. The ones that bring up a real
//! fleet or inject faults (`bench cluster`, `bench chaos`) are gpool-devtools'.

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
    /// Static MIG layouts against layouts that follow the queue, on a day of changing MIG demand.
    Mig(MigArgs),
    /// GPU shares placed by each strategy on the openb cluster as requests grow to 130% of its GPUs.
    Sharing(crate::bench_sharing::SharingArgs),
    /// Every policy on the five job traces at three loads: the default's ratios against the baselines, worst case first.
    Policies(crate::bench_policies::PoliciesArgs),
    /// `gpool acct` on a seeded store: a month of jobs (1,000,000 by default) through the real daemon.
    Acct(crate::bench_acct::AcctBenchArgs),
}

#[derive(Args, Debug)]
pub(crate) struct MigArgs {
    /// Nodes (half A100-80GB, half H100-80GB, every GPU in MIG mode).
    #[arg(long, default_value_t = 8)]
    nodes: u32,
    /// GPUs per node (at most 9: each keeps seven MIG slots of the node's 64).
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Hours of arrivals; requests completed by their end are served.
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Offered compute slices over the cluster's (repeatable: one table per load).
    #[arg(long = "load", default_values_t = vec![0.8, 1.0, 1.2])]
    loads: Vec<f64>,
    /// Seeds of the request stream (repeatable); the worst case over them is reported.
    #[arg(long = "seed", default_values_t = vec![1, 2, 3])]
    seeds: Vec<u64>,
    /// Scheduling policy preset.
    #[arg(long, default_value = "fifo-backfill")]
    policy: String,
    /// Nodes of the cluster the planner's own cost is measured on (8 busy MIG GPUs each, two requests waiting per GPU).
    #[arg(long, default_value_t = 1_000)]
    cost_nodes: u32,
    #[command(flatten)]
    print: crate::output::DataFlag,
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
    /// Nodes with one GPU degraded for heat: placement avoids it and weighs every node.
    #[arg(long, default_value_t = 0)]
    degraded_nodes: u32,
    /// Jobs come in arrays of this many tasks of one shape, each running at most a quarter of its tasks
    /// at once (sbatch's --array=…%N); 0: plain jobs.
    #[arg(long, default_value_t = 0)]
    array_tasks: u32,
    /// Scheduling policy preset.
    #[arg(long, default_value = "default")]
    policy: String,
    /// Seed of the synthetic workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where jobs are placed: best-fit (default), spread, or fragmentation (FGD: keeps shared GPUs from stranding capacity).
    #[arg(long, value_parser = clap::value_parser!(gpool_core::PlacementStrategy))]
    placement: Option<gpool_core::PlacementStrategy>,
    /// Change a knob of the policy (repeatable), e.g. `--set overload=off`; see docs/simulator.md.
    #[arg(long = "set")]
    set: Vec<String>,

    #[command(flatten)]
    print: crate::output::DataFlag,
}

pub(crate) fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Schedule(a) => schedule(a),
        BenchCommand::Jobs(a) => crate::bench_daemon::jobs(a),
        BenchCommand::Submit(a) => crate::bench_daemon::submit(a),
        BenchCommand::Latency(a) => crate::bench_daemon::latency(a),
        BenchCommand::Telemetry(a) => crate::bench_daemon::telemetry(a),
        BenchCommand::Mig(a) => mig(a),
        BenchCommand::Sharing(a) => crate::bench_sharing::sharing(a),
        BenchCommand::Policies(a) => crate::bench_policies::policies(a),
        BenchCommand::Acct(a) => crate::bench_acct::acct(a),
    }
}

fn mig(a: MigArgs) -> anyhow::Result<()> {
    use gpool_sim::mig_bench::{MigBench, compare, planner_cost};
    if a.gpus_per_node == 0 || a.gpus_per_node > 9 {
        anyhow::bail!("--gpus-per-node must be between 1 and 9, got {}", a.gpus_per_node);
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if a.nodes == 0 || !positive(a.hours) || !a.loads.iter().all(|l| positive(*l)) || a.seeds.is_empty() {
        anyhow::bail!("--nodes, --hours and every --load must be more than 0, and one --seed at least");
    }
    let policy = Policy::by_name(&a.policy)?;
    let mut bar = Progress::new("runs");
    let total = (a.loads.len() * a.seeds.len()) as u64;
    let mut all = Vec::new();
    // Worst cases over loads and seeds of the planner's gain (requests
    // served) over the best static layout, and over the best uniform one.
    let mut worst_gain: Option<(f64, f64, u64)> = None;
    let mut worst_uniform: Option<(f64, f64, u64)> = None;
    let mut worst_from_whole: Option<(f64, f64, u64)> = None;
    for &load in &a.loads {
        for &seed in &a.seeds {
            let b = MigBench { nodes: a.nodes, gpus_per_node: a.gpus_per_node, hours: a.hours, load, seed };
            let rows = compare(&b, &policy).context("MIG simulation failed")?;
            let planner = rows.iter().find(|r| r.layout == "planner (from mixed)").map_or(0, |r| r.served);
            let from_whole = rows.iter().find(|r| r.layout.starts_with("planner (from 7g")).map_or(0, |r| r.served);
            let best_static = rows.iter().filter(|r| !r.layout.starts_with("planner")).max_by_key(|r| r.served);
            let gain = best_static.map_or(0.0, |s| planner as f64 / s.served.max(1) as f64 - 1.0);
            if worst_gain.is_none_or(|(g, _, _)| gain < g) {
                worst_gain = Some((gain, load, seed));
            }
            let gain = best_static.map_or(0.0, |s| from_whole as f64 / s.served.max(1) as f64 - 1.0);
            if worst_from_whole.is_none_or(|(g, _, _)| gain < g) {
                worst_from_whole = Some((gain, load, seed));
            }
            let uniform = rows.iter().filter(|r| !r.layout.contains('(')).map(|r| r.served).max().unwrap_or(0);
            let gain = planner as f64 / uniform.max(1) as f64 - 1.0;
            if worst_uniform.is_none_or(|(g, _, _)| gain < g) {
                worst_uniform = Some((gain, load, seed));
            }
            all.push((load, seed, rows));
            bar.update(all.len() as u64, total);
        }
    }
    if let Some(format) = a.print.data() {
        let v: Vec<serde_json::Value> = all
            .iter()
            .flat_map(|(load, seed, rows)| {
                rows.iter().map(move |r| {
                    serde_json::json!({
                        "load": load, "seed": seed, "layout": r.layout, "submitted": r.submitted,
                        "served": r.served, "slice_hours": round(r.slice_hours),
                        "mean_wait_s": round(r.mean_wait_s), "repartitions": r.repartitions,
                    })
                })
            })
            .collect();
        crate::output::print_data(format, &serde_json::Value::Array(v))?;
        return Ok(());
    }
    outln!("{} nodes × {} MIG GPUs, {} h of arrivals, policy {}", a.nodes, a.gpus_per_node, a.hours, a.policy);
    for (load, seed, rows) in &all {
        outln!("\nload {load}, seed {seed}: {} requests", rows.first().map_or(0, |r| r.submitted));
        outln!("  {:<52} {:>7} {:>12} {:>11} {:>9}", "layout", "served", "slice-hours", "mean wait", "repart.");
        for r in rows.iter().take(7) {
            outln!(
                "  {:<52} {:>7} {:>12.0} {:>10.0}s {:>9}",
                r.layout,
                r.served,
                r.slice_hours,
                r.mean_wait_s,
                r.repartitions
            );
        }
    }
    if let Some((gain, load, seed)) = worst_gain {
        outln!(
            "\nplanner against the best static layout, worst case: {:+.1}% requests served (load {load}, seed {seed})",
            gain * 100.0
        );
    }
    if let Some((gain, load, seed)) = worst_from_whole {
        outln!(
            "planner starting from 7g.80gb on every GPU against the best static layout, worst case: {:+.1}% requests served (load {load}, seed {seed})",
            gain * 100.0
        );
    }
    if let Some((gain, load, seed)) = worst_uniform {
        outln!(
            "planner against the best layout given to every GPU, worst case: {:+.1}% requests served (load {load}, seed {seed})",
            gain * 100.0
        );
    }
    let waiting = a.cost_nodes as usize * 16;
    let (took, changes) = planner_cost(a.cost_nodes, 8, waiting).context("planner cost")?;
    outln!(
        "planner cost: {:.2} ms for {} nodes × 8 busy MIG GPUs and {waiting} waiting requests ({changes} GPUs to change or drain)",
        took.as_secs_f64() * 1000.0,
        a.cost_nodes
    );
    Ok(())
}

fn schedule(a: ScheduleArgs) -> anyhow::Result<()> {
    if a.gpus_per_node == 0 || a.gpus_per_node > 64 {
        anyhow::bail!("--gpus-per-node must be between 1 and 64, got {}", a.gpus_per_node);
    }
    if a.passes < 2 {
        anyhow::bail!("--passes must be at least 2 (the first pass is reported apart), got {}", a.passes);
    }
    let mut policy = Policy::by_name(&a.policy)?;
    if let Some(p) = a.placement {
        policy.placement = p;
    }
    for knob in &a.set {
        policy.set(knob)?;
    }
    let cfg = ScheduleBench {
        pending: a.pending,
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        passes: a.passes,
        policy,
        seed: a.seed,
        degraded_nodes: a.degraded_nodes,
        array_tasks: a.array_tasks,
    };
    let mut bar = Progress::new("passes");
    let r =
        run_schedule(&cfg, |done, total| bar.update(u64::from(done), u64::from(total))).context("benchmark failed")?;
    if let Some(format) = a.print.data() {
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
        crate::output::print_data(format, &v)?;
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
