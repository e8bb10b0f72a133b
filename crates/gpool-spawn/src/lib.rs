//! # gpool-spawn
//!
//! A job's first process, started by its shim (root) in one `fork` and one
//! `exec`. Between the two, in the child, [`Step`] makes the process the
//! job's:
//! 1. an interactive job's process leads a session of its own, with its
//!    terminal as the controlling one;
//! 2. it joins the replica's control groups (`0` into each `cgroup.procs`:
//!    the writer itself), so everything the job starts is confined;
//! 3. it drops to the job's account: supplementary groups, then gid, then
//!    uid (real, effective and saved), and checks that root cannot be
//!    regained;
//! 4. it sets `PR_SET_NO_NEW_PRIVS`: no setuid program, file capability or
//!    LSM transition can raise the job's privileges again;
//! 5. it enters the working directory as the account (a directory the user
//!    cannot reach is refused, not entered by root on their behalf).
//!
//! The `exec` that follows takes on the job's environment: the standard
//! library sets it only after these steps, right before `execvp`, so `PATH`
//! is searched as the user, and nothing of the job's environment is ever
//! read by a process that is still root.
//!
//! Before this crate, the same steps ran in a second process, `gpool
//! handover`, which the shim exec'd to avoid `pre_exec`: on two cores a
//! start paid for one more exec of gpool's 30 MiB binary (issue 44).
//!
//! ## Why this is sound
//!
//! The closure runs in a child forked from a process that may have other
//! threads, so it may only do what is async-signal-safe: it makes raw
//! system calls through `rustix` on data prepared before the fork (paths as
//! C strings, ids, descriptors), allocates nothing, takes no lock and reads
//! no environment. Credentials are per thread to the kernel; the child has
//! exactly one thread, so the drop covers the whole process.
//!
//! ## Why a step failed
//!
//! The standard library hands a failed step's `io::Error` to the parent as
//! its raw OS error only. The step is encoded in it (`step × 4096 + errno`;
//! errno values stay below 4096) and [`Refusal::from_spawn`] decodes it into
//! the step, its subject and the errno.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::fs::{Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// The account the job's process drops to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one need not be among them).
    pub groups: Vec<u32>,
}

/// What happens between the fork and the exec. Build it, then
/// [`Step::install`] it on the command.
#[derive(Debug, Default)]
pub struct Step {
    /// `cgroup.procs` files to join, in order.
    pub join: Vec<PathBuf>,
    /// `None`: stay (single-user mode, or a container's runtime client,
    /// which needs root and drops inside the container).
    pub account: Option<Account>,
    /// Set `PR_SET_NO_NEW_PRIVS` before the exec.
    pub no_new_privs: bool,
    /// Entered after the drop; `None`: `/`.
    pub cwd: Option<PathBuf>,
    /// A terminal that becomes the process's controlling one, in a session
    /// of its own (the command must not be put in a process group).
    pub terminal: Option<OwnedFd>,
}

/// Where a start failed: the code carried in the OS error with the errno.
mod stage {
    /// The `exec` itself (the standard library's own errno, unchanged).
    pub(crate) const EXEC: i32 = 0;
    pub(crate) const SESSION: i32 = 1;
    pub(crate) const CONTROLLING_TERMINAL: i32 = 2;
    /// Joining the first group; the n-th (from 0) is `JOIN + n`.
    pub(crate) const JOIN: i32 = 3;
    pub(crate) const SET_GROUPS: i32 = 1000;
    pub(crate) const SET_GID: i32 = 1001;
    pub(crate) const SET_UID: i32 = 1002;
    pub(crate) const ROOT_REGAINED: i32 = 1003;
    pub(crate) const DROP_DID_NOT_HOLD: i32 = 1004;
    pub(crate) const NO_NEW_PRIVS: i32 = 1005;
    pub(crate) const CHDIR: i32 = 1006;
}

const STAGE_BASE: i32 = 4096;

/// Why the job's process did not start, and the exit code a shell would give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It could not be confined or dropped to its account (126).
    #[error("{0}")]
    Confine(String),
    /// The command could not be started (127).
    #[error("{0}")]
    Start(String),
    /// The command was found but cannot be executed: not permitted, or
    /// not a program the kernel can run (126, as a shell says).
    #[error("{0}")]
    NotExecutable(String),
}

impl Refusal {
    /// The exit code a shell gives for this failure.
    pub fn code(&self) -> i32 {
        match self {
            Refusal::Confine(_) | Refusal::NotExecutable(_) => 126,
            Refusal::Start(_) => 127,
        }
    }

    /// Reads `spawn`'s error for `step` and `program`: which stage refused and why.
    pub fn from_spawn(e: &std::io::Error, step: &StepInfo, program: &str) -> Refusal {
        let Some(raw) = e.raw_os_error() else { return Refusal::Start(format!("cannot start {program:?}: {e}")) };
        let (stage, errno) = (raw / STAGE_BASE, raw % STAGE_BASE);
        let os = std::io::Error::from_raw_os_error(errno);
        let drop = |what: &str| match &step.account {
            Some(a) => Refusal::Confine(format!("cannot drop to uid {} gid {}: {what}: {os}", a.uid, a.gid)),
            None => Refusal::Confine(format!("cannot keep the job's account: {what}: {os}")),
        };
        let cwd = step.cwd.as_deref().unwrap_or(Path::new("/")).display();
        match stage {
            stage::EXEC if [Errno::ACCESS, Errno::NOEXEC].iter().any(|e| e.raw_os_error() == errno) => {
                Refusal::NotExecutable(format!("cannot start {program:?} in {cwd}: {os}"))
            }
            stage::EXEC | stage::CHDIR => Refusal::Start(format!("cannot start {program:?} in {cwd}: {os}")),
            stage::SESSION => Refusal::Confine(format!("cannot start a session for the terminal: {os}")),
            stage::CONTROLLING_TERMINAL => {
                Refusal::Confine(format!("cannot make the pseudo-terminal the job's controlling terminal: {os}"))
            }
            n if (stage::JOIN..stage::SET_GROUPS).contains(&n) => {
                let i = (n - stage::JOIN) as usize;
                let file = step.join.get(i).map_or_else(|| format!("number {}", i + 1), |p| p.display().to_string());
                Refusal::Confine(format!("cannot join the control group {file}: {os}"))
            }
            stage::SET_GROUPS => drop("setgroups"),
            stage::SET_GID => drop("setresgid"),
            stage::SET_UID => drop("setresuid"),
            stage::ROOT_REGAINED => Refusal::Confine(format!(
                "uid {} could become root again after the drop",
                step.account.as_ref().map_or(0, |a| a.uid)
            )),
            stage::DROP_DID_NOT_HOLD => drop("the new ids did not hold"),
            stage::NO_NEW_PRIVS => Refusal::Confine(format!("cannot set no_new_privs: {os}")),
            _ => Refusal::Start(format!("cannot start {program:?}: {e}")),
        }
    }
}

/// What [`Refusal::from_spawn`] needs to name a failed stage's subject.
#[derive(Clone, Debug, Default)]
pub struct StepInfo {
    join: Vec<PathBuf>,
    account: Option<Account>,
    cwd: Option<PathBuf>,
}

/// A path as the C string a system call takes; a path with a NUL byte cannot
/// name a file, and is refused before the fork.
fn c_path(p: &Path) -> Result<CString, Refusal> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Refusal::Start(format!("the path {:?} has a NUL byte", p.display())))
}

impl Step {
    /// Installs the step on `cmd`, which must not set a working directory,
    /// user, group or (with a terminal) process group of its own: the step
    /// does these, in its order. Returns what names a failure's subject.
    pub fn install(self, cmd: &mut Command) -> Result<StepInfo, Refusal> {
        let info = StepInfo { join: self.join.clone(), account: self.account.clone(), cwd: self.cwd.clone() };
        let join = self.join.iter().map(|p| c_path(p)).collect::<Result<Vec<_>, _>>()?;
        let cwd = c_path(self.cwd.as_deref().unwrap_or(Path::new("/")))?;
        let account = self.account.map(|a| (Uid::from_raw(a.uid), Gid::from_raw(a.gid), groups_of(&a)));
        let (no_new_privs, terminal) = (self.no_new_privs, self.terminal);
        let child = move || -> std::io::Result<()> {
            in_child(&join, account.as_ref(), no_new_privs, &cwd, terminal.as_ref())
                .map_err(|(code, errno)| std::io::Error::from_raw_os_error(code * STAGE_BASE + errno.raw_os_error()))
        };
        // SAFETY: `in_child` is async-signal-safe (the crate's documentation
        // says why): raw system calls on data made before the fork.
        #[allow(unsafe_code)]
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, child);
        }
        Ok(info)
    }
}

fn groups_of(a: &Account) -> Vec<Gid> {
    a.groups.iter().map(|g| Gid::from_raw(*g)).collect()
}

/// The steps in the child, in order; an error names its stage (as the code
/// in [`stage`], plus the group's index when joining) and the errno.
fn in_child(
    join: &[CString],
    account: Option<&(Uid, Gid, Vec<Gid>)>,
    no_new_privs: bool,
    cwd: &CStr,
    terminal: Option<&OwnedFd>,
) -> Result<(), (i32, Errno)> {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    let at = |code: i32| move |e: Errno| (code, e);
    if let Some(tty) = terminal {
        rustix::process::setsid().map_err(at(stage::SESSION))?;
        rustix::process::ioctl_tiocsctty(tty.as_fd()).map_err(at(stage::CONTROLLING_TERMINAL))?;
    }
    for (i, procs) in join.iter().enumerate() {
        let code = stage::JOIN + i.min((stage::SET_GROUPS - stage::JOIN - 1) as usize) as i32;
        let fd =
            rustix::fs::open(procs.as_c_str(), OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).map_err(at(code))?;
        // "0": the writing process itself, in either hierarchy.
        rustix::io::write(&fd, b"0").map_err(at(code))?;
    }
    if let Some((uid, gid, groups)) = account {
        set_thread_groups(groups).map_err(at(stage::SET_GROUPS))?;
        set_thread_res_gid(*gid, *gid, *gid).map_err(at(stage::SET_GID))?;
        set_thread_res_uid(*uid, *uid, *uid).map_err(at(stage::SET_UID))?;
        // Dropped for good: neither id can be set back to root's.
        if !uid.is_root() && set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT).is_ok() {
            return Err((stage::ROOT_REGAINED, Errno::PERM));
        }
        if rustix::process::getuid() != *uid || rustix::process::getgid() != *gid {
            return Err((stage::DROP_DID_NOT_HOLD, Errno::PERM));
        }
    }
    if no_new_privs {
        rustix::thread::set_no_new_privs(true).map_err(at(stage::NO_NEW_PRIVS))?;
    }
    rustix::process::chdir(cwd).map_err(at(stage::CHDIR))?;
    Ok(())
}
