//! `gpool admin backup` and `restore` on SQLite stores (`gpool_store::backup`).
//!
//! These tests live in a binary of their own: the lock files they take are
//! `flock`s, which a child forked by another test's thread shares until it
//! execs. The library's tests start PostgreSQL servers as another account
//! (a fork, then setuid, then exec), and on a loaded machine such a child
//! held `state.db.lock` long enough for a restore to be refused (CI, stop 56).

use std::path::PathBuf;

use gpool_store::backup::{BackupError, backup, restore};
use gpool_store::{Sqlite, Store, Write};
use rusqlite::Connection;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpool-backup-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch");
    d
}

#[test]
fn a_backup_of_a_store_in_use_restores_whole_and_keeps_what_it_replaced() {
    let dir = scratch("round");
    let db = dir.join("state.db");
    let mut store = Sqlite::open(&db, false).expect("open");
    let doc = |id: u64| {
        Write::PutJob(gpool_store::JobRow {
            id,
            user: "ana".into(),
            team: "ml".into(),
            queue: "default".into(),
            state: "succeeded".into(),
            submitted_ms: 1,
            ended_ms: Some(2),
            doc: "{}".into(),
        })
    };
    store.commit(&[doc(1), doc(2), doc(3)]).expect("jobs");
    // Taken while the store is open and leading, as under `gpool serve`.
    assert!(store.lead(false).expect("lead"));
    let file = dir.join("backup.db");
    let copied = backup(&db, &file).expect("backup");
    assert_eq!((copied.jobs, copied.schema), (3, schema(&db)), "{copied:?}");
    assert!(matches!(backup(&db, &file), Err(BackupError::Exists { .. })), "never overwrites");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).expect("backup").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a backup holds token hashes and registry passwords");
    store.commit(&[doc(4)]).expect("a job after the backup");
    // Restoring under the running daemon is refused, and changes nothing.
    assert!(matches!(restore(&file, &db, 7), Err(BackupError::Running { .. })));
    drop(store);
    // So is one under `gpool up`, which holds its data directory's lock.
    let up = std::fs::File::create(dir.join("daemon.lock")).expect("lock");
    up.lock().expect("held");
    assert!(matches!(restore(&file, &db, 7), Err(BackupError::Running { .. })));
    drop(up);
    let (restored, kept) = restore(&file, &db, 7).expect("restore");
    assert_eq!(restored.jobs, 3);
    let kept = kept.expect("the store it replaced is kept");
    assert_eq!(kept, dir.join("state.db.before-restore-7"));
    let mut back = Sqlite::open(&db, false).expect("reopen");
    assert!(back.job(3).expect("read").is_some() && back.job(4).expect("read").is_none());
    let mut old = Sqlite::open(&kept, false).expect("the old one opens");
    assert!(old.job(4).expect("read").is_some(), "what came after the backup is in the copy kept aside");
}

#[test]
fn what_is_no_whole_gpool_store_is_refused_before_anything_moves() {
    let dir = scratch("refuse");
    let db = dir.join("state.db");
    drop(Sqlite::open(&db, false).expect("open"));
    let junk = dir.join("junk.db");
    std::fs::write(&junk, b"not a database at all, but long enough to look like one perhaps").expect("junk");
    assert!(matches!(restore(&junk, &db, 1), Err(BackupError::NotAStore { .. })));
    let other = dir.join("other.db");
    Connection::open(&other).and_then(|c| c.execute_batch("CREATE TABLE t (x)")).expect("other");
    let err = restore(&other, &db, 1).expect_err("no jobs table");
    assert!(err.to_string().contains("no jobs table"), "{err}");
    let newer = dir.join("newer.db");
    std::fs::copy(&db, &newer).expect("copy");
    Connection::open(&newer).and_then(|c| c.pragma_update(None, "user_version", 999)).expect("version");
    let err = restore(&newer, &db, 1).expect_err("too new");
    assert!(err.to_string().contains("999") && err.to_string().contains("upgrade gpool"), "{err}");
    assert!(db.exists() && !dir.join("state.db.before-restore-1").exists(), "nothing moved");
    assert!(matches!(backup(&dir.join("missing.db"), &dir.join("b.db")), Err(BackupError::NotAStore { .. })));
}

/// The schema version of the store at `db`, as its daemon wrote it.
fn schema(db: &std::path::Path) -> u32 {
    let conn = Connection::open(db).expect("the store opens");
    conn.pragma_query_value(None, "user_version", |r| r.get(0)).expect("user_version")
}
