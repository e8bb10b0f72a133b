//! A job's life on the local node: submit, place, start, the end of its
//! replicas, retries, cancel, time limits and gangs.

use super::*;

#[test]
fn a_submitted_job_is_placed_and_started_on_its_gpus() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 2}\n");
    let starts = h.starts();
    assert_eq!(starts.len(), 1, "one replica started");
    let (k, e) = &starts[0];
    assert_eq!(*k, key(id, 1, 0));
    assert_eq!(env(e, "CUDA_VISIBLE_DEVICES").map(|v| v.split(',').count()), Some(2));
    assert_eq!(env(e, "GPOOL_JOB_ID"), Some(id.to_string().as_str()));
    assert_eq!(env(e, "WORLD_SIZE"), None, "a single replica gets no torchrun variables");
    assert_eq!(h.state(id), api::JobState::Running);
    assert_eq!(h.event_kinds(), ["submitted", "started"]);
}

#[test]
fn a_replica_that_exits_zero_succeeds_and_frees_its_gpus() {
    let mut h = Setup::new().build();
    let a = h.submit("command: [a]\nresources: {nvidia.com/gpu: 8}\n");
    let b = h.submit("command: [b]\nresources: {nvidia.com/gpu: 8}\n");
    assert_eq!(h.starts().len(), 1);
    assert_eq!(h.state(b), api::JobState::Pending);
    h.exit(key(a, 1, 0), Some(0), None);
    assert_eq!(h.state(a), api::JobState::Succeeded);
    assert_eq!(h.starts().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [key(b, 1, 0)], "b takes the freed GPUs");
}

#[test]
fn a_failed_replica_without_retries_fails_the_job() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.exit(key(id, 1, 0), Some(3), None);
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Failed);
    assert!(j.reason.as_deref().is_some_and(|r| r.contains("exit code 3")), "{:?}", j.reason);
}

#[test]
fn a_replica_killed_by_a_signal_fails_with_that_signal() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.exit(key(id, 1, 0), None, Some(9));
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Failed);
    assert!(j.reason.as_deref().is_some_and(|r| r.contains("signal 9")), "{:?}", j.reason);
}

#[test]
fn a_failure_with_retries_left_waits_out_its_backoff_on_the_clock() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\nretries: 2\n");
    h.orders();
    h.exit(key(id, 1, 0), Some(1), None);
    assert_eq!(h.state(id), api::JobState::Pending);
    h.advance(Duration::from_millis(9_999));
    assert!(h.starts().is_empty(), "no restart before the 10 s back-off ends");
    h.advance(Duration::from_millis(1));
    assert_eq!(h.starts().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [key(id, 2, 0)]);
    // The second failure doubles the back-off.
    h.exit(key(id, 2, 0), Some(1), None);
    h.advance(Duration::from_secs(19));
    assert!(h.starts().is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(h.starts().len(), 1);
}

#[test]
fn a_start_the_agent_cannot_carry_out_requeues_the_job_and_holds_the_node() {
    let agent = FakeAgent::default();
    *agent.broken.lock().expect("lock") = true;
    let mut h = Setup::new().agent(agent.clone()).build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    // The shell fed the failure back; the next turn handles it.
    h.step(Vec::new());
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Pending, "a fault of the node, not of the job: {j:?}");
    assert_eq!(j.restarts, 1);
    let node = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes").remove(0);
    assert_eq!(node.state, "draining");
    assert!(node.conditions.iter().any(|c| c.contains("fork failed")), "{:?}", node.conditions);
    assert_eq!(h.starts().len(), 1, "one try, then no retry on the held node");
    *agent.broken.lock().expect("lock") = false;
    h.advance(Duration::from_millis(29_999));
    assert!(h.starts().is_empty(), "held for 30 s");
    h.advance(Duration::from_millis(1));
    assert_eq!(h.starts().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [key(id, 2, 0)]);
    assert_eq!(h.state(id), api::JobState::Running);
    h.exit(key(id, 2, 0), Some(0), None);
    let j = h.job(id);
    assert_eq!((j.state, j.restarts), (api::JobState::Succeeded, 1));
}

#[test]
fn cancelling_a_pending_job_ends_it_without_touching_any_node() {
    let mut h = Setup::new().build();
    let _big = h.submit("command: [a]\nresources: {nvidia.com/gpu: 8}\n");
    let id = h.submit("command: [b]\nresources: {nvidia.com/gpu: 8}\n");
    h.orders();
    let v = h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("cancelled");
    assert_eq!(v.state, api::JobState::Cancelled);
    assert!(h.orders().is_empty());
}

#[test]
fn cancelling_a_running_job_signals_it_then_kills_it_after_its_grace_period() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\ngracePeriod: 20s\nstopSignal: SIGINT\n");
    h.orders();
    let v = h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("stopping");
    assert_eq!(v.state, api::JobState::Stopping);
    assert_eq!(signals(&h.orders()), [(key(id, 1, 0), Signal::INT)], "the job's own stop signal");
    h.advance(Duration::from_millis(19_999));
    assert!(h.orders().is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(signals(&h.orders()), [(key(id, 1, 0), Signal::KILL)]);
    h.exit(key(id, 1, 0), None, Some(9));
    assert_eq!(h.state(id), api::JobState::Cancelled, "a cancelled job is cancelled, not failed");
}

#[test]
fn a_job_that_stops_within_its_grace_period_is_not_killed() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("stopping");
    h.exit(key(id, 1, 0), Some(0), None);
    h.orders();
    h.advance(Duration::from_secs(60));
    assert!(h.orders().is_empty(), "no SIGKILL for a run that ended");
    assert_eq!(h.state(id), api::JobState::Cancelled);
}

#[test]
fn a_time_limit_stops_the_job_on_the_manual_clock() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\ntimeLimit: 1m\n");
    h.orders();
    h.advance(Duration::from_secs(59));
    assert!(h.orders().is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(signals(&h.orders()), [(key(id, 1, 0), Signal::TERM)]);
    h.exit(key(id, 1, 0), None, Some(15));
    assert_eq!(h.state(id), api::JobState::TimedOut);
}

#[test]
fn a_gang_gets_torchrun_variables_and_one_rendezvous_port() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [torchrun]\nresources: {nvidia.com/gpu: 2}\nreplicas: 3\n");
    let starts = h.starts();
    assert_eq!(starts.len(), 3, "all replicas of a gang start together");
    for (rank, (k, e)) in starts.iter().enumerate() {
        assert_eq!(*k, key(id, 1, rank as u32));
        assert_eq!(env(e, "WORLD_SIZE"), Some("3"));
        assert_eq!(env(e, "RANK"), Some(rank.to_string().as_str()));
        assert_eq!(env(e, "LOCAL_RANK"), Some(rank.to_string().as_str()));
        assert_eq!(env(e, "NNODES"), Some("1"));
        assert_eq!(env(e, "MASTER_ADDR"), Some("127.0.0.1"));
        assert_eq!(env(e, "MASTER_PORT"), Some("29400"), "the injected free port of this host");
    }
    let gpus: std::collections::BTreeSet<&str> =
        starts.iter().filter_map(|(_, e)| env(e, "CUDA_VISIBLE_DEVICES")).collect();
    assert_eq!(gpus.len(), 3, "no GPU given to two replicas");
}

/// Scripts written for sbatch read Slurm's variables: gpool sets them beside its own.
#[test]
fn replicas_get_the_variables_slurm_would_set() {
    let mut h = Setup::new().build();
    let id = h.submit(
        "command: [sh]\nname: bars\nworkdir: /home/ana\nresources: {nvidia.com/gpu: 2, cpu: 1500m}\nreplicas: 2\n",
    );
    let starts = h.starts();
    assert_eq!(starts.len(), 2);
    for (rank, (_, e)) in starts.iter().enumerate() {
        let want = [
            ("SLURM_JOB_ID", id.to_string()),
            ("SLURM_JOB_NAME", "bars".into()),
            ("SLURM_NTASKS", "2".into()),
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_LOCALID", rank.to_string()),
            ("SLURM_NODEID", "0".into()),
            ("SLURM_NNODES", "1".into()),
            ("SLURM_JOB_NODELIST", "n1".into()),
            ("SLURM_GPUS_ON_NODE", "2".into()),
            ("SLURM_CPUS_PER_TASK", "2".into()),
            ("SLURM_SUBMIT_DIR", "/home/ana".into()),
            ("SLURM_RESTART_COUNT", "0".into()),
        ];
        for (k, v) in want {
            assert_eq!(env(e, k), Some(v.as_str()), "rank {rank}: {k}");
        }
        assert_eq!(env(e, "GPOOL_JOB_ID"), Some(id.to_string().as_str()), "gpool's own beside them");
    }
}

#[test]
fn a_gang_member_that_fails_stops_the_others_and_fails_the_job() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\nreplicas: 2\n");
    h.orders();
    h.exit(key(id, 1, 1), Some(1), None);
    assert_eq!(signals(&h.orders()), [(key(id, 1, 0), Signal::TERM)], "rank 0 is stopped");
    assert_eq!(h.state(id), api::JobState::Stopping);
    h.exit(key(id, 1, 0), None, Some(15));
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Failed);
    assert!(j.exit.is_some(), "the exit of the first failed rank is the job's");
}

#[test]
fn a_gang_that_loses_a_replica_is_requeued_and_restarted_whole() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\nreplicas: 2\n");
    h.orders();
    h.step(vec![Event::Agent(AgentReport::Lost { key: key(id, 1, 0), why: "shim vanished".into() })]);
    assert_eq!(signals(&h.orders()), [(key(id, 1, 1), Signal::TERM)]);
    h.exit(key(id, 1, 1), None, Some(15));
    let restarted: Vec<ReplicaKey> = h.starts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(restarted, [key(id, 2, 0), key(id, 2, 1)], "requeued, then both replicas again");
    assert!(h.event_kinds().contains(&"lost".to_string()));
}

/// Issue 11, failure 4 (in part): a node whose disk is under its reserve
/// starts nothing new until it is healthy again, and says why.
#[test]
fn a_node_reporting_a_full_disk_takes_no_new_work_until_it_recovers() {
    let mut h = Setup::new().build();
    let report = |conditions: Vec<String>| {
        Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
            node: "n1".into(),
            at_ms: T0,
            conditions,
            ..Default::default()
        }))
    };
    h.step(vec![report(vec!["disk: 50 MiB free in /var/lib/gpool, under the 100 MiB reserve".into()])]);
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    assert!(h.starts().is_empty(), "nothing starts on a node under its disk reserve");
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    assert_eq!(nodes[0].state, "draining");
    assert!(nodes[0].conditions[0].contains("under the 100 MiB reserve"));
    assert!(h.event_kinds().contains(&"node_condition".to_string()));
    h.step(vec![report(Vec::new())]);
    assert_eq!(h.starts().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [key(id, 1, 0)], "healthy again: it starts");
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    assert_eq!((nodes[0].state.as_str(), nodes[0].conditions.len()), ("up", 0));
}

/// Slurm's dependency types through the API: `afterAny` runs after any end,
/// `afterNotOk` only after a failure; one that can never start is refused at
/// submission, or fails at once when its job succeeds.
#[test]
fn after_any_and_after_not_ok_follow_how_the_job_they_wait_for_ended() {
    let mut h = Setup::new().policy("fifo").build();
    let first = h.submit("command: [x]\n");
    let any = h.submit(&format!("command: [any]\nafterAny: [{first}]\n"));
    let cleanup = h.submit(&format!("command: [cleanup]\nafterNotOk: [{first}]\n"));
    assert_eq!(h.starts().len(), 1, "only the first runs");
    h.exit(key(first, 1, 0), Some(1), None);
    let started: Vec<u64> = h.starts().iter().map(|(k, _)| k.job).collect();
    assert_eq!(started, [any, cleanup], "it failed: both follow");

    let ok = h.submit("command: [x]\n");
    let watcher = h.submit(&format!("command: [cleanup]\nafterNotOk: [{ok}]\n"));
    h.orders();
    h.exit(key(ok, 1, 0), Some(0), None);
    let j = h.job(watcher);
    assert_eq!(j.state, api::JobState::Failed, "{j:?}");
    assert!(j.reason.as_deref().is_some_and(|r| r.contains("runs only if it fails")), "{j:?}");
    let spec: api::JobSpec =
        gpool_api::yaml::from_str(&format!("command: [late]\nafterNotOk: [{ok}]\n")).expect("spec");
    let err = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("can never start");
    assert!(err.message.contains("afterNotOk: job") && err.message.contains("afterAny"), "{}", err.message);
}
