//! Restore after a restart: runs re-adopted, lost, or out of inventory;
//! stop deadlines kept; remote runs reconciled when their agent registers.

use api::agent as wire;

use super::*;
use crate::plane::controller::ListQuery;

/// A state database that outlives one controller, removed at the end.
pub(super) struct StateFile(PathBuf);

impl StateFile {
    pub(super) fn new(test: &str) -> StateFile {
        let dir = std::env::temp_dir().join(format!("gpool-controller-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        StateFile(dir)
    }

    pub(super) fn open(&self) -> Box<dyn Store> {
        Box::new(Sqlite::open(&self.0.join("state.db"), false).expect("state database"))
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A harness on `state`, at the time `clock` reads.
fn restart(state: &StateFile, clock: &ManualClock, agent: FakeAgent) -> Harness {
    Setup::new().store(state.open()).clock(clock.clone()).agent(agent).build()
}

#[test]
fn a_restart_readopts_what_runs_and_its_end_is_still_heard() {
    let state = StateFile::new("readopt");
    let clock = ManualClock::new(T0);
    let id = {
        let mut h = restart(&state, &clock, FakeAgent::default());
        h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\nreplicas: 2\n")
    };
    clock.advance(Duration::from_secs(30));
    let mut h = restart(&state, &clock, FakeAgent::default());
    let reconciled: Vec<ReplicaKey> = h
        .orders()
        .into_iter()
        .filter_map(|o| match o {
            Order::Reconcile { key, devices } if devices.len() == 2 => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(reconciled, [key(id, 1, 0), key(id, 1, 1)]);
    assert_eq!(h.state(id), api::JobState::Running);
    h.exit(key(id, 1, 0), Some(0), None);
    h.exit(key(id, 1, 1), Some(0), None);
    assert_eq!(h.state(id), api::JobState::Succeeded);
    // Its GPUs are free again: a job of all eight starts.
    h.submit("command: [y]\nresources: {nvidia.com/gpu: 8}\n");
    assert_eq!(h.starts().len(), 1);
}

#[test]
fn a_restart_requeues_a_run_whose_shim_is_gone() {
    let state = StateFile::new("lost");
    let clock = ManualClock::new(T0);
    let id = restart(&state, &clock, FakeAgent::default()).submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let agent = FakeAgent::default();
    *agent.lock_lost() = true;
    let mut h = restart(&state, &clock, agent);
    h.step(Vec::new());
    let started: Vec<ReplicaKey> = h.starts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(started, [key(id, 2, 0)], "requeued and started again as attempt 2");
    assert!(h.job(id).restarts >= 1);
}

#[test]
fn a_restart_abandons_runs_whose_devices_are_no_longer_there() {
    let state = StateFile::new("shrunk");
    let clock = ManualClock::new(T0);
    let id = restart(&state, &clock, FakeAgent::default()).submit("command: [x]\nresources: {nvidia.com/gpu: 8}\n");
    let mut h = Setup::new().store(state.open()).clock(clock.clone()).local_gpus(2).build();
    // Abandoning is a reconcile with no devices: the agent kills strays and forgets it.
    assert!(h.orders().contains(&Order::Reconcile { key: key(id, 1, 0), devices: Vec::new() }));
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Pending);
    assert!(j.reason.unwrap_or_default().contains("no longer in its nodes' inventory"));
}

#[test]
fn a_stop_deadline_survives_a_restart() {
    let state = StateFile::new("deadline");
    let clock = ManualClock::new(T0);
    let id = {
        let mut h = restart(&state, &clock, FakeAgent::default());
        let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\ngracePeriod: 1m\n");
        h.call(ADMIN, |reply| Call::Cancel { id, from: "test".into(), reply }).expect("stopping");
        id
    };
    clock.advance(Duration::from_secs(40));
    let mut h = restart(&state, &clock, FakeAgent::default());
    h.orders();
    assert_eq!(h.state(id), api::JobState::Stopping);
    h.advance(Duration::from_secs(19));
    assert!(signals(&h.orders()).is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(signals(&h.orders()), [(key(id, 1, 0), Signal::KILL)], "killed at the deadline set before the restart");
}

#[test]
fn a_restart_reconciles_remote_runs_when_their_agent_registers() {
    let state = StateFile::new("remote");
    let clock = ManualClock::new(T0);
    let reg = |node: &str, running: Vec<wire::ReplicaId>| registration(node, 1, running);
    let id = {
        let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
        let r = reg("n2", Vec::new());
        h.call(ADMIN, |reply| Call::Register { reg: r, reply }).expect("registered");
        // Started: the command waits in the outbox when the control plane stops.
        h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n")
    };
    let mut h = Setup::new().no_local_node().store(state.open()).clock(clock.clone()).build();
    assert_eq!(h.state(id), api::JobState::Running, "running until its node says otherwise");
    let rid = wire::ReplicaId { job: id, attempt: 1, rank: 0 };
    let r = reg("n2", vec![rid]);
    let registered = h.call(ADMIN, |reply| Call::Register { reg: r, reply }).expect("registered");
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api {
        who: ADMIN.into(),
        // As the agent does: everything before `next_seq` is acknowledged.
        call: Call::Poll { node: "n2".into(), epoch: registered.epoch, after: registered.next_seq - 1, reply: tx },
    }]);
    let cmds: Vec<wire::Command> =
        rx.try_recv().expect("answered").expect("commands").commands.into_iter().map(|c| c.command).collect();
    assert!(matches!(cmds.as_slice(), [wire::Command::Reconcile { replica, .. }] if *replica == rid), "{cmds:?}");
}

/// A pipeline run lives in its jobs' documents: after a restart it is
/// shown whole, and its stages still wait for what they need.
#[test]
fn a_pipeline_run_survives_a_restart() {
    let state = StateFile::new("pipeline");
    let clock = ManualClock::new(T0);
    let yaml = "name: p\nstages:\n  - {name: a, command: [a]}\n  - {name: b, command: [b], needs: [a]}\n";
    let spec: api::pipeline::PipelineSpec = gpool_api::yaml::from_str(yaml).expect("pipeline");
    let run = {
        let mut h = restart(&state, &clock, FakeAgent::default());
        h.call(ADMIN, |reply| Call::SubmitPipeline { spec: Box::new(spec), reply }).expect("accepted").run
    };
    let mut h = restart(&state, &clock, FakeAgent::default());
    h.step(Vec::new());
    let v = h.call(ADMIN, |reply| Call::Pipeline { run, reply }).expect("the run");
    assert_eq!(v.stages.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(h.state(run + 1), api::JobState::Pending, "b still waits for a");
    h.orders();
    h.exit(key(run, 1, 0), Some(0), None);
    let started: Vec<u64> = h.starts().into_iter().map(|(k, _)| k.job).collect();
    assert_eq!(started, [run + 1]);
}

/// A recurring job across restarts: an occurrence that fell while the
/// control plane was down fires once when it is back (the latest of several),
/// and a second restart at the same moment fires nothing again.
#[test]
fn a_schedule_fires_once_per_occurrence_across_restarts() {
    let state = StateFile::new("schedule");
    let clock = ManualClock::new(T0);
    let spec: api::schedule::ScheduleSpec =
        gpool_api::yaml::from_str("schedule: '@hourly'\ntimeZone: UTC\njob: {command: [x]}\n").expect("schedule");
    {
        let mut h = restart(&state, &clock, FakeAgent::default());
        h.call(ADMIN, |reply| Call::ApplySchedule { name: "h".into(), spec: Box::new(spec), reply }).expect("applied");
    }
    // Down across three occurrences.
    let third = T0 - T0 % 3_600_000 + 3 * 3_600_000;
    clock.set(third + 60_000);
    let submitted = |h: &mut Harness| {
        let q = ListQuery { limit: 100, ..Default::default() };
        h.call(ADMIN, |reply| Call::List { query: q, reply }).expect("list").jobs.len()
    };
    {
        let mut h = restart(&state, &clock, FakeAgent::default());
        h.step(Vec::new());
        assert_eq!(submitted(&mut h), 1, "one run for the occurrences missed");
        let v = h.call(ADMIN, |reply| Call::Schedules { reply }).expect("schedules");
        assert_eq!((v[0].runs, v[0].skipped), (1, 2));
        assert_eq!(v[0].last_at.as_deref(), Some(api::time::rfc3339(third).as_str()));
    }
    let mut h = restart(&state, &clock, FakeAgent::default());
    h.step(Vec::new());
    assert_eq!(submitted(&mut h), 1, "the same occurrence does not fire twice");
}

#[test]
fn a_held_job_is_still_held_after_a_restart() {
    let state = StateFile::new("held");
    let clock = ManualClock::new(T0);
    let hold = |h: &mut Harness, id: u64, hold: bool| {
        h.call(ADMIN, |reply| Call::Hold { id, hold, from: "test".into(), reply }).expect("hold or release")
    };
    let (blocker, held) = {
        let mut h = restart(&state, &clock, FakeAgent::default());
        let blocker = h.submit("command: [x]\nresources: {nvidia.com/gpu: 8}\n");
        let held = h.submit("command: [y]\nresources: {nvidia.com/gpu: 1}\n");
        hold(&mut h, held, true);
        (blocker, held)
    };
    let mut h = restart(&state, &clock, FakeAgent::default());
    assert_eq!(h.state(blocker), api::JobState::Running, "re-adopted");
    h.exit(key(blocker, 1, 0), Some(0), None);
    assert_eq!(h.state(held), api::JobState::Pending, "eight free GPUs, and it is still held");
    assert!(h.job(held).reason.is_some_and(|r| r.starts_with("held by root")));
    hold(&mut h, held, false);
    assert_eq!(h.state(held), api::JobState::Running);
}

#[test]
fn cost_reports_come_from_the_usage_ledger_and_read_the_same_after_a_restart() {
    let state = StateFile::new("ledger");
    let clock = ManualClock::new(T0);
    let report = |h: &mut Harness, by: &str, since_s: u64| {
        h.call(ADMIN, |reply| Call::Cost { by: by.into(), since: Duration::from_secs(since_s), reply })
            .expect("a report")
    };
    let (old, new, before) = {
        let mut h = restart(&state, &clock, FakeAgent::default());
        // Ends two days ago: outside a report over one day.
        let old = h.submit("command: [a]\nresources: {nvidia.com/gpu: 2}\n");
        h.advance(Duration::from_secs(3600));
        h.exit(key(old, 1, 0), Some(0), None);
        h.advance(Duration::from_secs(2 * 86_400));
        let new = h.submit("command: [b]\nresources: {nvidia.com/gpu: 1}\n");
        h.advance(Duration::from_secs(1800));
        h.exit(key(new, 1, 0), Some(1), None);
        let running = h.submit("command: [c]\nresources: {nvidia.com/gpu: 1}\n");
        h.advance(Duration::from_secs(900));
        assert_eq!(h.state(running), api::JobState::Running);
        let day = report(&mut h, "team", 86_400);
        assert_eq!(day.rows.len(), 1, "{day:?}");
        // The job that ended half an hour after it started, and the one running for a quarter hour.
        assert_eq!(day.rows[0].jobs, 2, "{day:?}");
        assert!((day.rows[0].gpu_hours - 0.75).abs() < 1e-3, "{day:?}");
        let week = report(&mut h, "team", 7 * 86_400);
        assert_eq!(week.rows[0].jobs, 3, "{week:?}");
        assert!((week.rows[0].gpu_hours - 2.75).abs() < 1e-3, "{week:?}");
        assert!(week.total_dollars > day.total_dollars && day.total_dollars > 0.0, "{week:?} {day:?}");
        // Per job, from the store: the same jobs.
        let jobs = report(&mut h, "job", 7 * 86_400);
        assert_eq!(jobs.rows.len(), 3, "{jobs:?}");
        (old, new, (week, jobs))
    };
    let mut h = restart(&state, &clock, FakeAgent::default());
    let week = report(&mut h, "team", 7 * 86_400);
    let jobs = report(&mut h, "job", 7 * 86_400);
    assert_eq!((week, jobs), before, "the ledger rebuilt from the store reads as it did");
    let day = report(&mut h, "job", 86_400);
    let keys: Vec<&str> = day.rows.iter().map(|r| r.key.as_str()).collect();
    assert!(keys.contains(&new.to_string().as_str()) && !keys.contains(&old.to_string().as_str()), "{day:?}");
}

/// `by=job` reads the store from the first job that ended in the period:
/// a job submitted before it and still running is listed too, from memory.
#[test]
fn a_report_by_job_lists_a_job_running_since_before_the_first_that_ended_in_the_period() {
    let mut h = Setup::new().build();
    let spec = "command: [a]\nresources: {nvidia.com/gpu: 1}\n";
    let gone = h.submit(spec);
    let long = h.submit(spec);
    h.advance(Duration::from_secs(3600));
    h.exit(key(gone, 1, 0), Some(0), None);
    h.advance(Duration::from_secs(3 * 86_400));
    let short = h.submit(spec);
    h.advance(Duration::from_secs(3600));
    h.exit(key(short, 1, 0), Some(0), None);
    assert_eq!(h.state(long), api::JobState::Running);
    let day = h
        .call(ADMIN, |reply| Call::Cost { by: "job".into(), since: Duration::from_secs(86_400), reply })
        .expect("a report");
    let mut keys: Vec<String> = day.rows.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    let mut want = vec![long.to_string(), short.to_string()];
    want.sort();
    assert_eq!(keys, want, "{day:?}");
    assert!(day.rows.iter().all(|r| r.jobs == 1), "each job once: {day:?}");
}
