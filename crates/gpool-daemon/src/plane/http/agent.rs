//! `/agent/v1`: the agent protocol (node tokens): register, the commands'
//! long poll, reports, and shipped logs (docs/cluster.md).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gpool_api as api;
use schemars::JsonSchema;
use serde::Serialize;

use super::extract::{JsonBody, Q};
use super::params::{CommandsQuery, ShipLogQuery};
use super::who::Who;
use super::{AppError, AppState, Result, bad, call};
use crate::plane::controller::{ApiError, Call};

pub(super) async fn register(
    State(st): State<AppState>,
    who: Who,
    JsonBody(reg): JsonBody<api::agent::Register>,
) -> Result<Json<api::agent::Registered>> {
    Ok(Json(call(&st, &who, |reply| Call::Register { reg, reply }).await?))
}

/// The long poll: answered when commands wait, or empty after 20 s.
pub(super) async fn commands(
    State(st): State<AppState>,
    who: Who,
    Q(p): Q<CommandsQuery>,
) -> Result<Json<api::agent::Commands>> {
    let (node, epoch, after) = (p.node, p.epoch, p.after.unwrap_or(0));
    Ok(Json(call(&st, &who, |reply| Call::Poll { node, epoch, after, reply }).await?))
}

pub(super) async fn report(
    State(st): State<AppState>,
    who: Who,
    JsonBody(report): JsonBody<api::agent::Report>,
) -> Result<Json<api::agent::Reported>> {
    Ok(Json(call(&st, &who, |reply| Call::Report { report, reply }).await?))
}

/// The most a replica's log shipped to the control plane may hold (per stream):
/// whatever a node says, the control plane's disk is not its to fill.
const MAX_SHIPPED_LOG: u64 = 4 << 30;

/// How long the control plane's copy of a shipped log is, after a chunk.
#[derive(Serialize, JsonSchema)]
pub(super) struct Shipped {
    /// Bytes the copy holds.
    pub length: u64,
}

/// A gap: the chunk starts after the copy's end.
#[derive(Serialize, JsonSchema)]
pub(super) struct Gap {
    pub error: String,
    /// Bytes the copy holds: resend from there.
    pub length: u64,
}

/// A chunk of a remote replica's output, appended at `offset` to the copy
/// kept here (what `gpool logs` reads). Chunks already here are skipped; a
/// gap is refused with the current length, from which the agent resends.
/// Only the node that runs the replica may send it (`Controller::may_ship_log`).
pub(super) async fn logs(State(st): State<AppState>, who: Who, Q(p): Q<ShipLogQuery>, body: Bytes) -> Result<Response> {
    let (job, rank, offset) = (p.job, p.rank, p.offset);
    // Only the node that runs the replica writes its log (`Controller::may_ship_log`).
    let node = p.node;
    call(&st, &who, |reply| Call::ShipLog { node, job, rank, reply }).await?;
    let stream = p.stream;
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
        Ok(length) => Json(Shipped { length }).into_response(),
        Err(length) => (
            StatusCode::CONFLICT,
            Json(Gap { error: format!("a gap: the log here has {length} bytes; resend from there"), length }),
        )
            .into_response(),
    })
}
