//! Issue 42: job arrays' `%N`. A task of an array that runs at most N tasks
//! at once waits, saying so, while N run, however much room there is; and
//! the pass counts the tasks it starts itself.

mod common;

use common::*;
use gpool_core::{JobId, PendingReason};

#[test]
fn an_array_runs_at_most_its_limit_of_tasks_at_once() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let first = JobId(1);
    let tasks: Vec<JobId> = (0..6).map(|_| c.submit(job("u").gpus(1).array(first, 2))).collect();
    assert_eq!(tasks[0], first, "the array's id is its first task's");
    let plan = c.plan(t(0));
    let started: Vec<JobId> = plan.starts.iter().map(|s| s.job).collect();
    assert_eq!(started, tasks[..2], "two at once, though eight GPUs are free");
    assert_eq!(plan.reason_of(tasks[2]), Some(&PendingReason::ArrayLimit { of: first, limit: 2 }));
    assert!(c.reason(&plan, tasks[2]).contains("at most 2 task(s) at once"), "{}", c.reason(&plan, tasks[2]));
    c.apply(&plan);
    // Still two running: the next pass starts none of the array.
    assert!(c.plan(t(10)).starts.is_empty());
    // One ends: one more starts.
    c.finish(tasks[0], t(20));
    let plan = c.plan(t(20));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [tasks[2]]);
}

#[test]
fn other_jobs_and_other_arrays_are_not_held_by_an_arrays_limit() {
    let mut c = Cluster::new("default").node("n", 4, "H100-80GB");
    let a: Vec<JobId> = (0..3).map(|_| c.submit(job("u").gpus(1).array(JobId(1), 1))).collect();
    let b: Vec<JobId> = (0..3).map(|_| c.submit(job("u").gpus(1).array(JobId(4), 2))).collect();
    let plain = c.submit(job("u").gpus(1));
    let plan = c.plan(t(0));
    let started: Vec<JobId> = plan.starts.iter().map(|s| s.job).collect();
    assert_eq!(started, [a[0], b[0], b[1], plain]);
}
