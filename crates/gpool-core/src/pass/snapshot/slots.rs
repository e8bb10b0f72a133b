//! A node as placement sees it: its devices as slot bit masks (whole GPUs
//! and MIG instances, per model, per MIG profile, per NVLink island and NUMA
//! node) in a `NodeEntry`, and what of it is free in a `NodeFree`. A
//! placement is taken from a node's free resources and given back only
//! through `NodeFree::take` and `NodeFree::release`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::job::{JobId, ReplicaPlacement};
use crate::model::node::{Device, Node};
use crate::model::resources::{GpuMilli, MigProfile, same_model};
use crate::pass::shares::{self, SlotShare};

/// Free resources of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeFree {
    pub(crate) gpus: u64,
    pub(crate) mig: u64,
    pub(crate) cpus: u64,
    pub(crate) mem: u64,
    /// The whole-GPU slots that hold shares, and how much of each is taken
    /// (empty on most nodes, so cloning it costs nothing). A slot listed
    /// here is not in `gpus`.
    pub(crate) shares: Vec<SlotShare>,
}

impl NodeFree {
    /// Takes a replica's devices, CPU and memory. CPU and memory stop at
    /// zero rather than wrap: a claim may name resources its victims still hold.
    pub(crate) fn take(&mut self, r: &ReplicaPlacement) {
        if let Some(share) = r.share {
            shares::take(&mut self.shares, r.gpus, share);
        }
        self.gpus &= !r.gpus;
        self.mig &= !r.mig;
        self.cpus = self.cpus.saturating_sub(r.cpus_milli);
        self.mem = self.mem.saturating_sub(r.memory_mb);
    }

    /// Gives a replica's devices, CPU and memory back (the reverse of [`NodeFree::take`]).
    pub(crate) fn release(&mut self, r: &ReplicaPlacement) {
        match r.share {
            Some(share) => shares::release(&mut self.shares, &mut self.gpus, r.gpus, share),
            None => self.gpus |= r.gpus,
        }
        self.mig |= r.mig;
        self.cpus += r.cpus_milli;
        self.mem += r.memory_mb;
    }
}

/// A node plus the bit masks placement works with.
#[derive(Clone, Debug)]
pub(crate) struct NodeEntry {
    pub(crate) node: Node,
    /// Whole-GPU slot → index into `node.devices`.
    pub(crate) gpu_slots: Vec<usize>,
    /// MIG slot → (index into `node.devices`, index into that device's
    /// instances); [`NO_INSTANCE`] for a slot a GPU keeps for an instance it
    /// may have after a repartition.
    pub(crate) mig_slots: Vec<(usize, usize)>,
    /// The MIG slots that hold an instance.
    pub(crate) mig_exists: u64,
    /// MIG slots nothing new is placed on: their GPU is being emptied for a
    /// repartition (`Snapshot::hold_mig_gpu`).
    pub(crate) mig_held: u64,
    /// MIG slot ranges of the GPUs whose layout gpool may change
    /// (`Snapshot::set_mig_managed`).
    pub(crate) mig_managed: u64,
    /// Each MIG slot range is the GPU's own (`MIG_SLOTS_PER_GPU` per MIG
    /// GPU), so one GPU can be repartitioned while others run jobs.
    pub(crate) mig_ranges: bool,
    /// Per model (index into `Snapshot::models`): mask of whole-GPU slots.
    pub(crate) model_masks: Vec<(usize, u64)>,
    /// Per MIG profile (index into `Snapshot::profiles`): mask of MIG slots.
    pub(crate) profile_masks: Vec<(usize, u64)>,
    /// Per model: mask of MIG slots whose parent GPU is that model.
    pub(crate) mig_model_masks: Vec<(usize, u64)>,
    /// NVLink islands, then NUMA nodes, as masks of whole-GPU slots.
    pub(crate) nvlink_groups: Vec<u64>,
    pub(crate) numa_groups: Vec<u64>,
    /// Quota weight of each MIG slot.
    pub(crate) mig_milli: Vec<u16>,
    /// Jobs holding resources here.
    pub(crate) jobs: BTreeSet<JobId>,
    /// Whole-GPU slots that are degraded, and slots one job is to avoid (`health.rs`).
    pub(crate) degraded: u64,
    pub(crate) avoided_by: Vec<(JobId, u64)>,
    /// Whole-GPU and MIG slots of quarantined GPUs: nothing new goes there (`health.rs`).
    pub(crate) quarantined: u64,
    pub(crate) quarantined_mig: u64,
}

impl NodeEntry {
    pub(crate) fn new(node: Node, models: &mut Vec<ModelInfo>, profiles: &mut Vec<ProfileInfo>) -> NodeEntry {
        let mut e = NodeEntry {
            gpu_slots: Vec::new(),
            mig_slots: Vec::new(),
            mig_exists: 0,
            mig_held: 0,
            mig_managed: 0,
            mig_ranges: false,
            model_masks: Vec::new(),
            profile_masks: Vec::new(),
            mig_model_masks: Vec::new(),
            nvlink_groups: Vec::new(),
            numa_groups: Vec::new(),
            mig_milli: Vec::new(),
            jobs: BTreeSet::new(),
            degraded: 0,
            avoided_by: Vec::new(),
            quarantined: 0,
            quarantined_mig: 0,
            node,
        };
        let mut nvlink: BTreeMap<u32, u64> = BTreeMap::new();
        let mut numa: BTreeMap<u32, u64> = BTreeMap::new();
        let mig_gpus = e.node.devices.iter().filter(|d| d.mig.is_some()).count();
        e.mig_ranges = mig_gpus * MIG_SLOTS_PER_GPU <= 64
            && e.node.devices.iter().all(|d| d.mig.as_ref().is_none_or(|m| m.len() <= MIG_SLOTS_PER_GPU));
        let mut mig_gpus_seen = 0;
        for (di, d) in e.node.devices.iter().enumerate() {
            let m = intern_model(models, d);
            match &d.mig {
                None => {
                    let bit = 1u64 << e.gpu_slots.len();
                    e.gpu_slots.push(di);
                    add_mask(&mut e.model_masks, m, bit);
                    if let Some(g) = d.nvlink_group {
                        *nvlink.entry(g).or_default() |= bit;
                    }
                    if let Some(n) = d.numa_node {
                        *numa.entry(n).or_default() |= bit;
                    }
                }
                Some(instances) => {
                    for (ii, inst) in instances.iter().enumerate() {
                        let bit = 1u64 << e.mig_slots.len();
                        e.mig_slots.push((di, ii));
                        e.mig_exists |= bit;
                        let p = intern_profile(profiles, &inst.profile, inst.memory_mb);
                        add_mask(&mut e.profile_masks, p, bit);
                        add_mask(&mut e.mig_model_masks, m, bit);
                        e.mig_milli.push(inst.profile.gpu_milli() as u16);
                    }
                    if e.mig_ranges {
                        // This GPU's range ends where the next one's starts.
                        mig_gpus_seen += 1;
                        while e.mig_slots.len() < mig_gpus_seen * MIG_SLOTS_PER_GPU {
                            e.mig_slots.push(NO_INSTANCE);
                            e.mig_milli.push(0);
                        }
                    }
                }
            }
        }
        e.nvlink_groups = nvlink.into_values().collect();
        e.numa_groups = numa.into_values().collect();
        e
    }

    pub(crate) fn full(&self) -> NodeFree {
        NodeFree {
            gpus: low_bits(self.gpu_slots.len()),
            mig: self.mig_exists,
            cpus: self.node.cpus_milli,
            mem: self.node.memory_mb,
            shares: Vec::new(),
        }
    }

    pub(crate) fn profile_mask(&self, profile: usize) -> u64 {
        self.profile_masks.iter().find(|(p, _)| *p == profile).map_or(0, |(_, k)| *k)
    }

    /// MIG slots whose parent GPU passes the job's model constraint.
    pub(crate) fn mig_mask_for_model(&self, models: &[ModelInfo], model: Option<&str>) -> u64 {
        match model {
            None => self.mig_exists,
            Some(want) => self
                .mig_model_masks
                .iter()
                .filter(|(m, _)| same_model(&models[*m].name, want))
                .fold(0, |acc, (_, k)| acc | k),
        }
    }

    /// The MIG slots of device `di` (its range), if each MIG GPU has one.
    pub(crate) fn mig_range(&self, di: usize) -> Option<u64> {
        if !self.mig_ranges {
            return None;
        }
        let k = self.node.devices[..di].iter().filter(|d| d.mig.is_some()).count();
        Some(low_bits(MIG_SLOTS_PER_GPU) << (k * MIG_SLOTS_PER_GPU))
    }

    pub(crate) fn mig_units(&self, mask: u64) -> GpuMilli {
        bits(mask).map(|i| GpuMilli::from(self.mig_milli[i])).sum()
    }
}

/// MIG instances a GPU can have at most (seven compute slices).
pub const MIG_SLOTS_PER_GPU: usize = 7;

/// A MIG slot kept free for a GPU's future instances.
pub(crate) const NO_INSTANCE: (usize, usize) = (usize::MAX, usize::MAX);

fn add_mask(masks: &mut Vec<(usize, u64)>, key: usize, bit: u64) {
    match masks.iter_mut().find(|(k, _)| *k == key) {
        Some((_, m)) => *m |= bit,
        None => masks.push((key, bit)),
    }
}

fn intern_model(models: &mut Vec<ModelInfo>, d: &Device) -> usize {
    if let Some(i) = models.iter().position(|m| *m.name == *d.model && m.kind == d.kind) {
        return i;
    }
    models.push(ModelInfo { name: d.model.clone(), memory_mb: d.memory_mb, kind: d.kind });
    models.len() - 1
}

fn intern_profile(profiles: &mut Vec<ProfileInfo>, p: &MigProfile, memory_mb: u64) -> usize {
    if let Some(i) = profiles.iter().position(|x| x.profile == *p) {
        return i;
    }
    profiles.push(ProfileInfo { profile: p.clone(), memory_mb });
    profiles.len() - 1
}

/// A mask with the lowest `n` bits set.
pub(crate) fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Indices of the set bits, lowest first.
pub(crate) fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

/// A GPU model present in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelInfo {
    pub(crate) name: Arc<str>,
    pub(crate) memory_mb: u64,
    pub(crate) kind: crate::model::resources::DeviceKind,
}

/// A MIG profile present in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProfileInfo {
    pub(crate) profile: MigProfile,
    pub(crate) memory_mb: u64,
}
