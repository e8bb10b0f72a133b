//! Resources that preempted jobs still hold and that no waiting job has
//! claimed: a victim's devices beyond what its preemptor needs, while it
//! stops. A later job of the same pass, or of a later pass, may claim them
//! and wait for the victim instead of preempting more (issue 15). Every
//! claim takes its part out, so no two jobs are promised the same device.

use std::collections::BTreeMap;

use crate::model::job::{JobId, ReplicaPlacement};
use crate::pass::snapshot::NodeFree;

/// Per node: what each stopping job will give back and nobody has claimed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Releasing {
    parts: BTreeMap<u32, Vec<(JobId, ReplicaPlacement)>>,
}

/// Pieces of releasing resources taken by one claim or hold, by the job that gives them back.
pub(crate) type Pieces = Vec<(JobId, ReplicaPlacement)>;

fn is_empty(p: &ReplicaPlacement) -> bool {
    p.gpus == 0 && p.mig == 0 && p.cpus_milli == 0 && p.memory_mb == 0 && p.share.is_none()
}

impl Releasing {
    pub(crate) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Nodes with something releasing, ascending.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = u32> + '_ {
        self.parts.keys().copied()
    }

    /// A stopping job's placement (all of it: nobody has claimed it yet).
    pub(crate) fn add(&mut self, job: JobId, placement: &[ReplicaPlacement]) {
        for r in placement.iter().filter(|r| !is_empty(r)) {
            self.parts.entry(r.node.0).or_default().push((job, r.clone()));
        }
    }

    /// Gives back pieces a hold took.
    pub(crate) fn give_back(&mut self, pieces: &[(JobId, ReplicaPlacement)]) {
        for (job, p) in pieces {
            self.add(*job, std::slice::from_ref(p));
        }
    }

    /// Adds what is releasing on node `n` to `free` (a trial's view).
    pub(crate) fn overlay(&self, n: u32, free: &mut NodeFree) {
        for (_, p) in self.parts.get(&n).into_iter().flatten() {
            free.release(p);
        }
    }

    /// Takes from node `r.node` the devices `r` names that are releasing (a
    /// share of a releasing shared GPU goes whole), and CPU and memory up to
    /// what `r` asks: releasing first, so the free part is left to others.
    pub(crate) fn take(&mut self, r: &ReplicaPlacement) -> Pieces {
        let Some(parts) = self.parts.get_mut(&r.node.0) else { return Vec::new() };
        let (mut cpus, mut mem) = (r.cpus_milli, r.memory_mb);
        let mut taken = Vec::new();
        for (job, p) in parts.iter_mut() {
            let mut piece = ReplicaPlacement { gpus: 0, mig: 0, cpus_milli: 0, memory_mb: 0, share: None, ..p.clone() };
            if p.share.is_some() {
                if p.gpus & r.gpus != 0 {
                    (piece.gpus, piece.share) = (p.gpus, p.share.take());
                    p.gpus = 0;
                }
            } else {
                piece.gpus = p.gpus & r.gpus;
                p.gpus &= !r.gpus;
            }
            piece.mig = p.mig & r.mig;
            p.mig &= !r.mig;
            piece.cpus_milli = cpus.min(p.cpus_milli);
            p.cpus_milli -= piece.cpus_milli;
            cpus -= piece.cpus_milli;
            piece.memory_mb = mem.min(p.memory_mb);
            p.memory_mb -= piece.memory_mb;
            mem -= piece.memory_mb;
            if !is_empty(&piece) {
                taken.push((*job, piece));
            }
        }
        parts.retain(|(_, p)| !is_empty(p));
        if parts.is_empty() {
            self.parts.remove(&r.node.0);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node::NodeId;

    fn rp(gpus: u64, cpus: u64) -> ReplicaPlacement {
        ReplicaPlacement { node: NodeId(0), gpus, mig: 0, cpus_milli: cpus, memory_mb: 0, share: None }
    }

    #[test]
    fn a_claim_takes_its_part_and_leaves_the_rest_to_the_next() {
        let mut r = Releasing::default();
        r.add(JobId(7), &[rp(0b1111, 4000)]);
        let first = r.take(&rp(0b0011, 1000));
        assert_eq!(first, vec![(JobId(7), rp(0b0011, 1000))]);
        let mut view = NodeFree { gpus: 0, mig: 0, cpus: 0, mem: 0, shares: Vec::new() };
        r.overlay(0, &mut view);
        assert_eq!((view.gpus, view.cpus), (0b1100, 3000));
        // The same devices cannot be taken twice.
        assert_eq!(r.take(&rp(0b0011, 0)), Vec::new());
        let second = r.take(&rp(0b1100, 3000));
        assert_eq!(second, vec![(JobId(7), rp(0b1100, 3000))]);
        assert!(r.is_empty());
        r.give_back(&first);
        assert_eq!(r.nodes().collect::<Vec<_>>(), vec![0]);
    }
}
