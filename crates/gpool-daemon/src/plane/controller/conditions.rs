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
//!
//! The control plane's own disk counts too: when the store says the disk
//! of its database is full (it spent the room it keeps for that,
//! gpool-store's `reserve.rs`), new submissions are refused with 507 and
//! telemetry is no longer recorded, until the store has room again; what
//! runs goes on and is recorded.

use std::collections::BTreeMap;
use std::path::Path;

use gpool_core::{NodeId, NodeState, Snapshot};
use gpool_store::Store;

use super::calls::ApiError;
use super::links::{NodeLink, START_HOLD_MS, StartHold};
use super::outbox::Outbox;
use super::timers::{Timer, Timers};

/// Whether the disk of the control plane's state is full (`Store::disk_full`).
#[derive(Debug, Default)]
pub(super) struct StateDisk {
    full: bool,
}

impl StateDisk {
    /// Notices the store's disk filling up or having room again.
    pub(super) fn check(&mut self, store: &mut dyn Store, data_dir: &Path, out: &mut Outbox, now: i64) {
        let full = store.disk_full();
        if full == self.full {
            return;
        }
        self.full = full;
        let message = if full {
            format!(
                "the disk of the control plane's state ({}) is full: new jobs are refused and telemetry is not \
                 recorded until it has room again; running jobs go on",
                data_dir.display()
            )
        } else {
            "the disk of the control plane's state has room again: new jobs are accepted".to_string()
        };
        out.event_of(now, None, None, "state_disk", message);
    }

    pub(super) fn is_full(&self) -> bool {
        self.full
    }

    /// Refuses what would fill the state's disk further while it is full.
    pub(super) fn room_for_new_work(&self, data_dir: &Path) -> Result<(), ApiError> {
        if !self.full {
            return Ok(());
        }
        Err(ApiError::new(
            507,
            format!(
                "the disk holding gpool's state ({}) is full: free space there; new jobs are accepted again \
                 by themselves once it has room (nothing was submitted)",
                data_dir.display()
            ),
        ))
    }
}

/// A node's state in the scheduler from what the controller knows: down
/// stays down (until its agent registers), else draining if an admin
/// drains it, it reports a condition or it is held, else up.
pub(super) fn apply_node_state(snap: &mut Snapshot, links: &BTreeMap<NodeId, NodeLink>, id: NodeId, out: &mut Outbox) {
    let Some(link) = links.get(&id) else { return };
    if snap.node(id).is_some_and(|n| n.state == NodeState::Down) {
        return;
    }
    let held = link.doc.draining || !link.conditions.is_empty() || link.hold.is_some();
    let _ = snap.set_node_state(id, if held { NodeState::Draining } else { NodeState::Up });
    out.reschedule();
}

/// What a node reports that keeps new work away (or that it is healthy again).
pub(super) fn set_conditions(
    snap: &mut Snapshot,
    links: &mut BTreeMap<NodeId, NodeLink>,
    id: NodeId,
    conditions: Vec<String>,
    out: &mut Outbox,
    now: i64,
) {
    let Some(link) = links.get_mut(&id) else { return };
    if link.conditions == conditions {
        return;
    }
    let name = link.doc.name.clone();
    let message = match conditions.is_empty() {
        true => format!("node {name}: healthy again, takes new work"),
        false => format!("node {name}: {}", conditions.join("; ")),
    };
    link.conditions = conditions;
    apply_node_state(snap, links, id, out);
    out.event_of(now, None, None, "node_condition", message);
}

/// A node's agent could not start a replica of `job`: the node is held.
#[allow(clippy::too_many_arguments)]
pub(super) fn hold_after_failed_start(
    snap: &mut Snapshot,
    links: &mut BTreeMap<NodeId, NodeLink>,
    id: NodeId,
    job: u64,
    error: &str,
    timers: &mut Timers,
    out: &mut Outbox,
    now: i64,
) {
    let Some(link) = links.get_mut(&id) else { return };
    let until_ms = now + START_HOLD_MS;
    link.hold = Some(StartHold { until_ms, why: error.to_string() });
    let name = link.doc.name.clone();
    timers.at(until_ms, Timer::StartHold { node: id.0 });
    apply_node_state(snap, links, id, out);
    out.event_of(
        now,
        None,
        None,
        "node_condition",
        format!(
            "node {name}: could not start job {job} ({error}); nothing new starts there for {} s",
            START_HOLD_MS / 1000
        ),
    );
}

/// A hold's time is up (unless a later failure extended it).
pub(super) fn start_hold_check(
    snap: &mut Snapshot,
    links: &mut BTreeMap<NodeId, NodeLink>,
    node: u32,
    out: &mut Outbox,
    now: i64,
) {
    let id = NodeId(node);
    let Some(link) = links.get_mut(&id) else { return };
    if link.hold.as_ref().is_none_or(|h| h.until_ms > now) {
        return;
    }
    link.hold = None;
    let name = link.doc.name.clone();
    apply_node_state(snap, links, id, out);
    out.event_of(now, None, None, "node_condition", format!("node {name}: start hold over, takes new work"));
}
