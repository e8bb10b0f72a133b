//! `/api/v1/schedules`: recurring jobs and pipelines. Apply one by name
//! (JSON or YAML), list them, delete one. And `/api/v1/power`: the power
//! budgets, read and set live, and `/api/v1/budgets`: the monthly spending
//! budgets (the other settings that change over time).

use axum::Json;
use axum::extract::State;
use gpool_api::schedule::{ScheduleSpec, ScheduleView};

use super::extract::{Body, P};
use super::params::NamePath;
use super::who::Who;
use super::{AppState, Result, call};
use crate::plane::controller::Call;

pub(super) async fn apply(
    State(st): State<AppState>,
    who: Who,
    P(NamePath { name }): P<NamePath>,
    Body(spec): Body<ScheduleSpec>,
) -> Result<Json<ScheduleView>> {
    Ok(Json(call(&st, &who, |reply| Call::ApplySchedule { name, spec: Box::new(spec), reply }).await?))
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<ScheduleView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Schedules { reply }).await?))
}

pub(super) async fn delete(
    State(st): State<AppState>,
    who: Who,
    P(NamePath { name }): P<NamePath>,
) -> Result<Json<ScheduleView>> {
    Ok(Json(call(&st, &who, |reply| Call::DeleteSchedule { name, reply }).await?))
}

/// `GET /api/v1/power`: every power budget and its use.
pub(super) async fn power(State(st): State<AppState>, who: Who) -> Result<Json<Vec<gpool_api::PowerView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Power { reply }).await?))
}

/// `PUT /api/v1/power`: set a budget live (admins).
pub(super) async fn set_power(
    State(st): State<AppState>,
    from: super::who::Peer,
    who: Who,
    Body(req): Body<gpool_api::PowerSet>,
) -> Result<Json<Vec<gpool_api::PowerView>>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::SetPower { req, from, reply }).await?))
}

/// `GET /api/v1/budgets`: every monthly budget and this month's spend.
pub(super) async fn budgets(State(st): State<AppState>, who: Who) -> Result<Json<Vec<gpool_api::BudgetView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Budgets { reply }).await?))
}
