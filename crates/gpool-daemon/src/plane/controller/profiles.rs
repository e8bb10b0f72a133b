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
use gpool_store::Write;

use super::calls::{ApiError, Reply};
use super::timers::Timer;
use super::{Controller, Order};
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

impl Controller {
    /// `POST /api/v1/jobs/{id}/profile`.
    pub(super) fn start_profile(
        &mut self,
        caller: &Caller,
        id: u64,
        seconds: u32,
        native: bool,
        reply: Reply<api::ProfileView>,
        now: i64,
    ) {
        match self.profile_targets(caller, id, seconds) {
            Err(e) => self.reply(reply, Err(e)),
            Ok((attempt, targets)) => {
                // Ids increase across restarts: they begin at the clock.
                let profile = (now.max(0) as u64).max(self.profiling.last_id + 1);
                self.profiling.last_id = profile;
                for (rank, (node, node_id)) in &targets {
                    let key = ReplicaKey { job: id, attempt, rank: *rank };
                    let order = crate::protocol::ProfileOrder { profile, seconds, native };
                    self.order(*node_id, Order::Profile { key, order });
                    tracing::info!(
                        "profiling job {id} rank {rank} on node {node} for {seconds} s, for {}",
                        caller.user
                    );
                }
                let waiting = targets.into_iter().map(|(rank, (node, _))| (rank, node)).collect();
                let stored = StoredProfile { job: id, attempt, taken_ms: now, seconds, native, replicas: Vec::new() };
                self.profiling.pending.insert(profile, Pending { profile: stored, waiting, silent: 0, reply });
                let deadline = now + i64::from(seconds) * 1000 + GRACE_MS;
                self.timers.insert((deadline, Timer::ProfileDeadline { profile }));
            }
        }
    }

    /// The run to profile and, per node, the lowest rank on it.
    #[allow(clippy::type_complexity)]
    fn profile_targets(
        &mut self,
        caller: &Caller,
        id: u64,
        seconds: u32,
    ) -> Result<(u32, BTreeMap<u32, (String, gpool_core::NodeId)>), ApiError> {
        if !(1..=MAX_SECONDS).contains(&seconds) {
            return Err(ApiError::new(
                400,
                format!("seconds: {seconds} is out of range; profile for 1 to {MAX_SECONDS} s"),
            ));
        }
        let doc = self.visible(caller, id)?;
        if doc.user != caller.user && caller.role != Role::Admin {
            return Err(ApiError::new(
                403,
                format!(
                    "only {} (the job's owner) or an admin may profile job {id}: a profile reads its memory",
                    doc.user
                ),
            ));
        }
        if self.profiling.pending.values().any(|p| p.profile.job == id) {
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
        let targets: BTreeMap<u32, (String, gpool_core::NodeId)> = per_node
            .into_iter()
            .filter_map(|(node, rank)| Some((rank, (node.clone(), self.snap.node_id(&node)?))))
            .collect();
        if targets.is_empty() {
            return Err(ApiError::new(409, format!("job {id} has no replica running on a node gpool knows")));
        }
        Ok((run.attempt, targets))
    }

    /// A node's capture of one replica.
    pub(super) fn on_profiled(&mut self, key: ReplicaKey, profile: u64, capture: ProfileCapture, now: i64) {
        let Some(p) = self.profiling.pending.get_mut(&profile) else {
            // Late (its deadline passed) or unknown: nothing waits for it.
            return;
        };
        if p.profile.job != key.job || p.profile.attempt != key.attempt {
            return;
        }
        let Some(node) = p.waiting.remove(&key.rank) else { return };
        p.profile.replicas.push(ReplicaCapture { node, rank: key.rank, capture });
        if p.waiting.is_empty() {
            self.finish_profile(profile, now);
        }
    }

    /// The deadline of a profile: whoever has not answered is named.
    pub(super) fn profile_deadline(&mut self, profile: u64, now: i64) {
        let Some(p) = self.profiling.pending.get_mut(&profile) else { return };
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
        self.finish_profile(profile, now);
    }

    fn finish_profile(&mut self, profile: u64, now: i64) {
        let Some(mut p) = self.profiling.pending.remove(&profile) else { return };
        p.profile.replicas.sort_by_key(|r| r.rank);
        let job = p.profile.job;
        if !p.profile.has_stacks() {
            let why = format!("job {job}: no stacks were recorded: {}", p.profile.errors());
            // No node answered: a gateway timeout; else the nodes said why (no py-spy, no Python).
            let status = if p.silent == p.profile.replicas.len() { 504 } else { 422 };
            return self.reply(p.reply, Err(ApiError::new(status, why)));
        }
        let view = p.profile.view();
        match serde_json::to_string(&p.profile) {
            Ok(text) => self.out.write(Write::PutMeta(profile_doc::key(job), text)),
            Err(e) => tracing::warn!("cannot keep job {job}'s profile: {e}"),
        }
        self.event(
            now,
            Some(job),
            "profiled",
            format!("job {job} profiled for {} s: {}", p.profile.seconds, view.bottleneck),
        );
        self.reply(p.reply, Ok(view));
    }

    /// The job's latest profile, if it has one.
    pub(super) fn latest_profile(&mut self, id: u64) -> Result<Option<StoredProfile>, ApiError> {
        let text = self.store.meta(&profile_doc::key(id)).map_err(|e| ApiError::new(500, e.to_string()))?;
        match text {
            None => Ok(None),
            Some(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| ApiError::new(500, format!("job {id}'s stored profile does not read: {e}"))),
        }
    }

    /// `GET /api/v1/jobs/{id}/profile` (and its pictures).
    pub(super) fn stored_profile(&mut self, caller: &Caller, id: u64) -> Result<StoredProfile, ApiError> {
        self.visible(caller, id)?;
        self.latest_profile(id)?.ok_or_else(|| {
            ApiError::new(
                404,
                format!("job {id} has not been profiled: `gpool profile {id}` profiles it while it runs"),
            )
        })
    }
}
