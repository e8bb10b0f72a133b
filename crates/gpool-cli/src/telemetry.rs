//! `gpool advise | alerts`, and the telemetry parts of `show` and `nodes`.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::jobs::{Output, print_json};

/// `▁▂▃▅▇` for values 0–100.
pub(crate) fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() {
        return String::new();
    }
    // Average into at most `width` buckets.
    let n = values.len().min(width.max(1));
    (0..n)
        .map(|i| {
            let (a, b) = (i * values.len() / n, ((i + 1) * values.len() / n).max(i * values.len() / n + 1));
            let slice = &values[a..b.min(values.len())];
            let v = slice.iter().sum::<f64>() / slice.len().max(1) as f64;
            BARS[((v.clamp(0.0, 100.0) / 100.0) * 7.0).round() as usize]
        })
        .collect()
}

/// `12.5 GiB`.
pub(crate) fn gib(mb: u64) -> String {
    format!("{:.1} GiB", mb as f64 / 1024.0)
}

fn money(usd: Option<f64>) -> String {
    usd.map_or_else(String::new, |u| format!(" (${u:.2})"))
}

/// Lines describing a job's usage, for `gpool show`.
pub(crate) fn usage_lines(u: &api::UsageSummary, curve: &[f64]) -> Vec<String> {
    let mut out = vec![format!(
        "  GPU-hours        {:.3}{}, of which idle {:.3}",
        u.gpu_hours,
        money(u.cost_usd),
        u.idle_gpu_hours
    )];
    if let Some(m) = u.mean_gpu_util {
        out.push(format!("  utilisation      mean {m:.0}%  {}", sparkline(curve, 60)));
    }
    if let Some(p) = u.peak_memory_mb {
        out.push(format!("  peak GPU memory  {}", gib(p)));
    }
    if let Some(c) = u.mean_cpu_cores {
        out.push(format!("  CPU              {c:.1} cores on average"));
    }
    out
}

#[derive(Args, Debug)]
pub(crate) struct AdviseArgs {
    /// Job id.
    id: u64,
    /// Judge on at least this much telemetry (default 5m).
    #[arg(long)]
    min_span: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool advise JOB`: findings with their evidence and what the waste costs.
pub(crate) fn advise(a: AdviseArgs) -> anyhow::Result<()> {
    let path = match &a.min_span {
        Some(s) => format!("/jobs/{}/advice?minSpan={s}", a.id),
        None => format!("/jobs/{}/advice", a.id),
    };
    let adv: api::AdviceView = a.connect.client()?.get(&path)?;
    if a.output == Output::Json {
        return print_json(&adv);
    }
    let s = &adv.summary;
    let util = s.mean_gpu_util.map_or_else(|| "n/a".into(), |m| format!("{m:.0}%"));
    let spread = match (adv.p5_gpu_util, adv.p95_gpu_util) {
        (Some(a), Some(b)) => format!(" (p5 {a:.0}%, p95 {b:.0}%)"),
        _ => String::new(),
    };
    outln!(
        "job {}: {:.3} GPU-hours{}, utilisation {util}{spread}, peak memory {}",
        adv.job,
        s.gpu_hours,
        money(s.cost_usd),
        s.peak_memory_mb.map_or_else(|| "n/a".into(), gib)
    );
    for f in &adv.findings {
        outln!("");
        outln!("* {}", f.summary);
        for e in &f.evidence {
            outln!("    evidence: {e}");
        }
        for s in &f.suggestions {
            outln!("    try: {s}");
        }
        if f.wasted_gpu_hours > 0.0 {
            outln!("    waste so far: {:.3} GPU-hours{}", f.wasted_gpu_hours, money(f.wasted_usd));
        }
    }
    if adv.price_per_gpu_hour.is_none() && adv.findings.iter().any(|f| f.wasted_gpu_hours > 0.0) {
        outln!("");
        outln!("(no price known for this GPU model: start gpool with --gpu-price MODEL=USD to see costs)");
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct AlertsArgs {
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// `gpool alerts`: what fires now.
pub(crate) fn alerts(a: AlertsArgs) -> anyhow::Result<()> {
    let list: Vec<api::AlertView> = a.connect.client()?.get("/alerts")?;
    if a.output == Output::Json {
        return print_json(&list);
    }
    if list.is_empty() {
        outln!("no alerts firing");
        return Ok(());
    }
    outln!("{:<9} {:<22} {:<22} {:<20} SUMMARY", "SEVERITY", "ALERT", "SUBJECT", "SINCE");
    for x in list {
        outln!("{:<9} {:<22} {:<22} {:<20} {}", x.severity, x.rule, x.subject, x.since, x.summary);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_and_bucket() {
        assert_eq!(sparkline(&[0.0, 100.0], 10), "▁█");
        assert_eq!(sparkline(&[0.0, 0.0, 100.0, 100.0], 2), "▁█");
        assert_eq!(sparkline(&[], 5), "");
        assert_eq!(sparkline(&[50.0; 100], 4).chars().count(), 4);
    }
}
