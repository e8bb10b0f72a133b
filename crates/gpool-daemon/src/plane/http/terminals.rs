//! Interactive sessions over HTTP (`plane/terminals.rs` relays them): the
//! client's `POST /api/v1/jobs/{id}/attach`, then its two streams, and the
//! node's two. Streams are `application/octet-stream` bodies of terminal
//! frames, read and written as they come; a request body here has no size
//! limit (it lasts as long as the session) and is never held in memory.

use std::convert::Infallible;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use gpool_api::terminal::AttachView;
use tokio::sync::mpsc;

use super::extract::{P, Q};
use super::params::{JobPath, NodeQuery, SessionPath};
use super::{AppError, AppState, Result, Who, call};
use crate::plane::controller::{ApiError, Call};
use crate::plane::terminals::{RelayError, owner_of};

fn refused(e: RelayError) -> AppError {
    let status = match e {
        RelayError::NoSession => 404,
        RelayError::NotYours => 403,
    };
    AppError(ApiError::new(status, e.to_string()))
}

/// Opens a session on interactive job `id`'s terminal.
pub(super) async fn attach(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Json<AttachView>> {
    let session = st.terminals.open(owner_of(&who.0), id, 0).map_err(|e| AppError(ApiError::new(500, e)))?;
    let answer = call(&st, &who, |reply| Call::Attach { id, session: session.clone(), reply }).await;
    if answer.is_err() {
        st.terminals.forget(&session);
    } else {
        // Halves not taken by then are dropped, which ends the streams of those that were.
        let (relay, name) = (std::sync::Arc::clone(&st.terminals), session.clone());
        tokio::spawn(async move {
            tokio::time::sleep(crate::plane::terminals::JOIN_WITHIN).await;
            relay.forget(&name);
        });
    }
    answer.map(Json)
}

/// A client silent this long is gone: it pings every 5 s.
const CLIENT_SILENT: std::time::Duration = std::time::Duration::from_secs(30);

/// Copies a request's body into `to` until either ends, or (with `silent`)
/// the body has sent nothing for that long: a client whose link dropped
/// without a FIN sends nothing more, and nothing else would end this.
async fn pump(body: Body, to: mpsc::Sender<Bytes>, silent: Option<std::time::Duration>) {
    let mut chunks = body.into_data_stream();
    loop {
        let next = match silent {
            Some(limit) => match tokio::time::timeout(limit, chunks.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => chunks.next().await,
        };
        let Some(Ok(chunk)) = next else { break };
        if to.send(chunk).await.is_err() {
            break;
        }
    }
}

/// A response whose body is what arrives on `from`, until it closes.
fn stream(from: mpsc::Receiver<Bytes>) -> Response {
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(from).map(Ok::<_, Infallible>));
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/octet-stream"), (header::CACHE_CONTROL, "no-store")], body)
        .into_response()
}

/// The client's keystrokes, window sizes and pings, for as long as it is attached.
pub(super) async fn client_input(
    State(st): State<AppState>,
    who: Who,
    P(SessionPath { session }): P<SessionPath>,
    body: Body,
) -> Result<StatusCode> {
    let to = st.terminals.client_input(&session, &owner_of(&who.0)).map_err(refused)?;
    pump(body, to, Some(CLIENT_SILENT)).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The job's terminal output, for the client.
pub(super) async fn client_output(
    State(st): State<AppState>,
    who: Who,
    P(SessionPath { session }): P<SessionPath>,
) -> Result<Response> {
    let from = st.terminals.client_output(&session, &owner_of(&who.0)).map_err(refused)?;
    Ok(stream(from))
}

/// Checks that the caller is node `?node=` and runs the replica session `session` is for.
async fn node_may(st: &AppState, who: &Who, p: NodeQuery, session: &str) -> Result<()> {
    let node = Some(p.node);
    let (job, rank) = st.terminals.replica_of(session).map_err(refused)?;
    call(st, who, |reply| Call::ShipLog { node, job, rank, reply }).await
}

/// The node's side of the keystrokes.
pub(super) async fn node_input(
    State(st): State<AppState>,
    who: Who,
    P(SessionPath { session }): P<SessionPath>,
    Q(p): Q<NodeQuery>,
) -> Result<Response> {
    node_may(&st, &who, p, &session).await?;
    let from = st.terminals.node_input(&session).map_err(refused)?;
    Ok(stream(from))
}

/// The node's side of the output.
pub(super) async fn node_output(
    State(st): State<AppState>,
    who: Who,
    P(SessionPath { session }): P<SessionPath>,
    Q(p): Q<NodeQuery>,
    body: Body,
) -> Result<StatusCode> {
    node_may(&st, &who, p, &session).await?;
    // A job may print nothing for hours: the node's stream ends with the shim's connection.
    let to = st.terminals.node_output(&session).map_err(refused)?;
    pump(body, to, None).await;
    Ok(StatusCode::NO_CONTENT)
}
