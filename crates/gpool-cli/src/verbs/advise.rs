//! `gpool advise JOB`: a diagnosis from the job's GPU telemetry, with the
//! evidence, what to try, and what the waste costs.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, gib, money, text};

#[derive(Args, Debug)]
pub(crate) struct AdviseArgs {
    /// Job id.
    id: u64,
    /// Judge on at least this much telemetry (default 5m).
    #[arg(long)]
    min_span: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: AdviseArgs) -> anyhow::Result<()> {
    let path = match &a.min_span {
        Some(s) => format!("/jobs/{}/advice?minSpan={s}", a.id),
        None => format!("/jobs/{}/advice", a.id),
    };
    let adv: api::AdviceView = a.connect.client()?.get(&path)?;
    emit(&render(&adv, a.output)?);
    Ok(())
}

/// A summary line, then each finding with its evidence and suggestions.
pub(crate) fn render(adv: &api::AdviceView, output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(adv);
    }
    let s = &adv.summary;
    let util = s.mean_gpu_util.map_or_else(|| "n/a".into(), |m| format!("{m:.0}%"));
    let spread = match (adv.p5_gpu_util, adv.p95_gpu_util) {
        (Some(a), Some(b)) => format!(" (p5 {a:.0}%, p95 {b:.0}%)"),
        _ => String::new(),
    };
    let mut lines = vec![format!(
        "job {}: {:.3} GPU-hours{}, utilisation {util}{spread}, peak memory {}",
        adv.job,
        s.gpu_hours,
        money(s.cost_usd),
        s.peak_memory_mb.map_or_else(|| "n/a".into(), gib)
    )];
    for f in &adv.findings {
        lines.push(String::new());
        lines.push(format!("* {}", f.summary));
        for e in &f.evidence {
            lines.push(format!("    evidence: {e}"));
        }
        for s in &f.suggestions {
            lines.push(format!("    try: {s}"));
        }
        if f.wasted_gpu_hours > 0.0 {
            lines.push(format!("    waste so far: {:.3} GPU-hours{}", f.wasted_gpu_hours, money(f.wasted_usd)));
        }
    }
    if let Some(p) = &adv.profile {
        lines.push(String::new());
        lines.push(format!("profiled at {} ({} s): {}: {}", p.taken_at, p.seconds, p.bottleneck, p.why));
        lines.push(format!("    try: {}", p.fix));
    } else {
        lines.push(String::new());
        lines.push(format!("(no profile yet: `gpool profile {}` shows where a running job's time goes)", adv.job));
    }
    if adv.price_per_gpu_hour.is_none() && adv.findings.iter().any(|f| f.wasted_gpu_hours > 0.0) {
        lines.push(String::new());
        lines.push("(no price known for this GPU model: start gpool with --gpu-price MODEL=USD to see costs)".into());
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{advice, assert_snapshot, finding, usage};

    #[test]
    fn advise_prints_findings_with_evidence_and_cost() {
        let adv = advice(12)
            .summary(usage(4.0, 0.25).util(31.4).peak_memory_mb(20_480).cost(16.0))
            .spread(3.0, 88.6)
            .price(4.0)
            .finding(
                finding("input_bound", "input-pipeline bound: the model is loaded but the GPU is busy only 31%")
                    .evidence("mean GPU utilisation 31% over 58m (p5 3%, p95 89%)")
                    .evidence("the job's 8 CPU cores are 97% busy")
                    .suggest("more data-loader workers (num_workers), or preprocess offline")
                    .waste(2.744, Some(10.98)),
            )
            .finding(finding("healthy", "memory use fits the GPU"))
            .build();
        assert_snapshot("advise.txt", &render(&adv, Output::Table).unwrap());
        assert_snapshot("advise.json", &render(&adv, Output::Json).unwrap());
    }

    #[test]
    fn advise_repeats_the_latest_profile() {
        let adv = advice(12)
            .summary(usage(4.0, 0.25).util(31.4))
            .finding(finding("input_bound", "input-pipeline bound").evidence("profiled at …: input-bound: 88% …"))
            .profile(crate::testkit::profile_view(12))
            .build();
        assert_snapshot("advise-profiled.txt", &render(&adv, Output::Table).unwrap());
    }

    #[test]
    fn advise_without_data_or_price_says_so() {
        let adv =
            advice(13).finding(finding("idle_gpu", "GPU idle: under 5% for the whole run").waste(0.5, None)).build();
        assert_snapshot("advise-no-price.txt", &render(&adv, Output::Table).unwrap());
        assert_snapshot("advise-no-price.json", &render(&adv, Output::Json).unwrap());
    }
}
