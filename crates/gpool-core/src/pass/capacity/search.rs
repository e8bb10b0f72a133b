//! The placement search across nodes: for one replica of a job, the best
//! node and devices under the policy's strategy (best fit, spread,
//! fragmentation), through the capacity's per-model index where it can, and
//! the reason a job that fits nowhere gets. Each candidate node is ranked by a
//! `Score`; where a replica fits on one node is `fit.rs`'s.

use super::Capacity;
use super::fit::{Fit, could_host, fit_gpus, fit_mig, fit_on, fit_share, fits_host, gpu_left};
use crate::model::job::{GpuRequest, Job, ReplicaPlacement, SpotPolicy};
use crate::model::node::{GpuSharing, NodeId, NodeState, PoolKind};
use crate::model::time::Time;
use crate::pass::fragmentation::{Usable, node_fragmentation};
use crate::pass::plan::{Need, PendingReason};
use crate::pass::snapshot::{NodeEntry, NodeFree, Snapshot, bits};
use crate::policies::policy::PlacementStrategy;

impl<'s> Capacity<'s> {
    /// The best node and devices for one replica of `job`, given the indexes.
    pub(crate) fn place_replica(&self, job: &Job, ends: Time, strategy: PlacementStrategy) -> Option<ReplicaPlacement> {
        let req = &job.spec.replica;
        let found = match &req.gpu {
            GpuRequest::None => self.search_all(job, ends, strategy),
            GpuRequest::Gpus { count } => self.search_gpus(job, ends, strategy, *count, None),
            GpuRequest::Mig { profile, count } => {
                let p = self.snap.profiles.iter().position(|x| x.profile == *profile)?;
                self.search_mig(job, ends, strategy, p, *count)
            }
            GpuRequest::Memory { min_mb, count } => self.search_memory(job, ends, strategy, *min_mb, *count),
            GpuRequest::Share { milli, memory_mb } => self.search_share(job, ends, strategy, *milli, *memory_mb),
        }?;
        let (n, fit) = found;
        Some(fit.replica(NodeId(n), req))
    }

    /// Smallest-memory device first: MIG profiles and whole-GPU models that have enough memory.
    fn search_memory(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        min_mb: u64,
        count: u32,
    ) -> Option<(u32, Fit)> {
        // (memory, is_gpu, index)
        let mut options: Vec<(u64, bool, usize)> = Vec::new();
        if count == 1 {
            for (i, p) in self.snap.profiles.iter().enumerate() {
                if p.memory_mb >= min_mb {
                    options.push((p.memory_mb, false, i));
                }
            }
        }
        for (i, m) in self.snap.models.iter().enumerate() {
            if m.memory_mb >= min_mb && job.model_allows_index(self.snap, i) {
                options.push((m.memory_mb, true, i));
            }
        }
        options.sort();
        options.into_iter().find_map(|(_, is_gpu, i)| {
            if is_gpu {
                self.search_gpus(job, ends, s, count, Some(i))
            } else {
                self.search_mig(job, ends, s, i, count)
            }
        })
    }

    /// Whole GPUs of one model on one node, best fit through the per-model index.
    fn search_gpus(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        count: u32,
        only: Option<usize>,
    ) -> Option<(u32, Fit)> {
        let frag = s == PlacementStrategy::Fragmentation;
        let scan_all = frag || job.spec.has_preferences() || self.snap.mixed_pool_kinds() || self.snap.health_in_use();
        let mut best: Option<(Score, u32, Fit)> = None;
        for m in 0..self.snap.models.len() {
            if only.is_some_and(|o| o != m) || !job.model_allows_index(self.snap, m) {
                continue;
            }
            let set = &self.ix.by_model[m];
            let mut first_free: Option<u32> = None;
            let mut visit = |&(free, n): &(u32, u32)| -> bool {
                if let Some(ff) = first_free
                    && !scan_all
                    && free != ff
                {
                    return false; // left the bucket of the first feasible node
                }
                if !self.eligible(n, job) {
                    return true;
                }
                let e = self.entry(n);
                let nf = self.usable(n, ends);
                let Some(mut fit) = fit_gpus(e, &nf, job, count, Some(m)) else {
                    return true;
                };
                if frag {
                    let base = self.fragmentation_base(e, &nf);
                    fit.rank = Some(-self.fragmentation_growth(&base, &nf, job, fit.gpus, None));
                }
                first_free.get_or_insert(free);
                let score = Score::new(self.snap, job, e, &fit, s);
                let perfect = fit.topology == 2 && fit.healthy;
                if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                    best = Some((score, n, fit));
                }
                scan_all || !perfect
            };
            match s {
                PlacementStrategy::BestFit | PlacementStrategy::Fragmentation => {
                    for item in set.range_from(&(count, 0)) {
                        if !visit(item) {
                            break;
                        }
                    }
                }
                PlacementStrategy::Spread => {
                    for item in set.range_from(&(count, 0)).iter().rev() {
                        if !visit(item) {
                            break;
                        }
                    }
                }
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    fn search_mig(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        profile: usize,
        count: u32,
    ) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for &n in &self.ix.mig_nodes {
            if !self.eligible(n, job) {
                continue;
            }
            let e = self.entry(n);
            let nf = self.usable(n, ends);
            if let Some(fit) = fit_mig(self.snap, e, &nf, job, profile, count) {
                let score = Score::new(self.snap, job, e, &fit, s);
                if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                    best = Some((score, n, fit));
                }
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// A share of one GPU: over every up node that shares its GPUs.
    fn search_share(
        &self,
        job: &Job,
        ends: Time,
        s: PlacementStrategy,
        milli: Option<u16>,
        memory_mb: Option<u64>,
    ) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for n in 0..self.free.len() as u32 {
            let e = self.entry(n);
            if e.node.sharing == GpuSharing::Off || e.gpu_slots.is_empty() || !self.eligible(n, job) {
                continue;
            }
            let nf = self.usable(n, ends);
            let base = std::cell::OnceCell::new();
            let Some(fit) = fit_share(self.snap, e, &nf, job, (milli, memory_mb), s, |gpu, share| {
                self.fragmentation_growth(
                    base.get_or_init(|| self.fragmentation_base(e, &nf)),
                    &nf,
                    job,
                    gpu,
                    Some(share),
                )
            }) else {
                continue;
            };
            let score = Score::new(self.snap, job, e, &fit, s);
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, n, fit));
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// Node `e`'s fragmentation as it stands: computed once per node, for
    /// every placement on it that [`Capacity::fragmentation_growth`] ranks.
    fn fragmentation_base(&self, e: &NodeEntry, nf: &NodeFree) -> FragmentationBase {
        let mix = &self.snap.demand;
        if mix.is_empty() {
            return FragmentationBase { left: Vec::new(), usable: Vec::new(), now: 0 };
        }
        let models = &self.snap.models;
        let usable: Vec<Usable> = mix
            .reaches()
            .iter()
            .map(|r| {
                r.node(&e.node).then(|| {
                    e.model_masks
                        .iter()
                        .filter(|&&(m, _)| r.model(&models[m].name, models[m].kind))
                        .fold(0, |acc, &(_, mask)| acc | mask)
                })
            })
            .collect();
        let left = gpu_left(e, nf);
        let now = node_fragmentation(mix, &left, &usable, nf.cpus);
        FragmentationBase { left, usable, now }
    }

    /// How much a node's fragmentation (weighted by the demand mix) grows
    /// if a replica of `job` takes `gpus` whole, or `share` of the GPU in `gpus`.
    fn fragmentation_growth(
        &self,
        base: &FragmentationBase,
        nf: &NodeFree,
        job: &Job,
        gpus: u64,
        share: Option<u16>,
    ) -> i64 {
        let mix = &self.snap.demand;
        if mix.is_empty() {
            return 0;
        }
        let mut left = base.left.clone();
        for slot in bits(gpus) {
            left[slot] = match share {
                Some(m) => left[slot].saturating_sub(m),
                None => 0,
            };
        }
        let after = node_fragmentation(mix, &left, &base.usable, nf.cpus.saturating_sub(job.spec.replica.cpus_milli));
        after as i64 - base.now as i64
    }

    /// CPU-only work: prefer nodes with the fewest free GPUs, to keep GPU nodes for GPU work.
    fn search_all(&self, job: &Job, ends: Time, s: PlacementStrategy) -> Option<(u32, Fit)> {
        let mut best: Option<(Score, u32, Fit)> = None;
        for n in 0..self.free.len() as u32 {
            if !self.eligible(n, job) {
                continue;
            }
            let nf = self.usable(n, ends);
            if !fits_host(&nf, job) {
                continue;
            }
            // Under fragmentation-aware placement, CPU-only work avoids taking
            // the CPUs that a node's free GPUs need.
            let rank = (s == PlacementStrategy::Fragmentation)
                .then(|| -self.fragmentation_growth(&self.fragmentation_base(self.entry(n), &nf), &nf, job, 0, None));
            let fit = Fit {
                gpus: 0,
                mig: 0,
                topology: 2,
                avail: nf.gpus.count_ones() + nf.mig.count_ones(),
                share: None,
                rank,
                healthy: true,
            };
            let score = Score::new(self.snap, job, self.entry(n), &fit, s);
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, n, fit));
            }
        }
        best.map(|(_, n, f)| (n, f))
    }

    /// The reason a job that did not fit gets.
    pub(crate) fn miss_reason(&self, job: &Job) -> PendingReason {
        let need = Need {
            replicas: job.spec.replicas,
            gpu: job.spec.replica.gpu.clone(),
            model: job.spec.replica.gpu_model.clone(),
            kind: job.spec.replica.gpu_kind,
        };
        let hosts = (0..self.free.len() as u32).any(|n| {
            let e = self.entry(n);
            e.node.state == NodeState::Up && job.spec.node_matches(&e.node) && could_host(self.snap, e, job)
        });
        if !hosts {
            let (mut draining, mut down) = (0, 0);
            for n in 0..self.free.len() as u32 {
                let e = self.entry(n);
                if e.node.state != NodeState::Up && job.spec.node_matches(&e.node) && could_host(self.snap, e, job) {
                    match e.node.state {
                        NodeState::Draining => draining += 1,
                        _ => down += 1,
                    }
                }
            }
            if draining + down > 0 {
                return PendingReason::NodesUnavailable { need, draining, down };
            }
            return PendingReason::NoMatchingNode { need };
        }
        // Room on a node, but not in a budget over it.
        if let Some(p) = &self.power {
            let blocked = (0..self.free.len() as u32)
                .filter(|&n| self.is_up(n) && job.spec.node_matches(&self.entry(n).node))
                .filter(|&n| fit_on(self.snap, self.entry(n), &self.free[n as usize], job).is_some())
                .find_map(|n| p.blocking(n, self.replica_watts(n, job)));
            if let Some((b, used)) = blocked {
                return PendingReason::Power { budget: b.scope.to_string().into(), used_watts: used, watts: b.watts };
            }
        }
        let best_free = match &job.spec.replica.gpu {
            GpuRequest::None => 0,
            GpuRequest::Gpus { .. } | GpuRequest::Memory { .. } | GpuRequest::Share { .. } => {
                (0..self.snap.models.len())
                    .filter(|&m| job.model_allows_index(self.snap, m))
                    .filter_map(|m| self.ix.by_model[m].last().map(|&(c, _)| c))
                    .max()
                    .unwrap_or(0)
            }
            GpuRequest::Mig { profile, .. } => match self.snap.profiles.iter().position(|x| x.profile == *profile) {
                Some(p) => self
                    .ix
                    .mig_nodes
                    .iter()
                    .map(|&n| (self.free[n as usize].mig & self.entry(n).profile_mask(p)).count_ones())
                    .max()
                    .unwrap_or(0),
                None => 0,
            },
        };
        let quarantined = (0..self.free.len() as u32)
            .filter(|&n| self.entry(n).out_of_service() != (0, 0))
            .filter(|&n| self.is_up(n) && job.spec.node_matches(&self.entry(n).node))
            .map(|n| self.snap.quarantined_gpus(NodeId(n)).len() as u32)
            .sum();
        PendingReason::NoFit { need, best_free, quarantined }
    }
}

/// Ranks candidate nodes for one replica; greater is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    /// A fit without GPUs to avoid first, while there is one.
    healthy: bool,
    preference: u32,
    /// Where pool kinds differ: capacity paid for anyway (reserved) first,
    /// then spot (unless the job never runs there), then on-demand.
    pool: u8,
    topology: u8,
    /// Best fit: fewer usable devices left is better (negated); spread: more.
    /// Or the fit's own rank, where it has one.
    fit: i64,
    /// Between equal ranks: the best-fit (or spread) term.
    tiebreak: i64,
}

impl Score {
    fn new(snap: &Snapshot, job: &Job, e: &NodeEntry, fit: &Fit, s: PlacementStrategy) -> Score {
        let by_avail = match s {
            PlacementStrategy::BestFit | PlacementStrategy::Fragmentation => -i64::from(fit.avail),
            PlacementStrategy::Spread => i64::from(fit.avail),
        };
        let (fit_term, tiebreak) = match fit.rank {
            Some(rank) => (rank, by_avail),
            None => (by_avail, 0),
        };
        let preference = if job.spec.has_preferences() { job.spec.node_preference(&e.node) } else { 0 };
        let pool = if snap.mixed_pool_kinds() {
            match e.node.pool.kind {
                PoolKind::Reserved => 2,
                PoolKind::Spot if job.spec.spot != SpotPolicy::Never => 1,
                _ => 0,
            }
        } else {
            0
        };
        Score { healthy: fit.healthy, preference, pool, topology: fit.topology, fit: fit_term, tiebreak }
    }
}

/// A node's fragmentation before a placement: each GPU's unallocated share,
/// what each reach of the mix may use there, and the measure itself.
struct FragmentationBase {
    left: Vec<u16>,
    usable: Vec<Usable>,
    now: u64,
}
