//! `gpool profile JOB`: the controller orders one replica per node of a
//! running job profiled for N seconds, gathers what the nodes report
//! (`AgentReport::Profiled`), keeps the result as the job's latest profile
//! (`PutMeta("profile/<job>")`) and answers the caller with its verdict.
//! A node that has not answered by the deadline (the window plus
//! [`GRACE_MS`]) is named in the profile, which is answered with the rest.
//!
//! Only the job's owner or an admin may profile it: py-spy reads the
//! process's memory. Whoever may see the job may read its profile.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_api::agent::ProfileCapture;
use gpool_core::{NodeId, Snapshot};
use gpool_store::{Store, Write};

use super::Order;
use super::acts::Acts;
use super::calls::{ApiError, Reply};
use super::docs::JobDoc;
use super::outbox::Outbox;
use super::timers::{Timer, Timers};
use crate::plane::auth::{Caller, Role};
use crate::plane::profile_doc::{self, ReplicaCapture, StoredProfile};
use crate::protocol::ReplicaKey;

/// The longest profile one call may ask for.
pub(super) const MAX_SECONDS: u32 = 300;
/// How long after the window a node may take to send its capture (py-spy
/// writing out, a remote agent's next report).
pub(in crate::plane::controller) const GRACE_MS: i64 = 30_000;

/// Profiles under way.
#[derive(Default)]
pub(super) struct Profiling {
    pending: BTreeMap<u64, Pending>,
    last_id: u64,
}

struct Pending {
    profile: StoredProfile,
    /// Ranks still to answer, with their nodes.
    waiting: BTreeMap<u32, String>,
    /// Ranks whose node never answered.
    silent: usize,
    reply: Reply<api::ProfileView>,
}

/// The run and nodes a profile asks: (attempt, rank → (node, its id)), the lowest rank on each node.
pub(super) type Targets = (u32, BTreeMap<u32, (String, NodeId)>);

impl Profiling {
    /// `POST /api/v1/jobs/{id}/profile`: orders each node of `targets` to profile its replica.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        caller: &Caller,
        id: u64,
        (attempt, targets): Targets,
        seconds: u32,
        native: bool,
        reply: Reply<api::ProfileView>,
        timers: &mut Timers,
        now: i64,
    ) -> Acts {
        let mut acts = Acts::default();
        // Ids increase across restarts: they begin at the clock.
        let profile = (now.max(0) as u64).max(self.last_id + 1);
        self.last_id = profile;
        for (rank, (node, node_id)) in &targets {
            let key = ReplicaKey { job: id, attempt, rank: *rank };
            let order = crate::protocol::ProfileOrder { profile, seconds, native };
            acts.order(*node_id, Order::Profile { key, order });
            tracing::info!("profiling job {id} rank {rank} on node {node} for {seconds} s, for {}", caller.user);
        }
        let waiting = targets.into_iter().map(|(rank, (node, _))| (rank, node)).collect();
        let stored = StoredProfile { job: id, attempt, taken_ms: now, seconds, native, replicas: Vec::new() };
        self.pending.insert(profile, Pending { profile: stored, waiting, silent: 0, reply });
        let deadline = now + i64::from(seconds) * 1000 + GRACE_MS;
        timers.at(deadline, Timer::ProfileDeadline { profile });
        acts
    }

    /// The run of `doc` (a job the caller may see) to profile and, per node,
    /// the lowest rank on it; or why it may not be profiled.
    pub(super) fn targets(
        &self,
        caller: &Caller,
        doc: &JobDoc,
        seconds: u32,
        snap: &Snapshot,
    ) -> Result<Targets, ApiError> {
        let id = doc.id;
        if !(1..=MAX_SECONDS).contains(&seconds) {
            return Err(ApiError::new(
                400,
                format!("seconds: {seconds} is out of range; profile for 1 to {MAX_SECONDS} s"),
            ));
        }
        if doc.user != caller.user && caller.role != Role::Admin {
            return Err(ApiError::new(
                403,
                format!(
                    "only {} (the job's owner) or an admin may profile job {id}: a profile reads its memory",
                    doc.user
                ),
            ));
        }
        if self.pending.values().any(|p| p.profile.job == id) {
            // One at a time: two py-spy runs on one process pause it twice as often.
            return Err(ApiError::new(
                409,
                format!("job {id} is being profiled already; `gpool profile {id} --latest` shows it once done"),
            ));
        }
        let run = match (&doc.state, &doc.run) {
            (api::JobState::Running, Some(run)) => run,
            (s, _) => {
                return Err(ApiError::new(
                    409,
                    format!("job {id} is {}: only a running job can be profiled", s.as_str()),
                ));
            }
        };
        let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
        for r in run.replicas.iter().filter(|r| !r.ended()) {
            let rank = per_node.entry(r.node.clone()).or_insert(r.rank);
            *rank = (*rank).min(r.rank);
        }
        let targets: BTreeMap<u32, (String, NodeId)> = per_node
            .into_iter()
            .filter_map(|(node, rank)| Some((rank, (node.clone(), snap.node_id(&node)?))))
            .collect();
        if targets.is_empty() {
            return Err(ApiError::new(409, format!("job {id} has no replica running on a node gpool knows")));
        }
        Ok((run.attempt, targets))
    }

    /// A node's capture of one replica; the profile is answered once every node's came.
    pub(super) fn on_profiled(
        &mut self,
        key: ReplicaKey,
        profile: u64,
        capture: ProfileCapture,
        out: &mut Outbox,
    ) -> Acts {
        // Late (its deadline passed) or unknown: nothing waits for it.
        let Some(p) = self.pending.get_mut(&profile) else { return Acts::default() };
        if p.profile.job != key.job || p.profile.attempt != key.attempt {
            return Acts::default();
        }
        let Some(node) = p.waiting.remove(&key.rank) else { return Acts::default() };
        p.profile.replicas.push(ReplicaCapture { node, rank: key.rank, capture });
        if p.waiting.is_empty() {
            return self.finish(profile, out);
        }
        Acts::default()
    }

    /// The deadline of a profile: whoever has not answered is named.
    pub(super) fn deadline(&mut self, profile: u64, out: &mut Outbox) -> Acts {
        let Some(p) = self.pending.get_mut(&profile) else { return Acts::default() };
        for (rank, node) in std::mem::take(&mut p.waiting) {
            p.silent += 1;
            let error = Some(format!(
                "node {node} sent no profile within {} s of the window's end (is its agent up?)",
                GRACE_MS / 1000
            ));
            p.profile.replicas.push(ReplicaCapture {
                node,
                rank,
                capture: ProfileCapture { error, ..Default::default() },
            });
        }
        self.finish(profile, out)
    }

    fn finish(&mut self, profile: u64, out: &mut Outbox) -> Acts {
        let mut acts = Acts::default();
        let Some(mut p) = self.pending.remove(&profile) else { return acts };
        p.profile.replicas.sort_by_key(|r| r.rank);
        let job = p.profile.job;
        if !p.profile.has_stacks() {
            let why = format!("job {job}: no stacks were recorded: {}", p.profile.errors());
            // No node answered: a gateway timeout; else the nodes said why (no py-spy, no Python).
            let status = if p.silent == p.profile.replicas.len() { 504 } else { 422 };
            out.reply(p.reply, Err(ApiError::new(status, why)));
            return acts;
        }
        let view = p.profile.view();
        match serde_json::to_string(&p.profile) {
            Ok(text) => out.write(Write::PutMeta(profile_doc::key(job), text)),
            Err(e) => tracing::warn!("cannot keep job {job}'s profile: {e}"),
        }
        acts.event(
            Some(job),
            "profiled",
            format!("job {job} profiled for {} s: {}", p.profile.seconds, view.bottleneck),
        );
        out.reply(p.reply, Ok(view));
        acts
    }
}

/// The job's latest profile, if it has one.
pub(super) fn latest(store: &mut dyn Store, id: u64) -> Result<Option<StoredProfile>, ApiError> {
    let text = store.meta(&profile_doc::key(id)).map_err(|e| ApiError::new(500, e.to_string()))?;
    match text {
        None => Ok(None),
        Some(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| ApiError::new(500, format!("job {id}'s stored profile does not read: {e}"))),
    }
}
