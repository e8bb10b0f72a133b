//! `/api/v1/services`: apply (create or update) a service spec by name, list
//! the services, delete one.

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::{Applied, Body, P};
use super::params::NamePath;
use super::{AppState, Result, Who, call};
use crate::plane::controller::Call;

/// `PUT /api/v1/services/{name}`: the spec (JSON or YAML) with its `service:` block.
pub(super) async fn apply(
    State(st): State<AppState>,
    who: Who,
    P(NamePath { name }): P<NamePath>,
    Body(spec): Body<api::JobSpec>,
) -> Result<Applied<api::ServiceApplied>> {
    let view = call(&st, &who, |reply| Call::ApplyService { name, spec: Box::new(spec), reply }).await?;
    Ok(Applied { created: view.outcome == "created", view })
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::ServiceView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Services { reply }).await?))
}

pub(super) async fn delete(
    State(st): State<AppState>,
    who: Who,
    P(NamePath { name }): P<NamePath>,
) -> Result<Json<api::ServiceView>> {
    Ok(Json(call(&st, &who, |reply| Call::DeleteService { name, reply }).await?))
}
