//! A job's usage rebuilt from the rows the store keeps (a finished job, or
//! one that ran before the daemon restarted): the advisor's input and the
//! usage summary.

use std::collections::BTreeMap;
use std::time::Duration;

use gpool_api as api;
use gpool_core::MigProfile;
use gpool_core::advice::{CpuPoint, DevicePoint, DeviceSeries, JobUsage};
use gpool_core::time::Time;
use gpool_store::SampleRow;

/// Under this utilisation an allocated GPU counts as idle (percent).
pub const IDLE_UTIL: f64 = 5.0;

/// Rebuilds an advisor input from stored rows (a finished job, or one that
/// ran before the daemon restarted).
pub fn usage_from_rows(rows: &[SampleRow]) -> JobUsage {
    let mut devices: BTreeMap<&str, DeviceSeries> = BTreeMap::new();
    let mut cpu: BTreeMap<i64, f64> = BTreeMap::new();
    for r in rows {
        let d = devices.entry(r.device.as_str()).or_insert_with(|| DeviceSeries {
            name: r.device.clone(),
            memory_total_mb: r.memory_total_mb,
            mig_profile: r.device.rsplit_once('(').and_then(|(_, p)| p.trim_end_matches(')').parse().ok()),
            points: Vec::new(),
        });
        d.points.push(DevicePoint { at: Time::from_millis(r.at_ms), util: r.gpu_util, memory_used_mb: r.memory_mb });
        if let Some(c) = r.cpu_cores {
            cpu.insert(r.at_ms, c);
        }
    }
    JobUsage {
        devices: devices.into_values().collect(),
        cpu: cpu.into_iter().map(|(at, cores)| CpuPoint { at: Time::from_millis(at), cores }).collect(),
        ..JobUsage::default()
    }
}

/// A usage summary from stored rows.
pub fn summary_from_rows(rows: &[SampleRow], resolution: Duration) -> api::UsageSummary {
    let step = resolution.as_secs_f64();
    let mut s = api::UsageSummary::default();
    let (mut util_sum, mut util_n, mut cpu_sum, mut cpu_n) = (0.0, 0u64, 0.0, 0u64);
    for r in rows {
        let equiv = r
            .device
            .rsplit_once('(')
            .and_then(|(_, p)| p.trim_end_matches(')').parse::<MigProfile>().ok())
            .map_or(1.0, |p| f64::from(p.compute_slices) / 7.0);
        s.gpu_hours += step * equiv / 3600.0;
        if let Some(u) = r.gpu_util {
            util_sum += u;
            util_n += 1;
            if u < IDLE_UTIL {
                s.idle_gpu_hours += step * equiv / 3600.0;
            }
        }
        if let Some(m) = r.memory_mb {
            s.peak_memory_mb = Some(s.peak_memory_mb.map_or(m, |p| p.max(m)));
        }
        if let Some(c) = r.cpu_cores {
            cpu_sum += c;
            cpu_n += 1;
        }
    }
    s.mean_gpu_util = (util_n > 0).then(|| util_sum / util_n as f64);
    s.mean_cpu_cores = (cpu_n > 0).then(|| cpu_sum / cpu_n as f64);
    s
}
