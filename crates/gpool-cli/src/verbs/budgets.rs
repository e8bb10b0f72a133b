//! `gpool budgets`: monthly budgets per team or queue and this month's spend.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit, text, when};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<api::BudgetView> = a.connect.client()?.get("/budgets")?;
    if list.is_empty() && !a.output.is_data() {
        emit("no budgets: start the control plane with --budgets FILE (see docs/cost.md)\n");
        return Ok(());
    }
    emit(&render(&list, a.output)?);
    Ok(())
}

/// A line a budget: what it covers, its limit, what is spent, what happens at 100%.
pub(crate) fn render(list: &[api::BudgetView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(list);
    }
    let mut lines = vec![format!(
        "{:<22} {:>12} {:>12} {:>6}  {:<5} {:>4}  {}",
        "BUDGET", "$/MONTH", "SPENT", "USED", "MODE", "HELD", "RESETS"
    )];
    for b in list {
        lines.push(format!(
            "{:<22} {:>12.2} {:>12.2} {:>5.1}%  {:<5} {:>4}  {}",
            format!("{} {}", b.scope, b.name),
            b.dollars_per_month,
            b.spent_usd,
            b.percent,
            b.mode,
            b.held_jobs,
            when(&b.resets_at)
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn budgets_render_as_a_table() {
        let b = api::BudgetView {
            scope: "team".into(),
            name: "vision".into(),
            dollars_per_month: 5000.0,
            mode: "hard".into(),
            spent_usd: 5012.4,
            percent: 100.2,
            alert_at: vec![50, 80, 100],
            resets_at: "2026-12-01T00:00:00Z".into(),
            held_jobs: 3,
        };
        assert_snapshot("budgets.table", &render(std::slice::from_ref(&b), Output::Table).expect("table"));
    }
}
