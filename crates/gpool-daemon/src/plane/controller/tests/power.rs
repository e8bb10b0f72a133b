//! Power budgets (issue 24) through the controller: a node's draw learned
//! from its telemetry, jobs started within its budget and the rest held
//! back naming it, `gpool power` counting it, and a budget lowered live
//! stopping the latest of the lowest-priority work.

use gpool_core::power::{PowerBudget, PowerScope};
use gpool_gpu::GpuSample;

use super::*;

fn report(n: u32, draw: f64) -> Event {
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
        at_ms: T0,
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
