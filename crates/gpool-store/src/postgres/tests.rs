//! The PostgreSQL backend against a real server (`gpool_testpg`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use super::*;
use crate::conformance;
use gpool_testpg::{TestPostgres, TestPostgresOptions};

/// One server for the whole test binary; each test takes its own databases.
fn server() -> &'static TestPostgres {
    static SERVER: OnceLock<TestPostgres> = OnceLock::new();
    SERVER.get_or_init(|| TestPostgres::start().expect("start a test PostgreSQL"))
}

fn fresh(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!("{prefix}_{}", N.fetch_add(1, Ordering::Relaxed));
    server().fresh_database(&name).expect("fresh database")
}

fn admin(url: &str) -> Client {
    Client::connect(url, NoTls).expect("admin connection")
}

/// Polls `done` until it holds, for at most 10 s.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Backend pids holding (`granted`) or waiting for the leader lock of
/// this database (tests on other databases of the server hold theirs).
fn leader_lock_pids(admin: &mut Client, granted: bool) -> Vec<i32> {
    let [high, low] = split_key(Postgres::LEADER_KEY);
    admin
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 \
             AND objsubid = 1 AND granted = $3 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&high, &low, &granted],
        )
        .expect("pg_locks")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn postgres_passes_the_conformance_suite() {
    conformance::run_all(&mut || Box::new(Postgres::connect(&fresh("conformance")).expect("connect")));
}

#[test]
fn leadership_is_exclusive() {
    let url = fresh("leadership");
    conformance::leadership_is_exclusive(&mut || Box::new(Postgres::connect(&url).expect("connect")));
}

#[test]
fn open_by_url_gives_a_postgres_store() {
    let url = fresh("open");
    let mut s = crate::open(&url, false).expect("open");
    assert_eq!(s.backend(), "postgres");
    s.commit(&[Write::PutMeta("k".into(), "v".into())]).expect("commit");
    let mut again = crate::open(&url.replacen("postgres://", "postgresql://", 1), false).expect("reopen");
    assert_eq!(again.meta("k").expect("meta"), Some("v".into()));
}

#[test]
fn the_session_is_named_gpool() {
    let url = fresh("session");
    let _s = Postgres::connect(&url).expect("connect");
    let mut a = admin(&url);
    let row = a
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gpool' AND datname = current_database()",
            &[],
        )
        .expect("activity");
    assert_eq!(row.get::<_, i64>(0), 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let url = fresh("newer");
    drop(Postgres::connect(&url).expect("connect"));
    admin(&url).execute("UPDATE schema_version SET version = 99", &[]).expect("bump");
    assert!(matches!(Postgres::connect(&url), Err(StoreError::TooNew { found: 99, supported: 6 })));
}

#[test]
fn control_planes_starting_together_both_migrate() {
    let url = fresh("together");
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                Postgres::connect(&url).map(|_| ())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread").expect("connect and migrate");
    }
    let version: i32 = admin(&url).query_one("SELECT version FROM schema_version", &[]).expect("version").get(0);
    assert_eq!(version, MIGRATIONS.len() as i32);
}

#[test]
fn a_standby_takes_over_when_the_leaders_session_dies() {
    let url = fresh("takeover");
    let mut a = Postgres::connect(&url).expect("a");
    assert!(a.lead(false).expect("a leads"));
    let mut b = Postgres::connect(&url).expect("b");
    let standby = std::thread::spawn(move || {
        let led = b.lead(true);
        (b, led)
    });
    let mut admin = admin(&url);
    eventually("the standby waits for the lock", || !leader_lock_pids(&mut admin, false).is_empty());
    let leader = leader_lock_pids(&mut admin, true);
    assert_eq!(leader.len(), 1);
    // As when the leader's process dies or the network cuts it off.
    admin.execute("SELECT pg_terminate_backend($1)", &[&leader[0]]).expect("terminate");
    let (mut b, led) = standby.join().expect("standby");
    assert!(led.expect("lead"), "the standby leads once the leader's session is gone");
    assert!(b.lead(false).expect("still"), "and is told so again");
    let err = a.commit(&[Write::PutMeta("leader".into(), "a".into())]).expect_err("a's connection is gone");
    assert!(matches!(err, StoreError::Disconnected(_)), "{err:?}");
    assert!(a.lead(false).is_err(), "a must not believe it still leads");
    assert!(a.meta("leader").is_err(), "nor read on another session");
}

/// Issue 11, failure 3: a leader that is stopped (`kill -STOP`) or hung
/// keeps its session and the lock; it must not keep the cluster leaderless.
#[test]
fn a_standby_deposes_a_leader_that_stopped_renewing() {
    let url = fresh("hung");
    let mut a = Postgres::connect(&url).expect("a");
    assert!(a.lead(false).expect("a leads"));
    a.commit(&[Write::PutMeta("leader".into(), "a".into())]).expect("a commits");
    // From now on a says nothing, as a stopped process would.
    let mut b = Postgres::connect(&url).expect("b");
    let (tx, rx) = std::sync::mpsc::channel();
    let standby = std::thread::spawn(move || {
        let led = b.lead(true);
        let _ = tx.send(());
        (b, led)
    });
    rx.recv_timeout(LEADER_LEASE * 4).expect("the standby takes over within a few leader leases");
    let (mut b, led) = standby.join().expect("standby");
    assert!(led.expect("lead"));
    b.commit(&[Write::PutMeta("leader".into(), "b".into())]).expect("b commits");
    let err = a.commit(&[Write::PutMeta("leader".into(), "a".into())]).expect_err("a was deposed");
    assert!(matches!(err, StoreError::Disconnected(_)), "{err:?}");
    assert_eq!(b.meta("leader").expect("meta"), Some("b".into()), "nothing of the old leader landed after");
}

#[test]
fn a_leader_that_renews_keeps_its_standby_waiting() {
    let url = fresh("renewing");
    let mut a = Postgres::connect(&url).expect("a");
    assert!(a.lead(false).expect("a leads"));
    let mut b = Postgres::connect(&url).expect("b");
    let (tx, rx) = std::sync::mpsc::channel();
    let _standby = std::thread::spawn(move || {
        let led = b.lead(true);
        let _ = tx.send(led.is_ok());
    });
    // Twice the leader lease, renewing as a leader's shell does.
    let mut waited = Duration::ZERO;
    while waited < LEADER_LEASE * 2 {
        a.renew().expect("renew");
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "the standby took over a live leader");
        waited += Duration::from_millis(500);
    }
    assert!(a.lead(false).expect("still leads"));
    a.commit(&[Write::PutMeta("k".into(), "v".into())]).expect("a still commits");
}

#[test]
fn a_store_whose_server_restarted_returns_errors_and_a_new_connection_finds_every_commit() {
    let mut own =
        TestPostgres::start_with(TestPostgresOptions { durable: true, env: Vec::new(), tls: false }).expect("a server");
    let mut s = Postgres::connect(&own.url()).expect("connect");
    assert!(s.lead(false).expect("lead"));
    s.commit(&[Write::PutMeta("k".into(), "v".into())]).expect("commit");
    own.stop();
    let err = s.commit(&[Write::PutMeta("k".into(), "w".into())]).expect_err("no server");
    assert!(matches!(err, StoreError::Disconnected(_)), "{err:?}");
    assert!(s.lead(false).is_err());
    assert!(s.job(1).is_err());
    assert!(Postgres::connect(&own.url()).is_err(), "stopped");
    own.start_again().expect("started again");
    let mut again = Postgres::connect(&own.url()).expect("connect again, same port");
    assert_eq!(again.meta("k").expect("read"), Some("v".into()), "the commit before the stop, not the refused one");
}

#[test]
fn big_batches_commit_in_few_statements() {
    let mut s = Postgres::connect(&fresh("big")).expect("connect");
    let n = (CHUNK + 2_000) as u64; // two statements per table
    let mut batch: Vec<Write> = (1..=n)
        .map(|i| {
            Write::PutJob(JobRow {
                id: i,
                user: "u".into(),
                team: "t".into(),
                queue: "q".into(),
                state: "pending".into(),
                submitted_ms: i as i64,
                ended_ms: None,
                doc: "{}".into(),
            })
        })
        .collect();
    batch.extend((1..=n).map(|i| {
        Write::AppendEvent(EventRow { seq: i, at_ms: 0, job: Some(i), kind: "k".into(), message: "m".into() })
    }));
    batch.push(Write::AppendSamples(
        (0..n)
            .map(|i| SampleRow {
                job: 1,
                at_ms: i as i64,
                device: "n/gpu0".into(),
                gpu_util: Some(50.0),
                memory_mb: None,
                memory_total_mb: 80_000,
                cpu_cores: None,
            })
            .collect(),
    ));
    let t = Instant::now();
    s.commit(&batch).expect("commit");
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "{} rows took {took:?}", 3 * n);
    assert_eq!(s.max_job_id().expect("max"), n);
    assert_eq!(s.max_event_seq().expect("max"), n);
    assert_eq!(s.samples(1).expect("samples").len(), n as usize);
}

#[test]
fn a_batch_applies_puts_and_deletes_in_order() {
    let mut s = Postgres::connect(&fresh("order")).expect("connect");
    let token = |role: &str| TokenRow {
        hash: "h".into(),
        user: "u".into(),
        team: "t".into(),
        role: role.into(),
        created_ms: 1,
        expires_ms: None,
        last_used_ms: None,
    };
    let node = |state: &str| NodeRow { name: "n".into(), state: state.into(), doc: "{}".into(), updated_ms: 1 };
    s.commit(&[
        Write::PutToken(token("user")),
        Write::DeleteToken("h".into()),
        Write::PutToken(token("admin")),
        Write::PutNode(node("up")),
        Write::DeleteNode("n".into()),
        Write::PutMeta("k".into(), "1".into()),
        Write::PutMeta("k".into(), "2".into()),
    ])
    .expect("commit");
    assert_eq!(s.tokens().expect("tokens"), vec![token("admin")]);
    assert!(s.nodes().expect("nodes").is_empty());
    assert_eq!(s.meta("k").expect("meta"), Some("2".into()));
    s.commit(&[Write::DeleteNode("n".into()), Write::PutNode(node("draining"))]).expect("commit");
    assert_eq!(s.nodes().expect("nodes"), vec![node("draining")]);
}

#[test]
fn values_beyond_bigint_are_refused_and_leave_nothing() {
    let mut s = Postgres::connect(&fresh("range")).expect("connect");
    let job = |id: u64| JobRow {
        id,
        user: "u".into(),
        team: "t".into(),
        queue: "q".into(),
        state: "pending".into(),
        submitted_ms: 0,
        ended_ms: None,
        doc: "{}".into(),
    };
    let err = s.commit(&[Write::PutJob(job(1)), Write::PutJob(job(u64::MAX))]).expect_err("too big");
    assert!(matches!(err, StoreError::OutOfRange { what: "job id", .. }), "{err:?}");
    assert_eq!(s.max_job_id().expect("max"), 0);
    assert_eq!(s.job(u64::MAX).expect("lookup"), None);
    assert!(s.events(u64::MAX, None, 10).expect("events").is_empty());
    // Text PostgreSQL cannot hold fails the batch instead of panicking.
    let mut nul = job(2);
    nul.doc = "a\0b".into();
    assert!(matches!(s.commit(&[Write::PutJob(nul)]), Err(StoreError::Postgres(_))));
    s.commit(&[Write::PutJob(job(3))]).expect("the store still works");
}

#[test]
fn orders_text_by_bytes_as_sqlite_does() {
    // The test cluster's own collation is C: this database sorts as people do.
    let url = format!("postgres://postgres@127.0.0.1:{}/collation_icu", server().port());
    admin(&server().url())
        .batch_execute(
            "CREATE DATABASE collation_icu TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'",
        )
        .expect("an ICU database");
    let b_first: bool = admin(&url).query_one("SELECT 'B' < 'a'", &[]).expect("compare").get(0);
    assert!(!b_first, "the database's collation must not be byte order for this test to mean anything");
    let mut s = Postgres::connect(&url).expect("connect");
    let node = |name: &str| NodeRow { name: name.into(), state: "up".into(), doc: "{}".into(), updated_ms: 1 };
    s.commit(&[Write::PutNode(node("b")), Write::PutNode(node("B")), Write::PutNode(node("a"))]).expect("commit");
    let names: Vec<String> = s.nodes().expect("nodes").into_iter().map(|n| n.name).collect();
    assert_eq!(names, vec!["B", "a", "b"]);
}

#[test]
fn lock_keys_are_the_documented_ones() {
    assert_eq!(Postgres::LEADER_KEY, -2_560_562_052_907_534_370);
    assert_eq!(Postgres::LEADER_KEY as u64, 0xdc77_0e61_1b19_f7de);
    assert_eq!(split_key(Postgres::LEADER_KEY), [3_698_789_985, 454_686_686]);
    assert_eq!(Postgres::MIGRATE_KEY as u64, 0x2c48_b29a_d855_8ff8);
}

#[test]
fn bad_urls_fail_without_showing_passwords() {
    let err = Postgres::connect("postgres://gpool:s3cret@127.0.0.1:1/db?sslmode=disable").err().expect("no server");
    let text = err.to_string();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("postgres://gpool:***@127.0.0.1:1/db"), "{text}");
    assert!(matches!(Postgres::connect("postgres://[::1"), Err(StoreError::Open { .. })));
    assert_eq!(redact("host=x password=y"), "<connection string>");
}

#[test]
fn sslmode_require_connects_over_tls_verified_against_sslrootcert() {
    let own = TestPostgres::start_with(TestPostgresOptions { tls: true, ..TestPostgresOptions::default() })
        .expect("a server with TLS");
    let ca = own.ca_file().expect("its CA");
    let url = format!("{}?sslmode=require&sslrootcert={}", own.url(), ca.display());
    let mut s = Postgres::connect(&url).expect("connect over TLS");
    let row = s.client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).expect("pg_stat_ssl");
    assert!(row.get::<_, bool>(0), "the session is encrypted");
    assert!(s.lead(false).expect("lead"), "and works as a store");
    // Another CA: the server is refused.
    let other = TestPostgres::start_with(TestPostgresOptions { tls: true, ..TestPostgresOptions::default() })
        .expect("another server");
    let wrong = format!("{}?sslmode=require&sslrootcert={}", own.url(), other.ca_file().expect("ca").display());
    let err = Postgres::connect(&wrong).err().expect("a certificate of another CA is refused");
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    // Without sslmode: plain text, as before.
    let mut plain = Postgres::connect(&own.url()).expect("plain");
    let row = plain.client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).expect("ssl");
    assert!(!row.get::<_, bool>(0));
}
