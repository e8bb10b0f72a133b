//! `/api/v1/services`: apply (create or update) a service spec by name, list
//! the services, delete one.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gpool_api as api;

use super::{AppState, Result, Who, call};
use crate::plane::controller::Call;

/// `PUT /api/v1/services/{name}`: the spec (JSON or YAML) with its `service:` block.
pub(super) async fn apply(
    State(st): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let spec: api::JobSpec = super::body::authed_as(&st, &who, &headers, body).await?;
    let out = call(&st, &who, |reply| Call::ApplyService { name, spec: Box::new(spec), reply }).await?;
    let status = if out.outcome == "created" { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(out)).into_response())
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::ServiceView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Services { reply }).await?))
}

pub(super) async fn delete(
    State(st): State<AppState>,
    who: Who,
    Path(name): Path<String>,
) -> Result<Json<api::ServiceView>> {
    Ok(Json(call(&st, &who, |reply| Call::DeleteService { name, reply }).await?))
}
