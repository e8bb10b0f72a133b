//! Who a caller on this machine is, and whose account a job runs as.
//!
//! A caller on the daemon's Unix socket is named by the kernel
//! (`SO_PEERCRED`): its uid, hence its account and groups. It needs no
//! token and cannot claim to be anyone else. Its role comes from the
//! identity file (`--identities FILE`, YAML), not from a file it can read:
//!
//! ```yaml
//! admins:
//!   users: [ana]            # these accounts are admins
//!   groups: [gpu-admins]    # and the members of these groups
//! teams:                    # a local caller's team, by the first of its groups listed here
//!   vision: vision
//!   nlp-users: nlp
//! accounts:                 # a token's user -> the Unix account its jobs run as on the nodes
//!   ana@example.com: ana
//! ```
//!
//! root and the daemon's own account are always admins. A local caller in
//! none of `teams`' groups is in team `default`. In single-user mode (an
//! unprivileged `gpool up`, whose jobs all run as its own account) only
//! that account and root are served: anyone else would get jobs that run
//! as someone else.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

use crate::plane::auth::{Caller, LocalUser, Role};

/// The identity file's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identities {
    #[serde(default)]
    pub admins: Admins,
    /// Unix group → team.
    #[serde(default)]
    pub teams: BTreeMap<String, String>,
    /// A token's user → the Unix account its jobs run as.
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
}

/// Who is an admin, besides root and the daemon's own account.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admins {
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Identities {
    /// Reads an identity file; the error names the file and what is wrong.
    pub fn read(path: &Path) -> anyhow::Result<Identities> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Identities::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses an identity file's text.
    pub fn parse(text: &str) -> anyhow::Result<Identities> {
        let value: serde_json::Value = gpool_api::yaml::from_str(text)?;
        let ids: Identities = serde_path_to_error::deserialize(value).map_err(|e| {
            anyhow::anyhow!(
                "{}: {} (expected keys: admins {{users, groups}}, teams {{group: team}}, accounts {{user: account}})",
                e.path(),
                e.inner()
            )
        })?;
        for (field, names) in [
            ("admins.users", ids.admins.users.iter().collect::<Vec<_>>()),
            ("admins.groups", ids.admins.groups.iter().collect()),
            ("teams", ids.teams.keys().chain(ids.teams.values()).collect()),
            ("accounts", ids.accounts.keys().chain(ids.accounts.values()).collect()),
        ] {
            for n in names {
                crate::plane::input::identity(field, n).map_err(|r| anyhow::anyhow!("{}: {}", r.field, r.message))?;
            }
        }
        Ok(ids)
    }

    /// The caller a local user is, or why it is refused. `single_user`:
    /// the only account this daemon runs jobs as, if it is in single-user
    /// mode; `daemon_account`: the daemon's own account.
    pub fn local_caller(
        &self,
        who: &LocalUser,
        daemon_account: Option<&str>,
        single_user: Option<&str>,
    ) -> Result<Caller, String> {
        let is_daemon = daemon_account.is_some_and(|d| d == who.name);
        if let Some(only) = single_user {
            if who.uid != 0 && !is_daemon {
                return Err(format!(
                    "single-user mode: this daemon runs every job as {only}, so it serves only {only}, not {}; \
                     ask an admin to run gpool as root (jobs then run as their own accounts)",
                    who.name
                ));
            }
            return Ok(Caller { user: only.to_string(), team: self.team_of(who), role: Role::Admin });
        }
        let admin = who.uid == 0
            || is_daemon
            || self.admins.users.contains(&who.name)
            || who.groups.iter().any(|g| self.admins.groups.contains(g));
        Ok(Caller {
            user: who.name.clone(),
            team: self.team_of(who),
            role: if admin { Role::Admin } else { Role::User },
        })
    }

    fn team_of(&self, who: &LocalUser) -> String {
        who.groups.iter().find_map(|g| self.teams.get(g)).cloned().unwrap_or_else(|| "default".into())
    }

    /// The Unix account a user's jobs run as on the nodes.
    pub fn account_of<'a>(&'a self, user: &'a str) -> &'a str {
        self.accounts.get(user).map_or(user, String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(uid: u32, name: &str, groups: &[&str]) -> LocalUser {
        LocalUser { uid, name: name.into(), groups: groups.iter().map(|g| (*g).to_string()).collect() }
    }

    const FILE: &str = "admins:\n  users: [ana]\n  groups: [gpu-admins]\nteams:\n  vision: vision\n  nlp: nlp\n\
                        accounts:\n  ana@example.com: ana\n";

    #[test]
    fn roles_and_teams_come_from_the_file_and_the_kernels_uid() {
        let ids = Identities::parse(FILE).expect("valid");
        let cases = [
            (local(0, "root", &["root"]), "root", Role::Admin, "default"),
            (local(1001, "ana", &["ana"]), "ana", Role::Admin, "default"),
            (local(1002, "bo", &["bo", "gpu-admins"]), "bo", Role::Admin, "default"),
            (local(1003, "cy", &["cy", "nlp", "vision"]), "cy", Role::User, "nlp"),
            (local(1004, "gpool", &["gpool"]), "gpool", Role::Admin, "default"),
            (local(1005, "dee", &["dee"]), "dee", Role::User, "default"),
        ];
        for (who, user, role, team) in cases {
            let c = ids.local_caller(&who, Some("gpool"), None).expect("served");
            assert_eq!((c.user.as_str(), c.role, c.team.as_str()), (user, role, team), "{who:?}");
        }
    }

    #[test]
    fn single_user_mode_serves_its_own_account_and_root_only() {
        let ids = Identities::default();
        let own = ids.local_caller(&local(1000, "me", &["me"]), Some("me"), Some("me")).expect("own");
        assert_eq!((own.user.as_str(), own.role), ("me", Role::Admin));
        let root = ids.local_caller(&local(0, "root", &[]), Some("me"), Some("me")).expect("root");
        assert_eq!(root.user, "me", "root's jobs run as the daemon's account too");
        let e = ids.local_caller(&local(1001, "ana", &["ana"]), Some("me"), Some("me")).expect_err("other");
        assert!(e.contains("single-user mode") && e.contains("not ana"), "{e}");
    }

    #[test]
    fn accounts_map_token_users_to_unix_accounts() {
        let ids = Identities::parse(FILE).expect("valid");
        assert_eq!(ids.account_of("ana@example.com"), "ana");
        assert_eq!(ids.account_of("bo"), "bo");
    }

    #[test]
    fn a_bad_file_says_where_and_what_is_expected() {
        let e = Identities::parse("admins:\n  user: [ana]\n").expect_err("misspelt key");
        let msg = format!("{e:#}");
        assert!(msg.contains("admins") && msg.contains("user") && msg.contains("expected keys"), "{msg}");
        let e = Identities::parse("teams:\n  \"a\\u0007b\": x\n").expect_err("control character");
        assert!(format!("{e:#}").contains("teams"), "{e:#}");
    }
}
