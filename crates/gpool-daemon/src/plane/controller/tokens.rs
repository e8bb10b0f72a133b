//! Tokens and their lifecycle: who a bearer token is, until when, and the
//! audit trail of what admins do with them.
//!
//! A token is stored as the SHA-256 of its secret; its public id is the
//! first 12 hex digits of that hash (it names the token in `gpool token
//! list` and `revoke` and reveals nothing of the secret). A revoked token is
//! forgotten at once: the next request carrying it gets 401. An expired one
//! gets 401 saying when it expired. When a token was last used is kept to
//! the minute: a request writes it only when the stored time is older than
//! [`LAST_USED_RESOLUTION_MS`], so reads cost no write.

use gpool_api as api;
use gpool_api::time::rfc3339;
use std::collections::HashMap;

use gpool_store::{TokenRow, Write};

use super::calls::ApiError;
use super::outbox::Outbox;
use crate::plane::auth::{Caller, Credential, Role, hash_token, token_id};

/// The user of a node token that any node may use.
pub(crate) const ANY_NODE: &str = "*";

/// How precisely the last use of a token is recorded.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// A token the controller accepts.
#[derive(Clone, Debug)]
pub(crate) struct TokenEntry {
    pub caller: Caller,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub last_used_ms: Option<i64>,
}

impl TokenEntry {
    /// From its stored row; `None` for a role this gpool does not know
    /// (written by a newer one): such a token is not accepted.
    pub(super) fn from_row(t: TokenRow) -> Option<(String, TokenEntry)> {
        let role = Role::parse(&t.role)?;
        let caller = Caller { user: t.user, team: t.team, role };
        Some((
            t.hash,
            TokenEntry { caller, created_ms: t.created_ms, expires_ms: t.expires_ms, last_used_ms: t.last_used_ms },
        ))
    }

    fn row(&self, hash: &str) -> TokenRow {
        TokenRow {
            hash: hash.into(),
            user: self.caller.user.clone(),
            team: self.caller.team.clone(),
            role: self.caller.role.as_str().into(),
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
            last_used_ms: self.last_used_ms,
        }
    }

    fn view(&self, hash: &str) -> api::TokenView {
        api::TokenView {
            id: token_id(hash).into(),
            user: self.caller.user.clone(),
            team: self.caller.team.clone(),
            role: self.caller.role.as_str().into(),
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
            last_used_ms: self.last_used_ms,
        }
    }
}

/// Live tokens by the SHA-256 of their secret.
#[derive(Debug, Default)]
pub(super) struct Tokens(HashMap<String, TokenEntry>);

impl Tokens {
    /// From the store's rows (a token of a role this gpool does not know is left out).
    pub(super) fn from_rows(rows: Vec<TokenRow>) -> Tokens {
        Tokens(rows.into_iter().filter_map(TokenEntry::from_row).collect())
    }

    pub(super) fn knows(&self, hash: &str) -> bool {
        self.0.contains_key(hash)
    }

    /// Takes a token the store has and this controller does not (another control plane made it).
    pub(super) fn learn(&mut self, row: TokenRow) {
        if !self.0.contains_key(&row.hash) {
            self.0.extend(TokenEntry::from_row(row));
        }
    }

    /// Who makes a call: a token's bearer, or a local caller by its account.
    pub(super) fn identify(
        &mut self,
        who: &Credential,
        cfg: &super::Config,
        out: &mut Outbox,
        now: i64,
    ) -> Result<Caller, ApiError> {
        match who {
            Credential::Token(secret) => self.authenticate(secret, out, now),
            Credential::Local(local) => cfg
                .identities
                .local_caller(local, cfg.daemon_account.as_deref(), cfg.single_user.as_deref())
                .map_err(|e| ApiError::new(403, e)),
        }
    }

    /// Who carries this secret, if it is a live token; records its use.
    fn authenticate(&mut self, secret: &str, out: &mut Outbox, now: i64) -> Result<Caller, ApiError> {
        let hash = hash_token(secret);
        let Some(entry) = self.0.get_mut(&hash) else {
            return Err(ApiError::new(
                401,
                "invalid token (unknown or revoked): use one that `gpool token create` printed, with --token or \
                 GPOOL_TOKEN (in HTTP, 'Authorization: Bearer <token>')",
            ));
        };
        if let Some(at) = entry.expires_ms.filter(|at| *at <= now) {
            return Err(ApiError::new(
                401,
                format!("token {} expired at {}: ask an admin for a new one", token_id(&hash), rfc3339(at)),
            ));
        }
        if entry.last_used_ms.is_none_or(|t| now - t >= LAST_USED_RESOLUTION_MS) {
            entry.last_used_ms = Some(now);
            let row = entry.row(&hash);
            out.write(Write::PutToken(row));
        }
        Ok(entry.caller.clone())
    }

    /// `POST /api/v1/tokens` (admins). `single_user`: the one user tokens may name (`Config::single_user`).
    pub(super) fn create(
        &mut self,
        caller: &Caller,
        req: api::TokenRequest,
        single_user: Option<&str>,
        from: &str,
        out: &mut Outbox,
        now: i64,
    ) -> Result<api::TokenCreated, ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins create tokens"));
        }
        let role = match req.role.as_deref() {
            None => Role::User,
            Some(r) => Role::parse(r)
                .ok_or_else(|| ApiError::new(400, format!("role: {r:?} is not one of user, admin, node, reader")))?,
        };
        if let Some(only) = single_user
            && matches!(role, Role::User | Role::Admin)
            && req.user != only
        {
            return Err(ApiError::new(
                400,
                format!(
                    "single-user mode: every job here runs as {only}, so a token for {} would not keep their jobs \
                     apart; run gpool up as root (jobs then run as their own accounts), or use {only}'s token",
                    req.user
                ),
            ));
        }
        let refused = |r: crate::plane::input::Refused| ApiError::new(400, format!("{}: {}", r.field, r.message));
        crate::plane::input::identity("user", &req.user).map_err(refused)?;
        let team = req.team.unwrap_or_else(|| "default".into());
        crate::plane::input::identity("team", &team).map_err(refused)?;
        let expires_ms = match req.ttl.as_deref() {
            None => None,
            Some(t) => {
                let d = api::quantity::parse_duration(t)
                    .map_err(|e| ApiError::new(400, format!("ttl: {e} (a duration such as 90d or 12h)")))?;
                if d.is_zero() {
                    return Err(ApiError::new(400, "ttl: must be more than zero"));
                }
                Some(now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
            }
        };
        let secret = crate::plane::auth::new_secret().map_err(|e| ApiError::new(500, e))?;
        let hash = hash_token(&secret);
        let entry = TokenEntry {
            caller: Caller { user: req.user.clone(), team: team.clone(), role },
            created_ms: now,
            expires_ms,
            last_used_ms: None,
        };
        out.write(Write::PutToken(entry.row(&hash)));
        let id = token_id(&hash).to_string();
        self.0.insert(hash, entry);
        let until = expires_ms.map_or_else(|| "until revoked".to_string(), |at| format!("until {}", rfc3339(at)));
        out.audit(
            caller,
            from,
            &format!("created token {id} for {} (team {team}, role {}) {until}", req.user, role.as_str()),
            now,
        );
        Ok(api::TokenCreated { token: secret, id, user: req.user, team, role: role.as_str().into(), expires_ms })
    }

    /// `GET /api/v1/tokens`: admins see every token, others their own.
    pub(super) fn list(&self, caller: &Caller) -> Vec<api::TokenView> {
        let mut out: Vec<api::TokenView> = self
            .0
            .iter()
            .filter(|(_, e)| caller.role == Role::Admin || e.caller.user == caller.user)
            .map(|(h, e)| e.view(h))
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        out
    }

    /// `DELETE /api/v1/tokens/{id}`: admins revoke any token, others their own.
    /// A revoked node token's node comes back with it: the caller cuts it off.
    pub(super) fn revoke(
        &mut self,
        caller: &Caller,
        id: &str,
        from: &str,
        out: &mut Outbox,
        now: i64,
    ) -> Result<(api::TokenView, Option<String>), ApiError> {
        let id = id.trim();
        if id.len() < 6 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ApiError::new(400, "token id: 6 to 64 hex digits, as `gpool token list` shows"));
        }
        let id = id.to_ascii_lowercase();
        let matching: Vec<String> = self
            .0
            .iter()
            .filter(|(h, e)| h.starts_with(&id) && (caller.role == Role::Admin || e.caller.user == caller.user))
            .map(|(h, _)| h.clone())
            .collect();
        let hash = match matching.as_slice() {
            [one] => one.clone(),
            [] => return Err(ApiError::new(404, format!("no token {id} of yours (see `gpool token list`)"))),
            _ => return Err(ApiError::new(400, format!("token id {id} names several tokens: give more digits"))),
        };
        let Some(entry) = self.0.remove(&hash) else {
            return Err(ApiError::new(404, format!("no token {id}")));
        };
        out.write(Write::DeleteToken(hash.clone()));
        let view = entry.view(&hash);
        out.audit(caller, from, &format!("revoked token {} of {}", view.id, view.user), now);
        let node =
            (entry.caller.role == Role::Node && entry.caller.user != ANY_NODE).then(|| entry.caller.user.clone());
        Ok((view, node))
    }

    /// A token for a node the fleet creates (`elastic.rs`): role node, bound to that node.
    pub(super) fn mint_node(&mut self, node: &str, out: &mut Outbox, now: i64) -> Result<String, String> {
        let secret = crate::plane::auth::new_secret()?;
        let hash = hash_token(&secret);
        let entry = TokenEntry {
            caller: Caller { user: node.to_string(), team: "nodes".into(), role: Role::Node },
            created_ms: now,
            expires_ms: None,
            last_used_ms: None,
        };
        out.write(Write::PutToken(entry.row(&hash)));
        self.0.insert(hash, entry);
        Ok(secret)
    }

    /// Forgets the node tokens bound to `node` (a deleted fleet node).
    pub(super) fn revoke_node(&mut self, node: &str, out: &mut Outbox) {
        let hashes: Vec<String> = self
            .0
            .iter()
            .filter(|(_, e)| e.caller.role == Role::Node && e.caller.user == node)
            .map(|(h, _)| h.clone())
            .collect();
        for h in hashes {
            self.0.remove(&h);
            out.write(Write::DeleteToken(h));
        }
    }
}

/// A node token acts only as the node it names (its user); `*` as any
/// node (a fleet-wide token, for machines whose names are not known in
/// advance: weaker, since any holder may pose as any node).
pub(super) fn check_node_identity(caller: &Caller, node: &str) -> Result<(), ApiError> {
    if caller.role != Role::Node || caller.user == ANY_NODE || caller.user == node {
        return Ok(());
    }
    Err(ApiError::new(
        403,
        format!(
            "this node token belongs to node {:?}, not {node:?}: each node needs its own \
             (`gpool token create --node --user {node}`)",
            caller.user
        ),
    ))
}
