//! What handlers read from a request, typed: the path's parameters
//! ([`P`]), the query's ([`Q`]), a JSON or YAML body ([`Body`], [`Specs`]).
//! Each refuses what it cannot read with a JSON error that says what was
//! wrong, as every answer of the API, and each tells the OpenAPI document
//! (aide's [`OperationInput`]) what it reads and how it can refuse: the
//! document's parameters, bodies and most error statuses come from the
//! handlers' signatures, not from a list kept beside them.

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::{MediaType, Operation, RequestBody, Response, SchemaObject, StatusCode};
use aide::operation::set_body;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::IntoResponse;
use gpool_api as api;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::who::{Peer, Who};
use super::{AppError, AppState, bad, body};
use crate::plane::controller::ApiError;

/// The path's parameters, as the struct `T` names them.
pub(super) struct P<T>(pub T);

/// The query's parameters, as the struct `T` names them (unknown ones are
/// refused where `T` says `deny_unknown_fields`).
pub(super) struct Q<T>(pub T);

/// A body of one `T`, in JSON or (with a YAML `Content-Type`) YAML, parsed
/// only once the caller's token is known good (`body.rs`).
pub(super) struct Body<T>(pub T);

/// A submission's job specs: one spec, or `{jobs: [...]}`.
pub(super) struct Specs(pub Vec<api::JobSpec>);

/// A JSON body of one `T`, for the agent protocol: parsed at once (a node's
/// token is checked by the call it makes), JSON only.
pub(super) struct JsonBody<T>(pub T);

/// A `201 Created` answer with `T`.
pub(super) struct Created<T>(pub T);

/// A spec applied: `201 Created` when it was new, else `200`.
pub(super) struct Applied<T> {
    pub created: bool,
    pub view: T,
}

/// What a submission's body may be, for the document.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum Submission {
    One(Box<api::JobSpec>),
    Batch(api::spec::Batch),
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for P<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, AppError> {
        match axum::extract::Path::<T>::from_request_parts(parts, st).await {
            Ok(axum::extract::Path(t)) => Ok(P(t)),
            Err(e) => Err(bad(format!("the path: {}", e.body_text()))),
        }
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, AppError> {
        match axum::extract::Query::<T>::from_request_parts(parts, st).await {
            Ok(axum::extract::Query(t)) => Ok(Q(t)),
            // "Failed to deserialize query string: unknown field `x`, expected one of …"
            Err(e) => Err(bad(e.body_text())),
        }
    }
}

/// A body that could not be read: too large (axum's limit, `MAX_BODY`), or cut off.
fn unread(e: axum::extract::rejection::BytesRejection) -> AppError {
    match e.status().as_u16() {
        413 => AppError(ApiError::new(413, format!("the body is larger than {} MiB", super::MAX_BODY / (1024 * 1024)))),
        status => AppError(ApiError::new(status, e.body_text())),
    }
}

/// The caller, checked, and the body's bytes and whether they are YAML.
async fn checked_body(req: Request, st: &AppState) -> Result<(Who, axum::http::HeaderMap, Bytes), AppError> {
    let (mut parts, raw) = req.into_parts();
    let who = Who::from_request_parts(&mut parts, st).await?;
    let headers = parts.headers.clone();
    let bytes = Bytes::from_request(Request::from_parts(parts, raw), st).await.map_err(unread)?;
    Ok((who, headers, bytes))
}

impl<T: DeserializeOwned + Send + 'static> FromRequest<AppState> for Body<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, AppError> {
        let (who, headers, bytes) = checked_body(req, st).await?;
        body::authed_as(st, &who, &headers, bytes).await.map(Body)
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, st: &S) -> Result<Self, AppError> {
        let bytes = Bytes::from_request(req, st).await.map_err(unread)?;
        super::parse(&bytes, false).map(JsonBody).map_err(bad)
    }
}

impl<T: serde::Serialize> IntoResponse for Created<T> {
    fn into_response(self) -> axum::response::Response {
        (axum::http::StatusCode::CREATED, axum::Json(self.0)).into_response()
    }
}

impl<T: serde::Serialize> IntoResponse for Applied<T> {
    fn into_response(self) -> axum::response::Response {
        let status = if self.created { axum::http::StatusCode::CREATED } else { axum::http::StatusCode::OK };
        (status, axum::Json(self.view)).into_response()
    }
}

impl FromRequest<AppState> for Specs {
    type Rejection = AppError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, AppError> {
        let (who, headers, bytes) = checked_body(req, st).await?;
        body::authed(st, &who, &headers, bytes, super::submission).await.map(Specs)
    }
}

/// An answer of `{"error": "..."}` with `why` as its description.
pub(super) fn error_response(ctx: &mut GenContext, why: &str) -> Response {
    let mut op = Operation::default();
    let mut r =
        <axum::Json<api::ErrorBody> as aide::OperationOutput>::operation_response(ctx, &mut op).unwrap_or_default();
    r.description = why.to_string();
    r
}

fn errors(ctx: &mut GenContext, list: &[(u16, &str)]) -> Vec<(Option<StatusCode>, Response)> {
    list.iter().map(|(status, why)| (Some(StatusCode::Code(*status)), error_response(ctx, why))).collect()
}

pub(super) const BAD_REQUEST: &str = "the request is not one this operation takes: the error says what and where";
const TOO_LARGE: &str = "the body is larger than 4 MiB";

impl<T: JsonSchema> OperationInput for P<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::extract::Path<T> as OperationInput>::operation_input(ctx, operation);
    }

    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(ctx, &[(400, BAD_REQUEST)])
    }
}

impl<T: JsonSchema> OperationInput for Q<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::extract::Query<T> as OperationInput>::operation_input(ctx, operation);
    }

    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(ctx, &[(400, BAD_REQUEST)])
    }
}

/// The body `T`, in JSON or YAML.
fn json_or_yaml<T: JsonSchema>(ctx: &mut GenContext, operation: &mut Operation) {
    let media = MediaType {
        schema: Some(SchemaObject { json_schema: ctx.schema.subschema_for::<T>(), example: None, external_docs: None }),
        ..MediaType::default()
    };
    let body = RequestBody {
        content: [("application/json".to_string(), media.clone()), ("application/yaml".to_string(), media)]
            .into_iter()
            .collect(),
        required: true,
        ..RequestBody::default()
    };
    set_body(ctx, operation, body);
}

impl<T: JsonSchema> OperationInput for Body<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        json_or_yaml::<T>(ctx, operation);
    }

    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(ctx, &[(400, BAD_REQUEST), (413, TOO_LARGE)])
    }
}

impl OperationInput for Specs {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        json_or_yaml::<Submission>(ctx, operation);
    }

    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(ctx, &[(400, BAD_REQUEST), (413, TOO_LARGE)])
    }
}

/// Every handler that knows its caller may be refused for who it is, and
/// asks the controller, which may be stopping or (`gpool serve`) without
/// its database.
impl OperationInput for Who {
    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(
            ctx,
            &[
                (401, "no token, or one that is not known (or revoked)"),
                (403, "the caller's role may not do this, or (on the Unix socket) its uid has no account"),
                (
                    503,
                    "the daemon is shutting down, or its database is away: reads are answered from memory, \
                     the rest is refused (`X-Gpool-Store-Away`; `X-Gpool-Standby` says to try the next address)",
                ),
            ],
        )
    }
}

impl OperationInput for Peer {}

/// The answer every refusal has: `{"error": "..."}` with a 4xx or 5xx
/// status. Which statuses an operation can answer are documented with it
/// (its extractors' and its own, `api.rs`), so nothing here.
impl aide::OperationOutput for AppError {
    type Inner = api::ErrorBody;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        <axum::Json<api::ErrorBody> as aide::OperationOutput>::operation_response(ctx, operation)
    }
}

impl<T: JsonSchema> OperationInput for JsonBody<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::Json<T> as OperationInput>::operation_input(ctx, operation);
    }

    fn inferred_early_responses(ctx: &mut GenContext, _: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        errors(ctx, &[(400, BAD_REQUEST), (413, TOO_LARGE)])
    }
}

/// The JSON answer of a `T`, described as `what`.
fn answer<T: JsonSchema>(ctx: &mut GenContext, operation: &mut Operation, what: &str) -> Option<Response> {
    let mut r = <axum::Json<T> as aide::OperationOutput>::operation_response(ctx, operation)?;
    r.description = what.to_string();
    Some(r)
}

impl<T: JsonSchema> aide::OperationOutput for Created<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        answer::<T>(ctx, operation, "created")
    }

    fn inferred_responses(ctx: &mut GenContext, operation: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        answer::<T>(ctx, operation, "created").map(|r| (Some(StatusCode::Code(201)), r)).into_iter().collect()
    }
}

impl<T: JsonSchema> aide::OperationOutput for Applied<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        answer::<T>(ctx, operation, "applied")
    }

    fn inferred_responses(ctx: &mut GenContext, operation: &mut Operation) -> Vec<(Option<StatusCode>, Response)> {
        let mut out = Vec::new();
        if let Some(r) = answer::<T>(ctx, operation, "created") {
            out.push((Some(StatusCode::Code(201)), r));
        }
        if let Some(r) = answer::<T>(ctx, operation, "changed (a rolling update), or unchanged") {
            out.push((Some(StatusCode::Code(200)), r));
        }
        out
    }
}
