//! Orders to nodes, in the form each link takes: the local agent's go out
//! with the turn, a remote agent's become agent-protocol commands that wait
//! in its outbox.

use std::collections::BTreeMap;

use gpool_api::agent as wire;
use gpool_core::NodeId;

use super::calls::Answer;
use super::links::{Link, NodeLink};
use super::outbox::Outbox;
use crate::protocol::Order;

/// Routes an order to a node: the local agent's orders go out with the
/// turn, a remote agent's wait in its outbox (as protocol commands) for its next poll.
pub(super) fn order(links: &mut BTreeMap<NodeId, NodeLink>, out: &mut Outbox, node: NodeId, order: Order) {
    let Some(link) = links.get(&node) else { return };
    if link.is_local() {
        out.local.push(order);
    } else {
        push_command(links, out, node, crate::protocol::command_of(order));
    }
}

/// Queues a command for a remote node (and answers its parked poll).
pub(super) fn push_command(
    links: &mut BTreeMap<NodeId, NodeLink>,
    out: &mut Outbox,
    id: NodeId,
    command: wire::Command,
) {
    let Some(NodeLink { link: Link::Remote(r), .. }) = links.get_mut(&id) else { return };
    let seq = r.next_seq;
    r.next_seq += 1;
    r.outbox.push_back(wire::Sequenced { seq, command });
    if let Some((_, reply)) = r.parked.take() {
        let ready: Vec<wire::Sequenced> = r.outbox.iter().cloned().collect();
        out.replies.push(Answer::new(reply, Ok(wire::Commands { commands: ready })));
    }
}
