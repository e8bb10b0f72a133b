//! Bearer tokens: random secrets, stored as SHA-256.

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    User,
    /// A node agent: speaks the agent protocol, nothing else.
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
            Role::Node => "node",
        }
    }

    pub fn parse(s: &str) -> Role {
        match s {
            "admin" => Role::Admin,
            "node" => Role::Node,
            _ => Role::User,
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
