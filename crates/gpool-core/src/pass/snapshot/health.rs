//! GPUs new work should avoid: degraded ones (`heat.rs`: slowing down for
//! heat), and, for one job, the GPUs it was taken off as a straggler's
//! (`straggler.rs`, `onStraggler: requeue`). Both are preferences, not
//! exclusions: a replica goes on a GPU to avoid only when no fit without
//! one exists (placement ranks healthy fits first, `capacity.rs`), so a
//! cluster of hot GPUs still runs its work.
//!
//! Quarantined GPUs (`fault.rs`) are the exception: an exclusion. Nothing
//! new goes on them, whole, shared or as MIG slices, until they come back;
//! placement, backfill reservations and preemption plans all see them taken.

use super::*;

impl NodeEntry {
    /// Whole-GPU slots `job` should avoid on this node.
    pub(crate) fn avoided_slots(&self, job: JobId) -> u64 {
        self.degraded | self.avoided_by.iter().filter(|(j, _)| *j == job).fold(0, |a, (_, m)| a | m)
    }

    /// The slots of the whole GPUs with these indices.
    fn slots_of_indices(&self, indices: &[u32]) -> u64 {
        self.gpu_slots
            .iter()
            .enumerate()
            .filter(|(_, di)| self.node.devices.get(**di).is_some_and(|d| indices.contains(&d.index)))
            .fold(0, |a, (s, _)| a | 1 << s)
    }
}

impl NodeFree {
    /// Takes the slots of out-of-service GPUs out of a view of free
    /// resources (a slot holding shares takes no new share either).
    pub(crate) fn exclude(&mut self, (gpus, mig): (u64, u64)) {
        if gpus | mig == 0 {
            return;
        }
        self.gpus &= !gpus;
        self.mig &= !mig;
        self.shares.retain(|s| gpus & (1 << s.slot) == 0);
    }
}

impl NodeEntry {
    /// The whole-GPU and MIG slots of its quarantined GPUs.
    pub(crate) fn out_of_service(&self) -> (u64, u64) {
        (self.quarantined, self.quarantined_mig)
    }

    /// The MIG slots of the GPUs with these indices.
    fn mig_slots_of_indices(&self, indices: &[u32]) -> u64 {
        let mut mask = 0;
        for (di, d) in self.node.devices.iter().enumerate() {
            if d.mig.is_none() || !indices.contains(&d.index) {
                continue;
            }
            mask |= self.mig_range(di).unwrap_or(0);
            mask |= self.mig_slots.iter().enumerate().filter(|(_, (sd, _))| *sd == di).fold(0, |a, (s, _)| a | 1 << s);
        }
        mask
    }
}

impl Snapshot {
    /// Takes the GPUs of node `id` with these indices out of service (and
    /// puts the others back): nothing new is placed on them, in any form.
    pub fn set_quarantined_gpus(&mut self, id: NodeId, indices: &[u32]) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        e.quarantined = e.slots_of_indices(indices);
        e.quarantined_mig = e.mig_slots_of_indices(indices);
        self.touch_node(id.index());
        Ok(())
    }

    /// Jobs running on any part of GPU `gpu` of node `id` (whole, a share, a
    /// MIG slice), in id order.
    pub fn jobs_on_gpu(&self, id: NodeId, gpu: u32) -> Vec<JobId> {
        self.jobs_on(id)
            .filter(|j| {
                self.job(*j).and_then(Job::running).is_some_and(|r| {
                    r.placement.iter().filter(|p| p.node == id).any(|p| {
                        let (whole, mig) = self.replica_devices(p);
                        whole.iter().any(|d| d.index == gpu) || mig.iter().any(|(d, _)| d.index == gpu)
                    })
                })
            })
            .collect()
    }

    /// The indices of node `id`'s quarantined GPUs.
    pub fn quarantined_gpus(&self, id: NodeId) -> Vec<u32> {
        let Some(e) = self.nodes.get(id.index()) else { return Vec::new() };
        let whole = bits(e.quarantined).filter_map(|s| Some(e.node.devices.get(*e.gpu_slots.get(s)?)?.index));
        let mig = bits(e.quarantined_mig).filter_map(|s| {
            let (di, _) = e.mig_slots.get(s).filter(|x| **x != NO_INSTANCE)?;
            Some(e.node.devices.get(*di)?.index)
        });
        let mut all: Vec<u32> = whole.chain(mig).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Marks the whole GPUs of node `id` with these indices as degraded
    /// (and the others as not): new work avoids them while it can.
    pub fn set_degraded_gpus(&mut self, id: NodeId, indices: &[u32]) -> Result<(), SnapshotError> {
        let e = self.nodes.get_mut(id.index()).ok_or(SnapshotError::UnknownNode(id))?;
        e.degraded = e.slots_of_indices(indices);
        self.refresh_health();
        Ok(())
    }

    /// The indices of node `id`'s degraded GPUs.
    pub fn degraded_gpus(&self, id: NodeId) -> Vec<u32> {
        let Some(e) = self.nodes.get(id.index()) else { return Vec::new() };
        bits(e.degraded).filter_map(|s| Some(e.node.devices.get(*e.gpu_slots.get(s)?)?.index)).collect()
    }

    /// Job `job`'s next placement avoids these GPUs (node, GPU index), until it starts or ends.
    pub fn set_avoid(&mut self, job: JobId, gpus: &[(NodeId, u32)]) -> Result<(), SnapshotError> {
        if !self.jobs.contains_key(&job) {
            return Err(SnapshotError::UnknownJob(job));
        }
        self.clear_avoid(job);
        for (node, index) in gpus {
            let e = self.nodes.get_mut(node.index()).ok_or(SnapshotError::UnknownNode(*node))?;
            let mask = e.slots_of_indices(&[*index]);
            match e.avoided_by.iter_mut().find(|(j, _)| *j == job) {
                Some((_, m)) => *m |= mask,
                None => e.avoided_by.push((job, mask)),
            }
            self.avoiding.entry(job).or_default().push(*node);
        }
        self.refresh_health();
        Ok(())
    }

    /// Drops what `job` was to avoid (it started, or ended).
    pub(crate) fn clear_avoid(&mut self, job: JobId) {
        let Some(nodes) = self.avoiding.remove(&job) else { return };
        for n in nodes {
            if let Some(e) = self.nodes.get_mut(n.index()) {
                e.avoided_by.retain(|(j, _)| *j != job);
            }
        }
        self.refresh_health();
    }

    fn refresh_health(&mut self) {
        self.health_in_use = !self.avoiding.is_empty() || self.nodes.iter().any(|e| e.degraded != 0);
    }

    /// Whether any GPU is to be avoided: placement then looks at every node,
    /// not only the first that fits.
    pub(crate) fn health_in_use(&self) -> bool {
        self.health_in_use
    }
}
