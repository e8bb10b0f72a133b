//! The last step of a replica's start, where root hands the process to the job.
//!
//! The shim (root) never runs a program with the job's environment: a job
//! may set `PATH`, `LD_PRELOAD` or `CONTAINERS_CONF` to anything, and a
//! root-side `sh`, `setpriv` or `podman` that honoured them would run the
//! user's code as root. So the shim forks the job's first process, and
//! between the fork and the exec (`gpool-spawn`), that process, still root
//! and still with the shim's own environment:
//! 1. takes the terminal of an interactive job as its controlling one;
//! 2. joins the replica's control groups, so everything the job starts is
//!    confined;
//! 3. drops to the job's account: supplementary groups, then gid, then uid
//!    (real, effective and saved), and checks that root cannot be regained;
//! 4. sets `PR_SET_NO_NEW_PRIVS` (but for a container's runtime client,
//!    which needs root; the container itself gets no_new_privileges);
//! 5. enters the working directory as the account;
//! 6. only then `exec`s the command with the job's environment; `PATH` is
//!    searched as the user, for the user.
//!
//! One exec: until issue 44 these steps ran in a `gpool handover` process
//! of their own, one more exec of the whole gpool binary per start.
//!
//! A failure before the exec comes back from the spawn as a [`Refusal`]
//! (exit code 126: could not confine or drop, or the command is not
//! executable; 127: could not start it, as a shell would), and nothing of
//! the job's ran.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub use gpool_spawn::Refusal;

pub use crate::protocol::Ids;

/// Where root-side programs are looked for: system directories only.
pub const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the job's first process is and becomes.
#[derive(Debug, Default)]
pub struct Handover {
    /// `cgroup.procs` files to join, in order.
    pub join: Vec<PathBuf>,
    /// The account to drop to; `None`: stay (single-user mode, or a
    /// container's runtime client, which needs root and drops in the container).
    pub ids: Option<Ids>,
    /// Set `PR_SET_NO_NEW_PRIVS` before the exec.
    pub no_new_privs: bool,
    pub argv: Vec<String>,
    /// The command's whole environment (nothing of the shim's is kept).
    pub env: Vec<(String, String)>,
    /// Empty: `/`.
    pub cwd: PathBuf,
    /// An interactive job's terminal: the process leads a new session with
    /// it as the controlling terminal, and it is also its standard input.
    pub terminal: Option<OwnedFd>,
}

/// The environment of every program gpool runs as root on a job's behalf
/// (the step itself, a container runtime's client): [`ROOT_PATH`], and from
/// the daemon's own environment (which an admin set) only the variables
/// that configure the machine's tools: locale, time zone, home, and the
/// container runtimes' own settings. Nothing of the job's.
pub fn root_env() -> Vec<(String, String)> {
    const KEPT: &[&str] = &[
        "HOME",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
        "XDG_RUNTIME_DIR",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "CONTAINERS_REGISTRIES_CONF",
        "DOCKER_HOST",
    ];
    let mut env = vec![("PATH".to_string(), ROOT_PATH.to_string())];
    env.extend(KEPT.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))));
    env
}

/// Starts the job's first process for `h` with the given output; it has
/// exec'd the command when this returns `Ok`.
pub fn spawn(h: Handover, stdout: Stdio, stderr: Stdio) -> Result<Child, Refusal> {
    let Some((prog, args)) = h.argv.split_first() else { return Err(Refusal::Start("the command is empty".into())) };
    let stdin = match &h.terminal {
        Some(tty) => tty
            .try_clone()
            .map(Stdio::from)
            .map_err(|e| Refusal::Confine(format!("cannot open the terminal as the job's standard input: {e}")))?,
        None => Stdio::null(),
    };
    let mut cmd = Command::new(prog);
    cmd.args(args).env_clear().envs(h.env.iter().map(|(k, v)| (k, v))).stdin(stdin).stdout(stdout).stderr(stderr);
    // A terminal's job makes its own session, which a group leader cannot.
    if h.terminal.is_none() {
        cmd.process_group(0);
    }
    let step = gpool_spawn::Step {
        join: h.join,
        account: h.ids.map(|i| gpool_spawn::Account { uid: i.uid, gid: i.gid, groups: i.groups }),
        no_new_privs: h.no_new_privs,
        cwd: (!h.cwd.as_os_str().is_empty()).then_some(h.cwd),
        terminal: h.terminal,
    };
    let info = step.install(&mut cmd)?;
    cmd.spawn().map_err(|e| Refusal::from_spawn(&e, &info, prog))
}
