//! Node leases: how a node cut off from the control plane stops its jobs
//! before the control plane runs them elsewhere.
//!
//! A remote agent renews its lease with every request the control plane
//! answers, and writes the lease's deadline (on the machine's monotonic
//! clock, which every process of a boot shares) to a lease file. Each shim
//! watches that file: when the deadline passes without a renewal — the
//! agent was killed, hangs, or cannot reach the control plane — the shim
//! kills its job. The control plane declares the node down only after
//! `lease + margin` without a request, measured from the last request it
//! received, which is after the agent's last renewal: by then every job on
//! the node is dead, so a requeued job never runs twice at once.
//!
//! Shims wait on inotify for the file to change, with a timeout at the
//! deadline: no polling.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, Signal, kill_process_group};
use rustix::time::{ClockId, clock_gettime};

/// Milliseconds on the monotonic clock (shared by every process of a boot).
pub fn monotonic_ms() -> i64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec * 1000 + t.tv_nsec / 1_000_000
}

/// Writes a lease deadline (monotonic milliseconds), atomically.
pub fn write(path: &Path, deadline_ms: i64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{deadline_ms}\n"))?;
    std::fs::rename(&tmp, path)
}

/// The deadline in a lease file; `None` if absent or unreadable (treated as expired).
pub fn read(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether a shim fenced its job, and why.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    why: Arc<Mutex<Option<String>>>,
}

impl Fence {
    /// The reason, if the job was killed because the lease expired.
    pub fn fenced(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Watches `lease` in a thread; kills process group `job_pid` when it expires.
pub fn fence(lease: PathBuf, job_pid: i32) -> Fence {
    let f = Fence::default();
    let flag = f.why.clone();
    let _ = std::thread::Builder::new().name("lease".into()).spawn(move || {
        let dir = lease.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let ino = inotify::Inotify::init().ok();
        if let Some(i) = &ino {
            let _ = i.watches().add(&dir, inotify::WatchMask::MOVED_TO | inotify::WatchMask::CLOSE_WRITE);
        }
        loop {
            let left = read(&lease).map_or(0, |d| d - monotonic_ms());
            if left <= 0 {
                *flag.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(
                    "killed: this node's lease with the control plane expired (the agent is gone or cut off), so the job may be run elsewhere"
                        .into(),
                );
                if let Some(pgid) = Pid::from_raw(job_pid) {
                    let _ = kill_process_group(pgid, Signal::KILL);
                }
                return;
            }
            match &ino {
                Some(i) => {
                    let wait = Duration::from_millis(left as u64);
                    let ts = Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
                    let mut fds = [PollFd::new(i, PollFlags::IN)];
                    let _ = poll(&mut fds, Some(&ts));
                    // Drain the events; the loop re-reads the file either way.
                    let mut buf = [0u8; 4096];
                    let _ = rustix::io::read(i, &mut buf);
                }
                None => std::thread::sleep(Duration::from_millis(left as u64)),
            }
        }
    });
    f
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn an_expired_lease_kills_the_job_and_a_renewed_one_does_not() {
        let dir = std::env::temp_dir().join(format!("gpool-lease-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let lease = dir.join("lease");
        // A renewed lease: the job outlives the first deadline.
        write(&lease, monotonic_ms() + 300).expect("write");
        let mut kept = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("spawn");
        let f = fence(lease.clone(), kept.id() as i32);
        write(&lease, monotonic_ms() + 60_000).expect("renew");
        // An expired one: the job is killed.
        let gone_lease = dir.join("gone");
        write(&gone_lease, monotonic_ms() + 200).expect("write");
        let mut gone = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("spawn");
        let g = fence(gone_lease, gone.id() as i32);
        let status = gone.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "SIGKILL");
        assert!(g.fenced().is_some_and(|w| w.contains("lease")));
        assert!(kept.try_wait().expect("try_wait").is_none(), "a renewed lease keeps the job");
        assert!(f.fenced().is_none());
        let _ = kept.kill();
        let _ = kept.wait();
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
