//! Issue 41: elastic jobs (`replicas: {min, max}`). A job starts with as
//! many replicas as fit from its minimum up to its maximum, gives replicas
//! up above its minimum instead of being preempted whole, and grows back
//! into devices nobody pending can use once its run has lasted
//! `resize_after`; a resize restarts it on a placement the snapshot holds.

mod common;

use std::time::Duration;

use common::*;
use gpool_core::{JobId, Plan, ResizeWhy};

/// Each start's job and number of replicas (a rigid 4-GPU job is one replica).
fn sizes(plan: &Plan) -> Vec<(JobId, usize)> {
    plan.starts.iter().map(|s| (s.job, s.placement.len())).collect()
}

fn resizes(plan: &Plan) -> Vec<(JobId, usize, bool)> {
    plan.resizes.iter().map(|r| (r.job, r.placement.len(), r.why == ResizeWhy::Grow)).collect()
}

#[test]
fn an_elastic_job_starts_with_as_many_replicas_as_fit_up_to_its_maximum() {
    let cases = [
        // (GPUs taken by a rigid job first, min, max, replicas it starts with or None)
        (0, 2, 8, Some(8)),
        (3, 2, 8, Some(5)),
        (6, 2, 8, Some(2)),
        (7, 2, 8, None),
        (0, 2, 4, Some(4)),
    ];
    for (taken, min, max, want) in cases {
        let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
        if taken > 0 {
            c.run(job("rigid").gpus(taken), t(0));
        }
        let e = c.submit(job("e").gpus(1).elastic(min, max).preemptible());
        let plan = c.plan(t(1));
        let got = sizes(&plan).into_iter().find(|(j, _)| *j == e).map(|(_, n)| n);
        assert_eq!(got, want, "{taken} taken, {min}:{max}: {plan:#?}");
    }
}

/// The scenario, step by step: 8 replicas; a 4-GPU job of higher
/// priority shrinks it to 4 (never preempted whole); when that job ends it
/// grows back to 8 at once, having run more than `resize_after` in all.
#[test]
fn shrinks_for_a_higher_priority_job_and_grows_back_when_it_ends() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let e = c.submit(job("e").gpus(1).elastic(2, 8).preemptible());
    let plan = c.plan(t(0));
    assert_eq!(sizes(&plan), [(e, 8)]);
    c.apply(&plan);

    let high = c.submit(job("high").gpus(4).priority(10).at(100));
    let plan = c.plan(t(100));
    assert!(plan.preemptions.is_empty(), "shrunk, not preempted: {plan:#?}");
    assert_eq!(resizes(&plan), [(e, 4, false)]);
    assert!(matches!(plan.resizes[0].why, ResizeWhy::Shrink { for_job, .. } if for_job == high));
    assert!(c.reason(&plan, high).contains("waiting for 1 preempted job"), "{}", c.reason(&plan, high));
    c.apply(&plan);
    // Back in the queue with its nomination: it restarts at 4 beside the new job.
    let plan = c.plan(t(100));
    let mut got = sizes(&plan);
    got.sort();
    assert_eq!(got, [(e, 4), (high, 1)], "{plan:#?}");
    c.apply(&plan);

    c.finish(high, t(110));
    let plan = c.plan(t(110));
    assert_eq!(resizes(&plan), [(e, 8, true)]);
    c.apply(&plan);
    let plan = c.plan(t(110));
    assert_eq!(sizes(&plan), [(e, 8)], "restarted at 8 on the devices held for it");
}

/// A job that has run less than `resize_after` in all does not grow yet:
/// restarting something that may end any moment costs more than it gains.
#[test]
fn a_young_job_grows_only_once_it_has_run_resize_after() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let e = c.submit(job("e").gpus(1).elastic(2, 8).preemptible());
    c.apply(&c.plan(t(0)));
    let high = c.submit(job("high").gpus(4).priority(10).at(5));
    let plan = c.plan(t(5));
    c.apply(&plan);
    c.apply(&c.plan(t(5)));
    c.finish(high, t(15));
    let plan = c.plan(t(15));
    assert!(plan.resizes.is_empty(), "15 s run in all, not yet {:?}", c.snap.policy().resize_after);
    assert_eq!(plan.wake_at, Some(t(30)), "the pass wakes when it may grow");
    assert_eq!(resizes(&c.plan(t(30))), [(e, 8, true)]);
}

#[test]
fn a_whole_elastic_job_is_preempted_only_when_shrinking_to_its_minimum_is_not_enough() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let e = c.submit(job("e").gpus(1).elastic(2, 8).preemptible());
    let plan = c.plan(t(0));
    c.apply(&plan);
    c.submit(job("high").gpus(7).priority(10).at(50));
    let plan = c.plan(t(50));
    assert!(plan.resizes.is_empty(), "{plan:#?}");
    assert_eq!(plan.preemptions.iter().map(|p| p.victim).collect::<Vec<_>>(), [e]);
}

#[test]
fn shrinking_takes_the_fewest_replicas_and_the_most_preemptible_job_first() {
    let mut c = Cluster::new("default").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    let low = c.submit(job("low").gpus(1).elastic(1, 8).preemptible().priority(1));
    c.apply(&c.plan(t(0)));
    let lower = c.submit(job("lower").gpus(1).elastic(1, 8).preemptible().priority(0));
    c.apply(&c.plan(t(1)));
    c.submit(job("high").gpus(3).priority(10).at(50));
    let plan = c.plan(t(50));
    assert!(plan.preemptions.is_empty());
    assert_eq!(resizes(&plan), [(lower, 5, false)], "3 replicas of the lowest class, none of {low}");
}

#[test]
fn a_job_inside_its_minimum_run_time_is_not_shrunk() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let mut spec = job("e").gpus(1).elastic(2, 8).preemptible();
    spec.spec.min_runtime = Some(Duration::from_secs(60));
    c.submit(spec);
    c.apply(&c.plan(t(0)));
    let high = c.submit(job("high").gpus(4).priority(10).at(10));
    let plan = c.plan(t(10));
    assert!(plan.resizes.is_empty() && plan.preemptions.is_empty(), "{plan:#?}");
    assert_eq!(plan.reason_of(high), Some(&gpool_core::PendingReason::Protected { until: t(60) }));
    let plan = c.plan(t(60));
    assert_eq!(resizes(&plan).len(), 1, "{plan:#?}");
}

/// Replicas above the minimum are lent: a peer of the same class takes
/// them (not preemptible, an elastic job still gives them up), a lower class
/// does not, nor does anyone under a policy that never stops work.
#[test]
fn replicas_above_the_minimum_are_lent_to_peers_but_not_to_lower_classes() {
    let cases = [
        // (policy, elastic job's class, arrival's class, replicas left or None)
        ("default", 0, 0, Some(4)),
        ("default", 5, 0, None),
        ("default", 0, 5, Some(4)),
        ("no preemption", 0, 0, None),
    ];
    for (policy, class, arrival, want) in cases {
        let c = match policy {
            "default" => Cluster::new(policy),
            _ => {
                let mut p = gpool_core::Policy::by_name("fifo").expect("fifo");
                p.preemption = gpool_core::Preemption::off();
                Cluster::with_policy(p)
            }
        };
        let mut c = c.node("n", 8, "H100-80GB");
        let e = c.submit(job("e").gpus(1).elastic(2, 8).priority(class));
        c.apply(&c.plan(t(0)));
        c.submit(job("peer").gpus(4).priority(arrival).at(10));
        let plan = c.plan(t(10));
        assert!(plan.preemptions.is_empty(), "{plan:#?}");
        let got = plan.resizes.iter().find(|r| r.job == e).map(|r| r.placement.len());
        assert_eq!(got, want, "{policy}, class {class}, arrival {arrival}: {plan:#?}");
    }
}

#[test]
fn growth_leaves_alone_what_a_pending_job_can_use() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let e = c.submit(job("e").gpus(1).elastic(2, 8).preemptible());
    let rigid = c.submit(job("rigid").gpus(4));
    let plan = c.plan(t(0));
    let mut got = sizes(&plan);
    got.sort();
    assert_eq!(got, [(e, 4), (rigid, 1)], "the rigid job ranks behind it but fits: it grows only into the rest");
}

#[test]
fn the_pass_never_grows_a_stopping_job_and_a_resized_job_keeps_its_devices_while_it_stops() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let e = c.submit(job("e").gpus(1).elastic(2, 8).preemptible());
    c.apply(&c.plan(t(0)));
    let high = c.submit(job("high").gpus(4).priority(10).at(100));
    let plan = c.plan(t(100));
    // As the daemon does it: the job is asked to stop and keeps running through its grace period.
    c.snap.request_stop(e, gpool_core::StopCause::Resized { for_job: Some(high) }).expect("stop");
    c.snap.carry_over(&plan);
    // A rigid job arriving meanwhile gets none of the held devices.
    let other = c.submit(job("other").gpus(1).at(101));
    let plan = c.plan(t(101));
    assert!(plan.starts.is_empty() && plan.resizes.is_empty(), "{plan:#?}");
    assert!(
        c.reason(&plan, other).contains("free") || c.reason(&plan, other).contains("behind"),
        "{}",
        c.reason(&plan, other)
    );
    c.snap.carry_over(&plan);
    c.snap.stop(e, t(105), gpool_core::StopOutcome::Requeue { not_before: gpool_core::Time::MIN }).expect("stopped");
    let plan = c.plan(t(105));
    let mut got = sizes(&plan);
    got.sort();
    assert_eq!(got, [(e, 4), (high, 1)], "{plan:#?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Whatever elastic and rigid work runs, and whatever arrives: a plan
    /// never shrinks a job below its minimum nor grows it past its maximum,
    /// never touches a job inside its minimum run time, and preempts whole
    /// only when the free devices and every replica above a minimum on a
    /// node could not hold the arrival.
    #[test]
    fn resizes_respect_the_bounds_and_shrinks_come_before_preemption(
        running in proptest::collection::vec((1u32..=3, 1u32..=4, 0u32..=4, 0u64..=60, proptest::bool::ANY), 1..6),
        want in 1u32..=8,
        arrival in 1i64..=90,
    ) {
        let mut c = Cluster::new("default").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
        let mut protected = std::collections::BTreeMap::new();
        for (gpus, min, extra, protect, elastic) in running {
            let mut j = job("low").gpus(gpus).preemptible();
            if elastic {
                j = j.elastic(min, min + extra);
            }
            j.spec.min_runtime = Some(Duration::from_secs(protect));
            let id = c.submit(j);
            let plan = c.plan(t(0));
            if let Some(s) = plan.starts.iter().find(|s| s.job == id) {
                c.snap.start(id, s.placement.clone(), t(0)).expect("start");
                protected.insert(id, t(protect as i64));
            } else {
                c.snap.remove_pending(id, false).expect("remove");
            }
        }
        let now = t(arrival);
        c.submit(job("high").gpus(want).priority(10).at(arrival));
        let plan = c.plan(now);
        for r in &plan.resizes {
            let spec = &c.snap.job(r.job).expect("job").spec;
            proptest::prop_assert!(r.placement.len() >= spec.replicas as usize, "below its minimum: {r:?}");
            proptest::prop_assert!(r.placement.len() <= spec.most_replicas() as usize, "above its maximum: {r:?}");
            if r.why != ResizeWhy::Grow {
                proptest::prop_assert!(protected[&r.job] <= now, "{} shrunk inside its minimum run time", r.job);
            }
        }
        for p in &plan.preemptions {
            proptest::prop_assert!(protected[&p.victim] <= now, "{} preempted inside its minimum run time", p.victim);
        }
        if !plan.preemptions.is_empty() {
            // Free GPUs plus every unprotected replica above a minimum, per node.
            for node in ["a", "b"] {
                let id = c.id(node);
                let free = c.snap.free_masks(id).map_or(0, |(g, _)| g.count_ones());
                let spare: u32 = c.snap.running_jobs()
                    .filter(|j| j.spec.is_elastic() && protected[&j.id] <= now)
                    .filter_map(|j| j.running().map(|r| (j, r)))
                    .flat_map(|(j, r)| r.placement.iter().skip(j.spec.replicas as usize))
                    .filter(|p| p.node == id)
                    .map(|p| p.gpus.count_ones())
                    .sum();
                proptest::prop_assert!(free + spare < want, "node {node}: {free} free + {spare} spare ≥ {want}, yet preempted whole: {plan:#?}");
            }
        }
    }
}
