//! A node's telemetry as the sampler reads it, and its wire form.

use std::collections::BTreeMap;

use gpool_gpu::GpuSample;

use super::ReplicaKey;

/// What a node's sampler read at one moment.
#[derive(Clone, Debug, Default)]
pub struct NodeReport {
    pub node: String,
    pub at_ms: i64,
    pub gpus: Vec<GpuSample>,
    /// CPU cores each replica's processes used since the last report.
    pub replicas: Vec<(ReplicaKey, f64)>,
    /// Which job each GPU process belongs to (by pid).
    pub pid_jobs: BTreeMap<u32, u64>,
    /// Set when the backend could not be read this time: why.
    pub error: Option<String>,
    /// Why the node should take no new work now (its disk is under the
    /// reserve); empty when it is healthy.
    pub conditions: Vec<String>,
    /// A MIG layout order's outcome, with the GPUs as they are after it.
    pub mig: Option<gpool_api::agent::MigOutcome>,
    /// Replicas still pulling their image (`node/pull.rs`), and how far along.
    pub pulling: Vec<(ReplicaKey, String)>,
    /// Health checks of quarantined GPUs finished since the last report.
    pub health: Vec<gpool_api::agent::HealthVerdict>,
}

/// The newer reading, carrying the answers of the older one (a MIG
/// outcome, health verdicts); a report that is only answers keeps the
/// reading before it.
pub fn merge_telemetry(
    old: gpool_api::agent::TelemetryWire,
    mut next: gpool_api::agent::TelemetryWire,
) -> gpool_api::agent::TelemetryWire {
    if next.gpus.is_empty() && next.error.is_none() && !old.gpus.is_empty() {
        let mut kept = old;
        kept.health.append(&mut next.health);
        kept.mig = next.mig.or(kept.mig);
        return kept;
    }
    next.mig = next.mig.or(old.mig);
    let mut health = old.health;
    health.append(&mut next.health);
    next.health = health;
    next
}

/// A fault to inject, for the agent protocol.
pub fn fault_to_wire(f: &gpool_gpu::InjectedFault) -> gpool_api::agent::FaultWire {
    use gpool_api::agent::FaultWire;
    use gpool_gpu::InjectedFault;
    match f {
        InjectedFault::Xid(x) => FaultWire::Xid(*x),
        InjectedFault::EccUncorrected => FaultWire::EccUncorrected,
        InjectedFault::Gone => FaultWire::Gone,
    }
}

/// A fault to inject, from the agent protocol.
pub fn fault_from_wire(f: gpool_api::agent::FaultWire) -> gpool_gpu::InjectedFault {
    use gpool_api::agent::FaultWire;
    use gpool_gpu::InjectedFault;
    match f {
        FaultWire::Xid(x) => InjectedFault::Xid(x),
        FaultWire::EccUncorrected => InjectedFault::EccUncorrected,
        FaultWire::Gone => InjectedFault::Gone,
    }
}

/// A node's telemetry for the agent protocol.
pub fn telemetry_to_wire(r: &NodeReport) -> gpool_api::agent::TelemetryWire {
    use gpool_api::agent::{GpuSampleWire, MigSampleWire, ProcessWire, TelemetryWire};
    TelemetryWire {
        at_ms: r.at_ms,
        gpus: r
            .gpus
            .iter()
            .map(|s| GpuSampleWire {
                index: s.index,
                uuid: s.uuid.clone(),
                gpu_util_pct: s.gpu_util_pct,
                mem_util_pct: s.mem_util_pct,
                memory_used_mb: s.memory_used_mb,
                memory_total_mb: s.memory_total_mb,
                memory_free_mb: s.memory_free_mb,
                memory_reserved_mb: s.memory_reserved_mb,
                temperature_c: s.temperature_c,
                memory_temperature_c: s.memory_temperature_c,
                junction_temperature_c: s.junction_temperature_c,
                slowdown_temperature_c: s.slowdown_temperature_c,
                power_draw_w: s.power_draw_w,
                power_limit_w: s.power_limit_w,
                energy_mj: s.energy_mj,
                sm_clock_mhz: s.sm_clock_mhz,
                mem_clock_mhz: s.mem_clock_mhz,
                fan_pct: s.fan_pct,
                pstate: s.pstate.clone(),
                ecc_corrected_volatile: s.ecc_corrected_volatile,
                ecc_uncorrected_volatile: s.ecc_uncorrected_volatile,
                xid_last: s.xid_last,
                xid_count: s.xid_count,
                xids_recent: s.xids_recent.clone(),
                remap_pending: s.remap_pending,
                remap_failed: s.remap_failed,
                retired_pages: s.retired_pages,
                retired_pages_pending: s.retired_pages_pending,
                nvlink_errors: s.nvlink_errors,
                pcie_replays: s.pcie_replays,
                enc_util_pct: s.enc_util_pct,
                dec_util_pct: s.dec_util_pct,
                pcie_tx_bytes_per_s: s.pcie_tx_bytes_per_s,
                pcie_rx_bytes_per_s: s.pcie_rx_bytes_per_s,
                remapped_rows_correctable: s.remapped_rows_correctable,
                remapped_rows_uncorrectable: s.remapped_rows_uncorrectable,
                health_fault: s.health_fault.clone(),
                throttle_reasons: s.throttle_reasons.clone(),
                processes: s
                    .processes
                    .iter()
                    .map(|p| ProcessWire {
                        pid: p.pid,
                        name: p.name.clone(),
                        used_memory_mb: p.used_memory_mb,
                        sm_util_pct: p.sm_util_pct,
                        gi_id: p.gi_id,
                        ci_id: p.ci_id,
                    })
                    .collect(),
                mig: s
                    .mig
                    .iter()
                    .map(|m| MigSampleWire {
                        gi_id: m.gi_id,
                        ci_id: m.ci_id,
                        memory_used_mb: m.memory_used_mb,
                        memory_total_mb: m.memory_total_mb,
                    })
                    .collect(),
            })
            .collect(),
        replicas: r.replicas.iter().map(|(k, c)| ((*k).into(), *c)).collect(),
        pid_jobs: r.pid_jobs.clone(),
        error: r.error.clone(),
        conditions: r.conditions.clone(),
        mig: r.mig.clone(),
        pulling: r.pulling.iter().map(|(k, p)| ((*k).into(), p.clone())).collect(),
        health: r.health.clone(),
    }
}

/// A node's telemetry from the agent protocol.
pub fn telemetry_from_wire(node: &str, t: gpool_api::agent::TelemetryWire) -> NodeReport {
    use gpool_gpu::{GpuProcess, GpuSample, MigSample};
    NodeReport {
        node: node.to_string(),
        at_ms: t.at_ms,
        gpus: t
            .gpus
            .into_iter()
            .map(|s| GpuSample {
                index: s.index,
                uuid: s.uuid,
                gpu_util_pct: s.gpu_util_pct,
                mem_util_pct: s.mem_util_pct,
                memory_used_mb: s.memory_used_mb,
                memory_total_mb: s.memory_total_mb,
                memory_free_mb: s.memory_free_mb,
                memory_reserved_mb: s.memory_reserved_mb,
                temperature_c: s.temperature_c,
                memory_temperature_c: s.memory_temperature_c,
                junction_temperature_c: s.junction_temperature_c,
                slowdown_temperature_c: s.slowdown_temperature_c,
                power_draw_w: s.power_draw_w,
                power_limit_w: s.power_limit_w,
                energy_mj: s.energy_mj,
                sm_clock_mhz: s.sm_clock_mhz,
                mem_clock_mhz: s.mem_clock_mhz,
                fan_pct: s.fan_pct,
                pstate: s.pstate,
                ecc_corrected_volatile: s.ecc_corrected_volatile,
                ecc_uncorrected_volatile: s.ecc_uncorrected_volatile,
                xid_last: s.xid_last,
                xid_count: s.xid_count,
                xids_recent: s.xids_recent,
                remap_pending: s.remap_pending,
                remap_failed: s.remap_failed,
                retired_pages: s.retired_pages,
                retired_pages_pending: s.retired_pages_pending,
                nvlink_errors: s.nvlink_errors,
                pcie_replays: s.pcie_replays,
                enc_util_pct: s.enc_util_pct,
                dec_util_pct: s.dec_util_pct,
                pcie_tx_bytes_per_s: s.pcie_tx_bytes_per_s,
                pcie_rx_bytes_per_s: s.pcie_rx_bytes_per_s,
                remapped_rows_correctable: s.remapped_rows_correctable,
                remapped_rows_uncorrectable: s.remapped_rows_uncorrectable,
                health_fault: s.health_fault,
                throttle_reasons: s.throttle_reasons,
                processes: s
                    .processes
                    .into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        name: p.name,
                        used_memory_mb: p.used_memory_mb,
                        sm_util_pct: p.sm_util_pct,
                        gi_id: p.gi_id,
                        ci_id: p.ci_id,
                    })
                    .collect(),
                mig: s
                    .mig
                    .into_iter()
                    .map(|m| MigSample {
                        gi_id: m.gi_id,
                        ci_id: m.ci_id,
                        memory_used_mb: m.memory_used_mb,
                        memory_total_mb: m.memory_total_mb,
                    })
                    .collect(),
            })
            .collect(),
        replicas: t.replicas.into_iter().map(|(k, c)| (k.into(), c)).collect(),
        pid_jobs: t.pid_jobs,
        error: t.error,
        conditions: t.conditions,
        mig: t.mig,
        pulling: t.pulling.into_iter().map(|(k, p)| (k.into(), p)).collect(),
        health: t.health,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_report_keeps_the_answers_of_the_one_it_replaces() {
        use gpool_api::agent::{GpuSampleWire, HealthVerdict, MigOutcome, TelemetryWire};
        let verdict = |gpu| HealthVerdict { gpu, program: true, passed: true, output: String::new() };
        let reading = |at_ms| TelemetryWire {
            at_ms,
            gpus: vec![GpuSampleWire { index: 0, ..GpuSampleWire::default() }],
            ..TelemetryWire::default()
        };
        let outcome = MigOutcome { gpu: 0, error: None, gpus: None };
        let first = TelemetryWire { mig: Some(outcome.clone()), health: vec![verdict(1)], ..reading(1) };
        let merged = merge_telemetry(first, TelemetryWire { health: vec![verdict(2)], ..reading(2) });
        assert_eq!(
            (merged.at_ms, merged.mig, merged.health.len()),
            (2, Some(outcome), 2),
            "the newer reading, both answers"
        );
        // Answers alone do not replace a reading.
        let only = TelemetryWire { health: vec![verdict(3)], ..TelemetryWire::default() };
        let kept = merge_telemetry(reading(4), only);
        assert_eq!((kept.at_ms, kept.gpus.len(), kept.health.len()), (4, 1, 1));
    }

    #[test]
    fn telemetry_survives_the_wire_with_absent_values_absent() {
        use gpool_gpu::{GpuProcess, GpuSample, MigSample};
        let report = NodeReport {
            node: "n1".into(),
            at_ms: 42,
            gpus: vec![GpuSample {
                index: 3,
                uuid: "GPU-3".into(),
                gpu_util_pct: None,
                memory_used_mb: Some(11_125),
                power_draw_w: Some(433.78),
                throttle_reasons: Some(vec!["sw_power_cap".into()]),
                xid_count: Some(2),
                xids_recent: vec![13, 79],
                remap_failed: Some(true),
                health_fault: Some("GPU is lost".into()),
                processes: vec![GpuProcess {
                    pid: 7,
                    name: None,
                    used_memory_mb: Some(5),
                    sm_util_pct: Some(40),
                    gi_id: Some(2),
                    ci_id: None,
                }],
                mig: vec![MigSample { gi_id: 2, ci_id: Some(0), memory_used_mb: Some(13), memory_total_mb: None }],
                ..GpuSample::default()
            }],
            replicas: vec![(ReplicaKey { job: 1, attempt: 2, rank: 0 }, 1.5)],
            pid_jobs: [(7, 1)].into_iter().collect(),
            error: None,
            conditions: vec!["disk: 1 MiB free".into()],
            mig: None,
            pulling: vec![(ReplicaKey { job: 1, attempt: 2, rank: 0 }, "pulling m:1 for 3s".into())],
            health: vec![gpool_api::agent::HealthVerdict {
                gpu: 3,
                program: true,
                passed: false,
                output: "fail".into(),
            }],
        };
        let json = serde_json::to_string(&telemetry_to_wire(&report)).expect("json");
        assert!(!json.contains("gpu_util_pct"), "absent values are left out: {json}");
        let back = telemetry_from_wire("n1", serde_json::from_str(&json).expect("parse"));
        assert_eq!(back.gpus, report.gpus);
        assert_eq!(back.replicas, report.replicas);
        assert_eq!(back.pid_jobs, report.pid_jobs);
        assert_eq!(back.at_ms, 42);
        assert_eq!(back.conditions, report.conditions);
        assert_eq!(back.pulling, report.pulling);
        assert_eq!(back.health, report.health);
    }
}
