//! Advance reservations in the snapshot: the list the pass keeps GPUs for,
//! and choosing the GPUs of a new one (`calendar/reservation.rs`).

use super::*;
use crate::calendar::reservation::{Reservation, ReservationError};
use crate::model::resources::same_model;

/// What a new reservation asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationRequest {
    pub name: Arc<str>,
    pub gpus: u32,
    /// Only GPUs of this model (`H100-80GB`).
    pub model: Option<Arc<str>>,
    /// Only on these nodes; empty: any.
    pub nodes: Vec<Arc<str>>,
    pub start: Time,
    pub end: Time,
    pub users: BTreeSet<Arc<str>>,
    pub teams: BTreeSet<Arc<str>>,
}

impl Snapshot {
    /// Replaces the advance reservations the pass keeps GPUs for.
    pub fn set_reservations(&mut self, reservations: Vec<Reservation>) {
        self.reservations = reservations;
    }

    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    /// A reservation for `r`: whole GPUs of the nodes that are up (of its
    /// model, on its nodes) that no other reservation holds over an
    /// overlapping window, packed on as few nodes as it can (the nodes with
    /// the most such GPUs first). What runs on them now does not count: it
    /// may end before the window opens, and if it does not, the
    /// reservation's jobs wait for it. Nothing is changed; the caller adds
    /// the result with [`Snapshot::set_reservations`].
    pub fn reservable(&self, r: &ReservationRequest) -> Result<Reservation, ReservationError> {
        if r.gpus == 0 {
            return Err(ReservationError::NoGpus);
        }
        if r.end <= r.start {
            return Err(ReservationError::EmptyWindow);
        }
        if r.users.is_empty() && r.teams.is_empty() {
            return Err(ReservationError::NobodyAdmitted);
        }
        if self.reservations.iter().any(|x| x.name == r.name) {
            return Err(ReservationError::Exists(r.name.to_string()));
        }
        let mut candidates: Vec<(u32, NodeId, u64)> = Vec::new();
        for (i, e) in self.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if e.node.state != NodeState::Up || !(r.nodes.is_empty() || r.nodes.contains(&e.node.name)) {
                continue;
            }
            let mut avail = 0u64;
            for (slot, &d) in e.gpu_slots.iter().enumerate() {
                let model_ok = r.model.as_deref().is_none_or(|m| same_model(m, &e.node.devices[d].model));
                if model_ok && slot < 64 {
                    avail |= 1 << slot;
                }
            }
            for other in self.reservations.iter().filter(|x| x.overlaps(r.start, r.end)) {
                for (n, mask) in &other.devices {
                    if *n == id {
                        avail &= !mask;
                    }
                }
            }
            if avail != 0 {
                candidates.push((avail.count_ones(), id, avail));
            }
        }
        let free: u32 = candidates.iter().map(|(c, _, _)| *c).sum();
        if free < r.gpus {
            let mut what = String::new();
            if let Some(m) = &r.model {
                what.push_str(&format!(" of model {m}"));
            }
            if !r.nodes.is_empty() {
                what.push_str(&format!(" on {}", r.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")));
            }
            return Err(ReservationError::NotEnough { want: r.gpus, free, what });
        }
        // Most GPUs first, then the lowest node: few nodes, and the same answer every time.
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut devices = Vec::new();
        let mut left = r.gpus;
        for (count, id, avail) in candidates {
            if left == 0 {
                break;
            }
            let take = count.min(left);
            let mut mask = 0u64;
            for slot in bits(avail).take(take as usize) {
                mask |= 1 << slot;
            }
            devices.push((id, mask));
            left -= take;
        }
        Ok(Reservation {
            name: r.name.clone(),
            start: r.start,
            end: r.end,
            devices,
            users: r.users.clone(),
            teams: r.teams.clone(),
        })
    }
}

impl Snapshot {
    /// The indices of a node's whole GPUs in a slot mask (a reservation's, a placement's).
    pub fn gpu_indices(&self, node: NodeId, mask: u64) -> Vec<u32> {
        let Some(e) = self.nodes.get(node.index()) else { return Vec::new() };
        bits(mask).filter_map(|s| e.gpu_slots.get(s)).map(|&d| e.node.devices[d].index).collect()
    }
}
