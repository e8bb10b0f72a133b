//! `POST /api/v1/jobs/{id}/hold` and `/release`: a pending job held back
//! and let go (the controller's `holds.rs`).

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::P;
use super::params::JobPath;
use super::who::{Peer, Who};
use super::{AppState, Result, call};
use crate::plane::controller::Call;

pub(super) async fn hold(st: State<AppState>, from: Peer, who: Who, id: P<JobPath>) -> Result<Json<api::JobView>> {
    set_hold(st, from, who, id, true).await
}

pub(super) async fn release(st: State<AppState>, from: Peer, who: Who, id: P<JobPath>) -> Result<Json<api::JobView>> {
    set_hold(st, from, who, id, false).await
}

async fn set_hold(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(JobPath { id }): P<JobPath>,
    hold: bool,
) -> Result<Json<api::JobView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Hold { id, hold, from, reply }).await?))
}
