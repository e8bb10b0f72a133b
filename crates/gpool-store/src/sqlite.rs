//! The embedded SQLite store (WAL).
//!
//! Durability: `synchronous=NORMAL` in WAL mode survives a crash of the
//! process (`kill -9`) at any moment: committed transactions are in the WAL,
//! which the OS holds. Surviving power loss needs `synchronous=FULL`
//! ([`Sqlite::open`] with `fsync: true`), at a cost per commit.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::reserve::Reserve;
use crate::{EventRow, JobQuery, JobRow, NodeRow, SampleRow, Store, StoreError, TokenRow, Write};

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_init.sql"),
    include_str!("../migrations/sqlite/0002_job_samples.sql"),
    include_str!("../migrations/sqlite/0003_nodes.sql"),
    include_str!("../migrations/sqlite/0004_token_lifecycle.sql"),
    include_str!("../migrations/sqlite/0005_job_ended.sql"),
];

/// The schema version this gpool writes (and the newest it opens).
pub(crate) fn schema_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// A SQLite database file.
pub struct Sqlite {
    conn: Connection,
    /// `<database>.lock`, locked while this store leads (`None` in memory).
    lock_path: Option<std::path::PathBuf>,
    lock: Option<std::fs::File>,
    /// Room kept on the database's disk (`None`: none kept, or in memory).
    reserve: Option<Reserve>,
    /// The database file (empty in memory), for errors.
    path: std::path::PathBuf,
}

impl Sqlite {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path, fsync: bool) -> Result<Sqlite, StoreError> {
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Open { path: path.display().to_string(), why: e.to_string() })?;
        let mut s = Sqlite::init(conn, fsync)?;
        s.path = path.into();
        let mut lock = path.as_os_str().to_owned();
        lock.push(".lock");
        s.lock_path = Some(lock.into());
        Ok(s)
    }

    /// Keeps `bytes` of room beside the database for when its disk fills
    /// (`reserve.rs`); 0 keeps none. Nothing for an in-memory database.
    pub fn with_reserve(mut self, bytes: u64) -> Sqlite {
        if bytes > 0 && !self.path.as_os_str().is_empty() {
            self.reserve = Some(Reserve::keep(&self.path, bytes));
        }
        self
    }

    /// A private in-memory database (tests).
    pub fn memory() -> Result<Sqlite, StoreError> {
        Sqlite::init(Connection::open_in_memory()?, false)
    }

    fn init(conn: Connection, fsync: bool) -> Result<Sqlite, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", if fsync { "FULL" } else { "NORMAL" })?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut s = Sqlite { conn, lock_path: None, lock: None, reserve: None, path: Default::default() };
        s.migrate()?;
        Ok(s)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: u32 = self.conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let supported = MIGRATIONS.len() as u32;
        if version > supported {
            return Err(StoreError::TooNew { found: version, supported });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self.conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as u32 + 1)?;
            tx.commit()?;
        }
        Ok(())
    }
}

fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        id: r.get::<_, i64>(0)? as u64,
        user: r.get(1)?,
        team: r.get(2)?,
        queue: r.get(3)?,
        state: r.get(4)?,
        submitted_ms: r.get(5)?,
        doc: r.get(6)?,
        ended_ms: r.get(7)?,
    })
}

const JOB_COLS: &str = "id, user_name, team, queue, state, submitted_ms, doc, ended_ms";

impl Sqlite {
    /// One transaction with every write.
    fn commit_once(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut put_job = tx.prepare_cached(
                "INSERT OR REPLACE INTO jobs (id, user_name, team, queue, state, submitted_ms, doc, ended_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            let mut put_event = tx
                .prepare_cached("INSERT INTO events (seq, at_ms, job_id, kind, message) VALUES (?1, ?2, ?3, ?4, ?5)")?;
            for w in writes {
                match w {
                    Write::PutJob(j) => {
                        put_job.execute(params![
                            j.id as i64,
                            j.user,
                            j.team,
                            j.queue,
                            j.state,
                            j.submitted_ms,
                            j.doc,
                            j.ended_ms
                        ])?;
                    }
                    Write::PutToken(t) => {
                        tx.execute(
                            "INSERT OR REPLACE INTO tokens (hash, user_name, team, role, created_ms, expires_ms, last_used_ms) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                            params![t.hash, t.user, t.team, t.role, t.created_ms, t.expires_ms, t.last_used_ms],
                        )?;
                    }
                    Write::DeleteToken(h) => {
                        tx.execute("DELETE FROM tokens WHERE hash = ?1", params![h])?;
                    }
                    Write::AppendEvent(e) => {
                        put_event.execute(params![
                            e.seq as i64,
                            e.at_ms,
                            e.job.map(|j| j as i64),
                            e.kind,
                            e.message
                        ])?;
                    }
                    Write::PutMeta(k, v) => {
                        tx.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)", params![k, v])?;
                    }
                    Write::PutNode(n) => {
                        tx.execute(
                            "INSERT OR REPLACE INTO nodes (name, state, doc, updated_ms) VALUES (?1, ?2, ?3, ?4)",
                            params![n.name, n.state, n.doc, n.updated_ms],
                        )?;
                    }
                    Write::DeleteNode(name) => {
                        tx.execute("DELETE FROM nodes WHERE name = ?1", params![name])?;
                    }
                    Write::AppendSamples(rows) => {
                        let mut put = tx.prepare_cached(
                            "INSERT INTO job_samples (job_id, at_ms, device, gpu_util, memory_mb, memory_total, cpu_cores) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        )?;
                        for r in rows {
                            put.execute(params![
                                r.job as i64,
                                r.at_ms,
                                r.device,
                                r.gpu_util,
                                r.memory_mb.map(|m| m as i64),
                                r.memory_total_mb as i64,
                                r.cpu_cores
                            ])?;
                        }
                    }
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// SQLite's "database or disk is full".
fn is_disk_full(e: &StoreError) -> bool {
    matches!(e, StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DiskFull)
}

impl Sqlite {
    /// Jobs that ended in a period, in the order they ended (then by id),
    /// a page after the job `after` in that order: a range of the
    /// `jobs_ended` index, whatever the period's width (`gpool acct`).
    fn jobs_by_end(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        let (from, before) = (q.ended_from.unwrap_or(i64::MIN), q.ended_before.unwrap_or(i64::MAX));
        let cursor: Option<(i64, i64)> = match q.after {
            None => None,
            Some(id) => self
                .conn
                .query_row("SELECT ended_ms FROM jobs WHERE id = ?1", [id as i64], |r| r.get::<_, Option<i64>>(0))
                .optional()?
                .flatten()
                .map(|e| (e, id as i64)),
        };
        let (start, last_id) =
            cursor.map_or((from, i64::MIN), |(e, id)| (e.max(from), if e < from { i64::MIN } else { id }));
        let mut sql = format!(
            "SELECT {JOB_COLS} FROM jobs WHERE ended_ms >= ?1 AND ended_ms < ?2 AND (ended_ms > ?1 OR id > ?3)"
        );
        let mut args: Vec<rusqlite::types::Value> = vec![start.into(), before.into(), last_id.into()];
        for (col, v) in [("user_name", &q.user), ("queue", &q.queue), ("team", &q.team)] {
            if let Some(v) = v {
                args.push(v.clone().into());
                sql.push_str(&format!(" AND {col} = ?{}", args.len()));
            }
        }
        if !q.states.is_empty() {
            let mut marks = Vec::new();
            for s in &q.states {
                args.push(s.clone().into());
                marks.push(format!("?{}", args.len()));
            }
            sql.push_str(&format!(" AND state IN ({})", marks.join(", ")));
        }
        args.push(i64::from(q.limit.max(1)).into());
        sql.push_str(&format!(" ORDER BY ended_ms, id LIMIT ?{}", args.len()));
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), job_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl Store for Sqlite {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn commit(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let done = match self.commit_once(writes) {
            Err(e) if is_disk_full(&e) && self.reserve.as_mut().is_some_and(Reserve::spend) => self.commit_once(writes),
            done => done,
        };
        match done {
            Ok(()) => Ok(()),
            Err(e) if is_disk_full(&e) => Err(StoreError::DiskFull { path: self.path.display().to_string() }),
            Err(e) => Err(e),
        }
    }

    fn disk_full(&mut self) -> bool {
        let Some(r) = &mut self.reserve else { return false };
        r.refill();
        r.spent()
    }

    fn job(&mut self, id: u64) -> Result<Option<JobRow>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(&format!("SELECT {JOB_COLS} FROM jobs WHERE id = ?1"))?
            .query_row(params![id as i64], job_row)
            .optional()?)
    }

    fn jobs(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        if q.by_end() {
            return self.jobs_by_end(q);
        }
        let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE id > ?1");
        let mut args: Vec<rusqlite::types::Value> = vec![(q.after.unwrap_or(0) as i64).into()];
        if let Some(u) = &q.user {
            args.push(u.clone().into());
            sql.push_str(&format!(" AND user_name = ?{}", args.len()));
        }
        if let Some(qu) = &q.queue {
            args.push(qu.clone().into());
            sql.push_str(&format!(" AND queue = ?{}", args.len()));
        }
        if let Some(t) = &q.team {
            args.push(t.clone().into());
            sql.push_str(&format!(" AND team = ?{}", args.len()));
        }
        if !q.states.is_empty() {
            let mut marks = Vec::new();
            for s in &q.states {
                args.push(s.clone().into());
                marks.push(format!("?{}", args.len()));
            }
            sql.push_str(&format!(" AND state IN ({})", marks.join(", ")));
        }
        args.push(i64::from(q.limit.max(1)).into());
        sql.push_str(&format!(" ORDER BY id LIMIT ?{}", args.len()));
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), job_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn jobs_in_states(&mut self, states: &[&str]) -> Result<Vec<JobRow>, StoreError> {
        let marks: Vec<String> = (1..=states.len()).map(|i| format!("?{i}")).collect();
        let sql = format!("SELECT {JOB_COLS} FROM jobs WHERE state IN ({}) ORDER BY id", marks.join(", "));
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(states.iter()), job_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn max_job_id(&mut self) -> Result<u64, StoreError> {
        let v: Option<i64> = self.conn.query_row("SELECT MAX(id) FROM jobs", [], |r| r.get(0))?;
        Ok(v.unwrap_or(0) as u64)
    }

    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT hash, user_name, team, role, created_ms, expires_ms, last_used_ms FROM tokens ORDER BY created_ms",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(TokenRow {
                hash: r.get(0)?,
                user: r.get(1)?,
                team: r.get(2)?,
                role: r.get(3)?,
                created_ms: r.get(4)?,
                expires_ms: r.get(5)?,
                last_used_ms: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn events(&mut self, after: u64, job: Option<u64>, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        let map = |r: &rusqlite::Row<'_>| -> rusqlite::Result<EventRow> {
            Ok(EventRow {
                seq: r.get::<_, i64>(0)? as u64,
                at_ms: r.get(1)?,
                job: r.get::<_, Option<i64>>(2)?.map(|j| j as u64),
                kind: r.get(3)?,
                message: r.get(4)?,
            })
        };
        let limit = i64::from(limit.max(1));
        let rows: Vec<EventRow> = match job {
            Some(j) => self
                .conn
                .prepare_cached("SELECT seq, at_ms, job_id, kind, message FROM events WHERE seq > ?1 AND job_id = ?2 ORDER BY seq LIMIT ?3")?
                .query_map(params![after as i64, j as i64, limit], map)?
                .collect::<Result<_, _>>()?,
            None => self
                .conn
                .prepare_cached("SELECT seq, at_ms, job_id, kind, message FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2")?
                .query_map(params![after as i64, limit], map)?
                .collect::<Result<_, _>>()?,
        };
        Ok(rows)
    }

    fn max_event_seq(&mut self) -> Result<u64, StoreError> {
        let v: Option<i64> = self.conn.query_row("SELECT MAX(seq) FROM events", [], |r| r.get(0))?;
        Ok(v.unwrap_or(0) as u64)
    }

    fn meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.conn.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0)).optional()?)
    }

    fn nodes(&mut self) -> Result<Vec<NodeRow>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT name, state, doc, updated_ms FROM nodes ORDER BY name")?;
        let rows = stmt.query_map([], |r| {
            Ok(NodeRow { name: r.get(0)?, state: r.get(1)?, doc: r.get(2)?, updated_ms: r.get(3)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Leadership is an exclusive lock on `<database>.lock`, held by this store.
    fn lead(&mut self, wait: bool) -> Result<bool, StoreError> {
        if self.lock.is_some() {
            return Ok(true);
        }
        let Some(path) = &self.lock_path else { return Ok(true) };
        let open_err = |e: std::io::Error| StoreError::Open { path: path.display().to_string(), why: e.to_string() };
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(open_err)?;
        let held = if wait {
            f.lock().map_err(open_err)?;
            true
        } else {
            match f.try_lock() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => false,
                Err(std::fs::TryLockError::Error(e)) => return Err(open_err(e)),
            }
        };
        if held {
            self.lock = Some(f);
        }
        Ok(held)
    }

    fn samples(&mut self, job: u64) -> Result<Vec<SampleRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id, at_ms, device, gpu_util, memory_mb, memory_total, cpu_cores FROM job_samples WHERE job_id = ?1 ORDER BY at_ms, device",
        )?;
        let rows = stmt.query_map(params![job as i64], |r| {
            Ok(SampleRow {
                job: r.get::<_, i64>(0)? as u64,
                at_ms: r.get(1)?,
                device: r.get(2)?,
                gpu_util: r.get(3)?,
                memory_mb: r.get::<_, Option<i64>>(4)?.map(|m| m as u64),
                memory_total_mb: r.get::<_, i64>(5)? as u64,
                cpu_cores: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    #[test]
    fn sqlite_passes_the_conformance_suite() {
        conformance::run_all(&mut || Box::new(Sqlite::memory().expect("memory db")));
        let dir = std::env::temp_dir().join(format!("gpool-store-lead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("state.db");
        conformance::leadership_is_exclusive(&mut || Box::new(Sqlite::open(&path, false).expect("open")));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_file_database_keeps_commits_across_reopen() {
        let dir = std::env::temp_dir().join(format!("gpool-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("state.db");
        {
            let mut s = Sqlite::open(&path, false).expect("open");
            s.commit(&[Write::PutMeta("k".into(), "v".into())]).expect("commit");
        }
        let mut s = Sqlite::open(&path, false).expect("reopen");
        assert_eq!(s.meta("k").expect("meta"), Some("v".into()));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// The last release's state upgrades: jobs that ended before the
    /// column existed are found by when they ended, from their documents.
    #[test]
    fn jobs_ended_before_the_column_existed_are_found_by_their_end() {
        let conn = Connection::open_in_memory().expect("db");
        for sql in &MIGRATIONS[..4] {
            conn.execute_batch(sql).expect("old schema");
        }
        conn.pragma_update(None, "user_version", 4).expect("version");
        conn.execute(
            "INSERT INTO jobs (id, user_name, team, queue, state, submitted_ms, doc) VALUES \
             (1, 'a', 't', 'q', 'succeeded', 0, '{\"id\":1,\"ended_ms\":5000}'), \
             (2, 'a', 't', 'q', 'running', 0, '{\"id\":2}')",
            [],
        )
        .expect("rows");
        let mut s = Sqlite::init(conn, false).expect("upgrade");
        assert_eq!(s.job(1).expect("job").and_then(|j| j.ended_ms), Some(5000));
        assert_eq!(s.job(2).expect("job").and_then(|j| j.ended_ms), None);
        let q = JobQuery { ended_from: Some(1000), limit: 10, ..JobQuery::default() };
        assert_eq!(s.jobs(&q).expect("query").iter().map(|j| j.id).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let conn = Connection::open_in_memory().expect("db");
        conn.pragma_update(None, "user_version", 99).expect("pragma");
        assert!(matches!(Sqlite::init(conn, false), Err(StoreError::TooNew { found: 99, .. })));
    }
}
