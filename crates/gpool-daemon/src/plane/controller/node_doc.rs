//! What the store remembers of a node (its [`NodeDoc`], written as JSON in
//! its row), and the scheduler's [`Node`] made from it.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpool_api::agent as wire;
use gpool_core::{Device, DeviceKind, GpuSharing, MigInstance, Node, NodeState, Pool, PoolKind};
use gpool_store::Write;
use serde::{Deserialize, Serialize};

use crate::protocol::NodeInfo;

/// What the store remembers of a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeDoc {
    pub name: String,
    pub addr: String,
    pub source: String,
    /// What its device layer could not read (`Register::degraded`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub pool: Option<String>,
    pub cpus: f64,
    pub memory_mb: u64,
    pub gpus: Vec<wire::GpuWire>,
    /// `off`, `time-slicing` or `mps` (`gpool_core::GpuSharing`).
    #[serde(default = "sharing_off")]
    pub gpu_sharing: String,
    #[serde(default)]
    pub container_runtime: Option<String>,
    /// Indices of the MIG GPUs whose layout gpool may change.
    #[serde(default)]
    pub mig_managed: Vec<u32>,
    pub epoch: u64,
    #[serde(default)]
    pub draining: bool,
    /// Served by the control plane's own agent (`gpool up`).
    #[serde(default)]
    pub local: bool,
}

impl NodeDoc {
    /// A node's record from its own description (a new epoch, not draining, remote).
    pub fn from_info(i: NodeInfo) -> NodeDoc {
        NodeDoc {
            name: i.name,
            addr: i.addr,
            source: i.source,
            degraded: i.degraded,
            labels: i.labels,
            pool: i.pool,
            cpus: i.cpus,
            memory_mb: i.memory_mb,
            gpus: i.gpus,
            gpu_sharing: i.gpu_sharing,
            container_runtime: i.container_runtime,
            mig_managed: i.mig_managed,
            epoch: 0,
            draining: false,
            local: false,
        }
    }
}

fn sharing_off() -> String {
    "off".into()
}

/// The scheduling core's node from what an agent reported.
/// The most memory a node or one of its devices may say it has, in MiB (64 TiB).
const MAX_MEMORY_MB: u64 = 64 << 20;
/// The most CPUs a node may say it has.
const MAX_CPUS: f64 = 100_000.0;

/// Whether a node's record (a registration, or one read back from the
/// store) is one the control plane can hold, checked whole before anything
/// is stored: the scheduler's own rules for a node (device count, each
/// index and UUID once), sane numbers, and text that is safe to print.
/// `Err` names the field.
pub(super) fn check(d: &NodeDoc) -> Result<(), String> {
    core_node(d).validate().map_err(|e| format!("gpus: {e}"))?;
    if !(d.cpus.is_finite() && (0.0..=MAX_CPUS).contains(&d.cpus)) {
        return Err(format!("cpus: {} is not a number of CPUs from 0 to {MAX_CPUS}", d.cpus));
    }
    if d.memory_mb > MAX_MEMORY_MB {
        return Err(format!("memoryMb: {} is more than {MAX_MEMORY_MB} MiB", d.memory_mb));
    }
    let text = |field: String, v: &str| -> Result<(), String> {
        crate::plane::input::text(&field, v).map_err(|r| format!("{}: {}", r.field, r.message))?;
        if v.len() > 4096 { Err(format!("{field}: {} bytes, the most is 4096", v.len())) } else { Ok(()) }
    };
    text("node".into(), &d.name)?;
    text("addr".into(), &d.addr)?;
    text("source".into(), &d.source)?;
    text("gpuSharing".into(), &d.gpu_sharing)?;
    for (i, v) in d.degraded.iter().enumerate() {
        text(format!("degraded[{i}]"), v)?;
    }
    for (k, v) in &d.labels {
        text("labels".into(), k)?;
        text(format!("labels.{k}"), v)?;
    }
    for v in d.pool.iter().chain(&d.container_runtime) {
        text("pool".into(), v)?;
    }
    for (i, g) in d.gpus.iter().enumerate() {
        for (f, v) in [("kind", &g.kind), ("uuid", &g.uuid), ("name", &g.name), ("model", &g.model)] {
            text(format!("gpus[{i}].{f}"), v)?;
        }
        if g.memory_mb > MAX_MEMORY_MB {
            return Err(format!("gpus[{i}].memoryMb: {} is more than {MAX_MEMORY_MB} MiB", g.memory_mb));
        }
    }
    Ok(())
}

pub fn core_node(d: &NodeDoc) -> Node {
    let mut node = Node::new(&d.name, 0, 0);
    node.cpus_milli = (d.cpus.max(0.0) * 1000.0).round() as u64;
    node.memory_mb = d.memory_mb;
    node.labels = d.labels.clone();
    if let Some(p) = &d.pool {
        let kind = match p.as_str() {
            "spot" | "preemptible" => PoolKind::Spot,
            "reserved" => PoolKind::Reserved,
            _ => PoolKind::OnDemand,
        };
        node.pool = Pool { name: Arc::from(p.as_str()), kind };
    }
    node.state = if d.draining { NodeState::Draining } else { NodeState::Up };
    // An unknown mode (a newer agent's) shares nothing rather than guess.
    node.sharing = d.gpu_sharing.parse().unwrap_or(GpuSharing::Off);
    // A device of a kind this control plane does not know (a newer agent's) is not given out.
    node.devices = d
        .gpus
        .iter()
        .filter_map(|g| Some((g, g.kind.parse::<DeviceKind>().ok()?)))
        .map(|(g, kind)| Device {
            index: g.index,
            uuid: Arc::from(g.uuid.as_str()),
            kind,
            model: Arc::from(g.model.as_str()),
            memory_mb: g.memory_mb,
            nvlink_group: g.nvlink_group,
            numa_node: g.numa_node,
            mig: g.mig.as_ref().map(|list| {
                list.iter()
                    .filter_map(|m| {
                        Some(MigInstance {
                            profile: m.profile.parse().ok()?,
                            uuid: Arc::from(m.uuid.as_str()),
                            gi_id: m.gi_id,
                            memory_mb: m.memory_mb,
                        })
                    })
                    .collect()
            }),
        })
        .collect();
    node
}

pub(super) fn node_row(d: &NodeDoc, now: i64) -> Write {
    let state = if d.draining { "draining" } else { "up" };
    Write::PutNode(gpool_store::NodeRow {
        name: d.name.clone(),
        state: state.into(),
        doc: serde_json::to_string(d).unwrap_or_default(),
        updated_ms: now,
    })
}
