//! A node as the controller keeps it: its record, how its agent is
//! reached (in this process, or a remote session with an outbox), and what
//! keeps new work away from it.

use std::collections::VecDeque;

use gpool_api::agent as wire;

use super::calls::Reply;
use super::node_doc::NodeDoc;

/// Extra time the control plane gives a silent node beyond its lease before
/// it calls it down: the agent's shims kill their jobs at the lease's end,
/// measured from an earlier instant, so they are gone by then.
pub(super) const LEASE_MARGIN_MS: i64 = 2_000;
/// How long a poll is parked when there is nothing to say.
pub(super) const POLL_MS: i64 = 20_000;

/// How the controller reaches a node's agent.
pub(crate) enum Link {
    /// The agent in this process (`gpool up`): its orders go out with each turn.
    Local,
    /// A `gpool agent` reached through the agent protocol.
    Remote(Remote),
}

/// A remote agent's session.
pub(crate) struct Remote {
    /// False until the agent registers with this controller (after a restart
    /// or fail-over every agent must register again, to re-synchronise).
    pub registered: bool,
    pub outbox: VecDeque<wire::Sequenced>,
    pub next_seq: u64,
    /// A parked long poll: its id and reply.
    pub parked: Option<(u64, Reply<wire::Commands>)>,
    pub park_id: u64,
    pub last_seen_ms: i64,
    /// When its agent's current session with this control plane began.
    pub session_since_ms: i64,
    /// Why the node was cut off (its token revoked), if it was: its lease
    /// then runs out without it, and says so.
    pub cut_off: Option<String>,
}

impl Remote {
    /// A session that has not registered yet. Sequence numbers start at 1:
    /// an agent acknowledges everything up to `Registered::next_seq - 1`
    /// when it registers, so a command numbered 0 would never be delivered.
    pub(super) fn new() -> Remote {
        Remote {
            registered: false,
            outbox: VecDeque::new(),
            next_seq: 1,
            parked: None,
            park_id: 0,
            last_seen_ms: 0,
            session_since_ms: 0,
            cut_off: None,
        }
    }
}

/// A node as the controller keeps it.
pub(crate) struct NodeLink {
    pub doc: NodeDoc,
    pub link: Link,
    /// What the node last reported that keeps new work away (a disk under
    /// its reserve); empty when healthy. Not persisted: the next report says.
    pub conditions: Vec<String>,
    /// Held after its agent could not start a replica (conditions.rs).
    pub hold: Option<StartHold>,
}

impl NodeLink {
    pub(super) fn is_local(&self) -> bool {
        matches!(self.link, Link::Local)
    }
}

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
