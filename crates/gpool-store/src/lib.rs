//! # gpool-store
//!
//! The control plane's durable state behind one trait, [`Store`]. The
//! controller owns one store and writes each batch of changes in a single
//! transaction ([`Store::commit`]) before it answers anyone: a submission
//! acknowledged with 2xx has been committed.
//!
//! Rows carry the columns queries filter on plus a JSON document the
//! controller owns; the store does not interpret documents.
//!
//! ## Backends
//!
//! [`open`] picks one by URL; both pass the same [`conformance`] suite.
//!
//! - [`Sqlite`]: a database file next to a single control plane (WAL, no
//!   server to run). Several control planes can only share it on one
//!   machine.
//! - [`Postgres`]: a PostgreSQL database several control planes share, one
//!   leading and the others standing by. One connection per store, without
//!   TLS (loopback or private networks), never reconnected: a store whose
//!   connection breaks fails every call with [`StoreError::Disconnected`].
//!
//! Each backend migrates its schema when opened (`migrations/sqlite/`,
//! `migrations/postgres/`, the same tables) and refuses a database a newer
//! gpool migrated ([`StoreError::TooNew`]).
//!
//! ## Leadership
//!
//! Only the leader writes; [`Store::lead`] makes a store's holder the
//! leader, and it stays so while the store lives:
//!
//! - SQLite: an exclusive lock on the file `<database>.lock`, which the
//!   operating system releases when the process dies.
//! - PostgreSQL: the session-level advisory lock [`Postgres::LEADER_KEY`]
//!   on the connection the store also writes with. The server releases it
//!   when that session ends: at once when the leader's process dies, within
//!   about 30 s (TCP keepalives) when its machine or network does. A
//!   standby blocked in `lead(true)` then takes over; the old leader's
//!   store fails instead of reconnecting, so it cannot write believing it
//!   still leads.
//!
//! Neither backend fences writes: a store that does not lead can still
//! commit, so the controller must not write before `lead` says it leads.
//!
//! The throwaway PostgreSQL server of the tests and the chaos suite is
//! `gpool-testpg`, a crate of its own so that the `gpool` binary does not carry it.

pub mod backup;
pub mod conformance;
mod pg_error;
mod postgres;
mod reserve;
mod sqlite;

pub use postgres::Postgres;
pub use sqlite::Sqlite;

/// A job row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    pub id: u64,
    pub user: String,
    pub team: String,
    pub queue: String,
    pub state: String,
    pub submitted_ms: i64,
    /// When it ended (ms since the epoch); `None` while it has not.
    pub ended_ms: Option<i64>,
    pub doc: String,
}

/// An API token row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    /// Hex SHA-256 of the secret.
    pub hash: String,
    pub user: String,
    pub team: String,
    pub role: String,
    pub created_ms: i64,
    /// When it stops being accepted (ms since the epoch); `None`: never.
    pub expires_ms: Option<i64>,
    /// When it was last used, to the minute.
    pub last_used_ms: Option<i64>,
}

/// An event row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    pub seq: u64,
    pub at_ms: i64,
    pub job: Option<u64>,
    pub kind: String,
    pub message: String,
}

/// One downsampled telemetry point of a job's device.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRow {
    pub job: u64,
    pub at_ms: i64,
    /// `node/gpu3`, or `node/gpu0/mig-2` for a MIG instance.
    pub device: String,
    /// Mean utilisation over the interval, percent; absent where the device reports none.
    pub gpu_util: Option<f64>,
    /// Peak memory used over the interval, MiB.
    pub memory_mb: Option<u64>,
    pub memory_total_mb: u64,
    /// Mean CPU cores the job's processes used (the same on each device row).
    pub cpu_cores: Option<f64>,
}

/// A node of the cluster as the control plane remembers it (so that a
/// restarted or standby control plane knows its nodes, and a drain holds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    pub name: String,
    /// `up`, `draining` or `down`.
    pub state: String,
    /// The controller's JSON document (inventory, labels, address).
    pub doc: String,
    pub updated_ms: i64,
}

/// One change, applied with the others of its batch or not at all.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Insert or replace a job.
    PutJob(JobRow),
    PutToken(TokenRow),
    DeleteToken(String),
    AppendEvent(EventRow),
    PutMeta(String, String),
    AppendSamples(Vec<SampleRow>),
    /// Insert or replace a node.
    PutNode(NodeRow),
    DeleteNode(String),
}

/// A page of jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobQuery {
    pub user: Option<String>,
    pub queue: Option<String>,
    /// Any of these states (empty = all).
    pub states: Vec<String>,
    pub team: Option<String>,
    /// Only jobs that ended at or after this time (ms since the epoch; `gpool
    /// acct`). With either end given, jobs come in the order they ended
    /// ([`JobQuery::by_end`]).
    pub ended_from: Option<i64>,
    /// Only jobs that ended before this time.
    pub ended_before: Option<i64>,
    /// Only ids greater than this (pagination cursor).
    pub after: Option<u64>,
    pub limit: u32,
}

impl JobQuery {
    /// A query for jobs that ended in a period: answered in the order they
    /// ended, `after` naming the last job of the previous page in that order.
    pub fn by_end(&self) -> bool {
        self.ended_from.is_some() || self.ended_before.is_some()
    }
}

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot open the database at {path}: {why}")]
    Open { path: String, why: String },
    #[error(
        "the database schema is version {found}, newer than the {supported} that gpool {} writes; upgrade gpool",
        env!("CARGO_PKG_VERSION")
    )]
    TooNew { found: u32, supported: u32 },
    #[error("PostgreSQL error: {0}")]
    Postgres(String),
    /// The disk holding the database is full and the room kept for that is spent.
    #[error(
        "the disk holding {path} is full and the room gpool keeps there (--state-reserve) is spent: \
         free space on that disk"
    )]
    DiskFull { path: String },
    /// The connection to PostgreSQL is gone, and leadership with it: the
    /// store does not reconnect; open a new one.
    #[error("lost the connection to PostgreSQL (and leadership with it): {0}")]
    Disconnected(String),
    /// A value the database cannot hold (an id above `i64::MAX`), or a
    /// stored one this gpool cannot read.
    #[error("{what} {value} is out of the range the database stores")]
    OutOfRange { what: &'static str, value: i128 },
}

/// Durable state of the control plane.
pub trait Store: Send {
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// Applies all writes in one transaction.
    fn commit(&mut self, writes: &[Write]) -> Result<(), StoreError>;
    fn job(&mut self, id: u64) -> Result<Option<JobRow>, StoreError>;
    /// Jobs matching the query, by ascending id, at most `limit`.
    fn jobs(&mut self, q: &JobQuery) -> Result<Vec<JobRow>, StoreError>;
    /// Jobs in any of these states (the controller loads non-terminal ones at start).
    fn jobs_in_states(&mut self, states: &[&str]) -> Result<Vec<JobRow>, StoreError>;
    fn max_job_id(&mut self) -> Result<u64, StoreError>;
    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError>;
    /// Events with `seq > after`, at most `limit`, for one job or all.
    fn events(&mut self, after: u64, job: Option<u64>, limit: u32) -> Result<Vec<EventRow>, StoreError>;
    fn max_event_seq(&mut self) -> Result<u64, StoreError>;
    fn meta(&mut self, key: &str) -> Result<Option<String>, StoreError>;
    /// A job's telemetry rows, by time.
    fn samples(&mut self, job: u64) -> Result<Vec<SampleRow>, StoreError>;
    /// Every node, by name.
    fn nodes(&mut self) -> Result<Vec<NodeRow>, StoreError>;
    /// Makes this store's holder the only control plane writing to the
    /// database. With `wait`, blocks until that is so (a standby waits here
    /// for the leader to go); without, returns at once whether it is.
    /// Leadership lasts as long as this store (its connection, its lock).
    fn lead(&mut self, wait: bool) -> Result<bool, StoreError>;
    /// Tells the other control planes that this leader is alive (PostgreSQL:
    /// a standby deposes a leader silent for `LEADER_LEASE`). The leader's
    /// shell calls it at least every second; commits renew too. A no-op for
    /// a store that is not leading, and for SQLite, whose lock is a file.
    fn renew(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The database's disk filled up and the store spent the room it kept
    /// for that (SQLite, `reserve.rs`): commits still succeed, but the
    /// control plane must refuse what would fill the disk further until
    /// this is false again. Asking takes the room back when the disk has it.
    fn disk_full(&mut self) -> bool {
        false
    }
}

/// Opens a store from a URL: `postgres://user@host:port/db` (or
/// `postgresql://…`), `sqlite:///abs/path.db`, `sqlite://rel/path.db`, or a
/// plain file path (SQLite).
pub fn open(url: &str, fsync: bool) -> Result<Box<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(Postgres::connect(url)?));
    }
    let path = url.strip_prefix("sqlite://").unwrap_or(url);
    if path.is_empty() {
        return Err(StoreError::Open {
            path: url.into(),
            why: "no path (expected e.g. sqlite:///var/lib/gpool/state.db)".into(),
        });
    }
    Ok(Box::new(Sqlite::open(std::path::Path::new(path), fsync)?))
}
