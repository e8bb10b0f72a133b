//! What keeps new work away from a node that is up: an admin's drain, a
//! condition its agent reports (a disk under its reserve), and a start its
//! agent could not carry out.
//!
//! A failed start (the agent could not create the run's files or spawn its
//! shim: a full disk, no file descriptors left) is a fault of the node, not
//! of the job: the job goes back to the queue at once, not counted as a
//! failure, and the node is held for [`START_HOLD_MS`] so that the job, and
//! every other, goes elsewhere rather than failing there again in a loop.
//! The hold is not persisted: a restarted control plane tries the node again.

use gpool_core::{NodeId, NodeState};

use super::timers::Timer;
use super::{Controller, NodeLink};
use crate::protocol::ReplicaKey;

/// How long a node whose agent could not start a replica takes no new work.
pub(crate) const START_HOLD_MS: i64 = 30_000;

/// A node held after a failed start.
#[derive(Clone, Debug)]
pub(crate) struct StartHold {
    pub until_ms: i64,
    pub why: String,
}

impl NodeLink {
    /// The reasons shown for a node that takes no new work (`gpool nodes`).
    pub(super) fn shown_conditions(&self) -> Vec<String> {
        let mut shown = self.conditions.clone();
        if let Some(h) = &self.hold {
            shown.push(format!("start failed ({}); held for {} s", h.why, START_HOLD_MS / 1000));
        }
        shown
    }
}

impl Controller {
    /// A node's state in the scheduler from what the controller knows: down
    /// stays down (until its agent registers), else draining if an admin
    /// drains it, it reports a condition or it is held, else up.
    pub(super) fn apply_node_state(&mut self, id: NodeId) {
        let Some(link) = self.links.get(&id) else { return };
        if self.snap.node(id).is_some_and(|n| n.state == NodeState::Down) {
            return;
        }
        let held = link.doc.draining || !link.conditions.is_empty() || link.hold.is_some();
        let _ = self.snap.set_node_state(id, if held { NodeState::Draining } else { NodeState::Up });
        self.dirty = true;
    }

    /// What a node reports that keeps new work away (or that it is healthy again).
    pub(super) fn set_conditions(&mut self, id: NodeId, conditions: Vec<String>, now: i64) {
        let Some(link) = self.links.get_mut(&id) else { return };
        if link.conditions == conditions {
            return;
        }
        let name = link.doc.name.clone();
        let message = match conditions.is_empty() {
            true => format!("node {name}: healthy again, takes new work"),
            false => format!("node {name}: {}", conditions.join("; ")),
        };
        link.conditions = conditions;
        self.apply_node_state(id);
        self.event(now, None, "node_condition", message);
    }

    /// An agent could not start a replica: the replica is lost (its job
    /// requeued) and its node held.
    pub(super) fn on_start_failed(&mut self, key: ReplicaKey, error: String, now: i64) {
        let node = self
            .jobs
            .get(&key.job)
            .and_then(|d| d.run.as_ref())
            .filter(|r| r.attempt == key.attempt)
            .and_then(|r| r.replicas.iter().find(|x| x.rank == key.rank))
            .and_then(|r| self.snap.node_id(&r.node));
        self.on_replica_end(key, None, Some(format!("its agent could not start it: {error}")), now);
        let Some(id) = node else { return };
        let Some(link) = self.links.get_mut(&id) else { return };
        let until_ms = now + START_HOLD_MS;
        link.hold = Some(StartHold { until_ms, why: error.clone() });
        let name = link.doc.name.clone();
        self.timers.insert((until_ms, Timer::StartHold { node: id.0 }));
        self.apply_node_state(id);
        self.event(
            now,
            None,
            "node_condition",
            format!(
                "node {name}: could not start job {} ({error}); nothing new starts there for {} s",
                key.job,
                START_HOLD_MS / 1000
            ),
        );
    }

    /// A hold's time is up (unless a later failure extended it).
    pub(super) fn start_hold_check(&mut self, node: u32, now: i64) {
        let id = NodeId(node);
        let Some(link) = self.links.get_mut(&id) else { return };
        if link.hold.as_ref().is_none_or(|h| h.until_ms > now) {
            return;
        }
        link.hold = None;
        let name = link.doc.name.clone();
        self.apply_node_state(id);
        self.event(now, None, "node_condition", format!("node {name}: start hold over, takes new work"));
    }
}
