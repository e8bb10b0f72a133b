//! Nodes and the accelerator devices on them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::model::resources::{DeviceKind, MigProfile};

/// Index of a node in a [`crate::Snapshot`]. Stable for the snapshot's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Key/value labels, as on Kubernetes nodes and pods.
pub type Labels = BTreeMap<String, String>;

/// Whether a node takes new work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NodeState {
    /// Takes new work.
    #[default]
    Up,
    /// Running jobs finish; nothing new is placed.
    Draining,
    /// Unreachable or removed; nothing runs or is placed here.
    Down,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Draining => "draining",
            NodeState::Down => "down",
        }
    }
}

/// How a node is paid for. Cost accounting and spot handling build on this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PoolKind {
    #[default]
    OnDemand,
    Spot,
    Reserved,
}

impl PoolKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::OnDemand => "on-demand",
            PoolKind::Spot => "spot",
            PoolKind::Reserved => "reserved",
        }
    }
}

/// A named group of nodes bought the same way (e.g. `spot-h100`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool {
    pub name: Arc<str>,
    pub kind: PoolKind,
}

impl Default for Pool {
    fn default() -> Self {
        Pool { name: Arc::from("default"), kind: PoolKind::OnDemand }
    }
}

/// How a node lets several jobs use one GPU ([`crate::GpuRequest::Share`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GpuSharing {
    /// Whole GPUs and MIG instances only.
    Off,
    /// Jobs take turns on the GPU (the driver's time-slicing); the node
    /// watches each job's GPU memory and stops one that exceeds its share.
    #[default]
    TimeSlicing,
    /// NVIDIA MPS runs on the node: a job's compute share and memory limit are
    /// set by `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`.
    Mps,
}

impl GpuSharing {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSharing::Off => "off",
            GpuSharing::TimeSlicing => "time-slicing",
            GpuSharing::Mps => "mps",
        }
    }
}

impl std::str::FromStr for GpuSharing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" | "no" => Ok(GpuSharing::Off),
            "time-slicing" | "timeslicing" | "time-slice" => Ok(GpuSharing::TimeSlicing),
            "mps" => Ok(GpuSharing::Mps),
            other => Err(format!("unknown GPU sharing mode {other:?}: expected off, time-slicing or mps")),
        }
    }
}

/// One MIG GPU instance on a MIG-enabled GPU.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MigInstance {
    pub profile: MigProfile,
    /// `MIG-…` UUID, what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Arc<str>,
    /// GPU-instance id assigned by the driver, where the agent could read
    /// it (listing GPU instances may need root); the UUID is the key.
    pub gi_id: Option<u32>,
    /// Usable memory in MiB (slightly below the profile's nominal GB).
    pub memory_mb: u64,
}

/// One accelerator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// Driver index (`nvidia-smi` index), what `CUDA_VISIBLE_DEVICES` takes.
    pub index: u32,
    pub uuid: Arc<str>,
    pub kind: DeviceKind,
    /// Short model name, e.g. `H100-80GB`.
    pub model: Arc<str>,
    pub memory_mb: u64,
    /// Devices with the same value are connected by NVLink (an NVSwitch island or a pair).
    pub nvlink_group: Option<u32>,
    pub numa_node: Option<u32>,
    /// `Some` when MIG mode is on: the device is then only usable through its instances.
    pub mig: Option<Vec<MigInstance>>,
}

/// A node's GPUs' draw, idle and at their power limit, for power budgets
/// (`power.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePower {
    pub idle_watts: u32,
    pub max_watts: u32,
}

/// A machine with CPUs, memory and accelerators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: Arc<str>,
    pub labels: Labels,
    pub pool: Pool,
    pub state: NodeState,
    pub cpus_milli: u64,
    pub memory_mb: u64,
    pub devices: Vec<Device>,
    /// Whether and how jobs may share this node's whole GPUs.
    pub sharing: GpuSharing,
    /// Its GPUs' draw, idle and at their limit, for power budgets (`power.rs`); `None`: not counted.
    pub power: Option<NodePower>,
}

/// At most this many whole GPUs, and this many MIG instances, on one node.
pub const MAX_DEVICES_PER_NODE: usize = 64;

/// Why a node description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("node {node}: {count} devices, at most {MAX_DEVICES_PER_NODE} are supported per node")]
    TooManyDevices { node: String, count: usize },
    #[error("node {node}: {count} MIG instances, at most {MAX_DEVICES_PER_NODE} are supported per node")]
    TooManyMigInstances { node: String, count: usize },
    #[error("node {node}: device index {index} appears twice")]
    DuplicateIndex { node: String, index: u32 },
    #[error("node {node}: device UUID {uuid} appears twice")]
    DuplicateUuid { node: String, uuid: String },
    #[error("node {node} is already known")]
    Duplicate { node: String },
    #[error("node name must not be empty")]
    EmptyName,
}

impl Node {
    /// A node with the given name and resources, up, with no devices.
    pub fn new(name: &str, cpus: u64, memory_mb: u64) -> Node {
        Node {
            name: Arc::from(name),
            labels: Labels::new(),
            pool: Pool::default(),
            state: NodeState::Up,
            cpus_milli: cpus * 1000,
            memory_mb,
            devices: Vec::new(),
            sharing: GpuSharing::default(),
            power: None,
        }
    }

    /// A node with `count` identical GPUs on one NVLink island (an HGX board),
    /// 12 CPUs and 128 GiB of memory per GPU. UUIDs are `GPU-<node>-<index>`.
    pub fn with_gpus(name: &str, count: u32, model: &str, memory_mb: u64) -> Node {
        let mut n = Node::new(name, u64::from(count.max(1)) * 12, u64::from(count.max(1)) * 128 * 1024);
        n.devices = (0..count)
            .map(|i| Device {
                index: i,
                uuid: Arc::from(format!("GPU-{name}-{i}")),
                kind: DeviceKind::NvidiaGpu,
                model: Arc::from(model),
                memory_mb,
                nvlink_group: Some(0),
                numa_node: Some(i * 2 / count.max(1)),
                mig: None,
            })
            .collect();
        n
    }

    /// What a node must be to be added: a name, at most
    /// [`MAX_DEVICES_PER_NODE`] devices and MIG instances, each device's
    /// index and UUID once.
    pub fn validate(&self) -> Result<(), NodeError> {
        let node = || self.name.to_string();
        if self.name.is_empty() {
            return Err(NodeError::EmptyName);
        }
        if self.devices.len() > MAX_DEVICES_PER_NODE {
            return Err(NodeError::TooManyDevices { node: node(), count: self.devices.len() });
        }
        let mig: usize = self.devices.iter().filter_map(|d| d.mig.as_ref()).map(Vec::len).sum();
        if mig > MAX_DEVICES_PER_NODE {
            return Err(NodeError::TooManyMigInstances { node: node(), count: mig });
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut uuids = std::collections::BTreeSet::new();
        for d in &self.devices {
            if !seen.insert(d.index) {
                return Err(NodeError::DuplicateIndex { node: node(), index: d.index });
            }
            if !d.uuid.is_empty() && !uuids.insert(&d.uuid) {
                return Err(NodeError::DuplicateUuid { node: node(), uuid: d.uuid.to_string() });
            }
        }
        Ok(())
    }

    /// Whole GPUs of this node that can be allocated (MIG off).
    pub fn whole_gpus(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| d.mig.is_none())
    }

    /// Labels including the ones gpool sets itself (`gpool.io/pool`, `gpool.io/pool-kind`, `kubernetes.io/hostname`).
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            "gpool.io/pool" => Some(&self.pool.name),
            "gpool.io/pool-kind" => Some(self.pool.kind.as_str()),
            "kubernetes.io/hostname" | "gpool.io/hostname" => Some(&self.name),
            _ => self.labels.get(key).map(String::as_str),
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node#{}", self.0)
    }
}
