//! The cluster as the dashboard and `gpool nodes` read it: the nodes (a
//! page of them) and the overview.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use gpool_api as api;

use super::who::Who;
use super::{AppState, Result, call, number, only};
use crate::plane::controller::Call;

/// `?offset=N&limit=M`: a page of the nodes, in the order they joined (the dashboard's nodes page).
pub(super) async fn nodes(
    State(st): State<AppState>,
    who: Who,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Json<Vec<api::NodeView>>> {
    only(&p, &["offset", "limit"])?;
    let offset = number::<usize>(&p, "offset")?.unwrap_or(0);
    let limit = number::<usize>(&p, "limit")?.unwrap_or(usize::MAX);
    Ok(Json(call(&st, &who, |reply| Call::Nodes { page: Some((offset, limit)), reply }).await?))
}

pub(super) async fn overview(State(st): State<AppState>, who: Who) -> Result<Json<api::Overview>> {
    Ok(Json(call(&st, &who, |reply| Call::Overview { reply }).await?))
}
