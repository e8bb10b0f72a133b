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

/// A pass keeps its victim pool for the next (`VictimPool::for_pass`) while
/// no job starts or stops. Time alone changes a candidate: its
/// attained-service level rises, its youth (`min_runtime`) ends. Each row:
/// the policy's minimum run time, the pass that finds no victim, the pass
/// on the same snapshot that must see the change and preempt.
#[test]
fn a_kept_victim_pool_is_not_reused_once_time_changed_a_candidate() {
    let rows = [
        // 8 GPUs × 100 s is 800 GPU-s, LAS's level 0, as the waiting job's;
        // at 500 s it is 4,000 GPU-s, level 1: the waiting job outranks it.
        ("level rises", 0, 100, 500),
        // At 600 s it is level 1 but young (30 minutes); at 2,000 s it is
        // still level 1 (16,000 < 32,000 GPU-s) and no longer young.
        ("youth ends", 1_800, 600, 2_000),
    ];
    for (what, min_runtime, first, second) in rows {
        let mut policy = Policy::by_name("las").expect("preset");
        policy.preemption.min_runtime = std::time::Duration::from_secs(min_runtime);
        let mut c = Cluster::with_policy(policy).node("a", 8, "H100-80GB");
        let running = c.run(job("r").gpus(8).preemptible(), t(0));
        let waiting = c.submit(job("w").gpus(8).preemptible().at(first));
        let plan = c.plan(t(first));
        assert!(plan.preemptions.is_empty(), "{what}: {plan:#?}");
        let plan = c.plan(t(second));
        let victims: Vec<_> = plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect();
        assert_eq!(victims, vec![(running, waiting)], "{what}: {plan:#?}");
    }
}

/// A job preempted and started again keeps its id but is a new run: a kept
/// victim pool must not lend it the old run's youth, level or start.
#[test]
fn a_restarted_job_is_a_new_candidate_for_a_kept_victim_pool() {
    let mut policy = Policy::by_name("las").expect("preset");
    policy.preemption.min_runtime = std::time::Duration::from_secs(1_800);
    let mut c = Cluster::with_policy(policy).node("a", 8, "H100-80GB");
    let first = c.run(job("r").gpus(8).preemptible(), t(0));
    let second = c.submit(job("w").gpus(8).preemptible().at(2_000));
    // At 2,000 s the first is old and at level 1: the pass that preempts it keeps its pool.
    let plan = c.plan(t(2_000));
    let victims: Vec<_> = plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect();
    assert_eq!(victims, vec![(first, second)], "{plan:#?}");
    c.apply(&plan);
    let plan = c.plan(t(2_000));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [second], "{plan:#?}");
    c.apply(&plan);
    // The second ends and the first starts again: young until 3,900 s, at
    // level 1 still (its earlier service counts).
    c.finish(second, t(2_100));
    let plan = c.plan(t(2_100));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [first], "{plan:#?}");
    c.apply(&plan);
    c.submit(job("x").gpus(8).preemptible().at(2_200));
    let plan = c.plan(t(2_200));
    assert!(plan.preemptions.is_empty(), "the first's new run is young: {plan:#?}");
}

/// A kept victim pool was made under the policy of its pass: after a policy
/// change, a job young under the old minimum run time is old under the new.
#[test]
fn a_kept_victim_pool_does_not_outlive_its_policy() {
    let mut policy = Policy::by_name("las").expect("preset");
    policy.preemption.min_runtime = std::time::Duration::from_secs(1_800);
    let mut c = Cluster::with_policy(policy.clone()).node("a", 8, "H100-80GB");
    let running = c.run(job("r").gpus(8).preemptible(), t(0));
    let waiting = c.submit(job("w").gpus(8).preemptible().at(600));
    let plan = c.plan(t(600));
    assert!(plan.preemptions.is_empty(), "young: {plan:#?}");
    policy.preemption.min_runtime = std::time::Duration::ZERO;
    c.snap.set_policy(policy);
    let plan = c.plan(t(600));
    let victims: Vec<_> = plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect();
    assert_eq!(victims, vec![(running, waiting)], "{plan:#?}");
}
