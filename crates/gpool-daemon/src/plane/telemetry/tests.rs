//! Tests of the telemetry store: accounting, rows, alerts, shared GPUs.
use super::*;
use crate::plane::usage_rows::summary_from_rows;

fn holder(job: u64) -> Holder {
    Holder {
        job,
        name: "train".into(),
        user: "ana".into(),
        team: "ml".into(),
        queue: "default".into(),
        cpus: Some(8.0),
        mig_profile: None,
        memory_total_mb: 81_559,
        share_milli: None,
    }
}

fn report(at_s: i64, util: [f64; 2]) -> NodeReport {
    NodeReport {
        node: "n1".into(),
        at_ms: at_s * 1000,
        gpus: (0..2)
            .map(|i| GpuSample {
                index: i,
                uuid: format!("GPU-{i}"),
                gpu_util_pct: Some(util[i as usize]),
                memory_used_mb: Some(40_000),
                memory_total_mb: Some(81_559),
                ..GpuSample::default()
            })
            .collect(),
        replicas: vec![(crate::protocol::ReplicaKey { job: 7, attempt: 1, rank: 0 }, 2.0)],
        ..NodeReport::default()
    }
}

#[test]
fn allocated_devices_accumulate_gpu_hours_rows_and_idle_time() {
    let mut t = Telemetry::new(TelemetryConfig { resolution: Duration::from_secs(60), rules: vec![] });
    let holders: HashMap<DevRef, Holder> = [(DevRef::Gpu(0), holder(7))].into_iter().collect();
    let mut rows = Vec::new();
    for i in 0..=12 {
        // GPU 0 (job 7) at 3% for the first minute, then busy; GPU 1 is nobody's.
        let u = if i <= 6 { 3.0 } else { 90.0 };
        rows.extend(t.on_report(report(i * 10, [u, 0.0]), &holders).rows);
    }
    assert_eq!(rows.len(), 2, "one row per minute of GPU 0: {rows:?}");
    assert_eq!(rows[0].device, "n1/gpu0");
    assert_eq!(rows[0].gpu_util, Some(3.0));
    assert_eq!(rows[0].cpu_cores, Some(2.0));
    let s = t.summary(7).expect("summary");
    assert!((s.gpu_hours - 120.0 / 3600.0).abs() < 1e-9, "{}", s.gpu_hours);
    assert!((s.idle_gpu_hours - 60.0 / 3600.0).abs() < 1e-9, "{}", s.idle_gpu_hours);
    assert_eq!(s.peak_memory_mb, Some(40_000));
    let (last, _, _) = t.end_job(7);
    assert_eq!(last.len(), 1, "the open minute is flushed at the end");
    assert!(t.summary(7).is_none());
    let idle = t.counters.idle_allocated_gpu_secs.get(&("ana".into(), "ml".into())).copied();
    assert_eq!(idle, Some(60.0));
    let stored = summary_from_rows(&[rows, last].concat(), Duration::from_secs(60));
    assert_eq!(stored.peak_memory_mb, Some(40_000));
}

#[test]
fn an_idle_allocated_gpu_raises_an_alert_and_ending_the_job_resolves_it() {
    let rule = alert::Rule {
        name: "Idle".into(),
        scope: alert::Scope::AllocatedGpu,
        metric: alert::Metric::GpuUtil,
        comparison: alert::Comparison::Below,
        threshold: 5.0,
        hold: Duration::from_secs(20),
        severity: alert::Severity::Warning,
    };
    let job_rule = alert::Rule { name: "JobIdle".into(), scope: alert::Scope::Job, ..rule.clone() };
    let mut t = Telemetry::new(TelemetryConfig { resolution: Duration::from_secs(60), rules: vec![rule, job_rule] });
    let holders: HashMap<DevRef, Holder> = [(DevRef::Gpu(1), holder(7))].into_iter().collect();
    let mut fired = Vec::new();
    for i in 0..4 {
        fired.extend(t.on_report(report(i * 10, [0.0, 0.0]), &holders).transitions);
    }
    let names: Vec<(&str, &str)> = fired.iter().map(|x| (x.rule.as_str(), x.subject.as_str())).collect();
    assert_eq!(names, vec![("Idle", "n1/gpu1"), ("JobIdle", "job/7")], "GPU 0 is idle but nobody's");
    let (_, _, resolved) = t.end_job(7);
    assert_eq!(resolved.len(), 1);
    assert!(!resolved[0].firing);
}

/// A quarter and three quarters of GPU 0: each job gets the memory of its
/// own processes, and the utilisation its processes had where the backend
/// says (else the GPU's, split by the shares); GPU-hours count the share.
#[test]
fn a_shared_gpu_is_accounted_per_job() {
    let share = |job, milli, mb| Holder { share_milli: Some(milli), memory_total_mb: mb, ..holder(job) };
    let holders: HashMap<DevRef, Holder> = [
        (DevRef::Share { gpu: 0, job: 1 }, share(1, 250, 20_000)),
        (DevRef::Share { gpu: 0, job: 2 }, share(2, 750, 60_000)),
    ]
    .into_iter()
    .collect();
    let process = |pid, mb, util| gpool_gpu::GpuProcess {
        pid,
        name: None,
        used_memory_mb: Some(mb),
        sm_util_pct: util,
        gi_id: None,
        ci_id: None,
    };
    for per_process in [false, true] {
        let mut t = Telemetry::new(TelemetryConfig { resolution: Duration::from_secs(10), rules: vec![] });
        let mut rows = Vec::new();
        for i in 0..=2 {
            let mut r = report(i * 10, [80.0, 0.0]);
            r.gpus[0].processes =
                vec![process(101, 5_000, per_process.then_some(70)), process(202, 12_000, per_process.then_some(10))];
            r.pid_jobs = [(101, 1), (202, 2)].into_iter().collect();
            rows.extend(t.on_report(r, &holders).rows);
        }
        let first = |job| rows.iter().find(|r| r.job == job).cloned().expect("a row");
        let (one, two) = (first(1), first(2));
        assert_eq!((one.memory_mb, two.memory_mb), (Some(5_000), Some(12_000)));
        assert_eq!((one.memory_total_mb, two.memory_total_mb), (20_000, 60_000), "their shares' memory");
        let want = if per_process { (Some(70.0), Some(10.0)) } else { (Some(20.0), Some(60.0)) };
        assert_eq!((one.gpu_util, two.gpu_util), want, "per process: {per_process}");
        let hours = |job| t.summary(job).expect("summary").gpu_hours;
        assert!((hours(1) - 0.25 * 20.0 / 3600.0).abs() < 1e-9, "{}", hours(1));
        assert!((hours(2) - 0.75 * 20.0 / 3600.0).abs() < 1e-9, "{}", hours(2));
    }
}
