//! The rollout planner's invariants: replaying its plans (replicas become
//! ready or not at random) never leaves fewer ready replicas than it had and
//! wanted (one fewer at most on a full pool), never runs more than one over
//! what is wanted during an update, and converges to exactly `desired`
//! replicas of the new generation.

use gpool_core::service_rollout::{ReplicaState, plan_replicas};
use proptest::prelude::*;

proptest! {
    #[test]
    fn updates_keep_capacity_and_converge(
        desired in 0u32..6, old_n in 0u32..6, old_ready in prop::collection::vec(any::<bool>(), 6),
        readiness in prop::collection::vec(any::<bool>(), 64), full in any::<bool>(),
    ) {
        let mut replicas: Vec<ReplicaState> = (0..old_n)
            .map(|i| ReplicaState { id: u64::from(i), generation: 1, ready: old_ready[i as usize], draining: false })
            .collect();
        let mut next_id = 100;
        let live_ready = |rs: &[ReplicaState]| rs.iter().filter(|r| r.ready && !r.draining).count();
        for (step, becomes_ready) in readiness.iter().enumerate() {
            let before = live_ready(&replicas);
            let plan = plan_replicas(desired, 2, &replicas, full);
            for r in replicas.iter_mut() {
                if plan.drain.contains(&r.id) {
                    prop_assert!(!r.draining, "drains a replica twice");
                    r.draining = true;
                }
            }
            for _ in 0..plan.start {
                replicas.push(ReplicaState { id: next_id, generation: 2, ready: false, draining: false });
                next_id += 1;
            }
            let after = live_ready(&replicas);
            // A full pool gives up one ready replica at a time, never more.
            let floor = before.min(desired as usize).saturating_sub(usize::from(full));
            prop_assert!(after >= floor, "step {step}: ready {before} -> {after}, wanted {desired}");
            let live = replicas.iter().filter(|r| !r.draining).count();
            prop_assert!(live <= (desired as usize + 1).max(before), "step {step}: {live} live for {desired}");
            // Drained replicas stop; one booting replica (or all, at the end) becomes ready.
            replicas.retain(|r| !r.draining);
            let last = step + 1 == readiness.len();
            for r in replicas.iter_mut().filter(|r| !r.ready && r.generation == 2) {
                if *becomes_ready || last {
                    r.ready = true;
                    if !last { break; }
                }
            }
        }
        let plan = plan_replicas(desired, 2, &replicas, false);
        for r in replicas.iter_mut() {
            r.draining |= plan.drain.contains(&r.id);
        }
        replicas.retain(|r| !r.draining);
        prop_assert_eq!(plan.start, 0);
        prop_assert_eq!(replicas.len(), desired as usize);
        prop_assert!(replicas.iter().all(|r| r.generation == 2 && r.ready));
    }
}
