//! Orders to nodes, in the form each link takes: the local agent's go out
//! with the turn, a remote agent's become agent-protocol commands that wait
//! in its outbox.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_api::agent as wire;
use gpool_core::NodeId;

use super::calls::Answer;
use super::links::{Link, NodeLink};
use super::outbox::Outbox;
use super::{LocalOrder, Order};

/// Routes an order to a node: the local agent's orders go out with the
/// turn, a remote agent's wait in its outbox for its next poll.
pub(super) fn order(links: &mut BTreeMap<NodeId, NodeLink>, out: &mut Outbox, node: NodeId, order: Order) {
    let Some(link) = links.get(&node) else { return };
    if link.is_local() {
        out.local.push(match order {
            Order::Start { key, launch, devices } => LocalOrder::Start { key, launch, devices },
            Order::Signal { key, signal } => LocalOrder::Signal { key, signal },
            Order::MigLayout { gpu, layout } => LocalOrder::MigLayout { gpu, layout },
            Order::Prefetch { image, registry_auth } => LocalOrder::Prefetch { image, registry_auth },
            Order::Profile { key, order } => LocalOrder::Profile { key, order },
            Order::InjectFault { gpu, fault } => LocalOrder::InjectFault { gpu, fault },
            Order::CheckHealth { gpu, uuid } => LocalOrder::CheckHealth { gpu, uuid },
        });
        return;
    }
    let cmd = match order {
        Order::Start { key, launch, devices } => {
            let launch = *launch;
            let cwd = (!launch.cwd.as_os_str().is_empty()).then(|| launch.cwd.display().to_string());
            api::agent::Command::Start {
                replica: key.into(),
                registry_auth: launch.registry_auth.map(|s| s.0),
                argv: launch.argv,
                env: launch.env,
                cwd,
                devices,
                user: launch.user,
                cpus_milli: (launch.cpus_milli > 0).then_some(launch.cpus_milli),
                memory_mb: (launch.memory_mb > 0).then_some(launch.memory_mb),
                image: launch.image,
            }
        }
        Order::Signal { key, signal } => api::agent::Command::Signal { replica: key.into(), signal: signal.as_raw() },
        Order::Prefetch { image, registry_auth } => {
            api::agent::Command::Prefetch { image, registry_auth: registry_auth.map(|s| s.0) }
        }
        Order::Profile { key, order } => api::agent::Command::Profile {
            replica: key.into(),
            profile: order.profile,
            seconds: order.seconds,
            native: order.native,
        },
        Order::MigLayout { gpu, layout } => api::agent::Command::MigLayout {
            gpu,
            layout: layout
                .into_iter()
                .map(|s| api::agent::MigSlotWire { profile: s.profile, start: s.start })
                .collect(),
        },
        Order::InjectFault { gpu, fault } => {
            api::agent::Command::InjectFault { gpu, fault: fault.as_ref().map(crate::protocol::fault_to_wire) }
        }
        Order::CheckHealth { gpu, uuid } => api::agent::Command::CheckHealth { gpu, uuid },
    };
    push_command(links, out, node, cmd);
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
