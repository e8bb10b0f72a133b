//! A node's MIG GPUs one at a time: their instances and which are free,
//! holding one so that it empties, and giving an empty one new instances
//! while the node's other GPUs run jobs. Each MIG GPU of a node has a
//! range of slots of its own (`MIG_SLOTS_PER_GPU`), so its instances can
//! change without renumbering anyone else's.

use crate::model::node::{MigInstance, NodeId};
use crate::pass::snapshot::{MIG_SLOTS_PER_GPU, NodeEntry, Snapshot, SnapshotError};

impl Snapshot {
    /// The MIG instances of GPU `gpu` (driver index) of node `id`, each
    /// with whether it is free; `None` for no such GPU or one not in MIG mode.
    pub fn mig_instances(&self, id: NodeId, gpu: u32) -> Option<Vec<(&MigInstance, bool)>> {
        let e = self.nodes.get(id.index())?;
        let f = self.free.get(id.index())?;
        let di = e.node.devices.iter().position(|d| d.index == gpu)?;
        let instances = e.node.devices[di].mig.as_ref()?;
        let mut out: Vec<(&MigInstance, bool)> = instances.iter().map(|i| (i, false)).collect();
        for (slot, &(d, i)) in e.mig_slots.iter().enumerate() {
            if d == di
                && let Some(o) = out.get_mut(i)
            {
                o.1 = f.mig & (1u64 << slot) != 0;
            }
        }
        Some(out)
    }

    /// Gives the MIG GPU of driver index `gpu` on node `id` new instances
    /// (a repartition), while other GPUs of the node may run jobs. Refused
    /// while a job holds one of its instances, for a GPU not in MIG mode,
    /// and on a node whose MIG GPUs do not each have a slot range of their
    /// own (more than nine of them).
    pub fn repartition(&mut self, id: NodeId, gpu: u32, instances: Vec<MigInstance>) -> Result<(), SnapshotError> {
        // The node's marks by GPU index, to put back on the rebuilt entry.
        let (quarantined, degraded) = (self.quarantined_gpus(id), self.degraded_gpus(id));
        let e = self.nodes.get(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        let name = e.node.name.to_string();
        let refuse = |why: &str| SnapshotError::Repartition { node: name.clone(), gpu, why: why.to_string() };
        let di = e.node.devices.iter().position(|d| d.index == gpu).ok_or_else(|| refuse("no such GPU"))?;
        if e.node.devices[di].mig.is_none() {
            return Err(refuse("it is not in MIG mode"));
        }
        let range = e.mig_range(di).ok_or_else(|| refuse("the node has too many MIG GPUs to repartition one alone"))?;
        if instances.len() > MIG_SLOTS_PER_GPU {
            return Err(refuse("more than seven instances"));
        }
        let f = &self.free[id.index()];
        if (e.mig_exists & range) & !f.mig != 0 {
            return Err(refuse("a job holds one of its instances"));
        }
        let mut node = e.node.clone();
        node.devices[di].mig = Some(instances);
        node.validate()?;
        let jobs = e.jobs.clone();
        let held = e.mig_held & !range;
        let managed = e.mig_managed;
        let mut entry = NodeEntry::new(node, &mut self.models, &mut self.profiles);
        entry.jobs = jobs;
        entry.mig_held = held;
        entry.mig_managed = managed;
        let f = &mut self.free[id.index()];
        f.mig = (f.mig & !range) | (entry.mig_exists & range);
        self.nodes[id.index()] = entry;
        self.touch_node(id.index());
        self.set_quarantined_gpus(id, &quarantined)?;
        self.set_degraded_gpus(id, &degraded)
    }

    /// Stops (`hold`) or resumes placing new jobs on the MIG instances of
    /// GPU `gpu` of node `id`, so that it empties for a repartition while
    /// the node's other GPUs keep working. A repartition resumes it.
    pub fn hold_mig_gpu(&mut self, id: NodeId, gpu: u32, hold: bool) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        let refuse = |why: &str| SnapshotError::Repartition { node: e.node.name.to_string(), gpu, why: why.into() };
        let di = e.node.devices.iter().position(|d| d.index == gpu).ok_or_else(|| refuse("no such GPU"))?;
        if e.node.devices[di].mig.is_none() {
            return Err(refuse("it is not in MIG mode"));
        }
        let range = e.mig_range(di).ok_or_else(|| refuse("the node has too many MIG GPUs to hold one alone"))?;
        if hold {
            e.mig_held |= range;
        } else {
            e.mig_held &= !range;
        }
        self.touch_node(id.index());
        Ok(())
    }

    /// Whether new jobs are kept off GPU `gpu` of node `id` ([`Snapshot::hold_mig_gpu`]).
    pub fn mig_gpu_held(&self, id: NodeId, gpu: u32) -> bool {
        let Some(e) = self.nodes.get(id.index()) else { return false };
        let Some(di) = e.node.devices.iter().position(|d| d.index == gpu) else { return false };
        e.mig_range(di).is_some_and(|r| e.mig_held & r != 0)
    }

    /// Lets gpool change (`managed`) or not the layout of MIG GPU `gpu` of
    /// node `id`: the MIG planner only repartitions managed GPUs, and a
    /// MIG request that some managed GPU could be laid out for is feasible
    /// even if no layout has its profile now.
    pub fn set_mig_managed(&mut self, id: NodeId, gpu: u32, managed: bool) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        let refuse = |why: &str| SnapshotError::Repartition { node: e.node.name.to_string(), gpu, why: why.into() };
        let di = e.node.devices.iter().position(|d| d.index == gpu).ok_or_else(|| refuse("no such GPU"))?;
        if e.node.devices[di].mig.is_none() {
            return Err(refuse("it is not in MIG mode"));
        }
        let range = e.mig_range(di).ok_or_else(|| refuse("the node has too many MIG GPUs to manage one alone"))?;
        if managed {
            e.mig_managed |= range;
        } else {
            e.mig_managed &= !range;
        }
        Ok(())
    }

    /// Whether gpool may change the layout of GPU `gpu` of node `id`.
    pub fn mig_gpu_managed(&self, id: NodeId, gpu: u32) -> bool {
        let Some(e) = self.nodes.get(id.index()) else { return false };
        let Some(di) = e.node.devices.iter().position(|d| d.index == gpu) else { return false };
        e.mig_range(di).is_some_and(|r| e.mig_managed & r != 0)
    }
}
