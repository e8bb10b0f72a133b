//! Repartitioning one MIG GPU of a node while another runs a job (issue
//! 14): each MIG GPU keeps a slot range of its own, so the running job's
//! instances keep their slots, and a GPU with a running job is refused.

mod common;
use std::sync::Arc;

use common::*;
use gpool_core::{Device, DeviceKind, MigInstance, MigProfile, Node, SnapshotError};

fn instances(gpu: u32, profiles: &[&str]) -> Vec<MigInstance> {
    profiles
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let profile: MigProfile = p.parse().expect("profile");
            MigInstance {
                memory_mb: u64::from(profile.memory_gb) * 1000 - 200,
                profile,
                uuid: Arc::from(format!("MIG-{gpu}-{i}-{p}")),
                gi_id: Some(i as u32 + 1),
            }
        })
        .collect()
}

fn two_mig_gpus() -> Cluster {
    let mut n = Node::new("m", 32, 256 * 1024);
    for (index, layout) in [(0u32, &["3g.40gb", "3g.40gb"][..]), (1, &["7g.80gb"][..])] {
        n.devices.push(Device {
            index,
            uuid: Arc::from(format!("GPU-{index}")),
            kind: DeviceKind::NvidiaGpu,
            model: Arc::from("H100-80GB"),
            memory_mb: 81_559,
            nvlink_group: None,
            numa_node: None,
            mig: Some(instances(index, layout)),
        });
    }
    Cluster::new("fifo").node_with(n)
}

#[test]
fn an_idle_gpu_is_repartitioned_beside_a_running_job_and_a_busy_one_is_not() {
    let mut c = two_mig_gpus();
    let node = c.id("m");
    let x = c.run(job("x").mig("3g.40gb"), t(0));
    let before = c.snap.job(x).and_then(|j| j.running()).map(|r| r.placement.clone()).expect("running");
    let devices = |c: &Cluster| {
        let (_, mig) = c.snap.replica_devices(&before[0]);
        mig.iter().map(|(_, m)| m.uuid.to_string()).collect::<Vec<_>>()
    };
    let held = devices(&c);

    // GPU 0 holds x's instance: refused, and nothing changes.
    let e = c.snap.repartition(node, 0, instances(0, &["1g.10gb"; 7])).expect_err("busy");
    assert!(matches!(&e, SnapshotError::Repartition { why, .. } if why.contains("a job holds")), "{e}");
    // GPU 1 is idle: seven 1g instances.
    c.snap.repartition(node, 1, instances(1, &["1g.10gb"; 7])).expect("idle GPU");
    assert_eq!(devices(&c), held, "the running job keeps its instance");
    let ones: Vec<_> = (0..7).map(|i| c.submit(job(&format!("u{i}")).mig("1g.10gb"))).collect();
    let plan = c.plan(t(1));
    for id in &ones {
        assert_eq!(c.devices_of(&plan, *id), ["1g.10gb"], "job {id}");
    }
    c.apply(&plan);
    let eighth = c.submit(job("late").mig("1g.10gb"));
    assert!(c.reason(&c.plan(t(2)), eighth).contains("1g.10gb"), "seven instances, no more");
    c.snap.remove_pending(eighth, false).expect("cancelled");
    // x ends: GPU 0 is idle and may change too.
    c.finish(x, t(3));
    c.snap.repartition(node, 0, instances(0, &["4g.40gb", "3g.40gb"])).expect("idle now");
    let big = c.submit(job("big").mig("4g.40gb"));
    let plan = c.plan(t(4));
    assert!(plan.starts.iter().any(|s| s.job == big), "{}", c.reason(&plan, big));
    assert_eq!(c.devices_of(&plan, big), ["4g.40gb"]);
    // Not a MIG GPU, no such GPU, too many instances.
    let mut plain = Cluster::new("fifo").node("p", 2, "H100-80GB");
    let p = plain.id("p");
    assert!(plain.snap.repartition(p, 0, instances(0, &["7g.80gb"])).is_err_and(|e| e.to_string().contains("MIG")));
    assert!(c.snap.repartition(node, 9, Vec::new()).is_err_and(|e| e.to_string().contains("no such GPU")));
    assert!(c.snap.repartition(node, 0, instances(0, &["1g.10gb"; 8])).is_err());
}

/// A MIG request that no layout has now is feasible when a managed GPU
/// could be laid out for it (the planner will), and refused otherwise.
#[test]
fn a_profile_only_a_managed_gpu_could_offer_is_feasible() {
    let mut c = two_mig_gpus();
    let node = c.id("m");
    let one_g = job("u").mig("1g.10gb").spec;
    assert!(c.snap.check_feasible(&one_g).is_err(), "no 1g instance, nothing managed");
    c.snap.set_mig_managed(node, 1, true).expect("managed");
    assert!(c.snap.mig_gpu_managed(node, 1) && !c.snap.mig_gpu_managed(node, 0));
    c.snap.check_feasible(&one_g).expect("GPU 1 can be split into 1g instances");
    let mut eight = one_g.clone();
    eight.replica.gpu = gpool_core::GpuRequest::Mig { profile: "1g.10gb".parse().expect("p"), count: 8 };
    assert!(c.snap.check_feasible(&eight).is_err(), "one managed GPU holds seven 1g instances at most");
    c.snap.set_mig_managed(node, 0, true).expect("managed");
    c.snap.check_feasible(&eight).expect("two managed GPUs hold fourteen");
    let a100 = job("v").mig("1g.10gb").model("A100-80GB").spec;
    assert!(c.snap.check_feasible(&a100).is_err(), "the model constraint holds");
    // The planner only touches managed GPUs.
    let _ = c.submit(job("w").mig("1g.10gb"));
    c.snap.set_mig_managed(node, 0, false).expect("unmanaged");
    c.snap.set_mig_managed(node, 1, false).expect("unmanaged");
    assert_eq!(gpool_core::mig_planner::plan_for(&c.snap, |_, _| true), Default::default());
    c.snap.set_mig_managed(node, 1, true).expect("managed");
    let p = gpool_core::mig_planner::plan_for(&c.snap, |_, _| true);
    assert_eq!(p.repartitions.iter().map(|(_, gpu, _)| *gpu).collect::<Vec<_>>(), [1]);
}
