//! Who makes a request, as handlers extract it: the bearer token of its
//! `Authorization` header, or, on the daemon's Unix socket with no token,
//! the account of the uid the kernel gave for the connection
//! (`SO_PEERCRED`, `listen.rs`), looked up once per half minute.

use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use super::{AppError, AppState};
use crate::accounts::{Remembered, group_names, lookup_uid};
use crate::plane::auth::{Credential, LocalUser};
use crate::plane::controller::ApiError;
use crate::plane::listen::LocalPeer;

/// The caller's credential.
pub(super) struct Who(pub(super) Credential);

/// Where a request came from, for the audit log: an address, the Unix
/// socket with the caller's uid and pid, or `unknown` (tests that call the
/// router directly).
pub(super) struct Peer(pub(super) String);

/// Local callers' accounts and groups by uid, remembered.
#[derive(Default)]
pub struct LocalUsers(Remembered<u32, Option<LocalUser>>);

impl LocalUsers {
    /// The account of `uid` and its groups; `None` if it has no account.
    pub fn resolve(&self, uid: u32) -> anyhow::Result<Option<LocalUser>> {
        self.0.get(&uid, |&uid| {
            let Some(account) = lookup_uid(uid)? else { return Ok(None) };
            let groups = group_names(&account.name)?;
            Ok(Some(LocalUser { uid, name: account.name, groups }))
        })
    }
}

fn denied(msg: impl Into<String>) -> AppError {
    AppError(ApiError::new(401, msg))
}

/// The secret of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<Result<String, AppError>> {
    let value = headers.get(header::AUTHORIZATION)?;
    Some(
        value
            .to_str()
            .ok()
            // The scheme is case-insensitive (RFC 9110, section 11.1).
            .and_then(|v| v.get(..7).filter(|s| s.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| denied("the Authorization header must be 'Bearer <token>' (the CLI sends --token so)")),
    )
}

impl FromRequestParts<AppState> for Who {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Who, AppError> {
        if let Some(token) = bearer(&parts.headers) {
            return token.map(|t| Who(Credential::Token(t)));
        }
        let Some(LocalPeer { uid, .. }) = parts.extensions.get::<LocalPeer>().copied() else {
            return Err(denied(
                "no token: pass --token (or GPOOL_TOKEN), or send 'Authorization: Bearer <token>'; \
                 on the daemon's machine, the CLI needs none over its Unix socket",
            ));
        };
        let users = Arc::clone(&st.local_users);
        let found = tokio::task::spawn_blocking(move || users.resolve(uid))
            .await
            .map_err(|e| AppError(ApiError::new(500, format!("looking up uid {uid}: {e}"))))?
            .map_err(|e| AppError(ApiError::new(500, format!("looking up uid {uid}: {e:#}"))))?;
        match found {
            Some(user) => Ok(Who(Credential::Local(user))),
            None => Err(AppError(ApiError::new(
                403,
                format!("uid {uid} has no account on this machine (getent passwd {uid} finds none): use a token"),
            ))),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Peer, Self::Rejection> {
        if let Some(ConnectInfo(addr)) = parts.extensions.get::<ConnectInfo<std::net::SocketAddr>>() {
            return Ok(Peer(addr.to_string()));
        }
        if let Some(LocalPeer { uid, pid }) = parts.extensions.get::<LocalPeer>() {
            return Ok(Peer(format!("unix socket (uid {uid}, pid {})", pid.map_or(-1, i64::from))));
        }
        Ok(Peer("unknown".into()))
    }
}
