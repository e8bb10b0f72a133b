//! Advance reservations (`gpool reservation`, `/api/v1/reservations`):
//! GPUs set aside for users or teams over a window (docs/slurm.md,
//! "Advance reservations").

use serde::{Deserialize, Serialize};

/// `POST /api/v1/reservations` (admins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReservationRequest {
    /// A name jobs give as `reservation` (`--reservation NAME`).
    pub name: String,
    /// Whole GPUs to hold.
    pub gpus: u32,
    /// Only GPUs of this model (`H100-80GB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Only on these nodes; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// When it starts, RFC 3339 (`2026-12-01T09:00:00Z`).
    pub start: String,
    /// How long it lasts: `8h`, `90m`, `1d`.
    pub duration: String,
    /// Users whose jobs may run in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Teams whose jobs may run in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
}

/// The GPUs a reservation holds on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReservedGpus {
    pub node: String,
    /// GPU indices on that node.
    pub gpus: Vec<u32>,
}

/// A reservation as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReservationView {
    pub name: String,
    pub start: String,
    pub end: String,
    /// `upcoming`, `active` or `over`.
    pub state: String,
    pub gpus: u32,
    pub devices: Vec<ReservedGpus>,
    pub users: Vec<String>,
    pub teams: Vec<String>,
    /// Its jobs running now.
    pub running_jobs: u32,
    pub created_by: String,
}
