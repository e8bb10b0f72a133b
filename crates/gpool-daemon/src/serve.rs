//! `gpool serve`: the control plane alone, for a cluster of `gpool agent`s,
//! with its state in SQLite (the default) or PostgreSQL.
//!
//! Several `gpool serve` may share one PostgreSQL database: one leads (it
//! holds the database's leadership lock, see `gpool_store::Store::lead`),
//! the others wait as standbys and take over within moments when the
//! leader's connection ends (the process died, or lost the database). A
//! standby does not listen until it leads, so agents and clients that are
//! given several addresses move to the leader by themselves.

use anyhow::Context;

use crate::plane::controller::{Controller, Event, SystemClock};
use crate::plane::server::{PlaneConfig, Ready, controller_config, serve};
use crate::wiring::data_dir;

/// Settings of `gpool serve`.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub plane: PlaneConfig,
    /// `postgres://…` or `sqlite://…`; default: SQLite in the data directory.
    pub db: Option<String>,
}

/// The database URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(_)) => {
            let (auth, host) = rest.rsplit_once('@').unwrap_or(("", rest));
            let user = auth.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}")
        }
        _ => url.to_string(),
    }
}

/// Runs the control plane until SIGINT/SIGTERM.
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let plane = cfg.plane;
    data_dir(&plane.data_dir)?;
    crate::wiring::raise_open_file_limit();
    let url = cfg.db.unwrap_or_else(|| format!("sqlite://{}", plane.data_dir.join("state.db").display()));
    let shown = redact(&url);
    let config = controller_config(&plane)?;
    let mut store =
        gpool_store::open(&url, plane.fsync).with_context(|| format!("cannot open the state in {shown}"))?;
    if !store.lead(false)? {
        eprintln!("gpool serve: standby: another control plane leads on {shown}; waiting to take over");
        store.lead(true)?;
        eprintln!("gpool serve: the leader is gone; taking over");
    }
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let (controller, first) = Controller::new(config, store, None, Box::new(SystemClock))?;
    let ready = Ready { controller, first, local: None, tx, rx };
    serve(&plane, ready, move |u| format!("gpool control plane is up at {u} (state in {shown})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(redact("postgres://gpool:s3cret@db:5432/gpool"), "postgres://gpool@db:5432/gpool");
        assert_eq!(redact("postgres://db/gpool"), "postgres://db/gpool");
        assert_eq!(redact("sqlite:///var/lib/gpool/state.db"), "sqlite:///var/lib/gpool/state.db");
    }
}
