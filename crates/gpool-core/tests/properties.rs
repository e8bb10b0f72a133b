//! Property tests: random clusters and workloads driven through many passes.
//!
//! Every plan must keep the core's invariants (ARCHITECTURE.md):
//! 1. no device is given to two jobs, and a start only uses free devices;
//! 2. no node's CPU or memory is exceeded;
//! 3. a gang gets all its replicas or nothing;
//! 4. queue maximums hold;
//! 5. only allowed victims are preempted, and only when the preemptor then fits;
//! 6. equal inputs give equal plans;
//! 7. every job that could ever run eventually finishes (no starvation);
//! 8. shares of a GPU never add up to more than it, in compute or memory, and
//!    a GPU held whole holds no share.

mod common;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use gpool_core::job::Job;
use gpool_core::{JobId, Plan, PreemptWhy, Snapshot, StopOutcome};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct NodeGen {
    gpus: u32,
    island: u32,
    model: usize,
    mig: Option<usize>,
}

const MODELS: [&str; 3] = ["H100-80GB", "A100-40GB", "L4-24GB"];
const MIG_LAYOUTS: [&[&str]; 3] = [&["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], &["7g.80gb"], &["1g.10gb"; 7]];

#[derive(Clone, Debug)]
struct JobGen {
    kind: u8,
    gpus: u32,
    replicas: u32,
    class: i32,
    preemptible: bool,
    queue: usize,
    user: usize,
    submit: i64,
    duration: u64,
    estimate: bool,
}

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::sample::select(vec![1u32, 2, 4]),
        0..MODELS.len(),
        prop::option::weighted(0.25, 0..MIG_LAYOUTS.len()),
    )
        .prop_map(|(gpus, island, model, mig)| NodeGen { gpus, island, model, mig })
}

fn job_gen() -> impl Strategy<Value = JobGen> {
    (0u8..12, 1u32..=8, 1u32..=3, 0i32..3, any::<bool>(), 0usize..4, 0usize..4, 0i64..2000, 1u64..20_000, any::<bool>())
        .prop_map(|(kind, gpus, replicas, class, preemptible, queue, user, submit, duration, estimate)| JobGen {
            kind,
            gpus,
            replicas,
            class,
            preemptible,
            queue,
            user,
            submit,
            duration,
            estimate,
        })
}

fn to_job(g: &JobGen) -> J {
    let users = ["ana", "bo", "cy", "di"];
    let queues = ["q0", "q1", "q2", "default"];
    let mut j = job(users[g.user])
        .team(if g.user < 2 { "red" } else { "blue" })
        .queue(queues[g.queue])
        .priority(g.class)
        .at(g.submit);
    j = match g.kind {
        0 => j.mig(["1g.10gb", "2g.20gb", "3g.40gb"][(g.gpus % 3) as usize]),
        1 => j.gpu_memory_gb(u64::from(g.gpus) * 9),
        2 => j.cpus(u64::from(g.gpus)),
        3 => j.gpus(g.gpus).model(MODELS[(g.gpus % 3) as usize]),
        10 => j.share(Some([125, 250, 500, 750][(g.gpus % 4) as usize]), None),
        11 => j.share(g.preemptible.then_some(300), Some(u64::from(g.gpus) * 3)),
        _ => j.gpus(g.gpus),
    };
    if (8..10).contains(&g.kind) {
        j = j.replicas(g.replicas);
    }
    if g.preemptible {
        j = j.preemptible();
    }
    if g.estimate {
        j = j.estimate(g.duration);
    }
    j.cpus(1).memory_gb(4)
}

fn build(nodes: &[NodeGen], policy: &str, quotas: &[(u64, Option<u64>, bool)]) -> Cluster {
    let mut c = Cluster::new(policy);
    for (i, n) in nodes.iter().enumerate() {
        c = match n.mig {
            Some(layout) => c.mig_node(&format!("m{i}"), MIG_LAYOUTS[layout]),
            None => c.islands(&format!("n{i}"), n.gpus, n.island.min(n.gpus), MODELS[n.model]),
        };
    }
    for (i, (g, max, cohort)) in quotas.iter().enumerate() {
        c = c.queue(&format!("q{i}"), cohort.then_some("lab"), *g, *max);
    }
    c
}

/// Whether a job could run alone on the empty cluster (else it is exempt from the starvation check).
fn satisfiable(nodes: &[NodeGen], quotas: &[(u64, Option<u64>, bool)], j: &J) -> bool {
    let mut c = build(nodes, "fifo", quotas);
    let id = c.submit(j.clone().at(0));
    c.plan(t(0)).starts.iter().any(|s| s.job == id)
}

/// Checks one plan against the snapshot it came from.
fn check_plan(snap: &Snapshot, plan: &Plan) -> Result<(), String> {
    // 6. determinism
    if gpool_core::schedule(&snap.clone(), plan.now) != *plan {
        return Err("equal inputs gave different plans".into());
    }
    // 1-3: starts apply cleanly to a copy (the snapshot refuses busy devices and overcommitted hosts).
    let mut copy = snap.clone();
    let mut claimed: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for s in &plan.starts {
        let job = snap.job(s.job).ok_or("start of unknown job")?;
        if s.placement.len() != job.spec.replicas as usize {
            return Err(format!("gang {} got {} of {} replicas", s.job, s.placement.len(), job.spec.replicas));
        }
        copy.start(s.job, s.placement.clone(), plan.now).map_err(|e| format!("start refused: {e}"))?;
        for r in s.placement.iter().filter(|r| r.share.is_none()) {
            let c = claimed.entry(r.node.0).or_default();
            c.0 |= r.gpus;
            c.1 |= r.mig;
        }
    }
    // 4. queue maximums
    for q in snap.queues() {
        if let Some(max) = q.max
            && copy.queue_usage(&q.name) > max
        {
            return Err(format!("queue {} over its max: {} > {max}", q.name, copy.queue_usage(&q.name)));
        }
    }
    // 5. victims are allowed, and the preemptor's claim is made of free devices and its victims' devices.
    for p in &plan.preemptions {
        let v = snap.job(p.victim).ok_or("unknown victim")?;
        let j = snap.job(p.for_job).ok_or("unknown preemptor")?;
        // Across queues only borrowed capacity may be taken, whatever the rule.
        let guarantee = |q: &str| snap.queues().find(|c| &*c.name == q).map_or(0, |c| c.guarantee);
        if v.spec.queue != j.spec.queue && snap.queue_usage(&v.spec.queue) <= guarantee(&v.spec.queue) {
            return Err(format!(
                "victim {} of queue {} taken within its guarantee by job {}",
                p.victim, v.spec.queue, p.for_job
            ));
        }
        let run = v.running().ok_or("victim not running")?;
        if run.stopping.is_some() {
            return Err(format!("victim {} was already stopping", p.victim));
        }
        let ok = match &p.why {
            PreemptWhy::HigherPriority => v.spec.preemptible && v.spec.priority < j.spec.priority,
            PreemptWhy::MoreService => {
                let p = snap.policy();
                let lvl = |job: &Job| p.service_level(job.attained_gpu_milli_secs(plan.now) / 1000);
                let better = match p.ordering {
                    // Multifactor: the preemptor's age-and-service points beat the victim's by a full level.
                    gpool_core::Ordering::Multifactor => {
                        // Age counts the order's weight if the preemptor is older, the
                        // (larger) protection weight if the victim is older.
                        let hours =
                            (j.spec.submit_time.as_millis() - v.spec.submit_time.as_millis()) as f64 / 3_600_000.0;
                        let w = if hours >= 0.0 {
                            p.weights.preemption_age_per_hour.max(p.weights.age_per_hour)
                        } else {
                            p.weights.age_per_hour
                        };
                        let levels = f64::from(lvl(j)) - f64::from(lvl(v));
                        -hours * w - levels * p.weights.service_level >= p.weights.preemption_margin - 1e-3
                    }
                    _ => lvl(v) > lvl(j),
                };
                v.spec.preemptible && v.spec.priority == j.spec.priority && better
            }
            PreemptWhy::LongerRemaining => {
                // Unknown remaining time counts as the longest.
                let left = |job: &Job| job.remaining(plan.now).unwrap_or(Duration::MAX);
                v.spec.preemptible && v.spec.priority == j.spec.priority && left(v) > left(j)
            }
            PreemptWhy::AboveMinimum => false,
            PreemptWhy::Reclaim { queue } => {
                let g = |q: &str| snap.queues().find(|c| &*c.name == q).map_or(0, |c| c.guarantee);
                **queue == *v.spec.queue && snap.queue_usage(queue) > g(queue) && v.spec.queue != j.spec.queue
            }
        };
        if !ok {
            return Err(format!("victim {} not allowed for {} ({:?})", p.victim, p.for_job, p.why));
        }
    }
    // Together, the victims other queues take from a queue come out of its borrowed part only.
    let mut taken_from: BTreeMap<String, u64> = BTreeMap::new();
    for p in &plan.preemptions {
        let (v, j) = (snap.job(p.victim).ok_or("victim")?, snap.job(p.for_job).ok_or("preemptor")?);
        if v.spec.queue != j.spec.queue {
            *taken_from.entry(v.spec.queue.to_string()).or_default() += v.running().map_or(0, |r| r.gpu_milli);
        }
    }
    for (q, taken) in taken_from {
        let guarantee = snap.queues().find(|c| *c.name == *q).map_or(0, |c| c.guarantee);
        let borrowed = snap.queue_usage(&q).saturating_sub(guarantee);
        if taken > borrowed {
            return Err(format!("other queues took {taken} from queue {q}, which borrowed only {borrowed}"));
        }
    }
    for (job, placement) in &plan.nominated {
        let mut avail: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        // Any victim's devices: its preemptor's, or what it left to the next job of the pass.
        let victims = plan.preemptions.iter().map(|p| p.victim);
        let stopping =
            snap.running_jobs().filter(|r| r.running().and_then(|x| x.stopping.as_ref()).is_some()).map(|r| r.id);
        for v in victims.chain(stopping) {
            for r in snap.job(v).and_then(Job::running).map(|r| r.placement.as_slice()).unwrap_or(&[]) {
                let a = avail.entry(r.node.0).or_default();
                a.0 |= r.gpus;
                a.1 |= r.mig;
            }
        }
        // A share's claim is checked when it starts (the snapshot refuses a full GPU).
        for r in placement.iter().filter(|r| r.share.is_none()) {
            let (fg, fm) = snap.free_masks(r.node).ok_or("no node")?;
            let (vg, vm) = avail.get(&r.node.0).copied().unwrap_or_default();
            if r.gpus & !(fg | vg) != 0 || r.mig & !(fm | vm) != 0 {
                return Err(format!("job {job} claims devices that are neither free nor its victims'"));
            }
            let c = claimed.entry(r.node.0).or_default();
            if c.0 & r.gpus != 0 || c.1 & r.mig != 0 {
                return Err(format!("job {job}'s claim overlaps another start or claim"));
            }
            c.0 |= r.gpus;
            c.1 |= r.mig;
        }
    }
    Ok(())
}

/// 8. Per GPU: one whole holder and no share, or shares that fit it.
fn check_shares(snap: &Snapshot) -> Result<(), String> {
    // (node, slot) → (whole holders, compute, memory)
    let mut held: BTreeMap<(u32, u32), (u32, u32, u64)> = BTreeMap::new();
    for j in snap.running_jobs() {
        for r in &j.running().expect("running").placement {
            for slot in 0..64u32 {
                if r.gpus & (1 << slot) == 0 {
                    continue;
                }
                let h = held.entry((r.node.0, slot)).or_default();
                match r.share {
                    Some(s) => {
                        h.1 += u32::from(s.milli);
                        h.2 += s.memory_mb;
                    }
                    None => h.0 += 1,
                }
            }
        }
    }
    for ((node, slot), (whole, milli, mem)) in held {
        let device = snap.node(gpool_core::NodeId(node)).and_then(|n| n.whole_gpus().nth(slot as usize));
        let device_mb = device.map_or(0, |d| d.memory_mb);
        if whole > 1 || (whole == 1 && (milli > 0 || mem > 0)) {
            return Err(format!("GPU {slot} of node {node}: {whole} whole holders beside shares of {milli}‰"));
        }
        if milli > 1000 || mem > device_mb {
            return Err(format!("GPU {slot} of node {node} shared beyond it: {milli}‰, {mem} of {device_mb} MB"));
        }
    }
    Ok(())
}

/// Drives the workload to completion; returns (finished jobs, preemptions) or the first broken invariant.
fn simulate(c: &mut Cluster, jobs: &[(JobId, u64)]) -> Result<(usize, usize), String> {
    let durations: BTreeMap<JobId, u64> = jobs.iter().copied().collect();
    let mut now = t(0);
    let (mut finished, mut preemptions, mut same_time) = (0, 0, 0);
    for _step in 0..20_000 {
        let plan = c.plan(now);
        check_plan(&c.snap, &plan)?;
        preemptions += plan.preemptions.len();
        let changed = !plan.is_empty();
        c.apply(&plan);
        check_shares(&c.snap)?;
        // Next event: a running job ends, or (if the plan changed nothing) time moves on.
        let next_end = c
            .snap
            .running_jobs()
            .map(|j| {
                let r = j.running().expect("running");
                let left = durations[&j.id].saturating_sub(j.service.prior_runtime.as_secs());
                r.started.plus(Duration::from_secs(left))
            })
            .min();
        if changed && same_time < 5 {
            same_time += 1;
            continue;
        }
        same_time = 0;
        let Some(end) = next_end else {
            if c.snap.pending_count() == 0 {
                return Ok((finished, preemptions));
            }
            now = now.plus(Duration::from_secs(600));
            continue;
        };
        now = end.max(now);
        let ending: Vec<JobId> = c
            .snap
            .running_jobs()
            .filter(|j| {
                let r = j.running().expect("running");
                let left = durations[&j.id].saturating_sub(j.service.prior_runtime.as_secs());
                r.started.plus(Duration::from_secs(left)) <= now
            })
            .map(|j| j.id)
            .collect();
        for id in ending {
            c.snap.stop(id, now, StopOutcome::Finished { success: true }).map_err(|e| e.to_string())?;
            finished += 1;
        }
    }
    Err(format!("did not drain: {} pending, {} running at {now}", c.snap.pending_count(), c.snap.running_count()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_every_invariant_and_nothing_starves(
        nodes in prop::collection::vec(node_gen(), 1..6),
        jobs in prop::collection::vec(job_gen(), 1..40),
        policy in prop::sample::select(gpool_core::Policy::NAMES.to_vec()),
        quotas in prop::collection::vec((0u64..8, prop::option::of(4u64..16), any::<bool>()), 0..3),
    ) {
        let mut c = build(&nodes, policy, &quotas);
        let mut ids = Vec::new();
        for g in &jobs {
            let j = to_job(g);
            if satisfiable(&nodes, &quotas, &j) {
                ids.push((c.submit(j), g.duration));
            }
        }
        match simulate(&mut c, &ids) {
            Ok((finished, preemptions)) => {
                prop_assert_eq!(finished, ids.len(), "every satisfiable job finishes");
                prop_assert!(preemptions <= 10 * ids.len().max(1), "preemption churn: {} for {} jobs", preemptions, ids.len());
            }
            Err(e) => prop_assert!(false, "{}", e),
        }
    }
}

#[test]
fn check_plan_catches_a_double_allocation() {
    // The checker itself must be able to fail: hand it a plan that reuses a busy GPU.
    let mut c = Cluster::new("fifo").node("n", 1, "H100-80GB");
    c.run(job("a").gpus(1), t(0));
    let b = c.submit(job("b").gpus(1));
    let mut plan = c.plan(t(1));
    assert!(plan.starts.is_empty());
    plan.starts.push(gpool_core::Start {
        job: b,
        placement: vec![gpool_core::ReplicaPlacement {
            node: c.id("n"),
            gpus: 1,
            mig: 0,
            cpus_milli: 0,
            memory_mb: 0,
            share: None,
        }],
        backfilled: false,
    });
    let err = check_plan(&c.snap, &plan).expect_err("must fail");
    assert!(err.contains("different plans") || err.contains("start refused"), "{err}");
    let _ = Arc::new(());
}
