//! What the web dashboard's overview reads in one request
//! (`GET /api/v1/overview`): counts aggregated on the server, so the page
//! stays small on a cluster of a thousand nodes.

use serde::{Deserialize, Serialize};

/// The whole cluster at a glance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overview {
    /// GPUs per pool and model: busy, idle, free and down.
    pub gpus: Vec<GpuCount>,
    /// Every node's GPUs, for the heat map.
    pub heat: Vec<NodeHeat>,
    pub pending: u64,
    pub running: u64,
    /// How long the pending jobs have waited so far, seconds: median, 90th
    /// percentile and longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_p50_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_p90_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_max_s: Option<f64>,
    /// Alerts firing now that the caller may see.
    pub alerts: Vec<crate::AlertView>,
}

/// GPUs of one model in one pool, by what they do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuCount {
    pub pool: String,
    pub model: String,
    /// `gpu`, `amd-gpu`, `tpu`, …
    pub kind: String,
    /// Held by a job and working (or not reporting utilisation).
    pub busy: u32,
    /// Held by a job and under 5% utilisation.
    pub idle: u32,
    /// Held by nobody, on a node that takes work.
    pub free: u32,
    /// On a node that is down or draining.
    pub down: u32,
}

/// One node's GPUs as heat-map cells.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeHeat {
    pub node: String,
    pub pool: String,
    pub state: String,
    pub gpus: Vec<HeatCell>,
}

/// One GPU: utilisation and memory in whole percent, who holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeatCell {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u8>,
    /// The job holding it whole; a shared or MIG GPU says `shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}
