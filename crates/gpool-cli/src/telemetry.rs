//! `gpool advise | alerts`.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, gib, money, print_json};

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
