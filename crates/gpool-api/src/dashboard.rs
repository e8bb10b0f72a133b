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

/// One node's GPUs as heat-map cells, column by column (a cell is the
/// same position in each list), so that a thousand nodes stay small.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeHeat {
    pub node: String,
    pub pool: String,
    pub state: String,
    /// Each GPU's index on the node.
    pub index: Vec<u32>,
    /// Utilisation, whole percent; `null` where not reported.
    pub util: Vec<Option<u8>>,
    /// Memory used, whole percent of the device.
    pub memory: Vec<Option<u8>>,
    /// The job holding it whole.
    pub job: Vec<Option<u64>>,
    /// Positions of the GPUs shared by jobs (GPU shares, MIG instances).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<u32>,
    /// Positions of the degraded GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<u32>,
    /// Positions of the GPUs out of service for faults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<u32>,
}
