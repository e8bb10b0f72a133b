//! Properties of the MIG planner (issue 14): every layout it returns is
//! valid for its model, it never touches a GPU with a running job, it never
//! serves less of the demand than the layouts it found, and it changes
//! nothing when the demand is already served.

use std::collections::BTreeMap;

use gpool_core::MigProfile;
use gpool_core::mig_geometry::{GEOMETRIES, geometry};
use gpool_core::mig_planner::{ManagedGpu, plan};
use proptest::prelude::*;

/// Instances of `demand` the GPUs' free instances serve.
fn served(gpus: &[ManagedGpu], demand: &BTreeMap<MigProfile, u32>) -> u32 {
    let mut left = demand.clone();
    let mut n = 0;
    for p in gpus.iter().flat_map(|g| g.free.iter()) {
        if let Some(c) = left.get_mut(p).filter(|c| **c > 0) {
            *c -= 1;
            n += u32::from(p.compute_slices);
        }
    }
    n
}

fn arb_case() -> impl Strategy<Value = (Vec<ManagedGpu>, BTreeMap<MigProfile, u32>)> {
    let gpu = (0..GEOMETRIES.len(), any::<prop::sample::Index>(), 0usize..8, any::<bool>());
    let gpus = prop::collection::vec(gpu, 1..12);
    let demand = prop::collection::vec((0usize..8, 0u32..6), 0..6);
    (gpus, demand, 0..GEOMETRIES.len()).prop_map(|(gpus, demand, dm)| {
        let gpus: Vec<ManagedGpu> = gpus
            .into_iter()
            .enumerate()
            .map(|(k, (m, pick, busy, draining))| {
                let geo = &GEOMETRIES[m];
                let layouts = geo.maximal_layouts();
                let l = pick.get(&layouts);
                let layout: Vec<MigProfile> = l.iter().map(|i| geo.profile(i.shape)).collect();
                let busy = busy.min(layout.len());
                ManagedGpu { key: k as u64, model: geo.model.into(), free: layout[busy..].to_vec(), layout, draining }
            })
            .collect();
        let geo = &GEOMETRIES[dm];
        let demand = demand
            .into_iter()
            .map(|(s, n)| (geo.profile((s % geo.shapes.len()) as u8), n))
            .filter(|(_, n)| *n > 0)
            .collect();
        (gpus, demand)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn planned_layouts_are_valid_touch_only_idle_gpus_and_serve_no_less(case in arb_case()) {
        let (gpus, demand) = case;
        let out = plan(&gpus, &demand);
        let mut after = gpus.clone();
        for key in &out.drain {
            let g = gpus.iter().find(|g| g.key == *key).expect("a GPU of the input");
            prop_assert!(!g.draining && !g.idle(), "drains only busy GPUs not draining yet: {g:?}");
        }
        // Busy GPUs that stay drained, and new drains: at most a quarter of all.
        let kept = gpus.iter().filter(|g| g.draining && !g.idle() && !out.undrain.contains(&g.key)).count();
        prop_assert!(out.drain.is_empty() || out.drain.len() + kept <= gpus.len().div_ceil(4).max(1));
        for key in &out.undrain {
            prop_assert!(gpus.iter().any(|g| g.key == *key && g.draining), "undrains only drains");
        }
        for r in &out.repartitions {
            let g = gpus.iter().find(|g| g.key == r.key).expect("a GPU of the input");
            prop_assert!(g.idle(), "repartitioned a GPU with a running job: {g:?}");
            let geo = geometry(&g.model).expect("known model");
            prop_assert!(geo.check(&r.layout).is_ok(), "{:?}: {:?}", r, geo.check(&r.layout));
            let mut from_layout: Vec<MigProfile> = r.layout.iter().map(|i| geo.profile(i.shape)).collect();
            from_layout.sort();
            let mut said = r.profiles.clone();
            said.sort();
            prop_assert_eq!(from_layout, said);
            let a = after.iter_mut().find(|a| a.key == r.key).expect("same GPU");
            a.layout = r.profiles.clone();
            a.free = r.profiles.clone();
        }
        prop_assert!(served(&after, &demand) >= served(&gpus, &demand));
        let wanted: u32 = demand.iter().map(|(p, n)| n * u32::from(p.compute_slices)).sum();
        if served(&gpus, &demand) == wanted {
            prop_assert!(out.repartitions.is_empty() && out.drain.is_empty(), "changed layouts with nothing waiting: {out:?}");
        }
    }
}
