//! Elastic pools in the simulator: nodes made for a burst (a gang whole)
//! and deleted after the idle time, cost charged for the nodes' lives, spot
//! reclaims that lose the work since the last checkpoint, and the fallback
//! to on-demand while spot has no room.

use std::sync::Arc;
use std::time::Duration;

use gpool_core::pools::{NodeShape, PoolConfig, RetryRules};
use gpool_core::{Policy, Pool, PoolKind};
use gpool_sim::engine::{Estimates, SimConfig, SimResult, run};
use gpool_sim::fleet::FleetConfig;
use gpool_sim::spot::Availability;
use gpool_sim::trace::TraceJob;

fn pool(name: &str, kind: PoolKind, price: f64, min: u32, max: u32) -> PoolConfig {
    PoolConfig {
        pool: Pool { name: Arc::from(name), kind },
        shape: NodeShape {
            gpus: 8,
            gpu_model: Arc::from("V100-16GB"),
            gpu_memory_mb: 16 * 1024,
            cpus: 64,
            memory_mb: 488 * 1024,
            labels: Default::default(),
        },
        price_per_node_hour: price,
        min,
        max,
        boot_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        retry: RetryRules::default(),
    }
}

fn job(line: usize, submit_s: f64, duration_s: f64, gpus: u32) -> TraceJob {
    TraceJob {
        line,
        submit_s,
        duration_s,
        gpus,
        group: "vc".into(),
        gpu_models: Vec::new(),
        cpus_milli: 0,
        memory_mb: 0,
        mig: None,
        gpu_milli: None,
        kind: None,
    }
}

fn sim(jobs: &[TraceJob], fleet: FleetConfig) -> SimResult {
    let cfg = SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: Policy::by_name("fifo").expect("policy"),
        nodes: Vec::new(),
        estimates: Estimates::None,
        restart_delay: Duration::from_secs(60),
        preemptible: true,
        sample: Duration::from_secs(3600),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: Some(fleet),
    };
    run(jobs, &cfg, |_, _| {}).expect("simulation")
}

fn fleet(pools: Vec<PoolConfig>, availability: Vec<Option<Availability>>) -> FleetConfig {
    FleetConfig {
        pools,
        availability,
        max_dollars_per_hour: None,
        boot_delay: Duration::from_secs(120),
        checkpoint_interval: Duration::from_secs(1800),
        max_waiting: 1000,
    }
}

#[test]
fn a_burst_gets_nodes_a_gang_whole_and_they_go_after_the_idle_time() {
    // At t=0: a 16-GPU gang (2 nodes) and two 4-GPU jobs (one node), one hour each.
    let jobs = [job(1, 0.0, 3600.0, 16), job(2, 0.0, 3600.0, 4), job(3, 0.0, 3600.0, 4)];
    let r = sim(&jobs, fleet(vec![pool("od", PoolKind::OnDemand, 24.48, 0, 10)], vec![None]));
    let f = r.fleet.expect("a fleet report");
    assert_eq!(f.pools[0].created, 3, "two nodes for the gang, one for both small jobs");
    assert_eq!(f.peak_nodes, 3);
    for j in &r.jobs {
        assert_eq!(j.first_start_s, Some(120.0), "job {} starts when the nodes are up", j.line);
        assert_eq!(j.end_s, Some(3720.0));
    }
    // Charged from creation to the end of the run (the last event).
    let hours = f.pools[0].node_hours;
    assert!((hours - 3.0 * 3720.0 / 3600.0).abs() < 1e-6, "node-hours {hours}");
    assert!((f.total_dollars - hours * 24.48).abs() < 1e-6);
    assert_eq!(f.lost_gpu_hours, 0.0);

    // A later job finds the nodes gone after the idle time: new ones are made.
    let later = [job(1, 0.0, 3600.0, 8), job(2, 3720.0 + 700.0, 600.0, 8)];
    let r = sim(&later, fleet(vec![pool("od", PoolKind::OnDemand, 24.48, 0, 10)], vec![None]));
    let f = r.fleet.expect("report");
    assert_eq!(f.pools[0].created, 2, "the first node was deleted 600 s after it went idle");
    assert_eq!(r.jobs[1].first_start_s, Some(4420.0 + 120.0));
    // Node 1 lived 120 + 3600 + 600 s; node 2 from 4420 s to the end.
    let want = (4320.0 + (4420.0 + 120.0 + 600.0 - 4420.0)) / 3600.0;
    assert!((f.pools[0].node_hours - want).abs() < 1e-6, "{} vs {want}", f.pools[0].node_hours);
}

#[test]
fn a_reclaimed_job_loses_the_work_since_its_checkpoint_and_falls_back_to_on_demand() {
    // Spot is there for the first 3000 s, then gone for 10 hours.
    let mut data = vec![1.0; 10];
    data.extend(vec![0.0; 120]);
    let avail = Availability::from_samples(300.0, &data).expect("trace");
    let pools = vec![pool("spot", PoolKind::Spot, 2.75, 0, 4), pool("od", PoolKind::OnDemand, 24.48, 0, 4)];
    let r = sim(&[job(1, 0.0, 7200.0, 8)], fleet(pools, vec![Some(avail), None]));
    let f = r.fleet.expect("report");
    assert_eq!(f.pools[0].reclaimed, 1, "{f:?} {:?}", r.jobs);
    assert_eq!(f.reclaimed_jobs, 1);
    // Ran 120..3000 s on spot: 2880 s, one checkpoint at 1800 s; 1080 s of 8 GPUs lost.
    assert!((f.lost_gpu_hours - 1080.0 * 8.0 / 3600.0).abs() < 1e-6, "lost {}", f.lost_gpu_hours);
    assert!(f.pools[0].failed >= 1, "spot creations fail while it has no room");
    assert_eq!(f.pools[1].created, 1, "on-demand took over: {f:?} {:?}", r.jobs);
    let end = r.jobs[0].end_s.expect("finished");
    // Back on on-demand once spot failed twice (10 s back-off), booted 120 s, 60 s restart, 5400 s left.
    assert!(end > 3000.0 + 120.0 + 60.0 + 5400.0 - 1.0 && end < 3000.0 + 400.0 + 5400.0, "end {end}");
}

#[test]
fn a_fixed_pool_costs_its_size_for_the_whole_run() {
    let jobs = [job(1, 0.0, 3600.0, 8)];
    let r = sim(&jobs, fleet(vec![pool("fixed", PoolKind::OnDemand, 10.0, 3, 3)], vec![None]));
    let f = r.fleet.expect("report");
    assert_eq!(r.jobs[0].first_start_s, Some(0.0), "min nodes are up from the start");
    assert!((f.total_dollars - 3.0 * 10.0).abs() < 1e-6, "3 nodes × 1 h × $10: {}", f.total_dollars);
}
