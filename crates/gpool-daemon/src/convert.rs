//! Wire spec → domain spec, with errors that name the field.

use std::sync::Arc;
use std::time::Duration;

use gpool_api::quantity::{parse_bytes, parse_cpu_milli, parse_duration};
use gpool_api::spec::{DurationText, MatchExpression, Priority, Quantity};
use gpool_core::job::{LabelExpr, LabelOp, NodeAffinity};
use gpool_core::{GpuRequest, JobSpec, MigProfile, Time};

/// A field of a submitted spec that is wrong, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError { field: field.into(), message: message.into() }
}

/// Priority class names and their values.
pub const PRIORITY_CLASSES: [(&str, i32); 3] = [("low", -10), ("normal", 0), ("high", 10)];

/// Default grace period between the stop signal and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

fn duration(field: &str, d: &Option<DurationText>) -> Result<Option<Duration>, FieldError> {
    match d {
        None => Ok(None),
        Some(DurationText::Seconds(s)) if s.is_finite() && *s >= 0.0 && *s < 1e12 => {
            Ok(Some(Duration::from_secs_f64(*s)))
        }
        Some(t) => parse_duration(&t.text()).map(Some).map_err(|e| bad(field, e.to_string())),
    }
}

fn whole(field: &str, q: &Quantity) -> Result<u32, FieldError> {
    match q {
        Quantity::Number(n) if n.fract() == 0.0 && *n >= 1.0 && *n <= 64.0 => Ok(*n as u32),
        Quantity::Text(t) if t.trim().parse::<u32>().is_ok_and(|n| (1..=64).contains(&n)) => {
            Ok(t.trim().parse().unwrap_or(1))
        }
        _ => Err(bad(field, format!("must be a whole number of devices from 1 to 64, got {}", q.text()))),
    }
}

fn expr(field: &str, e: &MatchExpression) -> Result<LabelExpr, FieldError> {
    let op = match e.operator.as_str() {
        "In" => LabelOp::In(e.values.clone()),
        "NotIn" => LabelOp::NotIn(e.values.clone()),
        "Exists" => LabelOp::Exists,
        "DoesNotExist" => LabelOp::DoesNotExist,
        other => {
            return Err(bad(
                format!("{field}.operator"),
                format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
            ));
        }
    };
    if matches!(op, LabelOp::In(ref v) | LabelOp::NotIn(ref v) if v.is_empty()) {
        return Err(bad(format!("{field}.values"), "In and NotIn need at least one value"));
    }
    Ok(LabelExpr { key: e.key.clone(), op })
}

/// Checks a wire spec and builds the scheduling core's view of it.
pub fn to_core(spec: &gpool_api::JobSpec, user: &str, team: &str, submit_ms: i64) -> Result<JobSpec, FieldError> {
    if spec.command.is_empty() {
        return Err(bad("command", "must name a program (a list like [python, train.py] or a shell line)"));
    }
    if spec.replicas == 0 || spec.replicas > 1024 {
        return Err(bad("replicas", format!("must be from 1 to 1024, got {}", spec.replicas)));
    }
    let mut core = JobSpec::new(user, Time::from_millis(submit_ms));
    core.team = Arc::from(team);
    core.queue = Arc::from(spec.queue.as_deref().unwrap_or("default"));
    if core.queue.is_empty() {
        return Err(bad("queue", "must not be empty"));
    }
    core.replicas = spec.replicas;
    core.preemptible = spec.preemptible;
    core.priority = match &spec.priority {
        None => 0,
        Some(Priority::Value(v)) => *v,
        Some(Priority::Class(c)) => PRIORITY_CLASSES
            .iter()
            .find(|(n, _)| n == c)
            .map(|(_, v)| *v)
            .ok_or_else(|| bad("priority", format!("unknown class {c:?}: use low, normal, high or a number")))?,
    };
    core.grace = duration("gracePeriod", &spec.grace_period)?.unwrap_or(DEFAULT_GRACE);
    core.time_limit = duration("timeLimit", &spec.time_limit)?;
    core.estimate = duration("estimate", &spec.estimate)?;
    if core.time_limit.is_some_and(|d| d.is_zero()) {
        return Err(bad("timeLimit", "must be longer than zero"));
    }
    if let Some(sig) = &spec.stop_signal
        && crate::agent::parse_signal(sig).is_none()
    {
        return Err(bad("stopSignal", format!("{sig:?} is not a signal name like SIGTERM or SIGUSR1")));
    }
    let mut gpu: Option<GpuRequest> = None;
    let mut set_gpu = |field: &str, g: GpuRequest| -> Result<(), FieldError> {
        if gpu.replace(g).is_some() {
            return Err(bad(
                format!("resources.{field}"),
                "a job asks for one kind of GPU resource: nvidia.com/gpu, one nvidia.com/mig-<profile>, or gpool.io/gpu-memory",
            ));
        }
        Ok(())
    };
    for (key, q) in &spec.resources {
        let field = format!("resources.{key}");
        match key.as_str() {
            "nvidia.com/gpu" => set_gpu(key, GpuRequest::Gpus { count: whole(&field, q)? })?,
            "cpu" => core.replica.cpus_milli = parse_cpu_milli(&q.text()).map_err(|e| bad(&field, e.to_string()))?,
            "memory" => {
                core.replica.memory_mb =
                    parse_bytes(&q.text()).map_err(|e| bad(&field, e.to_string()))?.div_ceil(1024 * 1024)
            }
            "gpool.io/gpu-memory" => {
                let mb = parse_bytes(&q.text()).map_err(|e| bad(&field, e.to_string()))?.div_ceil(1024 * 1024);
                if mb == 0 {
                    return Err(bad(&field, "must be more than zero"));
                }
                set_gpu(key, GpuRequest::Memory { min_mb: mb, count: 1 })?
            }
            k if k.starts_with("nvidia.com/mig-") => {
                let profile: MigProfile =
                    k.parse().map_err(|e: gpool_core::resources::MigProfileError| bad(&field, e.to_string()))?;
                set_gpu(key, GpuRequest::Mig { profile, count: whole(&field, q)? })?
            }
            _ => {
                return Err(bad(
                    &field,
                    "unknown resource; use nvidia.com/gpu, nvidia.com/mig-<profile> (e.g. nvidia.com/mig-1g.10gb), gpool.io/gpu-memory, cpu or memory",
                ));
            }
        }
    }
    core.replica.gpu = gpu.unwrap_or_default();
    core.replica.gpu_model = spec.gpu_model.as_deref().filter(|m| !m.trim().is_empty()).map(Arc::from);
    if core.replica.gpu_model.is_some() && core.replica.gpu == GpuRequest::None {
        return Err(bad(
            "gpuModel",
            "names a GPU model but the job asks for no GPU (add resources: nvidia.com/gpu: 1)",
        ));
    }
    core.node_selector = spec.node_selector.clone();
    if let Some(a) = &spec.affinity {
        let mut aff = NodeAffinity::default();
        for (i, e) in a.required.iter().enumerate() {
            aff.required.push(expr(&format!("affinity.required[{i}]"), e)?);
        }
        for (i, w) in a.preferred.iter().enumerate() {
            aff.preferred.push((w.weight, expr(&format!("affinity.preferred[{i}]"), &w.expression)?));
        }
        core.affinity = aff;
    }
    core.labels = spec.labels.clone();
    core.anti_affinity = spec.anti_affinity.clone();
    core.dependencies = spec.depends_on.iter().map(|d| gpool_core::JobId(*d)).collect();
    for k in spec.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(bad(format!("env.{k}"), "is not a valid variable name"));
        }
    }
    Ok(core)
}

/// A node's telemetry for the agent protocol.
pub fn telemetry_to_wire(r: &crate::telemetry::NodeReport) -> gpool_api::agent::TelemetryWire {
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
                throttle_reasons: s.throttle_reasons.clone(),
                processes: s
                    .processes
                    .iter()
                    .map(|p| ProcessWire {
                        pid: p.pid,
                        name: p.name.clone(),
                        used_memory_mb: p.used_memory_mb,
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
    }
}

/// A node's telemetry from the agent protocol.
pub fn telemetry_from_wire(node: &str, t: gpool_api::agent::TelemetryWire) -> crate::telemetry::NodeReport {
    use gpool_gpu::{GpuProcess, GpuSample, MigSample};
    crate::telemetry::NodeReport {
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
                throttle_reasons: s.throttle_reasons,
                processes: s
                    .processes
                    .into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        name: p.name,
                        used_memory_mb: p.used_memory_mb,
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> gpool_api::JobSpec {
        serde_yaml::from_str(yaml).expect("yaml")
    }

    #[test]
    fn resources_map_to_requests() {
        let cases = [
            ("command: [x]\nresources: {nvidia.com/gpu: 4}\n", GpuRequest::Gpus { count: 4 }),
            (
                "command: [x]\nresources: {nvidia.com/mig-1g.10gb: 1}\n",
                GpuRequest::Mig { profile: "1g.10gb".parse().expect("p"), count: 1 },
            ),
            (
                "command: [x]\nresources: {gpool.io/gpu-memory: 20Gi}\n",
                GpuRequest::Memory { min_mb: 20 * 1024, count: 1 },
            ),
            ("command: [x]\nresources: {cpu: 2}\n", GpuRequest::None),
        ];
        for (y, want) in cases {
            assert_eq!(to_core(&spec(y), "u", "t", 0).expect(y).replica.gpu, want, "{y}");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("command: []\n", "command"),
            ("command: [x]\nresources: {nvidia.com/gpu: 0}\n", "resources.nvidia.com/gpu"),
            ("command: [x]\nresources: {nvidia.com/gpu: 1.5}\n", "resources.nvidia.com/gpu"),
            ("command: [x]\nresources: {nvidia.com/tpu: 1}\n", "resources.nvidia.com/tpu"),
            ("command: [x]\nresources: {nvidia.com/mig-9g.10gb: 1}\n", "resources.nvidia.com/mig-9g.10gb"),
            ("command: [x]\nresources: {memory: lots}\n", "resources.memory"),
            (
                "command: [x]\nresources: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 1}\n",
                "resources.nvidia.com/mig-1g.10gb",
            ),
            ("command: [x]\ntimeLimit: soon\n", "timeLimit"),
            ("command: [x]\npriority: urgent\n", "priority"),
            ("command: [x]\nreplicas: 0\n", "replicas"),
            ("command: [x]\nstopSignal: SIGFOO\n", "stopSignal"),
            ("command: [x]\ngpuModel: H100\n", "gpuModel"),
            ("command: [x]\naffinity: {required: [{key: a, operator: Near}]}\n", "affinity.required[0].operator"),
        ];
        for (y, field) in cases {
            let e = to_core(&spec(y), "u", "t", 0).expect_err(y);
            assert_eq!(e.field, field, "{y}: {e}");
        }
    }

    #[test]
    fn classes_and_durations() {
        let c =
            to_core(&spec("command: x\npriority: high\ngracePeriod: 2m\ntimeLimit: 1h30m\n"), "u", "t", 0).expect("ok");
        assert_eq!((c.priority, c.grace.as_secs(), c.time_limit.map(|d| d.as_secs())), (10, 120, Some(5400)));
    }

    #[test]
    fn telemetry_survives_the_wire_with_absent_values_absent() {
        use gpool_gpu::{GpuProcess, GpuSample, MigSample};
        let report = crate::telemetry::NodeReport {
            node: "n1".into(),
            at_ms: 42,
            gpus: vec![GpuSample {
                index: 3,
                uuid: "GPU-3".into(),
                gpu_util_pct: None,
                memory_used_mb: Some(11_125),
                power_draw_w: Some(433.78),
                throttle_reasons: Some(vec!["sw_power_cap".into()]),
                processes: vec![GpuProcess {
                    pid: 7,
                    name: None,
                    used_memory_mb: Some(5),
                    gi_id: Some(2),
                    ci_id: None,
                }],
                mig: vec![MigSample { gi_id: 2, ci_id: Some(0), memory_used_mb: Some(13), memory_total_mb: None }],
                ..GpuSample::default()
            }],
            replicas: vec![(crate::agent::ReplicaKey { job: 1, attempt: 2, rank: 0 }, 1.5)],
            pid_jobs: [(7, 1)].into_iter().collect(),
            error: None,
        };
        let json = serde_json::to_string(&telemetry_to_wire(&report)).expect("json");
        assert!(!json.contains("gpu_util_pct"), "absent values are left out: {json}");
        let back = telemetry_from_wire("n1", serde_json::from_str(&json).expect("parse"));
        assert_eq!(back.gpus, report.gpus);
        assert_eq!(back.replicas, report.replicas);
        assert_eq!(back.pid_jobs, report.pid_jobs);
        assert_eq!(back.at_ms, 42);
    }
}
