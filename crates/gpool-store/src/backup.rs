//! Backups of the embedded (SQLite) store, for `gpool admin backup` and
//! `gpool admin restore` (docs/operations.md).
//!
//! - A backup is taken with SQLite's online backup API from a read-only
//!   connection: a daemon may run and write meanwhile (the store is in WAL
//!   mode, so the copy is one consistent snapshot), and the source is never
//!   migrated or locked. The copy is written beside the target and renamed
//!   into place once it passed `PRAGMA integrity_check`, so a target either
//!   does not exist or is whole.
//! - A restore refuses while a daemon leads the store (it holds
//!   `<database>.lock`), refuses a file that is not a whole gpool store or is
//!   newer than this gpool, keeps the store it replaces beside it
//!   (`state.db.before-restore-<unix seconds>`), and puts the backup in place
//!   the same way. The next start migrates it if it is older.
//!
//! PostgreSQL stores are backed up with `pg_dump` (docs/operations.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::StoreError;

/// What a backup or restore copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    /// The store's schema version (`PRAGMA user_version`).
    pub schema: u32,
    /// Jobs in it.
    pub jobs: u64,
    /// Tokens in it.
    pub tokens: u64,
    /// The file's size.
    pub bytes: u64,
}

/// Why a backup or restore was refused.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{path}: {why}")]
    Io { path: String, why: String },
    #[error("{path} is not a gpool store: {why}")]
    NotAStore { path: String, why: String },
    #[error("{path} already exists: name a new file (a backup never overwrites one)")]
    Exists { path: String },
    #[error(
        "a gpool daemon is running on {path} (it holds {lock}): stop it first (systemctl stop gpool-up), then restore"
    )]
    Running { path: String, lock: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BackupError + '_ {
    move |e| BackupError::Io { path: path.display().to_string(), why: e.to_string() }
}

fn open_read_only(path: &Path) -> Result<Connection, BackupError> {
    if !path.is_file() {
        return Err(BackupError::NotAStore { path: path.display().to_string(), why: "no such file".into() });
    }
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| BackupError::NotAStore { path: path.display().to_string(), why: e.to_string() })
}

/// Checks that `conn` (read from `path`) holds a whole gpool store this gpool can open, and says what is in it.
fn inspect(conn: &Connection, path: &Path) -> Result<Copied, BackupError> {
    let not = |why: String| BackupError::NotAStore { path: path.display().to_string(), why };
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).map_err(|e| not(e.to_string()))?;
    if check != "ok" {
        return Err(not(format!("integrity_check says {check}")));
    }
    let schema: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| not(e.to_string()))?;
    let supported = crate::sqlite::schema_version();
    if schema > supported {
        return Err(StoreError::TooNew { found: schema, supported }.into());
    }
    let count = |table: &str| -> Result<u64, BackupError> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| not(format!("no {table} table ({e})")))
    };
    let bytes = std::fs::metadata(path).map_err(io(path))?.len();
    Ok(Copied { schema, jobs: count("jobs")?, tokens: count("tokens")?, bytes })
}

/// `file` with `suffix` added to its name.
fn beside(file: &Path, suffix: &str) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

/// Writes `from` to `to` through a file beside it, checked, synced and renamed into place.
fn put_in_place(to: &Path, write: impl FnOnce(&Path) -> Result<(), BackupError>) -> Result<Copied, BackupError> {
    let partial = beside(to, ".partial");
    let _ = std::fs::remove_file(&partial);
    let done = write(&partial).and_then(|()| {
        let copied = inspect(&open_read_only(&partial)?, &partial)?;
        std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(io(&partial))?;
        Ok(copied)
    });
    match done {
        Ok(copied) => {
            std::fs::rename(&partial, to).map_err(io(to))?;
            if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
                let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
            }
            Ok(copied)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// Copies the store at `db` to a new file `to`, while a daemon may be using it.
pub fn backup(db: &Path, to: &Path) -> Result<Copied, BackupError> {
    if to.exists() {
        return Err(BackupError::Exists { path: to.display().to_string() });
    }
    let src = open_read_only(db)?;
    inspect(&src, db)?;
    put_in_place(to, |partial| {
        private_file(partial)?;
        let mut dst = Connection::open(partial)
            .map_err(|e| BackupError::Io { path: partial.display().to_string(), why: e.to_string() })?;
        let b = rusqlite::backup::Backup::new(&src, &mut dst).map_err(StoreError::from)?;
        // Every page in one step, one read transaction: in WAL mode it does
        // not block the daemon's writes, and their writes cannot restart it
        // (copied a few pages at a time, a store written more often than one
        // copy takes would be copied forever).
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match b.step(-1).map_err(StoreError::from)? {
                rusqlite::backup::StepResult::Done => break,
                _ if std::time::Instant::now() > until => {
                    return Err(BackupError::Io {
                        path: db.display().to_string(),
                        why: "busy for a minute: try again".into(),
                    });
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        drop(b);
        // A backup is one file: no WAL beside it.
        dst.pragma_update(None, "journal_mode", "DELETE").map_err(StoreError::from)?;
        Ok(())
    })
}

/// Puts the backup `from` in place of the store at `db`, keeping the
/// store it replaces beside it; returns what was restored and where the
/// old store went (`None`: there was none).
pub fn restore(from: &Path, db: &Path, now_s: u64) -> Result<(Copied, Option<PathBuf>), BackupError> {
    // Nobody leads the store, and nobody starts to while it is replaced:
    // `gpool serve` holds `<database>.lock` while it leads, `gpool up` its
    // data directory's `daemon.lock` while it runs.
    let dir = db.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let _held = [beside(db, ".lock"), dir.join("daemon.lock")]
        .iter()
        .map(|lock| hold(lock, db))
        .collect::<Result<Vec<_>, _>>()?;
    inspect(&open_read_only(from)?, from)?;
    // The backup is copied and checked beside the store first: a copy that
    // fails (a full disk) leaves the store as it was.
    let partial = beside(db, ".partial");
    let _ = std::fs::remove_file(&partial);
    let copied = (|| {
        private_file(&partial)?;
        let mut src = std::fs::File::open(from).map_err(io(from))?;
        let mut dst = std::fs::OpenOptions::new().write(true).truncate(true).open(&partial).map_err(io(&partial))?;
        std::io::copy(&mut src, &mut dst).map_err(io(&partial))?;
        dst.sync_all().map_err(io(&partial))?;
        inspect(&open_read_only(&partial)?, &partial)
    })();
    let copied = match copied {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    // The restored store belongs to whoever owns its directory (the daemon's
    // account: `gpool` under gpool-serve), not to the one who restored it.
    if let Ok(meta) = std::fs::metadata(dir) {
        use std::os::unix::fs::MetadataExt as _;
        for file in [partial.clone(), beside(db, ".lock"), dir.join("daemon.lock")] {
            let _ = std::os::unix::fs::chown(&file, Some(meta.uid()), Some(meta.gid()));
        }
    }
    let aside = beside(db, &format!(".before-restore-{now_s}"));
    let kept = if db.exists() {
        // Fold the old store's WAL into it; what could not be folded is kept beside it, never deleted.
        if let Ok(old) = Connection::open(db) {
            let _ = old.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        std::fs::rename(db, &aside).map_err(io(db))?;
        Some(aside.clone())
    } else {
        None
    };
    // A WAL left beside the store's name belongs to the store it replaces: it
    // must not be applied to the backup (moved aside with it, never deleted).
    for side in ["-wal", "-shm"] {
        if beside(db, side).exists() {
            std::fs::rename(beside(db, side), beside(&aside, side)).map_err(io(&beside(db, side)))?;
        }
    }
    std::fs::rename(&partial, db).map_err(io(db))?;
    let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    Ok((copied, kept))
}

/// Makes `path` an empty file only its owner reads (a store holds token
/// hashes and registry passwords).
fn private_file(path: &Path) -> Result<(), BackupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map(drop)
        .map_err(io(path))
}

/// Holds the lock file `lock` of the store `db`, which no daemon may hold meanwhile.
fn hold(lock: &Path, db: &Path) -> Result<std::fs::File, BackupError> {
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(lock).map_err(io(lock))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(BackupError::Running { path: db.display().to_string(), lock: lock.display().to_string() })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(io(lock)(e)),
    }
}
