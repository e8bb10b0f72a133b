//! Preemption: a higher class takes a preemptible job's GPUs after the
//! victim's grace period, measured on the manual clock.

use super::*;

const LOW: &str =
    "command: [low]\nresources: {nvidia.com/gpu: 8}\npriority: low\npreemptible: true\ngracePeriod: 30s\n";
const HIGH: &str = "command: [high]\nresources: {nvidia.com/gpu: 8}\npriority: high\n";

#[test]
fn a_higher_class_preempts_after_the_victims_grace_period() {
    let mut h = Setup::new().policy("fifo").build();
    let low = h.submit(LOW);
    h.orders();
    let high = h.submit(HIGH);
    assert_eq!(signals(&h.orders()), [(key(low, 1, 0), Signal::TERM)], "the victim is asked to stop");
    assert_eq!(h.state(low), api::JobState::Stopping);
    assert_eq!(h.state(high), api::JobState::Pending, "nothing starts on GPUs still in use");
    h.advance(Duration::from_secs(29));
    assert!(h.orders().is_empty(), "the grace period is the victim's to checkpoint in");
    h.advance(Duration::from_secs(1));
    assert_eq!(signals(&h.orders()), [(key(low, 1, 0), Signal::KILL)]);
    h.exit(key(low, 1, 0), None, Some(9));
    let started: Vec<ReplicaKey> = h.starts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(started, [key(high, 1, 0)]);
    let victim = h.job(low);
    assert_eq!(victim.state, api::JobState::Pending, "a preempted job goes back to the queue, not to failed");
    assert_eq!(victim.restarts, 1);
    assert!(h.event_kinds().contains(&"preempted".to_string()));
}

/// Issue 41: a queue's minimum run time ends ping-pong. A job that started
/// 10 s ago is not preempted by a higher class until it has run 60 s; the
/// waiting job says until when, and the controller wakes for it then.
#[test]
fn a_queues_minimum_run_time_protects_a_job_that_just_started() {
    let mut h = Setup::new().policy("fifo").queues(&["default"]).build();
    let mut q = h.ctl.snap.queues().find(|q| &*q.name == "default").cloned().expect("the queue");
    q.min_runtime = Duration::from_secs(60);
    h.ctl.snap.set_queue(q);
    let low = h.submit(LOW);
    h.orders();
    h.advance(Duration::from_secs(10));
    let high = h.submit(HIGH);
    assert!(signals(&h.orders()).is_empty(), "protected: no stop signal");
    let reason = h.job(high).reason.unwrap_or_default();
    let until = api::time::rfc3339(T0 + 60_000);
    assert!(reason.contains(&format!("protected until {until}")), "{reason}");
    assert!(h.ctl.next_timer().is_some_and(|t| t <= T0 + 60_000), "woken when the protection ends");
    h.advance(Duration::from_secs(50));
    assert_eq!(signals(&h.orders()), [(key(low, 1, 0), Signal::TERM)], "preempted once it has run 60 s");
    assert_eq!(h.state(low), api::JobState::Stopping);
}

#[test]
fn a_victim_that_checkpoints_and_exits_early_frees_its_gpus_at_once() {
    let mut h = Setup::new().policy("fifo").build();
    let low = h.submit(LOW);
    let high = h.submit(HIGH);
    h.orders();
    h.advance(Duration::from_secs(5));
    h.exit(key(low, 1, 0), Some(0), None);
    let started: Vec<ReplicaKey> = h.starts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(started, [key(high, 1, 0)]);
    assert_eq!(h.state(low), api::JobState::Pending, "an exit 0 under preemption is a requeue, not a success");
    h.advance(Duration::from_secs(60));
    assert!(signals(&h.orders()).is_empty(), "no SIGKILL after the victim ended");
}

#[test]
fn a_job_that_is_not_preemptible_is_never_a_victim() {
    let mut h = Setup::new().policy("fifo").build();
    let low = h.submit("command: [low]\nresources: {nvidia.com/gpu: 8}\npriority: low\n");
    let high = h.submit(HIGH);
    h.advance(Duration::from_secs(3600));
    assert!(signals(&h.orders()).is_empty());
    assert_eq!((h.state(low), h.state(high)), (api::JobState::Running, api::JobState::Pending));
    let why = h.job(high).reason.unwrap_or_default();
    assert!(!why.is_empty(), "a pending job says why it waits");
}
