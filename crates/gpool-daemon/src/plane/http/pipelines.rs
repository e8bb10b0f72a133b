//! `/api/v1/pipelines`: submit a pipeline run (JSON or YAML), list recent
//! runs, show one with its stages, cancel one.

use axum::Json;
use axum::extract::State;
use gpool_api::pipeline::{PipelineCreated, PipelineList, PipelineSpec, PipelineView};

use super::extract::{Body, Created, P, Q};
use super::params::{PipelinesQuery, RunPath};
use super::who::{Peer, Who};
use super::{AppState, Result, bad, call};
use crate::plane::controller::Call;

pub(super) async fn submit(
    State(st): State<AppState>,
    who: Who,
    Body(spec): Body<PipelineSpec>,
) -> Result<Created<PipelineCreated>> {
    Ok(Created(call(&st, &who, |reply| Call::SubmitPipeline { spec: Box::new(spec), reply }).await?))
}

/// `?limit=N` (1 to 200, default 20).
pub(super) async fn list(State(st): State<AppState>, who: Who, Q(p): Q<PipelinesQuery>) -> Result<Json<PipelineList>> {
    let limit = match p.limit {
        Some(l) if !(1..=200).contains(&l) => return Err(bad(format!("limit: {l} is not between 1 and 200"))),
        l => l.unwrap_or(20),
    };
    Ok(Json(call(&st, &who, |reply| Call::Pipelines { limit, reply }).await?))
}

pub(super) async fn get_run(
    State(st): State<AppState>,
    who: Who,
    P(RunPath { run }): P<RunPath>,
) -> Result<Json<PipelineView>> {
    Ok(Json(call(&st, &who, |reply| Call::Pipeline { run, reply }).await?))
}

pub(super) async fn cancel(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(RunPath { run }): P<RunPath>,
) -> Result<Json<PipelineView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::CancelPipeline { run, from, reply }).await?))
}
