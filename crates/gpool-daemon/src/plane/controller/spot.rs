//! Spot notices: a provider is about to take a node back (AWS gives two
//! minutes, GCP thirty seconds). The node's agent (watching the provider's
//! metadata service) or an admin (`gpool nodes notice NODE --in 2m`) says
//! so; nothing new is placed there, and every job on it gets its stop
//! signal at once with the time left as its grace period, so that it
//! checkpoints; it is requeued and resumes from `GPOOL_CHECKPOINT_DIR`
//! wherever it lands next (a shared `--checkpoint-root` makes that any node).

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_core::{NodeId, Snapshot};

use super::acts::Acts;
use super::calls::ApiError;
use super::docs::Stop;
use super::links::NodeLink;
use super::outbox::Outbox;
use crate::plane::auth::{Caller, Role};

/// `POST /api/v1/nodes/{name}/notice`: admins, or the node itself. The node
/// is drained at once; its jobs' stops come back as acts.
#[allow(clippy::too_many_arguments)]
pub(super) fn notice(
    caller: &Caller,
    name: &str,
    within_ms: u64,
    from: &str,
    snap: &Snapshot,
    links: &mut BTreeMap<NodeId, NodeLink>,
    out: &mut Outbox,
    now: i64,
) -> Result<Acts, ApiError> {
    let mut acts = Acts::default();
    if caller.role != Role::Admin {
        if caller.role != Role::Node {
            return Err(ApiError::new(403, "only admins, or the node itself, give a node notice"));
        }
        super::tokens::check_node_identity(caller, name)?;
    }
    let id = snap.node_id(name).ok_or_else(|| ApiError::new(404, format!("node {name} not found")))?;
    let link = links.get_mut(&id).ok_or_else(|| ApiError::new(404, format!("node {name} not found")))?;
    let at_ms = now.saturating_add(i64::try_from(within_ms).unwrap_or(i64::MAX / 2));
    link.doc.draining = true;
    let doc = link.doc.clone();
    acts.node_state(id);
    out.write(super::node_doc::node_row(&doc, now));
    let jobs: Vec<u64> = snap.jobs_on(id).map(|j| j.0).collect();
    acts.event(
        None,
        "spot_notice",
        format!(
            "node {name} will be taken back by its provider at {} ({} s): nothing new starts there; {} job(s) \
                 checkpoint and are requeued (by {})",
            api::time::rfc3339(at_ms),
            within_ms / 1000,
            jobs.len(),
            caller.user
        ),
    );
    for job in jobs {
        acts.stop(job, Stop::Reclaim { node: name.to_string(), at_ms });
        acts.event(
            Some(job),
            "reclaim",
            format!("job {job}: its node {name} is being taken back; stop signal now, killed at the notice's end"),
        );
    }
    acts.audit(caller, from, &format!("gave node {name} a notice of {} s", within_ms / 1000));
    out.reschedule();
    Ok(acts)
}
