//! `/api/v1/tokens` and `/api/v1/whoami`: who the caller is, and the
//! tokens admins make for others (and anyone may revoke their own).

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::{Body, Created, P};
use super::params::TokenPath;
use super::who::{Peer, Who};
use super::{AppState, Result, call};
use crate::plane::controller::Call;

pub(super) async fn whoami(State(st): State<AppState>, who: Who) -> Result<Json<api::WhoAmI>> {
    Ok(Json(call(&st, &who, |reply| Call::WhoAmI { reply }).await?))
}
pub(super) async fn create_token(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    Body(req): Body<api::TokenRequest>,
) -> Result<Created<api::TokenCreated>> {
    let from = from.0;
    Ok(Created(call(&st, &who, |reply| Call::CreateToken { req, from, reply }).await?))
}
pub(super) async fn list_tokens(State(st): State<AppState>, who: Who) -> Result<Json<Vec<api::TokenView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Tokens { reply }).await?))
}
pub(super) async fn revoke_token(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(TokenPath { id }): P<TokenPath>,
) -> Result<Json<api::TokenView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::RevokeToken { id, from, reply }).await?))
}
