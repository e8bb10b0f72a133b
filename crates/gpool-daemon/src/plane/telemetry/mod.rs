//! GPU telemetry as the controller keeps it: the latest reading and a short
//! history of every GPU, and for every running job the series of the devices
//! it holds, downsampled to one row per device per interval for the store
//! (so a finished job still shows its utilisation curve and peak memory).
//!
//! Owned by the controller (one owner, no locks). Agents send
//! [`NodeReport`]s; the controller passes what is allocated to whom, and
//! gets back rows to commit and alert transitions to publish.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use gpool_api as api;
use gpool_core::MigProfile;
use gpool_core::advice::{CpuPoint, DevicePoint, DeviceSeries, JobUsage};
use gpool_core::alert::{self, Engine, Kind, Observation, Reading, Transition};
use gpool_core::heat::{HeatChange, HeatWatch};
use gpool_core::straggler::Straggler;
use gpool_core::time::Time;
use gpool_gpu::GpuSample;
use gpool_store::SampleRow;

pub use crate::plane::usage_rows::IDLE_UTIL;
use crate::protocol::NodeReport;

/// Samples of one GPU kept in memory for `gpool top` sparklines.
const GPU_HISTORY: usize = 120;
/// Full-resolution points of a running job's device kept in memory (for advice).
const JOB_RECENT: usize = 720;

/// A device a job holds, as the controller knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DevRef {
    Gpu(u32),
    /// A MIG instance: its GPU's index and GPU instance id.
    Mig {
        gpu: u32,
        gi_id: u32,
    },
    /// One job's share of a shared GPU.
    Share {
        gpu: u32,
        job: u64,
    },
}

/// Who holds a device.
#[derive(Clone, Debug)]
pub struct Holder {
    pub job: u64,
    pub name: String,
    pub user: String,
    pub team: String,
    pub queue: String,
    /// Cores requested by the job (all replicas), if any.
    pub cpus: Option<f64>,
    pub mig_profile: Option<MigProfile>,
    /// Its memory limit on a shared GPU; on a whole GPU or MIG instance, the device's memory.
    pub memory_total_mb: u64,
    /// Its compute share (thousandths) of a shared GPU.
    pub share_milli: Option<u16>,
    /// The rank of the replica that holds it, the GPU's model and NUMA node.
    pub rank: Option<u32>,
    pub model: Option<String>,
    pub numa_node: Option<u32>,
}

/// The latest state of one GPU.
#[derive(Clone, Debug)]
pub struct GpuTrack {
    pub at_ms: i64,
    pub sample: GpuSample,
    pub util_history: VecDeque<f32>,
}

#[derive(Clone, Debug, Default)]
struct Bucket {
    start_ms: i64,
    util_sum: f64,
    util_n: u32,
    mem_max: Option<u64>,
}

#[derive(Clone, Debug)]
struct DevTrack {
    name: String,
    total_mb: u64,
    recent: VecDeque<DevicePoint>,
    bucket: Bucket,
    last_at_ms: Option<i64>,
    /// What the straggler check compares: node, rank, model, NUMA node, shared (no points).
    meta: DeviceSeries,
}

#[derive(Clone, Debug, Default)]
struct JobTrack {
    user: String,
    cpus: Option<f64>,
    devices: BTreeMap<String, DevTrack>,
    /// Latest CPU cores per node.
    cpu_by_node: BTreeMap<String, f64>,
    cpu_recent: VecDeque<CpuPoint>,
    cpu_bucket: (f64, u32),
    gpu_secs: f64,
    idle_secs: f64,
    util_sum: f64,
    util_n: u64,
    peak_mb: Option<u64>,
    cpu_sum: f64,
    cpu_n: u64,
    /// Energy its devices drew, joules (a MIG instance or share: its part of the GPU's).
    energy_j: f64,
}

/// Cumulative figures for the exporter, since the daemon started.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Allocated GPU-seconds with the device idle, per (user, team).
    pub idle_allocated_gpu_secs: BTreeMap<(String, String), f64>,
    /// Energy jobs' GPUs drew, joules, per (user, team).
    pub energy_joules: BTreeMap<(String, String), f64>,
}

/// Settings.
#[derive(Clone, Debug)]
pub struct TelemetryConfig {
    /// Width of a stored row.
    pub resolution: Duration,
    pub rules: Vec<alert::Rule>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { resolution: Duration::from_secs(60), rules: alert::Rule::defaults() }
    }
}

/// The result of taking a report.
#[derive(Debug, Default)]
pub struct Outcome {
    pub rows: Vec<SampleRow>,
    pub transitions: Vec<Transition>,
    /// GPUs of the node whose heat changed state (`heat.rs`), by index.
    pub heat: Vec<(u32, HeatChange)>,
    /// Running gangs with a replica holding the others back now.
    pub stragglers: Vec<(u64, Straggler)>,
}

/// All telemetry state. See the module docs.
pub struct Telemetry {
    resolution_ms: i64,
    gpus: BTreeMap<(String, u32), GpuTrack>,
    node_errors: BTreeMap<String, String>,
    pid_jobs: BTreeMap<String, BTreeMap<u32, u64>>,
    jobs: HashMap<u64, JobTrack>,
    alerts: Engine,
    heat: HeatWatch<(String, u32)>,
    pub counters: Counters,
}

fn device_name(node: &str, d: &DevRef, profile: Option<&MigProfile>) -> String {
    match (d, profile) {
        (DevRef::Gpu(i), _) => format!("{node}/gpu{i}"),
        (DevRef::Mig { gpu, gi_id }, Some(p)) => format!("{node}/gpu{gpu}/mig{gi_id} ({p})"),
        (DevRef::Mig { gpu, gi_id }, None) => format!("{node}/gpu{gpu}/mig{gi_id}"),
        (DevRef::Share { gpu, .. }, _) => format!("{node}/gpu{gpu} (shared)"),
    }
}

/// Each sharing job's reading of a shared GPU: the memory of its processes,
/// and the SM time of its processes where the backend reports it per
/// process, else the GPU's utilisation split in proportion to the shares.
fn share_readings(
    s: &GpuSample,
    pid_jobs: &BTreeMap<u32, u64>,
    holders: &HashMap<DevRef, Holder>,
) -> Vec<(DevRef, Option<f64>, Option<u64>)> {
    let sharers: Vec<(&DevRef, &Holder)> =
        holders.iter().filter(|(d, _)| matches!(d, DevRef::Share { gpu, .. } if *gpu == s.index)).collect();
    let total_milli: f64 = sharers.iter().filter_map(|(_, h)| h.share_milli).map(f64::from).sum();
    let mut out: Vec<(DevRef, Option<f64>, Option<u64>)> = sharers
        .iter()
        .map(|(d, h)| {
            let mine = s.processes.iter().filter(|p| pid_jobs.get(&p.pid) == Some(&h.job));
            let mem = mine.clone().filter_map(|p| p.used_memory_mb).reduce(|a, b| a + b);
            let per_process: Vec<u32> = mine.filter_map(|p| p.sm_util_pct).collect();
            let util = if per_process.is_empty() {
                s.gpu_util_pct.zip(h.share_milli).map(|(u, m)| u * f64::from(m) / total_milli.max(1.0))
            } else {
                Some(f64::from(per_process.iter().sum::<u32>()).min(100.0))
            };
            ((*d).clone(), util, Some(mem.unwrap_or(0)))
        })
        .collect();
    out.sort_by_key(|(d, _, _)| match d {
        DevRef::Share { job, .. } => *job,
        _ => 0,
    });
    out
}

fn pct(used: Option<u64>, total: Option<u64>) -> Option<f64> {
    match (used, total) {
        (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64 * 100.0),
        _ => None,
    }
}

impl Telemetry {
    pub fn new(cfg: TelemetryConfig) -> Telemetry {
        Telemetry {
            resolution_ms: cfg.resolution.as_millis().max(1) as i64,
            gpus: BTreeMap::new(),
            node_errors: BTreeMap::new(),
            pid_jobs: BTreeMap::new(),
            jobs: HashMap::new(),
            alerts: Engine::new(cfg.rules),
            heat: HeatWatch::default(),
            counters: Counters::default(),
        }
    }

    /// Takes a node's report. `holders` says who holds each device of that
    /// node now; `jobs_of` maps a replica to its job's other devices (for CPU).
    pub fn on_report(&mut self, r: NodeReport, holders: &HashMap<DevRef, Holder>) -> Outcome {
        let mut out = Outcome::default();
        match &r.error {
            Some(e) => {
                self.node_errors.insert(r.node.clone(), e.clone());
            }
            None => {
                self.node_errors.remove(&r.node);
            }
        }
        self.pid_jobs.insert(r.node.clone(), r.pid_jobs.clone());
        let at = Time::from_millis(r.at_ms);
        let mut obs = Vec::new();
        // CPU per job on this node.
        let mut cpu: BTreeMap<u64, f64> = BTreeMap::new();
        for (key, cores) in &r.replicas {
            *cpu.entry(key.job).or_default() += cores;
        }
        for s in &r.gpus {
            let key = (r.node.clone(), s.index);
            let track = self.gpus.entry(key).or_insert_with(|| GpuTrack {
                at_ms: r.at_ms,
                sample: s.clone(),
                util_history: VecDeque::new(),
            });
            track.at_ms = r.at_ms;
            track.sample = s.clone();
            let key = (r.node.clone(), s.index);
            if let Some(change) = self.heat.observe(&key, at, &health::heat_sample(s)) {
                out.heat.push((s.index, change));
            }
            let degraded = self.heat.degraded(&key);
            if let Some(u) = s.gpu_util_pct {
                if track.util_history.len() == GPU_HISTORY {
                    track.util_history.pop_front();
                }
                track.util_history.push_back(u as f32);
            }
            // The whole GPU, or each of its MIG instances.
            let mut devs: Vec<(DevRef, Option<f64>, Option<u64>)> = Vec::new();
            if s.mig.is_empty() {
                devs.push((DevRef::Gpu(s.index), s.gpu_util_pct, s.memory_used_mb));
                devs.extend(share_readings(s, &r.pid_jobs, holders));
            } else {
                for m in &s.mig {
                    devs.push((DevRef::Mig { gpu: s.index, gi_id: m.gi_id }, None, m.memory_used_mb));
                }
            }
            let whole = holders.get(&DevRef::Gpu(s.index));
            let mut labels = vec![
                ("node".to_string(), r.node.clone()),
                ("gpu".to_string(), s.index.to_string()),
                ("UUID".to_string(), s.uuid.clone()),
            ];
            if let Some(h) = whole {
                labels.push(("job_id".into(), h.job.to_string()));
                labels.push(("user".into(), h.user.clone()));
            }
            if let Some(why) = degraded {
                labels.push(("detail".into(), format!("degraded: {why}")));
            }
            let allocated = whole.is_some() || devs.iter().any(|(d, _, _)| holders.contains_key(d));
            obs.push(Observation {
                subject: format!("{}/gpu{}", r.node, s.index),
                kind: Kind::Gpu { allocated },
                reading: Reading {
                    gpu_util: s.gpu_util_pct,
                    memory_used_pct: pct(s.memory_used_mb, s.memory_total_mb),
                    temperature: s.temperature_c,
                    power_draw: s.power_draw_w,
                    ecc_uncorrected: s.ecc_uncorrected_volatile.map(|v| v as f64),
                    xid: s.xid_last.map(|v| v as f64),
                    thermal_slowdown: Some(if degraded.is_some() { 1.0 } else { 0.0 }),
                    ..Reading::default()
                },
                labels,
            });
            for (d, util, mem) in devs {
                let Some(h) = holders.get(&d) else { continue };
                let name = device_name(&r.node, &d, h.mig_profile.as_ref());
                let job = self.jobs.entry(h.job).or_insert_with(|| JobTrack {
                    user: h.user.clone(),
                    cpus: h.cpus,
                    ..JobTrack::default()
                });
                let dev = job.devices.entry(name.clone()).or_insert_with(|| DevTrack {
                    name: name.clone(),
                    total_mb: h.memory_total_mb,
                    recent: VecDeque::new(),
                    bucket: Bucket { start_ms: r.at_ms, ..Bucket::default() },
                    last_at_ms: None,
                    meta: health::device_meta(&r.node, &d, h),
                });
                // Time since this device's previous sample, for GPU-second accounting.
                let dt = dev.last_at_ms.map_or(0.0, |t| ((r.at_ms - t).max(0) as f64) / 1000.0);
                dev.last_at_ms = Some(r.at_ms);
                let equiv = match (&h.mig_profile, h.share_milli) {
                    (Some(p), _) => f64::from(p.compute()) / 7.0,
                    (None, Some(m)) => f64::from(m) / 1000.0,
                    (None, None) => 1.0,
                };
                job.gpu_secs += dt * equiv;
                let joules = dt * equiv * s.power_draw_w.filter(|w| w.is_finite() && *w > 0.0).unwrap_or(0.0);
                job.energy_j += joules;
                *self.counters.energy_joules.entry((h.user.clone(), h.team.clone())).or_default() += joules;
                if let Some(u) = util {
                    job.util_sum += u;
                    job.util_n += 1;
                    if u < IDLE_UTIL {
                        job.idle_secs += dt * equiv;
                        *self.counters.idle_allocated_gpu_secs.entry((h.user.clone(), h.team.clone())).or_default() +=
                            dt * equiv;
                    }
                }
                if let Some(m) = mem {
                    job.peak_mb = Some(job.peak_mb.map_or(m, |p| p.max(m)));
                }
                if dev.recent.len() == JOB_RECENT {
                    dev.recent.pop_front();
                }
                dev.recent.push_back(DevicePoint {
                    at,
                    util,
                    memory_used_mb: mem,
                    sm_clock_mhz: s.sm_clock_mhz,
                    throttle: gpool_core::heat::throttle::bits(s.throttle_reasons.as_deref().unwrap_or_default()),
                    gpu_util: matches!(d, DevRef::Share { .. }).then_some(s.gpu_util_pct).flatten(),
                });
                // Downsample: a row per device per interval.
                if r.at_ms - dev.bucket.start_ms >= self.resolution_ms {
                    let b = std::mem::replace(&mut dev.bucket, Bucket { start_ms: r.at_ms, ..Bucket::default() });
                    let cores = (job.cpu_bucket.1 > 0).then(|| job.cpu_bucket.0 / f64::from(job.cpu_bucket.1));
                    out.rows.push(row(h.job, &name, dev.total_mb, &b, cores));
                }
                let b = &mut dev.bucket;
                if let Some(u) = util {
                    b.util_sum += u;
                    b.util_n += 1;
                }
                if let Some(m) = mem {
                    b.mem_max = Some(b.mem_max.map_or(m, |x| x.max(m)));
                }
            }
        }
        // CPU points for the jobs of this node.
        for (job, cores) in cpu {
            if let Some(t) = self.jobs.get_mut(&job) {
                t.cpu_by_node.insert(r.node.clone(), cores);
                let total: f64 = t.cpu_by_node.values().sum();
                if t.cpu_recent.len() == JOB_RECENT {
                    t.cpu_recent.pop_front();
                }
                t.cpu_recent.push_back(CpuPoint { at, cores: total });
                t.cpu_sum += total;
                t.cpu_n += 1;
                // A bucket's CPU mean resets when its devices' rows were written.
                if out.rows.iter().any(|row| row.job == job) {
                    t.cpu_bucket = (0.0, 0);
                }
                t.cpu_bucket.0 += total;
                t.cpu_bucket.1 += 1;
            }
        }
        // Job-level readings: the mean utilisation of its devices' latest samples.
        let mut seen: Vec<u64> = holders.values().map(|h| h.job).collect();
        seen.sort_unstable();
        seen.dedup();
        for job in seen {
            let Some(t) = self.jobs.get(&job) else { continue };
            let latest: Vec<&DevicePoint> = t.devices.values().filter_map(|d| d.recent.back()).collect();
            let utils: Vec<f64> = latest.iter().filter_map(|p| p.util).collect();
            let mem_pct = t
                .devices
                .values()
                .filter_map(|d| d.recent.back().and_then(|p| pct(p.memory_used_mb, Some(d.total_mb))))
                .reduce(f64::max);
            let straggler = health::straggler(t.devices.values(), at);
            let mut labels = vec![("job_id".into(), job.to_string()), ("user".into(), t.user.clone())];
            if let Some(s) = &straggler {
                labels.push(("detail".into(), s.to_string()));
                out.stragglers.push((job, s.clone()));
            }
            obs.push(Observation {
                subject: format!("job/{job}"),
                kind: Kind::Job,
                reading: Reading {
                    gpu_util: (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64),
                    memory_used_pct: mem_pct,
                    straggler: Some(if straggler.is_some() { 1.0 } else { 0.0 }),
                    ..Reading::default()
                },
                labels,
            });
        }
        out.transitions = self.alerts.observe(at, &obs);
        out
    }

    /// A job's run ended: flushes its open rows, forgets it, and returns its usage.
    pub fn end_job(&mut self, job: u64) -> (Vec<SampleRow>, Option<api::UsageSummary>, Vec<Transition>) {
        let summary = self.summary(job);
        let transitions = self.alerts.forget(&format!("job/{job}"));
        let mut rows = Vec::new();
        if let Some(t) = self.jobs.remove(&job) {
            let cores = (t.cpu_bucket.1 > 0).then(|| t.cpu_bucket.0 / f64::from(t.cpu_bucket.1));
            for d in t.devices.values() {
                if d.bucket.util_n > 0 || d.bucket.mem_max.is_some() {
                    rows.push(row(job, &d.name, d.total_mb, &d.bucket, cores));
                }
            }
        }
        (rows, summary, transitions)
    }

    /// A running job's usage so far (`None` before its first sample).
    pub fn summary(&self, job: u64) -> Option<api::UsageSummary> {
        let t = self.jobs.get(&job)?;
        Some(api::UsageSummary {
            gpu_hours: t.gpu_secs / 3600.0,
            idle_gpu_hours: t.idle_secs / 3600.0,
            mean_gpu_util: (t.util_n > 0).then(|| t.util_sum / t.util_n as f64),
            peak_memory_mb: t.peak_mb,
            mean_cpu_cores: (t.cpu_n > 0).then(|| t.cpu_sum / t.cpu_n as f64),
            energy_wh: (t.energy_j > 0.0).then(|| t.energy_j / 3600.0),
            cost_usd: None,
        })
    }

    /// The recent full-resolution series of a running job, for the advisor.
    pub fn job_usage(&self, job: u64) -> Option<JobUsage> {
        let t = self.jobs.get(&job)?;
        Some(JobUsage {
            devices: t
                .devices
                .values()
                .map(|d| DeviceSeries { points: d.recent.iter().copied().collect(), ..d.meta.clone() })
                .collect(),
            cpu: t.cpu_recent.iter().copied().collect(),
            cpus_allocated: t.cpus,
            ..JobUsage::default()
        })
    }

    /// Why a GPU is degraded for heat, if it is.
    pub fn degraded(&self, node: &str, index: u32) -> Option<&str> {
        self.heat.degraded(&(node.to_string(), index))
    }

    /// Every degraded GPU: (node, index, why), to be kept across a restart.
    pub fn all_degraded(&self) -> Vec<(String, u32, String)> {
        self.heat.all_degraded().map(|((n, i), why)| (n.clone(), *i, why.to_string())).collect()
    }

    /// A GPU a previous control plane had marked degraded.
    pub fn restore_degraded(&mut self, node: &str, index: u32, why: String) {
        self.heat.restore((node.to_string(), index), why);
    }

    /// The indices of a node's degraded GPUs.
    pub fn degraded_on(&self, node: &str) -> Vec<u32> {
        self.heat.all_degraded().filter(|((n, _), _)| n == node).map(|((_, i), _)| *i).collect()
    }

    /// The latest reading of a GPU.
    pub fn gpu(&self, node: &str, index: u32) -> Option<&GpuTrack> {
        self.gpus.get(&(node.to_string(), index))
    }

    /// What a node's GPUs drew at their latest readings, in watts (`None`: none reported power).
    pub fn power_draw(&self, node: &str) -> Option<f64> {
        let draws = self.gpus.iter().filter(|((n, _), _)| n == node).filter_map(|(_, t)| t.sample.power_draw_w);
        draws.fold(None, |sum, w| Some(sum.unwrap_or(0.0) + w))
    }

    /// The job a GPU process belongs to.
    pub fn job_of_pid(&self, node: &str, pid: u32) -> Option<u64> {
        self.pid_jobs.get(node).and_then(|m| m.get(&pid)).copied()
    }

    /// Why a node's sampler failed last, if it did.
    pub fn node_error(&self, node: &str) -> Option<&str> {
        self.node_errors.get(node).map(String::as_str)
    }

    /// GPUs a job held were released: their allocation alerts resolve now.
    pub fn release_gpus(&mut self, gpus: &[(String, u32)]) -> Vec<Transition> {
        gpus.iter().flat_map(|(node, i)| self.alerts.release(&format!("{node}/gpu{i}"))).collect()
    }

    /// A node left: drop its GPUs and resolve their alerts.
    pub fn forget_node(&mut self, node: &str) -> Vec<Transition> {
        let keys: Vec<(String, u32)> = self.gpus.keys().filter(|(n, _)| n == node).cloned().collect();
        let mut out = Vec::new();
        self.heat.forget(|(n, _)| n == node);
        for k in keys {
            self.gpus.remove(&k);
            out.extend(self.alerts.forget(&format!("{}/gpu{}", k.0, k.1)));
        }
        out
    }

    /// Readings of subjects outside the GPUs and jobs (power budgets).
    pub fn observe(&mut self, at: Time, obs: &[Observation]) -> Vec<Transition> {
        self.alerts.observe(at, obs)
    }

    pub fn active_alerts(&self) -> Vec<alert::Active> {
        self.alerts.active()
    }

    pub fn rules(&self) -> &[alert::Rule] {
        self.alerts.rules()
    }
}

fn row(job: u64, device: &str, total_mb: u64, b: &Bucket, cpu_cores: Option<f64>) -> SampleRow {
    SampleRow {
        job,
        at_ms: b.start_ms,
        device: device.to_string(),
        gpu_util: (b.util_n > 0).then(|| b.util_sum / f64::from(b.util_n)),
        memory_mb: b.mem_max,
        memory_total_mb: total_mb,
        cpu_cores,
    }
}

/// The telemetry view of a GPU for the API.
pub fn device_view(t: &GpuTrack, pid_job: impl Fn(u32) -> Option<u64>) -> api::DeviceTelemetry {
    let s = &t.sample;
    api::DeviceTelemetry {
        at: api::time::rfc3339(t.at_ms),
        gpu_util: s.gpu_util_pct,
        mem_util: s.mem_util_pct,
        memory_used_mb: s.memory_used_mb,
        memory_total_mb: s.memory_total_mb,
        temperature_c: s.temperature_c,
        power_w: s.power_draw_w,
        power_limit_w: s.power_limit_w,
        sm_clock_mhz: s.sm_clock_mhz,
        mem_clock_mhz: s.mem_clock_mhz,
        pstate: s.pstate.clone(),
        ecc_uncorrected: s.ecc_uncorrected_volatile,
        xid: s.xid_last,
        throttle_reasons: s.throttle_reasons.clone(),
        processes: s
            .processes
            .iter()
            .map(|p| api::GpuProcessView {
                pid: p.pid,
                name: p.name.clone(),
                used_memory_mb: p.used_memory_mb,
                job: pid_job(p.pid),
            })
            .collect(),
        util_history: t.util_history.iter().copied().collect(),
    }
}

mod health;
#[cfg(test)]
mod tests;
