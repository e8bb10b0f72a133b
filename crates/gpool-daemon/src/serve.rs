//! `gpool serve`: the control plane alone, for a cluster of `gpool agent`s,
//! with its state in SQLite (the default) or PostgreSQL.
//!
//! Several `gpool serve` may share one PostgreSQL database: one leads (it
//! holds the database's leadership lock, see `gpool_store::Store::lead`),
//! the others wait as standbys and take over within moments when the
//! leader's connection ends (the process died, or lost the database). A
//! standby holds its API's port from its start and answers `503 standby`
//! there until it leads (plain HTTP: a TLS client sees a failed handshake),
//! so agents and clients given several addresses move to the leader by
//! themselves, and no other program can take the port meanwhile.

use anyhow::Context;

use std::time::Duration;

use gpool_store::Store;

use crate::plane::controller::{Controller, Event, SystemClock};
use crate::plane::server::{
    Away, Ended, PlaneConfig, Process, Ready, Reconnect, WhileAway, away_message, controller_config, serve,
};
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
///
/// Once it has led, it rides out the loss of its database: when a commit
/// fails (PostgreSQL restarted, a network blip, a session ended by a
/// standby that found it silent), it touches no job, answers reads from
/// memory and refuses the rest naming the database while it reconnects,
/// and leads again (or, if another leads, waits as a standby). Its agents
/// keep their jobs meanwhile by asking each other (`node/outage.rs`): an
/// outage of any length loses no running job.
/// A standby that loses its connection reconnects the same way. Before the
/// database was first reached, an error (a wrong URL, a refused login) stops
/// it with that error instead.
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let plane = cfg.plane;
    // What the control plane writes is its own (shipped logs, keys, the
    // state), as with `gpool up` and `gpool agent`: umask 077.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    data_dir(&plane.data_dir)?;
    crate::wiring::raise_open_file_limit();
    let url = cfg.db.unwrap_or_else(|| format!("sqlite://{}", plane.data_dir.join("state.db").display()));
    let shown = redact(&url);
    let config = controller_config(&plane)?;
    let process = Process::new()?;
    // TLS as the leader will serve it (and the refusal of plain HTTP beyond
    // loopback), from the start: a standby answers in it.
    let standby_tls = crate::plane::server::server_tls(&plane)?.map(|t| t.config);
    // The API's port is this process's from its start: a standby answers
    // `503 standby` there, and no other program can take it meanwhile.
    let bound = process.hold(plane.listen)?;
    tracing::info!("listening on {bound} (answering 503 standby until this control plane leads)");
    // Up and answering, as a standby: systemd's start is done (READY=1 again when it leads).
    crate::notify::ready(&format!("standby on {bound}: answering 503 until this control plane leads"));
    // Once the database was reached, losing it is an outage to ride out, not a wrong setting.
    let mut reached = false;
    let mut delay = Duration::from_millis(200);
    // Set once this control plane led and lost its database: what it answers until it leads again.
    let away: Away = Away::default();
    let say_away = |why: Option<String>| *away.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    // A store this process leads again after an outage (`Ended::Relead`).
    let mut again: Option<Box<dyn Store>> = None;
    loop {
        if process.stopped() {
            return Ok(());
        }
        let led = match again.take() {
            Some(store) => Ok(Some(store)),
            None => {
                let standby = process.answer_as_standby(away.clone(), standby_tls.clone())?;
                let led = lead(&process, &url, &shown, plane.fsync, &mut reached, &away);
                if let Some(s) = standby {
                    s.end(&process);
                }
                led
            }
        };
        let store = match led {
            Ok(None) => return Ok(()),
            Ok(Some(store)) => store,
            Err(e) if reached => {
                tracing::warn!("cannot reach the state in {shown} ({e:#}); retrying in {delay:?}");
                if process.sleep(delay) {
                    return Ok(());
                }
                delay = (delay * 2).min(Duration::from_secs(1));
                continue;
            }
            Err(e) => return Err(e),
        };
        delay = Duration::from_millis(200);
        let (tx, rx) = std::sync::mpsc::channel::<Event>();
        let (controller, first) = match Controller::new(config.clone(), store, None, Box::new(SystemClock)) {
            Ok(c) => c,
            Err(e) if reached => {
                tracing::warn!("cannot load the state from {shown} ({e:#}); retrying");
                continue;
            }
            Err(e) => return Err(e),
        };
        let ready = Ready { controller, first, local: None, tx, rx, terminals: Default::default() };
        let banner = {
            let shown = shown.clone();
            move |u: &str| format!("gpool control plane is up at {u} (state in {shown})")
        };
        let while_away = WhileAway { store: shown.clone(), reconnect: reconnect(&process, &url, &shown, plane.fsync) };
        match serve(&process, &plane, ready, banner, Some(while_away)) {
            Ok(Ended::Stopped) => return Ok(()),
            Ok(Ended::Relead(failed, store)) => {
                tracing::info!("the database is back ({failed} before); leading again");
                again = Some(store);
            }
            Ok(Ended::StoreFailed(failed)) => {
                tracing::warn!("{failed}; stepping down, running jobs untouched; reconnecting");
                say_away(Some(away_message(&shown, &failed.to_string())));
            }
            Err(e) if e.downcast_ref::<gpool_store::StoreError>().is_some() => {
                tracing::warn!("{e:#}; stepping down and reconnecting");
                say_away(Some(away_message(&shown, &format!("{e:#}"))));
            }
            Err(e) => return Err(e),
        }
    }
}

/// While the API answers from memory: reconnects with back-off until the
/// database answers (or a stop signal), then leads if nobody else does.
fn reconnect(process: &Process, url: &str, shown: &str, fsync: bool) -> Reconnect {
    let (url, shown, stop) = (url.to_string(), shown.to_string(), process.stop.clone());
    Box::new(move || {
        let mut delay = Duration::from_millis(200);
        loop {
            if *stop.borrow() {
                return Ok(None);
            }
            match gpool_store::open(&url, fsync) {
                Ok(mut store) => return Ok(if store.lead(false)? { Some(store) } else { None }),
                Err(e) => tracing::warn!("cannot reach the state in {shown} ({e}); retrying in {delay:?}"),
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    })
}

/// Connects and leads, as a standby first if another leads; `None` if a stop
/// signal came meanwhile.
fn lead(
    process: &Process,
    url: &str,
    shown: &str,
    fsync: bool,
    reached: &mut bool,
    away: &Away,
) -> anyhow::Result<Option<Box<dyn Store>>> {
    let opening = url.to_string();
    let Some(opened) = process.interruptible(move || gpool_store::open(&opening, fsync)) else { return Ok(None) };
    let mut store = opened.with_context(|| format!("cannot open the state in {shown}"))?;
    *reached = true;
    // The database is back: this control plane is a plain standby until it leads.
    *away.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    if store.lead(false)? {
        return Ok(Some(store));
    }
    tracing::info!("standby: another control plane leads on {shown}; waiting to take over");
    let Some((store, led)) = process.interruptible(move || {
        let led = store.lead(true);
        (store, led)
    }) else {
        return Ok(None);
    };
    led?;
    tracing::info!("the leader is gone; taking over");
    Ok(Some(store))
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
