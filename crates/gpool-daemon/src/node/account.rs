//! Whose job it is on this node: the Unix account a replica runs as.
//!
//! A node runs jobs in one of two modes ([`RunAs`]):
//! - `user` (the default when the agent runs as root, as slurmd does):
//!   each replica runs as its submitter's Unix account, found by the
//!   token's user name (`getent passwd`, so LDAP and other NSS sources
//!   count), with that account's uid, gid and supplementary groups (the
//!   shim's hand-over drops to them before the job's environment is
//!   applied: `handover.rs`), its home
//!   as the default working directory, and its logs and checkpoint
//!   directory owned by it. A job whose user has no account on the node
//!   fails with a message saying so.
//! - `daemon` (the default otherwise, and what an unprivileged agent can
//!   only do): single-user mode; every job runs as the agent's own account,
//!   which the daemon says at start. Nothing separates users' jobs then.

use anyhow::Context;

pub use crate::accounts::{Account, Accounts};

/// How a node chooses the account a replica runs as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunAs {
    /// Each replica as its submitter's account (needs root).
    User,
    /// Every replica as the agent's own account (single-user mode).
    #[default]
    Daemon,
}

impl RunAs {
    /// `user` when this process is root, else `daemon`.
    pub fn default_for_this_process() -> RunAs {
        if rustix::process::geteuid().is_root() { RunAs::User } else { RunAs::Daemon }
    }

    pub fn parse(s: &str) -> Result<RunAs, String> {
        match s {
            "user" => Ok(RunAs::User),
            "daemon" => Ok(RunAs::Daemon),
            other => Err(format!("{other:?} is not user or daemon")),
        }
    }

    /// Checks that this process can run jobs this way, and says how it will.
    pub fn check(self) -> anyhow::Result<String> {
        match self {
            RunAs::Daemon => {
                let me = crate::wiring::this_account().unwrap_or_else(|| "this account".into());
                Ok(format!(
                    "single-user mode: every job runs as {me}, which separates no users' jobs \
                     (run as root for --run-as user)"
                ))
            }
            RunAs::User => {
                anyhow::ensure!(
                    rustix::process::geteuid().is_root(),
                    "--run-as user runs each job as its submitter's account, which needs root; \
                     run as root, or use --run-as daemon (single-user mode)"
                );
                Ok("each job runs as its submitter's Unix account".into())
            }
        }
    }
}

/// Readies a node's process and data directory for `run_as`: checks it can
/// run jobs that way, makes what the daemon creates private to it (umask
/// 077: its database, tokens, shims' records), and, when jobs run as their
/// users, lets them reach their own files under `jobs/` (0711 directories:
/// passable, not listable). Returns the line that says how jobs run.
pub fn prepare(run_as: RunAs, data_dir: &std::path::Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let said = run_as.check()?;
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    if run_as == RunAs::User {
        let jobs = data_dir.join("jobs");
        std::fs::create_dir_all(&jobs).with_context(|| format!("create {}", jobs.display()))?;
        for d in [data_dir, jobs.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))
                .with_context(|| format!("chmod 711 {}", d.display()))?;
        }
    }
    Ok(said)
}

/// The ids the hand-over drops to for `account`.
pub fn ids(account: &Account) -> crate::protocol::Ids {
    crate::protocol::Ids { uid: account.uid, gid: account.gid, groups: account.groups.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_drops_to_its_accounts_uid_gid_and_groups() {
        let a = Account { name: "ana".into(), uid: 1001, gid: 1002, home: "/home/ana".into(), groups: vec![1002, 44] };
        assert_eq!(ids(&a), crate::protocol::Ids { uid: 1001, gid: 1002, groups: vec![1002, 44] });
    }
}
