//! The node agent: runs job replicas through shims and reports what happens.
//!
//! `gpool up` has one local agent in-process; it talks to the controller only
//! through [`AgentReport`]s on the controller's event channel, the seam a
//! remote agent will use.
//!
//! Layout under the data directory, per job:
//! `jobs/<id>/rank<r>.out|.err` (logs, appended across attempts),
//! `jobs/<id>/checkpoint/` (`GPOOL_CHECKPOINT_DIR`, kept across attempts),
//! `jobs/<id>/run-<attempt>-<rank>/` (the shim's state, exit and lock files).
//! The launch spec goes to the shim on its standard input, and the shim's own
//! complaints go to the replica's stderr log, where users look: few files per
//! job, because creating inodes is most of what starting a job costs.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::{FlockOperation, flock};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process, kill_process_group, pidfd_open};

use crate::sampler::{ReplicaEntry, Replicas, SIM_LOAD_ENV, SIM_LOAD_FILE};
use crate::shim::{self, EXIT, ExitRecord, LOCK, Launch, STATE, ShimState, read_json};
use crate::telemetry::NodeReport;

/// A replica, identified across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaKey {
    pub job: u64,
    pub attempt: u32,
    pub rank: u32,
}

/// What the agent tells the controller.
#[derive(Debug)]
pub enum AgentReport {
    /// The replica's process tree is gone; how it ended.
    Exited { key: ReplicaKey, exit: ExitRecord },
    /// The replica's shim disappeared without a record (killed, machine reboot).
    Lost { key: ReplicaKey, why: String },
    /// What the node's devices and replicas are doing.
    Telemetry(NodeReport),
}

/// What a restarted agent found for a replica it was told is running.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The shim is alive and now watched again.
    Adopted,
    /// The replica finished while nobody watched; its exit record follows as a report.
    Finished,
    /// Neither: nothing runs it (stray processes were killed); it must be requeued.
    Lost,
}

/// The local agent.
pub struct Agent {
    data_dir: PathBuf,
    exe: PathBuf,
    reports: Sender<crate::controller::Event>,
    /// Running replicas, shared with the telemetry sampler.
    replicas: Replicas,
    /// The node's GPUs are simulated: jobs get `GPOOL_SIM_LOAD_FILE`.
    simulated: bool,
}

impl Agent {
    pub fn new(
        data_dir: &Path,
        exe: PathBuf,
        reports: Sender<crate::controller::Event>,
        replicas: Replicas,
        simulated: bool,
    ) -> Agent {
        Agent { data_dir: data_dir.to_path_buf(), exe, reports, replicas, simulated }
    }

    fn register(&self, key: ReplicaKey, devices: Vec<String>, declared_load: Option<String>) {
        let entry = ReplicaEntry { run_dir: self.run_dir(key), devices, declared_load };
        self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, entry);
    }

    pub fn job_dir(&self, job: u64) -> PathBuf {
        self.data_dir.join("jobs").join(job.to_string())
    }

    pub fn run_dir(&self, key: ReplicaKey) -> PathBuf {
        self.job_dir(key.job).join(format!("run-{}-{}", key.attempt, key.rank))
    }

    pub fn log_path(&self, job: u64, rank: u32, stream: &str) -> PathBuf {
        self.job_dir(job).join(format!("rank{rank}.{}", if stream == "stderr" { "err" } else { "out" }))
    }

    pub fn checkpoint_dir(&self, job: u64) -> PathBuf {
        self.job_dir(job).join("checkpoint")
    }

    /// Starts a replica on `devices` (GPU or MIG UUIDs). Errors are about the
    /// agent's own files; a command that cannot run is reported as an exit
    /// with code 127 by the shim.
    pub fn start(&self, key: ReplicaKey, mut launch: Launch, devices: Vec<String>) -> std::io::Result<()> {
        let dir = self.run_dir(key);
        if self.simulated {
            launch.env.push(("GPOOL_SIM_LOAD_FILE".into(), dir.join(SIM_LOAD_FILE).display().to_string()));
        }
        let declared = launch.env.iter().find(|(k, _)| k == SIM_LOAD_ENV).map(|(_, v)| v.clone());
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(self.checkpoint_dir(key.job))?;
        launch.stdout = self.log_path(key.job, key.rank, "stdout");
        launch.stderr = self.log_path(key.job, key.rank, "stderr");
        for p in [&launch.stdout, &launch.stderr] {
            let mut f = OpenOptions::new().create(true).append(true).open(p)?;
            if key.attempt > 1 {
                writeln!(f, "== gpool: attempt {} of job {} starts (rank {})", key.attempt, key.job, key.rank)?;
            }
        }
        let spec = serde_json::to_vec(&launch).map_err(std::io::Error::other)?;
        let log = OpenOptions::new().create(true).append(true).open(&launch.stderr)?;
        let mut child = Command::new(&self.exe)
            .arg("shim")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            // A shim that dies before reading reports itself through its exit record or its absence.
            let _ = stdin.write_all(&spec);
        }
        self.register(key, devices, declared);
        let reports = self.reports.clone();
        let replicas = self.replicas.clone();
        std::thread::Builder::new().name(format!("wait-{}-{}", key.job, key.rank)).spawn(move || {
            let status = child.wait();
            report_end(
                &reports,
                &replicas,
                key,
                &dir,
                status.map(|s| format!("shim ended with {s}")).unwrap_or_else(|e| e.to_string()),
            );
        })?;
        Ok(())
    }

    /// Sends `sig` to a replica's process group. Missing state (not started yet, gone) is not an error.
    pub fn signal(&self, key: ReplicaKey, sig: Signal) {
        let dir = self.run_dir(key);
        if let Some(st) = read_json::<ShimState>(&dir.join(STATE))
            && let Some(pgid) = Pid::from_raw(st.job_pid)
        {
            let _ = kill_process_group(pgid, sig);
        }
    }

    /// After a daemon restart: finds out what became of a replica the store
    /// says runs on `devices`.
    pub fn reconcile(&self, key: ReplicaKey, devices: Vec<String>) -> Found {
        let dir = self.run_dir(key);
        if dir.join(EXIT).exists() {
            report_end(&self.reports, &self.replicas, key, &dir, String::new());
            return Found::Finished;
        }
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK));
        let alive = match &lock {
            Ok(f) => flock(f, FlockOperation::NonBlockingLockExclusive).is_err(),
            Err(_) => false,
        };
        if alive
            && let Some(st) = read_json::<ShimState>(&dir.join(STATE))
            && let Some(pid) = Pid::from_raw(st.shim_pid)
            && let Ok(fd) = pidfd_open(pid, PidfdFlags::empty())
        {
            self.register(key, devices.clone(), None);
            let reports = self.reports.clone();
            let replicas = self.replicas.clone();
            let watched = dir.clone();
            let spawned =
                std::thread::Builder::new().name(format!("adopt-{}-{}", key.job, key.rank)).spawn(move || {
                    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                    while poll(&mut fds, None).is_err() {}
                    report_end(&reports, &replicas, key, &watched, "shim ended".into());
                });
            if spawned.is_ok() {
                return Found::Adopted;
            }
        }
        // Nothing holds the replica: mark it abandoned while we hold the lock (a
        // shim that starts late sees the mark and does nothing), and kill strays
        // that still carry its identity.
        if !alive || lock.is_err() {
            if lock.is_ok() {
                let _ = std::fs::write(dir.join(shim::ABANDONED), b"requeued by a restarted daemon\n");
            }
            kill_strays(key);
            return Found::Lost;
        }
        // The lock is held but the shim cannot be watched: wait for the lock in a thread.
        self.register(key, devices, None);
        let reports = self.reports.clone();
        let replicas = self.replicas.clone();
        let _ = std::thread::Builder::new().name(format!("lockwait-{}-{}", key.job, key.rank)).spawn(move || {
            if let Ok(f) = lock {
                let _ = flock(&f, FlockOperation::LockExclusive);
            }
            report_end(&reports, &replicas, key, &dir, "shim ended".into());
        });
        Found::Adopted
    }
}

/// Reads the exit record of an ended shim and reports it.
fn report_end(
    reports: &Sender<crate::controller::Event>,
    replicas: &Replicas,
    key: ReplicaKey,
    dir: &Path,
    context: String,
) {
    replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
    let report = match read_json::<ExitRecord>(&dir.join(EXIT)) {
        Some(exit) => AgentReport::Exited { key, exit },
        None => {
            kill_strays(key);
            AgentReport::Lost { key, why: format!("the shim left no exit record ({context})") }
        }
    };
    let _ = reports.send(crate::controller::Event::Agent(report));
}

/// Kills processes whose environment marks them as this replica's.
fn kill_strays(key: ReplicaKey) {
    let job = key.job.to_string();
    let attempt = key.attempt.to_string();
    for pid in shim::pids_with_env("GPOOL_JOB_ID", &job) {
        let same_attempt = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|e| e.split(|b| *b == 0).any(|kv| kv == format!("GPOOL_ATTEMPT={attempt}").as_bytes()))
            .unwrap_or(false);
        if same_attempt && let Some(p) = Pid::from_raw(pid) {
            let _ = kill_process(p, Signal::KILL);
        }
    }
}

/// A signal by name (`SIGTERM`, `TERM`, `15`).
pub fn parse_signal(s: &str) -> Option<Signal> {
    let t = s.trim().to_ascii_uppercase();
    let name = t.strip_prefix("SIG").unwrap_or(&t);
    let sig = match name {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        "HUP" => Signal::HUP,
        "QUIT" => Signal::QUIT,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "KILL" => Signal::KILL,
        n => return n.parse::<i32>().ok().and_then(Signal::from_named_raw),
    };
    Some(sig)
}
