//! Running a vendor's command-line tool (`nvidia-smi`, `amd-smi`,
//! `rocm-smi`, `tpu-info`) with a timeout, and finding it on `PATH`.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The most output read from one run (an 8-GPU `nvidia-smi -q -x` is about 200 KB).
const MAX_OUTPUT: u64 = 64 << 20;

/// How a run failed.
#[derive(Debug)]
pub enum ToolFailure {
    /// There is no such program.
    NotFound,
    /// It could not be started.
    Spawn(std::io::Error),
    /// It did not answer in time and was killed.
    Timeout,
    /// It exited with a failure: its exit code (`None`: killed by a signal,
    /// shown in `status`) and the line that says what went wrong.
    Failed { code: Option<i32>, status: String, message: String },
}

impl ToolFailure {
    /// `exited with 4: Insufficient Permissions`, for a failed run.
    pub fn exit_text(code: Option<i32>, status: &str, message: &str) -> String {
        format!(
            "exited with {}: {}",
            code.map_or_else(|| status.to_string(), |c| c.to_string()),
            if message.is_empty() { "no message" } else { message }
        )
    }
}

/// `name` in the directories of a `PATH`-style list, if there as an executable file.
pub fn find_in_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

/// `name` on this process's `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    find_in_path(name, &std::env::var_os("PATH").unwrap_or_default())
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// Runs `program args…` and returns what it printed on stdout. The child is
/// killed when it takes longer than `timeout`: a thread reads its output
/// while this one waits on a channel with a deadline.
pub fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<String, ToolFailure> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    run_command(cmd, timeout)
}

/// [`run`] for a command the caller has set up (its environment, say).
pub fn run_command(mut cmd: Command, timeout: Duration) -> Result<String, ToolFailure> {
    // Its own process group, so that a timeout kills what it started too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ToolFailure::NotFound,
            _ => ToolFailure::Spawn(e),
        })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // stderr in its own thread, so that a child filling one pipe never blocks on the other.
        let err = std::thread::spawn(move || read_all(stderr));
        let out = read_all(stdout);
        let err = err.join().unwrap_or_default();
        let _ = tx.send((out, err));
    });
    let Ok((out, err)) = rx.recv_timeout(timeout) else {
        if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        return Err(ToolFailure::Timeout);
    };
    // Both pipes are closed: the child is exiting.
    let status = child.wait().map_err(ToolFailure::Spawn)?;
    let out = String::from_utf8_lossy(&out).into_owned();
    if status.success() {
        return Ok(out);
    }
    let err = String::from_utf8_lossy(&err);
    // The line that says what went wrong: a refusal among success lines
    // (`mig -cgi` that created some instances, then failed), else stderr,
    // else the first thing it said.
    let refusal = |l: &&str| {
        let l = l.to_ascii_lowercase();
        l.starts_with("unable") || l.starts_with("failed") || l.starts_with("error")
    };
    let lines = || out.lines().chain(err.lines()).map(str::trim).filter(|l| !l.is_empty());
    let message = lines()
        .find(refusal)
        .or_else(|| err.lines().map(str::trim).find(|l| !l.is_empty()))
        .or_else(|| lines().next())
        .unwrap_or("")
        .to_string();
    Err(ToolFailure::Failed { code: status.code(), status: status.to_string(), message })
}

fn read_all(pipe: Option<impl Read>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(p) = pipe {
        let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_kills_what_the_program_started_too() {
        let pid_file = std::env::temp_dir().join(format!("gpool-tool-{}", std::process::id()));
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("sleep 30 & echo $! > {}; wait", pid_file.display()));
        assert!(matches!(run_command(cmd, Duration::from_millis(500)), Err(ToolFailure::Timeout)));
        let pid: i32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("a pid");
        let _ = std::fs::remove_file(&pid_file);
        // Killed with its group; the kernel reaps it once its parent, killed too, is gone.
        let gone = (0..50).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')));
            if alive {
                std::thread::sleep(Duration::from_millis(20));
            }
            !alive
        });
        assert!(gone, "the grandchild {pid} outlived the timeout");
    }

    #[test]
    fn finds_programs_on_a_path_list() {
        let path = std::env::join_paths(["/nonexistent", "/bin", "/usr/bin"]).expect("path");
        assert!(find_in_path("sh", &path).is_some());
        assert_eq!(find_in_path("no-such-program-gpool", &path), None);
    }
}
