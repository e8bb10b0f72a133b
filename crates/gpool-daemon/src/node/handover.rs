//! `gpool handover`: the last step of a replica's start, where root hands
//! the process to the job.
//!
//! The shim (root) never runs a program with the job's environment: a job
//! may set `PATH`, `LD_PRELOAD` or `CONTAINERS_CONF` to anything, and a
//! root-side `sh`, `setpriv` or `podman` that honoured them would run the
//! user's code as root. So the shim starts this step by absolute path
//! (`/proc/self/exe`, the running gpool binary) with [`root_env`], a fixed
//! environment of its own, and sends it a [`Handover`] on a socket. This
//! process, single-threaded and still root:
//! 1. joins the replica's control groups (its pid into each `cgroup.procs`),
//!    so everything the job starts is confined;
//! 2. drops to the job's account: supplementary groups, then gid, then uid
//!    (real, effective and saved), and checks that root cannot be regained;
//! 3. sets `PR_SET_NO_NEW_PRIVS`: no setuid program, file capability or
//!    LSM transition can raise the job's privileges again;
//! 4. enters the working directory as the account (so a directory the user
//!    cannot reach is refused, not entered by root on their behalf);
//! 5. only then `exec`s the command with the job's environment; `PATH` is
//!    searched as the user, for the user.
//!
//! Why a process and not `pre_exec`: the workspace forbids `unsafe`, and a
//! Rust closure between `fork` and `exec` needs it. The step's pid becomes
//! the command's own (exec keeps it), in the process group the shim made.
//!
//! A failure before the exec is written back on the socket (a copy kept
//! close-on-exec, so a successful exec closes it: the shim reads end of
//! file), and the step exits 126 (could not confine or drop) or 127 (could
//! not start the command), as a shell would.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde::{Deserialize, Serialize};

pub use crate::protocol::Ids;

/// The hidden subcommand of the gpool binary that runs [`main`].
pub const SUBCOMMAND: &str = "handover";

/// Where root-side programs are looked for: system directories only.
pub const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the step does, sent by the shim on the step's standard input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub cwd: PathBuf,
    /// The step's standard output is a terminal (an interactive job): it
    /// becomes the leader of a new session with that terminal as its
    /// controlling one, and the command's standard input too.
    #[serde(default)]
    pub tty: bool,
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

/// A started step: the process that is (or was to become) the command.
pub struct Started {
    pub child: Child,
    /// Why the command did not start, when it did not (the step has exited or is exiting).
    pub failed: Option<String>,
}

/// Starts the step for `h` with the given output; returns once the command
/// runs (exec'd) or has failed to start.
pub fn spawn(h: &Handover, stdout: Stdio, stderr: Stdio) -> std::io::Result<Started> {
    let (mut ours, theirs) = UnixStream::pair()?;
    let mut step = Command::new("/proc/self/exe");
    step.arg(SUBCOMMAND)
        .env_clear()
        .envs(root_env())
        .current_dir("/")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(stdout)
        .stderr(stderr);
    // A terminal's job makes its own session, which a group leader cannot.
    if !h.tty {
        step.process_group(0);
    }
    let child = step.spawn()?;
    // Its copy of the step's end of the socket must go, or the answer below never ends.
    drop(step);
    let spec = serde_json::to_vec(h).map_err(std::io::Error::other)?;
    // A step that died before reading answers with its exit code instead.
    let _ = ours.write_all(&spec);
    let _ = ours.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let _ = ours.read_to_string(&mut answer);
    let failed = (!answer.is_empty()).then_some(answer);
    Ok(Started { child, failed })
}

/// The step's body (`gpool handover`); returns the exit code when the
/// command could not be started (on success it never returns).
pub fn main() -> i32 {
    // The socket stays open, close-on-exec, to say why if the exec fails.
    let answer = match rustix::io::fcntl_dupfd_cloexec(std::io::stdin().as_fd(), 3) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("gpool: the hand-over to the job has no channel to its shim: {e}");
            return 126;
        }
    };
    let mut answer = std::fs::File::from(answer);
    let mut spec = Vec::new();
    let (code, why) = match answer.read_to_end(&mut spec).map_err(|e| e.to_string()).and_then(|_| {
        serde_json::from_slice::<Handover>(&spec).map_err(|e| format!("the hand-over's spec is not valid: {e}"))
    }) {
        Err(why) => (126, why),
        Ok(h) => run(&h),
    };
    eprintln!("gpool: {why}");
    let _ = answer.write_all(why.as_bytes());
    code
}

/// Carries `h` out; returns only on failure, with the exit code and why.
fn run(h: &Handover) -> (i32, String) {
    let stdin = match h.tty.then(take_terminal).transpose() {
        Ok(tty) => tty.map_or_else(Stdio::null, Stdio::from),
        Err(why) => return (126, why),
    };
    if let Err(why) = confine_and_drop(h) {
        return (126, why);
    }
    let Some((prog, args)) = h.argv.split_first() else { return (127, "the command is empty".into()) };
    if !h.cwd.as_os_str().is_empty()
        && let Err(e) = std::env::set_current_dir(&h.cwd)
    {
        return (127, format!("cannot start {prog:?} in {}: {e}", h.cwd.display()));
    }
    let e = Command::new(prog).args(args).env_clear().envs(h.env.iter().map(|(k, v)| (k, v))).stdin(stdin).exec();
    (127, format!("cannot start {prog:?} in {}: {e}", h.cwd.display()))
}

/// An interactive job's step: a session of its own whose controlling
/// terminal is its standard output (Ctrl-C there reaches the job); returns
/// the terminal again, for the command's standard input.
fn take_terminal() -> Result<OwnedFd, String> {
    rustix::process::setsid().map_err(|e| format!("cannot start a session for the terminal: {e}"))?;
    let out = std::io::stdout();
    rustix::process::ioctl_tiocsctty(out.as_fd())
        .map_err(|e| format!("cannot make the pseudo-terminal the job's controlling terminal: {e}"))?;
    out.as_fd().try_clone_to_owned().map_err(|e| format!("cannot open the terminal as standard input: {e}"))
}

/// Steps 1 to 3: join the groups, drop to the account, forbid new privileges.
fn confine_and_drop(h: &Handover) -> Result<(), String> {
    // Credentials are per thread to the kernel: a second thread would stay root.
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    if threads != 1 {
        return Err(format!("the hand-over must be single-threaded to drop privileges, and has {threads} threads"));
    }
    let me = std::process::id().to_string();
    for procs in &h.join {
        std::fs::write(procs, &me).map_err(|e| format!("cannot join the control group {}: {e}", procs.display()))?;
    }
    if let Some(ids) = &h.ids {
        drop_to(ids)?;
    }
    if h.no_new_privs {
        rustix::thread::set_no_new_privs(true).map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    }
    Ok(())
}

fn drop_to(ids: &Ids) -> Result<(), String> {
    use rustix::fs::{Gid, Uid};
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    let say = |what: &str, e: rustix::io::Errno| format!("cannot drop to uid {} gid {}: {what}: {e}", ids.uid, ids.gid);
    let groups: Vec<Gid> = ids.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    set_thread_groups(&groups).map_err(|e| say("setgroups", e))?;
    let gid = Gid::from_raw(ids.gid);
    set_thread_res_gid(gid, gid, gid).map_err(|e| say("setresgid", e))?;
    let uid = Uid::from_raw(ids.uid);
    set_thread_res_uid(uid, uid, uid).map_err(|e| say("setresuid", e))?;
    // Dropped for good: neither id can be set back to root's.
    if ids.uid != 0 && rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT).is_ok() {
        return Err(format!("uid {} could become root again after the drop", ids.uid));
    }
    if rustix::process::getuid().as_raw() != ids.uid || rustix::process::getgid().as_raw() != ids.gid {
        return Err(format!("the drop to uid {} gid {} did not hold", ids.uid, ids.gid));
    }
    Ok(())
}
