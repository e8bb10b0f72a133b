//! Policy scenarios: ordering, backfill, gangs, quotas, preemption, dependencies.

mod common;
use common::*;
use gpool_core::{JobId, PendingReason, PreemptWhy, StopOutcome};

/// Ids of started jobs, sorted.
fn started(plan: &gpool_core::Plan) -> Vec<u64> {
    let mut v: Vec<u64> = plan.starts.iter().map(|s| s.job.0).collect();
    v.sort();
    v
}

struct OrderCase {
    name: &'static str,
    policy: &'static str,
    /// Jobs submitted in this order onto a 4-GPU node that one running 3-GPU job half fills.
    jobs: Vec<J>,
    want_started: Vec<u64>,
}

#[test]
fn ordering_and_backfill_table() {
    // Job 1 (running, 3 GPUs, planned end t=100) is submitted first in every case.
    let cases = vec![
        OrderCase {
            name: "strict FIFO: a blocked head blocks everyone",
            policy: "fifo",
            jobs: vec![job("a").gpus(4).at(1), job("b").gpus(1).at(2)],
            want_started: vec![],
        },
        OrderCase {
            name: "first fit: a small job overtakes",
            policy: "sjf",
            jobs: vec![job("a").gpus(4).at(1).estimate(10), job("b").gpus(1).at(2).estimate(1000)],
            want_started: vec![3],
        },
        OrderCase {
            name: "EASY: a short job that ends before the reservation backfills",
            policy: "fifo-backfill",
            jobs: vec![job("a").gpus(4).at(1).estimate(50), job("b").gpus(1).at(2).estimate(50)],
            want_started: vec![3],
        },
        OrderCase {
            name: "EASY: a long job that would delay the reservation does not",
            policy: "fifo-backfill",
            jobs: vec![job("a").gpus(4).at(1).estimate(50), job("b").gpus(1).at(2).estimate(500)],
            want_started: vec![],
        },
        OrderCase {
            name: "EASY: a job without estimate never backfills into the reservation",
            policy: "fifo-backfill",
            jobs: vec![job("a").gpus(4).at(1), job("b").gpus(1).at(2)],
            want_started: vec![],
        },
        OrderCase {
            name: "SJF orders by estimate",
            policy: "sjf",
            jobs: vec![job("a").gpus(1).at(1).estimate(100), job("b").gpus(1).at(2).estimate(10)],
            want_started: vec![3],
        },
        OrderCase {
            name: "higher priority class first",
            policy: "fifo",
            jobs: vec![job("a").gpus(1).at(1), job("b").gpus(1).at(2).priority(10)],
            want_started: vec![3],
        },
    ];
    for case in cases {
        let mut c = Cluster::new(case.policy).node("n", 4, "H100-80GB");
        c.run(job("r").gpus(3).limit(100), t(0));
        for j in case.jobs {
            c.submit(j);
        }
        let plan = c.plan(t(10));
        assert_eq!(started(&plan), case.want_started, "{}: {plan:#?}", case.name);
    }
}

#[test]
fn easy_reservation_names_the_blocked_job_and_its_start() {
    let mut c = Cluster::new("fifo-backfill").node("n", 4, "H100-80GB");
    c.run(job("r").gpus(3).limit(100), t(0));
    let head = c.submit(job("a").gpus(4).at(1));
    let long = c.submit(job("b").gpus(1).at(2).estimate(500));
    let plan = c.plan(t(10));
    let r = plan.reservation.clone().expect("reservation");
    assert_eq!((r.job, r.at), (head, t(100)));
    assert_eq!(c.reason(&plan, long), format!("would delay job {head}, whose start is reserved for t=100s"));
}

#[test]
fn fair_share_puts_the_light_user_first() {
    let mut c = Cluster::new("default").node("n", 2, "H100-80GB");
    // heavy has used a GPU for ten hours.
    let h = c.run(job("heavy").gpus(1), t(0));
    c.finish(h, t(36_000));
    let heavy = c.submit(job("heavy").gpus(2).at(36_000));
    let light = c.submit(job("light").gpus(2).at(36_001));
    let plan = c.plan(t(36_002));
    assert_eq!(started(&plan), vec![light.0], "light user first; heavy waits: {:?}", c.reason(&plan, heavy));
}

#[test]
fn age_orders_jobs_of_equal_standing() {
    let mut c = Cluster::new("default").node("n", 1, "H100-80GB");
    let young = c.submit(job("a").gpus(1).at(100));
    let old = c.submit(job("b").gpus(1).at(50));
    let plan = c.plan(t(200));
    assert_eq!(started(&plan), vec![old.0], "young waits: {}", c.reason(&plan, young));
}

#[test]
fn max_min_fairness_serves_the_user_holding_least() {
    let mut c = Cluster::new("fair").node("n", 4, "H100-80GB");
    c.run(job("a").gpus(2).at(0), t(0));
    let a2 = c.submit(job("a").gpus(1).at(1));
    let b = c.submit(job("b").gpus(1).at(2));
    let a3 = c.submit(job("a").gpus(1).at(3));
    // One GPU per user goes first: b (holds 0) before a (holds 2), then a again.
    let plan = c.plan(t(5));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), vec![b, a2]);
    assert!(plan.starts.iter().all(|s| s.job != a3));
}

#[test]
fn gangs_are_all_or_nothing_and_do_not_deadlock() {
    let mut c =
        Cluster::new("fifo-backfill").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB").node("c", 8, "H100-80GB");
    let g1 = c.submit(job("u").gpus(8).replicas(2).at(1));
    let g2 = c.submit(job("v").gpus(8).replicas(2).at(2));
    let plan = c.plan(t(3));
    // g1 gets two nodes; g2 holds nothing (no half-placed gang).
    assert_eq!(c.nodes_of(&plan, g1).len(), 2);
    assert!(plan.starts.iter().all(|s| s.job != g2));
    c.apply(&plan);
    let third = c.id("c");
    assert_eq!(c.snap.free_masks(third), Some((0xff, 0)), "the third node stays whole");
    c.finish(g1, t(100));
    let plan = c.plan(t(100));
    assert_eq!(c.nodes_of(&plan, g2).len(), 2);
}

#[test]
fn quota_maximum_and_cohort_borrowing() {
    let mut c = Cluster::new("fifo-backfill")
        .node("a", 8, "H100-80GB")
        .node("b", 8, "H100-80GB")
        .queue("research", Some("lab"), 4, Some(10))
        .queue("prod", Some("lab"), 8, None);
    let r1 = c.submit(job("u").gpus(8).queue("research").at(1));
    let r2 = c.submit(job("u").gpus(4).queue("research").at(2));
    let plan = c.plan(t(3));
    assert_eq!(started(&plan), vec![r1.0], "research borrows 4 of prod's idle guarantee");
    assert_eq!(c.reason(&plan, r2), "queue research is at its maximum of 10 GPUs (8 GPUs in use)");
}

#[test]
fn reclaim_preempts_only_borrowers_and_only_what_is_needed() {
    let mut c = Cluster::new("default").node("a", 8, "H100-80GB").queue("research", Some("lab"), 4, None).queue(
        "prod",
        Some("lab"),
        4,
        None,
    );
    let mut borrowers = Vec::new();
    for i in 0..8 {
        borrowers.push(c.run(job("r").gpus(1).queue("research").at(i), t(i)));
    }
    let p = c.submit(job("p").gpus(2).queue("prod").at(1000));
    let plan = c.plan(t(1000));
    assert_eq!(plan.preemptions.len(), 2, "{plan:#?}");
    assert!(plan.preemptions.iter().all(|x| x.for_job == p && matches!(x.why, PreemptWhy::Reclaim { .. })));
    // The newest borrowers lose the least work.
    let victims: Vec<JobId> = plan.preemptions.iter().map(|x| x.victim).collect();
    assert!(victims.contains(&borrowers[7]) && victims.contains(&borrowers[6]), "{victims:?}");
    assert_eq!(c.reason(&plan, p), "waiting for 2 preempted job(s) to release their devices");
}

#[test]
fn preemption_rules() {
    struct P {
        name: &'static str,
        running: Vec<J>,
        job: J,
        want_victims: usize,
    }
    let cases = vec![
        P {
            name: "lower class, preemptible",
            running: vec![job("x").gpus(8).preemptible()],
            job: job("y").gpus(4).priority(10),
            want_victims: 1,
        },
        P {
            name: "lower class, not preemptible",
            running: vec![job("x").gpus(8)],
            job: job("y").gpus(4).priority(10),
            want_victims: 0,
        },
        P {
            name: "same class, equal service",
            running: vec![job("x").gpus(8).preemptible()],
            job: job("y").gpus(4),
            want_victims: 0,
        },
        P {
            name: "never preempt for a job that still would not fit",
            running: vec![job("x").gpus(8).preemptible()],
            job: job("y").gpus(16).priority(10),
            want_victims: 0,
        },
        P {
            name: "minimal set: one 4-GPU victim, not four 1-GPU ones",
            running: vec![
                job("x").gpus(1).preemptible(),
                job("x").gpus(1).preemptible(),
                job("x").gpus(1).preemptible(),
                job("x").gpus(1).preemptible(),
                job("x").gpus(4).preemptible(),
            ],
            job: job("y").gpus(4).priority(10),
            want_victims: 1,
        },
        P {
            name: "lower class first even if newer",
            running: vec![job("x").gpus(4).priority(5).preemptible(), job("x").gpus(4).preemptible()],
            job: job("y").gpus(4).priority(10),
            want_victims: 1,
        },
    ];
    for case in cases {
        let mut c = Cluster::new("fifo-backfill").node("n", 8, "H100-80GB");
        for r in case.running {
            c.run(r, t(0));
        }
        let y = c.submit(case.job.at(10));
        let plan = c.plan(t(1000));
        assert_eq!(plan.preemptions.len(), case.want_victims, "{}: {plan:#?}", case.name);
        if case.want_victims > 0 {
            let v = c.snap.job(plan.preemptions[0].victim).expect("victim");
            assert!(v.spec.priority < 10, "{}", case.name);
            assert_eq!(plan.nominated[0].0, y);
        }
    }
}

#[test]
fn a_nominated_job_waits_for_its_victims_without_preempting_more() {
    let mut c = Cluster::new("fifo-backfill").node("n", 8, "H100-80GB");
    let a = c.run(job("x").gpus(4).preemptible(), t(0));
    c.run(job("x").gpus(4).preemptible(), t(0));
    let y = c.submit(job("y").gpus(4).priority(10).at(1));
    let plan = c.plan(t(10));
    assert_eq!(plan.preemptions.len(), 1);
    let victim = plan.preemptions[0].victim;
    // The daemon marks the victim stopping; its process takes its grace period to exit.
    c.snap.request_stop(victim, gpool_core::StopCause::Preempted { for_job: y }).expect("stop");
    for now in [11, 12, 20] {
        let plan = c.plan(t(now));
        assert!(plan.preemptions.is_empty(), "no second victim at t={now}: {plan:#?}");
        assert_eq!(c.reason(&plan, y), "waiting for 1 preempted job(s) to release their devices");
    }
    c.snap.stop(victim, t(25), StopOutcome::Requeue { not_before: t(25) }).expect("stopped");
    let plan = c.plan(t(25));
    assert_eq!(started(&plan), vec![y.0]);
    let _ = a;
}

#[test]
fn a_victims_leftover_devices_go_to_the_next_job_of_the_pass() {
    // One 8-GPU victim on each node; two urgent 4-GPU jobs. The first job's
    // victim frees 8 GPUs: the second job claims the other 4 and waits for
    // the same victim instead of preempting the job on the other node.
    let mut c = Cluster::new("fifo-backfill").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    let v1 = c.run(job("x").gpus(8).preemptible(), t(0));
    let v2 = c.run(job("x").gpus(8).preemptible(), t(0));
    let y1 = c.submit(job("y").gpus(4).priority(10).at(1));
    let y2 = c.submit(job("y").gpus(4).priority(10).at(2));
    let plan = c.plan(t(10));
    assert_eq!(plan.preemptions.len(), 1, "{plan:#?}");
    let victim = plan.preemptions[0].victim;
    assert!(victim == v1 || victim == v2);
    assert_eq!(plan.preemptions[0].for_job, y1);
    let claims: Vec<_> = plan.nominated.iter().map(|(j, p)| (*j, p[0].node, p[0].gpus)).collect();
    assert_eq!(claims.len(), 2, "both jobs wait on the one victim: {claims:?}");
    assert_eq!(claims[0].1, claims[1].1, "on the victim's node");
    assert_eq!(claims[0].2 & claims[1].2, 0, "never the same GPU twice");
    assert_eq!(c.reason(&plan, y2), "waiting for 1 preempted job(s) to release their devices");
    // Later passes, while the victim stops: still nothing more preempted, and
    // neither job takes the other's GPUs.
    c.snap.request_stop(victim, gpool_core::StopCause::Preempted { for_job: y1 }).expect("stop");
    c.snap.carry_over(&plan);
    let plan = c.plan(t(20));
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
    assert_eq!(plan.nominated.len(), 2, "{plan:#?}");
    c.snap.stop(victim, t(25), StopOutcome::Requeue { not_before: t(9_999) }).expect("stopped");
    c.snap.carry_over(&plan);
    let plan = c.plan(t(25));
    let mut s = started(&plan);
    s.sort();
    assert_eq!(s, vec![y1.0, y2.0]);
}

#[test]
fn las_preempts_the_most_served_job_and_does_not_ping_pong() {
    let mut c = Cluster::new("las").node("n", 1, "H100-80GB");
    let old = c.run(job("x").gpus(1).preemptible(), t(0));
    // Ten hours later old has 36,000 GPU-seconds: level 2. A fresh job preempts it.
    let new = c.submit(job("y").gpus(1).preemptible().at(36_000));
    let plan = c.plan(t(36_000));
    assert_eq!(plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect::<Vec<_>>(), vec![(old, new)]);
    c.apply(&plan);
    let plan = c.plan(t(36_000));
    assert_eq!(started(&plan), vec![new.0]);
    c.apply(&plan);
    // The preempted job, now pending with more service, must not preempt back.
    for now in [36_001, 36_100, 37_000] {
        let plan = c.plan(t(now));
        assert!(plan.preemptions.is_empty(), "ping-pong at t={now}: {plan:#?}");
    }
}

#[test]
fn srtf_preempts_the_job_with_most_time_left() {
    let mut c = Cluster::new("srtf").node("n", 2, "H100-80GB");
    let long = c.run(job("x").gpus(1).preemptible().estimate(10_000), t(0));
    let short = c.run(job("x").gpus(1).preemptible().estimate(200), t(0));
    let newcomer = c.submit(job("y").gpus(1).preemptible().estimate(100).at(50));
    let plan = c.plan(t(50));
    assert_eq!(plan.preemptions.iter().map(|p| p.victim).collect::<Vec<_>>(), vec![long]);
    assert_eq!(plan.preemptions[0].why, PreemptWhy::LongerRemaining);
    let _ = (short, newcomer);
}

#[test]
fn dependencies_gate_starts() {
    let mut c = Cluster::new("fifo-backfill").node("n", 8, "H100-80GB");
    let pre = c.run(job("u").cpus(1), t(0));
    let train = c.submit(job("u").gpus(1).after(pre).at(1));
    let plan = c.plan(t(2));
    assert_eq!(c.reason(&plan, train), format!("waiting for job {pre} to finish"));
    c.finish(pre, t(3));
    assert_eq!(started(&c.plan(t(3))), vec![train.0]);

    let bad = c.run(job("u").cpus(1), t(4));
    let eval = c.submit(job("u").gpus(1).after(bad).at(5));
    c.snap.stop(bad, t(6), StopOutcome::Finished { success: false }).expect("stop");
    let plan = c.plan(t(7));
    assert!(matches!(plan.reasons()[&eval], PendingReason::DependencyFailed { .. }));
}

/// Slurm's dependency types: `afterany` runs after any end, `afternotok` only after a failure.
#[test]
fn after_any_and_after_not_ok_follow_how_the_job_ended() {
    for (ok, any_starts, not_ok_starts) in [(true, true, false), (false, true, true)] {
        let mut c = Cluster::new("fifo").node("n", 8, "H100-80GB");
        let first = c.run(job("u").cpus(1), t(0));
        let any = c.submit(job("u").gpus(1).after_any(first).at(1));
        let cleanup = c.submit(job("u").gpus(1).after_not_ok(first).at(1));
        let plan = c.plan(t(2));
        assert_eq!(c.reason(&plan, any), format!("waiting for job {first} to finish"));
        assert_eq!(c.reason(&plan, cleanup), format!("waiting for job {first} to finish"));
        c.snap.stop(first, t(3), StopOutcome::Finished { success: ok }).expect("stop");
        let plan = c.plan(t(4));
        let starts = started(&plan);
        assert_eq!(starts.contains(&any.0), any_starts, "afterany, first ok={ok}");
        assert_eq!(starts.contains(&cleanup.0), not_ok_starts, "afternotok, first ok={ok}");
        if ok {
            assert!(matches!(plan.reasons()[&cleanup], PendingReason::DependencyFailed { succeeded: true, .. }));
            assert!(c.reason(&plan, cleanup).contains("runs only if it fails"));
        }
    }
}

#[test]
fn equal_snapshots_give_equal_plans() {
    let mut c = Cluster::new("default")
        .node("a", 8, "H100-80GB")
        .node("b", 8, "A100-80GB")
        .mig_node("m", &["3g.40gb", "1g.10gb"]);
    for i in 0..40 {
        let j = match i % 4 {
            0 => job("a").gpus(1 + i % 3),
            1 => job("b").gpus(8).replicas(2),
            2 => job("c").mig("1g.10gb"),
            _ => job("d").gpu_memory_gb(30).preemptible(),
        };
        c.submit(j.at(i64::from(i)));
    }
    let copy = c.snap.clone();
    assert_eq!(gpool_core::schedule(&c.snap, t(100)), gpool_core::schedule(&copy, t(100)));
}

#[test]
fn a_nomination_holds_the_freed_devices_until_the_preemptor_starts() {
    // A (higher class) runs in a queue with no guarantee; B's queue is guaranteed the node.
    // B reclaims A's GPU; once A has stopped, A outranks B but must not take it back.
    let mut c = Cluster::new("default").islands("n", 2, 1, "H100-80GB").queue("guaranteed", None, 2, None);
    let a = c.submit(job("u").queue("scratch").priority(5).gpus(1));
    let b = c.submit(job("u").queue("guaranteed").gpus(2));
    let plan = c.plan(t(0));
    assert_eq!(started(&plan), vec![a.0], "B is blocked while A starts in the same pass");
    c.apply(&plan);
    let plan = c.plan(t(1));
    assert_eq!(plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect::<Vec<_>>(), vec![(a, b)]);
    c.apply(&plan);
    let plan = c.plan(t(1));
    assert_eq!(started(&plan), vec![b.0], "B starts; A waits: {plan:#?}");
    c.apply(&plan);
    for now in 2..6 {
        assert!(c.plan(t(now)).preemptions.is_empty(), "no loop at t={now}");
    }
}

#[test]
fn priority_does_not_override_another_queues_guarantee() {
    let mut c = Cluster::new("default").node("n", 4, "H100-80GB").queue("team-a", None, 4, None);
    c.run(job("a").queue("team-a").gpus(4).preemptible(), t(0));
    let urgent = c.submit(job("b").queue("team-b").gpus(4).priority(10).at(1));
    let plan = c.plan(t(1000));
    assert!(plan.preemptions.is_empty(), "team-a is within its guarantee: {plan:#?}");
    assert_eq!(c.reason(&plan, urgent), "needs 4×GPU on one node, best node has 0 free");
    // Within one queue, priority preempts as usual, and without waiting for min_runtime.
    let mut c = Cluster::new("default").node("n", 4, "H100-80GB").queue("team-a", None, 4, None);
    c.run(job("a").queue("team-a").gpus(4).preemptible(), t(0));
    c.submit(job("a").queue("team-a").gpus(4).priority(10).at(1));
    assert_eq!(c.plan(t(10)).preemptions.len(), 1);
}

#[test]
fn the_starvation_guard_promotes_a_long_waiting_preempted_job_and_protects_its_run() {
    use gpool_core::{Policy, StarvationGuard};
    use std::time::Duration;
    const H: i64 = 3600;
    struct Case {
        name: &'static str,
        guard: Option<StarvationGuard>,
        /// How long the victim ran before it was preempted, hours.
        ran_h: i64,
        /// Whether it starts ahead of a fresh job at 61 h.
        want_promoted: bool,
    }
    let guard = |max_h: u64| {
        Some(StarvationGuard { after: Duration::from_secs(60 * 3600), max_runtime: Duration::from_secs(max_h * 3600) })
    };
    let cases = [
        Case { name: "guard off: level 2 waits behind fresh work", guard: None, ran_h: 2, want_promoted: false },
        Case { name: "guard on: promoted after 60 h", guard: guard(72), ran_h: 2, want_promoted: true },
        Case { name: "ran past max_runtime: stays last", guard: guard(1), ran_h: 2, want_promoted: false },
    ];
    for case in cases {
        // Without the overload gate, so that the guard alone protects the promoted run.
        let base = Policy::gpool_default();
        let preemption = gpool_core::Preemption { overload: None, ..base.preemption.clone() };
        let policy = Policy { starvation_guard: case.guard, preemption, ..base };
        let mut c = Cluster::with_policy(policy).node("n", 8, "H100-80GB");
        // The victim: 8 GPUs for `ran_h` hours (≥ 10 GPU-hours: level 2), then preempted.
        let old = c.run(job("x").gpus(8).preemptible().at(0), t(0));
        c.snap.stop(old, t(case.ran_h * H), StopOutcome::Requeue { not_before: gpool_core::Time::MIN }).expect("stop");
        // Fresh work holds the node until 61 h; then one node's worth frees and a fresh job waits too.
        let holder = c.run(job("y").gpus(8).preemptible().at(case.ran_h * H), t(case.ran_h * H));
        c.finish(holder, t(61 * H));
        // The same user, so that fair share does not decide between them.
        let fresh = c.submit(job("x").gpus(8).preemptible().at(61 * H));
        let plan = c.plan(t(61 * H));
        let want = if case.want_promoted { old } else { fresh };
        assert_eq!(started(&plan), vec![want.0], "{}: {plan:#?}", case.name);
        c.apply(&plan);
        if !case.want_promoted {
            continue;
        }
        // The promoted run is not preempted by the fresh job it overtook, nor by newer ones.
        let newer = c.submit(job("w").gpus(8).preemptible().at(62 * H));
        for now in [61 * H + 600, 62 * H, 70 * H] {
            let plan = c.plan(t(now));
            assert!(plan.preemptions.is_empty(), "{}: promoted run preempted at t={now}: {plan:#?}", case.name);
        }
        let _ = newer;
    }
}

/// Issue 15: jobs waiting on a dependency are not pending demand. A
/// pipeline's later stages, queued behind its running first stage, do not
/// make the cluster "overloaded" (which would let within-class preemption
/// act); once the stage they wait for ends, they count.
#[test]
fn jobs_waiting_on_dependencies_are_not_pending_demand() {
    const H: i64 = 3600;
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let first = c.run(job("prepare").gpus(8).preemptible().at(0), t(0));
    let mut stages = Vec::new();
    for name in ["train", "eval", "export"] {
        stages.push(c.submit(job(name).gpus(8).preemptible().after(first).at(H)));
    }
    let plan = c.plan(t(H));
    assert_eq!(plan.overloaded_since, None, "24 GPUs wait on job {first:?}, none of them demand yet: {plan:#?}");
    c.apply(&plan);
    // An independent job is demand as before.
    let other = c.submit(job("other").gpus(8).preemptible().at(2 * H));
    let plan = c.plan(t(2 * H));
    assert_eq!(plan.overloaded_since, Some(t(2 * H)), "{plan:#?}");
    c.apply(&plan);
    let _ = (stages, other);
}

#[test]
fn within_class_preemption_waits_for_a_sustained_overload() {
    const H: i64 = 3600;
    struct Case {
        name: &'static str,
        /// When the fresh job arrives and when the pass runs, hours.
        arrives_h: i64,
        pass_h: i64,
        want_preempted: bool,
        want_wake_h: Option<i64>,
    }
    let cases = [
        Case {
            name: "the burst began 5 h ago: wait, and come back when it has lasted 6 h",
            arrives_h: 20,
            pass_h: 25,
            want_preempted: false,
            want_wake_h: Some(26),
        },
        Case {
            name: "the overload has lasted 6 h: the most-served job gives way",
            arrives_h: 20,
            pass_h: 26,
            want_preempted: true,
            want_wake_h: None,
        },
    ];
    for case in cases {
        let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
        // 8 GPUs for 20 h: 160 GPU-hours, level 3.
        let old = c.run(job("x").gpus(8).preemptible().at(0), t(0));
        let fresh = c.submit(job("y").gpus(8).preemptible().at(case.arrives_h * H));
        // Passes as the shell runs them: one at the arrival, carried over, then the one under test.
        let first = c.plan(t(case.arrives_h * H));
        assert!(first.preemptions.is_empty(), "{}: {first:#?}", case.name);
        assert_eq!(first.overloaded_since, Some(t(case.arrives_h * H)), "{}", case.name);
        c.apply(&first);
        let plan = c.plan(t(case.pass_h * H));
        let victims: Vec<_> = plan.preemptions.iter().map(|p| (p.victim, p.for_job)).collect();
        let want = if case.want_preempted { vec![(old, fresh)] } else { vec![] };
        assert_eq!(victims, want, "{}: {plan:#?}", case.name);
        assert_eq!(plan.wake_at.filter(|_| !case.want_preempted), case.want_wake_h.map(|h| t(h * H)), "{}", case.name);
    }

    // A cluster the demand no longer overloads forgets the overload: the next one waits its 6 h again.
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let a = c.run(job("x").gpus(8).preemptible().at(0), t(0));
    let b = c.submit(job("y").gpus(8).preemptible().at(20 * H));
    let plan = c.plan(t(20 * H));
    c.apply(&plan);
    c.finish(a, t(22 * H));
    let plan = c.plan(t(22 * H));
    assert_eq!(started(&plan), vec![b.0]);
    assert_eq!(plan.overloaded_since, None, "demand 0 of 8 GPUs: {plan:#?}");
    c.apply(&plan);
    let d = c.submit(job("z").gpus(8).preemptible().at(23 * H));
    let plan = c.plan(t(23 * H));
    assert_eq!(plan.overloaded_since, Some(t(23 * H)));
    c.apply(&plan);
    let _ = d;
}
