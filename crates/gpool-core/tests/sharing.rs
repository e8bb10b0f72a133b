//! GPU sharing scenarios: fractional shares, their limits, and where each
//! placement strategy puts them.

mod common;
use common::*;
use gpool_core::{GpuSharing, Node, PlacementStrategy, Policy};

fn with(placement: PlacementStrategy) -> Cluster {
    Cluster::with_policy(Policy { placement, ..Policy::by_name("fifo").expect("preset") })
}

#[test]
fn four_quarters_share_one_gpu_while_a_whole_gpu_job_runs_on_another() {
    let mut c = Cluster::new("fifo").node("a", 2, "H100-80GB");
    let whole = c.run(job("w").gpus(1), t(0));
    let quarters: Vec<_> = (0..4).map(|_| c.run(job("q").share(Some(250), None), t(1))).collect();
    let placements: Vec<_> =
        quarters.iter().map(|id| c.snap.job(*id).unwrap().running().unwrap().placement[0].clone()).collect();
    let whole_gpus = c.snap.job(whole).unwrap().running().unwrap().placement[0].gpus;
    for p in &placements {
        assert_eq!(p.gpus, placements[0].gpus, "all on one GPU");
        assert_ne!(p.gpus, whole_gpus, "not on the whole job's GPU");
        let s = p.share.expect("a share");
        assert_eq!((s.milli, s.memory_mb), (250, 20 * GIB), "a quarter of compute and of memory");
    }
    // The GPU is full: a fifth quarter waits, and so does a whole-GPU job.
    let fifth = c.submit(job("q").share(Some(250), None));
    let another = c.submit(job("w").gpus(1));
    let plan = c.plan(t(2));
    assert!(plan.starts.is_empty(), "{plan:#?}");
    assert!(c.reason(&plan, fifth).contains("a share of one GPU (0.25 of it)"), "{}", c.reason(&plan, fifth));
    // One quarter ends: the fifth takes its place; the whole job still waits for a whole GPU.
    c.finish(quarters[0], t(3));
    let plan = c.plan(t(3));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![fifth]);
    c.apply(&plan);
    // Once every share is gone the GPU is whole again.
    for id in quarters.iter().skip(1).chain([&fifth]) {
        c.finish(*id, t(4));
    }
    let plan = c.plan(t(4));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![another]);
}

#[test]
fn memory_and_compute_are_both_limits() {
    struct Case {
        name: &'static str,
        first: (Option<u16>, Option<u64>),
        second: (Option<u16>, Option<u64>),
        share_one_gpu: bool,
    }
    let cases = [
        Case {
            name: "small compute, most of the memory",
            first: (Some(100), Some(70)),
            second: (Some(100), Some(20)),
            share_one_gpu: false,
        },
        Case { name: "both fit", first: (Some(100), Some(40)), second: (Some(100), Some(40)), share_one_gpu: true },
        Case {
            name: "memory alone takes its share of compute",
            first: (None, Some(60)),
            second: (Some(500), None),
            share_one_gpu: false,
        },
        Case { name: "compute over", first: (Some(600), None), second: (Some(500), None), share_one_gpu: false },
    ];
    for case in cases {
        // Two H100-80GB GPUs of 80 GiB; memory below in GB of 1000 MB.
        let mut c = Cluster::new("fifo").node("a", 2, "H100-80GB");
        let a = c.run(job("a").share(case.first.0, case.first.1), t(0));
        let b = c.run(job("b").share(case.second.0, case.second.1), t(1));
        let gpu = |id| c.snap.job(id).unwrap().running().unwrap().placement[0].gpus;
        assert_eq!(gpu(a) == gpu(b), case.share_one_gpu, "{}", case.name);
    }
}

#[test]
fn nodes_that_do_not_share_and_mig_gpus_take_no_share() {
    let mut off = Node::with_gpus("off", 2, "H100-80GB", 80 * GIB);
    off.sharing = GpuSharing::Off;
    let mut c = Cluster::new("fifo").node_with(off).mig_node("m", &["7g.80gb"]);
    let spec = job("u").share(Some(250), None).spec;
    let err = c.snap.check_feasible(&spec).expect_err("nowhere to share");
    assert!(err.to_string().contains("--gpu-sharing time-slicing"), "{err}");
    c = c.node("on", 1, "H100-80GB");
    let id = c.submit(job("u").share(Some(250), None));
    assert_eq!(c.nodes_of(&c.plan(t(0)), id), ["on"]);
}

#[test]
fn shares_and_whole_gpus_count_what_they_hold_against_quotas() {
    let mut c = Cluster::new("fifo").node("a", 2, "H100-80GB").queue("q", None, 0, Some(1));
    let a = c.run(job("u").queue("q").share(Some(500), None), t(0));
    let b = c.run(job("u").queue("q").share(Some(500), None), t(0));
    assert_eq!(c.snap.queue_usage("q"), 1000);
    let third = c.submit(job("u").queue("q").share(Some(100), None));
    let plan = c.plan(t(1));
    assert!(plan.starts.is_empty(), "quota of 1 GPU is used up: {}", c.reason(&plan, third));
    let _ = (a, b);
}

/// The strategies differ only where there is a choice: a quarter beside a
/// node with a half-used GPU and an empty node.
#[test]
fn each_strategy_places_a_share_where_it_says() {
    let cases =
        [(PlacementStrategy::BestFit, "a"), (PlacementStrategy::Spread, "b"), (PlacementStrategy::Fragmentation, "a")];
    for (strategy, want) in cases {
        let mut c = with(strategy).node("a", 2, "H100-80GB").node("b", 2, "H100-80GB");
        c.run(job("x").share(Some(500), None).selector("kubernetes.io/hostname", "a"), t(0));
        // The mix the cluster sees: mostly whole GPUs (waiting for their begin time) and quarters.
        for _ in 0..3 {
            c.submit(job("mix").gpus(1).begin(t(1_000_000)));
        }
        let id = c.submit(job("u").share(Some(250), None));
        assert_eq!(c.nodes_of(&c.plan(t(1)), id), [want], "{}", strategy.as_str());
    }
}

/// FGD keeps whole GPUs whole: with whole-GPU jobs in the mix, a quarter
/// goes on the GPU that already has a small share rather than opening a GPU
/// on a node whose other GPU is taken.
#[test]
fn fragmentation_aware_placement_keeps_whole_gpus_for_whole_gpu_jobs() {
    let mut c = with(PlacementStrategy::Fragmentation).node("a", 2, "H100-80GB").node("b", 2, "H100-80GB");
    c.run(job("x").gpus(1).selector("kubernetes.io/hostname", "a"), t(0));
    c.run(job("y").share(Some(100), None).selector("kubernetes.io/hostname", "b"), t(0));
    for _ in 0..4 {
        c.submit(job("mix").gpus(1).begin(t(1_000_000)));
    }
    let id = c.submit(job("u").share(Some(250), None));
    let plan = c.plan(t(1));
    assert_eq!(c.nodes_of(&plan, id), ["b"]);
    let s = plan.starts.iter().find(|s| s.job == id).unwrap();
    let y_gpu = c.snap.running_jobs().find(|j| &*j.spec.user == "y").unwrap().running().unwrap().placement[0].gpus;
    assert_eq!(s.placement[0].gpus, y_gpu, "on the GPU already shared");
}

/// A kind of request has a reach: GPUs of a model it may not use are all
/// fragments to it. With whole T4 jobs in the mix, an unconstrained job
/// takes a G2 GPU and leaves the T4s whole (the T4 node comes first, so
/// without reaches the two nodes tie and the first wins).
#[test]
fn fragmentation_aware_placement_leaves_a_model_to_the_jobs_bound_to_it() {
    let mut c = with(PlacementStrategy::Fragmentation).node("t4", 2, "T4").node("g2", 2, "G2");
    for _ in 0..4 {
        c.submit(job("bound").gpus(1).model("T4").begin(t(1_000_000)));
    }
    let id = c.submit(job("u").gpus(1));
    assert_eq!(c.nodes_of(&c.plan(t(1)), id), ["g2"]);
    // Jobs bound by a label instead reach only the nodes that carry it.
    let mut c = with(PlacementStrategy::Fragmentation)
        .node("a", 2, "G2")
        .node("b", 2, "G2")
        .labels("a", &[("pool", "research")]);
    for _ in 0..4 {
        c.submit(job("bound").gpus(1).selector("pool", "research").begin(t(1_000_000)));
    }
    let id = c.submit(job("u").gpus(1));
    assert_eq!(c.nodes_of(&c.plan(t(1)), id), ["b"]);
}
