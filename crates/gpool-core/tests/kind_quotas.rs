//! Issue 22: a queue's maximum per accelerator kind (`maxPerKind`). A job
//! that names its kind waits at that kind's maximum while other kinds run;
//! any-GPU jobs count against the kind they were placed on, and go to
//! another kind when the one they fit first is at its maximum; and, over random
//! fleets, jobs and ends, no queue ever holds more of a kind than its maximum,
//! and the use the snapshot keeps per kind is what its running jobs hold.

mod common;

use common::*;
use gpool_core::DeviceKind::{self, AmdGpu, NvidiaGpu, Tpu};
use gpool_core::JobId;
use proptest::prelude::*;

fn fleet() -> Cluster {
    Cluster::new("gpool")
        .node_of_kind("nv", 8, "H100-80GB", NvidiaGpu)
        .node_of_kind("amd", 8, "MI300X", AmdGpu)
        .node_of_kind("tpu", 4, "TPU-v5p", Tpu)
}

#[test]
fn a_kind_at_its_maximum_holds_its_jobs_and_not_the_others() {
    let mut c = fleet().kind_queue("ml", None, &[(AmdGpu, 4), (Tpu, 2)]);
    let amd = c.run(job("u").queue("ml").kind(AmdGpu).gpus(3), t(0));
    let more_amd = c.submit(job("u").queue("ml").kind(AmdGpu).gpus(2));
    let tpu = c.submit(job("u").queue("ml").kind(Tpu).gpus(2));
    let nv = c.submit(job("u").queue("ml").kind(NvidiaGpu).gpus(8));
    let plan = c.plan(t(1));
    let started: Vec<JobId> = plan.starts.iter().map(|s| s.job).collect();
    assert!(started.contains(&tpu) && started.contains(&nv), "other kinds run: {plan:#?}");
    assert!(!started.contains(&more_amd), "3 + 2 AMD GPUs is over the maximum of 4");
    let why = c.reason(&plan, more_amd);
    assert!(why.contains("amd.com/gpu maximum of 4 GPUs (3 GPUs in use)"), "{why}");
    c.apply(&plan);
    assert_eq!(c.snap.queue_kind_usage("ml").get(AmdGpu), 3000);
    assert_eq!(c.snap.queue_kind_usage("ml").get(Tpu), 2000);
    let more_tpu = c.submit(job("u").queue("ml").kind(Tpu).gpus(1));
    assert!(c.reason(&c.plan(t(2)), more_tpu).contains("google.com/tpu maximum of 2 chips"));
    // The AMD job ends: the waiting one fits under the maximum now.
    c.finish(amd, t(3));
    let plan = c.plan(t(3));
    assert!(plan.starts.iter().any(|s| s.job == more_amd), "{plan:#?}");
}

#[test]
fn an_any_gpu_job_counts_against_the_kind_it_was_placed_on() {
    let mut c = fleet().kind_queue("ml", None, &[(NvidiaGpu, 2)]);
    let id = c.submit(job("u").queue("ml").gpus(2));
    let plan = c.plan(t(0));
    let on = c.nodes_of(&plan, id);
    c.apply(&plan);
    let used = c.snap.queue_kind_usage("ml");
    match on[0].as_str() {
        "nv" => assert_eq!((used.get(NvidiaGpu), used.get(AmdGpu)), (2000, 0)),
        "amd" => assert_eq!((used.get(NvidiaGpu), used.get(AmdGpu)), (0, 2000)),
        other => panic!("any GPU went to {other}"),
    }
    // Finished, its use is given back.
    c.finish(id, t(1));
    assert_eq!(c.snap.queue_kind_usage("ml"), gpool_core::KindUnits::default());
}

#[test]
fn an_any_gpu_job_turned_away_by_one_kinds_maximum_runs_on_another() {
    let mut c = fleet().kind_queue("ml", None, &[(NvidiaGpu, 2)]);
    c.run(job("u").queue("ml").kind(NvidiaGpu).gpus(2), t(0));
    // Best fit would put it beside the NVIDIA job, over NVIDIA's maximum: it goes to the AMD GPUs.
    let id = c.submit(job("u").queue("ml").gpus(2));
    let plan = c.plan(t(1));
    assert_eq!(c.nodes_of(&plan, id), vec!["amd".to_string()], "{plan:#?}");
    c.apply(&plan);
    assert_eq!(c.snap.queue_kind_usage("ml").get(AmdGpu), 2000);
    // A job that names NVIDIA still waits at the maximum.
    let named = c.submit(job("u").queue("ml").kind(NvidiaGpu).gpus(1));
    assert!(c.reason(&c.plan(t(2)), named).contains("nvidia.com/gpu maximum of 2"));
}

#[test]
fn an_any_gpu_job_that_must_preempt_does_so_on_a_kind_with_room_under_its_maximum() {
    let mut c = fleet().kind_queue("ml", None, &[(NvidiaGpu, 2)]).kind_queue("other", None, &[]);
    c.run(job("u").queue("ml").kind(NvidiaGpu).gpus(2), t(0));
    // Both GPU nodes are full of preemptible work; the NVIDIA victim would free less.
    let on_nv = c.run(job("v").queue("other").kind(NvidiaGpu).gpus(6).preemptible(), t(0));
    let on_amd = c.run(job("v").queue("other").kind(AmdGpu).gpus(8).preemptible(), t(0));
    let id = c.submit(job("u").queue("ml").gpus(2).priority(10));
    let plan = c.plan(t(1));
    let victims: Vec<JobId> = plan.preemptions.iter().map(|p| p.victim).collect();
    assert_eq!(victims, vec![on_amd], "not {on_nv}: ml is at its NVIDIA maximum: {plan:#?}");
    c.apply(&plan);
    let plan = c.plan(t(2));
    assert_eq!(c.nodes_of(&plan, id), vec!["amd".to_string()], "{plan:#?}");
}

#[derive(Clone, Debug)]
struct Gen {
    kind: Option<DeviceKind>,
    gpus: u32,
    ends_after: u8,
}

fn job_gen() -> impl Strategy<Value = Gen> {
    (prop::option::of(prop::sample::select(vec![NvidiaGpu, AmdGpu, Tpu])), 1u32..4, 1u8..4)
        .prop_map(|(kind, gpus, ends_after)| Gen { kind, gpus, ends_after })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_queue_ever_holds_more_of_a_kind_than_its_maximum(
        jobs in prop::collection::vec(job_gen(), 1..30),
        caps in prop::collection::vec((prop::sample::select(vec![NvidiaGpu, AmdGpu, Tpu]), 0u64..6), 0..3),
        sizes in (1u32..9, 1u32..9, 1u32..5),
        policy in prop::sample::select(gpool_core::Policy::NAMES.to_vec()),
    ) {
        let mut c = Cluster::new(policy)
            .node_of_kind("nv", sizes.0, "H100-80GB", NvidiaGpu)
            .node_of_kind("amd", sizes.1, "MI300X", AmdGpu)
            .node_of_kind("tpu", sizes.2, "TPU-v5p", Tpu)
            .kind_queue("q", None, &caps);
        let cap = |k: DeviceKind| caps.iter().rev().find(|(c, _)| *c == k).map(|(_, n)| n * 1000);
        let mut ends: Vec<(JobId, u64, u64)> = Vec::new();
        for g in &jobs {
            let mut j = job("u").queue("q").gpus(g.gpus);
            if let Some(k) = g.kind {
                j = j.kind(k);
            }
            let id = c.submit(j);
            ends.push((id, u64::from(g.ends_after), u64::from(g.gpus)));
        }
        let kind_of_node = |name: &str| match name { "nv" => NvidiaGpu, "amd" => AmdGpu, _ => Tpu };
        // (job, the step it ends after, GPUs per replica, its nodes)
        let mut running: Vec<(JobId, u64, u64, Vec<String>)> = Vec::new();
        for step in 0..12u64 {
            let now = t(step as i64);
            let plan = c.plan(now);
            for s in &plan.starts {
                let nodes = c.nodes_of(&plan, s.job);
                let (end, gpus) = ends.iter().find(|(id, _, _)| *id == s.job).map_or((1, 1), |(_, e, g)| (*e, *g));
                running.push((s.job, step + end, gpus, nodes));
            }
            // Preempted jobs go back to the queue (apply stops them at once).
            running.retain(|(id, _, _, _)| plan.preemptions.iter().all(|p| p.victim != *id));
            c.apply(&plan);
            // What the snapshot keeps is what the running jobs hold, and within every maximum.
            let used = c.snap.queue_kind_usage("q");
            for k in [NvidiaGpu, AmdGpu, Tpu] {
                let held: u64 = running
                    .iter()
                    .map(|(_, _, per, nodes)| nodes.iter().filter(|n| kind_of_node(n) == k).count() as u64 * per * 1000)
                    .sum();
                prop_assert_eq!(used.get(k), held, "{:?} at step {}", k, step);
                if let Some(max) = cap(k) {
                    prop_assert!(used.get(k) <= max, "{:?}: {} over its maximum {}", k, used.get(k), max);
                }
            }
            let (done, left): (Vec<_>, Vec<_>) = running.into_iter().partition(|(_, end, _, _)| *end <= step + 1);
            for (id, _, _, _) in done {
                c.finish(id, t(step as i64 + 1));
            }
            running = left;
        }
    }
}
