//! Wire spec → domain spec, with errors that name the field.

use std::sync::Arc;
use std::time::Duration;

use gpool_api::quantity::{parse_bytes, parse_cpu_milli, parse_duration};
use gpool_api::spec::{DurationText, MatchExpression, Priority, Quantity};
use gpool_core::job::{LabelExpr, LabelOp, NodeAffinity};
use gpool_core::{DeviceKind, GpuRequest, JobSpec, MigProfile, Time};

/// A field of a submitted spec that is wrong, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// A time of the spec (`beginAt`, `deadline`): RFC 3339 with its zone.
fn instant(field: &str, flag: &str, text: &Option<String>) -> Result<Option<Time>, FieldError> {
    let Some(text) = text else { return Ok(None) };
    let ms = gpool_api::time::parse_rfc3339(text).ok_or_else(|| {
        bad(
            field,
            format!(
                "{text:?} is not a time with its zone: write it as 2026-12-01T02:00:00+01:00 or \
                 2026-12-01T01:00:00Z (gpool submit {flag} also takes a local time or now+2h)"
            ),
        )
    })?;
    Ok(Some(Time::from_millis(ms)))
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

/// How long an interactive job outlives its last client, by default.
pub const DEFAULT_DETACH_GRACE: Duration = Duration::from_secs(60);
/// The bounds of an interactive job's `detachGrace`.
pub const DETACH_GRACE_BOUNDS: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(24 * 3600));
/// Ports one job may expose through the service proxy.
pub const MAX_EXPOSED_PORTS: usize = 8;

/// An interactive job's detach grace (`None`: the job is not interactive).
pub fn detach_grace(spec: &gpool_api::JobSpec) -> Result<Option<Duration>, FieldError> {
    let Some(i) = &spec.interactive else { return Ok(None) };
    let grace = duration("interactive.detachGrace", &i.detach_grace)?.unwrap_or(DEFAULT_DETACH_GRACE);
    let (low, high) = DETACH_GRACE_BOUNDS;
    if grace < low || grace > high {
        return Err(bad("interactive.detachGrace", format!("must be from 5s to 24h, got {grace:?}")));
    }
    Ok(Some(grace))
}

/// What an interactive job or one with exposed ports cannot also be.
fn check_interactive(spec: &gpool_api::JobSpec) -> Result<(), FieldError> {
    if detach_grace(spec)?.is_some() {
        let other = if spec.replicas != gpool_api::spec::Replicas::ONE {
            Some("several replicas")
        } else if spec.array.is_some() {
            Some("an array")
        } else if spec.service.is_some() {
            Some("a service")
        } else {
            None
        };
        if let Some(other) = other {
            return Err(bad(
                "interactive",
                format!(
                    "an interactive job has one terminal and one replica; it cannot be {other} (submit that with gpool submit)"
                ),
            ));
        }
    }
    if spec.expose.len() > MAX_EXPOSED_PORTS || spec.expose.contains(&0) {
        return Err(bad("expose", format!("at most {MAX_EXPOSED_PORTS} ports, each from 1 to 65535")));
    }
    Ok(())
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

/// A share of one GPU: `0.25`, `25%`, `250m` (thousandths, as the openb
/// trace writes them), or `auto` (`None`: the share its memory is worth).
fn parse_fraction(field: &str, q: &Quantity) -> Result<Option<u16>, FieldError> {
    let text = q.text();
    let t = text.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    let value = if let Some(p) = t.strip_suffix('%') {
        p.trim().parse::<f64>().map(|x| x / 100.0)
    } else if let Some(m) = t.strip_suffix('m') {
        m.trim().parse::<f64>().map(|x| x / 1000.0)
    } else {
        t.parse::<f64>()
    };
    let why = "a share of one GPU: a number above 0 and below 1 (0.25), a percentage (25%), thousandths (250m) or auto (with gpool.io/gpu-memory)";
    let Ok(x) = value else { return Err(bad(field, format!("{t:?} is not {why}"))) };
    if !x.is_finite() || x <= 0.0 {
        return Err(bad(field, format!("{t} is not {why}")));
    }
    if x >= 1.0 {
        return Err(bad(
            field,
            format!("{t} is a whole GPU or more: ask for whole GPUs with nvidia.com/gpu (--gpus), or give {why}"),
        ));
    }
    let milli = (x * 1000.0).round() as u16;
    if milli == 0 {
        return Err(bad(field, format!("{t} is below the smallest share, 0.001 of a GPU")));
    }
    Ok(Some(milli.min(999)))
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

/// The most replicas a service may ask for.
pub const MAX_SERVICE_REPLICAS: u32 = 256;

/// Checks a service's name and `service:` block and builds its scaler's settings.
/// The name is a DNS label (it is a path segment and a `Host` name of the proxy).
pub fn service_config(spec: &gpool_api::JobSpec) -> Result<gpool_core::service_scaler::ScalerConfig, FieldError> {
    use gpool_core::service_scaler::{ScalerConfig, Target};
    let Some(svc) = &spec.service else { return Err(bad("service", "missing: this spec is a job, not a service")) };
    let name = spec.name.as_deref().unwrap_or("");
    let label = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !label {
        return Err(bad(
            "name",
            format!("a service needs a name of 1 to 63 lowercase letters, digits and '-' (a DNS label), got {name:?}"),
        ));
    }
    if spec.replicas != gpool_api::spec::Replicas::ONE {
        return Err(bad(
            "replicas",
            "a service's replicas are set by service.replicas {min, max}; leave replicas at 1",
        ));
    }
    if !spec.depends_on.is_empty() {
        return Err(bad("dependsOn", "a service cannot depend on jobs"));
    }
    if !svc.readiness.starts_with('/') || svc.readiness.chars().any(|c| c.is_control() || c == ' ') {
        return Err(bad(
            "service.readiness",
            format!("must be an HTTP path starting with '/', got {:?}", svc.readiness),
        ));
    }
    let (min, max) = (svc.replicas.min, svc.replicas.max);
    if max == 0 || min > max || max > MAX_SERVICE_REPLICAS {
        return Err(bad(
            "service.replicas",
            format!("need 0 <= min <= max, 1 <= max <= {MAX_SERVICE_REPLICAS}; got min {min}, max {max}"),
        ));
    }
    let positive = |field: &str, v: f64| {
        if v.is_finite() && v > 0.0 && v <= 1e6 { Ok(v) } else { Err(bad(field, format!("must be above 0, got {v}"))) }
    };
    let target = match (svc.target.in_flight, svc.target.rps) {
        (Some(n), None) => Target::InFlight(positive("service.target.inFlight", n)?),
        (None, Some(r)) => Target::Rps(positive("service.target.rps", r)?),
        _ => return Err(bad("service.target", "give one of inFlight (requests at once per replica) or rps")),
    };
    let up = duration("service.scaleUpDelay", &svc.scale_up_delay)?.unwrap_or(Duration::ZERO);
    let down = duration("service.scaleDownDelay", &svc.scale_down_delay)?.unwrap_or(Duration::from_secs(60));
    let mut cfg = ScalerConfig::new(min, max, target, up, down);
    if let Some(w) = duration("service.window", &svc.window)? {
        if w < Duration::from_secs(2) || w > Duration::from_secs(3600) {
            return Err(bad("service.window", format!("must be from 2s to 1h, got {w:?}")));
        }
        cfg.stable_window = w;
        cfg.panic_window = w / 10;
    }
    Ok(cfg)
}

/// Checks a wire spec and builds the scheduling core's view of it.
pub fn to_core(spec: &gpool_api::JobSpec, user: &str, team: &str, submit_ms: i64) -> Result<JobSpec, FieldError> {
    if spec.command.is_empty() {
        return Err(bad("command", "must name a program (a list like [python, train.py] or a shell line)"));
    }
    let gpool_api::spec::Replicas { min, max } = spec.replicas;
    if min == 0 || max > 1024 || min > max {
        return Err(bad(
            "replicas",
            format!("must be from 1 to 1024 (min ≤ max for an elastic job), got {}", spec.replicas),
        ));
    }
    check_interactive(spec)?;
    if spec.replicas.is_elastic() && spec.tpu_topology.is_some() {
        return Err(bad("replicas", "a TPU slice has one replica per host and cannot be elastic; give a number"));
    }
    let mut core = JobSpec::new(user, Time::from_millis(submit_ms));
    core.team = Arc::from(team);
    core.queue = Arc::from(spec.queue.as_deref().unwrap_or("default"));
    if core.queue.is_empty() {
        return Err(bad("queue", "must not be empty"));
    }
    core.replicas = min;
    core.max_replicas = spec.replicas.is_elastic().then_some(max);
    core.preemptible = spec.preemptible;
    if let Some(s) = &spec.spot {
        core.spot = s.parse().map_err(|e: String| bad("spot", e))?;
    }
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
    core.min_runtime = duration("minRuntime", &spec.min_runtime)?;
    core.reservation = spec.reservation.as_deref().map(Arc::from);
    core.estimate = duration("estimate", &spec.estimate)?;
    core.begin = instant("beginAt", "--begin", &spec.begin_at)?;
    core.deadline = instant("deadline", "--deadline", &spec.deadline)?;
    if core.time_limit.is_some_and(|d| d.is_zero()) {
        return Err(bad("timeLimit", "must be longer than zero"));
    }
    if let Some(sig) = &spec.stop_signal
        && crate::protocol::parse_signal(sig).is_none()
    {
        return Err(bad("stopSignal", format!("{sig:?} is not a signal name like SIGTERM or SIGUSR1")));
    }
    let mut gpu: Option<GpuRequest> = None;
    // A share's fraction (`None` inside: "auto", compute follows memory) and its GPU memory.
    let mut fraction: Option<Option<u16>> = None;
    let mut gpu_memory_mb: Option<u64> = None;
    let mut set_gpu = |field: &str, g: GpuRequest| -> Result<(), FieldError> {
        if gpu.replace(g).is_some() {
            return Err(bad(
                format!("resources.{field}"),
                "a job asks for one kind of accelerator resource: nvidia.com/gpu, amd.com/gpu, google.com/tpu, gpool.io/gpu (any GPU), one nvidia.com/mig-<profile>, gpool.io/gpu-memory, or a share (gpool.io/gpu-fraction, with or without gpool.io/gpu-memory)",
            ));
        }
        Ok(())
    };
    for (key, q) in &spec.resources {
        let field = format!("resources.{key}");
        match key.as_str() {
            // Whole devices of one vendor, or any GPU (NVIDIA or AMD) for portable jobs.
            "nvidia.com/gpu" | "amd.com/gpu" | "google.com/tpu" | "gpool.io/gpu" => {
                core.replica.gpu_kind = match key.as_str() {
                    "nvidia.com/gpu" => Some(DeviceKind::NvidiaGpu),
                    "amd.com/gpu" => Some(DeviceKind::AmdGpu),
                    "google.com/tpu" => Some(DeviceKind::Tpu),
                    _ => None,
                };
                set_gpu(key, GpuRequest::Gpus { count: whole(&field, q)? })?
            }
            "cpu" => {
                core.replica.cpus_milli = parse_cpu_milli(&q.text()).map_err(|e| bad(&field, e.to_string()))?;
                if core.replica.cpus_milli == 0 {
                    return Err(bad(&field, "0 CPUs: a job needs some CPU; ask for at least 1m, or leave cpu out"));
                }
            }
            "memory" => {
                core.replica.memory_mb =
                    parse_bytes(&q.text()).map_err(|e| bad(&field, e.to_string()))?.div_ceil(1024 * 1024)
            }
            "gpool.io/gpu-memory" => {
                let mb = parse_bytes(&q.text()).map_err(|e| bad(&field, e.to_string()))?.div_ceil(1024 * 1024);
                if mb == 0 {
                    return Err(bad(&field, "must be more than zero"));
                }
                gpu_memory_mb = Some(mb);
            }
            "gpool.io/gpu-fraction" => fraction = Some(parse_fraction(&field, q)?),
            k if k.starts_with("nvidia.com/mig-") => {
                let profile: MigProfile =
                    k.parse().map_err(|e: gpool_core::resources::MigProfileError| bad(&field, e.to_string()))?;
                core.replica.gpu_kind = Some(DeviceKind::NvidiaGpu);
                set_gpu(key, GpuRequest::Mig { profile, count: whole(&field, q)? })?
            }
            _ => {
                return Err(bad(
                    &field,
                    "unknown resource; use nvidia.com/gpu, amd.com/gpu, google.com/tpu, gpool.io/gpu (any GPU), nvidia.com/mig-<profile> (e.g. nvidia.com/mig-1g.10gb), gpool.io/gpu-fraction, gpool.io/gpu-memory, cpu or memory",
                ));
            }
        }
    }
    match (fraction, gpu_memory_mb) {
        // Memory alone: a device of its own, the smallest with that much.
        (None, Some(mb)) => set_gpu("gpool.io/gpu-memory", GpuRequest::Memory { min_mb: mb, count: 1 })?,
        (Some(None), None) => {
            return Err(bad(
                "resources.gpool.io/gpu-fraction",
                "auto takes the compute share from gpool.io/gpu-memory, which is missing: add it (e.g. gpool.io/gpu-memory: 10Gi) or give a fraction such as 0.25",
            ));
        }
        (Some(milli), memory_mb) => set_gpu("gpool.io/gpu-fraction", GpuRequest::Share { milli, memory_mb })?,
        (None, None) => {}
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
    if let Some(t) = spec.tpu_topology.as_deref() {
        tpu_slice(&mut core, t)?;
    }
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
    core.after_any = spec.after_any.iter().map(|d| gpool_core::JobId(*d)).collect();
    core.after_not_ok = spec.after_not_ok.iter().map(|d| gpool_core::JobId(*d)).collect();
    for k in spec.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(bad(format!("env.{k}"), "is not a valid variable name"));
        }
    }
    Ok(core)
}

/// Label of the nodes of one multi-host TPU slice (the same value on each host).
pub const TPU_SLICE_LABEL: &str = "gpool.io/tpu-slice";
/// Label of a slice's hosts that names its topology (`2x2x2`).
pub const TPU_TOPOLOGY_LABEL: &str = "gpool.io/tpu-topology";

/// `tpuTopology: 2x2x2`: a gang of one replica per host, all on hosts of one
/// slice of that topology, whose chips add up to the topology's.
fn tpu_slice(core: &mut JobSpec, topology: &str) -> Result<(), FieldError> {
    let dims: Option<Vec<u32>> = topology.split('x').map(|d| d.trim().parse::<u32>().ok().filter(|d| *d > 0)).collect();
    // A product past u32 is no topology either (and must not overflow).
    let chips =
        dims.filter(|d| (2..=3).contains(&d.len())).and_then(|d| d.iter().try_fold(1u32, |a, b| a.checked_mul(*b)));
    let chips: u32 = match chips {
        Some(c) => c,
        None => return Err(bad("tpuTopology", format!("{topology:?} is not a TPU topology like 2x2x1, 2x2x2 or 4x4"))),
    };
    let per_host = core.replica.gpu.device_count();
    if core.replica.gpu_kind != Some(DeviceKind::Tpu) || per_host == 0 {
        return Err(bad(
            "tpuTopology",
            "a TPU slice asks for each host's chips: add resources: {google.com/tpu: 4} (4 on v4 and v5p hosts)",
        ));
    }
    if per_host * core.replicas != chips {
        return Err(bad(
            "tpuTopology",
            format!(
                "{topology} is {chips} chips, but {} replicas × {per_host} chips is {}: set replicas to {} (one per host)",
                core.replicas,
                per_host * core.replicas,
                chips.div_ceil(per_host)
            ),
        ));
    }
    core.node_selector.insert(TPU_TOPOLOGY_LABEL.into(), topology.trim().to_string());
    core.same_label = Some(Arc::from(TPU_SLICE_LABEL));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpool_core::SpotPolicy;

    fn spec(yaml: &str) -> gpool_api::JobSpec {
        gpool_api::yaml::from_str(yaml).expect("yaml")
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
            (
                "command: [x]\nresources: {gpool.io/gpu-fraction: 0.25}\n",
                GpuRequest::Share { milli: Some(250), memory_mb: None },
            ),
            (
                "command: [x]\nresources: {gpool.io/gpu-fraction: 460m, gpool.io/gpu-memory: 10Gi}\n",
                GpuRequest::Share { milli: Some(460), memory_mb: Some(10 * 1024) },
            ),
            (
                "command: [x]\nresources: {gpool.io/gpu-fraction: 30%}\n",
                GpuRequest::Share { milli: Some(300), memory_mb: None },
            ),
            (
                "command: [x]\nresources: {gpool.io/gpu-fraction: auto, gpool.io/gpu-memory: 8Gi}\n",
                GpuRequest::Share { milli: None, memory_mb: Some(8 * 1024) },
            ),
        ];
        for (y, want) in cases {
            assert_eq!(to_core(&spec(y), "u", "t", 0).expect(y).replica.gpu, want, "{y}");
        }
    }

    #[test]
    fn vendor_resources_and_tpu_slices() {
        let kinds = [
            ("nvidia.com/gpu", Some(DeviceKind::NvidiaGpu)),
            ("amd.com/gpu", Some(DeviceKind::AmdGpu)),
            ("google.com/tpu", Some(DeviceKind::Tpu)),
            ("gpool.io/gpu", None),
            ("nvidia.com/mig-1g.10gb", Some(DeviceKind::NvidiaGpu)),
        ];
        for (r, want) in kinds {
            let core = to_core(&spec(&format!("command: [x]\nresources: {{{r}: 2}}\n")), "u", "t", 0).expect(r);
            assert_eq!(core.replica.gpu_kind, want, "{r}");
        }
        let slice = "command: [x]\nresources: {google.com/tpu: 4}\nreplicas: 2\ntpuTopology: 2x2x2\n";
        let core = to_core(&spec(slice), "u", "t", 0).expect("slice");
        assert_eq!(core.node_selector.get(TPU_TOPOLOGY_LABEL).map(String::as_str), Some("2x2x2"));
        assert_eq!(core.same_label.as_deref(), Some(TPU_SLICE_LABEL));
        let e = to_core(&spec(&slice.replace("replicas: 2", "replicas: 3")), "u", "t", 0).expect_err("12 chips");
        assert!(e.to_string().contains("set replicas to 2"), "{e}");
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
            ("command: [x]\nresources: {gpool.io/gpu-fraction: 1}\n", "resources.gpool.io/gpu-fraction"),
            ("command: [x]\nresources: {gpool.io/gpu-fraction: 0}\n", "resources.gpool.io/gpu-fraction"),
            ("command: [x]\nresources: {gpool.io/gpu-fraction: half}\n", "resources.gpool.io/gpu-fraction"),
            ("command: [x]\nresources: {gpool.io/gpu-fraction: auto}\n", "resources.gpool.io/gpu-fraction"),
            (
                "command: [x]\nresources: {gpool.io/gpu-fraction: 0.5, nvidia.com/gpu: 1}\n",
                "resources.gpool.io/gpu-fraction",
            ),
            ("command: [x]\ntimeLimit: soon\n", "timeLimit"),
            ("command: [x]\nresources: {google.com/tpu: 4}\nreplicas: 2\ntpuTopology: 2x2\n", "tpuTopology"),
            ("command: [x]\nresources: {google.com/tpu: 4}\ntpuTopology: big\n", "tpuTopology"),
            ("command: [x]\nresources: {nvidia.com/gpu: 4}\nreplicas: 2\ntpuTopology: 2x2x2\n", "tpuTopology"),
            ("command: [x]\npriority: urgent\n", "priority"),
            ("command: [x]\nreplicas: 0\n", "replicas"),
            ("command: [x]\nstopSignal: SIGFOO\n", "stopSignal"),
            ("command: [x]\ngpuModel: H100\n", "gpuModel"),
            ("command: [x]\naffinity: {required: [{key: a, operator: Near}]}\n", "affinity.required[0].operator"),
            ("command: [x]\nspot: sometimes\n", "spot"),
        ];
        for (y, field) in cases {
            let e = to_core(&spec(y), "u", "t", 0).expect_err(y);
            assert_eq!(e.field, field, "{y}: {e}");
        }
    }

    #[test]
    fn service_blocks_are_checked_field_by_field() {
        let ok = spec(
            "name: llm\ncommand: [x]\nservice: {replicas: {min: 0, max: 6}, target: {rps: 20}, scaleDownDelay: 2m}\n",
        );
        let c = service_config(&ok).expect("valid");
        assert_eq!((c.min, c.max, c.scale_down_delay), (0, 6, Duration::from_secs(120)));
        for (yaml, field) in [
            ("name: LLM\ncommand: [x]\nservice: {}\n", "name"),
            ("command: [x]\nservice: {}\n", "name"),
            ("name: a\ncommand: [x]\nreplicas: 2\nservice: {}\n", "replicas"),
            ("name: a\ncommand: [x]\nservice: {readiness: health}\n", "service.readiness"),
            ("name: a\ncommand: [x]\nservice: {replicas: {min: 3, max: 2}}\n", "service.replicas"),
            ("name: a\ncommand: [x]\nservice: {target: {inFlight: 2, rps: 3}}\n", "service.target"),
            ("name: a\ncommand: [x]\nservice: {target: {inFlight: 0}}\n", "service.target.inFlight"),
            ("name: a\ncommand: [x]\nservice: {scaleUpDelay: soon}\n", "service.scaleUpDelay"),
        ] {
            assert_eq!(service_config(&spec(yaml)).expect_err(yaml).field, field, "{yaml}");
        }
    }

    #[test]
    fn spot_policies_read() {
        for (y, want) in
            [("never", SpotPolicy::Never), ("preferred", SpotPolicy::Preferred), ("allowed", SpotPolicy::Allowed)]
        {
            let c = to_core(&spec(&format!("command: x\nspot: {y}\n")), "u", "t", 0).expect("ok");
            assert_eq!(c.spot, want);
        }
        assert_eq!(to_core(&spec("command: x\n"), "u", "t", 0).expect("ok").spot, SpotPolicy::Allowed);
    }

    #[test]
    fn classes_and_durations() {
        let c =
            to_core(&spec("command: x\npriority: high\ngracePeriod: 2m\ntimeLimit: 1h30m\n"), "u", "t", 0).expect("ok");
        assert_eq!((c.priority, c.grace.as_secs(), c.time_limit.map(|d| d.as_secs())), (10, 120, Some(5400)));
    }
}
