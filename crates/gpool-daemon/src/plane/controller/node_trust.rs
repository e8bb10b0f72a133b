//! What a node may say, checked against what the controller knows of it
//! (issue 47): a report's events and a shipped log only for replicas the
//! current run placed on that node; and a node cut off at once when its
//! token is revoked. Registrations are checked whole by `node_doc::check`.

use std::collections::BTreeMap;

use gpool_core::{NodeId, NodeState, Snapshot};
use gpool_store::Store;

use super::calls::ApiError;
use super::docs::JobDoc;
use super::links::{LEASE_MARGIN_MS, Link, NodeLink};
use super::outbox::Outbox;
use super::timers::{Timer, Timers};
use crate::protocol::ReplicaKey;

/// Whether the calling node may ship output of `job`'s replica `rank`:
/// the job's current run placed that replica on it, or an earlier attempt
/// ran on it (its output may still be arriving after the job moved on). A node cannot
/// write another node's replica's log, nor make one for a job that has
/// not run.
pub(super) fn may_ship_log(
    jobs: &BTreeMap<u64, JobDoc>,
    store: &mut dyn Store,
    caller: &crate::plane::auth::Caller,
    node: Option<&str>,
    job: u64,
    rank: u32,
) -> Result<(), ApiError> {
    if caller.role == crate::plane::auth::Role::Admin {
        // An admin may ship any job's log, but only a job's: no file for a job that never was.
        let known = jobs.contains_key(&job) || store.job(job).map_err(|e| ApiError::new(503, e.to_string()))?.is_some();
        return if known { Ok(()) } else { Err(ApiError::new(404, format!("job {job} not found"))) };
    }
    let node = match node {
        Some(n) => n,
        None if caller.user != super::tokens::ANY_NODE => caller.user.as_str(),
        None => return Err(ApiError::new(400, "node: a fleet-wide node token must name its node")),
    };
    super::tokens::check_node_identity(caller, node)?;
    let refused = || ApiError::new(403, format!("node {node} does not run replica {rank} of job {job}"));
    // A job that has ended is read back from the store (its log may still
    // be on its way, to a control plane that took over since).
    let stored;
    let doc = match jobs.get(&job) {
        Some(d) => d,
        None => {
            let row = store.job(job).map_err(|e| ApiError::new(503, e.to_string()))?;
            stored = row.and_then(|r| serde_json::from_str::<super::docs::JobDoc>(&r.doc).ok()).ok_or_else(refused)?;
            &stored
        }
    };
    let ok = doc.earlier_nodes.iter().any(|n| n == node)
        || match &doc.run {
            Some(run) => run.replicas.iter().any(|r| r.rank == rank && r.node == node),
            None => doc.attempt >= 1,
        };
    if ok { Ok(()) } else { Err(refused()) }
}

/// The node the current run of `key`'s job placed that replica on, when
/// it is not `node` (a stale attempt or an unknown job is nobody's).
pub(super) fn placed_elsewhere(jobs: &BTreeMap<u64, JobDoc>, key: ReplicaKey, node: &str) -> Option<String> {
    let run = jobs.get(&key.job)?.run.as_ref().filter(|r| r.attempt == key.attempt)?;
    let r = run.replicas.iter().find(|r| r.rank == key.rank)?;
    (r.node != node).then(|| r.node.clone())
}

/// Cuts a remote node off at once (its token was revoked): its waiting
/// poll is answered 401, it gets no new work, and it shows down. Its
/// replicas are requeued when its lease runs out, not before: by then the
/// node's own shims have killed them (`node/lease.rs`), so no job ever
/// runs twice, even if the node is merely cut off and not dead.
#[allow(clippy::too_many_arguments)]
pub(super) fn cut_off(
    name: &str,
    why: &str,
    lease: i64,
    snap: &mut Snapshot,
    links: &mut BTreeMap<NodeId, NodeLink>,
    timers: &mut Timers,
    out: &mut Outbox,
    now: i64,
) {
    let Some(id) = snap.node_id(name) else { return };
    let Some(NodeLink { link: Link::Remote(r), .. }) = links.get_mut(&id) else { return };
    r.registered = false;
    r.outbox.clear();
    r.cut_off = Some(why.to_string());
    let deadline = r.last_seen_ms.max(now) + lease + LEASE_MARGIN_MS;
    r.last_seen_ms = r.last_seen_ms.max(now);
    if let Some((_, reply)) = r.parked.take() {
        out.reply(reply, Err(ApiError::new(401, format!("node {name} was cut off: {why}"))));
    }
    let _ = snap.set_node_state(id, NodeState::Down);
    out.event_of(
        now,
        None,
        None,
        "node_down",
        format!("node {name} is cut off ({why}); its jobs are requeued once its lease runs out"),
    );
    timers.at(deadline, Timer::Lease { node: id.0 });
    out.reschedule();
}
