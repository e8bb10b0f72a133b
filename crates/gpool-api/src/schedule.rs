//! Recurring jobs and pipelines on the wire: a cron schedule in a stated
//! time zone, and the job or pipeline it submits at each occurrence.

use serde::{Deserialize, Serialize};

use crate::pipeline::PipelineSpec;
use crate::spec::JobSpec;

/// A recurring job or pipeline (`PUT /api/v1/schedules/{name}`).
///
/// ```yaml
/// schedule: "0 2 * * *"
/// timeZone: Europe/Paris
/// pipeline:
///   stages: [...]
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// Cron: minute hour day-of-month month day-of-week (`0 2 * * *`), or
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    pub schedule: String,
    /// An IANA time zone (`Europe/Paris`, `UTC`): the schedule's times are its local times.
    pub time_zone: String,
    /// `forbid` (default): an occurrence while the previous run has not ended
    /// is passed over; `allow`: runs may overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<String>,
    /// A suspended schedule submits nothing; its occurrences pass.
    #[serde(default)]
    pub suspend: bool,
    /// The job submitted at each occurrence (this, or `pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobSpec>,
    /// The pipeline run at each occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineSpec>,
}

/// A schedule as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScheduleView {
    pub name: String,
    pub user: String,
    pub schedule: String,
    pub time_zone: String,
    /// `forbid` or `allow`.
    pub concurrency: String,
    pub suspended: bool,
    /// `job` or `pipeline`.
    pub kind: String,
    /// The next occurrence, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<String>,
    /// The last occurrence acted on (run or passed over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<String>,
    /// The job (or pipeline run) its last occurrence submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<u64>,
    /// How many runs it submitted.
    pub runs: u64,
    /// How many occurrences it passed over (previous run still going, control plane down, suspended).
    pub skipped: u64,
    pub spec: ScheduleSpec,
}
