//! A pass caches failed victim searches per shape (`Pass::no_victims`):
//! one search stands for every job of the shape that asks at least as much,
//! a job that fails without its CPU and memory stands for every ask, and a
//! preemption that gives devices back clears what was cached.

mod common;

use common::*;
use gpool_core::Policy;

#[test]
fn a_search_that_fails_without_cpu_and_memory_is_not_repeated_for_smaller_asks() {
    // Half the node is a preemptible low-priority job, half is not: no
    // victims free the whole node an 8-GPU job needs.
    let mut c = Cluster::new("fifo-backfill").node("a", 8, "H100-80GB");
    c.run(job("low").gpus(4).preemptible(), t(0));
    c.run(job("keep").gpus(4), t(0));
    // Each asks for less CPU than the one before: none is covered by an
    // earlier failure at its own ask.
    let waiting: Vec<_> =
        (0..12).map(|i| c.submit(job("hi").gpus(8).priority(10).cpus(12 - i).at(i as i64 + 1))).collect();
    let plan = c.plan(t(100));
    assert!(plan.preemptions.is_empty() && plan.starts.is_empty(), "{plan:#?}");
    assert_eq!(plan.stats.preemption_searches, 1, "one search without CPU and memory stands for all 12 jobs");
    let reasons: Vec<String> = waiting.iter().map(|j| c.reason(&plan, *j)).collect();
    assert!(reasons.iter().all(|r| *r == reasons[0]), "{reasons:?}");
}

#[test]
fn a_preemption_in_the_pass_clears_the_cached_failures() {
    // FIFO order, with reclaim: research borrows all it uses from prod's guarantee.
    let mut policy = Policy::by_name("fifo-backfill").expect("preset");
    policy.preemption.reclaim = true;
    let mut c = Cluster::with_policy(policy)
        .node("a", 8, "H100-80GB")
        .queue("research", Some("lab"), 0, None)
        .queue("prod", Some("lab"), 8, None)
        .queue("dev", None, 0, None);
    let borrower = c.run(job("r").gpus(8).queue("research").cpus(1), t(0));
    // Dev has no guarantee to reclaim with: its first job finds no victim, with or without its CPU ask.
    let first = c.submit(job("d").gpus(4).queue("dev").cpus(4).at(1));
    // Prod reclaims the borrower and takes half of what it gives back.
    let prod = c.submit(job("p").gpus(4).queue("prod").at(2));
    // A smaller ask of the first job's shape: the leftover half is its.
    let later = c.submit(job("d").gpus(4).queue("dev").cpus(1).at(3));
    let plan = c.plan(t(100));
    let victims: Vec<_> = plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect();
    assert_eq!(victims, vec![(borrower, prod)], "{plan:#?}");
    assert!(c.reason(&plan, first).contains("free"), "{}", c.reason(&plan, first));
    assert_eq!(c.reason(&plan, later), "waiting for 1 preempted job(s) to release their devices");
}
