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
            ..DeviceSeries::default()
        });
        d.points.push(DevicePoint {
            at: Time::from_millis(r.at_ms),
            util: r.gpu_util,
            memory_used_mb: r.memory_mb,
            ..DevicePoint::default()
        });
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
            .map_or(1.0, |p| f64::from(p.compute()) / 7.0);
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

/// Points kept per device of a job's last full-resolution series when it
/// ends: enough for the advisor to judge a short job (minute rows give a
/// one-minute job two points), small enough to keep for every job (8 GPUs:
/// about 25 KB).
pub const FINAL_SERIES_POINTS: usize = 240;

/// Where the store keeps a job's last series (a meta key).
pub fn final_series_key(job: u64) -> String {
    format!("series/{job}")
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FinalSeries {
    devices: Vec<FinalDevice>,
    /// (ms, cores)
    cpu: Vec<(i64, f64)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FinalDevice {
    name: String,
    total_mb: u64,
    /// (ms, utilisation %, memory MiB)
    points: Vec<(i64, Option<f64>, Option<u64>)>,
}

/// Every `stride`-th item and the last, so that at most `max` are left.
fn thinned<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    let stride = v.len().div_ceil(max.max(1)).max(1);
    let mut out: Vec<T> = v.iter().step_by(stride).copied().collect();
    if let Some(last) = v.last()
        && !(v.len() - 1).is_multiple_of(stride)
    {
        out.push(*last);
    }
    out
}

/// A running job's full-resolution series, thinned, as the store keeps it.
pub fn encode_final_series(u: &JobUsage) -> String {
    let devices = u
        .devices
        .iter()
        .map(|d| FinalDevice {
            name: d.name.clone(),
            total_mb: d.memory_total_mb,
            points: thinned(&d.points, FINAL_SERIES_POINTS)
                .into_iter()
                .map(|p| (p.at.as_millis(), p.util, p.memory_used_mb))
                .collect(),
        })
        .collect();
    let cpu = thinned(&u.cpu, FINAL_SERIES_POINTS).into_iter().map(|c| (c.at.as_millis(), c.cores)).collect();
    serde_json::to_string(&FinalSeries { devices, cpu }).unwrap_or_default()
}

/// The advisor's input from [`encode_final_series`]; `None` if unreadable.
pub fn decode_final_series(text: &str) -> Option<JobUsage> {
    let f: FinalSeries = serde_json::from_str(text).ok()?;
    Some(JobUsage {
        devices: f
            .devices
            .into_iter()
            .map(|d| DeviceSeries {
                mig_profile: d.name.rsplit_once('(').and_then(|(_, p)| p.trim_end_matches(')').parse().ok()),
                name: d.name,
                memory_total_mb: d.total_mb,
                points: d
                    .points
                    .into_iter()
                    .map(|(at, util, mem)| DevicePoint {
                        at: Time::from_millis(at),
                        util,
                        memory_used_mb: mem,
                        ..DevicePoint::default()
                    })
                    .collect(),
                ..DeviceSeries::default()
            })
            .collect(),
        cpu: f.cpu.into_iter().map(|(at, cores)| CpuPoint { at: Time::from_millis(at), cores }).collect(),
        ..JobUsage::default()
    })
}

/// How long a usage's device series spans, and its most points on one device.
pub fn coverage(u: &JobUsage) -> (Duration, usize) {
    let span = u
        .devices
        .iter()
        .filter_map(|d| Some(d.points.last()?.at.since(d.points.first()?.at)))
        .max()
        .unwrap_or_default();
    (span, u.devices.iter().map(|d| d.points.len()).max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_series_is_thinned_and_read_back() {
        let points: Vec<DevicePoint> = (0..1000)
            .map(|i| DevicePoint {
                at: Time::from_millis(i * 1000),
                util: Some(i as f64 % 100.0),
                memory_used_mb: Some(7),
                ..DevicePoint::default()
            })
            .collect();
        let u = JobUsage {
            devices: vec![DeviceSeries {
                name: "n/gpu0/mig-1(1g.10gb)".into(),
                memory_total_mb: 9_984,
                mig_profile: None,
                points,
                ..DeviceSeries::default()
            }],
            ..JobUsage::default()
        };
        let back = decode_final_series(&encode_final_series(&u)).expect("reads back");
        let d = &back.devices[0];
        assert!(d.points.len() <= FINAL_SERIES_POINTS + 1, "{}", d.points.len());
        assert_eq!(
            (d.points[0].at, d.points.last().map(|p| p.at)),
            (Time::from_millis(0), Some(Time::from_millis(999_000)))
        );
        assert_eq!(d.mig_profile.as_ref().map(ToString::to_string).as_deref(), Some("1g.10gb"));
        assert_eq!(coverage(&back), (Duration::from_secs(999), d.points.len()));
        assert!(decode_final_series("not json").is_none());
    }
}
