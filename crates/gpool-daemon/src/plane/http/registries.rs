//! `/api/v1/registries`: the caller's logins to image registries (passwords go in, never out).

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::{Body, P};
use super::params::RegistryPath;
use super::{AppState, Result, Who, call};
use crate::plane::controller::Call;

pub(super) async fn login(
    State(st): State<AppState>,
    who: Who,
    P(RegistryPath { registry }): P<RegistryPath>,
    Body(req): Body<api::RegistryLogin>,
) -> Result<Json<api::RegistryView>> {
    Ok(Json(call(&st, &who, |reply| Call::RegistryLogin { registry, req, reply }).await?))
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::RegistryView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Registries { reply }).await?))
}

pub(super) async fn logout(
    State(st): State<AppState>,
    who: Who,
    P(RegistryPath { registry }): P<RegistryPath>,
) -> Result<Json<api::RegistryView>> {
    Ok(Json(call(&st, &who, |reply| Call::RegistryLogout { registry, reply }).await?))
}
