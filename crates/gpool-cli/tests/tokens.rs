//! Issue 12, tokens: a lifecycle (list, revoke, expiry, last use), scoped
//! roles (a read-only one for dashboards and Prometheus) and an audit log,
//! through the real daemon and CLI.

mod common;

use std::time::Duration;

use common::{Daemon, Scratch, gpool};
use serde_json::{Value, json};

fn create(d: &Daemon, body: Value) -> Value {
    let (s, v) = d.req("POST", "/api/v1/tokens", &d.token, Some(&body));
    assert_eq!(s, 201, "{v}");
    v
}

#[test]
fn a_revoked_token_is_refused_at_once_and_a_reader_cannot_change_anything() {
    let scratch = Scratch::new("tokens");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &["--metrics-auth"]);
    let alice = create(&d, json!({"user": "alice", "team": "ml"}));
    let secret = alice["token"].as_str().expect("secret");
    let id = alice["id"].as_str().expect("id");
    let me = [("GPOOL_SERVER", d.url.as_str()), ("GPOOL_TOKEN", secret)];
    let (code, out, err) = gpool(&["whoami"], &me);
    assert_eq!(code, Some(0), "{out}{err}");

    // Listing shows ids, never secrets; revoking makes the next request fail.
    let (ok, listing, err) = d.cli(&["token", "list"]);
    assert!(ok, "{err}");
    assert!(listing.contains(id) && listing.contains("alice"), "{listing}");
    assert!(!listing.contains(secret), "a listing never shows a secret");
    let (ok, out, err) = d.cli(&["token", "revoke", id]);
    assert!(ok && out.contains("revoked"), "{out}{err}");
    let (code, _, err) = gpool(&["whoami"], &me);
    assert_eq!(code, Some(4), "refused at once: {err}");
    assert!(err.contains("unknown or revoked"), "{err}");

    // A reader reads everything, /metrics included, and changes nothing.
    let reader = create(&d, json!({"user": "grafana", "role": "reader"}));
    let reader = reader["token"].as_str().expect("secret");
    let job = d.submit(json!({"command": "sleep 60", "resources": {"nvidia.com/gpu": 1}}));
    let (s, v) = d.req("GET", &format!("/api/v1/jobs/{job}"), reader, None);
    assert_eq!(s, 200, "{v}");
    let (s, v) = d.req("POST", &format!("/api/v1/jobs/{job}/cancel"), reader, None);
    assert_eq!(s, 403, "{v}");
    let (s, v) = d.req("POST", "/api/v1/jobs", reader, Some(&json!({"command": "true"})));
    assert_eq!(s, 403, "{v}");
    let (s, v) = d.req("GET", "/metrics", reader, None);
    assert_eq!(s, 200, "a reader scrapes /metrics: {v}");
    assert!(v.as_str().is_some_and(|t| t.contains("DCGM_FI_DEV_GPU_UTIL")), "{v}");
    let (s, v) = d.text("/metrics");
    assert_eq!(s, 401, "--metrics-auth: no token, no metrics: {v}");

    // Admin actions are audited with who, what and from where.
    let wanted = format!("revoked token {id}");
    d.read_events("/api/v1/events?after=0", Duration::from_secs(30), |e| {
        e["kind"] == "audit"
            && e["message"].as_str().is_some_and(|m| m.contains("(admin) from 127.0.0.1:") && m.contains(&wanted))
    });
    let _ = d.req("POST", &format!("/api/v1/jobs/{job}/cancel"), &d.token, None);
    d.wait_ended(&[job], Duration::from_secs(60));
}

#[test]
fn an_expired_token_is_refused_saying_when() {
    let scratch = Scratch::new("token-ttl");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let (ok, out, err) = d.cli(&["token", "create", "--user", "bob", "--ttl", "1s", "-o", "json"]);
    assert!(ok, "{err}");
    let created: Value = serde_json::from_str(&out).expect("json");
    let secret = created["token"].as_str().expect("secret");
    let expires = created["expires_ms"].as_i64().expect("an expiry");
    // Wait for the wall clock to pass the expiry (the daemon's clock is real here).
    while std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_millis() as i64
        <= expires
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (s, v) = d.req("GET", "/api/v1/whoami", secret, None);
    assert_eq!(s, 401, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("expired at")), "{v}");
}

/// Issue 18's messages about tokens and addresses: a bad token's error says
/// what to pass on the command line, the scheme of `Authorization` is
/// case-insensitive, `token create --role` takes the role by name, and a
/// malformed `--server` is refused before any request, saying what to give.
#[test]
fn token_and_address_errors_say_what_to_type() {
    let scratch = Scratch::new("token-messages");
    let d = Daemon::start(&scratch.0, "1xH100-80GB", &[]);
    let (code, _, err) = gpool(&["whoami"], &[("GPOOL_SERVER", d.url.as_str()), ("GPOOL_TOKEN", "gp_nope")]);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("--token or GPOOL_TOKEN"), "{err}");
    let resp = ureq::get(format!("{}/api/v1/whoami", d.url))
        .header("Authorization", format!("bearer {}", d.token))
        .call()
        .expect("a lower-case scheme is accepted");
    assert_eq!(resp.status(), 200);
    let (ok, out, err) = d.cli(&["token", "create", "--user", "grafana", "--role", "reader", "-o", "json"]);
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).expect("json")["role"], "reader");
    // Another user's job's events: not found at once, with or without history.
    let job = d.submit(json!({"command": "sleep 60", "resources": {"nvidia.com/gpu": 1}}));
    let bob = create(&d, json!({"user": "bob"}));
    let bob = bob["token"].as_str().expect("secret");
    for q in ["", "&after=0"] {
        let (s, v) = d.req("GET", &format!("/api/v1/events?job={job}{q}"), bob, None);
        assert_eq!(s, 404, "{q}: {v}");
    }
    let (s, v) = d.req("GET", "/api/v1/jobs?limit=0", &d.token, None);
    assert_eq!((s, v["error"].as_str()), (400, Some("limit: 0 is not between 1 and 1000")));
    let (code, _, err) = gpool(&["queue", "--server", "cp1:7878", "--token", "x"], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--server \"cp1:7878\"") && err.contains("http://HOST:PORT"), "{err}");
}
