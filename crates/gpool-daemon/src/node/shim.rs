//! `gpool shim DIR`: the supervisor of one job replica.
//!
//! The agent starts one shim per replica; the shim starts the job's command
//! and outlives the daemon, so a daemon restart (even `kill -9`) loses
//! nothing: the new daemon re-adopts running replicas through their shims.
//!
//! The shim:
//! 1. becomes a session leader and a *child subreaper*: any process the job
//!    starts that is orphaned (daemons, `setsid` + `&`) is re-parented to the
//!    shim, not to init, so the shim can find and kill it;
//! 2. takes an exclusive lock on `DIR/lock` for its whole life: a daemon that
//!    can take the lock knows no shim is alive for that replica;
//! 3. reads what to run from its standard input, starts the command in a new process group with its environment,
//!    working directory and log files, and records both pids in `DIR/shim.json`;
//! 4. when the command exits, kills its process group and every remaining
//!    descendant, reaps them all, writes `DIR/exit.json` atomically, and exits.
//!
//! A job's GPUs are released only after step 4, so when a job ends nothing
//! it started is still running.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};
use rustix::process::{
    Pid, Signal, WaitOptions, getpid, kill_process, kill_process_group, set_child_subreaper, setsid,
};
use serde::{Deserialize, Serialize};

use crate::node::cgroup::Groups;
use crate::node::handover::{self, Handover, Refusal};
use crate::node::output::Copiers;
use crate::node::terminal::{self, Attended, interactive};
use crate::protocol::{ExitRecord, Launch};

/// Written by the shim once the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimState {
    pub shim_pid: i32,
    /// Also the process group of the job.
    pub job_pid: i32,
}

pub const STATE: &str = "shim.json";
pub const EXIT: &str = "exit.json";
pub const LOCK: &str = "lock";
/// Left by a restarted daemon that gave the replica up: a shim that starts late must not run it.
pub const ABANDONED: &str = "abandoned";
/// A signal the agent sent before the job's process group was known (no
/// `shim.json` yet), by number: the shim sends it once the job runs.
pub const SIGNALED: &str = "signaled";

use crate::node::clock::wall_ms as now_ms;

/// Writes `value` as JSON to `dir/name` via a temporary file and a rename, so
/// readers see all or nothing. No fsync: these records must survive a crash
/// of the daemon or the shim (the kernel keeps the data), not a power loss,
/// after which no job is running anyway; `--fsync` covers the store.
pub(crate) fn write_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    Ok(())
}

/// Room kept for the exit record from the shim's start: written in place
/// over blocks the file already has, it can be written on a full disk.
const EXIT_ROOM: usize = 4096;

/// Reserves the exit record's room (a file of spaces, renamed over later).
fn reserve_exit(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(format!(".{EXIT}.tmp")), vec![b' '; EXIT_ROOM])
}

/// Writes the exit record into its reserved room and renames it into place.
fn write_exit(dir: &Path, rec: &ExitRecord) -> std::io::Result<()> {
    let mut rec = rec.clone();
    let mut json = serde_json::to_vec(&rec).map_err(std::io::Error::other)?;
    if json.len() > EXIT_ROOM {
        // Only an error text can make it long.
        rec.error = rec.error.map(|e| e.chars().take(1_000).collect());
        json = serde_json::to_vec(&rec).map_err(std::io::Error::other)?;
    }
    json.resize(json.len().max(EXIT_ROOM), b' ');
    let tmp = dir.join(format!(".{EXIT}.tmp"));
    let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(&tmp)?;
    f.write_all(&json)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(EXIT))
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// Whether a shim holds the replica's lock in `dir` (it does for its whole life).
pub fn alive(dir: &Path) -> bool {
    OpenOptions::new()
        .write(true)
        .open(dir.join(LOCK))
        .is_ok_and(|f| flock(&f, FlockOperation::NonBlockingLockExclusive).is_err())
}

/// Why a replica must not start now, at the last moment before it would: it
/// was killed while its shim got ready, or (on a remote node) the node's
/// lease ran out meanwhile, so the control plane may already run it elsewhere.
fn too_late(dir: &Path, launch: &Launch) -> Option<String> {
    if dir.join(ABANDONED).exists() {
        return Some("not started: the control plane killed this replica before it could start".into());
    }
    let lease = launch.lease.as_deref()?;
    let left = crate::node::lease::read(lease).map_or(0, |d| d - crate::node::lease::monotonic_ms());
    (left <= 0).then(|| {
        "not started: this node's lease with the control plane ran out before the job could start (the agent was \
         cut off or stalled), so it may run elsewhere"
            .into()
    })
}

/// Runs the shim in `dir`; returns the process exit code.
pub fn main(dir: &Path) -> i32 {
    match run(dir) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpool shim {}: {e:#}", dir.display());
            1
        }
    }
}

fn run(dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    // A session of our own: signals to the daemon's group do not reach the job.
    let _ = setsid();
    let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK)).context("open lock")?;
    flock(&lock, FlockOperation::NonBlockingLockExclusive).context("another shim holds this replica's lock")?;
    if dir.join(ABANDONED).exists() {
        // The daemon died between starting us and our taking the lock, and its
        // successor requeued the job: running it here would run it twice.
        return Ok(());
    }
    set_child_subreaper(Some(getpid())).context("become child subreaper")?;
    reserve_exit(dir).context("reserve room for exit.json")?;
    let mut spec = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut spec).context("read the launch spec from stdin")?;
    let mut launch: Launch = serde_json::from_slice(&spec).context("parse the launch spec")?;
    // The daemon keeps its own files private (umask 077); the job gets the
    // usual default, as from a login shell.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let started_ms = now_ms();
    let open_log = |p: &Path| OpenOptions::new().create(true).append(true).open(p);
    let exit_now = |code: Option<i32>, error: String, fenced: bool| -> anyhow::Result<()> {
        if let Ok(mut f) = open_log(&launch.stderr) {
            let _ = writeln!(f, "gpool: {error}");
        }
        let rec = ExitRecord { code, signal: None, started_ms, ended_ms: now_ms(), error: Some(error), fenced };
        write_exit(dir, &rec).context("write exit.json")
    };
    // An interactive job's clients can connect from now on, while its image is pulled.
    let listener = match launch.tty_grace_ms.map(|_| terminal::listen(dir)).transpose() {
        Ok(l) => l,
        Err(e) => return exit_now(Some(127), format!("cannot open the interactive session: {e}"), false),
    };
    // A job in an image that is not here: pulled first, as the replica (signals reach the pull).
    if let Some(steps) = &launch.pull {
        let shim_pid = getpid().as_raw_nonzero().get();
        let set_pid = |job_pid| {
            let _ = write_atomic(dir, STATE, &ShimState { shim_pid, job_pid });
        };
        let end = match crate::node::pull::run(dir, steps, &launch.stderr, set_pid) {
            Ok(()) => None,
            Err(crate::node::pull::PullEnd::Failed(msg)) => Some((Some(125), None, Some(msg))),
            Err(crate::node::pull::PullEnd::Signalled(sig)) => Some((None, Some(sig), None)),
        };
        if let Some((code, signal, error)) = end {
            let rec = ExitRecord { code, signal, started_ms, ended_ms: now_ms(), error, fenced: false };
            write_exit(dir, &rec).context("write exit.json")?;
            return Ok(());
        }
    }
    // The kernel enforces the allocation (`cgroup.rs`): the job joins its groups before it runs.
    let groups = match launch.confine.as_ref().map(crate::protocol::Confine::create).transpose() {
        Ok(g) => g,
        Err(e) => return exit_now(Some(127), format!("cannot confine the job with control groups: {e}"), false),
    };
    // An interactive job starts once its first client is here, on a terminal;
    // a kill while it waits (`ABANDONED`) or its lease running out ends the wait.
    let tty = match (&listener, launch.tty_grace_ms) {
        (Some(l), Some(ms)) => {
            let stop = || too_late(dir, &launch);
            match interactive(l, Duration::from_millis(ms), launch.run_as.as_ref(), stop) {
                Ok(tty) => Some(tty),
                Err(why) => {
                    if let Some(g) = groups {
                        g.kill_all_and_remove();
                    }
                    let fenced = too_late(dir, &launch).is_some();
                    return exit_now(None, why, fenced);
                }
            }
        }
        _ => None,
    };
    if let Some(why) = too_late(dir, &launch) {
        if let Some(g) = groups {
            g.kill_all_and_remove();
        }
        return exit_now(None, why, true);
    }
    // The hand-over (`handover.rs`) joins the groups, drops to the job's
    // account and only then takes on the job's environment: nothing the shim
    // runs as root ever sees it.
    let container = launch.image.is_some();
    let spawned = (|| -> Result<std::process::Child, Refusal> {
        let io = |what: &str, e: std::io::Error| Refusal::Start(format!("cannot open the job's {what}: {e}"));
        // With a log limit the shim copies the output (`output.rs`); without,
        // the job writes to its log files itself. A terminal's output is
        // always copied (to the log and the client).
        let (out, err, terminal) = match (&tty, launch.log_limit) {
            (Some((pty, _)), _) => {
                let clone = || pty.slave.try_clone().map_err(|e| io("terminal", e));
                (clone()?.into(), clone()?.into(), Some(clone()?))
            }
            (None, Some(_)) => (Stdio::piped(), Stdio::piped(), None),
            (None, None) => (
                open_log(&launch.stdout).map_err(|e| io("output log", e))?.into(),
                open_log(&launch.stderr).map_err(|e| io("error log", e))?.into(),
                None,
            ),
        };
        let handover = Handover {
            join: groups.as_ref().map(Groups::procs_files).unwrap_or_default(),
            ids: launch.run_as.clone(),
            // A container's runtime client needs root; the container itself gets no_new_privileges.
            no_new_privs: !container,
            argv: launch.argv.clone(),
            env: if container { handover::root_env() } else { std::mem::take(&mut launch.env) },
            cwd: launch.cwd.clone(),
            terminal,
        };
        handover::spawn(handover, out, err)
    })();
    let mut child = match spawned {
        Ok(child) => child,
        Err(refused) => {
            if let Some(g) = groups {
                g.kill_all_and_remove();
            }
            if let Some((_, first)) = tty {
                terminal::refuse(first, refused.code(), &refused.to_string());
                let _ = std::fs::remove_file(dir.join(terminal::SOCKET));
            }
            return exit_now(Some(refused.code()), refused.to_string(), false);
        }
    };
    let job_pid = child.id() as i32;
    // The terminal's clients, its hang-up and its output's copy, from now on.
    let session = match (tty, listener) {
        (Some((pty, first)), Some(listener)) => match Attended::start(pty, first, listener, &launch, job_pid) {
            Ok(a) => Some(a),
            Err(e) => {
                // Unattended it would run with no one to type into it: it ends, saying why.
                if let Ok(mut f) = open_log(&launch.stderr) {
                    let _ = writeln!(f, "gpool: cannot serve the job's terminal: {e}");
                }
                if let Some(pgid) = Pid::from_raw(job_pid) {
                    let _ = kill_process_group(pgid, Signal::KILL);
                }
                None
            }
        },
        _ => None,
    };
    let copiers = match (launch.log_limit, child.stdout.take(), child.stderr.take()) {
        (Some(limit), Some(out), Some(err)) => Some(
            Copiers::start(out, err, [launch.stdout.clone(), launch.stderr.clone()], limit).context("copy output")?,
        ),
        _ => None,
    };
    write_atomic(dir, STATE, &ShimState { shim_pid: getpid().as_raw_nonzero().get(), job_pid })
        .context("write shim.json")?;
    // Killed while it was being spawned (the kill found no shim.json): it ends now.
    if dir.join(ABANDONED).exists()
        && let Some(pgid) = Pid::from_raw(job_pid)
    {
        let _ = kill_process_group(pgid, Signal::KILL);
    }
    // Signaled while it was being spawned (a cancel right after the start):
    // the signal is sent now, or it would be lost and the job would run on
    // until its grace ended.
    if let Some(sig) = std::fs::read_to_string(dir.join(SIGNALED))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .and_then(Signal::from_named_raw)
        && let Some(pgid) = Pid::from_raw(job_pid)
    {
        let _ = kill_process_group(pgid, sig);
    }
    let fenced = launch.lease.clone().map(|lease| crate::node::lease::fence(lease, job_pid));
    let status = child.wait().context("wait for the job")?;
    kill_everything(job_pid);
    // Killed by the kernel at its memory limit: say so, rather than "signal 9".
    let oom = groups.as_ref().filter(|g| g.oom_kills() > 0).map(|g| {
        let limit = g.memory_limit_mb().map_or_else(String::new, |mb| format!(" of {mb} MiB"));
        format!("out of memory: the kernel killed the job at its memory limit{limit}; ask for more memory")
    });
    if let Some(g) = groups {
        g.kill_all_and_remove();
    }
    // Every writer of the pipes is gone now: the copies end.
    if let Some(c) = copiers {
        for e in c.finish().into_iter().filter_map(|c| c.error) {
            eprintln!("gpool shim {}: output lost: {e}", dir.display());
        }
    }
    let fenced_why = fenced.and_then(|f| f.fenced());
    let fenced = fenced_why.is_some();
    let why_ended = fenced_why.clone().or(oom.clone());
    let hung_up = session.and_then(|s| s.finish(dir, &status, why_ended));
    let error = fenced_why.or(oom).or(hung_up).map(|why| {
        if let Ok(mut f) = open_log(&launch.stderr) {
            let _ = writeln!(f, "gpool: {why}");
        }
        why
    });
    let rec =
        ExitRecord { code: status.code(), signal: status.signal(), started_ms, ended_ms: now_ms(), error, fenced };
    write_exit(dir, &rec).context("write exit.json")?;
    drop(lock);
    Ok(())
}

/// Kills the job's process group and every descendant left, and reaps them,
/// until the shim has no children at all.
fn kill_everything(job_pid: i32) {
    if let Some(pgid) = Pid::from_raw(job_pid) {
        let _ = kill_process_group(pgid, Signal::KILL);
    }
    let me = getpid().as_raw_nonzero().get();
    let mut pause = Duration::from_millis(1);
    loop {
        for pid in children_of(me) {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some(_)) => pause = Duration::from_millis(1),
            // Children left, none dead yet: a killed one takes a moment to
            // die (one stuck in a driver, longer: hence the back-off), and
            // one forked or re-parented while the list was read was not in
            // it. List and kill again.
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            // ECHILD: nothing left to reap; anything orphaned later would be re-parented to us, and we are done.
            Err(_) => break,
        }
    }
}

/// Starts the shim of the replica in `dir` (`gpool shim DIR`, from `exe`)
/// and hands it the launch `spec`, its output going to `log`. It runs with
/// root's fixed environment, not the daemon's (which may hold secrets): the
/// job's first process is a copy of the shim until its exec.
pub(crate) fn spawn(exe: &Path, dir: &Path, spec: &[u8], log: File) -> std::io::Result<std::process::Child> {
    let mut child = std::process::Command::new(exe)
        .arg("shim")
        .arg(dir)
        .env_clear()
        .envs(handover::root_env())
        .stdin(Stdio::piped())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start its shim: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A shim that dies before reading reports itself through its exit record or its absence.
        let _ = stdin.write_all(spec);
    }
    Ok(child)
}

/// Pids whose parent is `ppid`: each of its threads' `children` file, where
/// the kernel keeps one (`CONFIG_PROC_CHILDREN`, as Debian's and RHEL's do);
/// else every process's parent from /proc. The files can miss a child forked
/// or re-parented while they are read: callers ask again until none is left.
pub(crate) fn children_of(ppid: i32) -> Vec<i32> {
    children_from_task_files(ppid).unwrap_or_else(|| {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| proc_ppid(*pid) == Some(ppid))
            .collect()
    })
}

/// `None` where the kernel keeps no `children` files (or `ppid` is gone).
fn children_from_task_files(ppid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{ppid}/task")).ok()?;
    let mut children = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(text) => children.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok())),
            // A thread that ended meanwhile has no files left.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && task.path().exists() => return None,
            Err(_) => {}
        }
    }
    Some(children)
}

/// The parent pid from /proc/PID/stat (the command name may contain spaces and parentheses).
pub(crate) fn proc_ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Pids of processes whose environment has `key=value` (fallback sweep for strays).
pub(crate) fn pids_with_env(key: &str, value: &str) -> Vec<i32> {
    let needle = format!("{key}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_parsing_survives_odd_command_names() {
        let me = std::process::id() as i32;
        let parent = proc_ppid(me).expect("own stat");
        assert!(parent > 0);
        assert!(children_of(parent).contains(&me));
    }

    #[test]
    fn children_are_found_through_either_source() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        let (listed, from_files) = (children_of(me), children_from_task_files(me));
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed.contains(&pid), "{pid} not among {listed:?}");
        if let Some(from_files) = from_files {
            assert!(from_files.contains(&pid), "the task files missed {pid}: {from_files:?}");
        }
    }
}
