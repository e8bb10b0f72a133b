//! The cluster as the dashboard and `gpool nodes` read it: the nodes (a
//! page of them) and the overview.

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::Q;
use super::params::NodesQuery;
use super::who::Who;
use super::{AppState, Result, call};
use crate::plane::controller::Call;

/// `?offset=N&limit=M`: a page of the nodes, in the order they joined (the dashboard's nodes page).
pub(super) async fn nodes(
    State(st): State<AppState>,
    who: Who,
    Q(p): Q<NodesQuery>,
) -> Result<Json<Vec<api::NodeView>>> {
    let offset = p.offset.map_or(0, |o| usize::try_from(o).unwrap_or(usize::MAX));
    let limit = p.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    Ok(Json(call(&st, &who, |reply| Call::Nodes { page: Some((offset, limit)), reply }).await?))
}

pub(super) async fn overview(State(st): State<AppState>, who: Who) -> Result<Json<api::Overview>> {
    Ok(Json(call(&st, &who, |reply| Call::Overview { reply }).await?))
}
