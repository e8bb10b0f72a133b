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
use std::sync::Arc;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::{FlockOperation, flock};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process, kill_process_group, pidfd_open};

use crate::node::account::{self, Account, RunAs};
use crate::node::claim::Claim;
use crate::node::devices::Passthrough;
use crate::node::job_dir;
use crate::node::pipeline_dir;
use crate::node::sampler::{ReplicaEntry, Replicas, SIM_LOAD_ENV, SIM_LOAD_FILE};
use crate::node::shim::{self, EXIT, LOCK, STATE, ShimState, read_json};
use crate::protocol::{AgentReport, ExitRecord, Found, Launch, ReplicaKey, log_path};

mod gpu_health;
mod images;

/// The environment every job starts from: the agent's own basics.
fn base_env() -> Vec<(String, String)> {
    ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "SHELL", "TMPDIR", "TZ"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Where an agent's reports go: the controller's channel (`gpool up`), or
/// the reporter that sends them to a remote control plane (`gpool agent`).
pub type ReportSink = Arc<dyn Fn(AgentReport) + Send + Sync>;

/// Settings of an agent.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Run directories and logs: `jobs/<id>/…` under it.
    pub data_dir: PathBuf,
    /// The `gpool` binary, for shims.
    pub exe: PathBuf,
    /// This node's name (`GPOOL_NODE`).
    pub node: String,
    /// The node's GPUs are simulated: jobs get `GPOOL_SIM_LOAD_FILE`.
    pub simulated: bool,
    /// The lease file shims watch (remote agents): a shim kills its job when
    /// the lease it names has expired. `None` for the agent inside `gpool up`.
    pub lease: Option<PathBuf>,
    /// Most bytes a replica's log file may hold; `None`: no limit.
    pub log_limit: Option<u64>,
    /// Whose account jobs run as (`account.rs`).
    pub run_as: RunAs,
    /// Where replicas' control groups go, when the node confines jobs (`cgroup.rs`).
    pub cgroups: Option<crate::node::cgroup::Hierarchy>,
    /// The device files each GPU and MIG instance of the node opens (`devices.rs`).
    pub device_files: crate::node::devices::DeviceFiles,
    /// The sampler thread, which owns the GPU backend: MIG layouts go
    /// through it. `None` on a node with no GPU backend.
    pub sampler: Option<std::sync::mpsc::Sender<crate::node::sampler::SamplerCtl>>,
    /// Checkpoints under `ROOT/job-<id>` on a shared file system, instead of the job's directory here.
    pub checkpoint_root: Option<PathBuf>,
    /// Podman or docker, for jobs that name an image (`container.rs`).
    pub container: Option<crate::node::container::Runtime>,
    /// The limit on images kept here (`image_cache.rs`), if there is one.
    pub image_cache: Option<std::sync::Arc<crate::node::image_cache::ImageCache>>,
    /// The program that checks quarantined GPUs, and its time limit (`agent/gpu_health.rs`).
    pub health_check: Option<(PathBuf, std::time::Duration)>,
}

/// The node agent.
pub struct Agent {
    cfg: AgentConfig,
    reports: ReportSink,
    /// Running replicas, shared with the telemetry sampler.
    replicas: Replicas,
    /// Unix accounts of recent jobs' users.
    accounts: account::Accounts,
    /// Images being pulled ahead (`prefetch`).
    prefetching: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// Images pulled with a user's registry login, and whose (`private_images.rs`).
    private_images: crate::node::private_images::PrivateImages,
    /// GPUs whose health check runs now (`agent/gpu_health.rs`): one at a time each.
    checking: Arc<std::sync::Mutex<std::collections::BTreeSet<u32>>>,
}

impl Agent {
    pub fn new(cfg: AgentConfig, reports: ReportSink, replicas: Replicas) -> Agent {
        let private_images = crate::node::private_images::PrivateImages::load(&cfg.data_dir);
        Agent {
            cfg,
            reports,
            replicas,
            accounts: account::Accounts::default(),
            prefetching: Arc::default(),
            private_images,
            checking: Arc::default(),
        }
    }

    /// Reports something on the agent's behalf (a start that failed before its shim ran).
    /// Lays MIG GPU `gpu` out as `layout`. The outcome comes back with the
    /// sampler's next report, or at once when the node cannot do it.
    pub fn mig_layout(&self, gpu: u32, layout: Vec<gpool_gpu::MigSlot>) {
        let ctl = crate::node::sampler::SamplerCtl::MigLayout { gpu, layout };
        if self.cfg.sampler.as_ref().is_some_and(|s| s.send(ctl).is_ok()) {
            return;
        }
        let at_ms = crate::node::clock::wall_ms();
        self.report(AgentReport::Telemetry(crate::protocol::NodeReport {
            node: self.cfg.node.clone(),
            at_ms,
            mig: Some(gpool_api::agent::MigOutcome {
                gpu,
                error: Some("this node has no GPU backend to lay out".into()),
                gpus: None,
            }),
            ..crate::protocol::NodeReport::default()
        }));
    }

    pub fn report(&self, r: AgentReport) {
        (self.reports)(r);
    }

    fn register(&self, key: ReplicaKey, devices: Vec<String>, declared_load: Option<String>) {
        let entry = ReplicaEntry { run_dir: self.run_dir(key), devices, declared_load };
        self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, entry);
    }

    pub fn job_dir(&self, job: u64) -> PathBuf {
        self.cfg.data_dir.join("jobs").join(job.to_string())
    }

    pub fn run_dir(&self, key: ReplicaKey) -> PathBuf {
        self.job_dir(key.job).join(format!("run-{}-{}", key.attempt, key.rank))
    }

    pub fn log_path(&self, job: u64, rank: u32, stream: &str) -> PathBuf {
        log_path(&self.cfg.data_dir, job, rank, stream)
    }

    pub fn checkpoint_dir(&self, job: u64) -> PathBuf {
        match &self.cfg.checkpoint_root {
            Some(root) => root.join(format!("job-{job}")),
            None => self.job_dir(job).join("checkpoint"),
        }
    }

    /// Profiles a replica for `seconds` in the background (`profiler.rs`);
    /// what it recorded is reported as [`AgentReport::Profiled`].
    pub fn profile(&self, key: ReplicaKey, order: crate::protocol::ProfileOrder) {
        let profile = order.profile;
        let entry = self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
        let (reports, node, sampler) = (self.reports.clone(), self.cfg.node.clone(), self.cfg.sampler.clone());
        let spawned = std::thread::Builder::new().name("profile".into()).spawn(move || {
            let capture = crate::node::profiler::capture(&node, entry, order, sampler.as_ref());
            reports(AgentReport::Profiled { key, profile, capture });
        });
        if let Err(e) = spawned {
            let capture = gpool_api::agent::ProfileCapture {
                error: Some(format!("cannot start a thread to profile: {e}")),
                ..Default::default()
            };
            (self.reports)(AgentReport::Profiled { key, profile, capture });
        }
    }

    /// Reports a replica that could not start here as ended at once, with `code` and why.
    fn fail_at_once(&self, key: ReplicaKey, code: i32, error: String) {
        (self.reports)(ended_at_once(key, code, error));
    }

    /// Starts a replica on `devices` (GPU or MIG UUIDs). Errors are about the
    /// agent's own files; a command that cannot run is reported as an exit
    /// with code 127 by the shim.
    pub fn start(&self, key: ReplicaKey, mut launch: Launch, devices: Vec<String>) -> std::io::Result<()> {
        let dir = self.run_dir(key);
        // One start per replica: the same start can arrive twice (from an old
        // session's poll and as the new session's resend) while the first
        // shim has not taken its lock yet; a second shim would run it twice.
        let Some(mut claim) = Claim::new(
            &self.replicas,
            key,
            ReplicaEntry { run_dir: dir.clone(), devices: devices.clone(), declared_load: None },
        ) else {
            (self.reports)(AgentReport::Running { key });
            return Ok(());
        };
        if dir.join(shim::STATE).exists() || dir.join(EXIT).exists() || shim::alive(&dir) {
            claim.release();
            // Started before (a command delivered twice): say what became of it instead.
            return match self.reconcile(key, devices) {
                Found::Adopted => {
                    (self.reports)(AgentReport::Running { key });
                    Ok(())
                }
                Found::Finished | Found::Lost => Ok(()),
            };
        }
        let account = match self.account_for(key, &launch) {
            Ok(a) => a,
            Err(refusal) => {
                (self.reports)(*refusal);
                return Ok(());
            }
        };
        let container = match (&launch.image, &self.cfg.container) {
            (None, _) => None,
            (Some(image), None) => {
                let error = format!(
                    "it runs in image {image}, and node {} has no container runtime: install podman (or docker) there, \
                     or submit it without --image",
                    self.cfg.node
                );
                self.fail_at_once(key, 127, error);
                return Ok(());
            }
            (Some(image), Some(rt)) => {
                let devices = if self.cfg.simulated {
                    Ok(Passthrough::Nothing)
                } else {
                    self.cfg.device_files.for_container(&devices)
                };
                match (rt.broken().map(String::from), devices) {
                    (None, Ok(p)) => Some((rt.clone(), p)),
                    (Some(why), _) | (None, Err(why)) => {
                        let error =
                            format!("it runs in image {image}, and node {} cannot run it: {why}", self.cfg.node);
                        self.fail_at_once(key, 125, error);
                        return Ok(());
                    }
                }
            }
        };
        // In a container the spec's working directory is the image's; the runtime's client runs in the run directory.
        let image_workdir =
            (container.is_some() && !launch.cwd.as_os_str().is_empty()).then(|| launch.cwd.display().to_string());
        if container.is_some() {
            launch.cwd = dir.clone();
        }
        // What only the node knows: its basics (unless the job set them), where things are on it.
        let mut env = base_env();
        if let Some(a) = &account {
            // The account's own, not the agent's (root's).
            env.retain(|(k, _)| !matches!(k.as_str(), "HOME" | "USER" | "LOGNAME"));
            env.push(("HOME".into(), a.home.display().to_string()));
            env.push(("USER".into(), a.name.clone()));
            env.push(("LOGNAME".into(), a.name.clone()));
        }
        env.retain(|(k, _)| !launch.env.iter().any(|(j, _)| j == k));
        env.append(&mut launch.env);
        launch.env = env;
        if launch.cwd.as_os_str().is_empty() {
            launch.cwd = account.as_ref().map_or_else(|| self.cfg.data_dir.clone(), |a| a.home.clone());
        }
        launch.env.push(("GPOOL_NODE".into(), self.cfg.node.clone()));
        launch.env.push((REPLICA_ENV.into(), self.replica_mark(key)));
        launch.env.push(("GPOOL_CHECKPOINT_DIR".into(), self.checkpoint_dir(key.job).display().to_string()));
        let shared = pipeline_dir::of(&launch.env, &self.cfg.data_dir, self.cfg.checkpoint_root.as_deref());
        // Its checkpoint directory and its pipeline run's (every stage of a run
        // is the same user's) are its account's, made without following links.
        let owner = account.as_ref().map(|a| (a.uid, a.gid));
        let in_data_dir = self.cfg.checkpoint_root.is_none();
        match job_dir::make_for_job(shared.as_deref(), in_data_dir, &dir, &self.checkpoint_dir(key.job), owner) {
            Ok(()) => {}
            // A link or someone else's directory where the job's should be: it fails, saying where.
            Err(job_dir::DirError::Refused(why)) => {
                claim.release();
                self.fail_at_once(
                    key,
                    126,
                    format!("cannot make the job's directories on node {}: {why}", self.cfg.node),
                );
                return Ok(());
            }
            // Out of descriptors, a full disk: the node's fault, so the start failed (requeued, node held).
            Err(job_dir::DirError::Node(e)) => return Err(e),
        }
        if let Some(d) = &shared {
            launch.env.push((pipeline_dir::DIR_ENV.into(), d.display().to_string()));
        }
        let request = dir.join(crate::node::profiler::REQUEST_FILE);
        launch.env.push((crate::node::profiler::REQUEST_ENV.into(), request.display().to_string()));
        if self.cfg.simulated {
            launch.env.push(("GPOOL_SIM_LOAD_FILE".into(), dir.join(SIM_LOAD_FILE).display().to_string()));
        }
        launch.lease.clone_from(&self.cfg.lease);
        launch.log_limit = self.cfg.log_limit;
        let declared = launch.env.iter().find(|(k, _)| k == SIM_LOAD_ENV).map(|(_, v)| v.clone());
        launch.stdout = self.log_path(key.job, key.rank, "stdout");
        launch.stderr = self.log_path(key.job, key.rank, "stderr");
        for p in [&launch.stdout, &launch.stderr] {
            let mut f = OpenOptions::new().create(true).append(true).open(p)?;
            if key.attempt > 1 {
                writeln!(f, "== gpool: attempt {} of job {} starts (rank {})", key.attempt, key.job, key.rank)?;
            }
        }
        if let Some(a) = &account {
            self.hand_over(key, a, &launch)?;
            if container.is_none() {
                launch.run_as = Some(account::ids(a));
            }
        }
        if let Some((rt, passthrough)) = &container {
            crate::node::container_env::number_inside(&mut launch, passthrough);
            let name = format!("gpool-{}-{}-{}-{:08x}", key.job, key.attempt, key.rank, self.dir_hash());
            let auth_dir = match &launch.registry_auth {
                Some(secret) => Some(crate::node::container::write_auth(&dir, &secret.0)?),
                None => None,
            };
            let env_file = crate::node::container_env::write_env_file(&dir, &launch)?;
            let job = crate::node::container::ContainerJob {
                name: &name,
                job: key.job,
                devices: &devices,
                user: account.as_ref().map(|a| (a.uid, a.gid)),
                checkpoint: &self.checkpoint_dir(key.job),
                shared: shared.as_deref(),
                workdir: image_workdir.as_deref(),
                passthrough,
                auth_dir: auth_dir.as_deref(),
                env_file: Some(&env_file),
                pull_always: launch.image.as_deref().is_some_and(|i| {
                    self.private_images.must_pull(i, launch.user.as_deref(), launch.registry_auth.is_some())
                }),
            };
            launch.pull = rt.pull_steps(&launch, auth_dir.as_deref(), job.pull_always);
            launch.argv = rt.wrap(&launch, &job);
            crate::node::container::remember(&dir, rt, &name, launch.image.as_deref().unwrap_or(""))?;
            if let (Some(cache), Some(image)) = (&self.cfg.image_cache, &launch.image) {
                self.keep_cache(cache.clone(), image.clone());
            }
        }
        if let Some(layout) = &self.cfg.cgroups {
            // Every GPU and MIG file of the node that none of the replica's devices opens.
            let deny = self.cfg.device_files.deny_for(&devices);
            // Unique on the machine, which may host several agents (tests, chaos runs): their data directories differ.
            let dir_hash = self.dir_hash();
            let node: String = self
                .cfg
                .node
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
                .collect();
            let name = format!("{node}-{}", replica_mark(dir_hash, key));
            launch.confine = Some(layout.confine(name, launch.cpus_milli, launch.memory_mb, deny));
        }
        let spec = serde_json::to_vec(&launch).map_err(std::io::Error::other)?;
        let log = OpenOptions::new().create(true).append(true).open(&launch.stderr)?;
        let mut child = shim::spawn(&self.cfg.exe, &dir, &spec, log)?;
        self.register(key, devices, declared);
        claim.keep();
        (self.reports)(AgentReport::Running { key });
        let reports = self.reports.clone();
        let replicas = self.replicas.clone();
        let mark = self.replica_mark(key);
        std::thread::Builder::new().name(format!("wait-{}-{}", key.job, key.rank)).spawn(move || {
            let status = child.wait();
            report_end(
                &reports,
                &replicas,
                key,
                &dir,
                &mark,
                status.map(|s| format!("shim ended with {s}")).unwrap_or_else(|e| e.to_string()),
            );
        })?;
        Ok(())
    }

    /// What marks a replica's processes as its own, in their environment
    /// ([`REPLICA_ENV`]): unique on the machine, which may host several
    /// agents (tests, chaos runs, two daemons) whose job ids repeat.
    fn replica_mark(&self, key: ReplicaKey) -> String {
        replica_mark(self.dir_hash(), key)
    }

    /// A hash of the data directory: names unique on a machine that hosts several agents (tests, chaos runs).
    fn dir_hash(&self) -> u32 {
        self.cfg
            .data_dir
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)) as u32
    }

    /// The account a replica runs as: `None` for the agent's own (single-user
    /// mode, or a job with no user); a report that fails the job when its
    /// user has no account here.
    fn account_for(&self, key: ReplicaKey, launch: &Launch) -> Result<Option<Account>, Box<AgentReport>> {
        let (RunAs::User, Some(name)) = (self.cfg.run_as, launch.user.as_deref()) else { return Ok(None) };
        let fail = |error: String| Box::new(ended_at_once(key, 127, error));
        match self.accounts.lookup(name) {
            Ok(Some(a)) => Ok(Some(a)),
            Ok(None) => Err(fail(format!(
                "user {name} has no Unix account on node {} (jobs run as their submitter's account there): \
                 create it, or map the token to an existing account",
                self.cfg.node
            ))),
            Err(e) => Err(fail(format!("cannot look up the account of {name} on node {}: {e:#}", self.cfg.node))),
        }
    }

    /// Gives a replica's files to its account: its logs become its own
    /// (0600; its checkpoint directory was made its own, 0700); the job's directory stays
    /// root's, 0711, so that it can reach them and plant nothing beside the
    /// shim's records.
    fn hand_over(&self, key: ReplicaKey, a: &Account, launch: &Launch) -> std::io::Result<()> {
        use std::os::unix::fs::{PermissionsExt, chown};
        let set = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        set(&self.job_dir(key.job), 0o711)?;
        for log in [&launch.stdout, &launch.stderr] {
            chown(log, Some(a.uid), Some(a.gid))?;
            set(log, 0o600)?;
        }
        // The shim's directory is traversable (0711) but not listable: the job
        // reads its profile request there by name (profiler.rs), and writes
        // its simulated load.
        let run = self.run_dir(key);
        set(&run, 0o711)?;
        if self.cfg.simulated {
            let load = run.join(SIM_LOAD_FILE);
            OpenOptions::new().create(true).truncate(false).write(true).open(&load)?;
            chown(&load, Some(a.uid), Some(a.gid))?;
        }
        Ok(())
    }

    /// Kills a replica that must not run (an old allocation): its process group
    /// and anything else carrying its identity.
    pub fn kill(&self, key: ReplicaKey) {
        // A shim that has not started its job yet finds the mark and does not
        // start it (it looks again once the job runs, so one of the two sees the other).
        let dir = self.run_dir(key);
        if dir.is_dir() && !dir.join(EXIT).exists() {
            let _ = std::fs::write(dir.join(shim::ABANDONED), b"killed by the control plane\n");
        }
        self.signal(key, Signal::KILL);
        kill_strays(&self.replica_mark(key));
    }

    /// Replicas whose shims are alive in this agent's data directory (a shim
    /// holds its replica's lock for its whole life), e.g. after the agent restarted.
    pub fn live_replicas(&self) -> Vec<ReplicaKey> {
        let Ok(jobs) = std::fs::read_dir(self.cfg.data_dir.join("jobs")) else { return Vec::new() };
        let mut out = Vec::new();
        for job in jobs.filter_map(Result::ok) {
            let Some(id) = job.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
            let Ok(runs) = std::fs::read_dir(job.path()) else { continue };
            for run in runs.filter_map(Result::ok) {
                let name = run.file_name();
                let Some((a, r)) = name.to_str().and_then(|n| n.strip_prefix("run-")).and_then(|n| n.split_once('-'))
                else {
                    continue;
                };
                let (Ok(attempt), Ok(rank)) = (a.parse::<u32>(), r.parse::<u32>()) else { continue };
                if !run.path().join(EXIT).exists() && shim::alive(&run.path()) {
                    out.push(ReplicaKey { job: id, attempt, rank });
                }
            }
        }
        // And those being started, whose shims may not hold their locks yet.
        out.extend(self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().copied());
        out.sort();
        out.dedup();
        out
    }

    /// Sends `sig` to a replica's process group. Missing state (not started yet, gone) is not an error.
    pub fn signal(&self, key: ReplicaKey, sig: Signal) {
        let dir = self.run_dir(key);
        // A shim that has not written shim.json yet sends the signal itself
        // once it has (it looks after writing it, and this looks after
        // leaving the mark, so one of the two sees the other).
        if dir.is_dir() && !dir.join(EXIT).exists() && !dir.join(STATE).exists() {
            let _ = std::fs::write(dir.join(shim::SIGNALED), format!("{}\n", sig.as_raw()));
        }
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
        let mark = self.replica_mark(key);
        if dir.join(EXIT).exists() {
            report_end(&self.reports, &self.replicas, key, &dir, &mark, String::new());
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
            let mark = mark.clone();
            let spawned =
                std::thread::Builder::new().name(format!("adopt-{}-{}", key.job, key.rank)).spawn(move || {
                    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                    while poll(&mut fds, None).is_err() {}
                    report_end(&reports, &replicas, key, &watched, &mark, "shim ended".into());
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
            kill_strays(&mark);
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
            report_end(&reports, &replicas, key, &dir, &mark, "shim ended".into());
        });
        Found::Adopted
    }
}

/// Reads the exit record of an ended shim and reports it.
fn report_end(reports: &ReportSink, replicas: &Replicas, key: ReplicaKey, dir: &Path, mark: &str, context: String) {
    crate::node::container::remove(dir);
    replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
    let report = match read_json::<ExitRecord>(&dir.join(EXIT)) {
        Some(exit) => AgentReport::Exited { key, exit },
        None => {
            kill_strays(mark);
            AgentReport::Lost { key, why: format!("the shim left no exit record ({context})") }
        }
    };
    reports(report);
}

/// Kills processes whose environment marks them as this replica's (those that left its process
/// group and outlived its shim); never by job id alone: other agents here may run the same ids.
fn kill_strays(mark: &str) {
    for pid in shim::pids_with_env(REPLICA_ENV, mark) {
        if let Some(p) = Pid::from_raw(pid) {
            let _ = kill_process(p, Signal::KILL);
        }
    }
}

/// A replica that could not start, reported as ended at once with `code` and why.
fn ended_at_once(key: ReplicaKey, code: i32, error: String) -> AgentReport {
    let (now, error) = (crate::node::clock::wall_ms(), Some(error));
    let exit = ExitRecord { code: Some(code), signal: None, started_ms: now, ended_ms: now, error, fenced: false };
    AgentReport::Exited { key, exit }
}

/// The environment variable that carries a replica's [`replica_mark`].
pub const REPLICA_ENV: &str = "GPOOL_REPLICA";

fn replica_mark(dir_hash: u32, key: ReplicaKey) -> String {
    format!("{dir_hash:08x}-{}-{}-{}", key.job, key.attempt, key.rank)
}
