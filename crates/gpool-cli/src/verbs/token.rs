//! `gpool token create | list | revoke`: API tokens and their lifecycle.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, text, when_minute_ms, when_ms};

#[derive(Args, Debug)]
pub(crate) struct TokenArgs {
    /// User the token acts as.
    #[arg(long)]
    user: String,
    /// Team (fair-share group).
    #[arg(long)]
    team: Option<String>,
    /// Make an admin token.
    #[arg(long, conflicts_with_all = ["node", "reader"])]
    admin: bool,
    /// Make a node token, for `gpool agent --token-file` (it speaks only the agent protocol).
    #[arg(long, conflicts_with = "reader")]
    node: bool,
    /// Make a read-only token: reads everything (dashboards, Prometheus with --metrics-auth), changes nothing.
    #[arg(long)]
    reader: bool,
    /// The role by name, as the API and `token list` say it (the same as --admin, --node, --reader; default user).
    #[arg(long, value_parser = ["user", "admin", "node", "reader"], conflicts_with_all = ["admin", "node", "reader"])]
    role: Option<String>,
    /// Accepted for this long (90d, 12h); by default until revoked.
    #[arg(long)]
    ttl: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

#[derive(Args, Debug)]
pub(crate) struct RevokeArgs {
    /// The token's id (`gpool token list`), or 6 or more of its first digits.
    id: String,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn create(a: TokenArgs) -> anyhow::Result<()> {
    let role = match (a.admin, a.node, a.reader) {
        (true, _, _) => Some("admin".to_string()),
        (_, true, _) => Some("node".to_string()),
        (_, _, true) => Some("reader".to_string()),
        _ => a.role,
    };
    let req = api::TokenRequest { user: a.user, team: a.team, role, ttl: a.ttl };
    let t: api::TokenCreated = a.connect.client()?.post("/tokens", &req)?;
    emit(&render(&t, a.output)?);
    if !a.output.is_data() {
        let until = t.expires_ms.map_or_else(|| "until revoked".to_string(), |ms| format!("until {}", when_ms(ms)));
        eprintln!(
            "token {} for {} (team {}, {}), {until}; it is shown only once: export GPOOL_TOKEN={}",
            t.id, t.user, t.team, t.role, t.token
        );
    }
    Ok(())
}

pub(crate) fn list(a: super::ListArgs) -> anyhow::Result<()> {
    let tokens: Vec<api::TokenView> = a.connect.client()?.get("/tokens")?;
    emit(&render_list(&tokens, a.output)?);
    Ok(())
}

pub(crate) fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let t: api::TokenView = a.connect.client()?.delete(&format!("/tokens/{}", a.id))?;
    match a.output {
        Output::Json | Output::Yaml => emit(&a.output.data(&t)?),
        Output::Table | Output::Wide => emit(&format!("revoked token {} of {} ({})\n", t.id, t.user, t.role)),
    }
    Ok(())
}

/// The secret alone on standard output (the note about it goes to standard error).
pub(crate) fn render(t: &api::TokenCreated, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json | Output::Yaml => output.data(t),
        Output::Table | Output::Wide => Ok(format!("{}\n", t.token)),
    }
}

/// A line a token: never its secret.
pub(crate) fn render_list(tokens: &[api::TokenView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(tokens);
    }
    let time = |ms: Option<i64>, none: &str| ms.map_or_else(|| none.to_string(), when_minute_ms);
    let mut lines = vec![format!(
        "{:<12}  {:<14} {:<10} {:<7} {:<20}  {:<20}  {:<20}",
        "ID", "USER", "TEAM", "ROLE", "CREATED", "EXPIRES", "LAST USED"
    )];
    for t in tokens {
        lines.push(format!(
            "{:<12}  {:<14} {:<10} {:<7} {:<20}  {:<20}  {:<20}",
            t.id,
            t.user,
            t.team,
            t.role,
            time(Some(t.created_ms), "-"),
            time(t.expires_ms, "never"),
            time(t.last_used_ms, "never"),
        ));
    }
    Ok(text(lines.into_iter().map(|l| l.trim_end().to_string()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn token_create_prints_the_secret() {
        let t = api::TokenCreated {
            token: "gp_3f9a1c0d2b7e4f60".into(),
            id: "5e884898da28".into(),
            user: "bob".into(),
            team: "vision".into(),
            role: "user".into(),
            expires_ms: Some(1_767_225_600_000),
        };
        assert_snapshot("token-create.txt", &render(&t, Output::Table).unwrap());
        assert_snapshot("token-create.json", &render(&t, Output::Json).unwrap());
    }

    #[test]
    fn token_list_shows_ids_and_times_never_secrets() {
        let tokens = vec![
            api::TokenView {
                id: "5e884898da28".into(),
                user: "bob".into(),
                team: "vision".into(),
                role: "user".into(),
                created_ms: 1_764_000_000_000,
                expires_ms: Some(1_767_225_600_000),
                last_used_ms: Some(1_764_003_600_000),
            },
            api::TokenView {
                id: "a665a45920b2".into(),
                user: "grafana".into(),
                team: "ops".into(),
                role: "reader".into(),
                created_ms: 1_764_000_060_000,
                expires_ms: None,
                last_used_ms: None,
            },
        ];
        assert_snapshot("token-list.txt", &render_list(&tokens, Output::Table).unwrap());
        assert_snapshot("token-list.json", &render_list(&tokens, Output::Json).unwrap());
    }
}
