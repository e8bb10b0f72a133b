//! GPUs new work should avoid: degraded ones (`heat.rs`: slowing down for
//! heat), and, for one job, the GPUs it was taken off as a straggler's
//! (`straggler.rs`, `onStraggler: requeue`). Both are preferences, not
//! exclusions: a replica goes on a GPU to avoid only when no fit without
//! one exists (placement ranks healthy fits first, `capacity.rs`), so a
//! cluster of hot GPUs still runs its work.

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

impl Snapshot {
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
