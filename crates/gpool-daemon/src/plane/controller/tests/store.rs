//! A store that refuses a write: the shell stops the controller, and
//! nothing of that turn is answered or carried out (commit before reply,
//! plan before act).

use std::sync::atomic::{AtomicBool, Ordering};

use gpool_store::{EventRow, JobQuery, JobRow, NodeRow, SampleRow, StoreError, TokenRow, Write};

use super::*;

/// An in-memory store whose commits fail while `broken` is set.
struct Flaky {
    inner: Sqlite,
    broken: Arc<AtomicBool>,
}

impl Store for Flaky {
    fn backend(&self) -> &'static str {
        "flaky"
    }
    fn commit(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(StoreError::Disconnected("database or disk is full".into()));
        }
        self.inner.commit(writes)
    }
    fn job(&mut self, id: u64) -> Result<Option<JobRow>, StoreError> {
        self.inner.job(id)
    }
    fn jobs(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        self.inner.jobs(q)
    }
    fn jobs_in_states(&mut self, states: &[&str]) -> Result<Vec<JobRow>, StoreError> {
        self.inner.jobs_in_states(states)
    }
    fn max_job_id(&mut self) -> Result<u64, StoreError> {
        self.inner.max_job_id()
    }
    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        self.inner.tokens()
    }
    fn events(&mut self, after: u64, job: Option<u64>, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        self.inner.events(after, job, limit)
    }
    fn max_event_seq(&mut self) -> Result<u64, StoreError> {
        self.inner.max_event_seq()
    }
    fn meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.inner.meta(key)
    }
    fn samples(&mut self, job: u64) -> Result<Vec<SampleRow>, StoreError> {
        self.inner.samples(job)
    }
    fn nodes(&mut self) -> Result<Vec<NodeRow>, StoreError> {
        self.inner.nodes()
    }
    fn lead(&mut self, wait: bool) -> Result<bool, StoreError> {
        self.inner.lead(wait)
    }
}

#[test]
fn a_store_write_that_fails_stops_the_controller_before_it_answers_or_acts() {
    let broken = Arc::new(AtomicBool::new(false));
    let store = Flaky { inner: Sqlite::memory().expect("store"), broken: broken.clone() };
    let mut h = Setup::new().store(Box::new(store)).build();
    broken.store(true, Ordering::SeqCst);
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nresources: {nvidia.com/gpu: 1}\n").expect("spec");
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let failed =
        h.try_step(vec![Event::Api { who: ADMIN.into(), call: Call::Submit { specs: vec![spec], reply: tx } }]);
    let err = failed.expect_err("the shell reports the store's failure");
    assert!(err.to_string().contains("database or disk is full"), "{err}");
    assert!(h.orders().is_empty(), "nothing started for an uncommitted decision");
    assert!(h.event_kinds().is_empty(), "nothing published");
    assert!(rx.try_recv().is_err(), "the submission was not acknowledged");
}

#[test]
fn the_shell_loop_ends_with_the_store_failure_and_then_answers_only_reads() {
    let broken = Arc::new(AtomicBool::new(false));
    let store = Flaky { inner: Sqlite::memory().expect("store"), broken: broken.clone() };
    let clock = ManualClock::new(T0);
    let (mut ctl, first) =
        Controller::new(config(Policy::gpool_default()), Box::new(store), Some(node_info("n1", 1)), Box::new(clock))
            .expect("controller");
    ctl.ensure_admin_token(ADMIN, "root").expect("admin token");
    let (events, _) = broadcast::channel(16);
    let mut shell = Shell {
        local: Some(Box::new(FakeAgent::default())),
        events,
        webhook: None,
        renew_every: None,
        provision: None,
        routes: None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    tx.send(Event::Api { who: ADMIN.into(), call: Call::Submit { specs: vec![spec.clone()], reply } }).expect("send");
    broken.store(true, Ordering::SeqCst);
    let ended = shell.run(&mut ctl, first, &rx);
    assert!(matches!(ended, Err(StoreFailed(_))), "{ended:?}");
    assert!(
        matches!(answer.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty)),
        "never acknowledged by the turn that failed"
    );
    // Issue 39: then (`gpool serve`) reads are answered from memory, and
    // everything else is refused naming why, until the shutdown.
    let (reply, mut listed) = tokio::sync::oneshot::channel();
    let query = crate::plane::controller::ListQuery::default();
    tx.send(Event::Api { who: ADMIN.into(), call: Call::List { query, reply } }).expect("send");
    let (reply, mut submitted) = tokio::sync::oneshot::channel();
    tx.send(Event::Api { who: ADMIN.into(), call: Call::Submit { specs: vec![spec], reply } }).expect("send");
    tx.send(Event::Shutdown).expect("send");
    shell.answer_reads(&mut ctl, &rx, "the database is away");
    assert!(listed.try_recv().expect("answered").is_ok(), "a read is answered from memory");
    let refused = submitted.try_recv().expect("answered").expect_err("refused");
    assert_eq!((refused.status, refused.message.as_str()), (503, "the database is away"));
    let first = answer.try_recv().expect("answered").expect_err("refused");
    assert_eq!(first.status, 503, "the submission the failed turn never took is refused, not lost silently");
}

/// Issue 15: the overload gate's state outlives the control plane. A
/// restart an hour into an overload does not start the gate's six-hour
/// count again.
#[test]
fn the_overload_state_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("gpool-overload-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let path = dir.join("state.db");
    let open = || Box::new(Sqlite::open(&path, false).expect("store"));
    let mut h = Setup::new().store(open()).build();
    let whole = "command: [x]\nresources: {nvidia.com/gpu: 8}\npreemptible: true\n";
    h.submit(whole);
    h.submit(whole);
    let since = h.ctl.snap.overloaded_since();
    assert_eq!(since, Some(gpool_core::Time::from_millis(T0)), "8 GPUs pending on 8: overloaded from now");
    drop(h);
    let later = ManualClock::new(T0 + 3_600_000);
    let h = Setup::new().store(open()).clock(later).build();
    assert_eq!(h.ctl.snap.overloaded_since(), since, "the overload began before the restart");
    let _ = std::fs::remove_dir_all(&dir);
}
