//! `gpool drain | resume`: nodes stop taking new work, or take it again.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, text};

/// Arguments of `gpool drain | resume`.
#[derive(Args, Debug)]
pub(crate) struct DrainArgs {
    /// Node names.
    #[arg(required = true)]
    nodes: Vec<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Arguments of `gpool nodes notice`.
#[derive(Args, Debug)]
pub(crate) struct NoticeArgs {
    /// The node its provider is taking back.
    node: String,
    /// When: 2m (AWS spot), 30s (GCP), 90s….
    #[arg(long = "in", value_name = "DURATION")]
    within: String,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// A spot notice: nothing new starts on the node, and its jobs checkpoint
/// within the notice and are requeued.
pub(crate) fn notice(a: NoticeArgs) -> anyhow::Result<()> {
    gpool_api::quantity::parse_duration(&a.within).map_err(|e| anyhow::anyhow!("--in {:?}: {e}", a.within))?;
    let v: api::NodeView =
        a.connect.client()?.post(&format!("/nodes/{}/notice", a.node), &serde_json::json!({"in": a.within}))?;
    emit(&render(std::slice::from_ref(&v), a.output)?);
    Ok(())
}

/// Drains nodes (running jobs finish, nothing new starts there) or resumes them.
pub(crate) fn run(a: DrainArgs, draining: bool) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let verb = if draining { "drain" } else { "resume" };
    let mut views = Vec::new();
    for n in &a.nodes {
        let v: api::NodeView = client.post_empty(&format!("/nodes/{n}/{verb}"))?;
        views.push(v);
    }
    emit(&render(&views, a.output)?);
    Ok(())
}

/// A line a node: its state now and how many jobs still run there.
pub(crate) fn render(nodes: &[api::NodeView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(nodes);
    }
    Ok(text(nodes.iter().map(|v| format!("node {}: {} ({} jobs running)", v.name, v.state, v.jobs.len())).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, node};

    #[test]
    fn drain_says_the_state_and_the_jobs_left() {
        let nodes = vec![node("node-a").state("draining").jobs(&[3, 9]).build(), node("node-b").build()];
        assert_snapshot("drain.txt", &render(&nodes, Output::Table).unwrap());
        assert_snapshot("drain.json", &render(&nodes, Output::Json).unwrap());
    }
}
