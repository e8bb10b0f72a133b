//! Issue 47: a node speaks only for itself, and nothing one node says can
//! stop the control plane. A registration is checked whole before anything
//! is stored; a stored record that does not load is set aside while the
//! rest is served; a report or a shipped log about a replica another node
//! runs is refused.

use api::agent as wire;

use proptest::strategy::Strategy as _;

use super::restore::StateFile;
use super::*;

fn node_token(h: &mut Harness, user: &str) -> String {
    let req = api::TokenRequest { user: user.into(), team: None, role: Some("node".into()), ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("created").token
}

fn node_names(h: &mut Harness) -> Vec<(String, usize)> {
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    nodes.into_iter().map(|n| (n.name, n.devices.len())).collect()
}

#[test]
fn a_registration_the_control_plane_could_not_load_is_refused_naming_the_field_and_never_stored() {
    let state = StateFile::new("node-trust-register");
    let clock = ManualClock::new(T0);
    {
        let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
        let n3 = node_token(&mut h, "n3");
        let reg = registration("n3", 1, Vec::new());
        h.call(&n3, |reply| Call::Register { reg, reply }).expect("one GPU registers");
        let cases: Vec<(wire::Register, &str)> = vec![
            (registration("n3", 65, Vec::new()), "65 devices"),
            (
                {
                    let mut r = registration("n3", 2, Vec::new());
                    r.gpus[1].uuid = r.gpus[0].uuid.clone();
                    r
                },
                "appears twice",
            ),
            (
                {
                    let mut r = registration("n3", 2, Vec::new());
                    r.gpus[1].index = r.gpus[0].index;
                    r
                },
                "appears twice",
            ),
            (
                {
                    let mut r = registration("n3", 1, Vec::new());
                    r.addr = "evil\u{1b}[2J".into();
                    r
                },
                "addr",
            ),
            (
                {
                    let mut r = registration("n3", 1, Vec::new());
                    r.gpus[0].memory_mb = u64::MAX;
                    r
                },
                "gpus[0].memoryMb",
            ),
        ];
        for (reg, why) in cases {
            let e = h.call(&n3, |reply| Call::Register { reg, reply }).expect_err(why);
            assert_eq!(e.status, 400, "{}", e.message);
            assert!(e.message.contains(why), "{why}: {}", e.message);
        }
        assert_eq!(node_names(&mut h), [("n3".to_string(), 1)], "the first registration stands");
    }
    clock.advance(Duration::from_secs(30));
    let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
    assert_eq!(node_names(&mut h), [("n3".to_string(), 1)], "a restart loads and serves");
}

#[test]
fn a_stored_node_record_that_does_not_load_is_set_aside_and_the_rest_served() {
    let state = StateFile::new("node-trust-restore");
    let clock = ManualClock::new(T0);
    {
        let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
        let reg = registration("good", 2, Vec::new());
        h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered");
    }
    // A record written by an older control plane that checked less.
    let mut bad = crate::plane::controller::node_doc::NodeDoc::from_info(node_info("bad", 65));
    bad.epoch = 1;
    let mut store = state.open();
    store.commit(&[crate::plane::controller::node_doc::node_row(&bad, T0)]).expect("stored");
    drop(store);
    let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
    assert_eq!(node_names(&mut h), [("good".to_string(), 2)]);
    let said = h.event_messages("node");
    assert!(said.iter().any(|m| m.contains("node bad") && m.contains("set aside")), "{said:?}");
    // Its agent, registering again with what it really has, is taken.
    let reg = registration("bad", 1, Vec::new());
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registers again");
    assert!(node_names(&mut h).contains(&("bad".to_string(), 1)));
}

#[test]
fn a_node_cannot_end_fail_or_write_the_log_of_another_nodes_replica() {
    let mut h = Setup::new().no_local_node().build();
    let (t1, t3) = (node_token(&mut h, "n1"), node_token(&mut h, "n3"));
    let reg = registration("n1", 1, Vec::new());
    let e1 = h.call(&t1, |reply| Call::Register { reg, reply }).expect("n1").epoch;
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let reg = registration("n3", 1, Vec::new());
    let e3 = h.call(&t3, |reply| Call::Register { reg, reply }).expect("n3").epoch;
    assert_eq!(h.state(id), api::JobState::Running);
    let replica = wire::ReplicaId { job: id, attempt: 1, rank: 0 };
    let exit = wire::ExitWire { code: Some(0), signal: None, started_ms: T0, ended_ms: T0, error: None, fenced: false };
    let forged = [
        wire::Event::Exited { replica, exit: exit.clone() },
        wire::Event::StartFailed { replica, error: "forged".into() },
        wire::Event::Lost { replica, why: "forged".into() },
    ];
    for event in forged {
        let report =
            wire::Report { node: "n3".into(), epoch: e3, events: vec![event], telemetry: None, roster_version: 0 };
        let e = h.call(&t3, |reply| Call::Report { report, reply }).expect_err("n3 speaks for n1");
        assert_eq!(e.status, 403, "{}", e.message);
        assert!(e.message.contains("runs on node n1"), "{}", e.message);
        assert_eq!(h.state(id), api::JobState::Running, "the job stays running");
    }
    // Logs: n3 writes none of n1's replica, nor one for a job that does not exist.
    let e = h.call(&t3, |reply| Call::ShipLog { node: None, job: id, rank: 0, reply }).expect_err("not n3's");
    assert_eq!(e.status, 403);
    let e = h.call(&t3, |reply| Call::ShipLog { node: None, job: 999, rank: 0, reply }).expect_err("no job");
    assert_eq!(e.status, 403);
    let e = h
        .call(&t3, |reply| Call::ShipLog { node: Some("n1".into()), job: id, rank: 0, reply })
        .expect_err("nor by naming n1");
    assert_eq!(e.status, 403);
    h.call(&t1, |reply| Call::ShipLog { node: None, job: id, rank: 0, reply }).expect("n1 ships its own");
    // The job ends on its own, by its own node's word.
    let report = wire::Report {
        node: "n1".into(),
        epoch: e1,
        events: vec![wire::Event::Exited { replica, exit }],
        telemetry: None,
        roster_version: 0,
    };
    h.call(&t1, |reply| Call::Report { report, reply }).expect("n1 reports its own");
    assert_eq!(h.state(id), api::JobState::Succeeded);
}

#[test]
fn revoking_a_node_token_ends_its_poll_at_once_and_requeues_its_jobs_when_its_lease_runs_out() {
    let mut h = Setup::new().no_local_node().build();
    let req = api::TokenRequest { user: "n3".into(), team: None, role: Some("node".into()), ttl: None };
    let created = h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("created");
    let reg = registration("n3", 1, Vec::new());
    let epoch = h.call(&created.token, |reply| Call::Register { reg, reply }).expect("n3").epoch;
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    // The start order is taken; the next poll waits.
    let (tx, mut first) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api {
        who: created.token.as_str().into(),
        call: Call::Poll { node: "n3".into(), epoch, after: 0, reply: tx },
    }]);
    assert!(first.try_recv().is_ok_and(|r| r.is_ok()), "the start order");
    let (tx, mut waiting) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api {
        who: created.token.as_str().into(),
        call: Call::Poll { node: "n3".into(), epoch, after: 1, reply: tx },
    }]);
    assert!(waiting.try_recv().is_err(), "parked");
    let revoke = created.id.clone();
    h.call(ADMIN, |reply| Call::RevokeToken { id: revoke, from: "test".into(), reply }).expect("revoked");
    let answer = waiting.try_recv().expect("the waiting poll is answered in the same turn");
    assert_eq!(answer.expect_err("cut off").status, 401);
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    assert_eq!(nodes[0].state, "down", "{:?}", nodes[0]);
    assert_eq!(h.state(id), api::JobState::Running, "not requeued while the node may still run it");
    h.advance(Duration::from_secs(10));
    assert_eq!(h.state(id), api::JobState::Pending, "requeued once the node's own lease has stopped it");
    let e = h
        .call(&created.token, |reply| Call::Poll { node: "n3".into(), epoch, after: 1, reply })
        .expect_err("the token is gone");
    assert_eq!(e.status, 401);
}

/// One agent call of the property below: a registration of `node` with
/// `gpus` GPUs, some of them reusing an index or a UUID, or with a name or
/// address holding a control character.
#[derive(Clone, Debug)]
struct RegCall {
    node: u8,
    gpus: u32,
    same_index: bool,
    same_uuid: bool,
    escape: bool,
}

fn attempt(h: &mut Harness, c: &RegCall) {
    let name = format!("n{}", c.node);
    let mut reg = registration(&name, c.gpus, Vec::new());
    if c.same_index && reg.gpus.len() > 1 {
        reg.gpus[1].index = reg.gpus[0].index;
    }
    if c.same_uuid && reg.gpus.len() > 1 {
        reg.gpus[1].uuid = reg.gpus[0].uuid.clone();
    }
    if c.escape {
        reg.addr.push('\u{1b}');
    }
    // Taken or refused: either way the next start must load.
    let _ = h.call(ADMIN, |reply| Call::Register { reg, reply });
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Whatever valid-looking registrations agents send, a restarted control
    /// plane loads its state and serves every node whose last accepted
    /// registration it holds.
    #[test]
    fn whatever_agents_register_a_restart_loads_and_serves(
        calls in proptest::collection::vec(
            (0u8..4, 0u32..70, proptest::bool::weighted(0.2), proptest::bool::weighted(0.2), proptest::bool::weighted(0.1))
                .prop_map(|(node, gpus, same_index, same_uuid, escape)| RegCall { node, gpus, same_index, same_uuid, escape }),
            1..12,
        )
    ) {
        static CASE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = StateFile::new(&format!("node-trust-prop-{case}"));
        let clock = ManualClock::new(T0);
        let before = {
            let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
            for c in &calls {
                attempt(&mut h, c);
            }
            node_names(&mut h)
        };
        clock.advance(Duration::from_secs(30));
        let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
        let mut after = node_names(&mut h);
        let mut before = before;
        before.sort();
        after.sort();
        proptest::prop_assert_eq!(before, after);
    }
}

#[test]
fn a_stored_job_record_that_does_not_load_is_set_aside_and_the_rest_served() {
    let state = StateFile::new("node-trust-job");
    let clock = ManualClock::new(T0);
    let good = {
        let mut h = Setup::new().store(state.open()).clock(clock.clone()).build();
        h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n")
    };
    let mut store = state.open();
    let bad = gpool_store::JobRow {
        id: 77,
        user: "eve".into(),
        team: "t".into(),
        queue: "default".into(),
        state: "pending".into(),
        submitted_ms: T0,
        ended_ms: None,
        doc: "{\"not\": \"a job\"}".into(),
    };
    store.commit(&[gpool_store::Write::PutJob(bad)]).expect("stored");
    drop(store);
    let mut h = Setup::new().store(state.open()).clock(clock.clone()).build();
    assert_eq!(h.state(good), api::JobState::Running, "the rest is served");
    let said = h.event_messages("job");
    assert!(said.iter().any(|m| m.contains("job 77") && m.contains("set aside")), "{said:?}");
}

#[test]
fn a_node_an_earlier_attempt_ran_on_may_still_ship_its_output() {
    let mut h = Setup::new().no_local_node().build();
    let (t1, t3, t4) = (node_token(&mut h, "n1"), node_token(&mut h, "n3"), node_token(&mut h, "n4"));
    let reg = registration("n1", 1, Vec::new());
    let e1 = h.call(&t1, |reply| Call::Register { reg, reply }).expect("n1").epoch;
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    for (t, n) in [(&t3, "n3"), (&t4, "n4")] {
        let reg = registration(n, 0, Vec::new());
        h.call(t, |reply| Call::Register { reg, reply }).expect("registered");
    }
    let reg = registration("n3", 1, Vec::new());
    h.call(&t3, |reply| Call::Register { reg, reply }).expect("n3 with its GPU");
    h.call(ADMIN, |reply| Call::Drain { node: "n1".into(), draining: true, from: "test".into(), reply })
        .expect("drained");
    let replica = wire::ReplicaId { job: id, attempt: 1, rank: 0 };
    let report = wire::Report {
        node: "n1".into(),
        epoch: e1,
        events: vec![wire::Event::Lost { replica, why: "gone".into() }],
        telemetry: None,
        roster_version: 0,
    };
    h.call(&t1, |reply| Call::Report { report, reply }).expect("n1 reports its own");
    let j = h.job(id);
    assert_eq!(j.attempt, 2, "{j:?}");
    h.call(&t3, |reply| Call::ShipLog { node: None, job: id, rank: 0, reply }).expect("n3 runs it now");
    h.call(&t1, |reply| Call::ShipLog { node: None, job: id, rank: 0, reply }).expect("n1 ran attempt 1");
    let e = h.call(&t4, |reply| Call::ShipLog { node: None, job: id, rank: 0, reply }).expect_err("n4 never ran it");
    assert_eq!(e.status, 403);
}
