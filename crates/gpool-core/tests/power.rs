//! Issue 24: power budgets in the core. A pass never starts a job that
//! would take a budget over (node, label, pool), in priority order; the
//! jobs it holds back say which budget; and no plan ever exceeds a budget
//! (property-tested over random nodes, budgets and jobs).

mod common;

use std::sync::Arc;

use common::*;
use gpool_core::power::{PowerBudget, PowerScope, budget_use};
use gpool_core::{JobId, PendingReason, StopOutcome};
use proptest::prelude::*;

fn node_budget(name: &str, watts: u32) -> PowerBudget {
    PowerBudget { scope: PowerScope::Node(Arc::from(name)), watts }
}

#[test]
fn a_3000_w_node_of_700_w_gpus_runs_three_full_jobs_and_says_why_the_rest_wait() {
    let mut c = Cluster::new("fifo").powered("n", 8, 70, 700);
    c.snap.set_power_budgets(vec![node_budget("n", 3000)]);
    let ids: Vec<JobId> = (0..8).map(|_| c.submit(job("u").gpus(1))).collect();
    let plan = c.plan(t(0));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), ids[..3], "8 × 70 W idle + 3 × 630 W = 2,450 W");
    assert_eq!(c.reason(&plan, ids[3]), "power budget of node n: 2450 W of 3000 W in use");
    c.apply(&plan);
    assert_eq!(budget_use(&c.snap)[0].1, 2450);
    // Jobs known to draw less (learned from their history): more of them fit.
    let mut c = Cluster::new("fifo").powered("n", 8, 70, 700);
    c.snap.set_power_budgets(vec![node_budget("n", 3000)]);
    for _ in 0..8 {
        c.submit(job("u").gpus(1).watts(300));
    }
    assert_eq!(c.plan(t(0)).starts.len(), 8, "560 W + 8 × 230 W = 2,400 W");
}

#[test]
fn a_rack_budget_covers_its_nodes_together_and_higher_priority_goes_first() {
    let mut c = Cluster::new("default")
        .powered("a", 4, 100, 500)
        .powered("b", 4, 100, 500)
        .labels("a", &[("rack", "r12")])
        .labels("b", &[("rack", "r12")]);
    c.snap.set_power_budgets(vec![PowerBudget { scope: PowerScope::Label("rack".into(), "r12".into()), watts: 2400 }]);
    // Idle: 800 W. Each GPU at work: +400 W. Four GPUs' worth fit.
    let low = c.submit(job("u").gpus(2).priority(0));
    let high = c.submit(job("v").gpus(4).priority(10));
    let plan = c.plan(t(0));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [high]);
    assert_eq!(c.reason(&plan, low), "power budget of rack=r12: 2400 W of 2400 W in use");
}

#[test]
fn a_budget_lowered_below_what_runs_starts_nothing_more_and_a_raised_one_lets_work_in() {
    let mut c = Cluster::new("fifo").powered("n", 4, 50, 400);
    c.run(job("u").gpus(2), t(0));
    c.snap.set_power_budgets(vec![node_budget("n", 500)]);
    let waiting = c.submit(job("u").gpus(1));
    let plan = c.plan(t(1));
    assert!(plan.starts.is_empty());
    assert_eq!(c.reason(&plan, waiting), "power budget of node n: 900 W of 500 W in use");
    c.snap.set_power_budgets(vec![node_budget("n", 1250)]);
    assert_eq!(c.plan(t(2)).starts.iter().map(|s| s.job).collect::<Vec<_>>(), [waiting]);
}

proptest! {
    /// Random powered nodes in two racks and a pool, random budgets, random
    /// jobs (some with learned draws), passes applied with jobs ending: after
    /// every pass, every budget holds, or was already over and got no new start.
    #[test]
    fn no_plan_ever_takes_a_budget_over(
        nodes in proptest::collection::vec((1u32..9, 30u32..120, 200u32..800), 1..5),
        budgets in proptest::collection::vec((0usize..3, 500u32..6000), 1..4),
        jobs in proptest::collection::vec((1u32..5, 1u32..3, prop::option::of(100u32..900), 0i32..3), 1..30),
        ends in proptest::collection::vec(any::<bool>(), 30),
    ) {
        let mut c = Cluster::new("default");
        for (i, (gpus, idle, max)) in nodes.iter().enumerate() {
            c = c.powered(&format!("n{i}"), *gpus, *idle, (*max).max(*idle));
            let rack = if i % 2 == 0 { "r1" } else { "r2" };
            c = c.labels(&format!("n{i}"), &[("rack", rack)]);
        }
        let scopes = [
            PowerScope::Label("rack".into(), "r1".into()),
            PowerScope::Label("rack".into(), "r2".into()),
            PowerScope::Node("n0".into()),
        ];
        let budgets: Vec<PowerBudget> = budgets.iter().map(|(s, w)| PowerBudget { scope: scopes[*s].clone(), watts: *w }).collect();
        c.snap.set_power_budgets(budgets);
        for (gpus, replicas, watts, prio) in &jobs {
            let mut j = job("u").gpus(*gpus).replicas(*replicas).priority(*prio);
            if let Some(w) = watts {
                j = j.watts(*w);
            }
            c.submit(j);
        }
        let mut end = ends.iter().cycle();
        for step in 0..6 {
            let before = budget_use(&c.snap);
            let plan = c.plan(t(step));
            c.apply(&plan);
            let after = budget_use(&c.snap);
            for ((b, used_before), (_, used)) in before.iter().zip(&after) {
                let over_before = *used_before > u64::from(b.watts);
                prop_assert!(
                    *used <= u64::from(b.watts) || (over_before && *used <= *used_before),
                    "{} used {used} W of {} W (before the pass: {used_before} W)", b.scope, b.watts
                );
            }
            let running: Vec<JobId> = c.snap.running_jobs().map(|j| j.id).collect();
            for id in running {
                if *end.next().unwrap_or(&false) {
                    c.snap.stop(id, t(step), StopOutcome::Finished { success: true }).expect("stop");
                }
            }
        }
    }
}

#[test]
fn a_power_reason_is_a_reason() {
    let r = PendingReason::Power { budget: "pool spot".into(), used_watts: 10, watts: 5 };
    assert_eq!(r.to_string(), "power budget of pool spot: 10 W of 5 W in use");
}

#[test]
fn a_budget_lowered_live_stops_the_lowest_priority_preemptible_work_first_and_no_more() {
    let mut c = Cluster::new("fifo").powered("n", 8, 70, 700);
    // Eight full jobs: 560 W idle + 8 × 630 W = 5,600 W.
    let important = c.run(job("u").gpus(1).priority(10), t(0));
    let normal = c.run(job("u").gpus(1).priority(5), t(1));
    let cheap: Vec<JobId> = (2..8).map(|i| c.run(job("u").gpus(1).priority(5).preemptible(), t(i))).collect();
    // A cooling unit fails: 1,900 W. 560 + 2 × 630 = 1,820 W: two jobs may stay.
    c.snap.set_power_budgets(vec![node_budget("n", 1900)]);
    let plan = c.plan(t(100));
    let mut stops = plan.power_stops.clone();
    stops.sort();
    let mut want: Vec<JobId> = cheap.clone();
    want.sort();
    assert_eq!(stops, want, "the six preemptible jobs go; {important:?} and {normal:?} stay");
    assert!(plan.starts.is_empty());
    // While they stop, they are not chosen again, and nothing more is.
    for id in &cheap {
        c.snap.request_stop(*id, gpool_core::job::StopCause::Cancelled).expect("stopping");
    }
    assert!(c.plan(t(101)).power_stops.is_empty());
    // Lower still: the lower priority of the two goes next.
    c.snap.set_power_budgets(vec![node_budget("n", 1300)]);
    assert_eq!(c.plan(t(102)).power_stops, [normal]);
}

#[test]
fn a_job_no_budget_could_ever_hold_is_refused_saying_which_budget() {
    let mut c = Cluster::new("fifo").powered("n", 8, 70, 700);
    c.snap.set_power_budgets(vec![node_budget("n", 3000)]);
    // 560 W idle: four GPUs at the limit add 2,520 W.
    let e = c.snap.check_feasible(&job("u").gpus(4).spec).expect_err("too much for 3 kW");
    assert_eq!(
        e.to_string(),
        "no power budget could ever hold it: the power budget of node n is 3000 W, 560 W of it counted with every \
         other GPU idle, and a replica adds 2520 W at the GPUs' power limit; ask for fewer GPUs, or for an admin \
         to raise the budget (gpool power set)"
    );
    assert!(c.snap.check_feasible(&job("u").gpus(3).spec).is_ok(), "560 + 1,890 W fit");
    assert!(c.snap.check_feasible(&job("u").gpus(4).watts(300).spec).is_ok(), "learned 300 W per GPU: 920 W");
    // A gang is counted whole: two replicas of two GPUs each, 2 × 1,260 W.
    assert!(c.snap.check_feasible(&job("u").gpus(2).replicas(2).spec).is_err());
    // Without a budget anything that fits the GPUs goes.
    c.snap.set_power_budgets(Vec::new());
    assert!(c.snap.check_feasible(&job("u").gpus(8).spec).is_ok());
}
