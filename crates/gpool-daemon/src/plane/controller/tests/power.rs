//! Power budgets (issue 24) through the controller: a node's draw learned
//! from its telemetry, jobs started within its budget and the rest held
//! back naming it, `gpool power` counting it, and a budget lowered live
//! stopping the latest of the lowest-priority work.

use gpool_core::power::{PowerBudget, PowerScope};
use gpool_gpu::GpuSample;

use super::*;

fn report(n: u32, draw: f64) -> Event {
    report_at(n, draw, T0)
}

fn report_at(n: u32, draw: f64, at_ms: i64) -> Event {
    let gpus = (0..n)
        .map(|i| GpuSample {
            index: i,
            uuid: format!("GPU-{i}"),
            power_draw_w: Some(draw),
            power_limit_w: Some(700.0),
            ..GpuSample::default()
        })
        .collect();
    Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        at_ms,
        gpus,
        ..Default::default()
    }))
}

#[test]
fn jobs_start_within_a_nodes_budget_and_a_lowered_budget_stops_the_latest() {
    let budget = PowerBudget { scope: PowerScope::Node("n1".into()), watts: 3000 };
    let mut h = Setup::new().policy("fifo").local_gpus(8).power_budgets(vec![budget]).build();
    h.step(vec![report(8, 70.0)]);
    let ids: Vec<u64> = (0..8).map(|_| h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n")).collect();
    let started: Vec<u64> = h.starts().iter().map(|(k, _)| k.job).collect();
    assert_eq!(started, ids[..3], "560 W idle + 3 × 630 W = 2,450 W of 3,000 W");
    assert_eq!(h.job(ids[3]).reason.as_deref(), Some("power budget of node n1: 2450 W of 3000 W in use"));
    let views = h.call(ADMIN, |reply| Call::Power { reply }).expect("power");
    assert_eq!((views[0].watts, views[0].counted_watts, views[0].held_back), (3000, 2450, 5));
    assert_eq!(views[0].measured_watts, Some(560), "the last readings: 8 GPUs at 70 W");
    // A cooling unit fails: 1,900 W leaves room for two.
    let req = api::PowerSet { scope: "node".into(), target: "n1".into(), watts: 1900 };
    h.call(ADMIN, |reply| Call::SetPower { req, from: "test".into(), reply }).expect("set");
    let stopping: Vec<u64> = ids[..3].iter().copied().filter(|id| h.state(*id) == api::JobState::Stopping).collect();
    assert_eq!(stopping, [ids[2]], "the latest started of the same priority");
    assert_eq!(h.event_messages("power_stop").len(), 1);
    h.exit(key(ids[2], 1, 0), None, Some(15));
    assert_eq!(h.state(ids[2]), api::JobState::Pending, "requeued");
    assert!(h.starts().is_empty(), "nothing more starts under 1,900 W");
}

#[test]
fn only_admins_set_budgets_and_a_bad_one_says_why() {
    let mut h = Setup::new().build();
    let token = h.call(ADMIN, |reply| Call::CreateToken {
        req: api::TokenRequest { user: "ana".into(), team: None, role: None, ttl: None },
        from: "test".into(),
        reply,
    });
    let secret = token.expect("token").token;
    let req = api::PowerSet { scope: "node".into(), target: "n1".into(), watts: 1000 };
    let err = h.call(secret.as_str(), |reply| Call::SetPower { req, from: "test".into(), reply }).expect_err("user");
    assert_eq!(err.status, 403);
    let cases = [
        ("label", "rack", 400, "KEY=VALUE"),
        ("node", "nowhere", 404, "not found"),
        ("room", "x", 400, "node, label or pool"),
    ];
    for (scope, target, status, says) in cases {
        let req = api::PowerSet { scope: scope.into(), target: target.into(), watts: 1000 };
        let err = h.call(ADMIN, |reply| Call::SetPower { req, from: "test".into(), reply }).expect_err(says);
        assert_eq!(err.status, status, "{err:?}");
        assert!(err.message.contains(says), "{err:?}");
    }
}

#[test]
fn a_draw_over_a_budget_for_longer_than_the_rule_allows_raises_an_alert() {
    let budget = PowerBudget { scope: PowerScope::Node("n1".into()), watts: 3000 };
    let mut h = Setup::new().policy("fifo").local_gpus(8).power_budgets(vec![budget]).build();
    // Work the scheduler did not start (a process outside gpool, a budget
    // lowered under what the hardware idles at): measured over the budget.
    h.step(vec![report_at(8, 450.0, T0)]);
    h.step(vec![report_at(8, 450.0, T0 + 60_000)]);
    let firing = |h: &mut Harness| {
        let alerts = h.call(ADMIN, |reply| Call::Alerts { reply }).expect("alerts");
        alerts.into_iter().filter(|a| a.rule == "PowerBudgetExceeded").collect::<Vec<_>>()
    };
    assert!(firing(&mut h).is_empty(), "not yet: the rule holds for 2 minutes");
    h.step(vec![report_at(8, 450.0, T0 + 120_000)]);
    let now = firing(&mut h);
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(now[0].summary.contains("3600 W measured against a budget of 3000 W"), "{now:?}");
    // Back under: it resolves.
    h.step(vec![report_at(8, 300.0, T0 + 130_000)]);
    assert!(firing(&mut h).is_empty());
    let resolved = h.event_messages("alert_resolved");
    assert!(resolved.iter().any(|m| m.contains("PowerBudgetExceeded")), "{resolved:?}");
}

#[test]
fn an_agent_declares_its_nodes_budget_when_it_registers_and_a_live_one_still_wins() {
    let mut h = Setup::new().policy("fifo").no_local_node().build();
    let reg = api::agent::Register { power_budget_w: Some(2500), ..registration("gpu7", 4, Vec::new()) };
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered");
    let views = h.call(ADMIN, |reply| Call::Power { reply }).expect("power");
    assert_eq!(views.iter().map(|v| (v.scope.as_str(), v.watts)).collect::<Vec<_>>(), [("node gpu7", 2500)]);
    let req = api::PowerSet { scope: "node".into(), target: "gpu7".into(), watts: 1800 };
    h.call(ADMIN, |reply| Call::SetPower { req, from: "test".into(), reply }).expect("set");
    // The agent registers again with its flag: the live budget stays.
    let reg = api::agent::Register { power_budget_w: Some(2500), ..registration("gpu7", 4, Vec::new()) };
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered again");
    let views = h.call(ADMIN, |reply| Call::Power { reply }).expect("power");
    assert_eq!(views.iter().map(|v| v.watts).collect::<Vec<_>>(), [1800]);
}

#[test]
fn a_job_is_counted_at_the_draw_jobs_like_it_had_once_they_ran() {
    let budget = PowerBudget { scope: PowerScope::Node("n1".into()), watts: 2500 };
    let mut h = Setup::new().policy("fifo").local_gpus(8).power_budgets(vec![budget]).build();
    h.step(vec![report(8, 70.0)]);
    let spec = "name: train\ncommand: [x]\nresources: {nvidia.com/gpu: 1}\n";
    let first = h.submit(spec);
    assert_eq!(h.starts().len(), 1);
    // It draws 300 W on its GPU for ten seconds, and succeeds.
    for s in 1..=10 {
        h.step(vec![report_at(8, 300.0, T0 + s * 1000)]);
    }
    h.exit(key(first, 1, 0), Some(0), None);
    assert_eq!(h.state(first), api::JobState::Succeeded);
    // Seven more of it: 8 × 70 W idle + 7 × 230 W = 2,170 W of 2,500 (at the
    // power limit, 630 W each, three would fit).
    let ids: Vec<u64> = (0..7).map(|_| h.submit(spec)).collect();
    assert_eq!(h.starts().len(), 7, "{:?}", h.job(ids[6]).reason);
    // Another name has no history: counted at the power limit, it waits.
    let other = h.submit("name: other\ncommand: [x]\nresources: {nvidia.com/gpu: 1}\n");
    assert!(h.job(other).reason.is_some_and(|r| r.starts_with("power budget of node n1")));
}
