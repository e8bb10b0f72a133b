//! `gpool sim --elastic` (issue 41) on schedules worked out by hand, with
//! linear scaling so the numbers stay round: a job runs at `size / gpus` of
//! the speed its trace recorded.

use std::time::Duration;

use gpool_core::Policy;
use gpool_sim::cluster;
use gpool_sim::elastic::ElasticModel;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::trace::{Format, parse};

fn replay(rows: &str, gpus: u32) -> (Vec<(f64, f64)>, u64) {
    let jobs = parse(&format!("submit,duration,gpus,user\n{rows}\n"), Format::Csv).expect("trace");
    let policy = Policy::by_name("default").expect("policy");
    let cfg = SimConfig {
        elastic: Some(ElasticModel { efficiency: 1.0, ..ElasticModel::default() }),
        reservations: Vec::new(),
        estimates: Estimates::for_policy(&policy),
        policy,
        nodes: cluster::uniform(1, gpus, "H100-80GB"),
        restart_delay: Duration::ZERO,
        preemptible: true,
        sample: Duration::from_secs(60),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let r = run(&jobs, &cfg, |_, _| {}).expect("simulation");
    let mut got: Vec<(usize, f64, f64)> =
        r.jobs.iter().map(|j| (j.line, j.first_start_s.unwrap_or(f64::NAN), j.end_s.unwrap_or(f64::NAN))).collect();
    got.sort_by_key(|g| g.0);
    (got.into_iter().map(|(_, s, e)| (s, e)).collect(), r.resizes)
}

fn close(got: &[(f64, f64)], want: &[(f64, f64)]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g.0 - w.0).abs() < 0.01 && (g.1 - w.1).abs() < 0.01)
}

#[test]
fn a_job_alone_grows_to_its_maximum_at_start() {
    // 4 GPUs asked, 2..8 allowed: it starts with 8 and runs twice as fast.
    let (got, resizes) = replay("0,100,4,a", 8);
    assert!(close(&got, &[(0.0, 50.0)]), "{got:?}");
    assert_eq!(resizes, 0, "growing at the start costs no restart");
}

#[test]
fn an_arrival_takes_lent_replicas_and_the_survivor_grows_back() {
    // A starts at 8 (speed 2). At 10 s B arrives and needs its minimum, 2:
    // A, with 80 s of work left, restarts at 6 (speed 1.5) and ends at
    // 10 + 80 / 1.5 = 63.33. B ran at 2 (speed 0.5) until then, did 26.67 s
    // of work, and has run over 30 s (resize_after): it grows to 8 and ends
    // at 63.33 + 73.33 / 2 = 100.
    let (got, resizes) = replay("0,100,4,a\n10,100,4,b", 8);
    assert!(close(&got, &[(0.0, 63.334), (10.0, 100.001)]), "{got:?}");
    assert_eq!(resizes, 2, "one shrink, one growth");
}
