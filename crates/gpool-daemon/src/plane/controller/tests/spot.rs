//! Spot notices (`spot.rs`): who may give one, and what a notice does to
//! the node and the jobs on it.

use super::super::acts::Act;
use super::super::spot;
use crate::plane::auth::{Caller, Role};

use super::super::docs::Stop;
use super::*;

fn caller(user: &str, role: Role) -> Caller {
    Caller { user: user.into(), team: "t".into(), role }
}

fn notice(h: &mut Harness, who: &Caller, node: &str) -> Result<Vec<Act>, ApiError> {
    let c = &mut h.ctl;
    spot::notice(who, node, 120_000, "test", &c.snap, &mut c.links, &mut c.out, T0).map(|a| a.0)
}

#[test]
fn only_admins_and_the_node_itself_give_a_notice() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let refused = [
        (caller("ana", Role::User), "n1", 403),
        (caller("reader", Role::Reader), "n1", 403),
        (caller("n2", Role::Node), "n1", 403),
        (caller("root", Role::Admin), "nowhere", 404),
    ];
    for (who, node, status) in refused {
        let err = notice(&mut h, &who, node).expect_err("refused");
        assert_eq!(err.status, status, "{who:?} on {node}: {}", err.message);
    }
    assert!(!h.ctl.links.values().any(|l| l.doc.draining), "a refused notice changes nothing");
    assert!(notice(&mut h, &caller("n1", Role::Node), "n1").is_ok(), "the node itself");
}

#[test]
fn a_notice_drains_the_node_and_stops_its_jobs_with_the_time_left() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let a = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let b = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let acts = notice(&mut h, &caller("root", Role::Admin), "n1").expect("a notice");
    assert!(h.ctl.links.values().all(|l| l.doc.draining), "nothing new starts there");
    let stops: Vec<(u64, i64)> = acts
        .iter()
        .filter_map(|x| match x {
            Act::Stop { job, why: Stop::Reclaim { node, at_ms } } if node == "n1" => Some((*job, *at_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(stops, [(a, T0 + 120_000), (b, T0 + 120_000)]);
    assert!(matches!(acts.first(), Some(Act::NodeState(_))), "{acts:?}");
    assert!(acts.iter().any(|x| matches!(x, Act::Event { kind: "audit", .. })), "{acts:?}");
    // Through the controller: the jobs are stopping, their reason names the notice.
    h.call(ADMIN, |reply| Call::Notice { node: "n1".into(), within_ms: 120_000, from: "t".into(), reply })
        .expect("the call");
    assert_eq!(h.state(a), api::JobState::Stopping);
    assert!(h.job(a).reason.is_some_and(|r| r.contains("taken back")));
}
