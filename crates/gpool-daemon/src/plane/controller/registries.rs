//! Registry credentials, per user (`gpool registry login`): each user's
//! logins to image registries, kept in the store (`PutMeta("registries")`)
//! and never shown: listings give registries and user names only. When a
//! job of that user starts in an image from one of those registries, its
//! start order carries an auth file for that one registry (Podman's
//! `auth.json`, Docker's `config.json` format), which the node writes
//! where only root reads it, hands to the runtime, and deletes when the
//! replica ends. No other user's job ever gets it.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::ApiError;
use super::outbox::Outbox;
use crate::plane::auth::Caller;

/// One login.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Login {
    pub username: String,
    pub password: String,
}

/// Every user's logins: user → registry host → login (kept in the store as this map).
#[derive(Debug, Default)]
pub(super) struct Logins(BTreeMap<String, BTreeMap<String, Login>>);

/// The registry an image reference is pulled from (Docker's rules: the
/// first component when it has a `.` or `:` or is `localhost`, else Docker Hub).
pub(super) fn registry_of(image: &str) -> String {
    let image = image.split_once("://").map_or(image, |(_, rest)| rest);
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => first.to_string(),
        _ => "docker.io".to_string(),
    }
}

/// A registry host as given to `login`: no scheme, no path, no trailing slash.
fn normalise(registry: &str) -> Result<String, ApiError> {
    let r = registry.trim().trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
    let r = if r == "index.docker.io" || r == "registry-1.docker.io" { "docker.io" } else { r };
    if r.is_empty() || r.contains('/') || r.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ApiError::new(
            400,
            format!("registry: {registry:?} is not a registry host (e.g. ghcr.io, localhost:5000)"),
        ));
    }
    Ok(r.to_string())
}

/// Standard base64 (RFC 4648, with padding), for the `auth` field.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The auth file for one registry: `{"auths": {REGISTRY: {"auth": base64(user:password)}}}`.
fn auth_file(registry: &str, login: &Login) -> String {
    let auth = base64(format!("{}:{}", login.username, login.password).as_bytes());
    serde_json::json!({ "auths": { registry: { "auth": auth } } }).to_string()
}

impl Logins {
    pub(super) fn login(
        &mut self,
        caller: &Caller,
        registry: &str,
        req: api::RegistryLogin,
        out: &mut Outbox,
        now: i64,
    ) -> Result<api::RegistryView, ApiError> {
        let registry = normalise(registry)?;
        if req.username.trim().is_empty() || req.password.is_empty() {
            return Err(ApiError::new(400, "username and password must not be empty"));
        }
        if req.username.chars().any(char::is_control) || req.password.chars().any(|c| c == '\n' || c == '\0') {
            return Err(ApiError::new(400, "username or password holds a control character"));
        }
        let login = Login { username: req.username.clone(), password: req.password };
        self.0.entry(caller.user.clone()).or_default().insert(registry.clone(), login);
        self.persist(out);
        out.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "registry_login",
            format!("{} stored a login to {registry} (as {})", caller.user, req.username),
        );
        Ok(api::RegistryView { registry, username: req.username })
    }

    pub(super) fn logout(
        &mut self,
        caller: &Caller,
        registry: &str,
        out: &mut Outbox,
    ) -> Result<api::RegistryView, ApiError> {
        let registry = normalise(registry)?;
        let removed = self.0.get_mut(&caller.user).and_then(|m| m.remove(&registry));
        let Some(login) = removed else {
            return Err(ApiError::new(404, format!("you have no login to {registry}")));
        };
        self.persist(out);
        Ok(api::RegistryView { registry, username: login.username })
    }

    /// The caller's own logins: registries and user names, never passwords.
    pub(super) fn views(&self, caller: &Caller) -> Vec<api::RegistryView> {
        self.0
            .get(&caller.user)
            .map(|m| {
                m.iter().map(|(r, l)| api::RegistryView { registry: r.clone(), username: l.username.clone() }).collect()
            })
            .unwrap_or_default()
    }

    /// The auth file a job of `user` in `image` starts with, if the user logged in to its registry.
    pub(super) fn auth(&self, user: &str, image: &str) -> Option<String> {
        let registry = registry_of(image);
        let login = self.0.get(user)?.get(&registry)?;
        Some(auth_file(&registry, login))
    }

    fn persist(&self, out: &mut Outbox) {
        if let Ok(text) = serde_json::to_string(&self.0) {
            out.write(Write::PutMeta("registries".into(), text));
        }
    }

    pub(super) fn restore(store: &mut dyn Store) -> anyhow::Result<Logins> {
        match store.meta("registries")? {
            Some(text) => Ok(Logins(serde_json::from_str(&text)?)),
            None => Ok(Logins::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_name_their_registry_and_auth_files_encode_the_login() {
        assert_eq!(registry_of("pytorch/pytorch:2.5.1"), "docker.io");
        assert_eq!(registry_of("ubuntu"), "docker.io");
        assert_eq!(registry_of("ghcr.io/org/model:1"), "ghcr.io");
        assert_eq!(registry_of("localhost:5000/x"), "localhost:5000");
        assert_eq!(registry_of("localhost/gpool-e2e:1"), "localhost");
        assert_eq!(base64(b"ana:s3cret"), "YW5hOnMzY3JldA==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        let file = auth_file("ghcr.io", &Login { username: "ana".into(), password: "s3cret".into() });
        assert_eq!(file, r#"{"auths":{"ghcr.io":{"auth":"YW5hOnMzY3JldA=="}}}"#);
        assert!(normalise("https://ghcr.io/").is_ok_and(|r| r == "ghcr.io"));
        assert!(normalise("ghcr.io/org").is_err());
    }
}
