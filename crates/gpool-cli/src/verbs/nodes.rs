//! `gpool nodes`: nodes, their devices and the latest reading of each.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit, text};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let nodes: Vec<api::NodeView> = a.connect.client()?.get("/nodes")?;
    emit(&render(&nodes, a.output)?);
    Ok(())
}

/// A line a node, then a line a device and a line a MIG instance.
pub(crate) fn render(nodes: &[api::NodeView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(nodes);
    }
    let mut lines = Vec::new();
    for n in nodes {
        let agent = match (&n.agent, &n.addr) {
            (Some(a), Some(addr)) => format!("  agent {a} at {addr}"),
            (Some(a), None) => format!("  agent {a}"),
            _ => String::new(),
        };
        let sharing = if n.gpu_sharing == "off" { String::new() } else { format!("  GPU sharing {}", n.gpu_sharing) };
        let sharing = match &n.container_runtime {
            Some(rt) => format!("{sharing}  images by {rt}"),
            None => sharing,
        };
        lines.push(format!(
            "{}  {}  pool {}  source {}{agent}{sharing}  CPUs {}/{} free  memory {}/{} GiB free  jobs {:?}",
            n.name,
            n.state,
            n.pool,
            n.source,
            n.free_cpus,
            n.cpus,
            n.free_memory_mb / 1024,
            n.memory_mb / 1024,
            n.jobs
        ));
        for c in &n.conditions {
            lines.push(format!("  condition: {c}"));
        }
        for d in &n.degraded {
            lines.push(format!("  degraded: {d}"));
        }
        for d in &n.devices {
            let who = match (d.job, d.shares.as_slice()) {
                (Some(j), _) => format!("job {j}"),
                (None, []) if d.quarantine.is_some() => "out of service".to_string(),
                (None, []) => "free".to_string(),
                (None, shares) => {
                    let used: u32 = shares.iter().map(|s| u32::from(s.milli)).sum();
                    let jobs: Vec<String> =
                        shares.iter().map(|s| format!("{} ({:.2})", s.job, f64::from(s.milli) / 1000.0)).collect();
                    format!("shared {:.2}: jobs {}", f64::from(used) / 1000.0, jobs.join(", "))
                }
            };
            let now = match d.telemetry.as_ref() {
                Some(t) => format!(
                    "{:>4} {:>14} {:>5} {:>6}",
                    t.gpu_util.map_or_else(|| "-".into(), |u| format!("{u:.0}%")),
                    match (t.memory_used_mb, t.memory_total_mb) {
                        (Some(u), Some(m)) => format!("{}/{} GiB", u / 1024, m / 1024),
                        _ => "-".into(),
                    },
                    t.temperature_c.map_or_else(|| "-".into(), |c| format!("{c:.0}C")),
                    t.power_w.map_or_else(|| "-".into(), |p| format!("{p:.0}W")),
                ),
                None => format!("{:>4} {:>14} {:>5} {:>6}", "-", "-", "-", "-"),
            };
            // The device's kind, as its vendor's tools call it.
            let kind = match d.kind.as_str() {
                "amd-gpu" => "AMD",
                "tpu" => "TPU",
                _ => "GPU",
            };
            lines.push(format!(
                "  {kind} {:<2} {:<12} {:>6} MiB  {}  {}  {}",
                d.index,
                d.model,
                d.memory_mb,
                now,
                d.uuid,
                if d.mig.is_empty() { who } else { "MIG".into() }
            ));
            if let Some(why) = &d.degraded {
                lines.push(format!("    degraded: {why} (new gangs avoid it)"));
            }
            if let Some(q) = &d.quarantine {
                let how = if q.operator_only { "gpool nodes restore only" } else { "until a health check passes" };
                let action = if q.action.is_empty() { String::new() } else { format!(", {}", q.action) };
                lines.push(format!("    quarantined: {} at {}{action} (out of service {how})", q.fault, q.since));
            }
            for m in &d.mig {
                lines.push(format!(
                    "    MIG {:<10} {:>10}  {}  {}",
                    m.profile,
                    m.memory_used_mb.map_or_else(|| "-".into(), |u| format!("{u} MiB")),
                    m.uuid,
                    m.job.map_or_else(|| "free".to_string(), |j| format!("job {j}"))
                        + if m.shared_memory { " (memory shared with its GPU instance)" } else { "" }
                ));
            }
        }
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, gpu, mig, node, reading};

    #[test]
    fn nodes_show_devices_readings_and_mig_instances() {
        let nodes = vec![
            node("node-a")
                .device(
                    gpu(0, "H100-80GB")
                        .job(1)
                        .telemetry(reading().util(97.0).memory(70_000, 81_559).temp(64.0).power(612.4)),
                )
                .device(gpu(1, "H100-80GB").telemetry(reading().util(0.0).memory(0, 81_559).temp(31.0).power(71.0)))
                .device(gpu(2, "H100-80GB").telemetry(reading()).degraded("hw_thermal_slowdown at 91 °C"))
                .device(gpu(4, "H100-80GB").quarantined("XID 79 (GPU has fallen off the bus)", "job 812 requeued"))
                .device(gpu(3, "H100-80GB").mig(mig("3g.40gb", 1).job(2).used(12_000)).mig(mig("1g.10gb", 2)))
                .jobs(&[1, 2])
                .free(40.5, 262_144)
                .build(),
            node("gpu-7.cluster").state("draining").pool("spot").agent("s-1f2e", Some("10.0.0.7:7879")).build(),
            node("gpu-8.cluster").agent("s-aa01", None).device(gpu(0, "L4")).build(),
        ];
        assert_snapshot("nodes.txt", &render(&nodes, Output::Table).unwrap());
        assert_snapshot("nodes.json", &render(&nodes, Output::Json).unwrap());
    }
}
