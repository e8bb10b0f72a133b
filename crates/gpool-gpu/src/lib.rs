//! # gpool-gpu
//!
//! The device layer: what GPUs a node has, behind one trait, [`Backend`].
//!
//! - [`nvml`]: NVIDIA's management library, loaded at run time (no link-time
//!   dependency): builds everywhere, and says plainly when there is no driver.
//! - [`simulated`]: an inventory from a spec like `8xH100-80GB` for machines
//!   without GPUs, demos and tests.

pub mod model;
pub mod nvml;
pub mod simulated;

/// One MIG GPU instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInfo {
    /// Profile name, e.g. `1g.10gb`.
    pub profile: String,
    pub uuid: String,
    pub gi_id: u32,
    pub memory_mb: u64,
}

/// One GPU as discovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    /// The name the driver reports, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Short model name gpool matches requests against, e.g. `H100-80GB`.
    pub model: String,
    pub memory_mb: u64,
    pub pci_bus_id: Option<String>,
    /// GPUs with the same group are connected by NVLink.
    pub nvlink_group: Option<u32>,
    pub numa_node: Option<u32>,
    /// `Some` when MIG mode is on.
    pub mig: Option<Vec<MigInfo>>,
}

/// Why devices could not be discovered.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no NVIDIA driver found: {0}. Install the driver (nvidia-smi must work), or run with --simulate-gpus 8xH100-80GB to try gpool without GPUs"
    )]
    NoDriver(String),
    #[error("NVML error: {0}")]
    Nvml(String),
    #[error(
        "invalid --simulate-gpus {spec:?}: {why} (expected e.g. 8xH100-80GB, 4xA100-80GB,4xL4 or 1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb)"
    )]
    Spec { spec: String, why: String },
}

/// A source of device inventory.
pub trait Backend: Send {
    /// `nvml`, `nvidia-smi` or `simulated`.
    fn name(&self) -> &'static str;
    /// The node's GPUs, in driver index order.
    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError>;
}
