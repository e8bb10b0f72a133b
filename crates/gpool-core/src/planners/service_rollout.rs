//! Which replicas of a service to start and which to drain: a planner beside
//! [`crate::schedule`], pure like it. The scaler (`service_scaler.rs`) says
//! how many replicas the service wants; this module turns that number and
//! the replicas it has into actions, and carries a rolling update when the
//! service's spec changes (a new generation):
//!
//! - one replica more than wanted may run while old-generation ones remain
//!   (Kubernetes' `maxSurge: 1`), so an update never takes capacity away;
//! - an old replica that is ready is drained only once the ready replicas
//!   left would still be at least as many as wanted (`maxUnavailable: 0`),
//!   so a rolling update under load fails no request;
//! - replicas that are not ready serve nothing and go first, on the way down
//!   as during an update;
//! - draining replicas are on their way out and count for nothing;
//! - on a full pool (`full`: the surge replica cannot be placed) one old
//!   replica at a time is drained first to make room (`maxUnavailable: 1`);
//!   the proxy holds requests meanwhile, so none fails, though they wait.

/// A replica as the shell knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaState {
    /// Its job's id (higher: newer).
    pub id: u64,
    /// The spec generation it runs.
    pub generation: u64,
    /// Its readiness probe answers.
    pub ready: bool,
    /// It is being drained (no new requests) before it is stopped.
    pub draining: bool,
}

/// What to do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    /// Replicas of the current generation to start.
    pub start: u32,
    /// Replicas to drain, then stop.
    pub drain: Vec<u64>,
}

/// Plans the replicas of a service that wants `desired` of `generation`.
pub fn plan_replicas(desired: u32, generation: u64, replicas: &[ReplicaState], full: bool) -> Rollout {
    let draining_now = replicas.iter().any(|r| r.draining);
    let live: Vec<&ReplicaState> = replicas.iter().filter(|r| !r.draining).collect();
    let mut current: Vec<&ReplicaState> = live.iter().copied().filter(|r| r.generation == generation).collect();
    let mut old: Vec<&ReplicaState> = live.iter().copied().filter(|r| r.generation != generation).collect();
    let mut drain = Vec::new();
    // Old replicas that are not ready serve nothing: out at once.
    old.retain(|r| {
        if r.ready {
            true
        } else {
            drain.push(r.id);
            false
        }
    });
    // Too many of the current generation: the unready first, then the newest.
    let want = desired as usize;
    if current.len() > want {
        current.sort_by_key(|r| (r.ready, std::cmp::Reverse(r.id)));
        for r in current.drain(..current.len() - want) {
            drain.push(r.id);
        }
    }
    // Old ready replicas leave while the ready ones left stay at least `desired`.
    let ready_current = current.iter().filter(|r| r.ready).count();
    old.sort_by_key(|r| r.id);
    let mut ready_total = ready_current + old.len();
    while let Some(r) = old.first() {
        if desired == 0 || ready_total > want {
            drain.push(r.id);
            old.remove(0);
            ready_total -= 1;
        } else {
            break;
        }
    }
    // No room for the surge replica: make room, one old replica at a time.
    if full && !draining_now && drain.is_empty() && !old.is_empty() {
        drain.push(old.remove(0).id);
    }
    // Start what is missing, one over `desired` at most while old ones remain.
    let room = if old.is_empty() { want } else { want + 1 };
    let start = want.saturating_sub(current.len()).min(room.saturating_sub(current.len() + old.len()));
    drain.sort_unstable();
    Rollout { start: start as u32, drain }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: u64, generation: u64, ready: bool) -> ReplicaState {
        ReplicaState { id, generation, ready, draining: false }
    }

    #[test]
    fn scaling_up_starts_what_is_missing_and_scaling_down_drains_unready_then_newest() {
        assert_eq!(plan_replicas(3, 1, &[r(1, 1, true)], false), Rollout { start: 2, drain: vec![] });
        let four = [r(1, 1, true), r(2, 1, false), r(3, 1, true), r(4, 1, true)];
        assert_eq!(plan_replicas(2, 1, &four, false), Rollout { start: 0, drain: vec![2, 4] });
        assert_eq!(plan_replicas(0, 1, &four, false), Rollout { start: 0, drain: vec![1, 2, 3, 4] });
    }

    #[test]
    fn an_update_surges_by_one_and_drains_an_old_replica_per_new_ready_one() {
        let old = [r(1, 1, true), r(2, 1, true)];
        assert_eq!(plan_replicas(2, 2, &old, false), Rollout { start: 1, drain: vec![] }, "one surge replica");
        let booting = [r(1, 1, true), r(2, 1, true), r(3, 2, false)];
        assert_eq!(plan_replicas(2, 2, &booting, false), Rollout { start: 0, drain: vec![] }, "wait for it");
        let up = [r(1, 1, true), r(2, 1, true), r(3, 2, true)];
        assert_eq!(
            plan_replicas(2, 2, &up, false),
            Rollout { start: 1, drain: vec![1] },
            "then one old one goes and the next new one starts"
        );
        let next = [r(1, 1, true), r(2, 1, true), r(3, 2, true), r(4, 2, false)].map(|mut x| {
            x.draining = x.id == 1;
            x
        });
        assert_eq!(plan_replicas(2, 2, &next, false), Rollout { start: 0, drain: vec![] }, "until it is ready");
        let broken_old = [r(1, 1, false), r(2, 1, true)];
        assert_eq!(
            plan_replicas(2, 2, &broken_old, false),
            Rollout { start: 2, drain: vec![1] },
            "the broken one is no capacity"
        );
    }

    #[test]
    fn on_a_full_pool_an_update_drains_one_old_replica_at_a_time_to_make_room() {
        let stuck = [r(1, 1, true), r(2, 1, true), r(3, 2, false)];
        assert_eq!(plan_replicas(2, 2, &stuck, true), Rollout { start: 1, drain: vec![1] });
        let mut draining = [r(1, 1, true), r(2, 1, true), r(3, 2, false), r(4, 2, false)];
        draining[0].draining = true;
        assert_eq!(plan_replicas(2, 2, &draining, true), Rollout { start: 0, drain: vec![] }, "one at a time");
    }
}
