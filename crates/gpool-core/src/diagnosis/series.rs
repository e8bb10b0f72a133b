//! The telemetry series of the devices a job holds, as the advisor
//! (`advice.rs`) and the straggler check (`straggler.rs`) read them.

use crate::model::resources::MigProfile;
use crate::model::time::Time;

/// One sample of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DevicePoint {
    pub at: Time,
    /// Percent; `None` where the device does not report it (MIG instances).
    pub util: Option<f64>,
    pub memory_used_mb: Option<u64>,
    /// The GPU's SM clock, MHz, where known.
    pub sm_clock_mhz: Option<u32>,
    /// The GPU's active clock-event reasons ([`crate::health::heat::throttle`] bits).
    pub throttle: u32,
    /// The whole GPU's utilisation, where the device is a share of it
    /// (`util` is then the job's own part).
    pub gpu_util: Option<f64>,
}

/// The series of one device a job holds: a whole GPU or a MIG instance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSeries {
    /// How people name it: `node1/gpu3`, `node1/gpu0 (1g.10gb)`.
    pub name: String,
    pub memory_total_mb: u64,
    /// `Some` for a MIG instance.
    pub mig_profile: Option<MigProfile>,
    pub points: Vec<DevicePoint>,
    /// The node it is on, its GPU, the rank of the replica that holds it, its GPU
    /// model, NUMA node, and whether it is a share of a GPU: what
    /// [`crate::diagnosis::straggler`] compares. Empty or `None` where unknown.
    pub node: String,
    /// The index of its GPU on the node.
    pub gpu: Option<u32>,
    pub rank: Option<u32>,
    pub model: Option<String>,
    pub numa_node: Option<u32>,
    pub shared: bool,
}
