//! Placement scenarios: best fit, spread, topology, models, MIG, labels.

mod common;
use common::*;
use gpool_core::{PlacementStrategy, Policy};

struct Case {
    name: &'static str,
    cluster: fn() -> Cluster,
    job: fn() -> J,
    /// Expected node, and device indices or MIG profiles of the first replica (empty = don't check).
    want_node: &'static str,
    want_devices: &'static [&'static str],
}

#[test]
fn placement_table() {
    let cases = [
        Case {
            name: "best fit fills the fuller node",
            cluster: || {
                let mut c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
                c.run(job("x").gpus(6).selector("kubernetes.io/hostname", "b"), t(0));
                c
            },
            job: || job("u").gpus(2),
            want_node: "b",
            want_devices: &["6", "7"],
        },
        Case {
            name: "one NVLink island beats the lowest indices",
            cluster: || {
                let mut c = Cluster::new("fifo").islands("a", 8, 4, "H100-80GB");
                c.run(job("x").gpus(1), t(0)); // takes GPU 0, island 0 keeps 3
                c
            },
            job: || job("u").gpus(4),
            want_node: "a",
            want_devices: &["4", "5", "6", "7"],
        },
        Case {
            name: "small request goes to the fuller island",
            cluster: || {
                let mut c = Cluster::new("fifo").islands("a", 8, 4, "H100-80GB");
                c.run(job("x").gpus(1), t(0));
                c
            },
            job: || job("u").gpus(2),
            want_node: "a",
            want_devices: &["1", "2"],
        },
        Case {
            name: "model constraint picks the matching node",
            cluster: || Cluster::new("fifo").node("a100", 8, "A100-80GB").node("h100", 8, "H100-80GB"),
            job: || job("u").gpus(2).model("h100-80gb"),
            want_node: "h100",
            want_devices: &[],
        },
        Case {
            name: "MIG profile matched by name",
            cluster: || {
                Cluster::new("fifo")
                    .node("full", 8, "H100-80GB")
                    .mig_node("mig", &["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
            },
            job: || job("u").mig("1g.10gb"),
            want_node: "mig",
            want_devices: &["1g.10gb"],
        },
        Case {
            name: "memory request takes the smallest slice that fits",
            cluster: || {
                Cluster::new("fifo").node("full", 8, "H100-80GB").mig_node("mig", &["3g.40gb", "2g.20gb", "1g.10gb"])
            },
            job: || job("u").gpu_memory_gb(15),
            want_node: "mig",
            want_devices: &["2g.20gb"],
        },
        Case {
            name: "memory request larger than any slice takes a whole GPU",
            cluster: || Cluster::new("fifo").node("full", 8, "H100-80GB").mig_node("mig", &["3g.40gb", "2g.20gb"]),
            job: || job("u").gpu_memory_gb(60),
            want_node: "full",
            want_devices: &["0"],
        },
        Case {
            name: "node selector",
            cluster: || {
                Cluster::new("fifo")
                    .node("a", 8, "H100-80GB")
                    .node("b", 8, "H100-80GB")
                    .labels("a", &[("zone", "west")])
                    .labels("b", &[("zone", "east")])
            },
            job: || job("u").gpus(1).selector("zone", "east"),
            want_node: "b",
            want_devices: &[],
        },
        Case {
            name: "preferred affinity outweighs best fit",
            cluster: || {
                let mut c = Cluster::new("fifo")
                    .node("a", 8, "H100-80GB")
                    .node("b", 8, "H100-80GB")
                    .labels("b", &[("disk", "nvme")]);
                c.run(job("x").gpus(4).selector("kubernetes.io/hostname", "a"), t(0));
                c
            },
            job: || job("u").gpus(2).prefer(10, "disk", "nvme"),
            want_node: "b",
            want_devices: &[],
        },
        Case {
            name: "CPU-only work avoids nodes with free GPUs",
            cluster: || {
                Cluster::new("fifo").node("gpu", 8, "H100-80GB").node_with(gpool_core::Node::new("cpu", 64, 256 * GIB))
            },
            job: || job("u").cpus(8),
            want_node: "cpu",
            want_devices: &[],
        },
        Case {
            name: "pool label is matchable",
            cluster: || {
                let mut spot = gpool_core::Node::with_gpus("s", 8, "H100-80GB", 80 * GIB);
                spot.pool = gpool_core::Pool { name: "spot-h100".into(), kind: gpool_core::PoolKind::Spot };
                Cluster::new("fifo").node("o", 8, "H100-80GB").node_with(spot)
            },
            job: || job("u").gpus(1).selector("gpool.io/pool-kind", "spot"),
            want_node: "s",
            want_devices: &[],
        },
        Case {
            name: "capacity paid for anyway first, then spot, then on-demand, over best fit",
            cluster: || {
                let mut c = Cluster::new("fifo").node("o", 8, "H100-80GB");
                for (name, kind) in [("s", gpool_core::PoolKind::Spot), ("r", gpool_core::PoolKind::Reserved)] {
                    let mut n = gpool_core::Node::with_gpus(name, 8, "H100-80GB", 80 * GIB);
                    n.pool = gpool_core::Pool { name: name.into(), kind };
                    c = c.node_with(n);
                }
                c.run(job("x").gpus(4).selector("kubernetes.io/hostname", "o"), t(0));
                c
            },
            job: || job("u").gpus(2),
            want_node: "r",
            want_devices: &[],
        },
        Case {
            name: "spot before on-demand",
            cluster: || {
                let mut spot = gpool_core::Node::with_gpus("s", 8, "H100-80GB", 80 * GIB);
                spot.pool = gpool_core::Pool { name: "spot".into(), kind: gpool_core::PoolKind::Spot };
                let mut c = Cluster::new("fifo").node("o", 8, "H100-80GB").node_with(spot);
                c.run(job("x").gpus(4).selector("kubernetes.io/hostname", "o"), t(0));
                c
            },
            job: || job("u").gpus(2),
            want_node: "s",
            want_devices: &[],
        },
        Case {
            name: "spot: never keeps a job off spot nodes",
            cluster: || {
                let mut spot = gpool_core::Node::with_gpus("s", 8, "H100-80GB", 80 * GIB);
                spot.pool = gpool_core::Pool { name: "spot".into(), kind: gpool_core::PoolKind::Spot };
                let mut c = Cluster::new("fifo").node("o", 8, "H100-80GB").node_with(spot);
                c.run(job("x").gpus(4).selector("kubernetes.io/hostname", "o"), t(0));
                c
            },
            job: || job("u").gpus(2).spot(gpool_core::SpotPolicy::Never),
            want_node: "o",
            want_devices: &[],
        },
    ];
    for case in cases {
        let mut c = (case.cluster)();
        let id = c.submit((case.job)());
        let plan = c.plan(t(10));
        assert_eq!(c.nodes_of(&plan, id), vec![case.want_node.to_string()], "{}", case.name);
        if !case.want_devices.is_empty() {
            assert_eq!(c.devices_of(&plan, id), case.want_devices, "{}", case.name);
        }
    }
}

#[test]
fn spread_uses_the_emptiest_node() {
    let policy = Policy { placement: PlacementStrategy::Spread, ..Policy::by_name("fifo").expect("preset") };
    let mut c = Cluster::with_policy(policy).node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    c.run(job("x").gpus(2).selector("kubernetes.io/hostname", "a"), t(0));
    let id = c.submit(job("u").gpus(2));
    assert_eq!(c.nodes_of(&c.plan(t(1)), id), ["b"]);
}

#[test]
fn anti_affinity_spreads_replicas_of_one_job() {
    let mut c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    let id = c.submit(job("u").gpus(1).replicas(2).label("app", "web").avoid("app", "web"));
    let mut nodes = c.nodes_of(&c.plan(t(0)), id);
    nodes.sort();
    assert_eq!(nodes, ["a", "b"]);
}

#[test]
fn anti_affinity_against_running_jobs() {
    let mut c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    c.run(job("x").gpus(7).label("tier", "db").selector("kubernetes.io/hostname", "a"), t(0));
    // Best fit would pick a (1 free); anti-affinity forbids it.
    let id = c.submit(job("u").gpus(1).avoid("tier", "db"));
    assert_eq!(c.nodes_of(&c.plan(t(1)), id), ["b"]);
}

#[test]
fn reasons_name_what_is_missing() {
    struct R {
        name: &'static str,
        job: J,
        want: &'static str,
    }
    let cases = [
        R {
            name: "too few free",
            job: job("u").gpus(4).model("H100-80GB"),
            want: "needs 4×H100-80GB on one node, best node has 2 free",
        },
        R {
            name: "no such model",
            job: job("u").gpus(1).model("B200"),
            want: "needs 1×B200, but no node that is up matches its selector, affinity and GPU model",
        },
        R {
            name: "no such label",
            job: job("u").gpus(1).selector("zone", "mars"),
            want: "needs 1×GPU, but no node that is up matches its selector, affinity and GPU model",
        },
        R {
            name: "gang",
            job: job("u").gpus(8).replicas(2),
            want: "needs 2 replicas of 8×GPU per node, best node has 2 free",
        },
        R {
            name: "no MIG slice",
            job: job("u").mig("1g.10gb"),
            want: "needs 1×MIG 1g.10gb, but no node that is up matches its selector, affinity and GPU model",
        },
    ];
    for case in cases {
        let mut c = Cluster::new("fifo-backfill").node("a", 8, "H100-80GB");
        c.run(job("x").gpus(6), t(0));
        let id = c.submit(case.job);
        let plan = c.plan(t(1));
        assert_eq!(c.reason(&plan, id), case.want, "{}", case.name);
    }
}

#[test]
fn draining_and_down_nodes_take_nothing() {
    for state in [gpool_core::NodeState::Draining, gpool_core::NodeState::Down] {
        let mut c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
        let a = c.id("a");
        c.snap.set_node_state(a, state).expect("state");
        let id = c.submit(job("u").gpus(8));
        let plan = c.plan(t(0));
        assert_eq!(c.nodes_of(&plan, id), ["b"], "{state:?}");
        let second = c.submit(job("u").gpus(8));
        c.apply(&plan);
        assert!(c.plan(t(1)).starts.iter().all(|s| s.job != second), "{state:?}");
    }
}

#[test]
fn infeasible_requests_are_recognised_with_the_reason() {
    let c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB").queue("small", None, 0, Some(4));
    let cases: [(J, Option<&str>); 7] = [
        (job("u").gpus(8).replicas(2), None),
        (job("u").gpus(8).replicas(3), Some("holds 2 such replicas")),
        (job("u").gpus(9), Some("needs 9×GPU per replica on one node; the largest node, a, has 8×H100-80GB")),
        (job("u").gpus(1).model("B200"), Some("needs 1×B200")),
        (job("u").gpus(1).cpus(1000), Some("no node could ever run it")),
        (job("u").gpus(5).queue("small"), Some("queue small has a maximum of 4.00")),
        (job("u").mig("1g.10gb"), Some("needs 1×MIG 1g.10gb")),
    ];
    for (j, want) in cases {
        let got = c.snap.check_feasible(&j.spec).map_err(|e| e.to_string());
        match want {
            None => assert_eq!(got, Ok(())),
            Some(w) => assert!(got.as_ref().is_err_and(|e| e.contains(w)), "want {w:?}, got {got:?}"),
        }
    }
}

/// Issue 18: a job that only a draining (or down) node could run says so,
/// rather than that no node matches it.
#[test]
fn a_job_only_a_draining_node_could_run_says_so() {
    let mut c = Cluster::new("fifo").node("a", 2, "H100-80GB").node("b", 8, "H100-80GB");
    let (a, b) = (c.id("a"), c.id("b"));
    c.snap.set_node_state(b, gpool_core::NodeState::Draining).expect("drain");
    let big = c.submit(job("u").gpus(4));
    let why = c.reason(&c.plan(t(0)), big);
    assert_eq!(why, "needs 4×GPU; the only nodes that could run it are 1 draining (gpool resume NODE)");
    c.snap.remove_pending(big, false).expect("cancelled");
    c.snap.set_node_state(a, gpool_core::NodeState::Down).expect("down");
    let small = c.submit(job("v").gpus(1));
    let why = c.reason(&c.plan(t(1)), small);
    assert!(why.contains("1 draining") && why.contains("1 down"), "{why}");
    c.snap.remove_pending(small, false).expect("cancelled");
    let other = c.submit(job("w").gpus(1).model("A100-80GB"));
    assert!(c.reason(&c.plan(t(2)), other).contains("no node that is up matches"), "no node could ever");
}

/// Issue 22: a vendor resource gets only its vendor's devices; "any GPU" gets
/// an NVIDIA or AMD GPU but never a TPU; a model is matched within its kind.
#[test]
fn accelerator_kinds_keep_their_jobs_apart() {
    use gpool_core::DeviceKind::{AmdGpu, NvidiaGpu, Tpu};
    let cases: [(Option<gpool_core::DeviceKind>, Option<&str>, &[&str]); 5] = [
        (Some(AmdGpu), None, &["amd"]),
        (Some(NvidiaGpu), None, &["nv"]),
        (Some(Tpu), None, &["tpu"]),
        (None, None, &["amd", "nv"]),
        (None, Some("MI300X"), &["amd"]),
    ];
    for (kind, model, may) in cases {
        let mut c = Cluster::new("gpool")
            .node_of_kind("nv", 4, "H100-80GB", NvidiaGpu)
            .node_of_kind("amd", 4, "MI300X", AmdGpu)
            .node_of_kind("tpu", 4, "v5p", Tpu);
        let mut j = job("u").gpus(4);
        if let Some(k) = kind {
            j = j.kind(k);
        }
        if let Some(m) = model {
            j = j.model(m);
        }
        let id = c.submit(j);
        let plan = c.plan(t(0));
        let on = c.nodes_of(&plan, id);
        assert!(may.contains(&on[0].as_str()), "{kind:?} {model:?}: on {on:?}, may {may:?}");
    }
    // A TPU model asked of "any GPU" is not found, and the reason says so.
    let mut c = Cluster::new("gpool").node_of_kind("tpu", 4, "v5p", Tpu);
    let id = c.submit(job("u").gpus(1));
    let plan = c.plan(t(0));
    assert!(plan.starts.is_empty(), "{plan:?}");
    assert!(!c.reason(&plan, id).is_empty());
}

/// Issue 22: a multi-host TPU slice is one gang on the hosts of one slice.
/// With a chip busy on slice a, the two-host job goes to slice b whole,
/// never to one free host of each slice; with no whole slice free it waits.
#[test]
fn a_tpu_slice_gang_stays_on_one_slice() {
    use gpool_core::DeviceKind::Tpu;
    let slice = |c: Cluster, host: &str, s: &str| {
        c.node_of_kind(host, 4, "TPU-v5p", Tpu).labels(host, &[("gpool.io/tpu-slice", s)])
    };
    let mut c = Cluster::new("gpool");
    c = slice(c, "a1", "a");
    c = slice(c, "a2", "a");
    c = slice(c, "b1", "b");
    c = slice(c, "b2", "b");
    c.run(job("busy").kind(Tpu).gpus(1).selector("gpool.io/tpu-slice", "a"), t(0));
    let mut gang = job("u").kind(Tpu).gpus(4).replicas(2);
    gang.spec.same_label = Some("gpool.io/tpu-slice".into());
    let id = c.submit(gang.clone());
    let plan = c.plan(t(1));
    let mut on = c.nodes_of(&plan, id);
    on.sort();
    assert_eq!(on, ["b1", "b2"], "{plan:?}");
    c.apply(&plan);
    // Slice b is taken and slice a has a busy chip: the next one waits.
    let next = c.submit(gang);
    let plan = c.plan(t(2));
    assert!(plan.starts.iter().all(|s| s.job != next), "{plan:?}");
}

#[test]
fn a_tpu_slice_gang_preempts_on_one_slice_only() {
    use gpool_core::DeviceKind::Tpu;
    let slice = |c: Cluster, host: &str, s: &str| {
        c.node_of_kind(host, 4, "TPU-v5p", Tpu).labels(host, &[("gpool.io/tpu-slice", s)])
    };
    let mut c = Cluster::new("gpool");
    for (host, s) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")] {
        c = slice(c, host, s);
    }
    // Every host busy with low-priority, preemptible work.
    let low: Vec<_> = ["a1", "a2", "b1", "b2"]
        .iter()
        .map(|h| c.run(job("lo").kind(Tpu).gpus(4).preemptible().selector("kubernetes.io/hostname", h), t(0)))
        .collect();
    let mut gang = job("hi").kind(Tpu).gpus(4).replicas(2).priority(10);
    gang.spec.same_label = Some("gpool.io/tpu-slice".into());
    let id = c.submit(gang);
    let plan = c.plan(t(1));
    let mut victims: Vec<_> = plan.preemptions.iter().map(|p| p.victim).collect();
    victims.sort();
    assert_eq!(victims, low[..2].to_vec(), "the two jobs of slice a, the lowest, and nothing of b: {plan:#?}");
    c.apply(&plan);
    let plan = c.plan(t(2));
    let mut on = c.nodes_of(&plan, id);
    on.sort();
    assert_eq!(on, ["a1", "a2"], "{plan:#?}");
}
