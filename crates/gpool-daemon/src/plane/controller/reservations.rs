//! Advance reservations (`gpool reservation`, issue 42): admins set GPUs
//! aside for users or teams over a window; the pure core keeps them
//! (`gpool_core::reservation`). This part owns the list, kept in the store
//! (`PutMeta("reservations")`) by node name and GPU index, and gives the
//! snapshot its form by node id and slot whenever the list or the nodes
//! change. A reservation that is over is dropped a day after its end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpool_api as api;
use gpool_core::reservation::Reservation;
use gpool_core::{ReservationRequest, Snapshot, Time};
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::ApiError;
use super::outbox::Outbox;
use crate::plane::auth::{Caller, Role};

/// How long an ended reservation stays listed.
const KEPT_AFTER_END_MS: i64 = 86_400_000;

/// One reservation as persisted: nodes by name, GPUs by index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ReservationDoc {
    pub name: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub devices: Vec<(String, Vec<u32>)>,
    pub users: Vec<String>,
    pub teams: Vec<String>,
    pub created_by: String,
}

/// The advance reservations, by name.
#[derive(Debug, Default)]
pub(super) struct Reservations(BTreeMap<String, ReservationDoc>);

impl Reservations {
    /// The list as the store keeps it, given to the snapshot (whose nodes are restored first).
    pub(super) fn restore(store: &mut dyn Store, snap: &mut Snapshot) -> anyhow::Result<Reservations> {
        let r = match store.meta("reservations")? {
            Some(text) => Reservations(serde_json::from_str(&text)?),
            None => Reservations::default(),
        };
        r.apply(snap);
        Ok(r)
    }

    fn persist(&self, out: &mut Outbox) {
        if let Ok(text) = serde_json::to_string(&self.0) {
            out.write(Write::PutMeta("reservations".into(), text));
        }
    }

    /// Gives the snapshot the reservations not over, on the nodes it knows
    /// (called when the list changes and when a node joins).
    pub(super) fn apply(&self, snap: &mut Snapshot) {
        let list = self.0.values().filter_map(|d| core_of(d, snap)).collect();
        snap.set_reservations(list);
    }

    /// Creates one (admins): its GPUs are chosen now, none held by another
    /// reservation over an overlapping window.
    pub(super) fn create(
        &mut self,
        caller: &Caller,
        req: api::reservation::ReservationRequest,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Result<api::reservation::ReservationView, ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins make reservations"));
        }
        let bad = |field: &str, why: String| ApiError::new(400, format!("{field}: {why}"));
        let name_ok = !req.name.is_empty()
            && req.name.len() <= 63
            && req.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        if !name_ok {
            return Err(bad("name", format!("{:?}: use 1 to 63 letters, digits, '-', '_' or '.'", req.name)));
        }
        let start = api::time::parse_rfc3339(req.start.trim())
            .ok_or_else(|| bad("start", format!("{:?} is not an RFC 3339 time (2026-12-01T09:00:00Z)", req.start)))?;
        let span = api::quantity::parse_duration(&req.duration)
            .map_err(|e| bad("duration", format!("{:?}: {e} (8h, 90m, 1d)", req.duration)))?;
        let end = start.saturating_add(i64::try_from(span.as_millis()).unwrap_or(i64::MAX));
        if end <= now {
            return Err(bad("start", "the window is over already".into()));
        }
        for n in &req.nodes {
            if snap.node_id(n).is_none() {
                return Err(ApiError::new(404, format!("nodes: no node {n}")));
            }
        }
        self.prune(now);
        let set = |v: &[String]| v.iter().map(|s| Arc::from(s.as_str())).collect::<BTreeSet<Arc<str>>>();
        let want = ReservationRequest {
            name: Arc::from(req.name.as_str()),
            gpus: req.gpus,
            model: req.model.as_deref().map(Arc::from),
            nodes: req.nodes.iter().map(|n| Arc::from(n.as_str())).collect(),
            start: Time::from_millis(start),
            end: Time::from_millis(end),
            users: set(&req.users),
            teams: set(&req.teams),
        };
        let made = snap.reservable(&want).map_err(|e| {
            let status = if matches!(e, gpool_core::reservation::ReservationError::Exists(_)) { 409 } else { 400 };
            ApiError::new(status, e.to_string())
        })?;
        let doc = ReservationDoc {
            name: req.name.clone(),
            start_ms: start,
            end_ms: end,
            devices: made
                .devices
                .iter()
                .filter_map(|(n, mask)| {
                    let node = snap.node(*n)?;
                    Some((node.name.to_string(), snap.gpu_indices(*n, *mask)))
                })
                .collect(),
            users: req.users,
            teams: req.teams,
            created_by: caller.user.clone(),
        };
        self.0.insert(doc.name.clone(), doc.clone());
        self.persist(out);
        self.apply(snap);
        out.reschedule();
        Ok(view(&doc, snap, now))
    }

    /// Deletes one (admins): its GPUs are anyone's at once; its pending jobs can never start.
    pub(super) fn delete(
        &mut self,
        caller: &Caller,
        name: &str,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Result<api::reservation::ReservationView, ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins delete reservations"));
        }
        let doc = self.0.remove(name).ok_or_else(|| ApiError::new(404, format!("no reservation {name}")))?;
        self.persist(out);
        self.apply(snap);
        out.reschedule();
        Ok(view(&doc, snap, now))
    }

    pub(super) fn views(&self, snap: &Snapshot, now: i64) -> Vec<api::reservation::ReservationView> {
        self.0.values().map(|d| view(d, snap, now)).collect()
    }

    /// Whether a job of `user` in `team` may name reservation `name` at `now`; why not.
    pub(super) fn check(&self, name: &str, user: &str, team: &str, now: i64) -> Result<(), String> {
        let Some(d) = self.0.get(name) else {
            return Err(format!("no reservation {name} (gpool reservation list)"));
        };
        if d.end_ms <= now {
            return Err(format!("reservation {name} is over"));
        }
        if !d.users.iter().any(|u| u == user) && !d.teams.iter().any(|t| t == team) {
            return Err(format!("reservation {name} does not let user {user} (team {team}) in"));
        }
        Ok(())
    }

    /// Drops the reservations over for more than a day.
    fn prune(&mut self, now: i64) {
        self.0.retain(|_, d| d.end_ms.saturating_add(KEPT_AFTER_END_MS) > now);
    }
}

/// The core's form: node ids and slot masks of the nodes the snapshot knows.
fn core_of(d: &ReservationDoc, snap: &Snapshot) -> Option<Reservation> {
    let devices: Vec<_> = d
        .devices
        .iter()
        .filter_map(|(node, gpus)| {
            let id = snap.node_id(node)?;
            let (mask, _) = snap.slots_of(id, gpus, &[])?;
            Some((id, mask))
        })
        .collect();
    let set = |v: &[String]| v.iter().map(|s| Arc::from(s.as_str())).collect();
    Some(Reservation {
        name: Arc::from(d.name.as_str()),
        start: Time::from_millis(d.start_ms),
        end: Time::from_millis(d.end_ms),
        devices,
        users: set(&d.users),
        teams: set(&d.teams),
    })
}

fn view(d: &ReservationDoc, snap: &Snapshot, now: i64) -> api::reservation::ReservationView {
    let state = if now < d.start_ms {
        "upcoming"
    } else if now < d.end_ms {
        "active"
    } else {
        "over"
    };
    let running = snap.running_jobs().filter(|j| j.spec.reservation.as_deref() == Some(d.name.as_str())).count();
    api::reservation::ReservationView {
        name: d.name.clone(),
        start: api::time::rfc3339(d.start_ms),
        end: api::time::rfc3339(d.end_ms),
        state: state.into(),
        gpus: d.devices.iter().map(|(_, g)| g.len() as u32).sum(),
        devices: d
            .devices
            .iter()
            .map(|(node, gpus)| api::reservation::ReservedGpus { node: node.clone(), gpus: gpus.clone() })
            .collect(),
        users: d.users.clone(),
        teams: d.teams.clone(),
        running_jobs: running as u32,
        created_by: d.created_by.clone(),
    }
}
