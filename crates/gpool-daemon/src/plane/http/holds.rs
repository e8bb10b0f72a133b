//! `POST /api/v1/jobs/{id}/hold` and `/release`: a pending job held back
//! and let go (the controller's `holds.rs`).

use axum::Json;
use axum::extract::{Path, State};
use gpool_api as api;

use super::who::{Peer, Who};
use super::{AppState, Result, call, job_id};
use crate::plane::controller::Call;

pub(super) async fn hold(st: State<AppState>, from: Peer, who: Who, id: Path<String>) -> Result<Json<api::JobView>> {
    set_hold(st, from, who, id, true).await
}

pub(super) async fn release(st: State<AppState>, from: Peer, who: Who, id: Path<String>) -> Result<Json<api::JobView>> {
    set_hold(st, from, who, id, false).await
}

async fn set_hold(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    Path(id): Path<String>,
    hold: bool,
) -> Result<Json<api::JobView>> {
    let (id, from) = (job_id(&id)?, from.0);
    Ok(Json(call(&st, &who, |reply| Call::Hold { id, hold, from, reply }).await?))
}
