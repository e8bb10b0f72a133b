//! Issue 17: begin times (`--begin`, `beginAt`). A job does not start
//! before its begin time, to the millisecond; the pass says when to wake for
//! it; and a job waiting for tonight is not demand that lets the overload
//! gate preempt anyone now.

mod common;

use common::*;
use gpool_core::{PendingReason, Time};

#[test]
fn a_job_starts_at_its_begin_time_and_not_a_millisecond_before() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let begin = Time::from_millis(7_200_000);
    let id = c.submit(job("u").gpus(1).begin(begin));
    let early = c.plan(Time::from_millis(7_199_999));
    assert!(early.starts.is_empty(), "{early:#?}");
    assert_eq!(early.wake_at, Some(begin), "the pass asks to be woken at the begin time");
    assert_eq!(early.reason_of(id), Some(&PendingReason::Begin { at: begin }));
    assert_eq!(c.reason(&early, id), "waiting for its begin time, t=7200s");
    let on_time = c.plan(begin);
    assert_eq!(on_time.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![id]);
    assert_eq!(on_time.wake_at, None, "nothing else to wake for");
}

#[test]
fn a_job_waiting_for_its_begin_time_is_not_demand_now() {
    // Everything is busy with preemptible work; a big job waits for tonight.
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    c.run(job("a").gpus(8).preemptible(), t(0));
    let tonight = c.submit(job("b").gpus(8).begin(Time::from_secs(20 * 3600)));
    // Ten hours on, the overload gate has seen no demand: nothing is preempted.
    let plan = c.plan(t(10 * 3600));
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
    assert_eq!(plan.overloaded_since, None);
    assert!(c.reason(&plan, tonight).contains("begin time"));
}
