//! Who calls: bearer tokens (random secrets, stored as SHA-256) and
//! local callers named by the kernel.

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    User,
    /// A node agent: speaks the agent protocol, nothing else.
    Node,
    /// Reads everything an admin can (dashboards, Prometheus), changes nothing.
    Reader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
            Role::Node => "node",
            Role::Reader => "reader",
        }
    }

    /// A role by its name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "user" => Some(Role::User),
            "node" => Some(Role::Node),
            "reader" => Some(Role::Reader),
            _ => None,
        }
    }
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub team: String,
    pub role: Role,
}

impl Caller {
    /// Sees every user's jobs, logs and events (admins and readers).
    pub fn sees_all(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Reader)
    }
}

/// A caller on this machine, as the kernel names it on the Unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalUser {
    pub uid: u32,
    pub name: String,
    /// Its groups' names, its primary group first.
    pub groups: Vec<String>,
}

/// How a call says who makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A bearer token's secret.
    Token(String),
    /// No token, on the Unix socket: the kernel's word.
    Local(LocalUser),
}

impl From<LocalUser> for Credential {
    fn from(user: LocalUser) -> Credential {
        Credential::Local(user)
    }
}

impl From<&String> for Credential {
    fn from(secret: &String) -> Credential {
        Credential::Token(secret.clone())
    }
}

impl From<&str> for Credential {
    fn from(secret: &str) -> Credential {
        Credential::Token(secret.to_string())
    }
}

/// A token's public id: the first 12 hex digits of its hash.
pub fn token_id(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Hex SHA-256 of a token secret.
pub fn hash_token(secret: &str) -> String {
    Sha256::digest(secret.trim().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret: `gp_` and 32 random bytes in hex.
pub fn new_secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a token: {e}"))?;
    Ok(format!("gp_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_hashes_stable() {
        let (a, b) = (new_secret().expect("a"), new_secret().expect("b"));
        assert_ne!(a, b);
        assert!(a.starts_with("gp_") && a.len() == 67);
        assert_eq!(hash_token(&a), hash_token(&format!("{a}\n")));
        assert_eq!(hash_token("x").len(), 64);
    }
}
