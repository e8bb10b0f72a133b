//! Where one replica fits on one node, given what is free there: whole GPUs
//! of a model (one NVLink island, then one NUMA node, before scattered), MIG
//! instances of a profile, a share of one GPU, or CPU and memory alone. A
//! fit says which devices and how good it is; choosing between nodes is the
//! search's (`search.rs`).

use crate::model::job::{GpuRequest, GpuShare, Job, ReplicaPlacement, ReplicaRequest};
use crate::model::node::{GpuSharing, NodeId};
use crate::model::resources::same_model;
use crate::pass::shares;
use crate::pass::snapshot::{NodeEntry, NodeFree, Snapshot, bits};
use crate::policies::policy::PlacementStrategy;

/// One feasible spot for a replica on a node.
#[derive(Clone, Debug)]
pub(crate) struct Fit {
    pub(crate) gpus: u64,
    pub(crate) mig: u64,
    /// 2 = one NVLink island (or topology unknown), 1 = one NUMA node, 0 = scattered.
    pub(crate) topology: u8,
    /// How many matching devices the node had usable (best fit prefers fewer).
    pub(crate) avail: u32,
    /// The share of the one GPU in `gpus`, for a [`GpuRequest::Share`].
    pub(crate) share: Option<GpuShare>,
    /// How the strategy ranks this fit against other nodes' when `avail`
    /// alone does not say (shares, fragmentation); greater is better.
    pub(crate) rank: Option<i64>,
    /// No device of it is one the job should avoid (`snapshot/health.rs`).
    pub(crate) healthy: bool,
}

impl Fit {
    /// The replica this fit places on `node`: its devices, and the CPU and memory `req` asks for.
    pub(crate) fn replica(&self, node: NodeId, req: &ReplicaRequest) -> ReplicaPlacement {
        ReplicaPlacement {
            node,
            gpus: self.gpus,
            mig: self.mig,
            cpus_milli: req.cpus_milli,
            memory_mb: req.memory_mb,
            share: self.share,
        }
    }
}

/// Whether `nf` has the CPU and memory one replica of `job` asks for.
pub(super) fn fits_host(nf: &NodeFree, job: &Job) -> bool {
    nf.cpus >= job.spec.replica.cpus_milli && nf.mem >= job.spec.replica.memory_mb
}

/// The lowest `count` set bits of `mask`.
fn lowest(mask: u64, count: u32) -> u64 {
    bits(mask).take(count as usize).fold(0, |acc, i| acc | 1 << i)
}

/// Picks `count` whole GPUs of model `m` on a node, preferring one NVLink island, then one NUMA node.
pub(super) fn fit_gpus(e: &NodeEntry, nf: &NodeFree, job: &Job, count: u32, m: Option<usize>) -> Option<Fit> {
    if !fits_host(nf, job) {
        return None;
    }
    let mut best: Option<Fit> = None;
    for &(model, mask) in &e.model_masks {
        if m.is_some_and(|m| m != model) {
            continue;
        }
        let avail = nf.gpus & mask;
        if avail.count_ones() < count {
            continue;
        }
        // GPUs to avoid only when there is no fit without them.
        let healthy = avail & !e.avoided_slots(job.id);
        let fit = if healthy.count_ones() >= count {
            choose_devices(e, healthy, count)
        } else {
            // As few of them as it takes.
            let fill = lowest(avail & !healthy, count - healthy.count_ones());
            Fit { healthy: false, avail: avail.count_ones(), ..choose_devices(e, healthy | fill, count) }
        };
        let key = |f: &Fit| (f.healthy, f.topology, std::cmp::Reverse(f.avail));
        if best.as_ref().is_none_or(|b| key(&fit) > key(b)) {
            best = Some(fit);
        }
    }
    best
}

fn choose_devices(e: &NodeEntry, avail: u64, count: u32) -> Fit {
    let total = avail.count_ones();
    let fit = |gpus, topology| Fit { gpus, mig: 0, topology, avail: total, share: None, rank: None, healthy: true };
    if count <= 1 || e.nvlink_groups.is_empty() && e.numa_groups.is_empty() {
        return fit(lowest(avail, count), 2);
    }
    for (groups, topology) in [(&e.nvlink_groups, 2), (&e.numa_groups, 1)] {
        // Best fit inside the node too: the island with the fewest free GPUs that still fits.
        let best = groups
            .iter()
            .map(|g| avail & g)
            .filter(|g| g.count_ones() >= count)
            .min_by_key(|g| (g.count_ones(), g.trailing_zeros()));
        if let Some(g) = best {
            return fit(lowest(g, count), topology);
        }
    }
    let topology = if e.nvlink_groups.is_empty() { 2 } else { 0 };
    fit(lowest(avail, count), topology)
}

/// Picks `count` MIG instances of `profile` on a node.
pub(super) fn fit_mig(
    snap: &Snapshot,
    e: &NodeEntry,
    nf: &NodeFree,
    job: &Job,
    profile: usize,
    count: u32,
) -> Option<Fit> {
    if !fits_host(nf, job) {
        return None;
    }
    let avail =
        nf.mig & e.profile_mask(profile) & e.mig_mask_for_model(&snap.models, job.spec.replica.gpu_model.as_deref());
    (avail.count_ones() >= count).then(|| Fit {
        gpus: 0,
        mig: lowest(avail, count),
        topology: 2,
        avail: avail.count_ones(),
        share: None,
        rank: None,
        healthy: true,
    })
}

/// Each whole GPU's unallocated part in thousandths: 1000 free, 0 held whole.
pub(super) fn gpu_left(e: &NodeEntry, nf: &NodeFree) -> Vec<u16> {
    (0..e.gpu_slots.len())
        .map(
            |slot| {
                if nf.gpus & (1 << slot) != 0 { 1000 } else { shares::left(&nf.shares, slot, 0).map_or(0, |(m, _)| m) }
            },
        )
        .collect()
}

/// Picks the GPU of node `e` for a share (`ask`: fraction, memory). Best fit
/// takes the shared GPU it fills most, else a free one; spread the GPU with
/// most left; fragmentation the GPU where `growth` (how much the node's
/// fragmentation grows) is least. Never a MIG GPU, never on a node that does
/// not share.
pub(super) fn fit_share(
    snap: &Snapshot,
    e: &NodeEntry,
    nf: &NodeFree,
    job: &Job,
    ask: (Option<u16>, Option<u64>),
    s: PlacementStrategy,
    growth: impl Fn(u64, u16) -> i64,
) -> Option<Fit> {
    if e.node.sharing == GpuSharing::Off || !fits_host(nf, job) {
        return None;
    }
    let free_gpus = nf.gpus.count_ones();
    let mut best: Option<Fit> = None;
    // Free GPUs of one model and memory rank alike: rank the first only.
    let mut free_seen: Vec<(usize, u64)> = Vec::new();
    for (slot, &di) in e.gpu_slots.iter().enumerate() {
        let d = &e.node.devices[di];
        let model = snap.models.iter().position(|m| *m.name == *d.model);
        if !model.is_some_and(|m| job.model_allows_index(snap, m)) {
            continue;
        }
        let bit = 1u64 << slot;
        let is_free = nf.gpus & bit != 0;
        let room = if is_free {
            let key = (model.unwrap_or(usize::MAX), d.memory_mb);
            if free_seen.contains(&key) {
                continue;
            }
            free_seen.push(key);
            (1000, d.memory_mb)
        } else {
            match shares::left(&nf.shares, slot, d.memory_mb) {
                Some(room) => room,
                None => continue,
            }
        };
        let Some(share) = GpuShare::on_device(ask.0, ask.1, d.memory_mb) else { continue };
        if !shares::fits(room, share) {
            continue;
        }
        let after = i64::from(room.0 - share.milli);
        let rank = match s {
            PlacementStrategy::BestFit if is_free => -i64::from(free_gpus),
            PlacementStrategy::BestFit => 1_000_000 - after,
            PlacementStrategy::Spread if is_free => 1_000_000 + i64::from(free_gpus),
            PlacementStrategy::Spread => after,
            PlacementStrategy::Fragmentation => -growth(bit, share.milli),
        };
        if best.as_ref().is_none_or(|b| b.rank < Some(rank)) {
            best = Some(Fit {
                gpus: bit,
                mig: 0,
                topology: 2,
                avail: free_gpus,
                share: Some(share),
                rank: Some(rank),
                healthy: true,
            });
        }
    }
    best
}

/// Whether one replica of `job` fits node `e` given free resources `nf`, and where.
pub(crate) fn fit_on(snap: &Snapshot, e: &NodeEntry, nf: &NodeFree, job: &Job) -> Option<Fit> {
    match &job.spec.replica.gpu {
        GpuRequest::None => fits_host(nf, job).then_some(Fit {
            gpus: 0,
            mig: 0,
            topology: 2,
            avail: 0,
            share: None,
            rank: None,
            healthy: true,
        }),
        GpuRequest::Share { milli, memory_mb } => {
            fit_share(snap, e, nf, job, (*milli, *memory_mb), PlacementStrategy::BestFit, |_, _| 0)
        }
        GpuRequest::Gpus { count } => (0..snap.models.len())
            .filter(|&m| job.model_allows_index(snap, m))
            .filter_map(|m| fit_gpus(e, nf, job, *count, Some(m)))
            .max_by_key(|f| f.topology),
        GpuRequest::Mig { profile, count } => {
            let p = snap.profiles.iter().position(|x| x.profile == *profile)?;
            fit_mig(snap, e, nf, job, p, *count)
        }
        GpuRequest::Memory { min_mb, count } => {
            let mut options: Vec<(u64, bool, usize)> = Vec::new();
            if *count == 1 {
                options.extend(
                    snap.profiles
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.memory_mb >= *min_mb)
                        .map(|(i, p)| (p.memory_mb, false, i)),
                );
            }
            options.extend(
                snap.models
                    .iter()
                    .enumerate()
                    .filter(|(i, m)| m.memory_mb >= *min_mb && job.model_allows_index(snap, *i))
                    .map(|(i, m)| (m.memory_mb, true, i)),
            );
            options.sort();
            options.into_iter().find_map(|(_, is_gpu, i)| {
                if is_gpu { fit_gpus(e, nf, job, *count, Some(i)) } else { fit_mig(snap, e, nf, job, i, *count) }
            })
        }
    }
}

/// Whether node `e`, empty, could hold one replica of `job`.
pub(super) fn could_host(snap: &Snapshot, e: &NodeEntry, job: &Job) -> bool {
    fit_on(snap, e, &e.full(), job).is_some()
}

impl Job {
    /// Whether GPU model `m` (an index into the snapshot's models) is allowed for this job.
    /// (And of kind: a model is interned per kind.)
    pub(crate) fn model_allows_index(&self, snap: &Snapshot, m: usize) -> bool {
        self.spec.kind_allows(snap.models[m].kind)
            && match &self.spec.replica.gpu_model {
                None => true,
                Some(want) => same_model(want, &snap.models[m].name),
            }
    }
}
