//! `/api/v1/schedules`: recurring jobs and pipelines. Apply one by name
//! (JSON or YAML), list them, delete one.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use gpool_api::schedule::{ScheduleSpec, ScheduleView};

use super::who::Who;
use super::{AppState, Result, bad, call, parse};
use crate::plane::controller::Call;

pub(super) async fn apply(
    State(st): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<ScheduleView>> {
    let yaml = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("yaml"));
    let spec: ScheduleSpec = parse(&body, yaml).map_err(bad)?;
    Ok(Json(call(&st, &who, |reply| Call::ApplySchedule { name, spec: Box::new(spec), reply }).await?))
}

pub(super) async fn list(State(st): State<AppState>, who: Who) -> Result<Json<Vec<ScheduleView>>> {
    Ok(Json(call(&st, &who, |reply| Call::Schedules { reply }).await?))
}

pub(super) async fn delete(
    State(st): State<AppState>,
    who: Who,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>> {
    Ok(Json(call(&st, &who, |reply| Call::DeleteSchedule { name, reply }).await?))
}
