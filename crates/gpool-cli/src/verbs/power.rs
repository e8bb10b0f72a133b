//! `gpool power` and `gpool power set`: power budgets, what the scheduler
//! counts against each and what the GPUs measured; set one live.

use anyhow::bail;
use gpool_api as api;

use super::ListArgs;
use crate::client::Connect;
use crate::output::{Output, emit, text};

/// `gpool power set [--node N | --label K=V | --pool P] WATTS`.
#[derive(clap::Args, Debug)]
pub(crate) struct SetArgs {
    /// The budget: 3000W, 2.5kW or 3000.
    #[arg(value_parser = crate::daemons::parse_watts)]
    watts: u32,
    #[arg(long, conflicts_with_all = ["label", "pool"])]
    node: Option<String>,
    /// Nodes with this label: KEY=VALUE (rack=r12).
    #[arg(long, conflicts_with = "pool")]
    label: Option<String>,
    #[arg(long)]
    pool: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<api::PowerView> = a.connect.client()?.get("/power")?;
    if !a.output.is_data() && list.is_empty() {
        emit("no power budgets: gpool up --power-budget 3000W, or gpool power set --node NODE 3000W (admins)\n");
        return Ok(());
    }
    emit(&render(&list, a.output)?);
    Ok(())
}

pub(crate) fn set(a: SetArgs) -> anyhow::Result<()> {
    let (scope, target) = match (&a.node, &a.label, &a.pool) {
        (Some(n), _, _) => ("node", n.clone()),
        (_, Some(l), _) => ("label", l.clone()),
        (_, _, Some(p)) => ("pool", p.clone()),
        _ => bail!("which budget: --node NODE, --label KEY=VALUE or --pool POOL"),
    };
    let req = api::PowerSet { scope: scope.into(), target, watts: a.watts };
    let list: Vec<api::PowerView> = a.connect.client()?.put("/power", &req)?;
    emit(&render(&list, a.output)?);
    Ok(())
}

pub(crate) fn render(list: &[api::PowerView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(list);
    }
    let mut lines = vec![format!(
        "{:<24} {:>9} {:>9} {:>9} {:>9}  {}",
        "BUDGET", "WATTS", "COUNTED", "MEASURED", "HELD BACK", "NODES"
    )];
    for p in list {
        lines.push(format!(
            "{:<24} {:>9} {:>9} {:>9} {:>9}  {}",
            p.scope,
            p.watts,
            p.counted_watts,
            p.measured_watts.map_or_else(|| "-".into(), |m| m.to_string()),
            p.held_back,
            p.nodes.join(",")
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemons::parse_watts;
    use crate::testkit::assert_snapshot;

    #[test]
    fn watts_are_read_as_people_write_them() {
        assert_eq!(parse_watts("3000W"), Ok(3000));
        assert_eq!(parse_watts("2.5kW"), Ok(2500));
        assert_eq!(parse_watts(" 1900 w"), Ok(1900));
        assert!(parse_watts("lots").is_err() && parse_watts("-5W").is_err() && parse_watts("0").is_err());
    }

    #[test]
    fn budgets_render_as_a_table() {
        let v = api::PowerView {
            scope: "node gpu-01".into(),
            watts: 3000,
            counted_watts: 2450,
            measured_watts: Some(2398),
            nodes: vec!["gpu-01".into()],
            held_back: 5,
        };
        assert_snapshot("power.table", &render(std::slice::from_ref(&v), Output::Table).expect("table"));
    }
}
