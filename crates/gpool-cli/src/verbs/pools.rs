//! `gpool pools`: elastic node pools, their nodes and health.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit, text};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let ps: Vec<api::PoolView> = a.connect.client()?.get("/pools")?;
    if ps.is_empty() && !a.output.is_data() {
        emit("no node pools: start the control plane with --pools FILE (see docs/cost.md)\n");
        return Ok(());
    }
    emit(&render(&ps, a.output)?);
    Ok(())
}

/// A line a pool: shape, price, limits, nodes by state, health.
pub(crate) fn render(ps: &[api::PoolView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(ps);
    }
    let mut lines = vec![format!(
        "{:<14} {:<9} {:<16} {:>9} {:>7} {:>5} {:>8} {:>6} {:>8} {:>10}  {}",
        "POOL", "KIND", "SHAPE", "$/NODE-H", "MIN-MAX", "NODES", "CREATING", "IDLE", "DELETING", "UNUSED $/H", "HEALTH"
    )];
    for p in ps {
        let health = match (&p.retry_at, p.available) {
            (None, _) if p.failures == 0 => "ok".to_string(),
            (Some(at), true) => format!("{} failure(s); retrying at {at}", p.failures),
            (Some(at), false) => format!("unavailable after {} failures until {at}", p.failures),
            (None, _) => format!("{} failure(s)", p.failures),
        };
        lines.push(format!(
            "{:<14} {:<9} {:<16} {:>9.2} {:>7} {:>5} {:>8} {:>6} {:>8} {:>10.2}  {}",
            p.name,
            p.kind,
            format!("{}x{}", p.gpus, p.gpu_model),
            p.price_per_node_hour,
            format!("{}-{}", p.min, p.max),
            p.nodes,
            p.creating,
            p.idle,
            p.deleting,
            p.unused_per_hour,
            health
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    fn pool(name: &str, kind: &str, failures: u32, available: bool, retry: Option<&str>) -> api::PoolView {
        api::PoolView {
            name: name.into(),
            kind: kind.into(),
            gpus: 8,
            gpu_model: "V100-16GB".into(),
            cpus: 64,
            memory_gb: 488,
            price_per_node_hour: if kind == "spot" { 2.752 } else { 24.48 },
            min: 0,
            max: 10,
            nodes: 3,
            creating: 1,
            deleting: 0,
            idle: 1,
            unused_per_hour: if kind == "spot" { 2.752 } else { 24.48 },
            node_names: vec![format!("{name}-1"), format!("{name}-2"), format!("{name}-3")],
            failures,
            available,
            retry_at: retry.map(str::to_string),
        }
    }

    #[test]
    fn pools_show_shape_price_limits_nodes_and_health() {
        let ps =
            vec![pool("spot", "spot", 2, false, Some("2026-11-25T08:00:00Z")), pool("od", "on-demand", 0, true, None)];
        assert_snapshot("pools.txt", &render(&ps, Output::Table).expect("table"));
        assert_snapshot("pools.json", &render(&ps, Output::Json).expect("json"));
    }
}
