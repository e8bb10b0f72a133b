//! `/api/v1/reservations`: advance reservations (admins make and delete them; anyone may list).

use axum::Json;
use axum::extract::State;
use gpool_api::reservation::{ReservationRequest, ReservationView};

use super::extract::{Body, P};
use super::params::NamePath;
use super::{AppState, Result, Who, call};
use crate::plane::controller::Call;

pub(super) async fn create(
    State(st): State<AppState>,
    who: Who,
    Body(req): Body<ReservationRequest>,
) -> Result<Json<ReservationView>> {
    Ok(Json(call(&st, &who, |reply| Call::CreateReservation { req, reply }).await?))
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<ReservationView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Reservations { reply }).await?))
}

pub(super) async fn delete(
    State(st): State<AppState>,
    who: Who,
    P(NamePath { name }): P<NamePath>,
) -> Result<Json<ReservationView>> {
    Ok(Json(call(&st, &who, |reply| Call::DeleteReservation { name, reply }).await?))
}
