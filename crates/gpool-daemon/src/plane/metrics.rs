//! The Prometheus exporter (`GET /metrics`).
//!
//! Per-GPU series use the names and labels of NVIDIA's DCGM exporter
//! (`DCGM_FI_DEV_GPU_UTIL{gpu,UUID,pci_bus_id,device,modelName,Hostname}`,
//! MIG instances with `GPU_I_PROFILE`/`GPU_I_ID`), so existing Grafana
//! dashboards work; a series of a device held by a job also carries
//! `job_id`, `job_name`, `user`, `team` and `queue`. gpool's own series start
//! with `gpool_`. The controller fills a [`Scrape`]; [`render`] writes the
//! text format outside the controller's thread.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpool_gpu::GpuSample;

mod vendors;

/// Labels of one series, in order.
pub type Labels = Vec<(&'static str, String)>;

/// One GPU's series.
#[derive(Clone, Debug, Default)]
pub struct GpuSeries {
    pub labels: Labels,
    pub sample: GpuSample,
}

/// One MIG instance's series.
#[derive(Clone, Debug, Default)]
pub struct MigSeries {
    pub labels: Labels,
    pub memory_used_mb: Option<u64>,
    pub memory_total_mb: Option<u64>,
}

/// A queue's load.
#[derive(Clone, Debug, Default)]
pub struct QueueStat {
    pub name: String,
    pub pending_jobs: u64,
    pub pending_gpus: f64,
    pub running_jobs: u64,
    pub used_gpus: f64,
}

/// A service's series: the proxy's counts, and its replicas.
#[derive(Clone, Debug)]
pub struct ServiceSeries {
    pub name: String,
    pub requests_total: u64,
    pub failed_total: u64,
    pub in_flight: f64,
    pub ready: u32,
    pub desired: u32,
    /// Latency to the response's head, in seconds.
    pub latency: Histogram,
}

/// A cumulative histogram.
#[derive(Clone, Debug)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    /// Queueing delays: from a second to a day.
    pub fn wait_seconds() -> Histogram {
        let bounds = vec![1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4.0 * 3600.0, 12.0 * 3600.0, 86_400.0];
        Histogram { counts: vec![0; bounds.len()], bounds, sum: 0.0, count: 0 }
    }

    /// Scheduling passes: from 100 µs to 2 s.
    pub fn pass_seconds() -> Histogram {
        let bounds = vec![0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0];
        Histogram { counts: vec![0; bounds.len()], bounds, sum: 0.0, count: 0 }
    }

    fn write(&self, out: &mut String, name: &str) {
        self.write_with(out, name, "");
    }

    /// With `label` (`key="value"`, escaped) on every line.
    fn write_with(&self, out: &mut String, name: &str, label: &str) {
        let sep = if label.is_empty() { "" } else { "," };
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"{}\"}} {c}", value(*b));
        }
        let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if label.is_empty() { String::new() } else { format!("{{{label}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", value(self.sum));
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }

    pub fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// Everything one scrape shows.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// NVIDIA GPUs, under DCGM exporter names.
    pub gpus: Vec<GpuSeries>,
    /// AMD GPUs, under AMD device-metrics-exporter names.
    pub amd: Vec<GpuSeries>,
    /// Cloud TPU chips, under the names of GKE's TPU device plugin.
    pub tpu: Vec<GpuSeries>,
    pub migs: Vec<MigSeries>,
    pub queues: Vec<QueueStat>,
    pub jobs_by_state: BTreeMap<String, u64>,
    pub wait: Histogram,
    /// Duration of scheduling passes.
    pub passes: Histogram,
    pub allocations_total: u64,
    pub preemptions_total: u64,
    /// Elastic jobs restarted at another size (`Plan::resizes`).
    pub resizes_total: u64,
    /// Allocated GPU-hours per (user, team), finished and running.
    pub gpu_hours: BTreeMap<(String, String), f64>,
    pub idle_gpu_seconds: BTreeMap<(String, String), f64>,
    /// Energy drawn by jobs' GPUs per (user, team), joules, since the daemon started.
    pub energy_joules: BTreeMap<(String, String), f64>,
    /// Running jobs' energy so far: (job, user, joules).
    pub job_energy: Vec<(u64, String, f64)>,
    /// Dollars per (team, user, queue, pool) since the daemon started.
    pub cost: BTreeMap<(String, String, String, String), f64>,
    /// Of those, dollars of allocated GPUs that were idle.
    pub idle_cost: BTreeMap<(String, String, String, String), f64>,
    /// Nodes: (name, state, 1 if its sampler works).
    pub nodes: Vec<(String, String, bool)>,
    /// Every GPU's health: (node, index, `ok`, `degraded` or `quarantined`).
    pub gpu_health: Vec<(String, u32, &'static str)>,
    /// Firing alerts per (rule, severity).
    pub alerts: BTreeMap<(String, String), u64>,
    /// Inference services.
    pub services: Vec<ServiceSeries>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(out: &mut String, l: &[(&str, String)]) {
    if l.is_empty() {
        return;
    }
    out.push('{');
    for (i, (k, v)) in l.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    out.push('}');
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A sample value as the exposition format spells it: integers plainly,
/// infinities as `+Inf` and `-Inf` (Rust would print `inf`), `NaN`.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A metric family with one value per series; series without a value are left out.
fn family<'a>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    items: impl Iterator<Item = (Option<f64>, &'a Labels)>,
) {
    let mut any = false;
    for (v, l) in items {
        let Some(v) = v else { continue };
        if !any {
            header(out, name, kind, help);
            any = true;
        }
        out.push_str(name);
        labels(out, l);
        let _ = writeln!(out, " {}", value(v));
    }
}

/// The throttle-reason bitmask of NVML (`clocks_event_reasons`) from names.
fn throttle_mask(reasons: &[String]) -> u64 {
    reasons
        .iter()
        .map(|r| match r.as_str() {
            "idle" => 0x1,
            "applications_clocks_setting" => 0x2,
            "sw_power_cap" => 0x4,
            "hw_slowdown" => 0x8,
            "sync_boost" => 0x10,
            "sw_thermal_slowdown" => 0x20,
            "hw_thermal_slowdown" => 0x40,
            "hw_power_brake_slowdown" => 0x80,
            "display_clock_setting" => 0x100,
            _ => 0,
        })
        .fold(0, |a, b| a | b)
}

/// Writes the Prometheus text exposition format (version 0.0.4).
pub fn render(s: &Scrape) -> String {
    let mut out = String::with_capacity(4096 + 400 * s.gpus.len());
    let num = |x: Option<u64>| x.map(|v| v as f64);
    // One family per metric; `gpu` takes a sample's value for every GPU.
    let mut gpu = |name: &str, kind: &str, help: &str, get: &dyn Fn(&GpuSample) -> Option<f64>| {
        family(&mut out, name, kind, help, s.gpus.iter().map(|x| (get(&x.sample), &x.labels)));
    };
    gpu("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", &|x| x.gpu_util_pct);
    gpu("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", &|x| x.mem_util_pct);
    gpu("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", &|x| num(x.memory_reserved_mb));
    gpu("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", &|x| x.temperature_c);
    gpu("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", &|x| x.memory_temperature_c);
    gpu("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", &|x| x.power_draw_w);
    gpu("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", &|x| x.power_limit_w);
    gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", &|x| {
        num(x.energy_mj)
    });
    gpu("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", &|x| x.sm_clock_mhz.map(f64::from));
    gpu("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", &|x| x.mem_clock_mhz.map(f64::from));
    gpu("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", &|x| x.fan_pct);
    gpu("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", &|x| num(x.xid_last));
    gpu("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.", &|x| {
        num(x.ecc_corrected_volatile)
    });
    gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", &|x| {
        num(x.ecc_uncorrected_volatile)
    });
    // What GPU fault handling reads (docs/health.md), under DCGM's names where DCGM has one.
    let flag = |b: Option<bool>| b.map(|b| f64::from(u8::from(b)));
    gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", &|x| num(x.pcie_replays));
    gpu("DCGM_FI_DEV_RETIRED_PENDING", "gauge", "1 if a page retirement waits for a GPU reset.", &|x| {
        flag(x.retired_pages_pending)
    });
    gpu("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1 if a row remap waits for a GPU reset.", &|x| {
        flag(x.remap_pending)
    });
    gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 if a row remap failed (no spare rows left).", &|x| {
        flag(x.remap_failed)
    });
    gpu(
        "gpool_gpu_nvlink_errors_total",
        "counter",
        "NVLink errors since the driver loaded, all links and kinds.",
        &|x| num(x.nvlink_errors),
    );
    gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Throttle reasons bitmask (NVML clocks_event_reasons).", &|x| {
        x.throttle_reasons.as_deref().map(|r| throttle_mask(r) as f64)
    });
    // Frame-buffer memory: whole GPUs, then MIG instances (with GPU_I_* labels).
    let free =
        |total: Option<u64>, used: Option<u64>, free: Option<u64>| free.or_else(|| Some(total?.saturating_sub(used?)));
    let used = s.gpus.iter().map(|x| (num(x.sample.memory_used_mb), &x.labels));
    let mig_used = s.migs.iter().map(|x| (num(x.memory_used_mb), &x.labels));
    family(&mut out, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", used.chain(mig_used));
    let gpu_free = s
        .gpus
        .iter()
        .map(|x| (num(free(x.sample.memory_total_mb, x.sample.memory_used_mb, x.sample.memory_free_mb)), &x.labels));
    let mig_free = s.migs.iter().map(|x| (num(free(x.memory_total_mb, x.memory_used_mb, None)), &x.labels));
    family(&mut out, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", gpu_free.chain(mig_free));
    // AMD GPUs and TPU chips under their vendors' exporter names.
    vendors::render(&mut out, &s.amd, &s.tpu);

    header(&mut out, "gpool_queue_pending_jobs", "gauge", "Jobs waiting in the queue.");
    for q in &s.queues {
        let _ = writeln!(out, "gpool_queue_pending_jobs{{queue=\"{}\"}} {}", escape(&q.name), q.pending_jobs);
    }
    header(
        &mut out,
        "gpool_queue_pending_gpus",
        "gauge",
        "GPUs requested by waiting jobs (MIG instances count their share).",
    );
    for q in &s.queues {
        let _ = writeln!(out, "gpool_queue_pending_gpus{{queue=\"{}\"}} {}", escape(&q.name), value(q.pending_gpus));
    }
    header(&mut out, "gpool_queue_running_jobs", "gauge", "Jobs running (or stopping) in the queue.");
    for q in &s.queues {
        let _ = writeln!(out, "gpool_queue_running_jobs{{queue=\"{}\"}} {}", escape(&q.name), q.running_jobs);
    }
    header(&mut out, "gpool_queue_allocated_gpus", "gauge", "GPUs the queue's running jobs hold.");
    for q in &s.queues {
        let _ = writeln!(out, "gpool_queue_allocated_gpus{{queue=\"{}\"}} {}", escape(&q.name), value(q.used_gpus));
    }
    header(&mut out, "gpool_jobs", "gauge", "Active jobs by state.");
    for (st, n) in &s.jobs_by_state {
        let _ = writeln!(out, "gpool_jobs{{state=\"{st}\"}} {n}");
    }
    header(&mut out, "gpool_job_wait_seconds", "histogram", "Time from submission (or requeue) to start.");
    s.wait.write(&mut out, "gpool_job_wait_seconds");
    header(&mut out, "gpool_schedule_pass_seconds", "histogram", "Duration of the scheduler's passes.");
    s.passes.write(&mut out, "gpool_schedule_pass_seconds");
    header(&mut out, "gpool_allocations_total", "counter", "Job runs started (devices allocated).");
    let _ = writeln!(out, "gpool_allocations_total {}", s.allocations_total);
    header(&mut out, "gpool_preemptions_total", "counter", "Jobs preempted.");
    let _ = writeln!(out, "gpool_preemptions_total {}", s.preemptions_total);
    header(&mut out, "gpool_resizes_total", "counter", "Elastic jobs restarted at another size (grown or shrunk).");
    let _ = writeln!(out, "gpool_resizes_total {}", s.resizes_total);
    // Seconds, Prometheus's base unit (divide by 3600 for GPU-hours).
    header(
        &mut out,
        "gpool_allocated_gpu_seconds_total",
        "counter",
        "GPU-seconds allocated to jobs (a share or MIG instance counts its fraction), per user and team.",
    );
    for ((u, t), h) in &s.gpu_hours {
        let _ = writeln!(
            out,
            "gpool_allocated_gpu_seconds_total{{user=\"{}\",team=\"{}\"}} {}",
            escape(u),
            escape(t),
            value(*h * 3600.0)
        );
    }
    header(
        &mut out,
        "gpool_energy_joules_total",
        "counter",
        "Energy jobs' GPUs drew, from their power samples (a share or MIG instance counts its part), per user and team.",
    );
    for ((u, t), j) in &s.energy_joules {
        let _ =
            writeln!(out, "gpool_energy_joules_total{{user=\"{}\",team=\"{}\"}} {}", escape(u), escape(t), value(*j));
    }
    header(&mut out, "gpool_job_energy_joules", "gauge", "Energy a running job's GPUs drew so far.");
    for (job, u, j) in &s.job_energy {
        let _ = writeln!(out, "gpool_job_energy_joules{{job_id=\"{job}\",user=\"{}\"}} {}", escape(u), value(*j));
    }
    header(
        &mut out,
        "gpool_idle_allocated_gpu_seconds_total",
        "counter",
        "Seconds allocated GPUs spent under 5% utilisation, per user and team.",
    );
    for ((u, t), v) in &s.idle_gpu_seconds {
        let _ = writeln!(
            out,
            "gpool_idle_allocated_gpu_seconds_total{{user=\"{}\",team=\"{}\"}} {}",
            escape(u),
            escape(t),
            value(*v)
        );
    }
    header(
        &mut out,
        "gpool_cost_dollars_total",
        "counter",
        "Dollars of GPU time allocated to jobs at their nodes' prices (pool price, or the GPU model's list price), per team, user, queue and pool.",
    );
    for ((t, u, q, p), d) in &s.cost {
        let _ = writeln!(
            out,
            "gpool_cost_dollars_total{{team=\"{}\",user=\"{}\",queue=\"{}\",pool=\"{}\"}} {}",
            escape(t),
            escape(u),
            escape(q),
            escape(p),
            value(*d)
        );
    }
    header(
        &mut out,
        "gpool_idle_allocated_cost_dollars_total",
        "counter",
        "Of gpool_cost_dollars_total, dollars of allocated GPUs under 5% utilisation: paid and wasted.",
    );
    for ((t, u, q, p), d) in &s.idle_cost {
        let _ = writeln!(
            out,
            "gpool_idle_allocated_cost_dollars_total{{team=\"{}\",user=\"{}\",queue=\"{}\",pool=\"{}\"}} {}",
            escape(t),
            escape(u),
            escape(q),
            escape(p),
            value(*d)
        );
    }
    header(&mut out, "gpool_node_up", "gauge", "1 if the node is up and its telemetry sampler works.");
    for (n, st, ok) in &s.nodes {
        let _ = writeln!(out, "gpool_node_up{{node=\"{}\",state=\"{st}\"}} {}", escape(n), u8::from(*ok && st == "up"));
    }
    header(
        &mut out,
        "gpool_gpu_health",
        "gauge",
        "1 for the GPU's health state now (ok, degraded: slowing for heat, quarantined: out of service for a fault), 0 for the others.",
    );
    for (n, gpu, now) in &s.gpu_health {
        for st in ["ok", "degraded", "quarantined"] {
            let v = u8::from(st == *now);
            let _ = writeln!(out, "gpool_gpu_health{{node=\"{}\",gpu=\"{gpu}\",state=\"{st}\"}} {v}", escape(n));
        }
    }
    header(&mut out, "gpool_alerts_firing", "gauge", "Alerts firing now, per rule.");
    for ((rule, sev), n) in &s.alerts {
        let _ = writeln!(out, "gpool_alerts_firing{{alertname=\"{}\",severity=\"{sev}\"}} {n}", escape(rule));
    }
    services(&mut out, &s.services);
    out
}

/// The services' families (only when there is a service).
fn services(out: &mut String, list: &[ServiceSeries]) {
    if list.is_empty() {
        return;
    }
    type Get = fn(&ServiceSeries) -> f64;
    let families: [(&str, &str, &str, Get); 5] = [
        ("gpool_service_requests_total", "counter", "Requests the proxy answered, per service.", |x| {
            x.requests_total as f64
        }),
        (
            "gpool_service_failed_requests_total",
            "counter",
            "Requests the proxy itself failed (502/503/504: no replica could take them), per service.",
            |x| x.failed_total as f64,
        ),
        (
            "gpool_service_in_flight_requests",
            "gauge",
            "Requests in flight through the proxy, held ones included.",
            |x| x.in_flight,
        ),
        ("gpool_service_ready_replicas", "gauge", "Replicas that are ready and take requests.", |x| f64::from(x.ready)),
        ("gpool_service_desired_replicas", "gauge", "Replicas the service's autoscaler wants.", |x| {
            f64::from(x.desired)
        }),
    ];
    for (name, kind, help, get) in families {
        header(out, name, kind, help);
        for x in list {
            let _ = writeln!(out, "{name}{{service=\"{}\"}} {}", escape(&x.name), value(get(x)));
        }
    }
    let name = "gpool_service_request_duration_seconds";
    header(out, name, "histogram", "Latency through the proxy to the response's head, per service.");
    for x in list {
        x.latency.write_with(out, name, &format!("service=\"{}\"", escape(&x.name)));
    }
}

#[cfg(test)]
mod tests;
