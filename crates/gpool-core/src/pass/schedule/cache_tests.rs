//! The failed-search cache (`Pass::no_victims`), the victim pool's memo
//! of its last answer and the pool a pass keeps for the next change how much
//! a pass searches, never what it decides: on random clusters and queues, a
//! pass with them plans the same starts, preemptions, nominations and
//! resizes as one without them (`crate::pass::UNCACHED`). Passes follow
//! each other after steps that cross the default policy's service-level
//! boundaries (3,200 GPU-s for one GPU) or not, with and without arrivals.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::model::job::{GpuRequest, JobId, JobSpec};
use crate::model::node::Node;
use crate::model::time::Time;
use crate::pass::UNCACHED;
use crate::pass::plan::Plan;
use crate::pass::snapshot::{Snapshot, StopOutcome};
use crate::policies::policy::Policy;
use crate::policies::quota::QueueConfig;

/// One job: (GPUs, CPU cores, priority, preemptible, queue, user).
type Ask = (u32, u64, i32, bool, usize, u8);

fn ask() -> impl Strategy<Value = Ask> {
    (
        prop_oneof![Just(0u32), Just(1), Just(2), Just(4), Just(8)],
        1u64..40,
        prop_oneof![Just(0i32), Just(0), Just(5), Just(10)],
        any::<bool>(),
        0usize..3,
        0u8..4,
    )
}

fn spec(a: &Ask, at: Time) -> JobSpec {
    let (gpus, cpus, priority, preemptible, queue, user) = *a;
    let mut s = JobSpec::new(&format!("u{user}"), at);
    s.replica.gpu = if gpus == 0 { GpuRequest::None } else { GpuRequest::Gpus { count: gpus } };
    s.replica.cpus_milli = cpus * 1000;
    s.replica.memory_mb = 1024;
    s.priority = priority;
    s.preemptible = preemptible;
    s.queue = Arc::from(["research", "prod", "default"][queue]);
    s
}

fn apply(snap: &mut Snapshot, plan: &Plan) {
    for p in &plan.preemptions {
        snap.stop(p.victim, plan.now, StopOutcome::Requeue { not_before: Time::MIN }).expect("preempt");
    }
    for r in &plan.resizes {
        snap.stop(r.job, plan.now, StopOutcome::Requeue { not_before: Time::MIN }).expect("resize");
    }
    for s in &plan.starts {
        snap.start(s.job, s.placement.clone(), plan.now).expect("start");
    }
    snap.carry_over(plan);
}

/// What a pass decides, without the reasons jobs wait (a skipped search
/// reuses the cached one's protected-until, as skipped placements do).
fn decisions(plan: &Plan) -> String {
    format!("{:?} {:?} {:?} {:?}", plan.starts, plan.preemptions, plan.nominated, plan.resizes)
}

fn plan_both(snap: &Snapshot, now: Time) -> (Plan, Plan) {
    let cached = crate::pass::schedule::schedule(snap, now);
    UNCACHED.with(|u| u.set(true));
    let uncached = crate::pass::schedule::schedule(snap, now);
    UNCACHED.with(|u| u.set(false));
    (cached, uncached)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn the_cache_of_failed_searches_changes_no_decision(
        policy in prop_oneof![Just("default"), Just("fifo-backfill"), Just("las"), Just("srtf")],
        reclaim in any::<bool>(),
        nodes in 1u32..4,
        first in proptest::collection::vec(ask(), 1..24),
        later in proptest::collection::vec(ask(), 1..40),
        rounds in 1usize..6,
        steps in proptest::collection::vec(prop_oneof![
            Just(0u64), Just(1), Just(600), Just(3_199), Just(3_200), Just(3_201), Just(3_600), Just(36_000)
        ], 6),
        quiet in proptest::collection::vec(any::<bool>(), 6),
        min_runtime in prop_oneof![Just(0u64), Just(1_800)],
    ) {
        let mut p = Policy::by_name(policy).expect("preset");
        p.preemption.reclaim = reclaim;
        p.preemption.min_runtime = Duration::from_secs(min_runtime);
        let mut snap = Snapshot::new(p);
        for n in 0..nodes {
            snap.add_node(Node::with_gpus(&format!("n{n}"), 8, "H100-80GB", 81_920)).expect("node");
        }
        for (name, cohort, guarantee) in [("research", Some("lab"), 4), ("prod", Some("lab"), 8), ("default", None, 0)] {
            let mut q = QueueConfig::new(name);
            q.cohort = cohort.map(Arc::from);
            q.guarantee = guarantee * 1000;
            snap.set_queue(q);
        }
        let mut now = Time::from_secs(1_000);
        let mut id = 1u64;
        for a in &first {
            snap.submit(JobId(id), spec(a, now)).expect("submit");
            id += 1;
        }
        // Fill the cluster, then let time pass and more work arrive, pass after pass.
        let (plan, _) = plan_both(&snap, now);
        apply(&mut snap, &plan);
        for round in 0..rounds {
            now = now.plus(Duration::from_secs(steps[round]));
            // A quiet round: time passes, nothing arrives.
            for a in later.iter().skip(round * later.len() / rounds).take(later.len() / rounds + 1) {
                if quiet[round] {
                    break;
                }
                snap.submit(JobId(id), spec(a, now)).expect("submit");
                id += 1;
            }
            let (cached, uncached) = plan_both(&snap, now);
            prop_assert_eq!(decisions(&cached), decisions(&uncached));
            apply(&mut snap, &cached);
        }
    }
}
