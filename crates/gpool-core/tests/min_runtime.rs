//! Issue 41: a minimum run time (`minRuntime`, per queue or per job) ends
//! preemption ping-pong: a job that started less than that ago is preempted
//! by no one, whatever the reason; the job that would preempt it waits,
//! saying until when, and the pass wakes then.

mod common;

use std::time::Duration;

use std::collections::BTreeMap;

use common::*;
use gpool_core::PendingReason;

fn protected_queue(c: Cluster, secs: u64) -> Cluster {
    let mut c = c.queue("q", None, 0, None);
    let mut q = c.snap.queues().find(|q| &*q.name == "q").cloned().expect("the queue");
    q.min_runtime = Duration::from_secs(secs);
    c.snap.set_queue(q);
    c
}

#[test]
fn a_protected_job_is_not_preempted_until_its_minimum_run_time_is_over() {
    let c = Cluster::new("default").node("n", 8, "H100-80GB");
    let mut c = protected_queue(c, 60);
    let low = c.run(job("a").gpus(8).queue("q").preemptible(), t(0));
    let high = c.submit(job("b").gpus(8).queue("q").priority(10).at(10));
    let plan = c.plan(t(10));
    assert!(plan.preemptions.is_empty(), "protected for 60 s: {plan:#?}");
    assert_eq!(plan.reason_of(high), Some(&PendingReason::Protected { until: t(60) }));
    assert!(c.reason(&plan, high).contains("protected until t=60s"), "{}", c.reason(&plan, high));
    assert_eq!(plan.wake_at, Some(t(60)), "the pass wakes when the protection ends");
    let plan = c.plan(t(60));
    assert_eq!(plan.preemptions.iter().map(|p| p.victim).collect::<Vec<_>>(), [low]);
}

#[test]
fn a_jobs_own_minimum_run_time_wins_and_zero_protects_nothing() {
    let c = Cluster::new("default").node("n", 8, "H100-80GB");
    let mut c = protected_queue(c, 600);
    // The job's own minRuntime (zero) wins over its queue's ten minutes.
    let mut unprotected = job("a").gpus(8).queue("q").preemptible();
    unprotected.spec.min_runtime = Some(Duration::ZERO);
    let low = c.run(unprotected, t(0));
    c.submit(job("b").gpus(8).queue("q").priority(10).at(5));
    let plan = c.plan(t(5));
    assert_eq!(plan.preemptions.iter().map(|p| p.victim).collect::<Vec<_>>(), [low]);
}

#[test]
fn without_a_minimum_run_time_nothing_changes() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB").queue("q", None, 0, None);
    let low = c.run(job("a").gpus(8).queue("q").preemptible(), t(0));
    c.submit(job("b").gpus(8).queue("q").priority(10).at(1));
    let plan = c.plan(t(1));
    assert_eq!(plan.preemptions.iter().map(|p| p.victim).collect::<Vec<_>>(), [low], "{plan:#?}");
    assert!(plan.waiting_reasons().all(|(_, r)| !matches!(r, PendingReason::Protected { .. })));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever runs, however protected, and whoever arrives: no plan preempts
    /// a job inside its minimum run time, and a job told to wait on protected
    /// work is told a time in the future.
    #[test]
    fn no_plan_preempts_a_protected_job(
        running in proptest::collection::vec((1u32..=4, 0u64..=120, proptest::bool::ANY), 1..6),
        arrival in 1i64..=120,
        want in 1u32..=8,
    ) {
        let mut c = Cluster::new("default").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
        let mut protected_until = BTreeMap::new();
        for (gpus, protect, queue_b) in running {
            let mut j = job("low").gpus(gpus).preemptible().queue(if queue_b { "b" } else { "a" });
            j.spec.min_runtime = Some(Duration::from_secs(protect));
            // Only what fits runs (the rest is left out of the scene).
            let id = c.submit(j);
            let plan = c.plan(t(0));
            if let Some(s) = plan.starts.iter().find(|s| s.job == id) {
                c.snap.start(id, s.placement.clone(), t(0)).expect("start");
                protected_until.insert(id, t(protect as i64));
            }
        }
        let high = c.submit(job("high").gpus(want).priority(10).at(arrival));
        let now = t(arrival);
        let plan = c.plan(now);
        for p in &plan.preemptions {
            let until = protected_until[&p.victim];
            proptest::prop_assert!(until <= now, "{} preempted at {now} though protected until {until}", p.victim);
        }
        if let Some(PendingReason::Protected { until }) = plan.reason_of(high) {
            proptest::prop_assert!(*until > now, "waits until {until}, already past at {now}");
        }
    }
}
