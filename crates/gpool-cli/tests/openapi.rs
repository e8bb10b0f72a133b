//! Issue 18: the OpenAPI document says what the server answers. Every JSON
//! endpoint of `/api/v1` is called on a live daemon, and each answer is
//! validated against the schema the document gives for its path, method
//! and status (JSON Schema 2020-12, as OpenAPI 3.1 uses).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The document's template of a concrete path (`/api/v1/jobs/7` → `/api/v1/jobs/{id}`).
fn template<'a>(doc: &'a Value, path: &str) -> Option<&'a str> {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.split('/').collect();
    doc["paths"].as_object()?.keys().map(String::as_str).find(|t| {
        let tp: Vec<&str> = t.split('/').collect();
        tp.len() == parts.len()
            && tp.iter().zip(&parts).all(|(a, b)| a == b || (a.starts_with('{') && a.ends_with('}')))
    })
}

/// Checks one answer against the document: the (method, template) it
/// covered, or what disagrees.
fn check(doc: &Value, method: &str, path: &str, status: u16, body: &Value) -> Result<(String, String), String> {
    let t = template(doc, path).ok_or_else(|| format!("{path} is not in the document"))?;
    let op = &doc["paths"][t][method.to_lowercase()];
    if !op.is_object() {
        return Err(format!("{method} {t} is not in the document"));
    }
    let mut answer = &op["responses"][status.to_string()];
    if let Some(r) = answer["$ref"].as_str() {
        answer = doc.pointer(r.trim_start_matches('#')).ok_or_else(|| format!("{r} does not resolve"))?;
    }
    if !answer.is_object() {
        return Err(format!("{method} {t} answered {status}, which the document does not list: {body}"));
    }
    let schema = &answer["content"]["application/json"]["schema"];
    if !schema.is_object() {
        return Err(format!("{method} {t} {status}: the document gives no JSON schema for {body}"));
    }
    let mut root = schema.clone();
    if let Some(o) = root.as_object_mut() {
        o.insert("components".into(), doc["components"].clone());
        o.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
    }
    let validator = jsonschema::validator_for(&root).map_err(|e| format!("{method} {t}: bad schema: {e}"))?;
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    if !errors.is_empty() {
        return Err(format!("{method} {path} {status} does not match the document: {}\n{body}", errors.join("; ")));
    }
    Ok((method.to_string(), t.to_string()))
}

/// `openapi-spec-validator` (PyPI): `$OPENAPI_SPEC_VALIDATOR`, else the one
/// scripts/test.sh installs in `target/pytools`, else the one on `PATH`.
fn spec_validator() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("OPENAPI_SPEC_VALIDATOR") {
        return p.into();
    }
    let installed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin/openapi-spec-validator");
    if installed.exists() { installed } else { "openapi-spec-validator".into() }
}

/// The document itself is valid OpenAPI 3.1, by the reference validator.
#[test]
fn the_document_passes_openapi_spec_validator() {
    let s = Scratch::new("openapi-spec");
    let d = Daemon::start(&s.0.join("data"), "1xH100-80GB", &[]);
    let file = s.0.join("openapi.json");
    std::fs::write(&file, d.get("/api/v1/openapi.json").to_string()).expect("write");
    let bin = spec_validator();
    let out = std::process::Command::new(&bin).arg("--schema").arg("3.1").arg(&file).output().unwrap_or_else(|e| {
        panic!("cannot run {bin:?} ({e}): scripts/test.sh installs it (pip, in target/pytools), or set OPENAPI_SPEC_VALIDATOR=path")
    });
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("OK"), "{said}");
}

#[test]
fn live_answers_validate_against_the_openapi_document() {
    let s = Scratch::new("openapi");
    let budgets = s.0.join("budgets.yaml");
    std::fs::write(&budgets, "- {team: ml, dollarsPerMonth: 900, mode: hard, alertAt: [50]}\n").expect("budgets");
    let d = Daemon::start(
        &s.0.join("data"),
        "2xH100-80GB",
        &["--sample-interval", "100ms", "--budgets", budgets.to_str().expect("path")],
    );
    let doc = d.get("/api/v1/openapi.json");
    assert_eq!(doc["openapi"], "3.1.0");
    let mut covered = BTreeSet::new();
    let mut problems = Vec::new();
    let mut call = |method: &str, path: &str, body: Option<&Value>| -> (u16, Value) {
        let (status, answer) = d.req(method, path, &d.token, body);
        match check(&doc, method, path, status, &answer) {
            Ok(key) => {
                covered.insert(key);
            }
            Err(e) => problems.push(e),
        }
        (status, answer)
    };

    let (_, sub) =
        call("POST", "/api/v1/jobs", Some(&json!({"command": "sleep 300", "resources": {"nvidia.com/gpu": 1}})));
    let id = sub["ids"][0].as_u64().or_else(|| sub["id"].as_u64()).unwrap_or_else(|| panic!("{sub}"));
    call("POST", "/api/v1/jobs", Some(&json!({"jobs": [{"command": "true"}, {"command": "exit 3"}]})));
    call("POST", "/api/v1/jobs", Some(&json!({"command": "true", "colour": "blue"})));
    d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] == "running");
    d.until(&format!("/api/v1/jobs/{id}/usage"), Duration::from_secs(30), |u| {
        u["summary"]["gpu_hours"].as_f64().is_some_and(|h| h > 0.0)
    });
    call("GET", "/api/v1/jobs?state=active", None);
    call("GET", &format!("/api/v1/jobs/{id}"), None);
    call("GET", "/api/v1/jobs/999999", None);
    call("GET", &format!("/api/v1/jobs/{id}/usage"), None);
    call("GET", &format!("/api/v1/jobs/{id}/advice?minSpan=1s"), None);
    // `sleep` is no Python process: refused with the reason (tests/profile.rs takes real profiles).
    let (status, _) = call("POST", &format!("/api/v1/jobs/{id}/profile?seconds=1"), None);
    assert_eq!(status, 422);
    call("GET", &format!("/api/v1/jobs/{id}/profile"), None);
    // Interactive sessions: opened on a job with a terminal, refused (409) on one without, 404 on none.
    let (_, tty) = call("POST", "/api/v1/jobs", Some(&json!({"command": "sh", "interactive": {"detachGrace": "5s"}})));
    let tty = tty["ids"][0].as_u64().unwrap_or_else(|| panic!("{tty}"));
    d.until(&format!("/api/v1/jobs/{tty}"), Duration::from_secs(30), |j| j["state"] == "running");
    let (status, session) = call("POST", &format!("/api/v1/jobs/{tty}/attach"), None);
    assert_eq!(status, 200, "{session}");
    call("POST", &format!("/api/v1/jobs/{id}/attach"), None);
    call("POST", "/api/v1/jobs/999999/attach", None);
    call("GET", "/api/v1/nodes", None);
    let node = d.get("/api/v1/nodes")[0]["name"].as_str().unwrap_or_default().to_string();
    call("POST", &format!("/api/v1/nodes/{node}/drain"), None);
    call("POST", &format!("/api/v1/nodes/{node}/resume"), None);
    call("POST", "/api/v1/nodes/no-such-node/drain", None);
    // GPU faults (issue 38): inject into the simulated GPU, the fleet's health, restore (200 once
    // the fault was seen, 409 before: both are in the document), and refusals.
    call("POST", &format!("/api/v1/nodes/{node}/inject"), Some(&json!({"gpu": 0, "ecc_uncorrected": true})));
    call("POST", &format!("/api/v1/nodes/{node}/inject"), Some(&json!({"gpu": 0})));
    call("GET", "/api/v1/health", None);
    call("POST", &format!("/api/v1/nodes/{node}/restore"), Some(&json!({"gpu": 0})));
    call("POST", &format!("/api/v1/nodes/{node}/restore"), Some(&json!({"gpu": 7})));
    call("PUT", "/api/v1/power", Some(&json!({"scope": "node", "target": node, "watts": 100_000})));
    call("PUT", "/api/v1/power", Some(&json!({"scope": "room", "target": "x", "watts": 1})));
    call("GET", "/api/v1/power", None);
    call("GET", "/api/v1/queues", None);
    call("GET", "/api/v1/pools", None);
    call("GET", "/api/v1/cost?by=user&since=1d", None);
    call("GET", "/api/v1/cost?by=colour", None);
    let (_, budgets) = call("GET", "/api/v1/budgets", None);
    assert_eq!(budgets[0]["name"], "ml", "{budgets}");
    call("GET", "/api/v1/alerts", None);
    // Pending behind the running job: held, then released.
    let (_, after) = call("POST", "/api/v1/jobs", Some(&json!({"command": "true", "dependsOn": [id]})));
    let held = after["ids"][0].as_u64().unwrap_or_else(|| panic!("{after}"));
    call("POST", &format!("/api/v1/jobs/{held}/hold"), None);
    call("POST", &format!("/api/v1/jobs/{held}/release"), None);
    call("POST", "/api/v1/jobs/999999/hold", None);
    call("GET", "/api/v1/overview", None);
    call("GET", "/api/v1/whoami", None);
    let (_, created) = call("POST", "/api/v1/tokens", Some(&json!({"user": "ana", "team": "vision", "role": "user"})));
    call("GET", "/api/v1/tokens", None);
    let token_id = created["id"].as_str().unwrap_or_default().to_string();
    call("DELETE", &format!("/api/v1/tokens/{token_id}"), None);
    let pipeline = json!({"name": "p", "stages": [
        {"name": "a", "command": "true"},
        {"name": "b", "command": "true", "needs": ["a"], "matrix": {"x": [1, 2]}}
    ]});
    let (_, run) = call("POST", "/api/v1/pipelines", Some(&pipeline));
    let run = run["run"].as_u64().unwrap_or_else(|| panic!("a run: {run}"));
    call("POST", "/api/v1/pipelines", Some(&json!({"stages": [{"name": "a", "command": "x", "needs": ["a"]}]})));
    call("GET", "/api/v1/pipelines", None);
    call("GET", &format!("/api/v1/pipelines/{run}"), None);
    call("GET", "/api/v1/pipelines/999999", None);
    call("POST", &format!("/api/v1/pipelines/{run}/cancel"), None);
    let schedule = json!({"schedule": "0 2 * * *", "timeZone": "UTC", "job": {"command": "true"}});
    call("PUT", "/api/v1/schedules/nightly", Some(&schedule));
    call(
        "PUT",
        "/api/v1/schedules/bad",
        Some(&json!({"schedule": "x", "timeZone": "UTC", "job": {"command": "true"}})),
    );
    call("GET", "/api/v1/schedules", None);
    call("DELETE", "/api/v1/schedules/nightly", None);
    call("DELETE", "/api/v1/schedules/nightly", None);
    call("GET", "/api/v1/services", None);
    call("GET", "/api/v1/registries", None);
    call("PUT", "/api/v1/registries/ghcr.io", Some(&json!({"username": "ana", "password": "secret"})));
    call("GET", "/api/v1/registries", None);
    call("DELETE", "/api/v1/registries/ghcr.io", None);
    // Advance reservations: made, refused twice (409) and badly (400), listed, deleted, and 404 after.
    let reservation =
        json!({"name": "demo", "gpus": 1, "start": "2030-01-01T09:00:00Z", "duration": "1h", "teams": ["vision"]});
    call("POST", "/api/v1/reservations", Some(&reservation));
    call("POST", "/api/v1/reservations", Some(&reservation));
    call("POST", "/api/v1/reservations", Some(&json!({"name": "x y", "gpus": 1, "start": "soon", "duration": "1h"})));
    call("GET", "/api/v1/reservations", None);
    call("DELETE", "/api/v1/reservations/demo", None);
    call("DELETE", "/api/v1/reservations/demo", None);
    let service = json!({"command": "sleep 300", "service": {"replicas": {"min": 0, "max": 1}}});
    call("PUT", "/api/v1/services/echo", Some(&service));
    call("GET", "/api/v1/services", None);
    call("DELETE", "/api/v1/services/echo", None);
    let (_, queued) =
        call("POST", "/api/v1/jobs", Some(&json!({"command": "true", "resources": {"nvidia.com/gpu": 2}})));
    let queued = queued["ids"][0].as_u64().or_else(|| queued["id"].as_u64()).unwrap_or_default();
    call("DELETE", &format!("/api/v1/jobs/{queued}"), None);
    call("POST", &format!("/api/v1/jobs/{id}/cancel"), None);
    d.wait_ended(&[id], Duration::from_secs(60));
    call("GET", &format!("/api/v1/jobs/{id}/advice"), None);
    call("POST", &format!("/api/v1/jobs/{id}/cancel"), None);
    call("POST", &format!("/api/v1/nodes/{node}/notice"), Some(&json!({"in": "soon"})));
    call("POST", &format!("/api/v1/nodes/{node}/notice"), Some(&json!({"in": "2m"})));

    assert!(problems.is_empty(), "{}", problems.join("\n\n"));

    // The event stream's records are the document's EventView.
    let mut events = Vec::new();
    d.read_events("/api/v1/events?after=0", Duration::from_secs(30), |e| {
        events.push(e);
        events.len() >= 5
    });
    let stream_schema = json!({"paths": doc["paths"], "components": doc["components"]});
    for e in &events {
        let schema = json!({"$ref": "#/components/schemas/EventView", "components": stream_schema["components"]});
        let v = jsonschema::validator_for(&schema).expect("schema");
        assert!(v.is_valid(e), "event {e} is not an EventView");
    }

    // Every endpoint of /api/v1 that answers JSON was called (logs are text, events a stream).
    let mut missing = Vec::new();
    for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in ops.as_object().into_iter().flatten() {
            let json_answers = op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(status, r)| status.starts_with('2') && r["content"]["application/json"].is_object());
            let key = (method.to_uppercase(), path.clone());
            if path.starts_with("/api/v1/") && path != "/api/v1/openapi.json" && json_answers && !covered.contains(&key)
            {
                missing.push(format!("{} {path}", key.0));
            }
        }
    }
    assert!(missing.is_empty(), "not checked against the document: {missing:?}");
}

/// `schemathesis` (PyPI): `$SCHEMATHESIS`, else the one scripts/test.sh
/// installs in `target/pytools`, else the one on `PATH`.
fn schemathesis() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SCHEMATHESIS") {
        return p.into();
    }
    let installed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin/schemathesis");
    if installed.exists() { installed } else { "schemathesis".into() }
}

/// Issue 40: a schema-driven fuzzer, every check on, against a live daemon,
/// every operation: what the document says and what the server does agree
/// (statuses, content types, bodies; valid requests taken, invalid ones
/// refused; an admin's token needed). `tests/data/schemathesis.toml` names
/// the only allowances, each with why.
#[test]
fn schemathesis_finds_nothing_against_a_live_daemon() {
    let s = Scratch::new("schemathesis");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &[]);
    // An admin with no Unix account: the jobs it submits are refused a
    // start on the node ("no account"), so no generated command runs.
    let user = "gpool-fuzz-no-account";
    assert!(
        std::process::Command::new("getent").args(["passwd", user]).output().is_ok_and(|o| !o.status.success()),
        "{user} must not be an account here"
    );
    let (status, created) = d.req("POST", "/api/v1/tokens", &d.token, Some(&json!({"user": user, "role": "admin"})));
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().expect("a secret").to_string();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/schemathesis.toml");
    let bin = schemathesis();
    let out = std::process::Command::new(&bin)
        .current_dir(&s.0)
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/api/v1/openapi.json", d.url)])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        // One worker: schemathesis's workers are threads, and CPython 3.11's
        // `ast` module shares a recursion counter between threads, so two of
        // them describing a strategy at once fail with "AST constructor
        // recursion depth mismatch" (cpython#106905; Debian 12's Python is
        // 3.11), which CI saw once.
        .args(["--checks", "all", "--workers", "1", "--max-examples", "25", "--seed", "1"])
        .args(["--request-timeout", "10", "--no-color"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {bin:?} ({e}): scripts/test.sh installs it (pip, in target/pytools), or set SCHEMATHESIS=path")
        });
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "schemathesis found something:\n{said}");
    // It tested every operation of the document but the document itself, which it reads.
    let doc = d.get("/api/v1/openapi.json");
    let operations: usize =
        doc["paths"].as_object().map_or(0, |p| p.values().map(|m| m.as_object().map_or(0, |m| m.len())).sum());
    let tested = operations - 1;
    assert!(said.contains(&format!("Tested: {tested}\n")), "not every one of {tested} operations was tested:\n{said}");
}
