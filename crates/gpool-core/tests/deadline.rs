//! Issue 17: soft deadlines. A job with a deadline goes first in its class
//! once it is urgent (twice its expected run time before the deadline),
//! urgent jobs earliest deadline first; never over a higher class; the pass
//! wakes when one becomes urgent; and a job that cannot make it is said to be late.

mod common;

use common::*;
use gpool_core::deadline::{Late, late, urgent_at};

/// The order jobs start in on a one-GPU node, one at a time, from `from`.
fn start_order(c: &mut Cluster, from: i64) -> Vec<gpool_core::JobId> {
    let mut order = Vec::new();
    let mut now = from;
    for _ in 0..10 {
        let plan = c.plan(t(now));
        let Some(s) = plan.starts.first() else { break };
        order.push(s.job);
        c.apply(&plan);
        now += 1;
        c.finish(order[order.len() - 1], t(now));
    }
    order
}

#[test]
fn a_job_becomes_urgent_twice_its_run_time_before_its_deadline() {
    let j = job("u").estimate(3600).deadline(t(10 * 3600)).at(0);
    assert_eq!(urgent_at(&j.spec), Some(t(8 * 3600)));
    // No estimate, no limit: halfway from submission to the deadline.
    let j = job("u").deadline(t(10 * 3600)).at(2 * 3600);
    assert_eq!(urgent_at(&j.spec), Some(t(6 * 3600)));
    // A run longer than the time left: urgent at once.
    let j = job("u").estimate(20 * 3600).deadline(t(10 * 3600)).at(0);
    assert_eq!(urgent_at(&j.spec), Some(t(0)));
}

/// A busy one-GPU node and three waiting jobs: one without a deadline,
/// then one with a far deadline and one with a near one.
fn three_waiting() -> (Cluster, [gpool_core::JobId; 3]) {
    let mut c = Cluster::new("fifo").node("n", 1, "H100-80GB");
    let busy = c.run(job("x").gpus(1), t(0));
    let early = c.submit(job("a").gpus(1).estimate(600).at(1));
    let far = c.submit(job("b").gpus(1).estimate(600).deadline(t(100_000)).at(2));
    let near = c.submit(job("c").gpus(1).estimate(600).deadline(t(50_000)).at(3));
    c.finish(busy, t(10));
    (c, [early, far, near])
}

#[test]
fn an_urgent_job_goes_first_in_its_class_earliest_deadline_first() {
    let (mut c, [early, far, near]) = three_waiting();
    // Not urgent yet: FIFO as ever; the pass asks to be woken when the nearer one becomes urgent.
    assert_eq!(c.plan(t(10)).wake_at, Some(t(50_000 - 1200)));
    assert_eq!(start_order(&mut c, 10), [early, far, near]);
    // Both urgent: nearest deadline first, then the other, then the rest.
    let (mut c, [early, far, near]) = three_waiting();
    assert_eq!(start_order(&mut c, 100_000 - 1200), [near, far, early]);
    // Only the near one urgent.
    let (mut c, [early, far, near]) = three_waiting();
    assert_eq!(start_order(&mut c, 50_000 - 1200), [near, early, far]);
}

#[test]
fn a_deadline_never_lifts_a_job_over_a_higher_class() {
    let mut c = Cluster::new("fifo").node("n", 1, "H100-80GB");
    let busy = c.run(job("x").gpus(1), t(0));
    let urgent = c.submit(job("a").gpus(1).estimate(600).deadline(t(2000)).at(1));
    let high = c.submit(job("b").gpus(1).priority(10).at(2));
    c.finish(busy, t(1500));
    assert_eq!(start_order(&mut c, 1500), [high, urgent]);
}

#[test]
fn a_job_that_cannot_make_its_deadline_is_said_to_be_late() {
    let j = job("u").estimate(2 * 3600).deadline(t(10 * 3600)).at(0);
    assert_eq!(late(&j.spec, t(7 * 3600), None), None, "started now it ends at 9h");
    assert_eq!(
        late(&j.spec, t(9 * 3600), None),
        Some(Late::CannotMake { deadline: t(10 * 3600), expected_end: t(11 * 3600) })
    );
    assert_eq!(late(&j.spec, t(9 * 3600), Some(t(7 * 3600))), None, "running since 7h, it ends at 9h");
    assert_eq!(late(&j.spec, t(10 * 3600 + 1), Some(t(7 * 3600))), Some(Late::Passed { deadline: t(10 * 3600) }));
    assert_eq!(late(&job("u").at(0).spec, t(1_000_000), None), None, "no deadline, never late");
}
