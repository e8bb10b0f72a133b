//! GPU fault traces through the simulator (issue 38): the same core
//! decisions as the daemon's. A GPU that falls off the bus is quarantined,
//! the job on it requeued (losing its work, no checkpoint), nothing new goes
//! there until a `restore` line; a bad trace line or an unknown GPU is
//! refused saying which.

use std::time::Duration;

use gpool_core::Policy;
use gpool_sim::engine::{Estimates, SimConfig, SimResult, run};
use gpool_sim::faults::parse;
use gpool_sim::trace::TraceJob;
use gpool_sim::{cluster, metrics};

fn job(line: usize, submit_s: f64, duration_s: f64, gpus: u32) -> TraceJob {
    TraceJob {
        line,
        submit_s,
        duration_s,
        gpus,
        group: "g".into(),
        gpu_models: Vec::new(),
        cpus_milli: 0,
        memory_mb: 0,
        mig: None,
        gpu_milli: None,
        kind: None,
    }
}

fn sim(jobs: &[TraceJob], faults: &str) -> Result<SimResult, gpool_sim::engine::SimError> {
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("fifo").expect("policy"),
        nodes: cluster::uniform(1, 4, "H100-80GB"),
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        fleet: None,
        power_budgets: Vec::new(),
        faults: parse(faults).expect("fault trace"),
    };
    run(jobs, &cfg, |_, _| {})
}

#[test]
fn a_gpu_off_the_bus_requeues_its_job_and_holds_a_four_gpu_job_until_it_is_restored() {
    // A 2-GPU job from 0 to 1000 s; a 4-GPU job submitted at 200 s.
    let jobs = [job(1, 0.0, 1000.0, 2), job(2, 200.0, 100.0, 4)];
    let clean = sim(&jobs, "").expect("simulation");
    assert_eq!(clean.faults, None);
    assert_eq!(clean.jobs[1].first_start_s, Some(1000.0));
    // GPU 0 falls off the bus at 500 s and is restored at 5000 s.
    let hit = sim(&jobs, "at,node,gpu,fault\n500,node-0000,0,xid:79\n5000,node-0000,0,restore\n").expect("simulation");
    let f = hit.faults.clone().expect("a fault report");
    assert_eq!((f.quarantines, f.requeued), (1, 1));
    assert!((f.lost_gpu_hours - 500.0 * 2.0 / 3600.0).abs() < 1e-9, "{f:?}");
    assert!((f.out_gpu_hours - 4500.0 / 3600.0).abs() < 1e-9, "{f:?}");
    // The 2-GPU job runs again at once on two of the three good GPUs, from the start.
    assert_eq!(hit.jobs[0].preemptions, 1);
    assert_eq!(hit.jobs[0].end_s, Some(1500.0));
    // The 4-GPU job cannot start before GPU 0 is back.
    assert_eq!(hit.jobs[1].first_start_s, Some(5000.0));
    let (c, h) = (metrics::summarize(&clean), metrics::summarize(&hit));
    assert!(h.avg_jct_s > c.avg_jct_s, "faults cost time: {} vs {}", h.avg_jct_s, c.avg_jct_s);
}

#[test]
fn an_applications_xid_requeues_only_its_job_and_the_gpu_stays() {
    let jobs = [job(1, 0.0, 1000.0, 1), job(2, 600.0, 100.0, 4)];
    let r = sim(&jobs, "100,node-0000,0,xid:13\n").expect("simulation");
    let f = r.faults.expect("report");
    assert_eq!((f.quarantines, f.requeued), (0, 1));
    assert_eq!(r.jobs[0].end_s, Some(1100.0), "ran again from the start at 100 s");
    assert_eq!(r.jobs[1].first_start_s, Some(1100.0), "all four GPUs in service");
}

#[test]
fn faults_on_gpus_the_cluster_lacks_are_refused() {
    let jobs = [job(1, 0.0, 10.0, 1)];
    let err = sim(&jobs, "5,node-0009,0,ecc\n").expect_err("no such node").to_string();
    assert!(err.contains("no node \"node-0009\""), "{err}");
    let err = sim(&jobs, "5,node-0000,4,gone\n").expect_err("no GPU 4").to_string();
    assert!(err.contains("node node-0000 has no GPU 4"), "{err}");
}
