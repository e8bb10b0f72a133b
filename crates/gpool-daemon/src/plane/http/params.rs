//! The parameters of paths and queries, as handlers read them ([`P`] and
//! [`Q`] in `extract.rs`) and as the OpenAPI document describes them: one
//! struct each, its doc comments the parameters' descriptions. A query
//! struct refuses a parameter it does not name.
//!
//! [`P`]: super::extract::P
//! [`Q`]: super::extract::Q

use schemars::JsonSchema;
use serde::Deserialize;

/// `/jobs/{id}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct JobPath {
    /// The job's id.
    #[schemars(range(max = u64::MAX))]
    pub id: u64,
}

/// `/pipelines/{run}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct RunPath {
    /// The pipeline run's id.
    #[schemars(range(max = u64::MAX))]
    pub run: u64,
}

/// `/reservations/{name}`, `/schedules/{name}`, `/services/{name}`, `/nodes/{name}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct NamePath {
    /// Its name.
    pub name: String,
}

/// `/registries/{registry}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct RegistryPath {
    /// The registry's host, as image references name it (`ghcr.io`, `registry.local:5000`).
    #[schemars(pattern(gpool_api::patterns::REGISTRY))]
    pub registry: String,
}

/// `/tokens/{id}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct TokenPath {
    /// The token's id (`gpool token list`), never its secret.
    #[schemars(pattern(gpool_api::patterns::TOKEN_ID))]
    pub id: String,
}

/// `/terminals/{session}`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct SessionPath {
    /// The session `POST /api/v1/jobs/{id}/attach` opened.
    pub session: String,
}

/// `GET /api/v1/jobs`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct JobListQuery {
    /// Comma-separated states (`pending`, `starting`, `running`, `stopping`,
    /// `succeeded`, `failed`, `cancelled`, `timed_out`), or `active` for the
    /// first four.
    #[schemars(pattern(gpool_api::patterns::STATES))]
    pub state: Option<String>,
    /// Only this user's jobs.
    pub user: Option<String>,
    /// Only this team's jobs.
    pub team: Option<String>,
    /// Only this queue's jobs.
    pub queue: Option<String>,
    /// Only jobs that ended at or after this time (RFC 3339; `gpool acct`).
    #[schemars(extend("format" = "date-time"))]
    pub ended_since: Option<String>,
    /// Only jobs that ended before this time (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub ended_until: Option<String>,
    /// The previous page's `next`: ids greater than this, or, with
    /// `ended_since` or `ended_until`, jobs that ended after this one (pages
    /// then come in the order jobs ended).
    pub after: Option<u64>,
    /// Jobs per page (1 to 1000, default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

/// `GET /api/v1/nodes`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NodesQuery {
    /// Nodes to skip, in the order they joined.
    pub offset: Option<u64>,
    /// Nodes in the page (default: all).
    pub limit: Option<u64>,
}

/// `GET /api/v1/cost`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CostQuery {
    /// Group by `team` (the default), `user`, `queue`, `pool` or `job`.
    #[schemars(with = "Option<CostBy>")]
    pub by: Option<String>,
    /// The period, back from now: `30d` (the default), `12h`.
    #[schemars(pattern(gpool_api::patterns::DURATION))]
    pub since: Option<String>,
}

/// What `GET /api/v1/cost` groups by.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum CostBy {
    Team,
    User,
    Queue,
    Pool,
    Job,
}

/// `GET /api/v1/jobs/{id}/advice`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AdviceQuery {
    /// Judge on this much telemetry at least (`2m`; the advisor's default is 5 minutes).
    #[serde(rename = "minSpan")]
    #[schemars(pattern(gpool_api::patterns::DURATION))]
    pub min_span: Option<String>,
}

/// `GET /api/v1/jobs/{id}/logs`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    /// `stdout` (the default) or `stderr`.
    #[schemars(with = "Option<Stream>")]
    pub stream: Option<String>,
    /// The replica (default 0).
    pub rank: Option<u32>,
    /// Stream what is written after, until the job has ended.
    #[schemars(with = "Option<bool>")]
    pub follow: Option<String>,
}

/// A replica's output stream.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum Stream {
    Stdout,
    Stderr,
}

/// `GET /api/v1/pipelines`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PipelinesQuery {
    /// Runs, newest first (1 to 200, default 20).
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
}

/// `GET /api/v1/events`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Send the history after this sequence number first (0: all of it); without it, live events only.
    pub after: Option<u64>,
    /// Only this job's events.
    pub job: Option<u64>,
}

/// `POST /api/v1/jobs/{id}/profile`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ProfileQuery {
    /// How long to sample (1 to 300 seconds, default 5).
    #[schemars(range(min = 1, max = 300))]
    pub seconds: Option<u32>,
    /// Native (C/C++) frames too, where py-spy can read them.
    #[schemars(with = "Option<bool>")]
    pub native: Option<String>,
}

/// `GET /agent/v1/commands`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CommandsQuery {
    /// The node polling.
    pub node: String,
    /// Its epoch, from registering.
    pub epoch: u64,
    /// The last command it has (acknowledged).
    pub after: Option<u64>,
}

/// `POST /agent/v1/logs`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ShipLogQuery {
    /// The job.
    pub job: u64,
    /// The replica.
    pub rank: u32,
    /// `stdout` or `stderr`.
    #[schemars(with = "Stream")]
    pub stream: String,
    /// Where the chunk starts in the log.
    pub offset: u64,
    /// The node that runs the replica.
    pub node: Option<String>,
}

/// `/agent/v1/terminals/{session}/…`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeQuery {
    /// The node that runs the session's replica.
    pub node: String,
}
