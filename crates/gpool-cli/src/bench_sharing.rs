//! `gpool bench sharing`: placements of GPU shares on the openb cluster under
//! the FGD paper's workload inflation (see `gpool_sim::sharing_bench`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use gpool_sim::plot::{Chart, Line, line_chart};
use gpool_sim::sharing_bench::{Placement, Run, inflate, read_nodes, read_pods};

use crate::progress::Progress;

#[derive(Args, Debug)]
pub(crate) struct SharingArgs {
    /// The node list (`sn, cpu_milli, memory_mib, gpu, model`).
    #[arg(long, default_value = "data/traces/openb/openb_node_list_gpu_node.csv")]
    nodes: PathBuf,
    /// Pod lists (repeatable); default: every openb variant in data/traces/openb.
    #[arg(long = "pods")]
    pods: Vec<PathBuf>,
    /// Arrivals stop when their GPU requests reach this many times the cluster's GPUs.
    #[arg(long, default_value_t = 1.3)]
    until: f64,
    /// The placements to run (comma-separated); default: all four.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    placements: Vec<String>,
    /// Seed of the re-sampling once a list runs out.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write one SVG per pod list (allocated share against arrivals) into this folder.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    #[command(flatten)]
    print: crate::output::DataFlag,
}

const VARIANTS: [&str; 6] = ["gpushare20", "gpushare40", "gpushare80", "gpushare100", "gpuspec33", "multigpu50"];

fn read(path: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| {
        format!("cannot read {} (run from the repository root, or pass --nodes/--pods)", path.display())
    })
}

pub(crate) fn sharing(a: SharingArgs) -> anyhow::Result<()> {
    if !(a.until.is_finite() && a.until > 0.0 && a.until <= 5.0) {
        anyhow::bail!("--until must be above 0 and at most 5 (times the cluster's GPUs), got {}", a.until);
    }
    let nodes = read_nodes(&read(&a.nodes)?).with_context(|| format!("in {}", a.nodes.display()))?;
    let lists: Vec<PathBuf> = if a.pods.is_empty() {
        let dir = a.nodes.parent().map(PathBuf::from).unwrap_or_default();
        VARIANTS.iter().map(|v| dir.join(format!("openb_pod_list_{v}.csv"))).collect()
    } else {
        a.pods.clone()
    };
    let placements: Vec<Placement> = if a.placements.is_empty() {
        Placement::ALL.to_vec()
    } else {
        let mut chosen = Vec::new();
        for name in &a.placements {
            let Some(p) = Placement::ALL.into_iter().find(|p| p.name() == name.trim()) else {
                let known: Vec<&str> = Placement::ALL.iter().map(|p| p.name()).collect();
                anyhow::bail!("--placements: no placement {name:?}; choose from {}", known.join(", "));
            };
            chosen.push(p);
        }
        chosen
    };
    let gpus: usize = nodes.iter().map(|n| n.whole_gpus().count()).sum();
    let mut bar = Progress::new("runs");
    let total = (lists.len() * placements.len()) as u64;
    let mut results: Vec<(String, Vec<Run>)> = Vec::new();
    for path in &lists {
        let pods = read_pods(&read(path)?).with_context(|| format!("in {}", path.display()))?;
        let name = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().replace("openb_pod_list_", ""));
        let mut runs = Vec::new();
        for &p in &placements {
            runs.push(inflate(&nodes, &pods, p, a.until, 0.02, a.seed));
            bar.update((results.len() * placements.len() + runs.len()) as u64, total);
        }
        results.push((name, runs));
    }
    let at = |r: &Run, x: f64| r.at(x).map_or(f64::NAN, |p| p.unallocated);
    if let Some(format) = a.print.data() {
        let v: Vec<serde_json::Value> = results
            .iter()
            .flat_map(|(list, runs)| {
                runs.iter().map(move |r| {
                    serde_json::json!({
                        "pods": list, "placement": r.placement.name(), "arrived_pods": r.arrived_pods,
                        "skipped_pods": r.skipped_pods,
                        "unallocated_gpus_at_100": round(at(r, 1.0)), "unallocated_gpus_at_130": round(at(r, 1.3)),
                        "points": r.points.iter().map(|p| [round(p.arrived), round(p.allocated)]).collect::<Vec<_>>(),
                    })
                })
            })
            .collect();
        crate::output::print_data(format, &serde_json::Value::Array(v))?;
        return Ok(());
    }
    outln!("{} nodes, {gpus} GPUs; arrivals to {:.0}% of the GPUs, seed {}", nodes.len(), a.until * 100.0, a.seed);
    outln!("GPUs left unallocated when arriving requests reach 100% and 130% of the cluster's GPUs:");
    outln!("  {:<12} {:<14} {:>9} {:>9} {:>8}", "pods", "placement", "at 100%", "at 130%", "skipped");
    let mut worst: Option<(f64, String)> = None;
    for (list, runs) in &results {
        for r in runs {
            outln!(
                "  {:<12} {:<14} {:>9.1} {:>9.1} {:>8}",
                list,
                r.placement.name(),
                at(r, 1.0),
                at(r, 1.3),
                r.skipped_pods
            );
        }
        let find = |name: &str| runs.iter().find(|r| r.placement.name() == name);
        if let (Some(bf), Some(fgd)) = (find("best-fit"), find("fragmentation")) {
            for x in [1.0, 1.3] {
                let cut = 1.0 - at(fgd, x) / at(bf, x);
                if worst.as_ref().is_none_or(|(w, _)| cut < *w) {
                    worst = Some((cut, format!("{list} at {:.0}%", x * 100.0)));
                }
            }
        }
    }
    if let Some((cut, where_)) = worst {
        outln!(
            "fragmentation-aware against best-fit, worst case: {:.1}% fewer GPUs unallocated ({where_})",
            cut * 100.0
        );
    }
    if let Some(dir) = &a.plot_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (list, runs) in &results {
            let lines: Vec<Line<'_>> = runs
                .iter()
                .map(|r| Line {
                    name: r.placement.name(),
                    points: r.points.iter().map(|p| (p.arrived * 100.0, p.allocated * 100.0)).collect(),
                })
                .collect();
            let title = format!("openb {list}: GPU capacity allocated as requests arrive");
            let chart = Chart {
                title: &title,
                x_label: "arrived GPU requests, % of the cluster's GPUs",
                y_label: "allocated, % of GPUs",
                log_x: false,
            };
            let path = dir.join(format!("sharing-{list}.svg"));
            std::fs::write(&path, line_chart(&chart, &lines))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        outln!("plots in {}", dir.display());
    }
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
