//! Carries out one command of the agent protocol (`gpool_api::agent::Command`)
//! on this node's agent: the remote node's side of what the control plane
//! orders. The command is read back into the one `Order` type
//! (`protocol::order_of`), the form the agent inside `gpool up` gets directly.

use gpool_api::agent as wire;

use crate::node::agent::Agent;
use crate::protocol::{AgentReport, Found, Order, order_of};

/// Carries `command` out; `conn` and `node` are the session it came in, for
/// the streams an interactive session opens back to the control plane.
pub(crate) fn execute(agent: &Agent, conn: &crate::node::conn::Conn, node: &str, command: wire::Command) {
    let Some(order) = order_of(command) else {
        tracing::warn!("a signal command with a number this node does not know: ignored");
        return;
    };
    match order {
        Order::Start { key, launch, devices } => {
            if let Err(e) = agent.start(key, *launch, devices) {
                agent.report(AgentReport::StartFailed { key, error: e.to_string() });
            }
        }
        Order::Signal { key, signal } => agent.signal(key, signal),
        Order::Reconcile { key, devices } => match agent.reconcile(key, devices) {
            Found::Adopted => agent.report(AgentReport::Running { key }),
            // Its exit record was found and reported.
            Found::Finished => {}
            // The control plane must hear it, or the run would wait forever.
            Found::Lost => agent.report(AgentReport::Lost {
                key,
                why: "the agent found neither its shim nor an exit record when told to reconcile it".into(),
            }),
        },
        Order::Abandon { key } => agent.kill(key),
        Order::Attach { key, session } => {
            crate::node::terminal_link::relay_remote(conn.clone(), node.to_string(), session, agent.run_dir(key));
        }
        Order::Profile { key, order } => agent.profile(key, order),
        Order::Prefetch { image, registry_auth } => agent.prefetch(image, registry_auth),
        Order::InjectFault { gpu, fault } => agent.inject_fault(gpu, fault),
        Order::CheckHealth { gpu, uuid } => agent.check_health(gpu, uuid),
        Order::MigLayout { gpu, layout } => agent.mig_layout(gpu, layout),
    }
}
