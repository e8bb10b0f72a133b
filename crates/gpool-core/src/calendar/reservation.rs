//! Advance reservations (Slurm's `scontrol create reservation`, issue 42):
//! GPUs set aside for some users or teams over a window of time.
//!
//! A reservation names concrete GPUs (chosen once, when it is made, by
//! [`crate::Snapshot::reservable`]). The pass then keeps them:
//! - before the window, for anyone whose job ends by its start (planned end,
//!   from the time limit or estimate): backfill into the gap;
//! - in the window, only for the jobs that ask for it by name and are let in
//!   (their user or team is listed), and those jobs run only on its GPUs;
//! - after its end, for anyone again: what was not used is released.
//!
//! Jobs already running on its GPUs when the window opens are not stopped:
//! the reservation's jobs wait for those GPUs as they would for any.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::job::JobSpec;
use crate::model::node::NodeId;
use crate::model::time::Time;

/// GPUs held for some users or teams from `start` to `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub name: Arc<str>,
    pub start: Time,
    pub end: Time,
    /// The GPUs: a node and a mask over its whole (MIG-off) GPUs, as in a placement.
    pub devices: Vec<(NodeId, u64)>,
    pub users: BTreeSet<Arc<str>>,
    pub teams: BTreeSet<Arc<str>>,
}

impl Reservation {
    /// Whether the window is open at `now`.
    pub fn active(&self, now: Time) -> bool {
        self.start <= now && now < self.end
    }

    /// Whether a job asking for this reservation is let in: its user or its team is listed.
    pub fn admits(&self, spec: &JobSpec) -> bool {
        self.users.contains(&spec.user) || self.teams.contains(&spec.team)
    }

    /// How many GPUs it holds.
    pub fn gpu_count(&self) -> u32 {
        self.devices.iter().map(|(_, m)| m.count_ones()).sum()
    }

    /// Whether its window overlaps `[start, end)`.
    pub fn overlaps(&self, start: Time, end: Time) -> bool {
        self.start < end && start < self.end
    }
}

/// Why a reservation cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReservationError {
    #[error("a reservation needs at least one GPU")]
    NoGpus,
    #[error("the window ends at or before it starts")]
    EmptyWindow,
    #[error("a reservation needs users or teams to let in")]
    NobodyAdmitted,
    #[error("reservation {0} exists already; delete it first or pick another name")]
    Exists(String),
    #[error("only {free} GPU(s){what} are not held by another reservation over that window, and {want} were asked for")]
    NotEnough { want: u32, free: u32, what: String },
}
