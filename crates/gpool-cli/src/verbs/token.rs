//! `gpool token create`: a token for a user (admins only), shown once.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, json};

#[derive(Args, Debug)]
pub(crate) struct TokenArgs {
    /// User the token acts as.
    #[arg(long)]
    user: String,
    /// Team (fair-share group).
    #[arg(long)]
    team: Option<String>,
    /// Make an admin token.
    #[arg(long, conflicts_with = "node")]
    admin: bool,
    /// Make a node token, for `gpool agent --token` (it speaks only the agent protocol).
    #[arg(long)]
    node: bool,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn create(a: TokenArgs) -> anyhow::Result<()> {
    let role = if a.admin {
        Some("admin".to_string())
    } else if a.node {
        Some("node".to_string())
    } else {
        None
    };
    let req = api::TokenRequest { user: a.user, team: a.team, role };
    let t: api::TokenCreated = a.connect.client()?.post("/tokens", &req)?;
    emit(&render(&t, a.output)?);
    if a.output == Output::Table {
        eprintln!(
            "token for {} (team {}, {}); it is shown only once: export GPOOL_TOKEN={}",
            t.user, t.team, t.role, t.token
        );
    }
    Ok(())
}

/// The secret alone on standard output (the note about it goes to standard error).
pub(crate) fn render(t: &api::TokenCreated, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json => json(t),
        Output::Table => Ok(format!("{}\n", t.token)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn token_create_prints_the_secret() {
        let t = api::TokenCreated {
            token: "gp_3f9a1c0d2b7e4f60".into(),
            user: "bob".into(),
            team: "vision".into(),
            role: "user".into(),
        };
        assert_snapshot("token-create.txt", &render(&t, Output::Table).unwrap());
        assert_snapshot("token-create.json", &render(&t, Output::Json).unwrap());
    }
}
