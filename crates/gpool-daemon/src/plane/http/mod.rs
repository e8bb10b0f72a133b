//! The REST API under `/api/v1`: handlers translate HTTP to controller
//! [`Call`]s and back; they hold no state and take no locks.

use std::sync::mpsc::Sender;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use gpool_api as api;
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, oneshot};

use crate::plane::controller::{ApiError, Call, Event, Open, Reply};

mod agent;
mod body;
mod cluster;
mod events;
mod extract;
mod holds;
mod jobs;
mod log_watch;
mod logs;
mod node_admin;
pub mod openapi;
mod params;
mod pipelines;
mod profile;
mod registries;
mod reservations;
mod routes;
mod schedules;
mod services;
mod terminals;
mod tokens;
mod who;
use logs::logs;
pub use who::LocalUsers;
use who::Who;

/// Largest request body accepted (a batch of a few thousand specs).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// What every handler needs.
#[derive(Clone)]
pub struct AppState {
    pub tx: Sender<Event>,
    pub events: broadcast::Sender<api::EventView>,
    /// Where shipped logs of remote replicas are kept.
    pub data_dir: std::path::PathBuf,
    /// `/metrics` requires a token.
    pub metrics_auth: bool,
    /// The CA's certificate, served at `/tls/ca.pem` (TLS only).
    pub ca_pem: Option<String>,
    /// Callers on the Unix socket, by uid.
    pub local_users: std::sync::Arc<LocalUsers>,
    /// Log follows: one shared inotify instance, a cap per caller.
    pub log_watch: std::sync::Arc<log_watch::LogWatch>,
    /// Why the control plane answers from memory, once its database is away
    /// (`gpool serve`); every answer then says so (`mark_away`).
    pub away: crate::plane::process::Away,
    /// Interactive sessions being joined (`plane/terminals.rs`).
    pub terminals: std::sync::Arc<crate::plane::terminals::Relay>,
}

/// The API's router: the documented routes (`routes.rs`), the dashboard's pages.
pub fn router(state: AppState) -> Router {
    let mut doc = aide::openapi::OpenApi::default();
    routes::routes()
        .finish_api(&mut doc)
        .merge(crate::plane::web::routes())
        .fallback(|| async { AppError(ApiError::new(404, "no such endpoint; see /api/v1/openapi.json")) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(refuse_declared_oversize))
        .layer(axum::middleware::from_fn_with_state(state.away.clone(), mark_away))
        .with_state(state)
}

/// Refuses a body whose declared length is over the limit before reading
/// any of it, and one that turns out over it while read, in JSON.
/// While the database is away, every answer carries `X-Gpool-Store-Away`
/// (reads come from memory, the rest is refused); a refusal also carries
/// `X-Gpool-Standby`, so that clients try their next address, which may lead.
async fn mark_away(
    State(away): State<crate::plane::process::Away>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut resp = next.run(req).await;
    if away.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some() {
        let h = resp.headers_mut();
        h.insert("x-gpool-store-away", header::HeaderValue::from_static("1"));
        if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert("x-gpool-standby", header::HeaderValue::from_static("1"));
        }
    }
    resp
}

async fn refuse_declared_oversize(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    let too_large = || {
        AppError(ApiError::new(413, format!("the body is larger than {} MiB", MAX_BODY / (1024 * 1024))))
            .into_response()
    };
    if declared.is_some_and(|n| n > MAX_BODY) {
        return too_large();
    }
    let resp = next.run(req).await;
    // A chunked body (no declared length) over the limit is refused while
    // it is read, by axum, in plain text: answer in JSON as every refusal.
    let json = resp.headers().get(header::CONTENT_TYPE).is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE && !json {
        return too_large();
    }
    resp
}

/// An error as the API returns it: `{"error": "..."}` with a status.
pub struct AppError(pub ApiError);

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(api::ErrorBody { error: self.0.message })).into_response()
    }
}

type Result<T> = std::result::Result<T, AppError>;

fn bad(msg: impl Into<String>) -> AppError {
    AppError(ApiError::new(400, msg))
}

/// Sends a call to the controller and waits for its answer.
async fn call<T>(st: &AppState, who: &Who, make: impl FnOnce(Reply<T>) -> Call) -> Result<T> {
    let (tx, rx) = oneshot::channel();
    st.tx
        .send(Event::Api { who: who.0.clone(), call: make(tx) })
        .map_err(|_| AppError(ApiError::new(503, "the daemon is shutting down")))?;
    rx.await.map_err(|_| AppError(ApiError::new(503, "the daemon is shutting down")))?.map_err(AppError)
}

/// Parses a body strictly, naming the field path of any error.
/// Whether a request's body is YAML (its `Content-Type` says so), else JSON.
fn is_yaml(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("yaml"))
}

fn parse<T: DeserializeOwned>(body: &[u8], yaml: bool) -> std::result::Result<T, String> {
    let located = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
    };
    // YAML with JSON's types: read into a JSON value first, so that a
    // scalar is what YAML says it is (`null`, `false`, `60`) and never
    // silently the text of a string field (`user: null` was the user
    // "null"). The schema of the body says where a number or a boolean is
    // taken as text (a command's arguments).
    let mut value = if yaml {
        yaml_value(body)?
    } else {
        serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?
    };
    whole_numbers(&mut value);
    serde_path_to_error::deserialize(value).map_err(located)
}

/// A number with no fraction is an integer, as JSON Schema says (`2.0` GPUs
/// are 2): serde would refuse it where the Rust type is an integer.
fn whole_numbers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0) {
                if (0.0..=u64::MAX as f64).contains(&f) && f < 18_446_744_073_709_551_616.0 {
                    *v = serde_json::Value::from(f as u64);
                } else if (i64::MIN as f64..0.0).contains(&f) {
                    *v = serde_json::Value::from(f as i64);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// A YAML body as the JSON value it spells.
fn yaml_value(body: &[u8]) -> std::result::Result<serde_json::Value, String> {
    gpool_api::yaml::from_slice(body).map_err(|e| format!("the body is not valid YAML: {e}"))
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi::document_text()).into_response()
}

/// The job specs of a submission's body: one spec, or `{jobs: [...]}`, in
/// JSON or (`yaml`) YAML; the error says what is wrong and where.
pub fn submission(body: &[u8], yaml: bool) -> std::result::Result<Vec<api::JobSpec>, String> {
    body::shallow(body)?;
    let value: serde_json::Value = if yaml {
        yaml_value(body)?
    } else {
        serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?
    };
    Ok(if value.get("jobs").is_some() {
        parse::<api::spec::Batch>(body, yaml)?.jobs
    } else {
        vec![parse::<api::JobSpec>(body, yaml)?]
    })
}

async fn pools(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::PoolView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Pools { reply }).await?))
}

async fn queues(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::QueueView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Queues { reply }).await?))
}

async fn alerts(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::AlertView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Alerts { reply }).await?))
}

/// The CA's certificate, public: an agent checks it against its pinned
/// fingerprint before it trusts anything the server says (plane/tls.rs).
async fn ca_pem(State(st): State<AppState>) -> Result<Response> {
    match st.ca_pem {
        Some(pem) => Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], pem).into_response()),
        None => Err(AppError(ApiError::new(404, "this control plane serves plain HTTP: it has no CA"))),
    }
}

/// The Prometheus exporter. Open like the DCGM exporter's (no token) unless
/// the control plane runs with `--metrics-auth`: then it takes a reader's,
/// user's or admin's token, since its labels name users, teams and jobs.
async fn metrics(State(st): State<AppState>, who: std::result::Result<Who, AppError>) -> Result<Response> {
    let scrape = if st.metrics_auth {
        call(&st, &who?, |reply| Call::Metrics { reply }).await?
    } else {
        let (tx, rx) = oneshot::channel();
        st.tx
            .send(Event::Open(Open::Metrics { reply: tx }))
            .map_err(|_| AppError(ApiError::new(503, "the daemon is shutting down")))?;
        rx.await.map_err(|_| AppError(ApiError::new(503, "the daemon is shutting down")))?
    };
    let text = crate::plane::metrics::render(&scrape);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Bytes;
    use futures_util::stream;
    use tower::ServiceExt;

    use super::*;

    /// A chunked body (no declared length) over the limit is refused in
    /// JSON, as a declared one is.
    #[tokio::test]
    async fn an_oversized_chunked_body_is_refused_in_json() {
        let (tx, _rx) = std::sync::mpsc::channel();
        let (events, _) = broadcast::channel(4);
        let state = AppState {
            tx,
            events,
            data_dir: std::env::temp_dir(),
            metrics_auth: false,
            ca_pem: None,
            local_users: Default::default(),
            log_watch: Default::default(),
            away: Default::default(),
            terminals: Default::default(),
        };
        let chunks = (0..6).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 1024 * 1024])));
        let req = axum::http::Request::post("/api/v1/jobs")
            .header(header::AUTHORIZATION, "Bearer x")
            .body(axum::body::Body::from_stream(stream::iter(chunks)))
            .expect("request");
        let resp = router(state).oneshot(req).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("a JSON error");
        assert!(v["error"].as_str().is_some_and(|e| e.contains("larger than 4 MiB")), "{v}");
    }
}
