//! `gpool sim --reservation`: the scheduler's own advance-reservation rules
//! in a replay (issue 42). GPUs set aside over a window are kept from every
//! trace job whose planned end does not come by the window's start.

use std::time::Duration;

use gpool_core::{Policy, ReservationRequest, Time};
use gpool_sim::cluster;
use gpool_sim::engine::{Estimates, SimConfig, run};
use gpool_sim::trace::{Format, parse};

fn replay(policy: &str, rows: &str, reservations: Vec<ReservationRequest>) -> Vec<(f64, f64)> {
    let jobs = parse(&format!("submit,duration,gpus,user\n{rows}\n"), Format::Csv).expect("trace");
    let policy = Policy::by_name(policy).expect("policy");
    let cfg = SimConfig {
        elastic: None,
        reservations,
        estimates: Estimates::for_policy(&policy),
        policy,
        nodes: cluster::uniform(1, 8, "H100-80GB"),
        restart_delay: Duration::ZERO,
        preemptible: true,
        sample: Duration::from_secs(60),
        mig_planner: false,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let r = run(&jobs, &cfg, |_, _| {}).expect("simulation");
    r.jobs.iter().map(|j| (j.first_start_s.unwrap_or(f64::NAN), j.end_s.unwrap_or(f64::NAN))).collect()
}

fn window(gpus: u32, start: i64, end: i64) -> ReservationRequest {
    ReservationRequest {
        name: "maintenance".into(),
        gpus,
        model: None,
        nodes: Vec::new(),
        start: Time::from_secs(start),
        end: Time::from_secs(end),
        users: Default::default(),
        teams: std::iter::once("ops".into()).collect(),
    }
}

#[test]
fn a_job_that_would_overrun_the_window_waits_for_its_end_and_one_that_ends_before_it_runs() {
    // No estimate (fifo): its end is unknown, so it may not use GPUs reserved from 10 s.
    assert_eq!(replay("fifo", "0,50,2,a", vec![window(8, 10, 110)]), [(110.0, 160.0)]);
    // With the oracle's estimate (sjf), 5 s ends by 10 s: it runs at once.
    assert_eq!(replay("sjf", "0,5,2,a", vec![window(8, 10, 110)]), [(0.0, 5.0)]);
    // Half the GPUs reserved: the other half is anyone's throughout.
    assert_eq!(replay("fifo", "0,50,4,a", vec![window(4, 10, 110)]), [(0.0, 50.0)]);
    assert_eq!(replay("fifo", "0,50,2,a", Vec::new()), [(0.0, 50.0)]);
}
