//! Diagnosis and right-sizing advice from a job's telemetry.
//!
//! [`advise`] turns the utilisation, memory and CPU series of a job into
//! findings, each with the evidence behind it and what the waste costs:
//! - **input-pipeline or CPU bound**: the model is loaded (high GPU memory)
//!   but kernels run little or in bursts (low or oscillating utilisation);
//!   CPU-bound when the job's processes use nearly all their CPUs;
//! - **idle GPU held**: an allocated GPU that does nothing;
//! - **over-provisioned**: GPUs of a multi-GPU job left idle, or a peak
//!   memory and utilisation that fit a smaller MIG profile the cluster offers;
//! - **memory-bound**: peak memory at the device's limit (out-of-memory risk).
//!
//! Pure: the caller gathers the series and passes prices and thresholds.
//! The thresholds and their sources are in docs/telemetry.md.

use std::fmt;
use std::time::Duration;

use crate::model::resources::{MIG_COMPUTE_SLICES, MigProfile};
use crate::model::time::{Time, human_duration};

pub use crate::diagnosis::series::{DevicePoint, DeviceSeries};

/// CPU cores the job's processes used, summed over its replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuPoint {
    pub at: Time,
    pub cores: f64,
}

/// Everything [`advise`] looks at for one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobUsage {
    pub devices: Vec<DeviceSeries>,
    pub cpu: Vec<CpuPoint>,
    /// Cores the job was given (its request, or the node's cores for a job
    /// without a request); `None` when unknown.
    pub cpus_allocated: Option<f64>,
    /// How long the job has held its devices (this run and earlier ones).
    pub runtime: Duration,
    /// Price of one whole GPU of its model per hour, if known.
    pub price_per_gpu_hour: Option<f64>,
    /// MIG profiles the cluster offers, with their memory in MiB.
    pub mig_offered: Vec<(MigProfile, u64)>,
    /// The job has ended: its series is its whole life, so a run shorter
    /// than `Thresholds::min_span` is judged on what it has (`min_points`).
    pub ended: bool,
}

/// Where the advisor draws its lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// Utilisation under this is "idle", percent.
    pub idle_util: f64,
    /// A device idle in at least this share of samples is idle.
    pub idle_share: f64,
    /// Memory over this share of the device means the model is loaded.
    pub loaded_memory: f64,
    /// Mean utilisation under this, with the model loaded, is starved.
    pub starved_util: f64,
    /// Oscillation: p5 under `burst_low` and p95 over `burst_high`.
    pub burst_low: f64,
    pub burst_high: f64,
    /// The job's CPU use over this share of its CPUs is CPU-bound.
    pub cpu_bound: f64,
    /// Peak memory over this share of the device is near the limit.
    pub memory_limit: f64,
    /// Memory headroom kept when right-sizing (1.1 = 10% above the peak).
    pub headroom: f64,
    /// Less telemetry than this is not enough to judge.
    pub min_span: Duration,
    pub min_points: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            idle_util: 5.0,
            idle_share: 0.9,
            loaded_memory: 0.5,
            starved_util: 50.0,
            burst_low: 10.0,
            burst_high: 70.0,
            cpu_bound: 0.9,
            memory_limit: 0.95,
            headroom: 1.1,
            min_span: Duration::from_secs(300),
            min_points: 5,
        }
    }
}

/// What kind of problem a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    Straggler,
    InputBound,
    CpuBound,
    IdleGpu,
    OverProvisioned,
    MemoryBound,
    NotEnoughData,
    Healthy,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Straggler => "straggler",
            FindingKind::InputBound => "input_bound",
            FindingKind::CpuBound => "cpu_bound",
            FindingKind::IdleGpu => "idle_gpu",
            FindingKind::OverProvisioned => "over_provisioned",
            FindingKind::MemoryBound => "memory_bound",
            FindingKind::NotEnoughData => "not_enough_data",
            FindingKind::Healthy => "healthy",
        }
    }
}

/// One diagnosis.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: FindingKind,
    /// One sentence: what is wrong.
    pub summary: String,
    /// The numbers behind it.
    pub evidence: Vec<String>,
    /// What to do about it.
    pub suggestions: Vec<String>,
    /// GPU-hours paid for and not used, so far.
    pub wasted_gpu_hours: f64,
    /// Their price, when the GPU's price is known.
    pub wasted_usd: Option<f64>,
}

/// Statistics of a job's devices, for display next to the findings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub mean_util: Option<f64>,
    pub p5_util: Option<f64>,
    pub p95_util: Option<f64>,
    pub peak_memory_mb: Option<u64>,
    /// Peak memory of the fullest device over its size, 0–1.
    pub peak_memory_share: Option<f64>,
    pub mean_cpu_cores: Option<f64>,
    pub gpu_hours: f64,
    pub span: Duration,
    pub points: usize,
}

/// The advisor's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub summary: Summary,
    pub findings: Vec<Finding>,
}

/// Per-device figures.
struct DevStats {
    utils: Vec<f64>,
    idle_share: Option<f64>,
    peak_mb: Option<u64>,
    mean_mb: Option<f64>,
    total_mb: u64,
    /// Whole-GPU equivalents this device is worth (MIG: slices / 7).
    gpu_equiv: f64,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(idx.min(sorted.len() - 1)).copied()
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

fn gib(mb: u64) -> String {
    format!("{:.1} GiB", mb as f64 / 1024.0)
}

fn stats(d: &DeviceSeries, t: &Thresholds) -> DevStats {
    let utils: Vec<f64> = d.points.iter().filter_map(|p| p.util).filter(|u| u.is_finite()).collect();
    let mems: Vec<u64> = d.points.iter().filter_map(|p| p.memory_used_mb).collect();
    let idle = utils.iter().filter(|u| **u < t.idle_util).count();
    DevStats {
        idle_share: (!utils.is_empty()).then(|| idle as f64 / utils.len() as f64),
        utils,
        peak_mb: mems.iter().copied().max(),
        mean_mb: mean(mems.iter().map(|m| *m as f64)),
        total_mb: d.memory_total_mb,
        gpu_equiv: d
            .mig_profile
            .as_ref()
            .map_or(1.0, |p| f64::from(p.compute()).min(f64::from(MIG_COMPUTE_SLICES)) / 7.0),
    }
}

/// The straggler of a running gang (several devices); none for a job that ended.
fn straggler_of(u: &JobUsage, now: Time) -> Option<crate::diagnosis::straggler::Straggler> {
    if u.ended || u.devices.len() < 2 {
        return None;
    }
    crate::diagnosis::straggler::find_straggler(&u.devices, now, crate::diagnosis::straggler::WINDOW)
}

/// A straggler as a finding, with what to do about it.
pub fn straggler_finding(s: &crate::diagnosis::straggler::Straggler) -> Finding {
    use crate::diagnosis::straggler::StragglerReason as R;
    let fix = match &s.reason {
        R::Thermal { .. } => {
            "the GPU is marked degraded and new gangs avoid it; check its cooling (fans, air path, a blocked filter)"
        }
        R::PowerCap { .. } => {
            "check the GPU's power limit (nvidia-smi -q -d POWER) and the node's power budget (gpool power)"
        }
        R::SlowerModel { .. } => {
            "ask for one GPU model (--gpu-model, nvidia.com/gpu.product) so every replica gets the same"
        }
        R::BusyNeighbour { .. } => "ask for whole GPUs instead of shares for gang work",
        R::AcrossNuma { .. } => "ask for fewer GPUs per replica, or nodes whose GPUs share a NUMA node",
        R::SlowClock => "check the GPU's clocks (nvidia-smi -q -d CLOCK,PERFORMANCE) and its application clocks",
    };
    Finding {
        kind: FindingKind::Straggler,
        summary: s.to_string(),
        evidence: s.evidence.clone(),
        suggestions: vec![
            fix.to_string(),
            "with onStraggler: requeue in the spec, gpool stops the gang with its grace period and places it again away from the slow GPU".into(),
        ],
        wasted_gpu_hours: 0.0,
        wasted_usd: None,
    }
}

/// Diagnoses a job from its telemetry.
pub fn advise(u: &JobUsage, t: &Thresholds) -> Advice {
    let devs: Vec<DevStats> = u.devices.iter().map(|d| stats(d, t)).collect();
    let hours = u.runtime.as_secs_f64() / 3600.0;
    let gpu_equiv: f64 = devs.iter().map(|d| d.gpu_equiv).sum();
    let price = |gpu_hours: f64| u.price_per_gpu_hour.map(|p| p * gpu_hours);
    let times: Vec<Time> = u.devices.iter().flat_map(|d| d.points.iter().map(|p| p.at)).collect();
    let span = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) => b.since(*a),
        _ => Duration::ZERO,
    };
    let points = u.devices.iter().map(|d| d.points.len()).max().unwrap_or(0);
    let mut all_utils: Vec<f64> = devs.iter().flat_map(|d| d.utils.iter().copied()).collect();
    all_utils.sort_by(f64::total_cmp);
    let peak = devs
        .iter()
        .filter_map(|d| d.peak_mb.map(|p| (p, if d.total_mb > 0 { p as f64 / d.total_mb as f64 } else { 0.0 })))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mean_cpu = mean(u.cpu.iter().map(|c| c.cores));
    let summary = Summary {
        mean_util: mean(all_utils.iter().copied()),
        p5_util: percentile(&all_utils, 0.05),
        p95_util: percentile(&all_utils, 0.95),
        peak_memory_mb: devs.iter().filter_map(|d| d.peak_mb).max(),
        peak_memory_share: peak.map(|p| p.1),
        mean_cpu_cores: mean_cpu,
        gpu_hours: hours * gpu_equiv,
        span,
        points,
    };
    let mut findings = Vec::new();
    // A straggler is judged over the last seconds, not the job's whole life:
    // it is said even while there is too little data for the rest.
    if let Some(s) = times.iter().max().and_then(|now| straggler_of(u, *now)) {
        findings.push(straggler_finding(&s));
    }
    if devs.is_empty() || (span < t.min_span && !u.ended) || points < t.min_points {
        let (said, suggestion) = if u.ended {
            (
                format!(
                    "not enough telemetry to judge: {points} samples over {} (needs {} samples)",
                    human_duration(span),
                    t.min_points
                ),
                "sample more often (--sample-interval) to judge jobs this short",
            )
        } else {
            (
                format!(
                    "not enough telemetry yet to judge: {points} samples over {} (needs {} and {} samples)",
                    human_duration(span),
                    human_duration(t.min_span),
                    t.min_points
                ),
                "ask again once the job has run a few minutes",
            )
        };
        findings.push(Finding {
            kind: FindingKind::NotEnoughData,
            summary: said,
            evidence: Vec::new(),
            suggestions: vec![suggestion.into()],
            wasted_gpu_hours: 0.0,
            wasted_usd: None,
        });
        return Advice { summary, findings };
    }

    // Idle devices: all of them (an idle job), or some of a multi-device job.
    let idle: Vec<usize> = (0..devs.len()).filter(|&i| devs[i].idle_share.is_some_and(|s| s >= t.idle_share)).collect();
    let window = format!("over {} ({points} samples)", human_duration(span));
    if !idle.is_empty() {
        let idle_equiv: f64 = idle.iter().map(|&i| devs[i].gpu_equiv).sum();
        let wasted = hours * idle_equiv;
        let names: Vec<&str> = idle.iter().map(|&i| u.devices[i].name.as_str()).collect();
        let shares: Vec<String> = idle
            .iter()
            .map(|&i| {
                format!(
                    "{}: under {}% in {:.0}% of samples",
                    u.devices[i].name,
                    t.idle_util,
                    devs[i].idle_share.unwrap_or(0.0) * 100.0
                )
            })
            .collect();
        if idle.len() == devs.len() {
            findings.push(Finding {
                kind: FindingKind::IdleGpu,
                summary: format!("the job holds {} GPU(s) and does not use them", devs.len()),
                evidence: [vec![format!("utilisation {window}")], shares].concat(),
                suggestions: vec![
                    "cancel the job if it is stuck or waiting for input (a notebook, a debugger)".into(),
                    "do CPU-only work (preprocessing, evaluation on CPU) in a job that requests no GPU".into(),
                ],
                wasted_gpu_hours: wasted,
                wasted_usd: price(wasted),
            });
        } else {
            let used = devs.len() - idle.len();
            findings.push(Finding {
                kind: FindingKind::OverProvisioned,
                summary: format!("the job uses {used} of its {} GPUs; {} stay idle", devs.len(), names.join(", ")),
                evidence: [vec![format!("utilisation {window}")], shares].concat(),
                suggestions: vec![
                    format!("request {used} GPU(s) instead of {}", devs.len()),
                    "or check that the job really runs data/model parallel (torchrun, DDP) on every GPU it gets".into(),
                ],
                wasted_gpu_hours: wasted,
                wasted_usd: price(wasted),
            });
        }
    }

    // The devices that work: starved, memory-bound, or right-sizable.
    let busy: Vec<usize> = (0..devs.len()).filter(|i| !idle.contains(i)).collect();
    if !busy.is_empty() {
        let mut utils: Vec<f64> = busy.iter().flat_map(|&i| devs[i].utils.iter().copied()).collect();
        utils.sort_by(f64::total_cmp);
        let mean_util = mean(utils.iter().copied());
        let (p5, p95) = (percentile(&utils, 0.05), percentile(&utils, 0.95));
        let loaded = busy.iter().all(|&i| match (devs[i].mean_mb, devs[i].total_mb) {
            (Some(m), total) if total > 0 => m / total as f64 >= t.loaded_memory,
            _ => false,
        });
        let busy_equiv: f64 = busy.iter().map(|&i| devs[i].gpu_equiv).sum();
        if let (Some(mu), Some(p5), Some(p95)) = (mean_util, p5, p95) {
            // SageMaker Debugger's "fluctuating": p5 under 10% while p95 is over 70%.
            let oscillating = p5 < t.burst_low && p95 >= t.burst_high;
            if loaded && (mu < t.starved_util || oscillating) {
                let mem = busy
                    .iter()
                    .filter_map(|&i| devs[i].mean_mb.map(|m| (m, devs[i].total_mb)))
                    .map(|(m, tot)| {
                        format!("{} of {} ({:.0}%)", gib(m as u64), gib(tot), m / tot.max(1) as f64 * 100.0)
                    })
                    .next()
                    .unwrap_or_default();
                let pattern = if oscillating { "oscillating" } else { "low" };
                let mut evidence = vec![
                    format!("GPU memory in use {mem}: the model is loaded"),
                    format!("utilisation {pattern}: mean {mu:.0}%, p5 {p5:.0}%, p95 {p95:.0}% {window}"),
                ];
                let cpu_bound = match (mean_cpu, u.cpus_allocated) {
                    (Some(c), Some(a)) if a > 0.0 => {
                        evidence.push(format!(
                            "CPU: the job's processes use {c:.1} of {a:.1} cores ({:.0}%)",
                            c / a * 100.0
                        ));
                        c / a >= t.cpu_bound
                    }
                    (Some(c), None) => {
                        evidence.push(format!("CPU: the job's processes use {c:.1} cores"));
                        false
                    }
                    _ => false,
                };
                let wasted = hours * busy_equiv * (1.0 - mu / 100.0);
                let (kind, summary, suggestions) = if cpu_bound {
                    (
                        FindingKind::CpuBound,
                        format!("CPU-bound: the GPU waits for the CPUs ({mu:.0}% busy on average)"),
                        vec![
                            "request more CPUs (--cpus) and raise the data loader's workers (DataLoader(num_workers=…))".into(),
                            "move preprocessing (decoding, augmentation) to the GPU (NVIDIA DALI) or do it once ahead of training".into(),
                        ],
                    )
                } else {
                    (
                        FindingKind::InputBound,
                        format!("input-pipeline bound: the model is loaded but the GPU is busy only {mu:.0}% of the time"),
                        vec![
                            "overlap loading with compute: DataLoader(num_workers>0, pin_memory=True, prefetch_factor=…)".into(),
                            "read from local or faster storage, cache the dataset, or use a streaming format (WebDataset, TFRecord)".into(),
                            "raise the batch size if memory allows, so each step does more GPU work per input".into(),
                        ],
                    )
                };
                findings.push(Finding {
                    kind,
                    summary,
                    evidence,
                    suggestions,
                    wasted_gpu_hours: wasted,
                    wasted_usd: price(wasted),
                });
            }

            // Right-sizing onto a MIG instance the cluster offers.
            let peak_busy = busy.iter().filter_map(|&i| devs[i].peak_mb).max();
            if busy.len() == 1
                && let Some(peak_mb) = peak_busy
            {
                let cur = &u.devices[busy[0]];
                let cur_slices = cur.mig_profile.as_ref().map_or(MIG_COMPUTE_SLICES, |p| u32::from(p.compute()));
                let need_slices = ((p95 / 100.0) * f64::from(MIG_COMPUTE_SLICES)).ceil().max(1.0) as u32;
                let need_mb = (peak_mb as f64 * t.headroom).ceil() as u64;
                let fit = u
                    .mig_offered
                    .iter()
                    .filter(|(p, mem)| *mem >= need_mb && u32::from(p.compute()) >= need_slices)
                    .filter(|(p, _)| u32::from(p.compute()) < cur_slices)
                    .min_by_key(|(p, mem)| (p.compute(), *mem));
                if let Some((profile, mem)) = fit {
                    let frac = f64::from(profile.compute()) / 7.0;
                    let wasted = hours * (devs[busy[0]].gpu_equiv - frac).max(0.0);
                    findings.push(Finding {
                        kind: FindingKind::OverProvisioned,
                        summary: format!(
                            "over-provisioned: peak memory {} and p95 utilisation {p95:.0}% fit a {profile} MIG instance",
                            gib(peak_mb)
                        ),
                        evidence: vec![
                            format!("peak GPU memory {} of {} on {}", gib(peak_mb), gib(cur.memory_total_mb), cur.name),
                            format!("utilisation p95 {p95:.0}% ≈ {need_slices} of 7 compute slices"),
                            format!("{profile} offers {} and {} of 7 compute slices", gib(*mem), profile.compute()),
                        ],
                        suggestions: vec![format!("submit with --mig {profile} (nvidia.com/mig-{profile}: 1)")],
                        wasted_gpu_hours: wasted,
                        wasted_usd: price(wasted),
                    });
                }
            }
        }

        // Memory at the limit. A starved job's memory is the caching
        // allocator's business, not the next thing to fix: that finding comes first.
        let starved = findings.iter().any(|f| matches!(f.kind, FindingKind::InputBound | FindingKind::CpuBound));
        if !starved
            && let Some((i, share)) = busy
                .iter()
                .filter_map(|&i| {
                    devs[i].peak_mb.filter(|_| devs[i].total_mb > 0).map(|p| (i, p as f64 / devs[i].total_mb as f64))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
            && share >= t.memory_limit
        {
            findings.push(Finding {
                kind: FindingKind::MemoryBound,
                summary: format!("memory-bound: peak GPU memory is {:.0}% of the device; one larger batch and it runs out", share * 100.0),
                evidence: vec![format!(
                    "peak {} of {} on {}",
                    gib(devs[i].peak_mb.unwrap_or(0)),
                    gib(devs[i].total_mb),
                    u.devices[i].name
                )],
                suggestions: vec![
                    "train in mixed precision (bf16/fp16 autocast): activations and gradients take half the memory".into(),
                    "use gradient checkpointing: recompute activations in the backward pass (about 20–30% more compute for much less memory)".into(),
                    "lower the micro-batch and accumulate gradients to keep the effective batch size".into(),
                ],
                wasted_gpu_hours: 0.0,
                wasted_usd: None,
            });
        }
    }

    if findings.is_empty() {
        let mu = summary.mean_util.map_or_else(|| "n/a".into(), |m| format!("{m:.0}%"));
        let mem = summary.peak_memory_share.map_or_else(|| "n/a".into(), |m| format!("{:.0}%", m * 100.0));
        findings.push(Finding {
            kind: FindingKind::Healthy,
            summary: format!("no problem found: mean utilisation {mu}, peak memory {mem} of the device"),
            evidence: vec![format!("{points} samples over {}", human_duration(span))],
            suggestions: Vec::new(),
            wasted_gpu_hours: 0.0,
            wasted_usd: None,
        });
    }
    Advice { summary, findings }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device series: one point a minute with these utilisations and memory.
    fn series(name: &str, total_mb: u64, utils: &[f64], mem_mb: u64) -> DeviceSeries {
        DeviceSeries {
            name: name.into(),
            memory_total_mb: total_mb,
            mig_profile: None,
            points: utils
                .iter()
                .enumerate()
                .map(|(i, u)| DevicePoint {
                    at: Time::from_secs(i as i64 * 60),
                    util: Some(*u),
                    memory_used_mb: Some(mem_mb),
                    ..DevicePoint::default()
                })
                .collect(),
            ..DeviceSeries::default()
        }
    }

    fn usage(devices: Vec<DeviceSeries>, cpu: f64, cpus: f64) -> JobUsage {
        let n = devices.first().map_or(0, |d| d.points.len());
        JobUsage {
            cpu: (0..n).map(|i| CpuPoint { at: Time::from_secs(i as i64 * 60), cores: cpu }).collect(),
            devices,
            cpus_allocated: Some(cpus),
            runtime: Duration::from_secs(3600),
            price_per_gpu_hour: Some(4.0),
            mig_offered: vec![
                ("1g.10gb".parse().expect("profile"), 9_984),
                ("3g.40gb".parse().expect("profile"), 40_448),
            ],
            ended: false,
        }
    }

    fn kinds(a: &Advice) -> Vec<FindingKind> {
        a.findings.iter().map(|f| f.kind).collect()
    }

    /// The V100 fixture's pattern: memory pinned high, utilisation swinging 0–100.
    const SWING: [f64; 12] = [0.0, 100.0, 35.0, 0.0, 98.0, 0.0, 12.0, 100.0, 0.0, 60.0, 0.0, 100.0];

    #[test]
    fn scenarios_give_the_expected_findings() {
        let t = Thresholds::default();
        let cases: Vec<(&str, JobUsage, Vec<FindingKind>)> = vec![
            (
                "starved with idle CPUs: input pipeline",
                usage(vec![series("n/gpu0", 32_480, &SWING, 30_994)], 1.0, 8.0),
                vec![FindingKind::InputBound],
            ),
            (
                "starved with busy CPUs: CPU-bound",
                usage(vec![series("n/gpu0", 32_480, &SWING, 30_994)], 7.8, 8.0),
                vec![FindingKind::CpuBound],
            ),
            (
                "idle GPU held",
                usage(vec![series("n/gpu0", 81_559, &[0.0; 12], 500)], 0.1, 8.0),
                vec![FindingKind::IdleGpu],
            ),
            (
                "uses one of two GPUs",
                usage(
                    vec![series("n/gpu0", 81_559, &[95.0; 12], 60_000), series("n/gpu1", 81_559, &[0.0; 12], 0)],
                    2.0,
                    8.0,
                ),
                vec![FindingKind::OverProvisioned],
            ),
            (
                "small model on a whole H100: fits 1g.10gb",
                usage(vec![series("n/gpu0", 81_559, &[10.0; 12], 7_000)], 2.0, 8.0),
                vec![FindingKind::OverProvisioned],
            ),
            (
                "memory at the limit",
                usage(vec![series("n/gpu0", 81_559, &[97.0; 12], 80_000)], 2.0, 8.0),
                vec![FindingKind::MemoryBound],
            ),
            (
                "healthy",
                usage(vec![series("n/gpu0", 81_559, &[92.0; 12], 50_000)], 2.0, 8.0),
                vec![FindingKind::Healthy],
            ),
            (
                "two minutes is not enough",
                usage(vec![series("n/gpu0", 81_559, &[0.0; 3], 0)], 2.0, 8.0),
                vec![FindingKind::NotEnoughData],
            ),
        ];
        for (name, u, want) in cases {
            let a = advise(&u, &t);
            assert_eq!(kinds(&a), want, "{name}: {:#?}", a.findings);
        }
    }

    /// A job that ended after a minute is judged on its whole life; one
    /// with too few samples is told why in past terms.
    #[test]
    fn an_ended_job_shorter_than_the_span_is_judged_on_its_samples() {
        let t = Thresholds::default();
        let second = |utils: &[f64]| {
            let mut s = series("n/gpu0", 81_559, utils, 0);
            for (i, p) in s.points.iter_mut().enumerate() {
                p.at = Time::from_secs(i as i64);
            }
            s
        };
        let mut running = usage(vec![second(&[0.0; 60])], 2.0, 8.0);
        assert_eq!(kinds(&advise(&running, &t)), vec![FindingKind::NotEnoughData], "a minute of a running job");
        running.ended = true;
        assert_eq!(kinds(&advise(&running, &t)), vec![FindingKind::IdleGpu], "the same minute, ended");
        let mut short = usage(vec![second(&[0.0; 3])], 2.0, 8.0);
        short.ended = true;
        let a = advise(&short, &t);
        assert_eq!(kinds(&a), vec![FindingKind::NotEnoughData]);
        assert!(a.findings[0].summary.starts_with("not enough telemetry to judge: 3 samples"), "{}", a.findings[0]);
    }

    #[test]
    fn findings_name_the_fix_and_price_the_waste() {
        let t = Thresholds::default();
        let a = advise(&usage(vec![series("n/gpu0", 81_559, &[10.0; 12], 7_000)], 2.0, 8.0), &t);
        let f = &a.findings[0];
        assert!(f.summary.contains("1g.10gb"), "{}", f.summary);
        assert!(f.suggestions[0].contains("--mig 1g.10gb"));
        // One hour of a whole GPU, of which 6/7 were not needed, at 4 $/h.
        assert!((f.wasted_gpu_hours - 6.0 / 7.0).abs() < 1e-9, "{}", f.wasted_gpu_hours);
        assert!((f.wasted_usd.unwrap_or(0.0) - 24.0 / 7.0).abs() < 1e-9);

        let idle = advise(&usage(vec![series("n/gpu0", 81_559, &[0.0; 12], 0)], 0.0, 8.0), &t);
        assert!((idle.findings[0].wasted_usd.unwrap_or(0.0) - 4.0).abs() < 1e-9);
        let starved = advise(&usage(vec![series("n/gpu0", 32_480, &SWING, 30_994)], 1.0, 8.0), &t);
        assert!(starved.findings[0].evidence.iter().any(|e| e.contains("oscillating")), "{:?}", starved.findings[0]);
    }

    #[test]
    fn absent_utilisation_is_not_idleness() {
        // A MIG instance reports no utilisation: no idle or starved finding can be made from it.
        let mut d = series("n/gpu0 (3g.40gb)", 40_448, &[0.0; 12], 30_000);
        for p in &mut d.points {
            p.util = None;
        }
        d.mig_profile = Some("3g.40gb".parse().expect("profile"));
        let a = advise(&usage(vec![d], 1.0, 8.0), &Thresholds::default());
        assert!(!kinds(&a).contains(&FindingKind::IdleGpu), "{:?}", kinds(&a));
        assert!(!kinds(&a).contains(&FindingKind::InputBound));
    }
}
