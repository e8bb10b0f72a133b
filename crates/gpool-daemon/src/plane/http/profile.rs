//! `/api/v1/jobs/{id}/profile`: take a profile of a running job (the call
//! returns when the nodes have sent theirs), read the latest one, and its
//! flame graph and timeline as SVG, drawn here, off the controller's thread.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use gpool_api as api;

use super::extract::{P, Q};
use super::params::{JobPath, ProfileQuery};
use super::{AppError, AppState, Result, Who, bad, call};
use crate::plane::controller::{ApiError, Call};
use crate::plane::profile_doc::StoredProfile;

/// `POST /api/v1/jobs/{id}/profile?seconds=N`.
pub(super) async fn take(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
    Q(p): Q<ProfileQuery>,
) -> Result<Json<api::ProfileView>> {
    let seconds = p.seconds.unwrap_or(5);
    let native = match p.native.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => return Err(bad(format!("native: {v:?} is neither true nor false"))),
    };
    Ok(Json(call(&st, &who, |reply| Call::Profile { id, seconds, native, reply }).await?))
}

async fn stored(st: &AppState, who: &Who, id: u64) -> Result<StoredProfile> {
    Ok(*call(st, who, |reply| Call::LatestProfile { id, reply }).await?)
}

/// `GET /api/v1/jobs/{id}/profile`.
pub(super) async fn latest(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Json<api::ProfileView>> {
    Ok(Json(stored(&st, &who, id).await?.view()))
}

fn svg(text: String) -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml")], text).into_response()
}

/// `GET /api/v1/jobs/{id}/profile/flamegraph.svg`.
pub(super) async fn flamegraph(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Response> {
    let p = stored(&st, &who, id).await?;
    let drawn = tokio::task::spawn_blocking(move || crate::plane::profile_svg::flamegraph(&p))
        .await
        .map_err(|e| AppError(ApiError::new(500, format!("drawing the flame graph failed: {e}"))))?;
    drawn.map(svg).map_err(|e| AppError(ApiError::new(404, e)))
}

/// `GET /api/v1/jobs/{id}/profile/timeline.svg`.
pub(super) async fn timeline(State(st): State<AppState>, who: Who, P(JobPath { id }): P<JobPath>) -> Result<Response> {
    let p = stored(&st, &who, id).await?;
    Ok(svg(crate::plane::profile_svg::timeline(&p)))
}
