//! What a room asks of state it does not own. A room's methods take what
//! they read and their own part; where they need a job stopped, an order
//! sent to a node, or an event said in a job's name, they push an [`Act`]
//! and the controller carries the acts out, in order, right after the room
//! returns (`Controller::act`). A room's signature therefore says all it
//! may touch.

use gpool_core::NodeId;

use super::Order;
use super::docs::Stop;
use crate::plane::auth::Caller;

#[derive(Debug)]
pub(super) enum Act {
    /// An event of a job (its owner's stream shows it) or, with `None`, of the pool.
    Event { job: Option<u64>, kind: &'static str, message: String },
    /// Stop the job's run: its stop signal, then SIGKILL after its grace period (`lifecycle.rs`).
    Stop { job: u64, why: Stop },
    /// An order to a node, routed to the local agent or the node's outbox (`orders.rs`).
    Order { node: NodeId, order: Order },
    /// A job its room no longer wants: a pending one is cancelled at once, a running one stopped (`lifecycle.rs`).
    Withdraw { job: u64, by: String },
    /// The node's record changed: the snapshot's view of it is redone (`conditions.rs`).
    NodeState(NodeId),
}

/// Acts in the order a room asked for them.
#[derive(Debug, Default)]
#[must_use = "acts do nothing until the controller carries them out"]
pub(super) struct Acts(pub(super) Vec<Act>);

impl Acts {
    pub(super) fn event(&mut self, job: Option<u64>, kind: &'static str, message: String) {
        self.0.push(Act::Event { job, kind, message });
    }

    pub(super) fn stop(&mut self, job: u64, why: Stop) {
        self.0.push(Act::Stop { job, why });
    }

    pub(super) fn order(&mut self, node: NodeId, order: Order) {
        self.0.push(Act::Order { node, order });
    }

    pub(super) fn withdraw(&mut self, job: u64, by: String) {
        self.0.push(Act::Withdraw { job, by });
    }

    pub(super) fn node_state(&mut self, node: NodeId) {
        self.0.push(Act::NodeState(node));
    }

    /// What an operator did, in the audit trail (an `audit` event of the pool).
    pub(super) fn audit(&mut self, caller: &Caller, from: &str, what: &str) {
        self.event(None, "audit", audit_text(caller, from, what));
    }
}

/// An audit event's text: who, as what role, from where, did what.
pub(super) fn audit_text(caller: &Caller, from: &str, what: &str) -> String {
    format!("{} ({}) from {from}: {what}", caller.user, caller.role.as_str())
}
