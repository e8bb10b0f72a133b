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
        rank: None,
        model: None,
        numa_node: None,
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

/// Issue 24: a GPU slowing down for heat in a two-GPU gang is marked
/// degraded (an alert with the reason), its replica is named the straggler
/// (an alert naming it), and the energy of the job's samples is counted.
#[test]
fn a_hot_gpu_of_a_gang_is_degraded_its_replica_named_and_energy_counted() {
    let mut t = Telemetry::new(TelemetryConfig::default());
    let holders: HashMap<DevRef, Holder> = [
        (DevRef::Gpu(0), Holder { rank: Some(0), model: Some("H100-80GB".into()), ..holder(7) }),
        (DevRef::Gpu(1), Holder { rank: Some(1), model: Some("H100-80GB".into()), ..holder(7) }),
    ]
    .into_iter()
    .collect();
    let mut heat = Vec::new();
    let mut stragglers = Vec::new();
    let mut fired = Vec::new();
    for i in 0..=15 {
        let mut r = report(i, [100.0, 100.0]);
        for g in &mut r.gpus {
            let hot = g.index == 1;
            g.power_draw_w = Some(if hot { 500.0 } else { 700.0 });
            g.temperature_c = Some(if hot { 91.0 } else { 75.0 });
            g.slowdown_temperature_c = Some(90.0);
            g.sm_clock_mhz = Some(if hot { 1188 } else { 1980 });
            g.throttle_reasons = Some(if hot { vec!["hw_thermal_slowdown".into()] } else { Vec::new() });
        }
        let out = t.on_report(r, &holders);
        heat.extend(out.heat);
        stragglers.extend(out.stragglers.into_iter().map(|(job, s)| (i, job, s)));
        fired.extend(out.transitions.into_iter().filter(|x| x.firing).map(|x| (i, x.rule, x.summary)));
    }
    assert_eq!(heat, [(1, HeatChange::Degraded("hw_thermal_slowdown at 91 °C".into()))], "after 10 s hot");
    assert_eq!(t.degraded("n1", 1), Some("hw_thermal_slowdown at 91 °C"));
    assert_eq!(t.degraded_on("n1"), [1]);
    let (first, job, s) = stragglers.first().expect("a straggler");
    assert_eq!(
        (*first, *job, s.device.as_str(), s.node.as_str(), s.gpu, s.rank),
        (2, 7, "n1/gpu1", "n1", Some(1), Some(1))
    );
    assert_eq!(
        s.to_string(),
        "replica 1 on n1/gpu1 holds the gang back: its GPU slows down for heat (hw_thermal_slowdown)"
    );
    let rules: Vec<(i64, &str)> = fired.iter().map(|(i, r, _)| (*i, r.as_str())).collect();
    assert_eq!(rules, [(2, "GangStraggler"), (10, "GpuThermalSlowdown")]);
    assert!(
        fired[0]
            .2
            .ends_with("replica 1 on n1/gpu1 holds the gang back: its GPU slows down for heat (hw_thermal_slowdown)"),
        "{}",
        fired[0].2
    );
    assert!(fired[1].2.ends_with("degraded: hw_thermal_slowdown at 91 °C"), "{}", fired[1].2);
    // 15 s of 700 W + 500 W.
    let wh = t.summary(7).and_then(|s| s.energy_wh).expect("energy");
    assert!((wh - 15.0 * 1200.0 / 3600.0).abs() < 1e-9, "{wh}");
    assert_eq!(t.counters.energy_joules.get(&("ana".into(), "ml".into())).copied(), Some(15.0 * 1200.0));
    // The job's advice names the straggler too.
    let usage = t.job_usage(7).expect("usage");
    assert!(usage.devices.iter().all(|d| d.node == "n1" && d.model.as_deref() == Some("H100-80GB")));
    let advice = gpool_core::advice::advise(&usage, &gpool_core::advice::Thresholds::default());
    assert_eq!(advice.findings[0].kind, gpool_core::advice::FindingKind::Straggler);
}
