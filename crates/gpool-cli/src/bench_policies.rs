//! `gpool bench policies`: the robustness table of docs/scheduling.md, every
//! policy on the five job traces at three loads, with the default's ratios
//! against the non-clairvoyant baselines (issue 45's goals), the worst case
//! first. Runs use every core.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gpool_core::Policy;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::metrics::{Summary, summarize};
use gpool_sim::policy_table::{self, HELD_OUT, LOADS, Row, TRACES, TraceSetup};
use gpool_sim::trace::{self, TraceJob, Window};

#[derive(Args, Debug)]
pub(crate) struct PoliciesArgs {
    /// Directory holding the trace files (the project's `data/traces`).
    #[arg(long, default_value = "data/traces")]
    data: PathBuf,
    /// Traces to replay (comma-separated): philly, itp04, itp02, itp03, itp06.
    /// `training` means all but the held-out trace, `held-out` only it.
    #[arg(long, value_delimiter = ',', default_value = "philly,itp04,itp02,itp03,itp06")]
    traces: Vec<String>,
    /// Loads as multiples of each trace's nominal load (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = LOADS.to_vec())]
    loads: Vec<f64>,
    /// Policies (comma-separated); the default's goals compare it with fifo, fifo-backfill, las and fair.
    #[arg(long, value_delimiter = ',', default_value = "fifo,fifo-backfill,sjf,srtf,las,fair,default")]
    policies: Vec<String>,
    /// Change a knob of the default policy (repeatable): `--set overload.after=4h` (see docs/simulator.md).
    #[arg(long = "set")]
    set: Vec<String>,
    /// Simulations run at once (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write table.md, ratios.svg and rows.json into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

fn selected(names: &[String]) -> anyhow::Result<Vec<TraceSetup>> {
    let mut out: Vec<TraceSetup> = Vec::new();
    for n in names {
        let picked: Vec<TraceSetup> = match n.as_str() {
            "training" => TRACES.iter().filter(|t| t.name != HELD_OUT).copied().collect(),
            "held-out" => TRACES.iter().filter(|t| t.name == HELD_OUT).copied().collect(),
            name => match TRACES.iter().find(|t| t.name == name) {
                Some(t) => vec![*t],
                None => bail!(
                    "unknown trace {name:?}: expected {}, training or held-out",
                    TRACES.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
                ),
            },
        };
        for t in picked {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

struct Task<'a> {
    row: usize,
    policy: Policy,
    jobs: &'a [TraceJob],
    nodes: u32,
}

pub(crate) fn policies(a: PoliciesArgs) -> anyhow::Result<()> {
    let traces = selected(&a.traces)?;
    if let Some(l) = a.loads.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        bail!("--loads must be positive numbers, got {l}");
    }
    let mut policies = Vec::new();
    for name in &a.policies {
        let mut p = Policy::by_name(name)?;
        if name == policy_table::SUBJECT {
            for s in &a.set {
                p.set(s)?;
            }
        }
        policies.push((name.clone(), p));
    }
    // Each trace parsed once, then one job list per load.
    let mut inputs: Vec<(TraceSetup, f64, Vec<TraceJob>)> = Vec::new();
    for t in &traces {
        let path = a.data.join(t.file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}; run from the project's root or pass --data", path.display()))?;
        let parsed = trace::parse(&text, trace::detect(&text)?).with_context(|| path.display().to_string())?;
        let window: Option<Window> = t.window.map(str::parse).transpose()?;
        for &load in &a.loads {
            inputs.push((*t, load, trace::prepare(parsed.clone(), window, load)));
        }
    }
    let tasks: Vec<Task<'_>> = inputs
        .iter()
        .enumerate()
        .flat_map(|(row, (t, _, jobs))| {
            policies.iter().map(move |(_, p)| Task { row, policy: p.clone(), jobs, nodes: t.nominal_gpus / 8 })
        })
        .collect();
    let results: Mutex<Vec<Option<Summary>>> = Mutex::new(vec![None; tasks.len()]);
    let next = AtomicUsize::new(0);
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(tasks.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(task) = tasks.get(i) else { break };
                    let cfg = SimConfig {
                        elastic: None,
                        reservations: Vec::new(),
                        estimates: Estimates::for_policy(&task.policy),
                        policy: task.policy.clone(),
                        nodes: gpool_sim::cluster::uniform(task.nodes, 8, "H100-80GB"),
                        restart_delay: Duration::from_secs(60),
                        preemptible: true,
                        sample: Duration::from_secs(3600),
                        mig_planner: false,
                        power_budgets: Vec::new(),
                        faults: Vec::new(),
                        fleet: None,
                    };
                    match run(task.jobs, &cfg, |_, _| {}) {
                        Ok(r) => {
                            let s = summarize(&r);
                            let (t, load, _) = &inputs[task.row];
                            eprintln!(
                                "[{}/{}] {} ×{} {}: avg {:.0} s, p99 {:.0} s ({:.1} s)",
                                i + 1,
                                tasks.len(),
                                t.name,
                                load,
                                task.policy.name,
                                s.avg_jct_s,
                                s.p99_jct_s,
                                s.wall_s
                            );
                            if let Ok(mut v) = results.lock() {
                                v[i] = Some(s);
                            }
                        }
                        Err(e) => {
                            if let Ok(mut f) = failure.lock() {
                                *f = Some(anyhow::Error::new(e).context(format!("{} run", task.policy.name)));
                            }
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let summaries = results.into_inner().map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    let mut rows: Vec<Row> = inputs
        .iter()
        .map(|(t, load, _)| Row { trace: t.name.to_string(), load: *load, gpus: t.nominal_gpus, runs: Vec::new() })
        .collect();
    for (task, s) in tasks.iter().zip(summaries) {
        if let Some(s) = s {
            let name = policies.iter().find(|(_, p)| p.name == task.policy.name).map_or("?", |(n, _)| n.as_str());
            rows[task.row].runs.push((name.to_string(), s));
        }
    }
    let names: Vec<String> = policies.iter().map(|(n, _)| n.clone()).collect();
    let (held, training): (Vec<Row>, Vec<Row>) = rows.iter().cloned().partition(|r| r.trace == HELD_OUT);
    // The worst case over every row first, then each part alone.
    let mut text = String::new();
    if !held.is_empty() && !training.is_empty() {
        text.push_str(&format!("### All rows\n\n{}\n", policy_table::markdown(&rows, &names)));
    }
    for (title, part) in [("Training traces", &training), ("Held-out trace", &held)] {
        if !part.is_empty() {
            text.push_str(&format!("### {title}\n\n{}\n", policy_table::markdown(part, &names)));
        }
    }
    let json = serde_json::Value::Array(
        rows.iter()
            .map(|r| {
                let runs: serde_json::Map<String, serde_json::Value> = r
                    .runs
                    .iter()
                    .map(|(p, s)| {
                        (
                            p.clone(),
                            serde_json::json!({"avg_jct_s": s.avg_jct_s, "p99_jct_s": s.p99_jct_s,
                                "avg_queue_s": s.avg_queue_s, "preemptions": s.preemptions}),
                        )
                    })
                    .collect();
                let ratios = policy_table::Ratios::of(r);
                let misses = ratios.as_ref().map(|q| q.misses()).unwrap_or_default();
                let finite = |v: f64| if v.is_finite() { serde_json::json!(v) } else { serde_json::Value::Null };
                let goals = ratios.map(|q| {
                    serde_json::json!({"avg_vs_best_baseline": finite(q.avg_vs_best), "best_baseline": q.best,
                        "p99_vs_fifo": finite(q.p99_vs_fifo), "beaten_on_both_by": q.dominated_by})
                });
                serde_json::json!({"trace": r.trace, "load": r.load, "gpus": r.gpus, "held_out": r.trace == HELD_OUT,
                    "runs": runs, "goals": goals, "misses": misses})
            })
            .collect(),
    );
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let write = |name: &str, body: String| {
            let p = dir.join(name);
            std::fs::write(&p, body).with_context(|| format!("cannot write {}", p.display()))
        };
        write("table.md", text.clone())?;
        write("ratios.svg", policy_table::ratio_plot(&rows))?;
        write("rows.json", format!("{json:#}\n"))?;
    }
    if let Some(format) = a.print.data() {
        crate::output::print_data(format, &json)?;
    } else {
        print!("{text}");
    }
    Ok(())
}
