//! MIG layouts that follow the queue: a pure planner beside `schedule()`.
//!
//! Input: the GPUs whose MIG layout gpool manages, each with its current
//! instances, the instances free on it and whether it is idle (no instance
//! in use), and the MIG instances pending jobs ask for. Output: new layouts
//! for some idle GPUs, so that more of the demand can be served. The rules:
//!
//! - Only idle GPUs are repartitioned; a GPU with a running job is never
//!   touched (the caller may stop placing on one to make it idle).
//! - Free instances serve demand first, as they are: busy GPUs', then idle
//!   GPUs' current layouts.
//! - Each idle GPU, in the order given, takes the valid layout
//!   (`mig_geometry.rs`) that serves the most of the demand still unmet,
//!   counted in compute slices (counting requests instead would split a
//!   GPU a large request waits for into slices for small ones, which the
//!   benchmark rewards slightly and the large request's owner does not);
//!   its current layout wins ties, so a GPU is only repartitioned for a
//!   strict gain, and never when nothing waits.
//! - Every layout returned is valid for its model.
//! - When idle GPUs cannot serve what waits, busy GPUs are drained (the
//!   caller places nothing new on them, `Snapshot::hold_mig_gpu`) so that
//!   they empty and can be repartitioned: those whose best layout would
//!   serve the most, the fewest busy instances first, at most a quarter of
//!   the managed GPUs at once, and only while demand is unmet. Without
//!   this a loaded GPU is refilled by small jobs and never empties.
//!
//! Greedy per GPU rather than optimal over all of them: the layouts of one
//! GPU number in the tens, the GPUs in the thousands, and demand changes by
//! the time a repartition finishes (`BENCHMARKS.md`, "Dynamic MIG").

use std::collections::BTreeMap;

use crate::model::job::GpuRequest;
use crate::model::mig_geometry::{Instance, geometry};
use crate::model::node::{Device, Node, NodeId, NodeState};
use crate::model::resources::MigProfile;
use crate::pass::snapshot::Snapshot;

/// A GPU whose MIG layout gpool manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedGpu {
    /// The caller's name for it (e.g. node and index).
    pub key: u64,
    /// gpool's short model name (`A100-80GB`).
    pub model: String,
    /// Its instances now.
    pub layout: Vec<MigProfile>,
    /// Its instances no job holds.
    pub free: Vec<MigProfile>,
    /// Nothing new is placed on it, so that it empties (a drain this
    /// planner asked for earlier).
    pub draining: bool,
}

impl ManagedGpu {
    /// No job holds any of its instances.
    pub fn idle(&self) -> bool {
        self.free.len() == self.layout.len()
    }
}

/// What to do with the managed GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigPlan {
    /// New layouts for idle GPUs (each also ends its GPU's drain).
    pub repartitions: Vec<Repartition>,
    /// GPUs to drain (by key).
    pub drain: Vec<u64>,
    /// Drains to end: what they were for is served, or nothing waits.
    pub undrain: Vec<u64>,
}

/// A new layout for one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repartition {
    pub key: u64,
    pub model: String,
    /// The instances to make, with their start slices; valid for the model.
    pub layout: Vec<Instance>,
    /// The same as profiles, for callers and messages.
    pub profiles: Vec<MigProfile>,
}

impl Repartition {
    /// The instances the layout makes, as the snapshot holds them, with the
    /// UUID `uuid(i)` for the `i`-th: where no driver names them (the
    /// simulator), or until the node reports the real ones.
    pub fn instances(&self, uuid: impl Fn(usize) -> String) -> Vec<crate::model::node::MigInstance> {
        self.profiles
            .iter()
            .enumerate()
            .map(|(i, p)| crate::model::node::MigInstance {
                profile: p.clone(),
                uuid: std::sync::Arc::from(uuid(i)),
                gi_id: Some(i as u32 + 1),
                memory_mb: u64::from(p.memory_gb) * 1000,
            })
            .collect()
    }
}

/// New layouts for idle GPUs that serve more of `demand` (instances wanted,
/// per profile) than the current ones. GPUs of models gpool has no geometry
/// for are left as they are.
pub fn plan(gpus: &[ManagedGpu], demand: &BTreeMap<MigProfile, u32>) -> MigPlan {
    // What the layouts serve as they are: busy GPUs' free instances first,
    // then idle GPUs' (each remembers its share, to give back if it changes).
    let mut unmet = demand.clone();
    for g in gpus.iter().filter(|g| !g.idle()) {
        take(&g.free, &mut unmet);
    }
    let idle: Vec<&ManagedGpu> = gpus.iter().filter(|g| g.idle()).collect();
    let mut shares: Vec<BTreeMap<MigProfile, u32>> = Vec::with_capacity(idle.len());
    for g in &idle {
        shares.push(take(&g.layout, &mut unmet));
    }
    let mut out = MigPlan::default();
    let mut candidates: BTreeMap<&str, Vec<Vec<MigProfile>>> = BTreeMap::new();
    for (g, share) in idle.iter().zip(shares) {
        let Some(geo) = geometry(&g.model) else { continue };
        if unmet.is_empty() {
            if g.draining {
                out.undrain.push(g.key);
            }
            continue;
        }
        // Its own share is up for grabs again: it keeps its layout unless another serves more.
        for (p, n) in share {
            *unmet.entry(p).or_default() += n;
        }
        let layouts = candidates.entry(geo.model).or_insert_with(|| geo.profile_sets());
        let mut current = g.layout.clone();
        current.sort();
        let chosen = best_layout(&current, layouts, &unmet).1.to_vec();
        take(&chosen, &mut unmet);
        match geo.fit(&chosen) {
            Ok(Some(layout)) if chosen != current => {
                out.repartitions.push(Repartition {
                    key: g.key,
                    model: geo.model.to_string(),
                    layout,
                    profiles: chosen,
                });
            }
            _ if g.draining => out.undrain.push(g.key),
            _ => {}
        }
    }
    // Busy GPUs: drains under way count for what they will serve; more
    // start while demand is still unmet.
    let busy: Vec<&ManagedGpu> = gpus.iter().filter(|g| !g.idle() && geometry(&g.model).is_some()).collect();
    let cap = gpus.len().div_ceil(4).max(1);
    let mut draining = 0;
    for g in busy.iter().filter(|g| g.draining) {
        if unmet.is_empty() {
            out.undrain.push(g.key);
            continue;
        }
        draining += 1;
        let Some(geo) = geometry(&g.model) else { continue };
        let layouts = candidates.entry(geo.model).or_insert_with(|| geo.profile_sets());
        let chosen = best_layout(&[], layouts, &unmet).1.to_vec();
        take(&chosen, &mut unmet);
    }
    let mut options: Vec<(u32, usize, u64, Vec<MigProfile>)> = Vec::new();
    if !unmet.is_empty() && draining < cap {
        // An emptied GPU's best layout depends only on its model.
        let mut best_of: BTreeMap<&str, (u32, Vec<MigProfile>)> = BTreeMap::new();
        for g in busy.iter().filter(|g| !g.draining) {
            let Some(geo) = geometry(&g.model) else { continue };
            let (v, chosen) = best_of
                .entry(geo.model)
                .or_insert_with(|| {
                    let layouts = candidates.entry(geo.model).or_insert_with(|| geo.profile_sets());
                    let (v, l) = best_layout(&[], layouts, &unmet);
                    (v, l.to_vec())
                })
                .clone();
            if v > 0 {
                options.push((v, g.layout.len() - g.free.len(), g.key, chosen));
            }
        }
    }
    // The most served first, then the fewest busy instances.
    options.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    for (_, _, key, layout) in options {
        if unmet.is_empty() || draining >= cap {
            break;
        }
        if serves(&layout, &unmet) == 0 {
            continue;
        }
        take(&layout, &mut unmet);
        out.drain.push(key);
        draining += 1;
    }
    out
}

/// The layout that serves the most of `unmet`; `current` wins ties.
fn best_layout<'a>(
    current: &'a [MigProfile],
    layouts: &'a [Vec<MigProfile>],
    unmet: &BTreeMap<MigProfile, u32>,
) -> (u32, &'a [MigProfile]) {
    let mut best = (serves(current, unmet), current);
    for l in layouts {
        let v = serves(l, unmet);
        if v > best.0 {
            best = (v, l);
        }
    }
    best
}

/// [`plan`] over a snapshot: the managed MIG GPUs
/// (`Snapshot::set_mig_managed`) of nodes that are up for which `managed`
/// also says yes (the daemon leaves out GPUs being repartitioned), and the
/// MIG instances pending jobs ask for. Each
/// repartition comes with its node and GPU (driver index).
pub fn plan_for(snap: &Snapshot, managed: impl Fn(&Node, &Device) -> bool) -> SnapshotPlan {
    let mut demand: BTreeMap<MigProfile, u32> = BTreeMap::new();
    for id in snap.pending_ids() {
        if let Some(job) = snap.job(id)
            && let GpuRequest::Mig { profile, count } = &job.spec.replica.gpu
        {
            *demand.entry(profile.clone()).or_default() += count * job.spec.replicas;
        }
    }
    let mut gpus = Vec::new();
    for (id, node) in snap.nodes().filter(|(_, n)| n.state == NodeState::Up) {
        // A quarantined GPU is not laid out anew: it takes no work until it is back.
        let out = snap.quarantined_gpus(id);
        for d in node.devices.iter().filter(|d| {
            d.mig.is_some() && snap.mig_gpu_managed(id, d.index) && managed(node, d) && !out.contains(&d.index)
        }) {
            let Some(instances) = snap.mig_instances(id, d.index) else { continue };
            gpus.push(ManagedGpu {
                key: (u64::from(id.0) << 32) | u64::from(d.index),
                model: d.model.to_string(),
                layout: instances.iter().map(|(i, _)| i.profile.clone()).collect(),
                free: instances.iter().filter(|(_, free)| *free).map(|(i, _)| i.profile.clone()).collect(),
                draining: snap.mig_gpu_held(id, d.index),
            });
        }
    }
    let at = |key: u64| (NodeId((key >> 32) as u32), key as u32);
    let p = plan(&gpus, &demand);
    SnapshotPlan {
        repartitions: p.repartitions.into_iter().map(|r| (at(r.key).0, at(r.key).1, r)).collect(),
        drain: p.drain.into_iter().map(at).collect(),
        undrain: p.undrain.into_iter().map(at).collect(),
    }
}

/// [`MigPlan`] with each GPU as (node, driver index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotPlan {
    pub repartitions: Vec<(NodeId, u32, Repartition)>,
    pub drain: Vec<(NodeId, u32)>,
    pub undrain: Vec<(NodeId, u32)>,
}

/// Compute slices of `unmet` a GPU laid out as `layout` would serve.
fn serves(layout: &[MigProfile], unmet: &BTreeMap<MigProfile, u32>) -> u32 {
    let mut v = 0;
    let mut rest = layout;
    // Runs of one profile: every layout here is sorted.
    while let Some(p) = rest.first() {
        let run = rest.iter().take_while(|q| *q == p).count();
        let wanted = unmet.get(p).copied().unwrap_or(0) as usize;
        let n = run.min(wanted) as u32;
        v += n * u32::from(p.compute_slices);
        rest = &rest[run..];
    }
    v
}

/// Serves `unmet` from the instances of `layout`; what it served.
fn take(layout: &[MigProfile], unmet: &mut BTreeMap<MigProfile, u32>) -> BTreeMap<MigProfile, u32> {
    let mut served: BTreeMap<MigProfile, u32> = BTreeMap::new();
    for p in layout {
        if let Some(n) = unmet.get_mut(p).filter(|n| **n > 0) {
            *n -= 1;
            *served.entry(p.clone()).or_default() += 1;
        }
    }
    unmet.retain(|_, n| *n > 0);
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MigProfile {
        s.parse().expect("profile")
    }

    fn gpu(key: u64, layout: &[&str], busy: usize) -> ManagedGpu {
        let layout: Vec<MigProfile> = layout.iter().map(|s| p(s)).collect();
        ManagedGpu {
            key,
            model: "H100-80GB".into(),
            free: layout[busy.min(layout.len())..].to_vec(),
            layout,
            draining: false,
        }
    }

    fn demand(d: &[(&str, u32)]) -> BTreeMap<MigProfile, u32> {
        d.iter().map(|(s, n)| (p(s), *n)).collect()
    }

    #[test]
    fn a_whole_gpu_layout_is_split_for_small_requests_once_idle() {
        let plan = plan(&[gpu(1, &["7g.80gb"], 0)], &demand(&[("1g.10gb", 5)])).repartitions;
        assert_eq!(plan.len(), 1, "{plan:?}");
        let ones = plan[0].profiles.iter().filter(|x| **x == p("1g.10gb")).count();
        assert!(ones >= 5, "{plan:?}");
        assert!(geometry("H100-80GB").expect("known").check(&plan[0].layout).is_ok());
    }

    #[test]
    fn busy_gpus_are_never_touched_and_their_free_instances_count() {
        // The busy GPU has two free 1g instances: they serve the demand.
        let gpus = [gpu(1, &["1g.10gb"; 7], 5), gpu(2, &["7g.80gb"], 0)];
        assert_eq!(plan(&gpus, &demand(&[("1g.10gb", 2)])), MigPlan::default());
        // Three wanted: the idle GPU is split; the busy one never is.
        let out = plan(&gpus, &demand(&[("1g.10gb", 3)]));
        assert_eq!(out.repartitions.iter().map(|r| r.key).collect::<Vec<_>>(), [2]);
        assert!(out.drain.is_empty(), "the idle GPU serves it: {out:?}");
        let busy = plan(&[gpu(1, &["7g.80gb"], 1)], &demand(&[("1g.10gb", 7)]));
        assert!(busy.repartitions.is_empty(), "busy");
    }

    #[test]
    fn a_gpu_whose_layout_already_serves_the_demand_is_not_split_for_it_elsewhere() {
        // The second GPU's free 1g serves the one request: the first stays whole.
        let gpus = [gpu(1, &["7g.80gb"], 0), gpu(2, &["1g.10gb"; 7], 0)];
        assert_eq!(plan(&gpus, &demand(&[("1g.10gb", 1)])), MigPlan::default());
    }

    #[test]
    fn nothing_changes_without_unmet_demand_nor_for_unknown_models() {
        assert_eq!(plan(&[gpu(1, &["3g.40gb", "3g.40gb"], 0)], &BTreeMap::new()), MigPlan::default());
        assert_eq!(plan(&[gpu(1, &["3g.40gb", "3g.40gb"], 0)], &demand(&[("3g.40gb", 2)])), MigPlan::default());
        let mut odd = gpu(1, &["7g.80gb"], 0);
        odd.model = "B200-180GB".into();
        assert_eq!(plan(&[odd], &demand(&[("1g.10gb", 1)])), MigPlan::default());
    }

    #[test]
    fn a_mixed_demand_is_spread_over_gpus() {
        let gpus = [gpu(1, &["7g.80gb"], 0), gpu(2, &["7g.80gb"], 0)];
        let out = plan(&gpus, &demand(&[("3g.40gb", 2), ("2g.20gb", 1), ("1g.10gb", 2)]));
        let all: Vec<MigProfile> = out.repartitions.iter().flat_map(|r| r.profiles.clone()).collect();
        for (want, n) in [("3g.40gb", 2), ("2g.20gb", 1), ("1g.10gb", 2)] {
            let have = all.iter().filter(|x| **x == p(want)).count();
            assert!(have >= n, "{want}: {out:?}");
        }
    }

    #[test]
    fn busy_gpus_are_drained_for_unmet_demand_and_released_when_it_is_gone() {
        // Every GPU busy; a 7g request waits: the least busy one that can serve it drains.
        let gpus = [gpu(1, &["1g.10gb"; 7], 5), gpu(2, &["3g.40gb", "3g.40gb"], 1), gpu(3, &["7g.80gb"], 1)];
        let out = plan(&gpus, &demand(&[("7g.80gb", 1)]));
        assert_eq!(out.drain, [2], "fewest busy instances among those that would serve: {out:?}");
        assert!(out.repartitions.is_empty());
        // At most a quarter of the GPUs drain at once.
        let many: Vec<ManagedGpu> = (0..8).map(|k| gpu(k, &["1g.10gb"; 7], 1)).collect();
        assert_eq!(plan(&many, &demand(&[("7g.80gb", 8)])).drain.len(), 2);
        // Drained and now idle: repartitioned. Demand gone: the drain ends.
        let mut drained = gpu(2, &["3g.40gb", "3g.40gb"], 0);
        drained.draining = true;
        let out = plan(std::slice::from_ref(&drained), &demand(&[("7g.80gb", 1)]));
        assert_eq!(out.repartitions.len(), 1);
        assert_eq!(plan(std::slice::from_ref(&drained), &BTreeMap::new()).undrain, [2]);
        let mut still_busy = gpu(2, &["3g.40gb", "3g.40gb"], 1);
        still_busy.draining = true;
        assert_eq!(plan(&[still_busy], &BTreeMap::new()).undrain, [2]);
    }
}
