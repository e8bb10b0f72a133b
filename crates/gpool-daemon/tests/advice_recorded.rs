//! The advisor on recorded telemetry of a real training job: a V100-32GB of
//! a DGX-2 sampled every 5 s by `nvidia-smi --query-gpu=… -l 5`
//! (data/nvidia-smi/v100-32gb-dgx2_query-gpu-util-timeseries_{a,b}.csv).

use std::time::Duration;

use gpool_core::advice::{DevicePoint, DeviceSeries, FindingKind, JobUsage, Thresholds, advise};
use gpool_core::time::Time;

/// `2020/11/12 13:48:11.412` → milliseconds since the epoch.
fn millis(ts: &str) -> i64 {
    let iso = format!("{}Z", ts.replace('/', "-").replacen(' ', "T", 1));
    gpool_api::time::parse_rfc3339(&iso).expect("timestamp")
}

fn recorded(name: &str) -> JobUsage {
    let path = format!("{}/../../data/nvidia-smi/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("recording");
    let rows = gpool_gpu::smi::parse_query_gpu(&text, None).expect("parses");
    let points: Vec<DevicePoint> = rows
        .iter()
        .map(|r| DevicePoint {
            at: Time::from_millis(millis(r.timestamp.as_deref().expect("timestamp"))),
            util: r.sample.gpu_util_pct,
            memory_used_mb: r.sample.memory_used_mb,
            ..DevicePoint::default()
        })
        .collect();
    let first = points.first().map_or(Time::from_millis(0), |p| p.at);
    let last = points.last().map_or(Time::from_millis(0), |p| p.at);
    JobUsage {
        devices: vec![DeviceSeries {
            name: "dgx2/gpu0".into(),
            memory_total_mb: rows[0].sample.memory_total_mb.expect("total"),
            mig_profile: None,
            points,
            ..DeviceSeries::default()
        }],
        runtime: last.since(first),
        price_per_gpu_hour: Some(3.06),
        ..JobUsage::default()
    }
}

/// The recordings are 50 and 80 seconds long: judge them on that.
fn thresholds() -> Thresholds {
    Thresholds { min_span: Duration::from_secs(45), ..Thresholds::default() }
}

#[test]
fn a_recorded_job_with_memory_pinned_and_utilisation_dropping_to_zero_is_input_bound() {
    let a = advise(&recorded("v100-32gb-dgx2_query-gpu-util-timeseries_b.csv"), &thresholds());
    let kinds: Vec<FindingKind> = a.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FindingKind::InputBound], "{:#?}", a.findings);
    let f = &a.findings[0];
    assert!(f.evidence.iter().any(|e| e.contains("30.3 GiB of 31.7 GiB")), "{:?}", f.evidence);
    assert!(f.evidence.iter().any(|e| e.contains("oscillating") && e.contains("p5 0%")), "{:?}", f.evidence);
    assert_eq!(a.summary.peak_memory_mb, Some(30_994));
    assert!(f.wasted_usd.is_some_and(|u| u > 0.0));
}

#[test]
fn a_recorded_busy_job_at_the_memory_limit_is_memory_bound_not_starved() {
    let a = advise(&recorded("v100-32gb-dgx2_query-gpu-util-timeseries_a.csv"), &thresholds());
    let kinds: Vec<FindingKind> = a.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, vec![FindingKind::MemoryBound], "{:#?}", a.findings);
    assert!(a.summary.mean_util.is_some_and(|m| m > 85.0), "{:?}", a.summary);
}
