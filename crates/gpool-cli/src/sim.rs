//! `gpool sim`: replay a job trace through the scheduling core.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gpool_core::{Node, Policy};
use gpool_sim::engine::{Estimates, SimConfig, SimResult, run};
use gpool_sim::metrics::{Summary, summarize};
use gpool_sim::plot::{Chart, Line, cdf, line_chart};
use gpool_sim::trace::{self, Format, Window};

use crate::progress::Progress;

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Trace file (Philly, ITP, Alibaba openb, or the generic CSV of docs/simulator.md).
    #[arg(long)]
    trace: PathBuf,
    /// Trace format; guessed from the header when omitted.
    #[arg(long)]
    format: Option<Format>,
    /// Number of identical nodes (with --gpus-per-node), unless --cluster is given.
    #[arg(long, default_value_t = 80)]
    nodes: u32,
    /// GPUs per node (at most 64). To model one pool of GPUs with no node
    /// packing, use 1 GPU per node: a job's GPUs then spread freely.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// GPU model of the uniform nodes.
    #[arg(long, default_value = "H100-80GB")]
    gpu_model: String,
    /// Heterogeneous cluster description (YAML, see docs/simulator.md).
    #[arg(long, conflicts_with_all = ["nodes", "gpus_per_node", "gpu_model"])]
    cluster: Option<PathBuf>,
    /// Elastic node pools with prices and an autoscaler (the pools file of docs/cost.md); the cluster is then the pools'.
    #[arg(long, conflicts_with_all = ["cluster", "compare"])]
    pools: Option<PathBuf>,
    /// Several pools files side by side (comma-separated), with one policy.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["cluster", "compare", "pools"])]
    compare_pools: Vec<PathBuf>,
    /// With pools: from asking for a node to it taking work.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    boot_delay: Duration,
    /// With pools: how often jobs checkpoint; a reclaimed spot job loses the work since its last checkpoint.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    checkpoint_interval: Duration,
    /// Scheduling policy: default, fifo, fifo-backfill, sjf, srtf, las, fair.
    #[arg(long, default_value = "default", conflicts_with = "compare")]
    policy: String,
    /// Run several policies and compare them side by side (comma-separated).
    #[arg(long, value_delimiter = ',')]
    compare: Vec<String>,
    /// Only jobs submitted in this window: 2017-10-01..2017-11-30, or seconds 0..86400.
    #[arg(long)]
    window: Option<Window>,
    /// Change a knob of the policy (repeatable), e.g. `--set overload.after=4h`; see docs/simulator.md.
    #[arg(long = "set")]
    set: Vec<String>,
    /// Divide inter-arrival times by this factor (2 = twice the load).
    #[arg(long, default_value_t = 1.0)]
    load_scale: f64,
    /// Replay the trace this many times back to back (for scaling measurements).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Time lost at every restart after a preemption, in seconds.
    #[arg(long, default_value_t = 60.0)]
    restart_delay: f64,
    /// Whether jobs carry their real duration as an estimate: auto (the
    /// duration-based baselines sjf, srtf and fifo-backfill get the oracle), oracle, none,
    /// or learned (from the jobs of the same group and GPU count that ended
    /// before; `learned:Q` takes quantile Q of their run times, default the median).
    #[arg(long, default_value = "auto")]
    estimates: String,
    /// The accelerator kinds the trace's GPU jobs ask for, by weight (each job
    /// draws one from a hash of its line), e.g. `nvidia.com/gpu=3,amd.com/gpu=1,any=1`;
    /// a trace's own `kind` column wins. For clusters whose YAML gives node groups a `kind`.
    #[arg(long)]
    job_kinds: Option<gpool_sim::kinds::KindMix>,
    /// A power budget per node pool (the whole cluster, for a uniform one), as a fraction of its GPUs' nameplate power (0.8 or 80%).
    /// Assumed: a GPU at work draws its nameplate power, an idle one a tenth of it (docs/simulator.md).
    #[arg(long, value_parser = parse_fraction)]
    power_budget: Option<f64>,
    /// Treat trace jobs as not preemptible.
    #[arg(long)]
    no_preemption: bool,
    /// Also replay every whole-GPU job as an elastic one (one-GPU replicas from
    /// half its GPUs to twice them) and compare with the rigid run; see docs/elastic.md.
    #[arg(long)]
    elastic: bool,
    /// GPUs kept from the trace's jobs over a window, as an advance reservation no job runs in
    /// (repeatable): GPUS@START+DURATION, seconds from the replay's start (its window's, or its first job's), e.g. 64@86400+28800.
    #[arg(long = "reservation", value_parser = parse_reservation)]
    reservations: Vec<gpool_core::ReservationRequest>,
    /// With --elastic: throughput gained per doubling of a job's GPUs (1 = linear, 0 = none).
    #[arg(long, default_value_t = 0.8, requires = "elastic")]
    scaling_efficiency: f64,
    /// With --elastic: the replicas each job may run at, as MIN fraction : MAX factor of its GPUs.
    #[arg(long, default_value = "0.5:2", requires = "elastic")]
    elastic_range: String,
    /// GPU faults to replay, a CSV line each: at,node,gpu,fault (fault: xid:79, ecc, gone or restore); see docs/health.md.
    #[arg(long, value_name = "FILE")]
    faults: Option<PathBuf>,
    #[command(flatten)]
    print: crate::output::DataFlag,
    /// Where jobs are placed: best-fit (default), spread, or fragmentation (FGD: keeps shared GPUs from stranding capacity).
    #[arg(long, value_parser = clap::value_parser!(gpool_core::PlacementStrategy))]
    placement: Option<gpool_core::PlacementStrategy>,
    /// Write per-job CSV files and SVG plots into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

struct Run {
    policy: String,
    summary: Summary,
    result: SimResult,
}

/// `--reservation GPUS@START+DURATION` (seconds on the trace's clock).
fn parse_reservation(s: &str) -> Result<gpool_core::ReservationRequest, String> {
    let bad = || format!("{s:?}: expected GPUS@START+DURATION in seconds of the trace's clock, e.g. 64@86400+28800");
    let (gpus, window) = s.split_once('@').ok_or_else(bad)?;
    let (start, span) = window.split_once('+').ok_or_else(bad)?;
    let gpus: u32 = gpus.trim().parse().map_err(|_| bad())?;
    let start: f64 = start.trim().parse().map_err(|_| bad())?;
    let span: f64 = span.trim().parse().map_err(|_| bad())?;
    if !(start.is_finite() && span.is_finite() && start >= 0.0 && span > 0.0) {
        return Err(bad());
    }
    let ms = |x: f64| gpool_core::Time::from_millis((x * 1000.0).round() as i64);
    Ok(gpool_core::ReservationRequest {
        name: std::sync::Arc::from(s),
        gpus,
        model: None,
        nodes: Vec::new(),
        start: ms(start),
        end: ms(start + span),
        users: Default::default(),
        teams: std::iter::once(std::sync::Arc::from("(nobody in the trace)")).collect(),
    })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    gpool_api::quantity::parse_duration(s).map_err(|e| e.to_string())
}

/// The elastic set-ups to run: (name, fleet), from --pools or --compare-pools.
fn fleets(a: &SimArgs) -> anyhow::Result<Vec<(String, gpool_sim::fleet::FleetConfig)>> {
    let files: Vec<&PathBuf> = a.pools.iter().chain(a.compare_pools.iter()).collect();
    let prices = gpool_core::pricing::Prices::built_in();
    files
        .into_iter()
        .map(|f| {
            let spec = crate::daemons::read_pools(f, &prices)?;
            let availability = spec
                .spot_traces
                .iter()
                .map(|t| {
                    t.as_ref()
                        .map(|p| {
                            let text = std::fs::read_to_string(p)
                                .with_context(|| format!("cannot read the spot trace {}", p.display()))?;
                            gpool_sim::spot::Availability::from_json(&text)
                                .with_context(|| format!("spot trace {}", p.display()))
                        })
                        .transpose()
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let name = f.file_stem().map_or_else(|| f.display().to_string(), |s| s.to_string_lossy().into_owned());
            Ok((
                name,
                gpool_sim::fleet::FleetConfig {
                    pools: spec.pools,
                    availability,
                    max_dollars_per_hour: spec.max_dollars_per_hour,
                    boot_delay: a.boot_delay,
                    checkpoint_interval: a.checkpoint_interval,
                    max_waiting: 2000,
                },
            ))
        })
        .collect()
}

pub(crate) fn run_sim(a: SimArgs) -> anyhow::Result<()> {
    if a.gpus_per_node == 0 || a.gpus_per_node > 64 {
        bail!(
            "--gpus-per-node must be between 1 and 64, got {}; to model one pool of N GPUs with no node packing use --nodes N --gpus-per-node 1",
            a.gpus_per_node
        );
    }
    if a.load_scale.is_nan() || a.load_scale <= 0.0 || a.load_scale.is_infinite() {
        bail!("--load-scale must be a positive number, got {}", a.load_scale);
    }
    if a.restart_delay.is_nan() || a.restart_delay < 0.0 || a.restart_delay.is_infinite() {
        bail!("--restart-delay must be a number of seconds ≥ 0, got {}", a.restart_delay);
    }
    let text = std::fs::read_to_string(&a.trace).with_context(|| format!("cannot read trace {}", a.trace.display()))?;
    let format = match a.format {
        Some(f) => f,
        None => trace::detect(&text)?,
    };
    let jobs = trace::parse(&text, format).with_context(|| format!("{} ({format} format)", a.trace.display()))?;
    let mut jobs = trace::prepare(jobs, a.window, a.load_scale);
    if a.repeat > 1 {
        jobs = trace::repeat(&jobs, a.repeat);
    }
    if jobs.is_empty() {
        bail!("no jobs left in {} after the window; check --window", a.trace.display());
    }
    if let Some(mix) = &a.job_kinds {
        mix.assign(&mut jobs);
    }
    let fleets = fleets(&a)?;
    let nodes: Vec<Node> = match &a.cluster {
        _ if !fleets.is_empty() => Vec::new(),
        Some(p) => {
            let t = std::fs::read_to_string(p).with_context(|| format!("cannot read cluster file {}", p.display()))?;
            gpool_sim::cluster::from_yaml(&t)?
        }
        None => gpool_sim::cluster::uniform(a.nodes, a.gpus_per_node, &a.gpu_model),
    };
    let (nodes, power_budgets) = match a.power_budget {
        Some(f) => gpool_sim::cluster::with_power_budgets(nodes, f),
        None => (nodes, Vec::new()),
    };
    let faults = match &a.faults {
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("--faults {}", f.display()))?;
            gpool_sim::faults::parse(&text).map_err(|e| anyhow::anyhow!("--faults {}: {e}", f.display()))?
        }
        None => Vec::new(),
    };
    let policies: Vec<String> = if a.compare.is_empty() { vec![a.policy.clone()] } else { a.compare.clone() };
    // One run per policy, or per pools file.
    let setups: Vec<(String, String, Option<gpool_sim::fleet::FleetConfig>)> = if fleets.is_empty() {
        policies.iter().map(|p| (p.clone(), p.clone(), None)).collect()
    } else {
        fleets.into_iter().map(|(name, f)| (name, a.policy.clone(), Some(f))).collect()
    };
    let elastic = match a.elastic {
        true => {
            let m = gpool_sim::elastic::ElasticModel { efficiency: a.scaling_efficiency, ..Default::default() };
            let m = m.with_range(&a.elastic_range).map_err(|e| anyhow::anyhow!(e))?;
            vec![None, Some(m)]
        }
        false => vec![None],
    };
    let setups: Vec<_> = setups
        .into_iter()
        .flat_map(|(label, name, fleet)| {
            elastic.iter().map(move |m| {
                let label = if m.is_some() { format!("{label} elastic") } else { label.clone() };
                (label, name.clone(), fleet.clone(), *m)
            })
        })
        .collect();
    let mut runs = Vec::new();
    for (label, name, fleet, elastic) in setups {
        let mut policy = Policy::by_name(&name)?;
        for knob in &a.set {
            policy.set(knob)?;
        }
        if let Some(p) = a.placement {
            policy.placement = p;
        }
        let estimates = match a.estimates.as_str() {
            "auto" => Estimates::for_policy(&policy),
            other => Estimates::parse(other).map_err(|e| anyhow::anyhow!("--estimates {e}"))?,
        };
        if policy.orders_by_history() && !matches!(estimates, Estimates::Learned { .. }) {
            anyhow::bail!(
                "--set within_level=gittins orders jobs by the run times of jobs like them, which the \
                 simulator learns only with --estimates learned (or auto); --estimates {} gives it none",
                a.estimates
            );
        }
        let cfg = SimConfig {
            elastic: None,
            reservations: Vec::new(),
            policy,
            nodes: nodes.clone(),
            estimates,
            restart_delay: Duration::from_secs_f64(a.restart_delay),
            preemptible: !a.no_preemption,
            sample: Duration::from_secs(3600),
            mig_planner: false,
            power_budgets: power_budgets.clone(),
            faults: faults.clone(),
            fleet,
        };
        let cfg = SimConfig { elastic, reservations: a.reservations.clone(), ..cfg };
        let mut bar = Progress::new(&format!("{label:>13}"));
        let result = run(&jobs, &cfg, |d, t| bar.update(d, t))?;
        let summary = summarize(&result);
        runs.push(Run { policy: label, summary, result });
    }
    if let Some(dir) = &a.out {
        write_outputs(dir, &runs)?;
    }
    if let Some(format) = a.print.data() {
        let list: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                let mut v = summary_json(&r.policy, &r.summary);
                if let Some(o) = v.as_object_mut() {
                    let jobs: Vec<serde_json::Value> = r
                        .result
                        .rejected
                        .iter()
                        .map(|(line, why)| serde_json::json!({"line": line, "reason": why}))
                        .collect();
                    o.insert("rejected_jobs".into(), jobs.into());
                }
                if let Some(o) = v.as_object_mut()
                    && a.elastic
                {
                    o.insert("resizes".into(), r.result.resizes.into());
                }
                if let (Some(f), Some(o)) = (&r.result.fleet, v.as_object_mut()) {
                    o.insert("fleet".into(), fleet_json(f));
                }
                if let (Some(f), Some(o)) = (&r.result.faults, v.as_object_mut()) {
                    o.insert(
                        "faults".into(),
                        serde_json::json!({
                            "quarantines": f.quarantines,
                            "requeued_jobs": f.requeued,
                            "lost_gpu_hours": f.lost_gpu_hours,
                            "out_gpu_hours": f.out_gpu_hours,
                        }),
                    );
                }
                v
            })
            .collect();
        let out =
            if list.len() == 1 { list.into_iter().next().unwrap_or_default() } else { serde_json::Value::Array(list) };
        crate::output::print_data(format, &out)?;
    } else {
        let gpus: u64 = runs.first().map_or(0, |r| r.result.capacity_gpus);
        if runs.iter().any(|r| r.result.fleet.is_some()) {
            outln!("{} jobs from {} on elastic pools, policy {}", jobs.len(), a.trace.display(), a.policy);
            print!("{}", cost_table(&runs));
        } else {
            outln!("{} jobs from {} on {} nodes, {gpus} GPUs", jobs.len(), a.trace.display(), nodes.len());
            print!("{}", table(&runs));
            print!("{}", kind_table(&runs));
            print!("{}", elastic_lines(&runs, a.scaling_efficiency));
            for r in &runs {
                if let Some(l) = &r.summary.learned {
                    outln!(
                        "{}: learned estimates for {} jobs, median absolute error {:.0} s, median estimate ÷ duration {:.2}",
                        r.policy,
                        l.jobs,
                        l.median_abs_error_s,
                        l.median_ratio
                    );
                }
            }
        }
        for r in &runs {
            if let Some(f) = &r.result.faults {
                outln!(
                    "{}: {} GPU(s) quarantined by the fault trace, {} job(s) requeued, {:.1} GPU-hours of work lost, {:.1} GPU-hours out of service",
                    r.policy,
                    f.quarantines,
                    f.requeued,
                    f.lost_gpu_hours,
                    f.out_gpu_hours
                );
            }
        }
        // Which jobs no node could ever run depends on the cluster, not the policy.
        if let Some(r) = runs.first() {
            print!("{}", rejected_report(&r.result.rejected));
        }
    }
    Ok(())
}

/// How many jobs were left out because no set of nodes could ever run them,
/// grouped by reason, with the trace lines of the first few of each.
fn rejected_report(rejected: &[(usize, String)]) -> String {
    const LINES_SHOWN: usize = 5;
    if rejected.is_empty() {
        return String::new();
    }
    let mut by_reason: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (line, why) in rejected {
        by_reason.entry(why.as_str()).or_default().push(*line);
    }
    let mut groups: Vec<(&str, Vec<usize>)> = by_reason.into_iter().collect();
    for (_, lines) in &mut groups {
        lines.sort_unstable();
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    let mut t =
        format!("\n{} job(s) rejected, left out of the metrics (no node set could ever run them):\n", rejected.len());
    for (why, lines) in groups {
        let shown: Vec<String> = lines.iter().take(LINES_SHOWN).map(usize::to_string).collect();
        let more =
            if lines.len() > LINES_SHOWN { format!(", … {} more", lines.len() - LINES_SHOWN) } else { String::new() };
        let _ = writeln!(t, "  {:>6} × {why} (trace line {}{more})", lines.len(), shown.join(", "));
    }
    t
}

/// Cost, lost work and JCT of each pools set-up, then each pool's part.
fn cost_table(runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| set-up | jobs | unfinished | avg JCT s | p99 JCT s | avg queue s | cost $ | GPU-h used | lost GPU-h | lost % | peak nodes | reclaimed jobs |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let (s, Some(f)) = (&r.summary, &r.result.fleet) else { continue };
        let lost_pct = if f.used_gpu_hours > 0.0 { 100.0 * f.lost_gpu_hours / f.used_gpu_hours } else { 0.0 };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} | {} | {} |",
            r.policy,
            s.jobs,
            s.unfinished,
            s.avg_jct_s,
            s.p99_jct_s,
            s.avg_queue_s,
            f.total_dollars,
            f.used_gpu_hours,
            f.lost_gpu_hours,
            lost_pct,
            f.peak_nodes,
            f.reclaimed_jobs
        );
    }
    let _ = writeln!(t, "\n| set-up | pool | kind | cost $ | node-hours | created | failed | reclaimed |");
    let _ = writeln!(t, "|---|---|---|---:|---:|---:|---:|---:|");
    for r in runs {
        let Some(f) = &r.result.fleet else { continue };
        for p in &f.pools {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {} |",
                r.policy, p.name, p.kind, p.dollars, p.node_hours, p.created, p.failed, p.reclaimed
            );
        }
    }
    t
}

fn fleet_json(f: &gpool_sim::fleet::FleetReport) -> serde_json::Value {
    serde_json::json!({
        "cost_dollars": (f.total_dollars * 100.0).round() / 100.0,
        "used_gpu_hours": (f.used_gpu_hours * 10.0).round() / 10.0,
        "lost_gpu_hours": (f.lost_gpu_hours * 10.0).round() / 10.0,
        "reclaimed_jobs": f.reclaimed_jobs,
        "peak_nodes": f.peak_nodes,
        "pools": f.pools.iter().map(|p| serde_json::json!({
            "pool": p.name, "kind": p.kind, "cost_dollars": (p.dollars * 100.0).round() / 100.0,
            "node_hours": (p.node_hours * 10.0).round() / 10.0, "created": p.created, "failed": p.failed,
            "reclaimed": p.reclaimed,
        })).collect::<Vec<_>>(),
    })
}

fn summary_json(policy: &str, s: &Summary) -> serde_json::Value {
    serde_json::json!({
        "policy": policy,
        "jobs": s.jobs,
        "unfinished": s.unfinished,
        "rejected": s.rejected,
        "avg_jct_s": s.avg_jct_s.round(),
        "median_jct_s": s.median_jct_s.round(),
        "p99_jct_s": s.p99_jct_s.round(),
        "avg_queue_s": s.avg_queue_s.round(),
        "p99_queue_s": s.p99_queue_s.round(),
        "makespan_s": s.makespan_s.round(),
        "gpu_utilization": (s.gpu_utilization * 10_000.0).round() / 10_000.0,
        "avg_bounded_slowdown": (s.avg_bounded_slowdown * 100.0).round() / 100.0,
        "jain_fairness": (s.jain_fairness * 10_000.0).round() / 10_000.0,
        "preemptions": s.preemptions,
        "sched_calls": s.sched_calls,
        "sched_us_per_call": (s.sched_us_per_call * 10.0).round() / 10.0,
        "sched_max_ms": (s.sched_max_ms * 100.0).round() / 100.0,
        "wall_s": (s.wall_s * 100.0).round() / 100.0,
        "learned_estimates": s.learned.as_ref().map(|l| serde_json::json!({
            "jobs": l.jobs,
            "median_abs_error_s": l.median_abs_error_s.round(),
            "median_ratio": (l.median_ratio * 1000.0).round() / 1000.0,
        })),
        "by_kind": s.by_kind.iter().map(|k| serde_json::json!({
            "kind": k.kind,
            "jobs": k.jobs,
            "unfinished": k.unfinished,
            "avg_jct_s": k.avg_jct_s.round(),
            "p99_jct_s": k.p99_jct_s.round(),
            "avg_queue_s": k.avg_queue_s.round(),
            "devices": k.devices,
            "allocated": (k.allocated * 10_000.0).round() / 10_000.0,
        })).collect::<Vec<_>>(),
    })
}

/// Each run's rows per accelerator kind, when there is more than one.
fn kind_table(runs: &[Run]) -> String {
    if runs.iter().all(|r| r.summary.by_kind.is_empty()) {
        return String::new();
    }
    let mut t = String::from(
        "\nper accelerator kind (jobs by the kind they asked for; devices allocated over the makespan):\n\
         | policy | kind | jobs | unfinished | avg JCT s | p99 JCT s | avg queue s | devices | allocated |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        for k in &r.summary.by_kind {
            let devices = if k.devices > 0 { k.devices.to_string() } else { "-".into() };
            let allocated = if k.devices > 0 { format!("{:.3}", k.allocated) } else { "-".into() };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {devices} | {allocated} |",
                r.policy, k.kind, k.jobs, k.unfinished, k.avg_jct_s, k.p99_jct_s, k.avg_queue_s
            );
        }
    }
    t
}

fn table(runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | jobs | avg JCT s | median JCT s | p99 JCT s | avg queue s | makespan s | GPU util | slowdown | Jain | preemptions | µs/decision | wall s |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let s = &r.summary;
        let _ = writeln!(
            t,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} | {:.2} | {:.3} | {} | {:.1} | {:.2} |",
            r.policy,
            s.jobs,
            s.avg_jct_s,
            s.median_jct_s,
            s.p99_jct_s,
            s.avg_queue_s,
            s.makespan_s,
            s.gpu_utilization,
            s.avg_bounded_slowdown,
            s.jain_fairness,
            s.preemptions,
            s.sched_us_per_call,
            s.wall_s
        );
    }
    t
}

fn write_outputs(dir: &Path, runs: &[Run]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    for r in runs {
        let mut csv =
            String::from("line,group,gpus,submit_s,duration_s,first_start_s,end_s,jct_s,queue_s,preemptions\n");
        for j in &r.result.jobs {
            let opt = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
            let _ = writeln!(
                csv,
                "{},{},{},{:.3},{:.3},{},{},{},{},{}",
                j.line,
                j.group,
                j.gpus,
                j.submit_s,
                j.duration_s,
                opt(j.first_start_s),
                opt(j.end_s),
                opt(j.jct_s()),
                opt(j.queue_s()),
                j.preemptions
            );
        }
        write(&format!("jobs-{}.csv", r.policy), &csv)?;
    }
    let hours = |s: f64| s / 3600.0;
    let series = |f: fn(&gpool_sim::engine::Sample) -> f64| -> Vec<Line<'_>> {
        runs.iter()
            .map(|r| Line { name: &r.policy, points: r.result.series.iter().map(|s| (hours(s.t_s), f(s))).collect() })
            .collect()
    };
    let chart = |title, y| Chart { title, x_label: "hours since start", y_label: y, log_x: false };
    write(
        "utilization.svg",
        &line_chart(&chart("GPU utilisation (allocated / capacity)", "utilisation"), &series(|s| s.utilization)),
    )?;
    write("queue.svg", &line_chart(&chart("Jobs waiting", "pending jobs"), &series(|s| s.queued)))?;
    let cdfs: Vec<Line<'_>> = runs
        .iter()
        .map(|r| Line {
            name: &r.policy,
            points: cdf(&r.result.jobs.iter().filter_map(|j| j.jct_s()).collect::<Vec<_>>(), 500),
        })
        .collect();
    write(
        "jct_cdf.svg",
        &line_chart(
            &Chart {
                title: "Job completion time CDF",
                x_label: "JCT (s, log scale)",
                y_label: "fraction of jobs",
                log_x: true,
            },
            &cdfs,
        ),
    )?;
    write("summary.md", &table(runs))?;
    Ok(())
}

/// `0.8` or `80%`, between 0 (excluded) and 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a fraction like 0.8 or 80%"))?;
    if !(v > 0.0 && v <= 1.0) {
        return Err(format!("{s:?}: a budget is more than 0% and at most 100% of the nameplate power"));
    }
    Ok(v)
}

/// Each elastic run against the rigid run before it: the ratios the goal is stated in.
fn elastic_lines(runs: &[Run], efficiency: f64) -> String {
    let mut out = String::new();
    for pair in runs.windows(2) {
        let (rigid, elastic) = (&pair[0], &pair[1]);
        if !elastic.policy.ends_with(" elastic") || rigid.policy.ends_with(" elastic") {
            continue;
        }
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let _ = writeln!(
            out,
            "{}: avg JCT {:.2}× rigid, p99 JCT {:.2}×, GPU util {:.1}% against {:.1}%; {} resizes (scaling {:.0}% per doubling)",
            elastic.policy,
            ratio(elastic.summary.avg_jct_s, rigid.summary.avg_jct_s),
            ratio(elastic.summary.p99_jct_s, rigid.summary.p99_jct_s),
            elastic.summary.gpu_utilization * 100.0,
            rigid.summary.gpu_utilization * 100.0,
            elastic.result.resizes,
            efficiency * 100.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_budget_is_a_fraction() {
        assert_eq!(parse_fraction("0.8"), Ok(0.8));
        assert_eq!(parse_fraction("60%"), Ok(0.6));
        assert!(parse_fraction("1.5").expect_err("over").contains("at most 100%"));
        assert!(parse_fraction("lots").expect_err("text").contains("not a fraction"));
    }

    #[test]
    fn rejected_jobs_are_grouped_by_reason_with_their_lines() {
        assert_eq!(rejected_report(&[]), "");
        let mut rejected: Vec<(usize, String)> =
            (2..10).map(|l| (l, "needs 128 GPUs, the cluster has 64".into())).collect();
        rejected.push((40, "no node has GPU model V100".into()));
        let text = rejected_report(&rejected);
        assert!(text.contains("9 job(s) rejected"), "{text}");
        assert!(text.contains("8 × needs 128 GPUs, the cluster has 64 (trace line 2, 3, 4, 5, 6, … 3 more)"), "{text}");
        assert!(text.contains("1 × no node has GPU model V100 (trace line 40)"), "{text}");
        let first = text.find("128 GPUs").unwrap_or(usize::MAX);
        assert!(first < text.find("V100").unwrap_or(0), "the largest group first: {text}");
    }
}
