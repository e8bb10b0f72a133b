//! Issue 22: `gpool sim` on a fleet of several accelerator kinds. Jobs run
//! only on the kind they ask for, any-GPU jobs on any GPU kind (not TPUs),
//! and the summary reports each kind apart.

use std::time::Duration;

use gpool_core::{DeviceKind, Policy};
use gpool_sim::cluster;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::metrics::summarize;
use gpool_sim::trace::{Format, parse};

const FLEET: &str = "nodes:
  - {name: nv, count: 1, gpus: 8, model: H100-80GB}
  - {name: amd, count: 1, gpus: 8, model: MI300X-192GB, kind: amd.com/gpu}
  - {name: tpu, count: 1, gpus: 4, model: TPU-v5p, kind: google.com/tpu}
";

fn sim(rows: &str) -> gpool_sim::metrics::Summary {
    let trace = parse(&format!("submit,duration,gpus,user,kind\n{rows}"), Format::Csv).expect("trace");
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("default").expect("policy"),
        nodes: cluster::from_yaml(FLEET).expect("fleet"),
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    summarize(&run(&trace, &cfg, |_, _| {}).expect("sim"))
}

fn row<'a>(s: &'a gpool_sim::metrics::Summary, kind: &str) -> &'a gpool_sim::metrics::KindSummary {
    s.by_kind.iter().find(|k| k.kind == kind).unwrap_or_else(|| panic!("no {kind} row: {:?}", s.by_kind))
}

#[test]
fn jobs_of_one_kind_queue_for_its_devices_while_the_others_idle() {
    // Ten 8-GPU AMD jobs of 100 s: one at a time on the one AMD node, NVIDIA idle.
    let rows: String = (0..10).map(|_| "0,100,8,a,amd.com/gpu\n").collect();
    let s = sim(&rows);
    let amd = row(&s, DeviceKind::AmdGpu.resource());
    assert_eq!((amd.jobs, amd.unfinished, amd.devices), (10, 0, 8));
    assert_eq!(s.makespan_s, 1000.0, "one after another");
    assert!((amd.allocated - 1.0).abs() < 1e-9, "{amd:?}");
    assert_eq!(row(&s, "nvidia.com/gpu").allocated, 0.0);
    assert_eq!(row(&s, "google.com/tpu").allocated, 0.0);
}

#[test]
fn any_gpu_jobs_use_every_gpu_kind_but_not_tpus() {
    let rows: String = (0..4).map(|_| "0,100,8,a,any\n").collect();
    let s = sim(&rows);
    assert_eq!(s.makespan_s, 200.0, "two at a time: one on NVIDIA, one on AMD");
    assert_eq!(row(&s, "any GPU").jobs, 4);
    assert!((row(&s, "nvidia.com/gpu").allocated - 1.0).abs() < 1e-9);
    assert!((row(&s, "amd.com/gpu").allocated - 1.0).abs() < 1e-9);
    assert_eq!(row(&s, "google.com/tpu").allocated, 0.0);
}

#[test]
fn a_tpu_job_runs_on_chips_and_a_job_too_big_for_its_kind_is_rejected() {
    let s = sim("0,50,4,a,google.com/tpu\n0,50,16,b,amd.com/gpu\n");
    let tpu = row(&s, "google.com/tpu");
    assert_eq!((tpu.jobs, tpu.devices), (1, 4));
    assert_eq!(s.rejected, 1, "16 AMD GPUs: the fleet has 8");
}

#[test]
fn one_kind_of_device_and_jobs_that_name_none_need_no_rows_per_kind() {
    let trace = parse("submit,duration,gpus\n0,100,8\n0,100,8\n", Format::Csv).expect("trace");
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("default").expect("policy"),
        nodes: cluster::uniform(1, 8, "H100-80GB"),
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let s = summarize(&run(&trace, &cfg, |_, _| {}).expect("sim"));
    assert!(s.by_kind.is_empty(), "{:?}", s.by_kind);
}

#[test]
fn learned_estimates_come_from_the_jobs_that_ended_before() {
    // Five 100 s jobs one after another on one GPU, then a sixth.
    let rows: String = (0..6).map(|i| format!("{},100,1,a\n", i * 1000)).collect();
    let trace = parse(&format!("submit,duration,gpus,user\n{rows}"), Format::Csv).expect("trace");
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("sjf").expect("policy"),
        nodes: cluster::uniform(1, 1, "H100-80GB"),
        estimates: Estimates::parse("learned").expect("mode"),
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let r = run(&trace, &cfg, |_, _| {}).expect("sim");
    // Jobs 3 to 6 had two or more successes before them; each learned 100 s exactly.
    assert_eq!(r.learned, vec![(100.0, 100.0); 4]);
    let l = summarize(&r).learned.expect("learned summary");
    assert_eq!((l.jobs, l.median_abs_error_s, l.median_ratio), (4, 0.0, 1.0));
    assert!(Estimates::parse("learned:2").is_err_and(|e| e.contains("0 to 1")));
    assert!(Estimates::parse("guess").is_err_and(|e| e.contains("learned")));
}
