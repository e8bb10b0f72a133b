//! Issue 43: a store written by an earlier gpool loads in this one. The
//! SQLite file in `tests/data/stores/` was written by gpool 0.1.0 at
//! 9d68781 (schema 4, before `gpool acct`'s column) with
//! `scripts/store-fixture.sh`: the binary under test migrates it forward
//! and finds every job in the state it was left in, the tokens (each role),
//! the node pool's node being created, the service, the schedule and the
//! pipeline run; new work runs after it. A store newer than the binary is
//! refused with a message naming both versions, and left as it was.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const FIXTURE: &str = "tests/data/stores/0.1.0-9d68781";

/// Runs a daemon that must refuse to start: its exit and what it said; a
/// daemon still running after a minute failed to refuse (killed, then the
/// test fails instead of hanging).
fn refusal(mut cmd: std::process::Command, scratch: &Path) -> (std::process::ExitStatus, String) {
    let log = scratch.join("refused.log");
    let file = std::fs::File::create(&log).expect("a log");
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(file).spawn().expect("the daemon");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after a minute on a newer store: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

/// SQLite keeps `PRAGMA user_version` at bytes 60..64 of the file's header, big-endian.
fn schema_of(db: &Path) -> u32 {
    let bytes = std::fs::read(db).expect("the store");
    u32::from_be_bytes(bytes[60..64].try_into().expect("a header"))
}

#[test]
fn a_store_of_the_previous_release_loads_with_its_jobs_tokens_pools_and_services() {
    let s = Scratch::new("upgrade");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let made: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).expect("fixture.json"))
            .expect("json");
    let data = s.0.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::copy(fixture.join("state.db"), data.join("state.db")).expect("the old store");
    assert_eq!(schema_of(&data.join("state.db")), 4, "the fixture predates the last migrations");
    let pools = fixture.join("pools.yaml");
    let d = Daemon::spawn(&data, &["--simulate-gpus", "2xH100-80GB", "--pools", pools.to_str().expect("path")], None);

    let job = |k: &str| d.get(&format!("/api/v1/jobs/{}", made["jobs"][k].as_u64().expect("an id")));
    let ok = job("succeeded");
    assert_eq!((ok["state"].as_str(), ok["name"].as_str()), (Some("succeeded"), Some("fixture-ok")), "{ok}");
    assert_eq!(ok["exit"]["code"], 0, "{ok}");
    let failed = job("failed");
    assert_eq!((failed["state"].as_str(), failed["exit"]["code"].as_i64()), (Some("failed"), Some(3)), "{failed}");
    assert_eq!(job("cancelled")["state"], "cancelled");
    let held = job("held");
    assert_eq!(held["state"], "pending", "{held}");
    assert!(held["reason"].as_str().is_some_and(|r| r.contains("held")), "still held: {held}");
    // The array's first task, and the job left running.
    assert_eq!(job("array")["name"], "fixture-array");
    let lost = job("running");
    assert_eq!(lost["name"], "fixture-running");
    // Its process did not outlive the old daemon (the fixture's script stops
    // it): the node does not have it, so it is requeued (to run again when
    // its turn comes), not left as running.
    assert!(lost["restarts"].as_u64().is_some_and(|r| r >= 1), "requeued: {lost}");
    assert!(lost["state"] == "pending" || lost["attempt"].as_u64().is_some_and(|a| a >= 2), "{lost}");

    // The migration filled in when jobs ended: `gpool acct` finds the old ones.
    let ended = d.get("/api/v1/jobs?ended_since=2000-01-01T00:00:00Z&limit=1000");
    let ended_ids: Vec<u64> = ended["jobs"]
        .as_array()
        .or(ended.as_array())
        .map(|js| js.iter().filter_map(|j| j["id"].as_u64()).collect())
        .unwrap_or_default();
    for k in ["succeeded", "failed", "cancelled"] {
        let id = made["jobs"][k].as_u64().expect("id");
        assert!(ended_ids.contains(&id), "job {id} ({k}) is in the accounting: {ended}");
    }

    // Tokens, each with its role.
    let whoami = |secret: &Value| d.req("GET", "/api/v1/whoami", secret.as_str().expect("secret"), None);
    let (code, ana) = whoami(&made["tokens"]["ana"]);
    assert_eq!((code, ana["user"].as_str(), ana["team"].as_str()), (200, Some("ana"), Some("ml")), "{ana}");
    let (code, bo) = whoami(&made["tokens"]["bo_reader"]);
    assert_eq!((code, bo["role"].as_str()), (200, Some("reader")), "{bo}");
    let (code, refused) = d.req(
        "POST",
        "/api/v1/jobs",
        made["tokens"]["bo_reader"].as_str().expect("secret"),
        Some(&json!({"command": "true"})),
    );
    assert_eq!(code, 403, "a reader still cannot submit: {refused}");
    let (code, carla) = whoami(&made["tokens"]["carla_admin"]);
    assert_eq!((code, carla["role"].as_str()), (200, Some("admin")), "{carla}");

    // The pool's node that was being created, the service, the schedule, the pipeline run.
    let pool = d.get("/api/v1/pools");
    let burst = pool.as_array().and_then(|ps| ps.iter().find(|p| p["name"] == "burst")).expect("pool burst");
    assert!(burst["creating"].as_u64().is_some_and(|n| n >= 1), "its node is still being created: {burst}");
    let services = d.get("/api/v1/services");
    assert!(services.to_string().contains(made["service"].as_str().expect("name")), "{services}");
    let schedules = d.get("/api/v1/schedules");
    let nightly = schedules
        .as_array()
        .and_then(|ss| ss.iter().find(|x| x["name"] == made["schedule"]))
        .unwrap_or_else(|| panic!("the schedule: {schedules}"));
    assert_eq!(nightly["suspended"], true, "{nightly}");
    let run = d.get(&format!("/api/v1/pipelines/{}", made["pipeline_run"]));
    assert_eq!(run["name"], "fixture-pipeline", "{run}");

    // New work after the old: a new id, run to its end.
    let new = d.submit(json!({"command": "true"}));
    assert!(new > made["jobs"]["cancelled"].as_u64().expect("id"), "ids go on from the old store's");
    d.until(&format!("/api/v1/jobs/{new}"), Duration::from_secs(60), |j| j["state"] == "succeeded");
    drop(d);
    // Read once the daemon is gone: its last writes were in the WAL until then.
    assert!(schema_of(&data.join("state.db")) > 4, "migrated forward");

    // A store from a newer gpool: refused, named, and left alone.
    let db = data.join("state.db");
    let mut bytes = std::fs::read(&db).expect("the store");
    bytes[60..64].copy_from_slice(&99u32.to_be_bytes());
    std::fs::write(&db, &bytes).expect("a newer schema");
    let mut up = std::process::Command::new(BIN);
    up.args(["up", "--listen", "127.0.0.1:0", "--simulate-gpus", "1xH100-80GB", "--data-dir"]).arg(&data);
    let (status, err) = refusal(up, &s.0);
    assert!(!status.success(), "a newer store must not be opened: {err}");
    let ours = format!("gpool {}", env!("CARGO_PKG_VERSION"));
    assert!(err.contains("schema is version 99") && err.contains(&ours), "names both versions: {err}");
    assert_eq!(schema_of(&db), 99, "and is not touched");
}

/// The same on PostgreSQL: the earlier release's dump, loaded with `psql`
/// into a fresh database, is served by this `gpool serve` with its records,
/// and a newer schema is refused.
#[test]
fn a_postgresql_dump_of_the_previous_release_loads_with_its_jobs_tokens_and_pool() {
    let s = Scratch::new("upgrade-pg");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let made: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture-postgres.json")).expect("fixture"))
            .expect("json");
    let pg = gpool_testpg::TestPostgres::start().expect("PostgreSQL (apt-get install -y postgresql)");
    let db = pg.fresh_database("upgrade_from_0_1_0").expect("a database");
    let psql = |args: &[&str]| -> String {
        let out = std::process::Command::new("psql")
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-tA", "--dbname", &db])
            .args(args)
            .output()
            .expect("psql (apt-get install -y postgresql-client)");
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "psql {args:?}: {said}{}", String::from_utf8_lossy(&out.stderr));
        said
    };
    // pg_dump 15.14 and later fence the dump with \restrict and
    // \unrestrict, which an older psql refuses: left out, they change nothing.
    let dump = std::fs::read_to_string(fixture.join("state.sql")).expect("the dump");
    let dump: String = dump
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .map(|l| format!("{l}\n"))
        .collect();
    let loadable = s.0.join("state.sql");
    std::fs::write(&loadable, dump).expect("the dump, loadable");
    psql(&["-f", loadable.to_str().expect("path")]);
    assert_eq!(psql(&["-c", "SELECT version FROM schema_version"]).trim(), "5");
    let pools = fixture.join("pools.yaml");
    let data = s.0.join("cp");
    let mut cmd = std::process::Command::new(BIN);
    cmd.env("GPOOL_DB", &db);
    let d = Daemon::serve_with(&data, &["--pools", pools.to_str().expect("path")], cmd);
    let version: u32 = psql(&["-c", "SELECT version FROM schema_version"]).trim().parse().expect("a version");
    assert!(version > 5, "migrated forward to {version}");

    let job = |k: &str| d.get(&format!("/api/v1/jobs/{}", made["jobs"][k].as_u64().expect("an id")));
    assert_eq!(
        (job("succeeded")["state"].as_str(), job("succeeded")["exit"]["code"].as_i64()),
        (Some("succeeded"), Some(0))
    );
    assert_eq!((job("failed")["state"].as_str(), job("failed")["exit"]["code"].as_i64()), (Some("failed"), Some(3)));
    assert_eq!(job("cancelled")["state"], "cancelled");
    assert!(job("held")["reason"].as_str().is_some_and(|r| r.contains("held")), "{}", job("held"));
    assert_eq!(job("running")["name"], "fixture-running");
    let ended = d.get("/api/v1/jobs?ended_since=2000-01-01T00:00:00Z&limit=1000").to_string();
    assert!(ended.contains("\"fixture-fails\""), "the accounting has the old jobs: {ended}");
    let (code, ana) = d.req("GET", "/api/v1/whoami", made["tokens"]["ana"].as_str().expect("secret"), None);
    assert_eq!((code, ana["user"].as_str(), ana["team"].as_str()), (200, Some("ana"), Some("ml")), "{ana}");
    let (code, bo) = d.req("GET", "/api/v1/whoami", made["tokens"]["bo_reader"].as_str().expect("secret"), None);
    assert_eq!((code, bo["role"].as_str()), (200, Some("reader")), "{bo}");
    let pool = d.get("/api/v1/pools");
    let burst = pool.as_array().and_then(|ps| ps.iter().find(|p| p["name"] == "burst")).expect("pool burst");
    assert!(burst["creating"].as_u64().is_some_and(|n| n >= 1), "{burst}");
    assert!(d.get("/api/v1/services").to_string().contains("fixture-svc"));
    assert!(d.get("/api/v1/schedules").to_string().contains("fixture-nightly"));
    assert_eq!(d.get(&format!("/api/v1/pipelines/{}", made["pipeline_run"]))["name"], "fixture-pipeline");
    drop(d);

    psql(&["-c", "UPDATE schema_version SET version = 99"]);
    let mut serve = std::process::Command::new(BIN);
    serve.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(s.0.join("cp2")).env("GPOOL_DB", &db);
    let (status, err) = refusal(serve, &s.0);
    assert!(!status.success(), "a newer database must not be served: {err}");
    assert!(err.contains("schema is version 99"), "names both versions: {err}");
    assert_eq!(psql(&["-c", "SELECT version FROM schema_version"]).trim(), "99", "and is not touched");
}
