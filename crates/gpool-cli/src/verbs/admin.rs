//! `gpool admin backup FILE` and `gpool admin restore FILE`: the embedded
//! store of `gpool up` (or of `gpool serve` without `--db`), copied while the
//! daemon runs, and put back while it does not (`gpool_store::backup`).
//! A PostgreSQL store is backed up with `pg_dump` (docs/operations.md).

use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;
use gpool_store::backup::{self, Copied};

use crate::daemons::default_data_dir;

#[derive(Subcommand, Debug)]
pub(crate) enum AdminCommand {
    /// Copy the state (jobs, tokens, pools, services, pipelines) to a new file, while the daemon runs.
    Backup(BackupArgs),
    /// Put a backup in place of the state (the daemon stopped); the state it replaces is kept beside it.
    Restore(RestoreArgs),
}

/// Where the state is.
#[derive(clap::Args, Debug)]
pub(crate) struct Place {
    /// The daemon's data directory (its `--data-dir`); the state is `state.db` in it.
    #[arg(long, env = "GPOOL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, short = 'o', default_value = "table", value_parser = ["table", "json"])]
    output: String,
}

#[derive(clap::Args, Debug)]
pub(crate) struct BackupArgs {
    /// The backup to write (a new file: an existing one is never overwritten).
    file: PathBuf,
    #[command(flatten)]
    place: Place,
}

#[derive(clap::Args, Debug)]
pub(crate) struct RestoreArgs {
    /// The backup to put in place (from `gpool admin backup`).
    file: PathBuf,
    #[command(flatten)]
    place: Place,
}

pub(crate) fn run(cmd: AdminCommand) -> anyhow::Result<()> {
    match cmd {
        AdminCommand::Backup(a) => {
            let db = state_db(&a.place)?;
            let copied = backup::backup(&db, &a.file)?;
            print(&a.place, "backed up", &db, &a.file, &copied, None);
        }
        AdminCommand::Restore(a) => {
            let db = a.place.data_dir.clone().unwrap_or_else(default_data_dir).join("state.db");
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let (copied, kept) = backup::restore(&a.file, &db, now)?;
            print(&a.place, "restored", &a.file, &db, &copied, kept);
        }
    }
    Ok(())
}

/// The SQLite store of the data directory, which must exist.
fn state_db(place: &Place) -> anyhow::Result<PathBuf> {
    let dir = place.data_dir.clone().unwrap_or_else(default_data_dir);
    let db = dir.join("state.db");
    if !db.is_file() {
        bail!(
            "no state at {}: name the daemon's --data-dir (gpool up keeps its state there; /var/lib/gpool under systemd). \
             A control plane on PostgreSQL (gpool serve --db postgres://…) is backed up with pg_dump: see docs/operations.md",
            db.display()
        );
    }
    Ok(db)
}

fn print(place: &Place, did: &str, from: &std::path::Path, to: &std::path::Path, c: &Copied, kept: Option<PathBuf>) {
    if place.output == "json" {
        let v = serde_json::json!({
            "from": from, "to": to, "schema": c.schema, "jobs": c.jobs, "tokens": c.tokens, "bytes": c.bytes, "kept": kept,
        });
        println!("{v}");
        return;
    }
    println!(
        "{did} {} to {}: schema {}, {} jobs, {} tokens, {:.1} MiB",
        from.display(),
        to.display(),
        c.schema,
        c.jobs,
        c.tokens,
        c.bytes as f64 / 1_048_576.0
    );
    if let Some(k) = kept {
        println!("the state it replaced is kept at {}; start the daemon to use the restored one", k.display());
    }
}
