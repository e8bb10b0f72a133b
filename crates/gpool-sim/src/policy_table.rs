//! The robustness table (`gpool bench policies`): every policy on every
//! trace × load, the ratios of the default against the baselines that the
//! default policy's goals are stated in, and the worst case of each ratio
//! over all rows. Pure: the runs are done by the caller.

use std::fmt::Write;

use crate::metrics::Summary;
use crate::plot::{Chart, Line, line_chart};

/// A trace and the cluster it is replayed on at load 1.0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceSetup {
    pub name: &'static str,
    /// File under the traces directory (`data/traces`).
    pub file: &'static str,
    pub window: Option<&'static str>,
    /// Nominal size in GPUs (8-GPU nodes), from the traces' README: load ≈ 0.75–0.8.
    pub nominal_gpus: u32,
}

/// The five job traces. `itp06` is kept aside: the default policy was tuned
/// on the other four only (docs/scheduling.md, "A default that holds").
pub const TRACES: &[TraceSetup] = &[
    TraceSetup { name: "philly", file: "philly_pollux.csv", window: Some("2017-10-01..2017-11-30"), nominal_gpus: 640 },
    TraceSetup { name: "itp04", file: "itp_elasticflow_cluster04.csv", window: None, nominal_gpus: 640 },
    TraceSetup { name: "itp02", file: "itp_elasticflow_cluster02.csv", window: None, nominal_gpus: 112 },
    TraceSetup { name: "itp03", file: "itp_elasticflow_cluster03.csv", window: None, nominal_gpus: 176 },
    TraceSetup { name: "itp06", file: "itp_elasticflow_cluster06.csv", window: None, nominal_gpus: 112 },
];

/// The trace no policy decision was tuned on.
pub const HELD_OUT: &str = "itp06";

/// Loads as multiples of the nominal one (`--load-scale`).
pub const LOADS: &[f64] = &[0.8, 1.0, 1.2];

/// The policy judged against the baselines.
pub const SUBJECT: &str = "default";

/// Baselines that use only what the scheduler knows at the time (issue 45):
/// submissions and attained service, no durations. The default may not lose
/// to any of them on average and p99 JCT at once, and its average must stay
/// near the best of them.
pub const NON_CLAIRVOYANT: &[&str] = &["fifo", "fifo-backfill", "las", "fair"];

/// One trace at one load: each policy's summary.
#[derive(Clone, Debug)]
pub struct Row {
    pub trace: String,
    pub load: f64,
    pub gpus: u32,
    pub runs: Vec<(String, Summary)>,
}

impl Row {
    pub fn get(&self, policy: &str) -> Option<&Summary> {
        self.runs.iter().find(|(p, _)| p == policy).map(|(_, s)| s)
    }

    pub fn label(&self) -> String {
        format!("{} ×{}", self.trace, self.load)
    }
}

/// The ratios of the subject against the baselines in one row (below 1 is
/// better for the subject; `NaN` where a baseline was not run).
#[derive(Clone, Debug, PartialEq)]
pub struct Ratios {
    /// Subject's average JCT ÷ the best non-clairvoyant baseline's (goal ≤ 1.15).
    pub avg_vs_best: f64,
    /// That baseline.
    pub best: String,
    /// Subject's p99 JCT ÷ FIFO's (goal ≤ 1.10).
    pub p99_vs_fifo: f64,
    /// Non-clairvoyant baselines better than the subject on average and p99 at once (goal: none).
    pub dominated_by: Vec<String>,
    /// For reference, no goal: against SRTF (which knows run times) and LAS.
    pub avg_vs_srtf: f64,
    pub avg_vs_las: f64,
    pub p99_vs_las: f64,
}

/// The goals of issue 45, as bounds on [`Ratios`].
pub const MAX_AVG_VS_BEST: f64 = 1.15;
pub const MAX_P99_VS_FIFO: f64 = 1.10;

impl Ratios {
    pub fn of(row: &Row) -> Option<Ratios> {
        let s = row.get(SUBJECT)?;
        let ratio = |a: f64, b: Option<f64>| b.map_or(f64::NAN, |b| if b > 0.0 { a / b } else { f64::NAN });
        let las = row.get("las");
        let baselines: Vec<(&str, &Summary)> =
            NON_CLAIRVOYANT.iter().filter_map(|p| row.get(p).map(|b| (*p, b))).collect();
        let dominated_by = baselines
            .iter()
            .filter(|(_, b)| b.avg_jct_s < s.avg_jct_s && b.p99_jct_s < s.p99_jct_s)
            .map(|(p, _)| p.to_string())
            .collect();
        let best = baselines.iter().min_by(|a, b| a.1.avg_jct_s.total_cmp(&b.1.avg_jct_s));
        Some(Ratios {
            avg_vs_best: ratio(s.avg_jct_s, best.map(|(_, b)| b.avg_jct_s)),
            best: best.map_or_else(|| "–".to_string(), |(p, _)| p.to_string()),
            p99_vs_fifo: ratio(s.p99_jct_s, row.get("fifo").map(|b| b.p99_jct_s)),
            dominated_by,
            avg_vs_srtf: ratio(s.avg_jct_s, row.get("srtf").map(|b| b.avg_jct_s)),
            avg_vs_las: ratio(s.avg_jct_s, las.map(|b| b.avg_jct_s)),
            p99_vs_las: ratio(s.p99_jct_s, las.map(|b| b.p99_jct_s)),
        })
    }

    /// The goals this row misses, in words; empty when it meets them all.
    pub fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.dominated_by.is_empty() {
            out.push(format!("beaten on avg and p99 by {}", self.dominated_by.join(", ")));
        }
        if self.avg_vs_best > MAX_AVG_VS_BEST {
            out.push(format!("avg {:.2}× {}'s (goal ≤ {MAX_AVG_VS_BEST:.2})", self.avg_vs_best, self.best));
        }
        if self.p99_vs_fifo > MAX_P99_VS_FIFO {
            out.push(format!("p99 {:.2}× FIFO's (goal ≤ {MAX_P99_VS_FIFO:.2})", self.p99_vs_fifo));
        }
        out
    }
}

fn cell(v: f64, digits: usize) -> String {
    if v.is_finite() { format!("{v:.digits$}") } else { "–".into() }
}

fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Markdown: the worst case of each goal first, then the ratios of every
/// row with the goals it misses, then each policy's average / p99 JCT.
pub fn markdown(rows: &[Row], policies: &[String]) -> String {
    let mut s = String::new();
    let all: Vec<(&Row, Ratios)> = rows.iter().filter_map(|r| Ratios::of(r).map(|q| (r, q))).collect();
    if let Some(w) = worst(&all) {
        let _ = writeln!(
            s,
            "**Worst:** avg ÷ best baseline **{}** ({}; goal ≤ {MAX_AVG_VS_BEST:.2}), p99 ÷ FIFO **{}** ({}; goal ≤ \
             {MAX_P99_VS_FIFO:.2}), beaten on both by a baseline on **{}** row(s){}; **{} of {} rows** miss a goal.\n",
            cell(w.avg_vs_best.0, 3),
            w.avg_vs_best.1,
            cell(w.p99_vs_fifo.0, 3),
            w.p99_vs_fifo.1,
            w.dominated.len(),
            if w.dominated.is_empty() { String::new() } else { format!(" ({})", w.dominated.join(", ")) },
            all.iter().filter(|(_, q)| !q.misses().is_empty()).count(),
            all.len()
        );
    }
    s.push_str(
        "| # | trace | load | avg ÷ best baseline | p99 ÷ FIFO | beaten on both by | avg ÷ SRTF | avg ÷ LAS | p99 ÷ LAS | misses |\n",
    );
    s.push_str("|---:|---|---:|---:|---:|---|---:|---:|---:|---|\n");
    for (i, r) in rows.iter().enumerate() {
        let Some(q) = Ratios::of(r) else { continue };
        let misses = q.misses();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} |",
            i + 1,
            r.trace,
            r.load,
            cell(q.avg_vs_best, 3),
            q.best,
            cell(q.p99_vs_fifo, 3),
            if q.dominated_by.is_empty() { "–".into() } else { q.dominated_by.join(", ") },
            cell(q.avg_vs_srtf, 3),
            cell(q.avg_vs_las, 3),
            cell(q.p99_vs_las, 3),
            if misses.is_empty() { "none".into() } else { misses.join("; ") }
        );
    }
    let _ = write!(s, "\n| trace | load | GPUs |");
    for p in policies {
        let _ = write!(s, " {p} avg / p99 |");
    }
    let _ = write!(s, "\n|---|---:|---:|");
    for _ in policies {
        let _ = write!(s, "---:|");
    }
    s.push('\n');
    for r in rows {
        let _ = write!(s, "| {} | {} | {} |", r.trace, r.load, r.gpus);
        for p in policies {
            match r.get(p) {
                Some(x) => {
                    let _ = write!(s, " {} / {} |", thousands(x.avg_jct_s), thousands(x.p99_jct_s));
                }
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s
}

/// The worst value of each goal's ratio over rows, with the row it comes
/// from, and the rows where a baseline beats the subject on both counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Worst {
    pub avg_vs_best: (f64, String),
    pub p99_vs_fifo: (f64, String),
    /// `trace ×load: baseline, …` for each row beaten on both counts.
    pub dominated: Vec<String>,
}

pub fn worst(rows: &[(&Row, Ratios)]) -> Option<Worst> {
    if rows.is_empty() {
        return None;
    }
    // The row with the largest finite value of `f` (the first, on a tie).
    let top = |f: &dyn Fn(&Ratios) -> f64| {
        rows.iter().filter(|(_, q)| f(q).is_finite()).fold(None, |acc: Option<&(&Row, Ratios)>, x| match acc {
            Some(a) if f(&a.1) >= f(&x.1) => Some(a),
            _ => Some(x),
        })
    };
    let none = || (f64::NAN, String::from("–"));
    Some(Worst {
        avg_vs_best: top(&|q| q.avg_vs_best)
            .map_or_else(none, |(r, q)| (q.avg_vs_best, format!("{}, against {}", r.label(), q.best))),
        p99_vs_fifo: top(&|q| q.p99_vs_fifo).map_or_else(none, |(r, q)| (q.p99_vs_fifo, r.label())),
        dominated: rows
            .iter()
            .filter(|(_, q)| !q.dominated_by.is_empty())
            .map(|(r, q)| format!("{}: {}", r.label(), q.dominated_by.join(", ")))
            .collect(),
    })
}

/// An SVG plot of the goals' ratios per row (rows numbered as in the table).
pub fn ratio_plot(rows: &[Row]) -> String {
    let ratios: Vec<(f64, Ratios)> =
        rows.iter().enumerate().filter_map(|(i, r)| Ratios::of(r).map(|q| ((i + 1) as f64, q))).collect();
    let line = |name: &'static str, f: fn(&Ratios) -> f64| Line {
        name,
        points: ratios.iter().map(|(x, q)| (*x, f(q))).collect(),
    };
    let bound = |name: &'static str, y: f64| Line { name, points: vec![(1.0, y), (rows.len().max(1) as f64, y)] };
    let first = rows.first().map(Row::label).unwrap_or_default();
    let last = rows.last().map(Row::label).unwrap_or_default();
    let x_label = format!("row of the table (1 = {first} … {} = {last})", rows.len());
    let chart = Chart {
        title: "default against the non-clairvoyant baselines, per trace × load",
        x_label: &x_label,
        y_label: "ratio (below 1: default better)",
        log_x: false,
    };
    line_chart(
        &chart,
        &[
            line("avg ÷ best baseline", |q| q.avg_vs_best),
            line("p99 ÷ FIFO", |q| q.p99_vs_fifo),
            bound("goal avg ÷ best 1.15", MAX_AVG_VS_BEST),
            bound("goal p99 ÷ FIFO 1.10", MAX_P99_VS_FIFO),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(avg: f64, p99: f64, queue: f64) -> Summary {
        Summary {
            jobs: 1,
            unfinished: 0,
            rejected: 0,
            avg_jct_s: avg,
            median_jct_s: avg,
            p99_jct_s: p99,
            avg_queue_s: queue,
            p99_queue_s: queue,
            makespan_s: 1.0,
            gpu_utilization: 0.5,
            avg_bounded_slowdown: 1.0,
            jain_fairness: 1.0,
            preemptions: 0,
            sched_calls: 0,
            sched_us_per_call: 0.0,
            sched_max_ms: 0.0,
            wall_s: 0.0,
            by_kind: Vec::new(),
            learned: None,
        }
    }

    fn row(runs: &[(&str, f64, f64, f64)]) -> Row {
        Row {
            trace: "t".into(),
            load: 1.0,
            gpus: 8,
            runs: runs.iter().map(|(p, a, q, w)| (p.to_string(), summary(*a, *q, *w))).collect(),
        }
    }

    #[test]
    fn each_goal_is_judged_from_its_own_ratio() {
        // Within 1.15× of the best baseline (LAS), within 1.10× of FIFO's p99, beaten by none on both.
        let good = row(&[
            ("default", 110.0, 1050.0, 0.0),
            ("fifo", 400.0, 1000.0, 300.0),
            ("las", 100.0, 1200.0, 0.0),
            ("srtf", 50.0, 900.0, 0.0),
        ]);
        let q = Ratios::of(&good).unwrap();
        assert_eq!(q.best, "las");
        assert!((q.avg_vs_best - 1.1).abs() < 1e-9 && (q.p99_vs_fifo - 1.05).abs() < 1e-9, "{q:?}");
        assert_eq!(q.misses(), Vec::<String>::new(), "SRTF knows run times: no goal against it");
        let bad = row(&[
            ("default", 200.0, 1300.0, 0.0),
            ("fifo", 400.0, 1000.0, 300.0),
            ("fifo-backfill", 180.0, 1100.0, 0.0),
            ("las", 150.0, 1250.0, 0.0),
        ]);
        let q = Ratios::of(&bad).unwrap();
        assert_eq!(q.dominated_by, vec!["fifo-backfill".to_string(), "las".to_string()]);
        assert_eq!(q.misses().len(), 3, "{:?}", q.misses());
        // No baseline run: no ratio, no miss invented.
        let alone = row(&[("default", 100.0, 900.0, 0.0)]);
        let q = Ratios::of(&alone).unwrap();
        assert!(q.avg_vs_best.is_nan() && q.p99_vs_fifo.is_nan() && q.misses().is_empty());
    }

    #[test]
    fn the_worst_case_comes_first_and_names_its_row() {
        let mut a = row(&[("default", 110.0, 900.0, 0.0), ("las", 100.0, 950.0, 0.0), ("fifo", 300.0, 1000.0, 0.0)]);
        a.trace = "a".into();
        let mut b = row(&[("default", 150.0, 1200.0, 0.0), ("las", 100.0, 950.0, 0.0), ("fifo", 300.0, 1000.0, 0.0)]);
        b.trace = "b".into();
        let pairs: Vec<(&Row, Ratios)> = [&a, &b].into_iter().map(|r| (r, Ratios::of(r).unwrap())).collect();
        let w = worst(&pairs).unwrap();
        assert_eq!(w.avg_vs_best, (1.5, "b ×1, against las".to_string()));
        assert_eq!(w.p99_vs_fifo, (1.2, "b ×1".to_string()));
        assert_eq!(w.dominated, vec!["b ×1: las".to_string()]);
        let md = markdown(&[a, b], &["default".into(), "las".into(), "fifo".into()]);
        assert!(md.starts_with("**Worst:** avg ÷ best baseline **1.500** (b ×1, against las"), "{md}");
        assert!(md.contains("**1 of 2 rows** miss a goal"), "{md}");
        assert!(ratio_plot(&[]).starts_with("<svg"));
    }
}
