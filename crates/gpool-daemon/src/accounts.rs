//! Unix accounts, as the name service gives them (`getent`, so LDAP and
//! other NSS sources count): a node runs a job as its submitter's account
//! (`node/account.rs`), and the control plane names a caller on its Unix
//! socket by the uid the kernel gives it (`plane/local.rs`).
//!
//! Where `getent` and `id` are not installed (a distroless container image
//! of the control plane), the files /etc/passwd and /etc/group are read
//! instead, as the name service's `files` source would.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;

/// A Unix account, as `getent passwd` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// Supplementary group ids, as a login gets them (`id -G`); filled by
    /// [`lookup`] (a node runs jobs with them), empty from [`parse_passwd`].
    pub groups: Vec<u32>,
}

/// Parses one `passwd` line: `name:password:uid:gid:gecos:home:shell`.
pub fn parse_passwd(line: &str) -> Option<Account> {
    let f: Vec<&str> = line.trim_end().split(':').collect();
    if f.len() < 7 || f[0].is_empty() {
        return None;
    }
    Some(Account {
        name: f[0].into(),
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: PathBuf::from(f[5]),
        groups: Vec::new(),
    })
}

/// The account of this name, `None` if there is none.
pub fn lookup(name: &str) -> anyhow::Result<Option<Account>> {
    // Names that getent could take for options or numbers are no account names.
    if name.is_empty() || name.starts_with('-') || name.chars().all(|c| c.is_ascii_digit()) || name.contains(':') {
        return Ok(None);
    }
    let Some(text) = getent_passwd(name)? else { return Ok(None) };
    let Some(mut account) = text.lines().filter_map(parse_passwd).find(|a| a.name == name) else { return Ok(None) };
    account.groups = group_ids(name)?;
    Ok(Some(account))
}

/// What `getent passwd KEY` prints (`None`: no such account), or, where
/// there is no `getent`, the matching lines of /etc/passwd.
fn getent_passwd(key: &str) -> anyhow::Result<Option<String>> {
    match Command::new("getent").args(["passwd", "--", key]).output() {
        // getent exits 2 for "not found".
        Ok(out) => Ok(out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = read_or_empty("/etc/passwd")?;
            let matching: String = text
                .lines()
                .filter(|l| parse_passwd(l).is_some_and(|a| a.name == key || a.uid.to_string() == key))
                .map(|l| format!("{l}\n"))
                .collect();
            Ok((!matching.is_empty()).then_some(matching))
        }
        Err(e) => Err(e).context("run getent passwd"),
    }
}

/// A system file's text; empty when it does not exist.
fn read_or_empty(path: &str) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("read {path}")),
    }
}

/// The groups of `name` in an /etc/group text, its primary group
/// (`primary`) first: (gid, group name).
fn groups_in(group_file: &str, name: &str, primary: Option<u32>) -> Vec<(u32, String)> {
    let all: Vec<(u32, String, bool)> = group_file
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim_end().split(':').collect();
            let gid = f.get(2)?.parse().ok()?;
            let member = f.get(3).is_some_and(|m| m.split(',').any(|m| m == name));
            Some((gid, f[0].to_string(), member))
        })
        .collect();
    let mut out: Vec<(u32, String)> = Vec::new();
    if let Some(p) = primary {
        let n = all.iter().find(|g| g.0 == p).map_or_else(|| p.to_string(), |g| g.1.clone());
        out.push((p, n));
    }
    for (gid, n, member) in all {
        if member && !out.iter().any(|g| g.0 == gid) {
            out.push((gid, n));
        }
    }
    out
}

/// `id -G NAME` or `id -Gn NAME`, or, where there is no `id`, the same
/// from /etc/passwd and /etc/group; `None` when there is no such account.
fn id_groups(name: &str, names: bool) -> anyhow::Result<Option<Vec<String>>> {
    let flag = if names { "-Gn" } else { "-G" };
    match Command::new("id").args([flag, "--", name]).output() {
        Ok(out) if out.status.success() => {
            Ok(Some(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let passwd = getent_passwd(name)?.unwrap_or_default();
            let Some(account) = passwd.lines().filter_map(parse_passwd).find(|a| a.name == name) else {
                return Ok(None);
            };
            let groups = groups_in(&read_or_empty("/etc/group")?, name, Some(account.gid));
            Ok(Some(groups.into_iter().map(|(gid, n)| if names { n } else { gid.to_string() }).collect()))
        }
        Err(e) => Err(e).with_context(|| format!("run id {flag}")),
    }
}

/// The ids of the groups an account is in (`id -G`, which asks the name
/// service as a login's `initgroups` does).
pub fn group_ids(name: &str) -> anyhow::Result<Vec<u32>> {
    if name.is_empty() || name.starts_with('-') {
        return Ok(Vec::new());
    }
    let groups = id_groups(name, false)?.with_context(|| format!("id -G {name}: no such account"))?;
    Ok(groups.iter().filter_map(|g| g.parse().ok()).collect())
}

/// The account whose uid this is, `None` if there is none.
pub fn lookup_uid(uid: u32) -> anyhow::Result<Option<Account>> {
    let Some(text) = getent_passwd(&uid.to_string())? else { return Ok(None) };
    Ok(text.lines().filter_map(parse_passwd).find(|a| a.uid == uid))
}

/// The names of the groups an account is in, its primary group first (`id
/// -Gn`, which asks the name service as a login does).
pub fn group_names(name: &str) -> anyhow::Result<Vec<String>> {
    if name.is_empty() || name.starts_with('-') {
        return Ok(Vec::new());
    }
    Ok(id_groups(name, true)?.unwrap_or_default())
}

/// Answers looked up lately, absences included, each kept for
/// [`Remembered::TTL`]: a job start or an API call need not run `getent`
/// when the same account was looked up a moment ago (an account created or
/// changed meanwhile is seen after that time).
pub struct Remembered<K, V> {
    known: std::sync::Mutex<std::collections::HashMap<K, (std::time::Instant, V)>>,
}

impl<K, V> Default for Remembered<K, V> {
    fn default() -> Self {
        Remembered { known: std::sync::Mutex::new(std::collections::HashMap::new()) }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Remembered<K, V> {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(30);

    /// The answer for `key`: remembered, or `find`'s (then remembered).
    /// The lock is not held while `find` runs.
    pub fn get(&self, key: &K, find: impl FnOnce(&K) -> anyhow::Result<V>) -> anyhow::Result<V> {
        let now = std::time::Instant::now();
        {
            let known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, v)) = known.get(key)
                && now.duration_since(*at) < Self::TTL
            {
                return Ok(v.clone());
            }
        }
        let found = find(key)?;
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known.insert(key.clone(), (now, found.clone()));
        Ok(found)
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Accounts by name, remembered.
#[derive(Default)]
pub struct Accounts(Remembered<String, Option<Account>>);

impl Accounts {
    /// [`lookup`], remembered for [`Remembered::TTL`].
    pub fn lookup(&self, name: &str) -> anyhow::Result<Option<Account>> {
        self.0.get(&name.to_string(), |n| lookup(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_parse_and_bad_ones_do_not() {
        assert_eq!(
            parse_passwd("ana:x:1001:1002:Ana,,,:/home/ana:/bin/bash\n"),
            Some(Account { name: "ana".into(), uid: 1001, gid: 1002, home: "/home/ana".into(), groups: Vec::new() })
        );
        assert_eq!(parse_passwd("ana:x:1001:1002"), None);
        assert_eq!(parse_passwd("ana:x:x:1002::/home/ana:/bin/sh"), None);
        assert_eq!(parse_passwd(":x:1:1::/:/bin/sh"), None);
    }

    #[test]
    fn an_account_is_in_its_primary_group_first_then_those_that_list_it() {
        let group = "root:x:0:\nvideo:x:44:ana,bo\nml:x:1002:\nrender:x:105:bo\nbad line\nsudo:x:27:ana\n";
        let names = |v: Vec<(u32, String)>| v.into_iter().map(|(g, n)| format!("{g}={n}")).collect::<Vec<_>>();
        assert_eq!(names(groups_in(group, "ana", Some(1002))), ["1002=ml", "44=video", "27=sudo"]);
        // A primary group with no line of its own is named by its number, as `id -Gn` does.
        assert_eq!(names(groups_in(group, "bo", Some(5000))), ["5000=5000", "44=video", "105=render"]);
        assert_eq!(names(groups_in(group, "ana", Some(44))), ["44=video", "27=sudo"], "listed once");
        assert!(groups_in(group, "nobody-here", None).is_empty());
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
        assert_eq!(cache.0.len(), 2, "both answers are kept for the next starts");
    }

    #[test]
    fn root_is_found_by_uid_with_its_groups() {
        assert_eq!(lookup_uid(0).expect("getent").map(|a| a.name), Some("root".into()));
        assert_eq!(lookup_uid(4_000_000_000).expect("getent"), None);
        assert_eq!(group_names("root").expect("id").first().map(String::as_str), Some("root"));
        assert!(group_names("no-such-user-gpool-test").expect("id").is_empty());
    }
}
