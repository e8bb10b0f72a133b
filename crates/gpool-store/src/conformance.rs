//! The behaviour every [`Store`] backend must have, as one suite run against
//! each backend (SQLite and PostgreSQL, in their modules' tests).

use crate::{EventRow, JobQuery, JobRow, NodeRow, SampleRow, Store, TokenRow, Write};

fn job(id: u64, user: &str, state: &str) -> JobRow {
    JobRow {
        id,
        user: user.into(),
        team: "t".into(),
        queue: if id.is_multiple_of(2) { "even".into() } else { "odd".into() },
        state: state.into(),
        submitted_ms: id as i64 * 1000,
        ended_ms: None,
        doc: format!("{{\"id\":{id}}}"),
    }
}

/// Runs every check on fresh stores made by `make`.
pub fn run_all(make: &mut dyn FnMut() -> Box<dyn Store>) {
    commits_are_all_or_nothing(make());
    jobs_are_replaced_and_queried(make());
    ended_jobs_are_found_by_period_and_team(make());
    tokens_round_trip(make());
    events_page_in_order(make());
    samples_keep_absent_values_and_order(make());
    nodes_are_replaced_and_deleted(make());
}

/// `open` gives a new handle on one shared database each call.
pub fn leadership_is_exclusive(open: &mut dyn FnMut() -> Box<dyn Store>) {
    let mut a = open();
    let mut b = open();
    assert!(a.lead(false).expect("lead"), "the first to ask leads");
    assert!(a.lead(false).expect("again"), "asking again while leading is fine");
    assert!(!b.lead(false).expect("try"), "a second control plane must not lead while the first does");
    // The store does not fence a standby's writes: the controller writes only once it leads.
    a.commit(&[Write::PutMeta("leader".into(), "a".into())]).expect("commit");
    assert_eq!(b.meta("leader").expect("read"), Some("a".into()));
    drop(a);
    assert!(b.lead(true).expect("wait"), "once the leader is gone, the standby leads");
    let mut c = open();
    assert!(!c.lead(false).expect("try"), "and keeps it");
}

fn nodes_are_replaced_and_deleted(mut s: Box<dyn Store>) {
    let node = |name: &str, state: &str| NodeRow {
        name: name.into(),
        state: state.into(),
        doc: format!("{{\"name\":\"{name}\"}}"),
        updated_ms: 7,
    };
    s.commit(&[Write::PutNode(node("n2", "up")), Write::PutNode(node("n1", "up"))]).expect("put");
    s.commit(&[Write::PutNode(node("n1", "draining"))]).expect("replace");
    assert_eq!(s.nodes().expect("nodes"), vec![node("n1", "draining"), node("n2", "up")]);
    s.commit(&[Write::DeleteNode("n2".into())]).expect("delete");
    assert_eq!(s.nodes().expect("nodes"), vec![node("n1", "draining")]);
}

fn commits_are_all_or_nothing(mut s: Box<dyn Store>) {
    s.commit(&[Write::PutJob(job(1, "a", "pending"))]).expect("first commit");
    // The second write collides with an existing event seq: the whole batch must roll back.
    let e = EventRow { seq: 1, at_ms: 0, job: None, kind: "k".into(), message: "m".into() };
    s.commit(&[Write::AppendEvent(e.clone())]).expect("event");
    let bad = [Write::PutJob(job(2, "a", "pending")), Write::AppendEvent(e)];
    assert!(s.commit(&bad).is_err(), "duplicate event seq must fail");
    assert_eq!(s.job(2).expect("query"), None, "a failed batch leaves nothing behind");
    assert_eq!(s.max_job_id().expect("max"), 1);
}

/// `gpool acct`: the jobs that ended in [from, before), of a team, in id order;
/// a job still running (no end) is never in a period.
fn ended_jobs_are_found_by_period_and_team(mut s: Box<dyn Store>) {
    let ended = |id: u64, at: Option<i64>, team: &str| JobRow {
        ended_ms: at,
        team: team.into(),
        ..job(id, "ana", "succeeded")
    };
    let rows = [
        ended(1, Some(100), "a"),
        ended(2, Some(200), "b"),
        ended(3, None, "a"),
        ended(4, Some(300), "a"),
        ended(5, Some(50), "a"),
    ];
    s.commit(&rows.iter().cloned().map(Write::PutJob).collect::<Vec<_>>()).expect("commit");
    let ids = |s: &mut Box<dyn Store>, q: JobQuery| -> Vec<u64> {
        let limit = if q.limit == 0 { 100 } else { q.limit };
        s.jobs(&JobQuery { limit, ..q }).expect("query").iter().map(|j| j.id).collect()
    };
    assert_eq!(ids(&mut s, JobQuery { ended_from: Some(100), ended_before: Some(300), ..JobQuery::default() }), [1, 2]);
    assert_eq!(ids(&mut s, JobQuery { ended_from: Some(100), team: Some("a".into()), ..JobQuery::default() }), [1, 4]);
    // In the order they ended, and a page goes on after the job that ended the last one.
    assert_eq!(ids(&mut s, JobQuery { ended_before: Some(101), ..JobQuery::default() }), [5, 1]);
    assert_eq!(ids(&mut s, JobQuery { ended_from: Some(0), ..JobQuery::default() }), [5, 1, 2, 4]);
    assert_eq!(ids(&mut s, JobQuery { ended_from: Some(0), after: Some(1), ..JobQuery::default() }), [2, 4]);
    assert_eq!(ids(&mut s, JobQuery { ended_from: Some(0), after: Some(5), limit: 2, ..JobQuery::default() }), [1, 2]);
    assert_eq!(s.job(4).expect("job").and_then(|j| j.ended_ms), Some(300), "the end round-trips");
    assert_eq!(s.job(3).expect("job").and_then(|j| j.ended_ms), None);
}

fn jobs_are_replaced_and_queried(mut s: Box<dyn Store>) {
    let mut batch: Vec<Write> =
        (1..=10).map(|i| Write::PutJob(job(i, if i <= 5 { "ana" } else { "bo" }, "pending"))).collect();
    batch.push(Write::PutJob(job(3, "ana", "running")));
    s.commit(&batch).expect("commit");
    assert_eq!(s.job(3).expect("job").map(|j| j.state), Some("running".into()), "last write wins");
    let page = s.jobs(&JobQuery { user: Some("ana".into()), limit: 2, ..JobQuery::default() }).expect("page");
    assert_eq!(page.iter().map(|j| j.id).collect::<Vec<_>>(), vec![1, 2]);
    let next =
        s.jobs(&JobQuery { user: Some("ana".into()), after: Some(2), limit: 10, ..JobQuery::default() }).expect("next");
    assert_eq!(next.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3, 4, 5]);
    let running =
        s.jobs(&JobQuery { states: vec!["running".into()], limit: 10, ..JobQuery::default() }).expect("states");
    assert_eq!(running.len(), 1);
    let even = s.jobs(&JobQuery { queue: Some("even".into()), limit: 100, ..JobQuery::default() }).expect("queue");
    assert_eq!(even.len(), 5);
    let active = s.jobs_in_states(&["pending", "running"]).expect("active");
    assert_eq!(active.len(), 10);
    assert_eq!(s.max_job_id().expect("max"), 10);
    assert_eq!(s.job(3).expect("job").map(|j| j.doc), Some("{\"id\":3}".into()));
}

fn tokens_round_trip(mut s: Box<dyn Store>) {
    let mut t = TokenRow {
        hash: "ab".into(),
        user: "ana".into(),
        team: "ml".into(),
        role: "user".into(),
        created_ms: 5,
        expires_ms: Some(90),
        last_used_ms: None,
    };
    s.commit(&[Write::PutToken(t.clone())]).expect("put");
    assert_eq!(s.tokens().expect("tokens"), vec![t.clone()]);
    t.last_used_ms = Some(60);
    s.commit(&[Write::PutToken(t.clone())]).expect("put again: last used");
    assert_eq!(s.tokens().expect("tokens"), vec![t]);
    s.commit(&[Write::DeleteToken("ab".into())]).expect("delete");
    assert!(s.tokens().expect("tokens").is_empty());
}

fn events_page_in_order(mut s: Box<dyn Store>) {
    let writes: Vec<Write> = (1..=5)
        .map(|i| {
            Write::AppendEvent(EventRow {
                seq: i,
                at_ms: i as i64,
                job: Some(i % 2),
                kind: "k".into(),
                message: format!("e{i}"),
            })
        })
        .collect();
    s.commit(&writes).expect("events");
    assert_eq!(s.events(2, None, 2).expect("page").iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(s.events(0, Some(1), 10).expect("job").iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 3, 5]);
    assert_eq!(s.max_event_seq().expect("max"), 5);
    s.commit(&[Write::PutMeta("v".into(), "1".into())]).expect("meta");
    assert_eq!(s.meta("v").expect("meta"), Some("1".into()));
    assert_eq!(s.meta("missing").expect("meta"), None);
}

fn samples_keep_absent_values_and_order(mut s: Box<dyn Store>) {
    let row = |job: u64, at_ms: i64, device: &str, util: Option<f64>| SampleRow {
        job,
        at_ms,
        device: device.into(),
        gpu_util: util,
        memory_mb: util.map(|u| u as u64 * 100),
        memory_total_mb: 81_559,
        cpu_cores: Some(1.5),
    };
    let first =
        vec![row(1, 60_000, "n/gpu1", Some(50.0)), row(1, 60_000, "n/gpu0", None), row(2, 0, "n/gpu2", Some(1.0))];
    s.commit(&[Write::AppendSamples(first)]).expect("samples");
    s.commit(&[Write::AppendSamples(vec![row(1, 0, "n/gpu0", Some(99.5))])]).expect("more");
    let got = s.samples(1).expect("samples");
    assert_eq!(
        got.iter().map(|r| (r.at_ms, r.device.as_str())).collect::<Vec<_>>(),
        vec![(0, "n/gpu0"), (60_000, "n/gpu0"), (60_000, "n/gpu1")],
        "by time, then device"
    );
    assert_eq!(got[1].gpu_util, None, "an absent value stays absent");
    assert_eq!(got[1].memory_mb, None);
    assert_eq!(got[0], row(1, 0, "n/gpu0", Some(99.5)));
    assert!(s.samples(3).expect("none").is_empty());
}
