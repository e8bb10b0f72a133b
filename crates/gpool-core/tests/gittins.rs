//! The Gittins index within an attained-service level (`within_level =
//! gittins`): the order of fresh jobs by the run times of jobs like them.

mod common;

use common::*;
use gpool_core::gittins::gittins_cost;
use gpool_core::policy::WithinLevel;
use gpool_core::{Policy, StopOutcome, Time};
use proptest::prelude::*;

fn policy(within: WithinLevel) -> Policy {
    Policy { within_level: within, ..Policy::gpool_default() }
}

#[test]
fn a_job_whose_like_jobs_end_soon_goes_first_within_its_level() {
    struct Case {
        name: &'static str,
        within: WithinLevel,
        /// Run times (s) of the jobs like the first and the second job.
        first: Option<&'static [u64]>,
        second: Option<&'static [u64]>,
        want_second_first: bool,
    }
    let cases = [
        Case {
            name: "first come, first served without the index",
            within: WithinLevel::Submit,
            first: Some(&[36_000, 72_000]),
            second: Some(&[60, 120]),
            want_second_first: false,
        },
        Case {
            name: "a user's minute-long jobs overtake another's ten-hour ones",
            within: WithinLevel::Gittins,
            first: Some(&[36_000, 72_000]),
            second: Some(&[60, 120]),
            want_second_first: true,
        },
        Case {
            name: "a few short runs among long ones are worth a try before uniformly long ones",
            within: WithinLevel::Gittins,
            first: Some(&[7_200, 7_200, 7_200, 7_200]),
            second: Some(&[30, 30, 86_400, 86_400]),
            want_second_first: true,
        },
        Case {
            name: "no history is as fresh as least attained service assumes",
            within: WithinLevel::Gittins,
            first: Some(&[600, 600]),
            second: None,
            want_second_first: true,
        },
        Case {
            name: "equal histories keep submission order",
            within: WithinLevel::Gittins,
            first: Some(&[600, 900]),
            second: Some(&[900, 600]),
            want_second_first: false,
        },
    ];
    for case in cases {
        let mut c = Cluster::with_policy(policy(case.within)).node("n", 8, "H100-80GB");
        let blocker = c.run(job("x").gpus(8).at(0), t(0));
        let with = |j: J, runs: Option<&[u64]>| match runs {
            Some(r) => j.similar(r),
            None => j,
        };
        let first = c.submit(with(job("ana").gpus(8).at(10), case.first));
        let second = c.submit(with(job("bo").gpus(8).at(20), case.second));
        c.finish(blocker, t(100));
        let plan = c.plan(t(100));
        let started: Vec<_> = plan.starts.iter().map(|s| s.job).collect();
        let want = if case.want_second_first { second } else { first };
        assert_eq!(started, vec![want], "{}: {plan:#?}", case.name);
    }
}

#[test]
fn levels_stay_strict_whatever_the_history() {
    // A preempted job just past the first level (4,000 GPU-seconds), with no
    // history (no cost at all), still waits behind a fresh job whose like
    // jobs run for decades: the largest cost a level can hold.
    // The same whatever a level is worth (`service_level_weight`).
    for weight in [1000.0, 500.0, 50.0] {
        let mut p = policy(WithinLevel::Gittins);
        p.weights.service_level = weight;
        p.weights.fair_share = 0.0;
        let mut c = Cluster::with_policy(p).node("n", 8, "H100-80GB");
        let served = c.run(job("ana").gpus(8).at(0), t(0));
        c.snap.stop(served, t(500), StopOutcome::Requeue { not_before: Time::MIN }).expect("requeue");
        let fresh = c.submit(job("bo").gpus(8).at(500).similar(&[1_000_000_000, 2_000_000_000]));
        let plan = c.plan(t(500));
        assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![fresh], "weight {weight}: {plan:#?}");
    }
}

proptest! {
    /// The cost lies between the shortest and the mean time left of the
    /// runs the job has not outlived, and is that time when all agree.
    #[test]
    fn the_cost_is_bounded_by_the_shortest_and_the_mean_remaining(
        samples in proptest::collection::vec(1u64..10_000_000_000, 1..20),
        attained in 0u64..10_000_000_000,
    ) {
        let alive: Vec<u64> = samples.iter().filter(|s| **s > attained).map(|s| s - attained).collect();
        let cost = gittins_cost(&samples, attained);
        prop_assert_eq!(cost.is_none(), alive.is_empty());
        if let Some(cost) = cost {
            let min = *alive.iter().min().expect("alive");
            let mean = alive.iter().map(|a| u128::from(*a)).sum::<u128>().div_ceil(alive.len() as u128);
            prop_assert!(u128::from(cost) >= u128::from(min) && u128::from(cost) <= mean, "{} not in {}..={}", cost, min, mean);
            if alive.iter().all(|a| *a == min) {
                prop_assert_eq!(cost, min);
            }
        }
    }
}
