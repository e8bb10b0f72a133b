//! Cluster descriptions for the simulator: uniform (`--nodes N
//! --gpus-per-node G`) or heterogeneous node groups in a YAML file.
//!
//! ```yaml
//! nodes:
//!   - name: a100          # node names: a100-0, a100-1, ...
//!     count: 40
//!     gpus: 8
//!     model: A100-80GB
//!     gpu_memory_gb: 80   # optional, default from the model name or 80
//!     cpus: 96            # optional, default 12 per GPU
//!     memory_gb: 1024     # optional, default 128 per GPU
//!     labels: {zone: a}   # optional
//!     pool: spot          # optional pool name; kind from `pool_kind`
//!     pool_kind: spot     # on-demand (default), spot or reserved
//!   - name: l4
//!     count: 20
//!     gpus: 4
//!     model: L4-24GB
//!   - name: mi300x
//!     count: 4
//!     gpus: 8
//!     model: MI300X-192GB
//!     kind: amd.com/gpu   # nvidia.com/gpu (default), amd.com/gpu or google.com/tpu
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use gpool_core::{DeviceKind, Node, Pool, PoolKind};
use serde::Deserialize;

/// Why a cluster description was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster file: {0}")]
    Yaml(String),
    #[error("cluster file: node group {group}: {what}")]
    Invalid { group: String, what: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    nodes: Vec<Group>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    name: String,
    #[serde(default = "one")]
    count: u32,
    gpus: u32,
    #[serde(default = "default_model")]
    model: String,
    gpu_memory_gb: Option<u64>,
    cpus: Option<u64>,
    memory_gb: Option<u64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    pool: Option<String>,
    pool_kind: Option<String>,
    /// The accelerator kind of the group's devices.
    kind: Option<String>,
}

fn one() -> u32 {
    1
}

fn default_model() -> String {
    "H100-80GB".into()
}

/// GPU memory in MiB guessed from a model name like `A100-40GB` (80 GB otherwise).
pub fn model_memory_mb(model: &str) -> u64 {
    let gb = model
        .rsplit(['-', '_', ' '])
        .find_map(|part| part.to_ascii_lowercase().strip_suffix("gb").and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(80);
    gb * 1024
}

/// A GPU model's nameplate power (board power limit) in watts, from its
/// vendor's data sheet; 400 W for a model not listed.
pub fn nameplate_watts(model: &str) -> u32 {
    let m = model.to_ascii_uppercase();
    let table: [(&str, u32); 12] = [
        ("H200", 700),
        ("H100", 700),
        ("B200", 1000),
        ("A100", 400),
        ("V100", 300),
        ("P100", 250),
        ("A10", 150),
        ("L40", 300),
        ("L4", 72),
        ("T4", 70),
        ("MI300", 750),
        ("MI250", 560),
    ];
    table.iter().find(|(k, _)| m.starts_with(k)).map_or(400, |(_, w)| *w)
}

/// Gives every node its GPUs' draw (idle a tenth of nameplate, at work the
/// nameplate) and every pool a budget of `fraction` of its GPUs' nameplate
/// power (a cluster cap, as EAR's beside Slurm: any node may run at full
/// power while the pool as a whole stays within it).
pub fn with_power_budgets(mut nodes: Vec<Node>, fraction: f64) -> (Vec<Node>, Vec<gpool_core::power::PowerBudget>) {
    use gpool_core::power::{NodePower, PowerBudget, PowerScope};
    let mut per_pool: std::collections::BTreeMap<std::sync::Arc<str>, f64> = std::collections::BTreeMap::new();
    for n in &mut nodes {
        let Some(model) = n.devices.first().map(|d| d.model.to_string()) else { continue };
        let max = nameplate_watts(&model);
        n.power = Some(NodePower { idle_watts: max / 10, max_watts: max });
        *per_pool.entry(n.pool.name.clone()).or_default() += f64::from(max) * n.devices.len() as f64;
    }
    let budgets = per_pool
        .into_iter()
        .map(|(pool, watts)| PowerBudget { scope: PowerScope::Pool(pool), watts: (fraction * watts).floor() as u32 })
        .collect();
    (nodes, budgets)
}

/// `nodes` identical nodes of `gpus` GPUs of `model`.
pub fn uniform(nodes: u32, gpus: u32, model: &str) -> Vec<Node> {
    (0..nodes).map(|i| Node::with_gpus(&format!("node-{i:04}"), gpus, model, model_memory_mb(model))).collect()
}

/// Nodes from a cluster YAML text.
pub fn from_yaml(text: &str) -> Result<Vec<Node>, ClusterError> {
    // serde-saphyr reads within its budget (depth, nodes, aliases); its
    // message shows where in the file, with a snippet of it.
    // YAML 1.2's booleans only, as everywhere in gpool (gpool_api::yaml).
    let options = serde_saphyr::options! { strict_booleans: true };
    let file: File =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| ClusterError::Yaml(e.to_string()))?;
    let mut out = Vec::new();
    for g in file.nodes {
        let bad = |what: String| ClusterError::Invalid { group: g.name.clone(), what };
        if g.gpus > 64 {
            return Err(bad(format!("{} GPUs per node; at most 64 are supported", g.gpus)));
        }
        let kind = match g.pool_kind.as_deref() {
            None | Some("on-demand") => PoolKind::OnDemand,
            Some("spot") => PoolKind::Spot,
            Some("reserved") => PoolKind::Reserved,
            Some(other) => return Err(bad(format!("pool_kind {other:?} is not on-demand, spot or reserved"))),
        };
        let device_kind = match g.kind.as_deref() {
            None => DeviceKind::NvidiaGpu,
            Some(k) => k.parse::<DeviceKind>().map_err(bad)?,
        };
        let memory = g.gpu_memory_gb.map_or_else(|| model_memory_mb(&g.model), |gb| gb * 1024);
        for i in 0..g.count {
            let mut n = Node::with_gpus(&format!("{}-{i}", g.name), g.gpus, &g.model, memory);
            for d in &mut n.devices {
                d.kind = device_kind;
            }
            if let Some(c) = g.cpus {
                n.cpus_milli = c * 1000;
            }
            if let Some(m) = g.memory_gb {
                n.memory_mb = m * 1024;
            }
            n.labels = g.labels.clone();
            if let Some(p) = &g.pool {
                n.pool = Pool { name: Arc::from(p.as_str()), kind };
            }
            out.push(n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_budgets_are_a_fraction_of_the_nameplate_power() {
        assert_eq!(
            (nameplate_watts("H100-80GB"), nameplate_watts("a100-40gb"), nameplate_watts("X1")),
            (700, 400, 400)
        );
        let (nodes, budgets) = with_power_budgets(uniform(2, 8, "H100-80GB"), 0.8);
        let p = nodes[0].power.expect("power");
        assert_eq!((p.idle_watts, p.max_watts), (70, 700));
        assert_eq!(budgets.iter().map(|b| b.watts).collect::<Vec<_>>(), [8960], "one budget for the pool");
        assert_eq!(budgets[0].scope.to_string(), "pool default");
    }

    #[test]
    fn yaml_groups_expand_to_nodes() {
        let text = "nodes:\n  - {name: a100, count: 2, gpus: 8, model: A100-40GB, labels: {zone: a}}\n  - {name: l4, count: 1, gpus: 4, model: L4-24GB, pool: spot-l4, pool_kind: spot}\n";
        let nodes = from_yaml(text).expect("valid");
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].devices[0].memory_mb, 40 * 1024);
        assert_eq!(nodes[1].labels.get("zone").map(String::as_str), Some("a"));
        assert_eq!((nodes[2].devices.len(), nodes[2].pool.kind), (4, PoolKind::Spot));
    }

    #[test]
    fn a_group_names_its_accelerator_kind() {
        let text = "nodes:\n  - {name: mi, count: 1, gpus: 8, model: MI300X-192GB, kind: amd.com/gpu}\n  - {name: v5p, count: 1, gpus: 4, model: TPU-v5p, kind: google.com/tpu}\n";
        let nodes = from_yaml(text).expect("valid");
        assert!(nodes[0].devices.iter().all(|d| d.kind == DeviceKind::AmdGpu));
        assert!(nodes[1].devices.iter().all(|d| d.kind == DeviceKind::Tpu));
        assert!(
            from_yaml("nodes:\n  - {name: x, gpus: 8, kind: fpga}\n")
                .is_err_and(|e| e.to_string().contains("fpga") && e.to_string().contains("amd.com/gpu"))
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_errors() {
        assert!(
            from_yaml("nodes:\n  - {name: x, gpus: 8, colour: red}\n").is_err_and(|e| e.to_string().contains("colour"))
        );
        assert!(from_yaml("nodes:\n  - {name: x, gpus: 65}\n").is_err_and(|e| e.to_string().contains("at most 64")));
        assert!(
            from_yaml("nodes:\n  - {name: x, gpus: 8, pool_kind: cheap}\n")
                .is_err_and(|e| e.to_string().contains("cheap"))
        );
    }
}
