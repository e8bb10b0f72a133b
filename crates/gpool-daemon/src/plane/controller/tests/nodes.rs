//! Remote nodes on the agent protocol: commands through outboxes, leases
//! that run out on the manual clock, and re-registration (issue 11's wedged
//! start).

use api::agent as wire;

use super::*;

pub(super) fn register(h: &mut Harness, node: &str, gpus: u32, running: Vec<wire::ReplicaId>) -> wire::Registered {
    let reg = registration(node, gpus, running);
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered")
}

/// The commands waiting for a node (a poll that acknowledges nothing new).
fn outbox(h: &mut Harness, node: &str, epoch: u64, after: u64) -> Vec<wire::Command> {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api { who: ADMIN.into(), call: Call::Poll { node: node.into(), epoch, after, reply: tx } }]);
    match rx.try_recv() {
        Ok(r) => r.expect("commands").commands.into_iter().map(|c| c.command).collect(),
        // Parked: nothing to say.
        Err(_) => Vec::new(),
    }
}

fn report(h: &mut Harness, node: &str, epoch: u64, events: Vec<wire::Event>) {
    let report = wire::Report { node: node.into(), epoch, events, telemetry: None, roster_version: 0 };
    h.call(ADMIN, |reply| Call::Report { report, reply }).expect("report taken");
}

fn rid(job: u64, attempt: u32, rank: u32) -> wire::ReplicaId {
    wire::ReplicaId { job, attempt, rank }
}

fn started(cmds: &[wire::Command]) -> Vec<wire::ReplicaId> {
    cmds.iter()
        .filter_map(|c| match c {
            wire::Command::Start { replica, .. } => Some(*replica),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_on_a_remote_node_starts_through_its_outbox_and_ends_by_its_report() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 4, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\nreplicas: 2\n");
    let cmds = outbox(&mut h, "n2", reg.epoch, 0);
    assert_eq!(started(&cmds), [rid(id, 1, 0), rid(id, 1, 1)]);
    if let Some(wire::Command::Start { env, .. }) = cmds.first() {
        let master = env.iter().find(|(k, _)| k == "MASTER_ADDR").map(|(_, v)| v.as_str());
        assert_eq!(master, Some("n2.cluster.test"), "rank 0's node address");
        assert!(env.iter().any(|(k, v)| k == "MASTER_PORT" && v == "29500"), "a port of the configured range");
    }
    assert!(h.orders().is_empty(), "nothing goes to a local agent");
    let exit = wire::ExitWire { code: Some(0), signal: None, started_ms: T0, ended_ms: T0, error: None, fenced: false };
    let events = (0..2).map(|r| wire::Event::Exited { replica: rid(id, 1, r), exit: exit.clone() }).collect();
    report(&mut h, "n2", reg.epoch, events);
    assert_eq!(h.state(id), api::JobState::Succeeded);
}

#[test]
fn cancelling_a_job_whose_start_is_still_in_the_outbox_queues_its_stop_behind_it() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("stopping");
    let cmds = outbox(&mut h, "n2", reg.epoch, 0);
    assert!(
        matches!(cmds.as_slice(), [wire::Command::Start { .. }, wire::Command::Signal { signal: 15, .. }]),
        "start, then its stop signal, in order: {cmds:?}"
    );
    let exit =
        wire::ExitWire { code: None, signal: Some(15), started_ms: T0, ended_ms: T0, error: None, fenced: false };
    report(&mut h, "n2", reg.epoch, vec![wire::Event::Exited { replica: rid(id, 1, 0), exit }]);
    assert_eq!(h.state(id), api::JobState::Cancelled);
}

#[test]
fn a_node_whose_lease_runs_out_is_down_and_its_jobs_are_requeued() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 2, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let failing = h.submit("command: [y]\nonNodeFailure: fail\n");
    assert_eq!(started(&outbox(&mut h, "n2", reg.epoch, 0)).len(), 2);
    // Silent for the 4 s lease and the 2 s margin.
    h.advance(Duration::from_millis(5_999));
    assert_eq!(h.state(id), api::JobState::Running);
    h.advance(Duration::from_millis(1));
    assert_eq!(h.state(id), api::JobState::Pending, "requeued: its node is down");
    assert_eq!(h.state(failing), api::JobState::Failed, "it asked not to be requeued");
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    assert_eq!(nodes[0].state, "down");
    // The node comes back: the job runs again there, as attempt 2.
    let reg = register(&mut h, "n2", 2, Vec::new());
    assert_eq!(started(&outbox(&mut h, "n2", reg.epoch, 0)), [rid(id, 2, 0)]);
}

#[test]
fn a_report_renews_the_lease() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    for _ in 0..5 {
        h.advance(Duration::from_secs(3));
        report(&mut h, "n2", reg.epoch, Vec::new());
    }
    assert_eq!(h.state(id), api::JobState::Running, "15 s of heartbeats keep a 4 s lease alive");
}

/// Issue 11, failure 1: a start sent to an agent that restarts within its
/// lease was never delivered nor reconciled, and the job ran forever.
#[test]
fn a_start_sent_to_an_agent_that_restarts_within_its_lease_is_sent_again() {
    let mut h = Setup::new().no_local_node().build();
    let first = register(&mut h, "n2", 2, Vec::new());
    // The agent dies (kill -9); 0.3 s later a job is placed on its node, still leased.
    h.advance(Duration::from_millis(300));
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\nreplicas: 2\n");
    // 1.5 s later the agent is back, with nothing running, and registers again.
    h.advance(Duration::from_millis(1_500));
    let second = register(&mut h, "n2", 2, Vec::new());
    assert!(second.epoch > first.epoch);
    let cmds = outbox(&mut h, "n2", second.epoch, second.next_seq - 1);
    assert_eq!(started(&cmds), [rid(id, 1, 0), rid(id, 1, 1)], "the undelivered starts go again: {cmds:?}");
    let exit = wire::ExitWire { code: Some(0), signal: None, started_ms: T0, ended_ms: T0, error: None, fenced: false };
    let events = (0..2).map(|r| wire::Event::Exited { replica: rid(id, 1, r), exit: exit.clone() }).collect();
    report(&mut h, "n2", second.epoch, events);
    assert_eq!(h.state(id), api::JobState::Succeeded);
}

#[test]
fn a_replica_the_registering_agent_still_runs_is_reconciled_not_started_again() {
    let mut h = Setup::new().no_local_node().build();
    let first = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    // The agent took the start, then restarted before acknowledging it.
    assert_eq!(started(&outbox(&mut h, "n2", first.epoch, 0)), [rid(id, 1, 0)]);
    let second = register(&mut h, "n2", 1, vec![rid(id, 1, 0)]);
    let cmds = outbox(&mut h, "n2", second.epoch, second.next_seq - 1);
    assert!(matches!(cmds.as_slice(), [wire::Command::Reconcile { .. }]), "{cmds:?}");
}

/// Heartbeats from `node` every 3 s for `secs` seconds (its 4 s lease stays alive).
fn heartbeats(h: &mut Harness, node: &str, epoch: u64, secs: u64) {
    for _ in 0..secs / 3 {
        h.advance(Duration::from_secs(3));
        report(h, node, epoch, Vec::new());
    }
}

/// Issue 11, failure 1, the other half: a start whose agent never says it
/// runs (the command or its answer went missing) must not hold its GPUs forever.
#[test]
fn a_start_no_agent_acknowledges_is_declared_lost_killed_and_requeued() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(started(&outbox(&mut h, "n2", reg.epoch, 0)), [rid(id, 1, 0)]);
    // The agent stays alive (heartbeats) but never reports the replica. Bound: 2 × 4 s + 2 s.
    heartbeats(&mut h, "n2", reg.epoch, 9);
    assert_eq!(h.state(id), api::JobState::Running);
    heartbeats(&mut h, "n2", reg.epoch, 3);
    let cmds = outbox(&mut h, "n2", reg.epoch, 1);
    assert!(cmds.contains(&wire::Command::Kill { replica: rid(id, 1, 0) }), "whatever may run it is killed: {cmds:?}");
    assert_eq!(started(&cmds), [rid(id, 2, 0)], "requeued and started again as attempt 2");
    assert!(h.event_kinds().contains(&"lost".to_string()));
}

#[test]
fn a_start_its_agent_acknowledges_is_left_alone() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    outbox(&mut h, "n2", reg.epoch, 0);
    report(&mut h, "n2", reg.epoch, vec![wire::Event::Running { replica: rid(id, 1, 0) }]);
    heartbeats(&mut h, "n2", reg.epoch, 30);
    assert_eq!(h.state(id), api::JobState::Running);
    assert_eq!(h.job(id).attempt, 1);
}

#[test]
fn cancelling_a_job_whose_replica_never_started_completes() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("stopping");
    // The agent never reports anything about it, but stays alive.
    heartbeats(&mut h, "n2", reg.epoch, 12);
    assert_eq!(h.state(id), api::JobState::Cancelled, "not `stopping` forever");
}

/// Issue 11, failure 2 (in part): a job its shim killed because the node
/// lost its lease (a database or network outage) is requeued, not failed.
#[test]
fn a_replica_fenced_by_its_lease_is_requeued_not_failed() {
    let mut h = Setup::new().no_local_node().build();
    let reg = register(&mut h, "n2", 1, Vec::new());
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    outbox(&mut h, "n2", reg.epoch, 0);
    let exit = wire::ExitWire {
        code: None,
        signal: Some(9),
        started_ms: T0,
        ended_ms: T0,
        error: Some("the node's lease ran out".into()),
        fenced: true,
    };
    report(&mut h, "n2", reg.epoch, vec![wire::Event::Exited { replica: rid(id, 1, 0), exit }]);
    let j = h.job(id);
    assert_ne!(j.state, api::JobState::Failed, "no retries were asked for, yet it is not failed");
    assert_eq!(j.restarts, 1);
    assert_eq!(started(&outbox(&mut h, "n2", reg.epoch, 1)), [rid(id, 2, 0)], "it runs again");
}

fn node_token(h: &mut Harness, user: &str) -> String {
    let req = api::TokenRequest { user: user.into(), team: None, role: Some("node".into()), ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("created").token
}

#[test]
fn a_node_token_acts_only_as_its_own_node() {
    let mut h = Setup::new().no_local_node().build();
    let a = node_token(&mut h, "a");
    let b = node_token(&mut h, "b");
    let any = node_token(&mut h, "*");
    let reg = registration("a", 1, Vec::new());
    let epoch = h.call(&a, |reply| Call::Register { reg, reply }).expect("a registers as a").epoch;
    let reg = registration("a", 1, Vec::new());
    let e = h.call(&b, |reply| Call::Register { reg, reply }).expect_err("b cannot register as a");
    assert_eq!(e.status, 403);
    assert!(e.message.contains("belongs to node \"b\""), "{}", e.message);
    let e = h
        .call(&b, |reply| Call::Poll { node: "a".into(), epoch, after: 0, reply })
        .expect_err("nor fetch a's commands");
    assert_eq!(e.status, 403);
    let report = wire::Report { node: "a".into(), epoch, events: Vec::new(), telemetry: None, roster_version: 0 };
    let e = h.call(&b, |reply| Call::Report { report, reply }).expect_err("nor report for a");
    assert_eq!(e.status, 403);
    let reg = registration("c", 1, Vec::new());
    assert!(h.call(&any, |reply| Call::Register { reg, reply }).is_ok(), "a fleet-wide token registers any node");
}

/// Issue 22: a multi-host TPU slice (`tpuTopology: 2x2x2`, 4 chips a host)
/// starts one replica on each host of one slice, each told its worker id
/// and every worker's address, and its chips.
#[test]
fn a_tpu_slice_starts_one_worker_per_host_of_one_slice() {
    let mut h = Setup::new().no_local_node().build();
    let mut epochs = Vec::new();
    for (node, slice) in [("t1", "a"), ("t2", "b"), ("t3", "b")] {
        let mut reg = registration(node, 4, Vec::new());
        for g in &mut reg.gpus {
            g.kind = "tpu".into();
            g.model = "TPU-v5p".into();
        }
        reg.labels.insert("gpool.io/tpu-slice".into(), slice.into());
        reg.labels.insert("gpool.io/tpu-topology".into(), "2x2x2".into());
        epochs.push(h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered").epoch);
    }
    let id = h.submit("command: [x]\nresources: {google.com/tpu: 4}\nreplicas: 2\ntpuTopology: 2x2x2\n");
    assert!(outbox(&mut h, "t1", epochs[0], 0).is_empty(), "slice a has one host: nothing there");
    let mut workers = Vec::new();
    for (node, epoch) in [("t2", epochs[1]), ("t3", epochs[2])] {
        for c in outbox(&mut h, node, epoch, 0) {
            if let wire::Command::Start { replica, env, .. } = c {
                let get = |k: &str| env.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone()).unwrap_or_default();
                assert_eq!(replica.job, id);
                assert_eq!(get("TPU_VISIBLE_CHIPS"), "0,1,2,3");
                assert_eq!(get("TPU_WORKER_HOSTNAMES"), "t2.cluster.test,t3.cluster.test");
                workers.push((node, get("TPU_WORKER_ID")));
            }
        }
    }
    assert_eq!(workers, [("t2", "0".to_string()), ("t3", "1".to_string())]);
}
