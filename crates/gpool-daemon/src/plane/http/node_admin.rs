//! What admins do to nodes: drain and resume, a spot notice, and GPU
//! faults (inject into a simulated GPU, restore a quarantined one, the
//! fleet's health).

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use schemars::JsonSchema;
use serde::Deserialize;

use super::extract::{JsonBody, P};
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
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[serde(untagged)]
#[allow(dead_code)]
enum NoticeShape {
    In {
        /// When the node goes away, from now (`2m`).
        #[serde(rename = "in")]
        #[schemars(pattern(api::patterns::DURATION))]
        within: String,
    },
    Seconds {
        /// When the node goes away, in seconds from now.
        seconds: u64,
    },
}

pub(super) async fn notice(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    JsonBody(body): JsonBody<NoticeBody>,
) -> Result<Json<api::NodeView>> {
    let within_ms = match (body.within, body.seconds) {
        (Some(d), None) => api::quantity::parse_duration(&d)
            .map_err(|e| AppError(ApiError::new(400, format!("in: {e}"))))?
            .as_millis() as u64,
        (None, Some(s)) => s.saturating_mul(1000),
        _ => return Err(bad("a notice gives either \"in\" (e.g. \"2m\") or \"seconds\"")),
    };
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Notice { node, within_ms, from, reply }).await?))
}

/// A fault to inject into a simulated GPU: exactly one of an XID, an
/// uncorrectable ECC error, or the GPU falling off the bus.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[serde(untagged)]
#[allow(dead_code)]
enum InjectShape {
    Xid {
        /// The GPU's index on the node (`gpool nodes`).
        gpu: u32,
        /// The XID to raise (79: fallen off the bus; 48: a double-bit ECC error).
        xid: u64,
    },
    Ecc {
        gpu: u32,
        #[schemars(extend("const" = true))]
        ecc_uncorrected: bool,
    },
    Gone {
        gpu: u32,
        #[schemars(extend("const" = true))]
        gone: bool,
    },
}

pub(super) async fn inject(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    JsonBody(body): JsonBody<InjectBody>,
) -> Result<Json<api::NodeView>> {
    let gpu = body.gpu.ok_or_else(|| bad("\"gpu\" is the GPU's index on the node, e.g. 1 (see gpool nodes)"))?;
    let fault = match (body.xid, body.ecc_uncorrected, body.gone) {
        (Some(x), None, None) => gpool_gpu::InjectedFault::Xid(x),
        (None, Some(true), None) => gpool_gpu::InjectedFault::EccUncorrected,
        (None, None, Some(true)) => gpool_gpu::InjectedFault::Gone,
        _ => return Err(bad("give exactly one fault: \"xid\": N, \"ecc_uncorrected\": true or \"gone\": true")),
    };
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::InjectFault { node, gpu, fault, from, reply }).await?))
}

/// A notice as read: which of the two it gives is checked by the handler,
/// whose error says so; the document gives [`NoticeShape`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoticeBody {
    #[serde(rename = "in")]
    within: Option<String>,
    seconds: Option<u64>,
}

/// A fault as read (the document gives [`InjectShape`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InjectBody {
    gpu: Option<u32>,
    xid: Option<u64>,
    ecc_uncorrected: Option<bool>,
    gone: Option<bool>,
}

/// The bodies as the document describes them.
macro_rules! shaped_as {
    ($read:ty, $shape:ty) => {
        impl JsonSchema for $read {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                <$shape>::schema_name()
            }
            fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <$shape>::json_schema(g)
            }
        }
    };
}
shaped_as!(NoticeBody, NoticeShape);
shaped_as!(InjectBody, InjectShape);

/// The GPU to bring back: `{"gpu": 1}`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RestoreBody {
    /// The GPU's index on the node (`gpool nodes`).
    gpu: u32,
}

pub(super) async fn restore(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(NamePath { name: node }): P<NamePath>,
    JsonBody(RestoreBody { gpu }): JsonBody<RestoreBody>,
) -> Result<Json<api::NodeView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::RestoreGpu { node, gpu, from, reply }).await?))
}

pub(super) async fn health(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::QuarantineView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Health { reply }).await?))
}

fn bad(why: impl Into<String>) -> AppError {
    AppError(ApiError::new(400, why))
}
