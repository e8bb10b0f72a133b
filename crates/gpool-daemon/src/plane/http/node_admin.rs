//! What admins do to nodes: drain and resume, a spot notice, and GPU
//! faults (inject into a simulated GPU, restore a quarantined one, the
//! fleet's health).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use gpool_api as api;

use super::extract::P;
use super::params::NamePath;
use super::who::{Peer, Who};
use super::{AppError, AppState, Result, call};
use crate::plane::controller::{ApiError, Call};

pub(super) async fn drain(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
) -> Result<Json<api::NodeView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Drain { node, draining: true, from, reply }).await?))
}

pub(super) async fn resume(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
) -> Result<Json<api::NodeView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Drain { node, draining: false, from, reply }).await?))
}

/// A spot notice: `{"in": "2m"}` (a duration) or `{"seconds": 120}`.
pub(super) async fn notice(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    body: Bytes,
) -> Result<Json<api::NodeView>> {
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        AppError(ApiError::new(400, format!("a notice is {{\"in\": \"2m\"}} or {{\"seconds\": 120}}: {e}")))
    })?;
    let within_ms = match (v.get("in").and_then(|x| x.as_str()), v.get("seconds").and_then(serde_json::Value::as_u64)) {
        (Some(d), None) => api::quantity::parse_duration(d)
            .map_err(|e| AppError(ApiError::new(400, format!("in: {e}"))))?
            .as_millis() as u64,
        (None, Some(s)) => s.saturating_mul(1000),
        _ => return Err(AppError(ApiError::new(400, "a notice gives either \"in\" (e.g. \"2m\") or \"seconds\""))),
    };
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Notice { node, within_ms, from, reply }).await?))
}

/// `{"gpu": 1, "xid": 79}`, `{"gpu": 1, "ecc_uncorrected": true}` or `{"gpu": 1, "gone": true}`.
pub(super) async fn inject(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    body: Bytes,
) -> Result<Json<api::NodeView>> {
    let v = object(&body, "{\"gpu\": 1, \"xid\": 79} (or \"ecc_uncorrected\": true, or \"gone\": true)")?;
    let gpu = gpu_of(&v)?;
    let xid = v.get("xid").map(|x| x.as_u64().ok_or_else(|| bad("xid is a number, e.g. 79")));
    let flag = |k: &str| v.get(k).and_then(serde_json::Value::as_bool).unwrap_or(false);
    let fault = match (xid, flag("ecc_uncorrected"), flag("gone")) {
        (Some(x), false, false) => gpool_gpu::InjectedFault::Xid(x?),
        (None, true, false) => gpool_gpu::InjectedFault::EccUncorrected,
        (None, false, true) => gpool_gpu::InjectedFault::Gone,
        _ => return Err(bad("give exactly one fault: \"xid\": N, \"ecc_uncorrected\": true or \"gone\": true")),
    };
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::InjectFault { node, gpu, fault, from, reply }).await?))
}

/// `{"gpu": 1}`.
pub(super) async fn restore(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    body: Bytes,
) -> Result<Json<api::NodeView>> {
    let gpu = gpu_of(&object(&body, "{\"gpu\": 1}")?)?;
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::RestoreGpu { node, gpu, from, reply }).await?))
}

pub(super) async fn health(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::QuarantineView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Health { reply }).await?))
}

fn bad(why: impl Into<String>) -> AppError {
    AppError(ApiError::new(400, why))
}

fn object(body: &[u8], shape: &str) -> Result<serde_json::Value> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(bad(format!("expected a JSON object such as {shape}"))),
        Err(e) => Err(bad(format!("expected a JSON object such as {shape}: {e}"))),
    }
}

fn gpu_of(v: &serde_json::Value) -> Result<u32> {
    v.get("gpu")
        .and_then(serde_json::Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
        .ok_or_else(|| bad("\"gpu\" is the GPU's index on the node, e.g. 1 (see gpool nodes)"))
}
