//! What the API returns about GPU telemetry: the latest reading of each
//! device, a job's utilisation curve and usage, advice, and alerts.
//! Absent values (the device does not report them) are left out, never 0.

use serde::{Deserialize, Serialize};

/// A process using a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuProcessView {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory_mb: Option<u64>,
    /// The gpool job the process belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
}

/// The latest reading of a GPU (or of a MIG instance: memory only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceTelemetry {
    /// When it was read (RFC 3339).
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pstate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<GpuProcessView>,
    /// Recent utilisation, oldest first, one value per sample (absent values skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub util_history: Vec<f32>,
}

/// One point of a job's utilisation curve (one device, one interval).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsagePoint {
    pub at: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    pub memory_total_mb: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
}

/// What a job used, so far or in all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageSummary {
    /// GPU-hours allocated (whole-GPU equivalents: a MIG instance counts its share).
    pub gpu_hours: f64,
    /// Of those, hours with the device under 5% utilisation.
    pub idle_gpu_hours: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_cpu_cores: Option<f64>,
    /// Energy its GPUs drew, watt-hours, from their power samples (a MIG
    /// instance or a GPU share counts its part of the GPU's draw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_wh: Option<f64>,
    /// What the GPU-hours cost at the configured price, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A job's telemetry: the curve and the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobUsageView {
    pub job: u64,
    pub summary: UsageSummary,
    pub points: Vec<UsagePoint>,
}

/// One finding of the advisor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindingView {
    /// `input_bound`, `cpu_bound`, `idle_gpu`, `over_provisioned`, `memory_bound`, `not_enough_data`, `healthy`.
    pub kind: String,
    pub summary: String,
    pub evidence: Vec<String>,
    pub suggestions: Vec<String>,
    pub wasted_gpu_hours: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasted_usd: Option<f64>,
}

/// `gpool advise JOB`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AdviceView {
    pub job: u64,
    pub summary: UsageSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p5_gpu_util: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_gpu_util: Option<f64>,
    /// Price of one GPU-hour used for the figures, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    pub findings: Vec<FindingView>,
    /// The job's latest profile (`gpool profile`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::profile::ProfileView>,
}

/// An alert firing now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AlertView {
    pub rule: String,
    pub severity: String,
    /// `node/gpu3` or `job/42`.
    pub subject: String,
    pub value: f64,
    pub since: String,
    pub summary: String,
    pub labels: std::collections::BTreeMap<String, String>,
}
