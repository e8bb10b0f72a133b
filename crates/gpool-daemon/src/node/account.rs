//! Whose job it is on this node: the Unix account a replica runs as.
//!
//! A node runs jobs in one of two modes ([`RunAs`]):
//! - `user` (the default when the agent runs as root, as slurmd does):
//!   each replica runs as its submitter's Unix account, found by the
//!   token's user name (`getent passwd`, so LDAP and other NSS sources
//!   count), with that account's uid, gid and supplementary groups (through
//!   util-linux's `setpriv`, which the agent checks for at start), its home
//!   as the default working directory, and its logs and checkpoint
//!   directory owned by it. A job whose user has no account on the node
//!   fails with a message saying so.
//! - `daemon` (the default otherwise, and what an unprivileged agent can
//!   only do): single-user mode; every job runs as the agent's own account,
//!   which the daemon says at start. Nothing separates users' jobs then.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;

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
                let ok = Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
                anyhow::ensure!(
                    ok,
                    "--run-as user starts jobs through `setpriv` (util-linux), which is missing: \
                     apt-get install -y util-linux"
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

/// A Unix account, as `getent passwd` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Parses one `passwd` line: `name:password:uid:gid:gecos:home:shell`.
pub fn parse_passwd(line: &str) -> Option<Account> {
    let f: Vec<&str> = line.trim_end().split(':').collect();
    if f.len() < 7 || f[0].is_empty() {
        return None;
    }
    Some(Account { name: f[0].into(), uid: f[2].parse().ok()?, gid: f[3].parse().ok()?, home: PathBuf::from(f[5]) })
}

/// The account of this name, `None` if there is none.
pub fn lookup(name: &str) -> anyhow::Result<Option<Account>> {
    // Names that getent could take for options or numbers are no account names.
    if name.is_empty() || name.starts_with('-') || name.chars().all(|c| c.is_ascii_digit()) || name.contains(':') {
        return Ok(None);
    }
    let out = Command::new("getent").args(["passwd", "--", name]).output().context("run getent passwd")?;
    // getent exits 2 for "not found".
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().filter_map(parse_passwd).find(|a| a.name == name))
}

/// Accounts looked up lately: a start need not run `getent` when the same
/// user started a job less than [`Accounts::TTL`] ago (an account created or
/// changed meanwhile is seen after that time).
#[derive(Default)]
pub struct Accounts {
    known: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, Option<Account>)>>,
}

impl Accounts {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(30);

    /// [`lookup`], remembered for [`Accounts::TTL`].
    pub fn lookup(&self, name: &str) -> anyhow::Result<Option<Account>> {
        let now = std::time::Instant::now();
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, a)) = known.get(name)
            && now.duration_since(*at) < Self::TTL
        {
            return Ok(a.clone());
        }
        let found = lookup(name)?;
        known.insert(name.to_string(), (now, found.clone()));
        Ok(found)
    }
}

/// The command that runs `argv` as `account` with its groups (from root).
pub fn as_account(account: &Account, argv: &[String]) -> Vec<String> {
    let mut wrapped = vec![
        "setpriv".to_string(),
        format!("--reuid={}", account.uid),
        format!("--regid={}", account.gid),
        "--init-groups".to_string(),
        "--".to_string(),
    ];
    wrapped.extend(argv.iter().cloned());
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_parse_and_bad_ones_do_not() {
        assert_eq!(
            parse_passwd("ana:x:1001:1002:Ana,,,:/home/ana:/bin/bash\n"),
            Some(Account { name: "ana".into(), uid: 1001, gid: 1002, home: "/home/ana".into() })
        );
        assert_eq!(parse_passwd("ana:x:1001:1002"), None);
        assert_eq!(parse_passwd("ana:x:x:1002::/home/ana:/bin/sh"), None);
        assert_eq!(parse_passwd(":x:1:1::/:/bin/sh"), None);
    }

    #[test]
    fn root_is_found_and_nobody_invented() {
        assert_eq!(lookup("root").expect("getent").map(|a| a.uid), Some(0));
        assert_eq!(lookup("no-such-user-gpool-test").expect("getent"), None);
        assert_eq!(lookup("--help").expect("not an option"), None);
        assert_eq!(lookup("0").expect("not a number"), None);
    }

    #[test]
    fn accounts_are_remembered_including_their_absence() {
        let cache = Accounts::default();
        assert_eq!(cache.lookup("root").expect("getent").map(|a| a.uid), Some(0));
        assert_eq!(cache.lookup("no-such-user-gpool-test").expect("getent"), None);
        let known = cache.known.lock().expect("lock");
        assert_eq!(known.len(), 2, "both answers are kept for the next starts");
    }

    #[test]
    fn a_command_runs_as_an_account_through_setpriv() {
        let a = Account { name: "ana".into(), uid: 1001, gid: 1002, home: "/home/ana".into() };
        assert_eq!(
            as_account(&a, &["sh".into(), "-c".into(), "id".into()]),
            ["setpriv", "--reuid=1001", "--regid=1002", "--init-groups", "--", "sh", "-c", "id"]
        );
    }
}
