//! The REST API under `/api/v1`: handlers translate HTTP to controller
//! [`Call`]s and back; they hold no state and take no locks.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::mpsc::Sender;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use gpool_api as api;
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, oneshot};

use crate::plane::controller::{ApiError, Call, EVENTS_PAGE, Event, ListQuery, Open, Reply};

mod body;
mod cluster;
mod holds;
mod log_watch;
mod logs;
mod node_admin;
mod pipelines;
mod profile;
mod registries;
mod reservations;
mod routes;
mod schedules;
mod services;
mod terminals;
mod who;
use logs::logs;
pub use who::LocalUsers;
use who::{Peer, Who};

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

pub use routes::ROUTES;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/jobs", post(submit).get(list))
        .route("/api/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/api/v1/jobs/{id}/cancel", post(cancel))
        .route("/api/v1/jobs/{id}/hold", post(holds::hold))
        .route("/api/v1/jobs/{id}/release", post(holds::release))
        .route("/api/v1/jobs/{id}/logs", get(logs))
        .route("/api/v1/nodes", get(cluster::nodes))
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/registries", get(registries::list))
        .route("/api/v1/reservations", get(reservations::list).post(reservations::create))
        .route("/api/v1/reservations/{name}", axum::routing::delete(reservations::delete))
        .route("/api/v1/registries/{registry}", axum::routing::put(registries::login).delete(registries::logout))
        .route("/api/v1/pipelines", post(pipelines::submit).get(pipelines::list))
        .route("/api/v1/pipelines/{run}", get(pipelines::get_run))
        .route("/api/v1/pipelines/{run}/cancel", post(pipelines::cancel))
        .route("/api/v1/power", get(schedules::power).put(schedules::set_power))
        .route("/api/v1/budgets", get(schedules::budgets))
        .route("/api/v1/schedules", get(schedules::list))
        .route("/api/v1/schedules/{name}", axum::routing::put(schedules::apply).delete(schedules::delete))
        .route("/api/v1/services", get(services::list))
        .route("/api/v1/services/{name}", axum::routing::put(services::apply).delete(services::delete))
        .route("/api/v1/cost", get(cost))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/events", get(events))
        .route("/api/v1/tokens", post(create_token).get(list_tokens))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/jobs/{id}/usage", get(usage))
        .route("/api/v1/jobs/{id}/advice", get(advice))
        .route("/api/v1/jobs/{id}/profile", post(profile::take).get(profile::latest))
        .route("/api/v1/jobs/{id}/profile/flamegraph.svg", get(profile::flamegraph))
        .route("/api/v1/jobs/{id}/profile/timeline.svg", get(profile::timeline))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/overview", get(cluster::overview))
        .route("/metrics", get(metrics))
        .route("/tls/ca.pem", get(ca_pem))
        .route("/api/v1/nodes/{name}/drain", post(node_admin::drain))
        .route("/api/v1/nodes/{name}/resume", post(node_admin::resume))
        .route("/api/v1/nodes/{name}/notice", post(node_admin::notice))
        .route("/api/v1/nodes/{name}/inject", post(node_admin::inject))
        .route("/api/v1/nodes/{name}/restore", post(node_admin::restore))
        .route("/api/v1/health", get(node_admin::health))
        .route("/agent/v1/register", post(agent_register))
        .route("/agent/v1/commands", get(agent_commands))
        .route("/agent/v1/report", post(agent_report))
        .route("/agent/v1/logs", post(agent_logs))
        .merge(terminals::routes())
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
    if yaml {
        let de = serde_yaml_ng::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    } else {
        let mut de = serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
        })
    }
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], crate::plane::openapi::document_text())
}

/// The job specs of a submission's body: one spec, or `{jobs: [...]}`, in
/// JSON or (`yaml`) YAML; the error says what is wrong and where.
pub fn submission(body: &[u8], yaml: bool) -> std::result::Result<Vec<api::JobSpec>, String> {
    body::shallow(body)?;
    let value: serde_json::Value = if yaml {
        serde_yaml_ng::from_slice(body).map_err(|e| format!("the body is not valid YAML: {e}"))?
    } else {
        serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?
    };
    Ok(if value.get("jobs").is_some() {
        parse::<api::spec::Batch>(body, yaml)?.jobs
    } else {
        vec![parse::<api::JobSpec>(body, yaml)?]
    })
}

async fn submit(State(st): State<AppState>, who: Who, headers: HeaderMap, body: Bytes) -> Result<Response> {
    let specs = body::authed(&st, &who, &headers, body, submission).await?;
    let out = call(&st, &who, |reply| Call::Submit { specs, reply }).await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

fn only(params: &HashMap<String, String>, allowed: &[&str]) -> Result<()> {
    match params.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(bad(format!("unknown query parameter {k:?}; expected one of {}", allowed.join(", ")))),
        None => Ok(()),
    }
}

fn number<T: std::str::FromStr>(params: &HashMap<String, String>, key: &str) -> Result<Option<T>> {
    params.get(key).map(|v| v.parse::<T>().map_err(|_| bad(format!("{key}: {v:?} is not a number")))).transpose()
}

async fn list(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<api::JobList>> {
    only(&p, &["state", "user", "team", "queue", "ended_since", "ended_until", "after", "limit"])?;
    // `gpool acct`: jobs that ended in [since, until), RFC 3339.
    let time = |key: &str| {
        p.get(key)
            .map(|v| api::time::parse_rfc3339(v).ok_or_else(|| bad(format!("{key}: {v:?} is not an RFC 3339 time"))))
            .transpose()
    };
    let mut states = Vec::new();
    for s in p.get("state").map(|s| s.split(',').filter(|x| !x.is_empty()).collect::<Vec<_>>()).unwrap_or_default() {
        let st = match s {
            "active" => {
                states.extend([api::JobState::Pending, api::JobState::Starting, api::JobState::Running, api::JobState::Stopping]);
                continue;
            }
            other => api::JobState::parse(other).ok_or_else(|| {
                bad(format!("state: {other:?} is not one of pending, starting, running, stopping, succeeded, failed, cancelled, timed_out, active"))
            })?,
        };
        states.push(st);
    }
    let query = ListQuery {
        states,
        user: p.get("user").cloned(),
        team: p.get("team").cloned(),
        queue: p.get("queue").cloned(),
        ended_from: time("ended_since")?,
        ended_before: time("ended_until")?,
        after: number(&p, "after")?,
        limit: match number(&p, "limit")? {
            Some(l) if !(1..=1000).contains(&l) => return Err(bad(format!("limit: {l} is not between 1 and 1000"))),
            l => l.unwrap_or(100),
        },
    };
    Ok(Json(call(&st, &who, |reply| Call::List { query, reply }).await?))
}

fn job_id(id: &str) -> Result<u64> {
    id.parse().map_err(|_| bad(format!("{id:?} is not a job id")))
}

async fn get_job(State(st): State<AppState>, who: Who, Path(id): Path<String>) -> Result<Json<api::JobView>> {
    let id = job_id(&id)?;
    Ok(Json(call(&st, &who, |reply| Call::Get { id, reply }).await?))
}

async fn cancel(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<api::JobView>> {
    let id = job_id(&id)?;
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Cancel { id, from, reply }).await?))
}

/// `?by=team|user|queue|pool|job&since=30d`.
async fn cost(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<api::CostReport>> {
    only(&p, &["by", "since"])?;
    let by = p.get("by").cloned().unwrap_or_else(|| "team".into());
    let since = match p.get("since") {
        None => std::time::Duration::from_secs(30 * 86_400),
        Some(s) => api::quantity::parse_duration(s).map_err(|e| bad(format!("since: {e} (e.g. 30d, 12h)")))?,
    };
    Ok(Json(call(&st, &who, |reply| Call::Cost { by, since, reply }).await?))
}

async fn pools(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::PoolView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Pools { reply }).await?))
}

async fn queues(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::QueueView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Queues { reply }).await?))
}

async fn usage(State(st): State<AppState>, who: Who, Path(id): Path<String>) -> Result<Json<api::JobUsageView>> {
    let id = job_id(&id)?;
    Ok(Json(call(&st, &who, |reply| Call::Usage { id, reply }).await?))
}

/// `?minSpan=2m`: judge on less telemetry than the advisor's default 5 minutes.
async fn advice(
    State(st): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<api::AdviceView>> {
    only(&p, &["minSpan"])?;
    let id = job_id(&id)?;
    let min_span = p
        .get("minSpan")
        .map(|v| api::quantity::parse_duration(v).map_err(|e| bad(format!("minSpan: {e}"))))
        .transpose()?;
    Ok(Json(call(&st, &who, |reply| Call::Advice { id, min_span, reply }).await?))
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

async fn agent_register(State(st): State<AppState>, who: Who, body: Bytes) -> Result<Json<api::agent::Registered>> {
    let reg: api::agent::Register = parse(&body, false).map_err(bad)?;
    Ok(Json(call(&st, &who, |reply| Call::Register { reg, reply }).await?))
}

/// The long poll: answered when commands wait, or empty after 20 s.
async fn agent_commands(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<api::agent::Commands>> {
    only(&p, &["node", "epoch", "after"])?;
    let node = p.get("node").cloned().ok_or_else(|| bad("node: missing"))?;
    let epoch: u64 = number(&p, "epoch")?.ok_or_else(|| bad("epoch: missing"))?;
    let after: u64 = number(&p, "after")?.unwrap_or(0);
    Ok(Json(call(&st, &who, |reply| Call::Poll { node, epoch, after, reply }).await?))
}

async fn agent_report(State(st): State<AppState>, who: Who, body: Bytes) -> Result<Json<api::agent::Reported>> {
    let report: api::agent::Report = parse(&body, false).map_err(bad)?;
    Ok(Json(call(&st, &who, |reply| Call::Report { report, reply }).await?))
}

/// The most a replica's log shipped to the control plane may hold (per stream):
/// whatever a node says, the control plane's disk is not its to fill.
const MAX_SHIPPED_LOG: u64 = 4 << 30;

/// A chunk of a remote replica's output, appended at `offset` to the copy
/// kept here (what `gpool logs` reads). Chunks already here are skipped; a
/// gap is refused with the current length, from which the agent resends.
/// Only the node that runs the replica may send it (`Controller::may_ship_log`).
async fn agent_logs(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response> {
    only(&p, &["job", "rank", "stream", "offset", "node"])?;
    let job: u64 = number(&p, "job")?.ok_or_else(|| bad("job: missing"))?;
    let rank: u32 = number(&p, "rank")?.ok_or_else(|| bad("rank: missing"))?;
    // Only the node that runs the replica writes its log (`Controller::may_ship_log`).
    let node = p.get("node").cloned();
    call(&st, &who, |reply| Call::ShipLog { node, job, rank, reply }).await?;
    let offset: u64 = number(&p, "offset")?.ok_or_else(|| bad("offset: missing"))?;
    let stream = p.get("stream").cloned().unwrap_or_default();
    if stream != "stdout" && stream != "stderr" {
        return Err(bad(format!("stream: {stream:?} is not stdout or stderr")));
    }
    let path = crate::protocol::log_path(&st.data_dir, job, rank, &stream);
    if offset.saturating_add(body.len() as u64) > MAX_SHIPPED_LOG {
        return Err(AppError(ApiError::new(
            413,
            format!("a shipped log holds at most {MAX_SHIPPED_LOG} bytes (a node's --log-limit is at most that)"),
        )));
    }
    let length = tokio::task::spawn_blocking(move || -> std::io::Result<std::result::Result<u64, u64>> {
        use std::io::Write as _;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        let len = f.metadata()?.len();
        if offset > len {
            return Ok(Err(len));
        }
        let skip = (len - offset) as usize;
        if skip < body.len() {
            f.write_all(&body[skip..])?;
        }
        Ok(Ok(len.max(offset + body.len() as u64)))
    })
    .await
    .map_err(|e| AppError(ApiError::new(500, e.to_string())))?
    .map_err(|e| AppError(ApiError::new(500, format!("cannot write the log: {e}"))))?;
    Ok(match length {
        Ok(n) => Json(serde_json::json!({ "length": n })).into_response(),
        Err(n) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({ "error": format!("a gap: the log here has {n} bytes; resend from there"), "length": n })),
        )
            .into_response(),
    })
}

async fn whoami(State(st): State<AppState>, who: Who) -> Result<Json<api::WhoAmI>> {
    Ok(Json(call(&st, &who, |reply| Call::WhoAmI { reply }).await?))
}

async fn create_token(State(st): State<AppState>, from: Peer, who: Who, body: Bytes) -> Result<Response> {
    let req: api::TokenRequest = parse(&body, false).map_err(bad)?;
    let from = from.0;
    let out = call(&st, &who, |reply| Call::CreateToken { req, from, reply }).await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

async fn list_tokens(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::TokenView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Tokens { reply }).await?))
}

async fn revoke_token(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<api::TokenView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::RevokeToken { id, from, reply }).await?))
}

/// Server-sent events: history after `?after=SEQ` (optionally `&job=ID`), then live.
async fn events(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Sse<impl Stream<Item = std::result::Result<SseEvent, Infallible>>>> {
    only(&p, &["after", "job"])?;
    let after: u64 = number(&p, "after")?.unwrap_or(u64::MAX);
    let job: Option<u64> = number(&p, "job")?;
    let me = call(&st, &who, |reply| Call::WhoAmI { reply }).await?;
    // A job the caller may not see is not found, at once, whether or not it asks for history.
    if let Some(id) = job.filter(|_| after == u64::MAX) {
        call(&st, &who, |reply| Call::Get { id, reply }).await?;
    }
    let live = st.events.subscribe();
    // History comes a page at a time, until a page is not full; then the
    // live events after the last one (the subscription above keeps those
    // that happen meanwhile).
    let first = if after == u64::MAX {
        Vec::new()
    } else {
        call(&st, &who, |reply| Call::Events { after, job, reply }).await?
    };
    let last = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(first.last().map_or(0, |e| e.seq)));
    let more = first.len() >= EVENTS_PAGE;
    let (pager_st, pager_who, seen) = (st.clone(), who.0.clone(), last.clone());
    let pages = stream::unfold(more, move |more| {
        let (st, who, seen) = (pager_st.clone(), pager_who.clone(), seen.clone());
        async move {
            if !more {
                return None;
            }
            let after = seen.load(std::sync::atomic::Ordering::SeqCst);
            let page = call(&st, &Who(who), |reply| Call::Events { after, job, reply }).await.unwrap_or_default();
            if let Some(e) = page.last() {
                seen.store(e.seq, std::sync::atomic::Ordering::SeqCst);
            }
            let more = page.len() >= EVENTS_PAGE;
            Some((stream::iter(page), more))
        }
    })
    .flatten();
    let history = stream::iter(first).chain(pages);
    // Admins and readers see every event, others their own jobs'.
    let sees_all = me.role == "admin" || me.role == "reader";
    let user = me.user;
    let visible = move |e: &api::EventView| {
        (job.is_none() || e.job == Some(job.unwrap_or(0))) && (sees_all || e.user.as_deref() == Some(user.as_str()))
    };
    let to_sse = |e: api::EventView| {
        Ok(SseEvent::default().id(e.seq.to_string()).event(e.kind.clone()).json_data(&e).unwrap_or_default())
    };
    let past = history.map(to_sse);
    let now = tokio_stream::wrappers::BroadcastStream::new(live).filter_map(move |r| {
        let last = last.load(std::sync::atomic::Ordering::SeqCst);
        let keep = r.ok().filter(|e| e.seq > last && visible(e));
        async move { keep.map(to_sse) }
    });
    Ok(Sse::new(past.chain(now)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_json_and_describes_every_route() {
        let doc: serde_json::Value = serde_json::from_str(crate::plane::openapi::document_text()).expect("valid JSON");
        for (method, path) in ROUTES {
            assert!(doc["paths"][path][method].is_object(), "{method} {path} missing from the OpenAPI document");
        }
        let described: usize = doc["paths"].as_object().map_or(0, |p| {
            p.values().map(|v| v.as_object().map_or(0, |m| m.keys().filter(|k| *k != "parameters").count())).sum()
        });
        assert_eq!(described, ROUTES.len(), "the document describes routes the router does not have");
    }

    use super::*;
    use tower::ServiceExt;

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
