//! `gpool health`: the GPUs out of service for faults, and `gpool nodes
//! inject | restore`: an admin tries a fault on a simulated GPU, or brings
//! a quarantined GPU back (docs/health.md).

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, text};

/// Arguments of `gpool health`.
#[derive(Args, Debug)]
pub(crate) struct HealthArgs {
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Arguments of `gpool nodes inject`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("fault").required(true).args(["xid", "ecc_uncorrected", "gone"]))]
pub(crate) struct InjectArgs {
    /// The node (its GPUs must be simulated).
    node: String,
    /// The GPU's index on the node.
    #[arg(long)]
    gpu: u32,
    /// An XID event: 79 (fallen off the bus), 48 (double-bit ECC), 13 (the application's own)….
    #[arg(long)]
    xid: Option<u64>,
    /// One more uncorrectable ECC error.
    #[arg(long)]
    ecc_uncorrected: bool,
    /// The GPU stops answering.
    #[arg(long)]
    gone: bool,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Arguments of `gpool nodes restore`.
#[derive(Args, Debug)]
pub(crate) struct RestoreArgs {
    /// The node.
    node: String,
    /// The quarantined GPU's index on the node.
    #[arg(long)]
    gpu: u32,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: HealthArgs) -> anyhow::Result<()> {
    let out: Vec<api::QuarantineView> = a.connect.client()?.get("/health")?;
    emit(&render(&out, a.output)?);
    Ok(())
}

pub(crate) fn inject(a: InjectArgs) -> anyhow::Result<()> {
    let body = match (a.xid, a.ecc_uncorrected, a.gone) {
        (Some(x), _, _) => serde_json::json!({"gpu": a.gpu, "xid": x}),
        (None, true, _) => serde_json::json!({"gpu": a.gpu, "ecc_uncorrected": true}),
        _ => serde_json::json!({"gpu": a.gpu, "gone": true}),
    };
    let v: api::NodeView = a.connect.client()?.post(&format!("/nodes/{}/inject", a.node), &body)?;
    emit(&super::nodes::render(std::slice::from_ref(&v), a.output)?);
    Ok(())
}

pub(crate) fn restore(a: RestoreArgs) -> anyhow::Result<()> {
    let body = serde_json::json!({"gpu": a.gpu});
    let v: api::NodeView = a.connect.client()?.post(&format!("/nodes/{}/restore", a.node), &body)?;
    emit(&super::nodes::render(std::slice::from_ref(&v), a.output)?);
    Ok(())
}

/// A line a quarantined GPU, then the total lost.
pub(crate) fn render(out: &[api::QuarantineView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(out);
    }
    if out.is_empty() {
        return Ok(text(vec!["every GPU is in service".to_string()]));
    }
    let mut lines = vec![format!("{:<20} {:>3}  {:<20}  {:>9}  FAULT / ACTION", "NODE", "GPU", "SINCE", "LOST GPU-h")];
    for q in out {
        let back = if q.operator_only { "; faulted twice in a day: gpool nodes restore only" } else { "" };
        lines.push(format!(
            "{:<20} {:>3}  {:<20}  {:>9.1}  {}; {}{back}",
            q.node, q.gpu, q.since, q.lost_gpu_hours, q.fault, q.action
        ));
        if let Some((at, said)) = &q.last_check {
            lines.push(format!("{:>26}last check {at}: {said}", ""));
        }
    }
    let lost: f64 = out.iter().map(|q| q.lost_gpu_hours).sum();
    lines.push(format!("{} GPU(s) out of service, {lost:.1} GPU-hours lost so far", out.len()));
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantined_gpus_read_as_a_table_with_their_losses() {
        let q = api::QuarantineView {
            node: "gpu-7".into(),
            gpu: 1,
            fault: "XID 79 (GPU has fallen off the bus)".into(),
            since: "2026-11-27T14:02:00Z".into(),
            action: "job 812 requeued".into(),
            operator_only: true,
            last_check: Some(("2026-11-27T14:03:00Z".into(), "built-in check: the GPU still shows a fault".into())),
            lost_gpu_hours: 2.5,
        };
        let t = render(std::slice::from_ref(&q), Output::Table).expect("render");
        assert!(t.contains("gpu-7") && t.contains("XID 79") && t.contains("job 812 requeued"), "{t}");
        assert!(t.contains("gpool nodes restore only") && t.contains("last check 2026-11-27T14:03:00Z"), "{t}");
        assert!(t.contains("1 GPU(s) out of service, 2.5 GPU-hours lost"), "{t}");
        assert!(render(&[], Output::Table).expect("render").contains("every GPU is in service"));
        let j = render(&[q], Output::Json).expect("json");
        assert!(j.contains("\"operator_only\": true"), "{j}");
    }
}
