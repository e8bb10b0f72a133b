//! The controller's settings.

use std::path::PathBuf;
use std::time::Duration;

use gpool_core::pricing::Prices;
use gpool_core::{Policy, QueueConfig};

use super::budgets::Budget;
use super::elastic::ElasticConfig;
use crate::plane::telemetry::TelemetryConfig;

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where job logs are kept (agents ship theirs here).
    pub data_dir: PathBuf,
    pub policy: Policy,
    pub queues: Vec<QueueConfig>,
    /// Power budgets from the configuration (`--power-budget`); `gpool power set` overrides them (`power.rs`).
    pub power_budgets: Vec<gpool_core::power::PowerBudget>,
    /// First retry back-off; doubles with each failure, at most ten minutes.
    pub retry_backoff: Duration,
    /// When quarantined GPUs are checked (`faults.rs`).
    pub health_checks: gpool_core::fault::CheckTiming,
    pub telemetry: TelemetryConfig,
    pub prices: Prices,
    /// A remote node silent for this long is down.
    pub lease: Duration,
    /// `MASTER_PORT`s for gangs spread over several nodes.
    pub master_ports: std::ops::Range<u16>,
    /// A free port of this host, for the `MASTER_PORT` of a gang on the local node only.
    pub local_port: fn() -> Option<u16>,
    /// Single-user mode (`gpool up` whose jobs all run as its own account):
    /// the one user that user and admin tokens may name.
    pub single_user: Option<String>,
    /// The daemon's own Unix account (an admin when it calls locally).
    pub daemon_account: Option<String>,
    /// Local callers' roles and teams, and token users' accounts (`identity.rs`).
    pub identities: crate::plane::identity::Identities,
    /// Elastic node pools and their providers (`--pools`); `None`: a fixed cluster.
    pub elastic: Option<ElasticConfig>,
    /// Monthly budgets per team or queue (`--budgets`, `budgets.rs`).
    pub budgets: Vec<Budget>,
}
