//! The Prometheus exporter (`GET /metrics`).
//!
//! Per-GPU series use the names and labels of NVIDIA's DCGM exporter
//! (`DCGM_FI_DEV_GPU_UTIL{gpu,UUID,pci_bus_id,device,modelName,Hostname}`,
//! MIG instances with `GPU_I_PROFILE`/`GPU_I_ID`), so existing Grafana
//! dashboards work; a series of a device held by a job also carries
//! `job_id`, `job_name`, `user`, `team` and `queue`. gpool's own series start
//! with `gpool_`. The controller fills a [`Scrape`]; [`render`] hands its
//! families to the `prometheus` crate's encoder (`metrics/exposition.rs`)
//! outside the controller's thread.

use std::collections::BTreeMap;

use gpool_gpu::GpuSample;

mod exposition;
mod vendors;

use exposition::Families;
use exposition::Kind::{self, Counter, Gauge};

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

/// A series' labels as pairs of strings.
fn pairs(l: &Labels) -> impl Iterator<Item = (&str, &str)> {
    l.iter().map(|(k, v)| (*k, v.as_str()))
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
    let mut f = Families::default();
    gpus(&mut f, &s.gpus, &s.migs);
    // AMD GPUs and TPU chips under their vendors' exporter names.
    vendors::render(&mut f, &s.amd, &s.tpu);
    scheduling(&mut f, s);
    accounting(&mut f, s);
    let nodes = s.nodes.iter().map(|(n, st, ok)| {
        (Some(f64::from(u8::from(*ok && st == "up"))), [("node", n.as_str()), ("state", st.as_str())])
    });
    f.add("gpool_node_up", Gauge, "1 if the node is up and its telemetry sampler works.", nodes);
    let health = s.gpu_health.iter().flat_map(|(n, gpu, now)| {
        ["ok", "degraded", "quarantined"].map(|st| {
            (
                Some(f64::from(u8::from(st == *now))),
                [("node", n.clone()), ("gpu", gpu.to_string()), ("state", st.to_string())],
            )
        })
    });
    f.add(
        "gpool_gpu_health",
        Gauge,
        "1 for the GPU's health state now (ok, degraded: slowing for heat, quarantined: out of service for a fault), 0 for the others.",
        health,
    );
    let alerts = s
        .alerts
        .iter()
        .map(|((rule, sev), n)| (Some(*n as f64), [("alertname", rule.as_str()), ("severity", sev.as_str())]));
    f.add("gpool_alerts_firing", Gauge, "Alerts firing now, per rule.", alerts);
    services(&mut f, &s.services);
    f.encode()
}

/// NVIDIA GPUs, under DCGM exporter names; MIG instances' memory with their `GPU_I_*` labels.
fn gpus(f: &mut Families, gpus: &[GpuSeries], migs: &[MigSeries]) {
    let num = |x: Option<u64>| x.map(|v| v as f64);
    // One family per metric; `gpu` takes a sample's value for every GPU.
    let mut gpu = |name: &str, kind: Kind, help: &str, get: &dyn Fn(&GpuSample) -> Option<f64>| {
        f.add(name, kind, help, gpus.iter().map(|x| (get(&x.sample), pairs(&x.labels))));
    };
    gpu("DCGM_FI_DEV_GPU_UTIL", Gauge, "GPU utilization (in %).", &|x| x.gpu_util_pct);
    gpu("DCGM_FI_DEV_MEM_COPY_UTIL", Gauge, "Memory utilization (in %).", &|x| x.mem_util_pct);
    gpu("DCGM_FI_DEV_ENC_UTIL", Gauge, "Encoder utilization (in %).", &|x| x.enc_util_pct);
    gpu("DCGM_FI_DEV_DEC_UTIL", Gauge, "Decoder utilization (in %).", &|x| x.dec_util_pct);
    gpu("DCGM_FI_DEV_FB_RESERVED", Gauge, "Framebuffer memory reserved (in MiB).", &|x| num(x.memory_reserved_mb));
    gpu("DCGM_FI_DEV_GPU_TEMP", Gauge, "GPU temperature (in C).", &|x| x.temperature_c);
    gpu("DCGM_FI_DEV_MEMORY_TEMP", Gauge, "Memory temperature (in C).", &|x| x.memory_temperature_c);
    gpu("DCGM_FI_DEV_POWER_USAGE", Gauge, "Power draw (in W).", &|x| x.power_draw_w);
    gpu("DCGM_FI_DEV_POWER_MGMT_LIMIT", Gauge, "Power management limit (in W).", &|x| x.power_limit_w);
    gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Counter, "Total energy consumption since boot (in mJ).", &|x| {
        num(x.energy_mj)
    });
    gpu("DCGM_FI_DEV_SM_CLOCK", Gauge, "SM clock frequency (in MHz).", &|x| x.sm_clock_mhz.map(f64::from));
    gpu("DCGM_FI_DEV_MEM_CLOCK", Gauge, "Memory clock frequency (in MHz).", &|x| x.mem_clock_mhz.map(f64::from));
    gpu("DCGM_FI_DEV_FAN_SPEED", Gauge, "Fan speed (in %).", &|x| x.fan_pct);
    gpu("DCGM_FI_DEV_XID_ERRORS", Gauge, "Value of the last XID error encountered.", &|x| num(x.xid_last));
    gpu("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Counter, "Total number of single-bit volatile ECC errors.", &|x| {
        num(x.ecc_corrected_volatile)
    });
    gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Counter, "Total number of double-bit volatile ECC errors.", &|x| {
        num(x.ecc_uncorrected_volatile)
    });
    // PCIe throughput as DCGM's profiling fields name it: a rate, in bytes per second.
    gpu(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Gauge,
        "The rate of data transmitted over the PCIe bus, including protocol headers and data payloads (in B/s).",
        &|x| x.pcie_tx_bytes_per_s,
    );
    gpu(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Gauge,
        "The rate of data received over the PCIe bus, including protocol headers and data payloads (in B/s).",
        &|x| x.pcie_rx_bytes_per_s,
    );
    // What GPU fault handling reads (docs/health.md), under DCGM's names where DCGM has one.
    let flag = |b: Option<bool>| b.map(|b| f64::from(u8::from(b)));
    gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Counter, "Total number of PCIe retries.", &|x| num(x.pcie_replays));
    gpu("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Counter, "Number of remapped rows for correctable errors.", &|x| {
        num(x.remapped_rows_correctable)
    });
    gpu(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Counter,
        "Number of remapped rows for uncorrectable errors.",
        &|x| num(x.remapped_rows_uncorrectable),
    );
    gpu("DCGM_FI_DEV_RETIRED_PENDING", Gauge, "1 if a page retirement waits for a GPU reset.", &|x| {
        flag(x.retired_pages_pending)
    });
    gpu("DCGM_FI_DEV_ROW_REMAP_PENDING", Gauge, "1 if a row remap waits for a GPU reset.", &|x| flag(x.remap_pending));
    gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE", Gauge, "1 if a row remap failed (no spare rows left).", &|x| {
        flag(x.remap_failed)
    });
    gpu(
        "gpool_gpu_nvlink_errors_total",
        Counter,
        "NVLink errors since the driver loaded, all links and kinds.",
        &|x| num(x.nvlink_errors),
    );
    gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Gauge, "Throttle reasons bitmask (NVML clocks_event_reasons).", &|x| {
        x.throttle_reasons.as_deref().map(|r| throttle_mask(r) as f64)
    });
    // Frame-buffer memory: whole GPUs, then MIG instances (with GPU_I_* labels).
    let free =
        |total: Option<u64>, used: Option<u64>, free: Option<u64>| free.or_else(|| Some(total?.saturating_sub(used?)));
    let used = gpus.iter().map(|x| (num(x.sample.memory_used_mb), pairs(&x.labels)));
    let mig_used = migs.iter().map(|x| (num(x.memory_used_mb), pairs(&x.labels)));
    f.add("DCGM_FI_DEV_FB_USED", Gauge, "Framebuffer memory used (in MiB).", used.chain(mig_used));
    let gpu_free = gpus.iter().map(|x| {
        let s = &x.sample;
        (num(free(s.memory_total_mb, s.memory_used_mb, s.memory_free_mb)), pairs(&x.labels))
    });
    let mig_free = migs.iter().map(|x| (num(free(x.memory_total_mb, x.memory_used_mb, None)), pairs(&x.labels)));
    f.add("DCGM_FI_DEV_FB_FREE", Gauge, "Framebuffer memory free (in MiB).", gpu_free.chain(mig_free));
}

/// Queues, jobs and the scheduler's work.
fn scheduling(f: &mut Families, s: &Scrape) {
    let per_queue =
        |get: fn(&QueueStat) -> f64| s.queues.iter().map(move |q| (Some(get(q)), [("queue", q.name.as_str())]));
    f.add("gpool_queue_pending_jobs", Gauge, "Jobs waiting in the queue.", per_queue(|q| q.pending_jobs as f64));
    f.add(
        "gpool_queue_pending_gpus",
        Gauge,
        "GPUs requested by waiting jobs (MIG instances count their share).",
        per_queue(|q| q.pending_gpus),
    );
    f.add(
        "gpool_queue_running_jobs",
        Gauge,
        "Jobs running (or stopping) in the queue.",
        per_queue(|q| q.running_jobs as f64),
    );
    f.add("gpool_queue_allocated_gpus", Gauge, "GPUs the queue's running jobs hold.", per_queue(|q| q.used_gpus));
    let states = s.jobs_by_state.iter().map(|(st, n)| (Some(*n as f64), [("state", st.as_str())]));
    f.add("gpool_jobs", Gauge, "Active jobs by state.", states);
    let none: [(&str, &str); 0] = [];
    f.histograms("gpool_job_wait_seconds", "Time from submission (or requeue) to start.", [(&s.wait, none)]);
    f.histograms("gpool_schedule_pass_seconds", "Duration of the scheduler's passes.", [(&s.passes, none)]);
    f.one("gpool_allocations_total", Counter, "Job runs started (devices allocated).", s.allocations_total as f64);
    f.one("gpool_preemptions_total", Counter, "Jobs preempted.", s.preemptions_total as f64);
    f.one(
        "gpool_resizes_total",
        Counter,
        "Elastic jobs restarted at another size (grown or shrunk).",
        s.resizes_total as f64,
    );
}

/// GPU time, energy and money, per user and team (and queue and pool).
fn accounting(f: &mut Families, s: &Scrape) {
    fn per_user(
        m: &BTreeMap<(String, String), f64>,
        scale: f64,
    ) -> impl Iterator<Item = (Option<f64>, [(&'static str, &str); 2])> {
        m.iter().map(move |((u, t), v)| (Some(v * scale), [("user", u.as_str()), ("team", t.as_str())]))
    }
    // Seconds, Prometheus's base unit (divide by 3600 for GPU-hours).
    f.add(
        "gpool_allocated_gpu_seconds_total",
        Counter,
        "GPU-seconds allocated to jobs (a share or MIG instance counts its fraction), per user and team.",
        per_user(&s.gpu_hours, 3600.0),
    );
    f.add(
        "gpool_energy_joules_total",
        Counter,
        "Energy jobs' GPUs drew, from their power samples (a share or MIG instance counts its part), per user and team.",
        per_user(&s.energy_joules, 1.0),
    );
    let jobs = s.job_energy.iter().map(|(job, u, j)| (Some(*j), [("job_id", job.to_string()), ("user", u.clone())]));
    f.add("gpool_job_energy_joules", Gauge, "Energy a running job's GPUs drew so far.", jobs);
    f.add(
        "gpool_idle_allocated_gpu_seconds_total",
        Counter,
        "Seconds allocated GPUs spent under 5% utilisation, per user and team.",
        per_user(&s.idle_gpu_seconds, 1.0),
    );
    fn per_pool(
        m: &BTreeMap<(String, String, String, String), f64>,
    ) -> impl Iterator<Item = (Option<f64>, [(&'static str, &str); 4])> {
        m.iter().map(|((t, u, q, p), d)| {
            (Some(*d), [("team", t.as_str()), ("user", u.as_str()), ("queue", q.as_str()), ("pool", p.as_str())])
        })
    }
    f.add(
        "gpool_cost_dollars_total",
        Counter,
        "Dollars of GPU time allocated to jobs at their nodes' prices (pool price, or the GPU model's list price), per team, user, queue and pool.",
        per_pool(&s.cost),
    );
    f.add(
        "gpool_idle_allocated_cost_dollars_total",
        Counter,
        "Of gpool_cost_dollars_total, dollars of allocated GPUs under 5% utilisation: paid and wasted.",
        per_pool(&s.idle_cost),
    );
}

/// The services' families (only when there is a service).
fn services(f: &mut Families, list: &[ServiceSeries]) {
    type Get = fn(&ServiceSeries) -> f64;
    let families: [(&str, Kind, &str, Get); 5] = [
        ("gpool_service_requests_total", Counter, "Requests the proxy answered, per service.", |x| {
            x.requests_total as f64
        }),
        (
            "gpool_service_failed_requests_total",
            Counter,
            "Requests the proxy itself failed (502/503/504: no replica could take them), per service.",
            |x| x.failed_total as f64,
        ),
        ("gpool_service_in_flight_requests", Gauge, "Requests in flight through the proxy, held ones included.", |x| {
            x.in_flight
        }),
        ("gpool_service_ready_replicas", Gauge, "Replicas that are ready and take requests.", |x| f64::from(x.ready)),
        ("gpool_service_desired_replicas", Gauge, "Replicas the service's autoscaler wants.", |x| f64::from(x.desired)),
    ];
    for (name, kind, help, get) in families {
        f.add(name, kind, help, list.iter().map(|x| (Some(get(x)), [("service", x.name.as_str())])));
    }
    f.histograms(
        "gpool_service_request_duration_seconds",
        "Latency through the proxy to the response's head, per service.",
        list.iter().map(|x| (&x.latency, [("service", x.name.as_str())])),
    );
}

#[cfg(test)]
mod tests;
