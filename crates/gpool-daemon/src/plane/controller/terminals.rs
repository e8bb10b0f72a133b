//! `gpool attach` (and `gpool run --pty`): who may open a session on an
//! interactive job's terminal, and where the node that runs it is. The
//! bytes of the session go through the relay (`plane/terminals.rs`), never
//! through the controller; it only orders the node to connect
//! (`Order::Attach`).
//!
//! Only the job's owner or an admin may attach: the terminal types as the
//! job's account. Readers may see the job, not type into it.

use gpool_api as api;
use gpool_api::terminal::AttachView;
use gpool_core::Snapshot;

use super::Order;
use super::acts::Acts;
use super::calls::ApiError;
use super::docs::JobDoc;
use crate::plane::auth::{Caller, Role};
use crate::protocol::ReplicaKey;

/// Orders the node of interactive job `doc` to connect its terminal to
/// `session`; what the caller is told, or why it may not attach.
/// `exposed`: where the service proxy serves the job's `--expose`d ports.
pub(super) fn attach(
    caller: &Caller,
    doc: &JobDoc,
    session: String,
    exposed: Vec<String>,
    snap: &Snapshot,
) -> Result<(Acts, AttachView), ApiError> {
    let id = doc.id;
    if doc.user != caller.user && caller.role != Role::Admin {
        return Err(ApiError::new(
            403,
            format!(
                "only {} (the job's owner) or an admin may attach to job {id}: its terminal types as its owner",
                doc.user
            ),
        ));
    }
    let grace = match crate::plane::convert::detach_grace(&doc.spec) {
        Ok(Some(g)) => g,
        _ => {
            return Err(ApiError::new(
                409,
                format!(
                    "job {id} is not interactive (not started with gpool run --pty): gpool logs -f {id} follows its output"
                ),
            ));
        }
    };
    let run = match (&doc.state, &doc.run) {
        (api::JobState::Running, Some(run)) => run,
        (api::JobState::Pending, _) => {
            return Err(ApiError::new(409, format!("job {id} is pending: gpool attach {id} works once it runs")));
        }
        (s, _) => {
            return Err(ApiError::new(409, format!("job {id} is {}: there is no terminal to attach to", s.as_str())));
        }
    };
    let Some((replica, node)) =
        run.replicas.iter().find(|r| r.rank == 0 && !r.ended()).and_then(|r| Some((r, snap.node_id(&r.node)?)))
    else {
        return Err(ApiError::new(409, format!("job {id} has no replica running on a node gpool knows")));
    };
    let key = ReplicaKey { job: id, attempt: run.attempt, rank: replica.rank };
    tracing::info!("{} attaches to job {id} on node {}", caller.user, replica.node);
    let mut acts = Acts::default();
    acts.order(node, Order::Attach { key, session: session.clone() });
    let view = AttachView { job: id, session, node: replica.node.clone(), detach_grace_s: grace.as_secs(), exposed };
    Ok((acts, view))
}
