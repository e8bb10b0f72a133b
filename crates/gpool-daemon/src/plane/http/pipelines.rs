//! `/api/v1/pipelines`: submit a pipeline run (JSON or YAML), list recent
//! runs, show one with its stages, cancel one.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gpool_api::pipeline::{PipelineList, PipelineSpec, PipelineView};

use super::who::{Peer, Who};
use super::{AppState, Result, bad, call, number, only};
use crate::plane::controller::Call;

pub(super) async fn submit(State(st): State<AppState>, who: Who, headers: HeaderMap, body: Bytes) -> Result<Response> {
    let spec: PipelineSpec = super::body::authed_as(&st, &who, &headers, body).await?;
    let out = call(&st, &who, |reply| Call::SubmitPipeline { spec: Box::new(spec), reply }).await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// `?limit=N` (1 to 200, default 20).
pub(super) async fn list(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<PipelineList>> {
    only(&p, &["limit"])?;
    let limit = match number::<u32>(&p, "limit")? {
        Some(l) if !(1..=200).contains(&l) => return Err(bad(format!("limit: {l} is not between 1 and 200"))),
        l => l.unwrap_or(20),
    };
    Ok(Json(call(&st, &who, |reply| Call::Pipelines { limit, reply }).await?))
}

fn run_id(run: &str) -> Result<u64> {
    run.parse().map_err(|_| bad(format!("{run:?} is not a pipeline run id")))
}

pub(super) async fn get_run(
    State(st): State<AppState>,
    who: Who,
    Path(run): Path<String>,
) -> Result<Json<PipelineView>> {
    let run = run_id(&run)?;
    Ok(Json(call(&st, &who, |reply| Call::Pipeline { run, reply }).await?))
}

pub(super) async fn cancel(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    Path(run): Path<String>,
) -> Result<Json<PipelineView>> {
    let run = run_id(&run)?;
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::CancelPipeline { run, from, reply }).await?))
}
