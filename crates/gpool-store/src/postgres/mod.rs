//! The PostgreSQL store: several control planes share one database, one of
//! them leads.
//!
//! Each [`Postgres`] is one connection (the synchronous `postgres` crate),
//! which it writes with, reads with and holds leadership on. It never
//! reconnects: once the connection breaks every call fails (with
//! [`StoreError::Disconnected`] when the cause is known to be the
//! connection), so that a control plane cannot go on believing it leads on
//! a new session that does not hold the lock. Open a new store instead.
//!
//! **Leadership** ([`Store::lead`]) is the session-level advisory lock
//! [`Postgres::LEADER_KEY`] (`pg_try_advisory_lock`, or `pg_advisory_lock`
//! to wait) on that connection. PostgreSQL releases it when the session
//! ends, so a leader whose process dies loses leadership at once (its
//! kernel closes the socket) and a standby waiting in `lead(true)` takes
//! over. A leader whose machine or network goes away is noticed by TCP
//! keepalives: the store asks the server to probe its end after 10 s idle,
//! every 5 s, 3 times (`tcp_keepalives_*`), and sets the same on its own end
//! plus a 30 s `TCP_USER_TIMEOUT`, so both sides give up within about 30 s.
//! Asking `lead` again while leading checks in `pg_locks` that the session
//! still holds the lock.
//!
//! A leader whose process is stopped or hung keeps its session, and the
//! lock, open. So the leader also renews a row (`leadership`: its backend
//! pid and the time) at every commit and at least every second
//! ([`Store::renew`], called by its controller's shell). A standby, between
//! rounds of waiting for the lock, ends the session of a leader whose row is
//! older than [`LEADER_LEASE`] (`pg_terminate_backend`): the lock is freed,
//! the standby takes it, and the old leader's next request fails.
//!
//! Writes go through the session that holds the lock, so each commit of an
//! old leader either lands while it still leads or fails: there is no
//! moment when two leaders' commits both succeed. A standby waits in rounds
//! of 1 s (`lock_timeout`, with `statement_timeout` off for the wait): a
//! statement waiting for a lock holds a snapshot, and one held for days
//! would hold back vacuum in the whole cluster.
//!
//! Migrations (`migrations/postgres/`) run at [`Postgres::connect`], each in
//! its own transaction under the transaction-level advisory lock
//! [`Postgres::MIGRATE_KEY`], so control planes starting together migrate
//! once; the version is the one row of `schema_version`.
//!
//! What it cannot do:
//! TLS: with `sslmode=require` (or `prefer`) in the URL it connects over
//! TLS and verifies the server against `sslrootcert=FILE` or the public
//! roots (`tls.rs`); without `sslmode`, in plain text.
//!
//! What else it cannot do:
//! - work through a connection pooler in transaction or statement mode
//!   (PgBouncer): leadership needs one server session for the store's life.
//!   `lead` reports an error when it finds its lock gone.
//! - share a database between two gpool clusters: the advisory lock keys
//!   are per database, whatever the `search_path`.
//! - store text containing NUL (`\0`), which PostgreSQL refuses (SQLite
//!   keeps it), or ids, sequence numbers and sizes above `i64::MAX`
//!   ([`StoreError::OutOfRange`]).
//! - fence writes: a store that does not lead can still commit; the
//!   controller writes only once it leads.
//! - cancel a `lead(true)` that is waiting: it blocks its thread until this
//!   store leads or the connection fails.

use std::collections::HashMap;
use std::time::Duration;

use postgres::config::SslMode;
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, Statement};

use crate::pg_error::describe;
use crate::{EventRow, JobQuery, JobRow, NodeRow, SampleRow, Store, StoreError, TokenRow, Write};

const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_job_samples.sql"),
    include_str!("../../migrations/postgres/0003_nodes.sql"),
    include_str!("../../migrations/postgres/0004_leadership.sql"),
    include_str!("../../migrations/postgres/0005_token_lifecycle.sql"),
    include_str!("../../migrations/postgres/0006_job_ended.sql"),
];

/// Rows per multi-row statement in a commit (bigger batches take several).
const CHUNK: usize = 10_000;

/// How long one wait for the leader lock lasts before it starts again, so
/// that a standby never holds one snapshot (and the vacuum horizon) for long.
const LOCK_WAIT: &str = "1s";

/// A leader that has not renewed its leadership for this long is deposed by
/// a standby, which ends its session (and so frees the leader lock). Shorter
/// than an agent's default lease (10 s), so that a standby takes over before
/// the agents' shims kill their jobs.
pub(crate) const LEADER_LEASE: Duration = Duration::from_secs(3);

/// 64-bit FNV-1a, to derive advisory lock keys from names.
const fn fnv1a64(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

const JOB_COLS: &str = "id, user_name, team, queue, state, submitted_ms, doc, ended_ms";

/// A connection to a PostgreSQL database, migrated to this gpool's schema.
pub struct Postgres {
    client: Client,
    st: Statements,
    /// This session took the leader lock.
    leading: bool,
}

/// Statements prepared once per connection.
struct Statements {
    put_jobs: Statement,
    put_events: Statement,
    put_samples: Statement,
    put_meta: Statement,
    put_token: Statement,
    delete_token: Statement,
    put_node: Statement,
    delete_node: Statement,
    job: Statement,
    jobs_in_states: Statement,
    max_job_id: Statement,
    tokens: Statement,
    events: Statement,
    job_events: Statement,
    max_event_seq: Statement,
    meta: Statement,
    samples: Statement,
    nodes: Statement,
    try_lock: Statement,
    lock: Statement,
    holds_lock: Statement,
    /// Records that this session leads, now.
    renew: Statement,
    /// Ends the session of a leader that stopped renewing.
    depose: Statement,
}

impl Statements {
    fn prepare(c: &mut Client) -> Result<Statements, postgres::Error> {
        Ok(Statements {
            put_jobs: c.prepare(
                "INSERT INTO jobs (id, user_name, team, queue, state, submitted_ms, doc, ended_ms) \
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[]) \
                 ON CONFLICT (id) DO UPDATE SET user_name = EXCLUDED.user_name, team = EXCLUDED.team, \
                 queue = EXCLUDED.queue, state = EXCLUDED.state, submitted_ms = EXCLUDED.submitted_ms, doc = EXCLUDED.doc, \
                 ended_ms = EXCLUDED.ended_ms",
            )?,
            put_events: c.prepare(
                "INSERT INTO events (seq, at_ms, job_id, kind, message) \
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])",
            )?,
            put_samples: c.prepare(
                "INSERT INTO job_samples (job_id, at_ms, device, gpu_util, memory_mb, memory_total, cpu_cores) \
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::bigint[], $6::bigint[], $7::float8[])",
            )?,
            put_meta: c.prepare(
                "INSERT INTO meta (key, value) SELECT * FROM unnest($1::text[], $2::text[]) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )?,
            put_token: c.prepare(
                "INSERT INTO tokens (hash, user_name, team, role, created_ms, expires_ms, last_used_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (hash) DO UPDATE SET user_name = EXCLUDED.user_name, team = EXCLUDED.team, \
                 role = EXCLUDED.role, created_ms = EXCLUDED.created_ms, expires_ms = EXCLUDED.expires_ms, \
                 last_used_ms = EXCLUDED.last_used_ms",
            )?,
            delete_token: c.prepare("DELETE FROM tokens WHERE hash = $1")?,
            put_node: c.prepare(
                "INSERT INTO nodes (name, state, doc, updated_ms) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, doc = EXCLUDED.doc, \
                 updated_ms = EXCLUDED.updated_ms",
            )?,
            delete_node: c.prepare("DELETE FROM nodes WHERE name = $1")?,
            job: c.prepare(&format!("SELECT {JOB_COLS} FROM jobs WHERE id = $1"))?,
            jobs_in_states: c.prepare(&format!("SELECT {JOB_COLS} FROM jobs WHERE state = ANY($1) ORDER BY id"))?,
            max_job_id: c.prepare("SELECT COALESCE(MAX(id), 0) FROM jobs")?,
            // Text sorts in byte order (COLLATE "C"), as in SQLite, whatever the database's collation.
            tokens: c.prepare(
                "SELECT hash, user_name, team, role, created_ms, expires_ms, last_used_ms FROM tokens \
                 ORDER BY created_ms, hash COLLATE \"C\"",
            )?,
            events: c.prepare(
                "SELECT seq, at_ms, job_id, kind, message FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
            )?,
            job_events: c.prepare(
                "SELECT seq, at_ms, job_id, kind, message FROM events WHERE seq > $1 AND job_id = $2 ORDER BY seq LIMIT $3",
            )?,
            max_event_seq: c.prepare("SELECT COALESCE(MAX(seq), 0) FROM events")?,
            meta: c.prepare("SELECT value FROM meta WHERE key = $1")?,
            samples: c.prepare(
                "SELECT job_id, at_ms, device, gpu_util, memory_mb, memory_total, cpu_cores FROM job_samples \
                 WHERE job_id = $1 ORDER BY at_ms, device COLLATE \"C\"",
            )?,
            nodes: c.prepare("SELECT name, state, doc, updated_ms FROM nodes ORDER BY name COLLATE \"C\"")?,
            try_lock: c.prepare("SELECT pg_try_advisory_lock($1)")?,
            lock: c.prepare("SELECT pg_advisory_lock($1)")?,
            renew: c.prepare(
                "INSERT INTO leadership (id, pid, renewed_at) VALUES (1, pg_backend_pid(), now()) \
                 ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, renewed_at = excluded.renewed_at",
            )?,
            depose: c.prepare(
                "SELECT pg_terminate_backend(pid) FROM leadership \
                 WHERE id = 1 AND pid <> pg_backend_pid() AND renewed_at < now() - make_interval(secs => $1)",
            )?,
            // A bigint advisory key shows as classid (high half), objid (low half), objsubid 1.
            holds_lock: c.prepare(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() \
                 AND granted AND classid = $1 AND objid = $2 AND objsubid = 1)",
            )?,
        })
    }
}

impl Postgres {
    /// The session-level advisory lock the leader holds: 64-bit FNV-1a of
    /// `"gpool-leader"` (`0xdc770e611b19f7de`) as a signed bigint,
    /// `-2560562052907534370`. In `pg_locks` it is `locktype = 'advisory'`,
    /// `classid = 3698789985`, `objid = 454686686`, `objsubid = 1`.
    pub const LEADER_KEY: i64 = fnv1a64("gpool-leader") as i64;

    /// The transaction-level advisory lock migrations hold: 64-bit FNV-1a
    /// of `"gpool-migrate"` (`0x2c48b29ad8558ff8`).
    pub const MIGRATE_KEY: i64 = fnv1a64("gpool-migrate") as i64;

    /// Connects to `url` (`postgres://user[:password]@host[:port]/db`, or
    /// any form the `postgres` crate parses), then migrates the database.
    ///
    /// Sets `application_name=gpool`, a 10 s connect timeout and TCP
    /// keepalives unless the URL sets them. The user needs to create tables
    /// in the first schema of its `search_path` (`public` by default) until
    /// the schema is current. Fails with [`StoreError::TooNew`] when a newer
    /// gpool migrated the database.
    pub fn connect(url: &str) -> Result<Postgres, StoreError> {
        let open = |why: String| StoreError::Open { path: redact(url), why };
        let (driver_url, root) = tls::split_url(url);
        let mut config: Config = driver_url.parse().map_err(|e| open(describe(&e)))?;
        // The driver's default is `prefer`; gpool's, without `sslmode`, is plain text.
        let wants_tls = driver_url.contains("sslmode=") && config.get_ssl_mode() != SslMode::Disable;
        if !wants_tls {
            config.ssl_mode(SslMode::Disable);
        }
        if config.get_application_name().is_none() {
            config.application_name("gpool");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        // The crate's default idle time is two hours: ours unless the URL said otherwise.
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(Duration::from_secs(10));
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(5));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        let mut client = if wants_tls {
            let connector = tls::connector(root.as_deref()).map_err(open)?;
            config.connect(connector).map_err(|e| open(describe(&e)))?
        } else {
            config.connect(NoTls).map_err(|e| open(describe(&e)))?
        };
        configure_session(&mut client)?;
        migrate(&mut client)?;
        let st = Statements::prepare(&mut client)?;
        Ok(Postgres { client, st, leading: false })
    }

    /// Runs `f`, and names the error [`StoreError::Disconnected`] when the
    /// connection is gone (leadership with it).
    fn run<T>(&mut self, f: impl FnOnce(&mut Postgres) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let result = f(self);
        if self.client.is_closed() {
            self.leading = false;
        }
        result.map_err(|e| match e {
            StoreError::Postgres(m) if self.client.is_closed() => StoreError::Disconnected(m),
            e => e,
        })
    }

    fn commit_batch(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        // Tables do not refer to each other, so grouping the writes by table
        // (keeping their order within each) gives what applying them one by
        // one would, in a few multi-row statements.
        let mut jobs: Vec<&JobRow> = Vec::new();
        let mut job_index: HashMap<u64, usize> = HashMap::new();
        let mut meta: Vec<(&str, &str)> = Vec::new();
        let mut meta_index: HashMap<&str, usize> = HashMap::new();
        let mut events: Vec<&EventRow> = Vec::new();
        let mut samples: Vec<&SampleRow> = Vec::new();
        let mut in_order: Vec<&Write> = Vec::new();
        for w in writes {
            match w {
                // One statement cannot upsert a row twice: the last write of an id wins.
                Write::PutJob(j) => match job_index.get(&j.id) {
                    Some(&i) => jobs[i] = j,
                    None => {
                        job_index.insert(j.id, jobs.len());
                        jobs.push(j);
                    }
                },
                Write::PutMeta(k, v) => match meta_index.get(k.as_str()) {
                    Some(&i) => meta[i] = (k, v),
                    None => {
                        meta_index.insert(k, meta.len());
                        meta.push((k, v));
                    }
                },
                Write::AppendEvent(e) => events.push(e),
                Write::AppendSamples(rows) => samples.extend(rows),
                Write::PutToken(_) | Write::DeleteToken(_) | Write::PutNode(_) | Write::DeleteNode(_) => {
                    in_order.push(w)
                }
            }
        }
        let st = &self.st;
        let mut tx = self.client.transaction()?;
        if self.leading {
            // Every commit of the leader renews its leadership.
            tx.execute(&st.renew, &[])?;
        }
        for chunk in jobs.chunks(CHUNK) {
            let ids = chunk.iter().map(|j| int(j.id, "job id")).collect::<Result<Vec<_>, _>>()?;
            let users: Vec<&str> = chunk.iter().map(|j| j.user.as_str()).collect();
            let teams: Vec<&str> = chunk.iter().map(|j| j.team.as_str()).collect();
            let queues: Vec<&str> = chunk.iter().map(|j| j.queue.as_str()).collect();
            let states: Vec<&str> = chunk.iter().map(|j| j.state.as_str()).collect();
            let submitted: Vec<i64> = chunk.iter().map(|j| j.submitted_ms).collect();
            let docs: Vec<&str> = chunk.iter().map(|j| j.doc.as_str()).collect();
            let ended: Vec<Option<i64>> = chunk.iter().map(|j| j.ended_ms).collect();
            tx.execute(&st.put_jobs, &[&ids, &users, &teams, &queues, &states, &submitted, &docs, &ended])?;
        }
        for chunk in events.chunks(CHUNK) {
            let seqs = chunk.iter().map(|e| int(e.seq, "event seq")).collect::<Result<Vec<_>, _>>()?;
            let at: Vec<i64> = chunk.iter().map(|e| e.at_ms).collect();
            let jobs =
                chunk.iter().map(|e| e.job.map(|j| int(j, "job id")).transpose()).collect::<Result<Vec<_>, _>>()?;
            let kinds: Vec<&str> = chunk.iter().map(|e| e.kind.as_str()).collect();
            let messages: Vec<&str> = chunk.iter().map(|e| e.message.as_str()).collect();
            tx.execute(&st.put_events, &[&seqs, &at, &jobs, &kinds, &messages])?;
        }
        for chunk in samples.chunks(CHUNK) {
            let jobs = chunk.iter().map(|r| int(r.job, "job id")).collect::<Result<Vec<_>, _>>()?;
            let at: Vec<i64> = chunk.iter().map(|r| r.at_ms).collect();
            let devices: Vec<&str> = chunk.iter().map(|r| r.device.as_str()).collect();
            let util: Vec<Option<f64>> = chunk.iter().map(|r| r.gpu_util).collect();
            let memory = chunk
                .iter()
                .map(|r| r.memory_mb.map(|m| int(m, "memory MiB")).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            let total = chunk.iter().map(|r| int(r.memory_total_mb, "memory MiB")).collect::<Result<Vec<_>, _>>()?;
            let cpu: Vec<Option<f64>> = chunk.iter().map(|r| r.cpu_cores).collect();
            tx.execute(&st.put_samples, &[&jobs, &at, &devices, &util, &memory, &total, &cpu])?;
        }
        for chunk in meta.chunks(CHUNK) {
            let keys: Vec<&str> = chunk.iter().map(|(k, _)| *k).collect();
            let values: Vec<&str> = chunk.iter().map(|(_, v)| *v).collect();
            tx.execute(&st.put_meta, &[&keys, &values])?;
        }
        for w in in_order {
            match w {
                Write::PutToken(t) => {
                    tx.execute(
                        &st.put_token,
                        &[&t.hash, &t.user, &t.team, &t.role, &t.created_ms, &t.expires_ms, &t.last_used_ms],
                    )?;
                }
                Write::DeleteToken(h) => {
                    tx.execute(&st.delete_token, &[h])?;
                }
                Write::PutNode(n) => {
                    tx.execute(&st.put_node, &[&n.name, &n.state, &n.doc, &n.updated_ms])?;
                }
                Write::DeleteNode(name) => {
                    tx.execute(&st.delete_node, &[name])?;
                }
                _ => {}
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn take_lead(&mut self, wait: bool) -> Result<bool, StoreError> {
        if self.leading {
            let [high, low] = split_key(Postgres::LEADER_KEY);
            let held: bool = self.client.query_one(&self.st.holds_lock, &[&high, &low])?.try_get(0)?;
            if held {
                return Ok(true);
            }
            self.leading = false;
            return Err(StoreError::Postgres(
                "this session no longer holds the leader lock; is a connection pooler between gpool and PostgreSQL?"
                    .into(),
            ));
        }
        if !wait {
            let got: bool = self.client.query_one(&self.st.try_lock, &[&Postgres::LEADER_KEY])?.try_get(0)?;
            if got {
                self.client.execute(&self.st.renew, &[])?;
            }
            self.leading = got;
            return Ok(got);
        }
        // Wait in rounds of LOCK_WAIT, whatever timeouts the role or database set.
        loop {
            let mut tx = self.client.transaction()?;
            tx.batch_execute(&format!("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '{LOCK_WAIT}'"))?;
            match tx.execute(&self.st.lock, &[&Postgres::LEADER_KEY]) {
                Ok(_) => {
                    // A session-level lock stays when its transaction ends.
                    tx.execute(&self.st.renew, &[])?;
                    tx.commit()?;
                    self.leading = true;
                    return Ok(true);
                }
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    tx.rollback()?;
                    // A leader that stopped renewing (stopped, hung, or cut
                    // off from the database while its session lives on) is
                    // ended, which frees the lock for the next round.
                    let lease = LEADER_LEASE.as_secs_f64();
                    self.client.query(&self.st.depose, &[&lease])?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The `classid` and `objid` under which `pg_locks` shows a bigint advisory key.
fn split_key(key: i64) -> [u32; 2] {
    let k = key as u64;
    [(k >> 32) as u32, (k & 0xffff_ffff) as u32]
}

/// Asks the server to notice a dead client within about 30 s (it would take
/// hours by default), and not to end an idle leader's session. Both sides
/// matter: the server's end holds the lock.
fn configure_session(client: &mut Client) -> Result<(), StoreError> {
    let version: i32 = client.query_one("SELECT current_setting('server_version_num')::int", &[])?.try_get(0)?;
    let mut sql =
        String::from("SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3;");
    if version >= 120_000 {
        sql.push_str(" SET tcp_user_timeout = 30000;");
    }
    if version >= 140_000 {
        sql.push_str(" SET idle_session_timeout = 0;");
    }
    client.batch_execute(&sql)?;
    Ok(())
}

/// Brings the schema to the newest version, one migration per transaction,
/// under an advisory lock so that concurrent control planes take turns.
fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let supported = MIGRATIONS.len() as u32;
    loop {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&Postgres::MIGRATE_KEY])?;
        let exists: bool = tx.query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?.try_get(0)?;
        if !exists {
            tx.batch_execute(
                "CREATE TABLE schema_version (\
                     one_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one_row), \
                     version INTEGER NOT NULL)",
            )?;
        }
        let found: i32 = match tx.query_opt("SELECT version FROM schema_version", &[])? {
            Some(row) => row.try_get(0)?,
            None => 0,
        };
        let found = u32::try_from(found)
            .map_err(|_| StoreError::OutOfRange { what: "schema version", value: i128::from(found) })?;
        if found > supported {
            return Err(StoreError::TooNew { found, supported });
        }
        let Some(sql) = MIGRATIONS.get(found as usize) else {
            tx.commit()?;
            return Ok(());
        };
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1) \
             ON CONFLICT (one_row) DO UPDATE SET version = EXCLUDED.version",
            &[&(found as i32 + 1)],
        )?;
        tx.commit()?;
    }
}

/// `url` without its password or query string, for error messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "<connection string>".into() };
    let rest = rest.split('?').next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{path}")
        }
        None => format!("{scheme}://{authority}{path}"),
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> StoreError {
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        // Class 57P: the server ended the session (shutdown, crash, terminate).
        let ended = e.code().is_some_and(|c| c.code().starts_with("57P"));
        if e.is_closed() || io || ended {
            StoreError::Disconnected(describe(&e))
        } else {
            StoreError::Postgres(describe(&e))
        }
    }
}

/// A u64 as the BIGINT that stores it.
fn int(v: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::OutOfRange { what, value: i128::from(v) })
}

/// A stored BIGINT as the u64 it holds.
fn uint(v: i64, what: &'static str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::OutOfRange { what, value: i128::from(v) })
}

fn job_row(r: &Row) -> Result<JobRow, StoreError> {
    Ok(JobRow {
        id: uint(r.try_get(0)?, "job id")?,
        user: r.try_get(1)?,
        team: r.try_get(2)?,
        queue: r.try_get(3)?,
        state: r.try_get(4)?,
        submitted_ms: r.try_get(5)?,
        doc: r.try_get(6)?,
        ended_ms: r.try_get(7)?,
    })
}

fn event_row(r: &Row) -> Result<EventRow, StoreError> {
    Ok(EventRow {
        seq: uint(r.try_get(0)?, "event seq")?,
        at_ms: r.try_get(1)?,
        job: r.try_get::<_, Option<i64>>(2)?.map(|j| uint(j, "job id")).transpose()?,
        kind: r.try_get(3)?,
        message: r.try_get(4)?,
    })
}

impl Postgres {
    /// Jobs that ended in a period, in the order they ended (then by id),
    /// a page after the job `after` in that order (the SQLite store's twin).
    fn jobs_by_end(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        let (from, before) = (q.ended_from.unwrap_or(i64::MIN), q.ended_before.unwrap_or(i64::MAX));
        let after = q.after.map(|a| i64::try_from(a).unwrap_or(i64::MAX));
        let q = q.clone();
        self.run(move |s| {
            let cursor = match after {
                None => None,
                Some(id) => s
                    .client
                    .query_opt("SELECT ended_ms FROM jobs WHERE id = $1", &[&id])?
                    .and_then(|r| r.get::<_, Option<i64>>(0))
                    .map(|e| (e, id)),
            };
            let (start, last_id) =
                cursor.map_or((from, i64::MIN), |(e, id)| (e.max(from), if e < from { i64::MIN } else { id }));
            let limit = i64::from(q.limit.max(1));
            let mut sql = format!(
                "SELECT {JOB_COLS} FROM jobs WHERE ended_ms >= $1 AND ended_ms < $2 AND (ended_ms > $1 OR id > $3)"
            );
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&start, &before, &last_id];
            for (col, v) in [("user_name", &q.user), ("queue", &q.queue), ("team", &q.team)] {
                if let Some(v) = v {
                    params.push(v);
                    sql.push_str(&format!(" AND {col} = ${}", params.len()));
                }
            }
            if !q.states.is_empty() {
                params.push(&q.states);
                sql.push_str(&format!(" AND state = ANY(${})", params.len()));
            }
            params.push(&limit);
            sql.push_str(&format!(" ORDER BY ended_ms, id LIMIT ${}", params.len()));
            s.client.query(&sql, &params)?.iter().map(job_row).collect()
        })
    }
}

impl Store for Postgres {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    /// One transaction of at most a few multi-row statements per table.
    fn commit(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.run(|s| s.commit_batch(writes))
    }

    fn job(&mut self, id: u64) -> Result<Option<JobRow>, StoreError> {
        let Ok(id) = i64::try_from(id) else { return Ok(None) };
        self.run(|s| s.client.query_opt(&s.st.job, &[&id])?.as_ref().map(job_row).transpose())
    }

    fn jobs(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        if q.by_end() {
            return self.jobs_by_end(q);
        }
        let Ok(after) = i64::try_from(q.after.unwrap_or(0)) else { return Ok(Vec::new()) };
        let limit = i64::from(q.limit.max(1));
        let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE id > $1");
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after];
        if let Some(u) = &q.user {
            params.push(u);
            sql.push_str(&format!(" AND user_name = ${}", params.len()));
        }
        if let Some(qu) = &q.queue {
            params.push(qu);
            sql.push_str(&format!(" AND queue = ${}", params.len()));
        }
        if let Some(t) = &q.team {
            params.push(t);
            sql.push_str(&format!(" AND team = ${}", params.len()));
        }
        if !q.states.is_empty() {
            params.push(&q.states);
            sql.push_str(&format!(" AND state = ANY(${})", params.len()));
        }
        params.push(&limit);
        sql.push_str(&format!(" ORDER BY id LIMIT ${}", params.len()));
        self.run(|s| s.client.query(&sql, &params)?.iter().map(job_row).collect())
    }

    fn jobs_in_states(&mut self, states: &[&str]) -> Result<Vec<JobRow>, StoreError> {
        self.run(|s| s.client.query(&s.st.jobs_in_states, &[&states])?.iter().map(job_row).collect())
    }

    fn max_job_id(&mut self) -> Result<u64, StoreError> {
        self.run(|s| uint(s.client.query_one(&s.st.max_job_id, &[])?.try_get(0)?, "job id"))
    }

    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        self.run(|s| {
            s.client
                .query(&s.st.tokens, &[])?
                .iter()
                .map(|r| {
                    Ok(TokenRow {
                        hash: r.try_get(0)?,
                        user: r.try_get(1)?,
                        team: r.try_get(2)?,
                        role: r.try_get(3)?,
                        created_ms: r.try_get(4)?,
                        expires_ms: r.try_get(5)?,
                        last_used_ms: r.try_get(6)?,
                    })
                })
                .collect()
        })
    }

    fn events(&mut self, after: u64, job: Option<u64>, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        let Ok(after) = i64::try_from(after) else { return Ok(Vec::new()) };
        let limit = i64::from(limit.max(1));
        let job = match job.map(i64::try_from) {
            None => None,
            Some(Ok(j)) => Some(j),
            Some(Err(_)) => return Ok(Vec::new()),
        };
        self.run(|s| {
            let rows = match job {
                Some(j) => s.client.query(&s.st.job_events, &[&after, &j, &limit])?,
                None => s.client.query(&s.st.events, &[&after, &limit])?,
            };
            rows.iter().map(event_row).collect()
        })
    }

    fn max_event_seq(&mut self) -> Result<u64, StoreError> {
        self.run(|s| uint(s.client.query_one(&s.st.max_event_seq, &[])?.try_get(0)?, "event seq"))
    }

    fn meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        self.run(|s| Ok(s.client.query_opt(&s.st.meta, &[&key])?.map(|r| r.try_get(0)).transpose()?))
    }

    fn samples(&mut self, job: u64) -> Result<Vec<SampleRow>, StoreError> {
        let Ok(job) = i64::try_from(job) else { return Ok(Vec::new()) };
        self.run(|s| {
            s.client
                .query(&s.st.samples, &[&job])?
                .iter()
                .map(|r| {
                    Ok(SampleRow {
                        job: uint(r.try_get(0)?, "job id")?,
                        at_ms: r.try_get(1)?,
                        device: r.try_get(2)?,
                        gpu_util: r.try_get(3)?,
                        memory_mb: r.try_get::<_, Option<i64>>(4)?.map(|m| uint(m, "memory MiB")).transpose()?,
                        memory_total_mb: uint(r.try_get(5)?, "memory MiB")?,
                        cpu_cores: r.try_get(6)?,
                    })
                })
                .collect()
        })
    }

    fn nodes(&mut self) -> Result<Vec<NodeRow>, StoreError> {
        self.run(|s| {
            s.client
                .query(&s.st.nodes, &[])?
                .iter()
                .map(|r| {
                    Ok(NodeRow {
                        name: r.try_get(0)?,
                        state: r.try_get(1)?,
                        doc: r.try_get(2)?,
                        updated_ms: r.try_get(3)?,
                    })
                })
                .collect()
        })
    }

    /// Takes the session-level advisory lock [`Postgres::LEADER_KEY`] on
    /// this store's connection; see the module documentation.
    fn lead(&mut self, wait: bool) -> Result<bool, StoreError> {
        self.run(|s| s.take_lead(wait))
    }

    fn renew(&mut self) -> Result<(), StoreError> {
        if !self.leading {
            return Ok(());
        }
        self.run(|s| {
            s.client.execute(&s.st.renew, &[])?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
mod tls;
