//! `gpool cost`: what jobs cost, by team, user, queue, pool or job.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{emit, json, text};

/// Arguments of `gpool cost`.
#[derive(Args, Debug)]
pub(crate) struct CostArgs {
    /// Group by team, user, queue, pool or job.
    #[arg(long, default_value = "team")]
    by: String,
    /// Jobs that ran in this period up to now: 30d, 7d, 12h.
    #[arg(long, default_value = "30d")]
    since: String,
    /// table, json, yaml or csv.
    #[arg(long, short = 'o', default_value = "table", value_parser = ["table", "json", "yaml", "csv"])]
    output: String,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: CostArgs) -> anyhow::Result<()> {
    let by: gpool_core::cost::CostGroup = a.by.parse().map_err(|e: String| anyhow::anyhow!("--by: {e}"))?;
    gpool_api::quantity::parse_duration(&a.since).map_err(|e| anyhow::anyhow!("--since {:?}: {e}", a.since))?;
    let r: api::CostReport = a.connect.client()?.get(&format!("/cost?by={}&since={}", by.as_str(), a.since.trim()))?;
    emit(&render(&r, &a.output)?);
    Ok(())
}

/// A line a group, largest spend first, then the total.
pub(crate) fn render(r: &api::CostReport, output: &str) -> anyhow::Result<String> {
    match output {
        "json" => return json(r),
        "yaml" => return Ok(gpool_api::yaml::to_string(r)?),
        "csv" => {
            let mut out = format!("{},dollars,gpu_hours,jobs,energy_kwh\n", r.by);
            for row in &r.rows {
                let key = if row.key.contains([',', '"']) {
                    format!("\"{}\"", row.key.replace('"', "\"\""))
                } else {
                    row.key.clone()
                };
                out.push_str(&format!(
                    "{key},{:.2},{:.2},{},{:.3}\n",
                    row.dollars,
                    row.gpu_hours,
                    row.jobs,
                    row.energy_wh / 1000.0
                ));
            }
            return Ok(out);
        }
        _ => {}
    }
    let mut lines = vec![format!(
        "{:<20} {:>12} {:>10} {:>6} {:>10}",
        r.by.to_uppercase(),
        "DOLLARS",
        "GPU-HOURS",
        "JOBS",
        "ENERGY-KWH"
    )];
    for row in &r.rows {
        lines.push(format!(
            "{:<20} {:>12.2} {:>10.2} {:>6} {:>10.3}",
            row.key,
            row.dollars,
            row.gpu_hours,
            row.jobs,
            row.energy_wh / 1000.0
        ));
    }
    lines.push(format!("{:<20} {:>12.2}   (jobs that ran since {})", "TOTAL", r.total_dollars, r.since));
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn costs_show_as_a_table_json_and_csv() {
        let row = |key: &str, dollars: f64, gpu_hours: f64, jobs: u64| api::CostRow {
            key: key.into(),
            dollars,
            gpu_hours,
            jobs,
            energy_wh: gpu_hours * 550.0,
            idle_gpu_hours: 0.0,
            mean_gpu_util: None,
        };
        let r = api::CostReport {
            by: "team".into(),
            since: "2026-10-26T08:00:00Z".into(),
            total_dollars: 1530.25,
            rows: vec![row("vision", 1200.0, 97.6, 12), row("nlp, research", 330.25, 120.1, 40)],
            steps: Vec::new(),
        };
        assert_snapshot("cost.txt", &render(&r, "table").expect("table"));
        assert_snapshot("cost.json", &render(&r, "json").expect("json"));
        assert_snapshot("cost.csv", &render(&r, "csv").expect("csv"));
    }
}
