//! A node agent's starts under the faults the chaos suite found: a start
//! delivered twice, a start that arrives after the node's lease ran out, a
//! replica killed or signaled before its shim started it; and a kill that must spare
//! another agent's job of the same id (the e2e suite's daemons share one
//! machine, and a sweep by job id killed a neighbour's job). The agent runs real shims
//! (the `gpool` binary); the control plane is this test, calling the agent
//! as the agent protocol's commands do.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use common::{BIN, Scratch};
use gpool_daemon::node::agent::{Agent, AgentConfig};
use gpool_daemon::node::lease;
use gpool_daemon::protocol::{AgentReport, Launch, ReplicaKey};

struct Node {
    agent: Agent,
    reports: Receiver<AgentReport>,
    lease: PathBuf,
    dir: PathBuf,
}

fn node(scratch: &Scratch) -> Node {
    let dir = scratch.0.clone();
    let lease = dir.join("lease");
    let cfg = AgentConfig {
        data_dir: dir.join("agent"),
        exe: PathBuf::from(BIN),
        node: "n0".into(),
        simulated: true,
        lease: Some(lease.clone()),
        log_limit: None,
        run_as: Default::default(),
        cgroups: None,
        device_files: Default::default(),
        sampler: None,
        checkpoint_root: None,
        container: None,
        image_cache: None,
        health_check: None,
    };
    std::fs::create_dir_all(&cfg.data_dir).expect("data dir");
    let (tx, rx) = channel();
    let sink = Arc::new(move |r: AgentReport| {
        let _ = tx.send(r);
    });
    Node { agent: Agent::new(cfg, sink, Arc::default()), reports: rx, lease, dir }
}

/// A replica that appends a line to `ran` when it runs.
fn launch(dir: &Path) -> Launch {
    Launch {
        argv: vec!["bash".into(), "-c".into(), "echo ran >> \"$RAN\"; sleep 0.3".into()],
        env: vec![("RAN".into(), dir.join("ran").display().to_string()), ("PATH".into(), "/usr/bin:/bin".into())],
        cwd: dir.to_path_buf(),
        ..Launch::default()
    }
}

/// Every report until the replica's end (an exit or a loss), or a minute.
fn until_end(reports: &Receiver<AgentReport>) -> Vec<AgentReport> {
    let mut seen = Vec::new();
    while let Ok(r) = reports.recv_timeout(Duration::from_secs(60)) {
        let end = matches!(r, AgentReport::Exited { .. } | AgentReport::Lost { .. });
        seen.push(r);
        if end {
            break;
        }
    }
    seen
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ran")).map_or(0, |t| t.lines().count())
}

const KEY: ReplicaKey = ReplicaKey { job: 7, attempt: 1, rank: 0 };

#[test]
fn a_start_delivered_twice_runs_the_replica_once() {
    let scratch = Scratch::new("agent-twice");
    let n = node(&scratch);
    lease::write(&n.lease, lease::monotonic_ms() + 60_000).expect("lease");
    // The old session's late answer and the new session's resend, back to back:
    // the first shim has not taken its lock yet when the second start arrives.
    n.agent.start(KEY, launch(&n.dir), Vec::new()).expect("first start");
    n.agent.start(KEY, launch(&n.dir), Vec::new()).expect("second start");
    let seen = until_end(&n.reports);
    assert!(
        matches!(seen.last(), Some(AgentReport::Exited { exit, .. }) if exit.code == Some(0)),
        "the replica ran to its end: {seen:?}"
    );
    assert_eq!(runs(&n.dir), 1, "it ran once: {seen:?}");
    // Nothing else ends: no second shim failing on the replica's lock.
    assert!(n.reports.recv_timeout(Duration::from_millis(500)).is_err_and(|e| e.to_string().contains("timed out")));
}

#[test]
fn a_start_that_arrives_after_the_lease_ran_out_does_not_run() {
    let scratch = Scratch::new("agent-late");
    let n = node(&scratch);
    // The agent stalled past its lease: the control plane may have run the job elsewhere.
    lease::write(&n.lease, lease::monotonic_ms() - 1).expect("lease");
    n.agent.start(KEY, launch(&n.dir), Vec::new()).expect("start");
    let seen = until_end(&n.reports);
    let Some(AgentReport::Exited { exit, .. }) = seen.last() else { panic!("an exit: {seen:?}") };
    assert!(exit.fenced, "a node's fault, requeued: {exit:?}");
    assert!(exit.error.as_deref().is_some_and(|e| e.contains("lease")), "{exit:?}");
    // Not started and then killed (the fence's way, which lets its first lines run): never started.
    assert_eq!((exit.signal, exit.code), (None, None), "{exit:?}");
    assert_eq!(runs(&n.dir), 0, "the job never ran");
}

#[test]
fn a_replica_killed_before_its_shim_started_it_never_runs() {
    let scratch = Scratch::new("agent-killed");
    let n = node(&scratch);
    lease::write(&n.lease, lease::monotonic_ms() + 60_000).expect("lease");
    std::fs::create_dir_all(n.agent.run_dir(KEY)).expect("run dir");
    n.agent.kill(KEY);
    n.agent.start(KEY, launch(&n.dir), Vec::new()).expect("start");
    let seen = until_end(&n.reports);
    assert!(!seen.is_empty(), "the replica ended");
    assert_eq!(runs(&n.dir), 0, "the job never ran: {seen:?}");
}

#[test]
fn a_stop_signal_sent_before_its_shim_started_the_job_still_stops_it() {
    let scratch = Scratch::new("agent-signaled");
    let n = node(&scratch);
    lease::write(&n.lease, lease::monotonic_ms() + 60_000).expect("lease");
    // A cancel right after the start: the shim has not written shim.json yet.
    std::fs::create_dir_all(n.agent.run_dir(KEY)).expect("run dir");
    n.agent.signal(KEY, rustix::process::Signal::TERM);
    let mut long = launch(&n.dir);
    long.argv = vec!["bash".into(), "-c".into(), "echo ran >> \"$RAN\"; exec sleep 600".into()];
    n.agent.start(KEY, long, Vec::new()).expect("start");
    let seen = until_end(&n.reports);
    let Some(AgentReport::Exited { exit, .. }) = seen.last() else { panic!("an end within a minute: {seen:?}") };
    assert_eq!(exit.signal, Some(15), "stopped by the signal sent before it ran: {exit:?}");
}

/// Waits (a minute at most) until `file` exists.
fn wait_for(file: &Path) {
    for _ in 0..1200 {
        if file.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", file.display());
}

#[test]
fn killing_a_replica_spares_another_agents_job_of_the_same_id() {
    // Two agents on one machine (two daemons, a test suite, a chaos run):
    // their control planes both number jobs from 1, so job ids and attempts repeat.
    let (sa, sb) = (Scratch::new("agent-same-id-a"), Scratch::new("agent-same-id-b"));
    let (a, b) = (node(&sa), node(&sb));
    for n in [&a, &b] {
        lease::write(&n.lease, lease::monotonic_ms() + 60_000).expect("lease");
    }
    let job = |n: &Node, script: &str| Launch {
        argv: vec!["bash".into(), "-c".into(), script.into()],
        env: vec![
            ("GPOOL_JOB_ID".into(), KEY.job.to_string()),
            ("GPOOL_ATTEMPT".into(), KEY.attempt.to_string()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ],
        cwd: n.dir.clone(),
        ..Launch::default()
    };
    a.agent.start(KEY, job(&a, "touch started; sleep 1; echo finished > finished"), Vec::new()).expect("start on a");
    b.agent.start(KEY, job(&b, "touch started; sleep 1000"), Vec::new()).expect("start on b");
    wait_for(&a.dir.join("started"));
    wait_for(&b.dir.join("started"));
    // b's control plane kills its replica (an old allocation); a's job is not b's.
    b.agent.kill(KEY);
    let seen = until_end(&a.reports);
    assert!(
        matches!(seen.last(), Some(AgentReport::Exited { exit, .. }) if exit.code == Some(0)),
        "a's job ran to its end: {seen:?}"
    );
    assert!(a.dir.join("finished").exists(), "a's job finished");
    let seen = until_end(&b.reports);
    assert!(
        matches!(seen.last(), Some(AgentReport::Exited { exit, .. }) if exit.signal == Some(9)),
        "b's job was killed: {seen:?}"
    );
}
