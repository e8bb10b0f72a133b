//! Summary metrics of a simulation run.

use std::collections::BTreeMap;

use crate::engine::SimResult;

/// The figures `gpool sim` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub jobs: usize,
    pub unfinished: usize,
    pub rejected: usize,
    pub avg_jct_s: f64,
    pub median_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_queue_s: f64,
    pub p99_queue_s: f64,
    pub makespan_s: f64,
    /// Allocated GPU-seconds over capacity × makespan.
    pub gpu_utilization: f64,
    /// Mean of max(1, JCT / max(duration, 10 s)).
    pub avg_bounded_slowdown: f64,
    /// Jain's index over the groups' (users'/VCs') mean bounded slowdowns: 1 = equal.
    pub jain_fairness: f64,
    pub preemptions: u64,
    pub sched_calls: u64,
    pub sched_us_per_call: f64,
    pub sched_max_ms: f64,
    pub wall_s: f64,
    /// Per accelerator kind, when the cluster or the jobs have more than one (else empty).
    pub by_kind: Vec<KindSummary>,
    /// With learned estimates: how many jobs got one, and their median
    /// absolute error and median ratio (estimate ÷ true duration).
    pub learned: Option<LearnedSummary>,
}

/// How good learned estimates were.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedSummary {
    pub jobs: usize,
    pub median_abs_error_s: f64,
    pub median_ratio: f64,
}

fn learned(r: &SimResult) -> Option<LearnedSummary> {
    if r.learned.is_empty() {
        return None;
    }
    let mut err: Vec<f64> = r.learned.iter().map(|(e, d)| (e - d).abs()).collect();
    let mut ratio: Vec<f64> = r.learned.iter().map(|(e, d)| e / d.max(1.0)).collect();
    err.sort_by(f64::total_cmp);
    ratio.sort_by(f64::total_cmp);
    Some(LearnedSummary {
        jobs: r.learned.len(),
        median_abs_error_s: percentile(&err, 50.0),
        median_ratio: percentile(&ratio, 50.0),
    })
}

/// The jobs that asked for one accelerator kind (or for any GPU), and that kind's devices.
#[derive(Clone, Debug, PartialEq)]
pub struct KindSummary {
    /// `nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`, or `any GPU`.
    pub kind: String,
    pub jobs: usize,
    pub unfinished: usize,
    pub avg_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_queue_s: f64,
    /// Devices of the kind (none for `any GPU`).
    pub devices: u64,
    /// Their allocated device-seconds over devices × makespan.
    pub allocated: f64,
}

/// The per-kind rows: one per kind that has devices or jobs, when the fleet
/// has several kinds or jobs name one.
fn by_kind(r: &SimResult, makespan: f64) -> Vec<KindSummary> {
    use gpool_core::DeviceKind;
    let kinds: Vec<Option<DeviceKind>> = DeviceKind::ALL.into_iter().map(Some).chain([None]).collect();
    let rows: Vec<KindSummary> = kinds
        .into_iter()
        .filter_map(|k| {
            let jobs: Vec<_> = r.jobs.iter().filter(|j| j.kind == k && j.gpus > 0).collect();
            let devices = k.map_or(0, |k| r.kinds.devices[k.index()]);
            if jobs.is_empty() && devices == 0 {
                return None;
            }
            let mut jct: Vec<f64> = jobs.iter().filter_map(|j| j.jct_s()).collect();
            jct.sort_by(f64::total_cmp);
            let queue: Vec<f64> = jobs.iter().filter(|j| j.end_s.is_some()).filter_map(|j| j.queue_s()).collect();
            let allocated_s = k.map_or(0.0, |k| r.kinds.allocated_s[k.index()]);
            Some(KindSummary {
                kind: k.map_or_else(|| "any GPU".to_string(), |k| k.resource().to_string()),
                jobs: jct.len(),
                unfinished: jobs.len() - jct.len(),
                avg_jct_s: mean(&jct),
                p99_jct_s: percentile(&jct, 99.0),
                avg_queue_s: mean(&queue),
                devices,
                allocated: if devices > 0 && makespan > 0.0 { allocated_s / (devices as f64 * makespan) } else { 0.0 },
            })
        })
        .collect();
    // One kind of device and jobs that name none: the summary says it all.
    let device_kinds = r.kinds.devices.iter().filter(|d| **d > 0).count();
    let named = r.jobs.iter().any(|j| j.kind.is_some());
    if device_kinds > 1 || named { rows } else { Vec::new() }
}

/// Slowdown threshold: jobs shorter than this count as this long.
pub const BOUNDED_SLOWDOWN_TAU_S: f64 = 10.0;

/// Nearest-rank percentile of sorted values (`p` in 0..=100).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// Jain's fairness index of `xs`: (Σx)² / (n·Σx²).
pub fn jain(xs: &[f64]) -> f64 {
    let (s, s2): (f64, f64) = xs.iter().fold((0.0, 0.0), |(a, b), x| (a + x, b + x * x));
    if xs.is_empty() || s2 == 0.0 { 1.0 } else { s * s / (xs.len() as f64 * s2) }
}

pub fn summarize(r: &SimResult) -> Summary {
    let finished: Vec<_> = r.jobs.iter().filter(|j| j.end_s.is_some()).collect();
    let mut jct: Vec<f64> = finished.iter().filter_map(|j| j.jct_s()).collect();
    let mut queue: Vec<f64> = finished.iter().filter_map(|j| j.queue_s()).collect();
    jct.sort_by(f64::total_cmp);
    queue.sort_by(f64::total_cmp);
    let first_submit = r.jobs.iter().map(|j| j.submit_s).fold(f64::INFINITY, f64::min);
    let last_end = finished.iter().filter_map(|j| j.end_s).fold(f64::NEG_INFINITY, f64::max);
    let makespan = if finished.is_empty() { 0.0 } else { last_end - first_submit };
    let busy: f64 = finished.iter().map(|j| j.duration_s * f64::from(j.gpus)).sum();
    let slowdown = |j: &&crate::engine::JobRecord| {
        j.jct_s().map_or(1.0, |t| (t / j.duration_s.max(BOUNDED_SLOWDOWN_TAU_S)).max(1.0))
    };
    let slowdowns: Vec<f64> = finished.iter().map(slowdown).collect();
    let mut per_group: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for j in &finished {
        per_group.entry(&j.group).or_default().push(slowdown(j));
    }
    let group_means: Vec<f64> = per_group.values().map(|v| mean(v)).collect();
    Summary {
        jobs: finished.len(),
        unfinished: r.jobs.len() - finished.len(),
        rejected: r.rejected.len(),
        avg_jct_s: mean(&jct),
        median_jct_s: percentile(&jct, 50.0),
        p99_jct_s: percentile(&jct, 99.0),
        avg_queue_s: mean(&queue),
        p99_queue_s: percentile(&queue, 99.0),
        makespan_s: makespan,
        gpu_utilization: if makespan > 0.0 { busy / (r.capacity_gpus as f64 * makespan) } else { 0.0 },
        avg_bounded_slowdown: mean(&slowdowns),
        jain_fairness: jain(&group_means),
        preemptions: r.preemptions,
        sched_calls: r.sched_calls,
        sched_us_per_call: if r.sched_calls > 0 {
            r.sched_time.as_secs_f64() * 1e6 / r.sched_calls as f64
        } else {
            0.0
        },
        sched_max_ms: r.sched_max.as_secs_f64() * 1000.0,
        wall_s: r.wall.as_secs_f64(),
        by_kind: by_kind(r, makespan),
        learned: learned(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_jain_match_their_definitions() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0), percentile(&v, 100.0)), (50.0, 99.0, 100.0));
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(jain(&[1.0, 1.0, 1.0]), 1.0);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }
}
