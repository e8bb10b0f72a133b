//! The free capacity a pass starts from, kept from one pass to the next.
//!
//! Every pass starts from the snapshot's free resources less held MIG GPUs
//! and quarantined GPUs, indexed per GPU model by free count, with the up
//! nodes that have a free MIG instance or shared GPU. Between two passes
//! only the nodes that jobs started or stopped on change, and now and then
//! one whose state, health or inventory changed: the snapshot logs each
//! (`Snapshot::touch_node`), and the next pass redoes only those nodes.
//! Invariant: a kept base equals one built anew (asserted in every test
//! that runs a pass).

use crate::model::node::NodeState;
use crate::pass::snapshot::{NodeEntry, NodeFree, Snapshot};

use super::sorted::SortedSet;

/// How many changed nodes a kept base makes anew; with more, a new base is built.
const REDO_AT_MOST: usize = 32;

/// The indexes of free capacity that make a placement search cheap.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct NodeIndexes {
    /// Per model: (usable free GPUs of that model, node) for up nodes with at least one.
    pub(super) by_model: Vec<SortedSet<(u32, u32)>>,
    /// Up nodes with a free MIG instance.
    pub(super) mig_nodes: SortedSet<u32>,
    /// Up nodes with a shared GPU that has compute left.
    pub(super) share_nodes: SortedSet<u32>,
}

impl NodeIndexes {
    /// Enters node `n` (entry `e`, free resources `f`) where it belongs, if it is up.
    pub(super) fn enter(&mut self, e: &NodeEntry, f: &NodeFree, n: u32) {
        if e.node.state != NodeState::Up {
            return;
        }
        let (models, mig, share) = index_keys(e, f);
        for (m, count) in models {
            self.by_model[m].insert((count, n));
        }
        if mig {
            self.mig_nodes.insert(n);
        }
        if share {
            self.share_nodes.insert(n);
        }
    }
}

/// Free capacity at the start of a pass, with its indexes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Base {
    pub(super) free: Vec<NodeFree>,
    pub(super) ix: NodeIndexes,
    /// The node log's end it is up to date with, and the model count it was made for.
    synced: u64,
    models: usize,
}

/// Where an up node with free resources `f` belongs in the indexes: (model,
/// its free GPUs there) for each model with some, whether it has a free MIG
/// instance, whether a shared GPU of it has compute left.
fn index_keys<'a>(e: &'a NodeEntry, f: &'a NodeFree) -> (impl Iterator<Item = (usize, u32)> + 'a, bool, bool) {
    let models = e.model_masks.iter().map(|&(m, mask)| (m, (f.gpus & mask).count_ones())).filter(|(_, c)| *c > 0);
    (models, f.mig != 0, f.shares.iter().any(|s| s.milli < 1000))
}

/// What node `n` offers a pass: its free resources less held MIG GPUs and quarantined GPUs.
fn start_free(snap: &Snapshot, n: usize) -> NodeFree {
    let mut f = snap.free[n].clone();
    f.mig &= !snap.nodes[n].mig_held;
    f.exclude(snap.nodes[n].out_of_service());
    f
}

impl Base {
    /// The base of `snap`: the one the last pass kept, brought up to date, or a new one.
    pub(super) fn for_pass(snap: &Snapshot) -> Base {
        #[cfg(test)]
        if crate::pass::UNCACHED.with(std::cell::Cell::get) {
            return Base::new(snap);
        }
        let kept = snap
            .kept_capacity
            .take::<Base>()
            .filter(|b| b.free.len() == snap.nodes.len() && b.models == snap.models.len());
        let Some((mut base, changed)) = kept.and_then(|b| {
            let changed = snap.nodes_changed_since(b.synced)?.to_vec();
            Some((b, changed))
        }) else {
            return Base::new(snap);
        };
        let mut changed = changed;
        changed.sort_unstable();
        changed.dedup();
        // Making a node anew looks through every model's list for it: past a
        // few dozen nodes a new base is cheaper (a burst of starts, a fleet
        // of thousands of nodes).
        if changed.len() > REDO_AT_MOST {
            return Base::new(snap);
        }
        for n in changed {
            base.redo(snap, n);
        }
        base.synced = snap.node_log_end();
        #[cfg(test)]
        assert_eq!(base, Base::new(snap), "a kept capacity base went stale");
        base
    }

    /// Leaves the base for the next pass of `snap`.
    pub(super) fn keep(self, snap: &Snapshot) {
        #[cfg(test)]
        if crate::pass::UNCACHED.with(std::cell::Cell::get) {
            return;
        }
        snap.kept_capacity.put(self);
    }

    fn new(snap: &Snapshot) -> Base {
        // The indexes as `NodeIndexes::enter` would make them node by node,
        // from lists made in node order at once.
        let mut by_model: Vec<Vec<(u32, u32)>> = vec![Vec::with_capacity(snap.nodes.len()); snap.models.len()];
        let (mut mig_nodes, mut share_nodes) = (Vec::new(), Vec::new());
        let mut free = Vec::with_capacity(snap.nodes.len());
        for n in 0..snap.nodes.len() {
            let f = start_free(snap, n);
            if snap.nodes[n].node.state == NodeState::Up {
                let (models, mig, share) = index_keys(&snap.nodes[n], &f);
                for (m, count) in models {
                    by_model[m].push((count, n as u32));
                }
                if mig {
                    mig_nodes.push(n as u32);
                }
                if share {
                    share_nodes.push(n as u32);
                }
            }
            free.push(f);
        }
        Base {
            free,
            ix: NodeIndexes {
                by_model: by_model.into_iter().map(|list| SortedSet::from_sorted(by_free_count(list))).collect(),
                mig_nodes: SortedSet::from_sorted(mig_nodes),
                share_nodes: SortedSet::from_sorted(share_nodes),
            },
            synced: snap.node_log_end(),
            models: snap.models.len(),
        }
    }

    /// Makes node `n` anew: its free resources and its places in the indexes.
    fn redo(&mut self, snap: &Snapshot, n: u32) {
        let i = n as usize;
        // Its model masks may have changed with its inventory: every model's list is looked at.
        for list in &mut self.ix.by_model {
            if let Some(&(count, _)) = list.iter().find(|(_, m)| *m == n) {
                list.remove(&(count, n));
            }
        }
        self.ix.mig_nodes.remove(&n);
        self.ix.share_nodes.remove(&n);
        let f = start_free(snap, i);
        self.ix.enter(&snap.nodes[i], &f, n);
        self.free[i] = f;
    }
}

/// `(free GPUs, node)` pairs listed in node order, sorted: a counting sort
/// on the free count (at most 64), which keeps node order within a count.
fn by_free_count(list: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    let mut starts = [0usize; 66];
    for &(count, _) in &list {
        starts[(count as usize).min(64) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut sorted = vec![(0, 0); list.len()];
    for (count, n) in list {
        let at = &mut starts[(count as usize).min(64)];
        sorted[*at] = (count, n);
        *at += 1;
    }
    sorted
}
