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
//!   counted in compute slices; its current layout wins ties, so a GPU is
//!   only repartitioned for a strict gain, and never when nothing waits.
//! - Every layout returned is valid for its model.
//!
//! Greedy per GPU rather than optimal over all of them: the layouts of one
//! GPU number in the tens, the GPUs in the thousands, and demand changes by
//! the time a repartition finishes (`BENCHMARKS.md`, "Dynamic MIG").

use std::collections::BTreeMap;

use crate::mig_geometry::{Geometry, Instance, geometry};
use crate::resources::MigProfile;

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
}

impl ManagedGpu {
    /// No job holds any of its instances.
    pub fn idle(&self) -> bool {
        self.free.len() == self.layout.len()
    }
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

/// New layouts for idle GPUs that serve more of `demand` (instances wanted,
/// per profile) than the current ones. GPUs of models gpool has no geometry
/// for are left as they are.
pub fn plan(gpus: &[ManagedGpu], demand: &BTreeMap<MigProfile, u32>) -> Vec<Repartition> {
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
    let mut out = Vec::new();
    let mut candidates: BTreeMap<&str, Vec<Vec<MigProfile>>> = BTreeMap::new();
    for (g, share) in idle.iter().zip(shares) {
        if unmet.is_empty() {
            break;
        }
        let Some(geo) = geometry(&g.model) else { continue };
        // Its own share is up for grabs again: it keeps its layout unless another serves more.
        for (p, n) in share {
            *unmet.entry(p).or_default() += n;
        }
        let layouts = candidates.entry(geo.model).or_insert_with(|| profile_sets(geo));
        let mut current = g.layout.clone();
        current.sort();
        let mut best = (serves(&current, &unmet), &current);
        for l in layouts.iter() {
            let v = serves(l, &unmet);
            if v > best.0 {
                best = (v, l);
            }
        }
        let chosen = best.1.clone();
        take(&chosen, &mut unmet);
        if chosen != current
            && let Ok(Some(layout)) = geo.fit(&chosen)
        {
            out.push(Repartition { key: g.key, model: geo.model.to_string(), layout, profiles: chosen });
        }
    }
    out
}

/// The distinct profile sets of a model's maximal layouts, each sorted.
fn profile_sets(geo: &Geometry) -> Vec<Vec<MigProfile>> {
    let mut sets: Vec<Vec<MigProfile>> = geo
        .maximal_layouts()
        .iter()
        .map(|l| {
            let mut v: Vec<MigProfile> = l.iter().map(|i| geo.profile(i.shape)).collect();
            v.sort();
            v
        })
        .collect();
    sets.sort();
    sets.dedup();
    sets
}

/// Compute slices of `unmet` that a GPU laid out as `layout` would serve.
fn serves(layout: &[MigProfile], unmet: &BTreeMap<MigProfile, u32>) -> u32 {
    let mut left = unmet.clone();
    let mut v = 0;
    for p in layout {
        if let Some(n) = left.get_mut(p).filter(|n| **n > 0) {
            *n -= 1;
            v += u32::from(p.compute_slices);
        }
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
        ManagedGpu { key, model: "H100-80GB".into(), free: layout[busy.min(layout.len())..].to_vec(), layout }
    }

    fn demand(d: &[(&str, u32)]) -> BTreeMap<MigProfile, u32> {
        d.iter().map(|(s, n)| (p(s), *n)).collect()
    }

    #[test]
    fn a_whole_gpu_layout_is_split_for_small_requests_once_idle() {
        let plan = plan(&[gpu(1, &["7g.80gb"], 0)], &demand(&[("1g.10gb", 5)]));
        assert_eq!(plan.len(), 1, "{plan:?}");
        let ones = plan[0].profiles.iter().filter(|x| **x == p("1g.10gb")).count();
        assert!(ones >= 5, "{plan:?}");
        assert!(geometry("H100-80GB").expect("known").check(&plan[0].layout).is_ok());
    }

    #[test]
    fn busy_gpus_are_never_touched_and_their_free_instances_count() {
        // The busy GPU has two free 1g instances: they serve the demand.
        let gpus = [gpu(1, &["1g.10gb"; 7], 5), gpu(2, &["7g.80gb"], 0)];
        assert!(plan(&gpus, &demand(&[("1g.10gb", 2)])).is_empty());
        // Three wanted: the idle GPU is split; the busy one never is.
        let out = plan(&gpus, &demand(&[("1g.10gb", 3)]));
        assert_eq!(out.iter().map(|r| r.key).collect::<Vec<_>>(), [2]);
        assert!(plan(&[gpu(1, &["7g.80gb"], 1)], &demand(&[("1g.10gb", 7)])).is_empty(), "busy");
    }

    #[test]
    fn a_gpu_whose_layout_already_serves_the_demand_is_not_split_for_it_elsewhere() {
        // The second GPU's free 1g serves the one request: the first stays whole.
        let gpus = [gpu(1, &["7g.80gb"], 0), gpu(2, &["1g.10gb"; 7], 0)];
        assert!(plan(&gpus, &demand(&[("1g.10gb", 1)])).is_empty());
    }

    #[test]
    fn nothing_changes_without_unmet_demand_nor_for_unknown_models() {
        assert!(plan(&[gpu(1, &["3g.40gb", "3g.40gb"], 0)], &BTreeMap::new()).is_empty());
        assert!(plan(&[gpu(1, &["3g.40gb", "3g.40gb"], 0)], &demand(&[("3g.40gb", 2)])).is_empty());
        let mut odd = gpu(1, &["7g.80gb"], 0);
        odd.model = "B200-180GB".into();
        assert!(plan(&[odd], &demand(&[("1g.10gb", 1)])).is_empty());
    }

    #[test]
    fn a_mixed_demand_is_spread_over_gpus() {
        let gpus = [gpu(1, &["7g.80gb"], 0), gpu(2, &["7g.80gb"], 0)];
        let out = plan(&gpus, &demand(&[("3g.40gb", 2), ("2g.20gb", 1), ("1g.10gb", 2)]));
        let all: Vec<MigProfile> = out.iter().flat_map(|r| r.profiles.clone()).collect();
        for (want, n) in [("3g.40gb", 2), ("2g.20gb", 1), ("1g.10gb", 2)] {
            let have = all.iter().filter(|x| **x == p(want)).count();
            assert!(have >= n, "{want}: {out:?}");
        }
    }
}
