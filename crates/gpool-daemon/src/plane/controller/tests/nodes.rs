//! Remote nodes on the agent protocol: commands through outboxes, leases
//! that run out on the manual clock, and re-registration (issue 11's wedged
//! start).

use api::agent as wire;

use super::*;

fn register(h: &mut Harness, node: &str, gpus: u32, running: Vec<wire::ReplicaId>) -> wire::Registered {
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

/// The dashboard's overview counts GPUs by what they do: a job's GPUs are
/// busy until a reading says they idle, the rest are free, and a draining
/// node's are down; the pending job's wait is counted.
#[test]
fn the_overview_counts_gpus_by_what_they_do_and_the_queue_waits() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let running = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let waiting = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\n");
    assert_eq!(h.state(running), api::JobState::Running);
    assert_eq!(h.state(waiting), api::JobState::Pending);
    h.advance(std::time::Duration::from_secs(90));
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    let g = &o.gpus[0];
    assert_eq!((g.model.as_str(), g.busy, g.idle, g.free, g.down), ("H100-80GB", 2, 0, 2, 0));
    assert_eq!((o.pending, o.running), (1, 1));
    assert_eq!(o.wait_max_s, Some(90.0));
    assert_eq!(o.heat[0].job.iter().filter(|j| **j == Some(running)).count(), 2);
    assert_eq!(o.heat[0].index, [0, 1, 2, 3]);
    // Idle readings on the job's GPUs make them idle.
    let gpus = (0..4)
        .map(|i| gpool_gpu::GpuSample {
            index: i,
            uuid: format!("GPU-n1-{i}"),
            gpu_util_pct: Some(0.0),
            ..gpool_gpu::GpuSample::default()
        })
        .collect();
    h.step(vec![Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        at_ms: T0,
        gpus,
        ..Default::default()
    }))]);
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    assert_eq!((o.gpus[0].busy, o.gpus[0].idle), (0, 2));
    assert_eq!(o.heat[0].util[0], Some(0));
    // A draining node's GPUs are down, whoever holds them.
    h.call(ADMIN, |reply| Call::Drain { node: "n1".into(), draining: true, from: "test".into(), reply })
        .expect("drain");
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    assert_eq!((o.gpus[0].busy, o.gpus[0].idle, o.gpus[0].free, o.gpus[0].down), (0, 0, 0, 4));
    assert_eq!(o.heat[0].state, "draining");
}

/// The job backfill holds resources for says when it expects to start:
/// when the job ahead of it reaches its time limit.
#[test]
fn the_reserved_job_shows_when_backfill_expects_it_to_start() {
    let mut h = Setup::new().policy("fifo-backfill").local_gpus(4).build();
    let first = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 1h\n");
    let next = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 1h\n");
    assert_eq!(h.state(first), api::JobState::Running);
    let view = h.job(next);
    assert_eq!(view.estimated_start.as_deref(), Some(api::time::rfc3339(T0 + 3_600_000).as_str()));
    assert_eq!(h.job(first).estimated_start, None, "a running job has none");
}

/// A held job waits, saying who held it, until it is released; only a
/// pending job can be held.
#[test]
fn a_held_job_waits_until_it_is_released() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let busy = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let hold = |h: &mut Harness, id: u64, hold: bool| {
        h.call(ADMIN, |reply| Call::Hold { id, hold, from: "test".into(), reply })
    };
    let e = hold(&mut h, busy, true).expect_err("a running job");
    assert_eq!(e.status, 409, "{e:?}");
    assert!(e.message.contains("only a pending job can be held"), "{e:?}");
    let v = hold(&mut h, id, true).expect("held");
    assert_eq!(v.reason.as_deref(), Some(format!("held by root (gpool release {id})").as_str()));
    h.exit(key(busy, 1, 0), Some(0), None);
    assert_eq!(h.state(id), api::JobState::Pending, "held: the free GPUs do not start it");
    assert_eq!(h.event_messages("held").len(), 1);
    hold(&mut h, id, false).expect("released");
    assert_eq!(h.state(id), api::JobState::Running, "released: it starts");
}

#[test]
fn the_overview_counts_each_gpu_as_the_nodes_view_shows_it() {
    let mut h = Setup::new().build();
    register(&mut h, "r1", 4, Vec::new());
    let drained = h.call(ADMIN, |reply| Call::Drain { node: "r1".into(), draining: true, from: "t".into(), reply });
    assert!(drained.is_ok(), "{drained:?}");
    let whole = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let quarter = h.submit("command: [y]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    let other = h.submit("command: [z]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    for id in [whole, quarter, other] {
        assert_eq!(h.state(id), api::JobState::Running);
    }
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("the overview");
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("the nodes");
    assert_eq!(o.heat.len(), nodes.len());
    for (cells, n) in o.heat.iter().zip(&nodes) {
        assert_eq!(cells.node, n.name);
        for (at, d) in n.devices.iter().enumerate() {
            assert_eq!(cells.job[at], d.job, "{} GPU {}", n.name, d.index);
            let shared = !d.shares.is_empty() || d.mig.iter().any(|m| m.job.is_some());
            assert_eq!(cells.shared.contains(&(at as u32)), shared, "{} GPU {}", n.name, d.index);
        }
    }
    // On the local node: two GPUs held whole, one shared by both quarters, five free; the drained node's four are down.
    let count = |o: &api::Overview| {
        o.gpus.iter().fold((0, 0, 0, 0), |a, g| (a.0 + g.busy, a.1 + g.idle, a.2 + g.free, a.3 + g.down))
    };
    assert_eq!(count(&o), (3, 0, 5, 4), "{:?}", o.gpus);
    let local = o.heat.iter().find(|c| c.node == "n1").expect("the local node");
    assert_eq!(local.job.iter().filter(|j| **j == Some(whole)).count(), 2);
    assert_eq!(local.shared.len(), 1, "both quarters on one GPU");
}

#[test]
fn a_cpx_partition_is_charged_its_share_of_the_gpu() {
    let mut h = Setup::new().no_local_node().build();
    let mut reg = registration("mi", 8, Vec::new());
    for g in &mut reg.gpus {
        g.kind = "amd-gpu".into();
        g.name = "AMD Instinct MI300X".into();
        g.model = "MI300X-CPX".into();
        g.memory_mb = 24_560;
    }
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered");
    let id = h.submit("command: [x]\nresources: {amd.com/gpu: 1}\n");
    assert_eq!(h.state(id), api::JobState::Running);
    h.advance(Duration::from_secs(3600));
    let report = h
        .call(ADMIN, |reply| Call::Cost { by: "job".into(), since: Duration::from_secs(86_400), reply })
        .expect("a report");
    // An hour of an eighth of an MI300X ($6.00 an hour): $0.75.
    assert_eq!(report.rows.len(), 1, "{report:?}");
    assert!((report.rows[0].dollars - 0.75).abs() < 1e-3, "{report:?}");
}
