//! The agent's telemetry sampler: every interval (default 5 s) it reads the
//! device backend and the CPU time of each replica's processes, maps GPU
//! processes to jobs by pid, and sends one [`NodeReport`] to the controller.
//!
//! The replicas it measures come from the agent's [`Replicas`] table, which
//! the agent updates as replicas start and end (the lock is held only to
//! copy or change an entry, never across I/O).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpool_gpu::Backend;
use gpool_gpu::simulated::SimLoad;

use crate::node::clock::wall_ms as now_ms;
use crate::node::shim::{STATE, ShimState, read_json};
use crate::protocol::{NodeReport, ReplicaKey};

/// The file a job on a simulated GPU writes to say what it does: a line such
/// as `util=35 mem=30000` (utilisation in percent, memory in MiB). The last
/// line counts. Its path is in the job's `GPOOL_SIM_LOAD_FILE`.
pub const SIM_LOAD_FILE: &str = "gpu-load";
/// The same, declared once in the job's environment: `GPOOL_SIM_LOAD="util=90 mem=70000"`.
pub const SIM_LOAD_ENV: &str = "GPOOL_SIM_LOAD";

/// A running replica as the sampler sees it.
#[derive(Clone, Debug, Default)]
pub struct ReplicaEntry {
    pub run_dir: PathBuf,
    /// UUIDs of its GPUs or MIG instances.
    pub devices: Vec<String>,
    /// The load it declares in its environment (`GPOOL_SIM_LOAD`), if any.
    pub declared_load: Option<String>,
}

/// The agent's table of running replicas, shared with the sampler.
pub type Replicas = Arc<Mutex<BTreeMap<ReplicaKey, ReplicaEntry>>>;

/// Parses `util=35 mem=30000` (memory in MiB, or with a `GiB`/`MiB` suffix).
pub fn parse_sim_load(s: &str) -> Option<SimLoad> {
    let line = s.lines().rev().find(|l| !l.trim().is_empty())?;
    let mut load = SimLoad::default();
    let mut any = false;
    for kv in line.split([' ', ',', '\t']).filter(|x| !x.is_empty()) {
        let (k, v) = kv.split_once('=')?;
        match k.trim() {
            "util" => load.gpu_util_pct = v.trim().trim_end_matches('%').parse().ok()?,
            "mem" => {
                let v = v.trim();
                load.memory_used_mb = if let Some(g) = v.strip_suffix("GiB") {
                    (g.parse::<f64>().ok()? * 1024.0) as u64
                } else {
                    v.strip_suffix("MiB").unwrap_or(v).parse().ok()?
                };
            }
            _ => return None,
        }
        any = true;
    }
    any.then_some(load)
}

fn lock(r: &Replicas) -> std::sync::MutexGuard<'_, BTreeMap<ReplicaKey, ReplicaEntry>> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The load source of a simulated backend: each device's load is what the
/// replica holding it declares (its load file, else its environment).
pub fn sim_loads(replicas: Replicas) -> gpool_gpu::simulated::LoadSource {
    Box::new(move |uuid: &str| {
        // Every replica on the device: several when jobs share it. Their
        // utilisation adds up (to 100 % at most), each process keeps its memory.
        let entries: Vec<ReplicaEntry> =
            lock(&replicas).values().filter(|e| e.devices.iter().any(|d| d == uuid)).cloned().collect();
        if entries.is_empty() {
            return None;
        }
        let mut load = SimLoad::default();
        for entry in &entries {
            let declared = std::fs::read_to_string(entry.run_dir.join(SIM_LOAD_FILE))
                .ok()
                .and_then(|s| parse_sim_load(&s))
                .or_else(|| entry.declared_load.as_deref().and_then(parse_sim_load))
                .unwrap_or_default();
            load.gpu_util_pct = (load.gpu_util_pct + declared.gpu_util_pct).min(100.0);
            load.memory_used_mb += declared.memory_used_mb;
            if let Some(st) = read_json::<ShimState>(&entry.run_dir.join(STATE)) {
                load.pids.push(st.job_pid as u32);
                load.pid_memory_mb.push(declared.memory_used_mb);
                load.pid_util_pct.push(declared.gpu_util_pct);
            }
        }
        Some(load)
    })
}

/// One process as /proc shows it.
struct Proc {
    pid: u32,
    session: i32,
    /// utime + stime + cutime + cstime, in clock ticks.
    ticks: u64,
}

fn read_procs() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
            let field = |i: usize| rest.get(i).and_then(|x| x.parse::<i64>().ok());
            let ticks = [11, 12, 13, 14].iter().filter_map(|i| field(*i)).map(|t| t.max(0) as u64).sum();
            Some(Proc { pid, session: field(3)? as i32, ticks })
        })
        .collect()
}

/// Samples a node until `stop` is dropped or sent to.
pub struct Sampler {
    pub node: String,
    pub backend: Box<dyn Backend>,
    pub interval: Duration,
    pub replicas: Replicas,
    /// CPU ticks per replica at the previous sample.
    prev: BTreeMap<ReplicaKey, (Instant, u64)>,
    ticks_per_sec: f64,
    /// The data directory and the free space under which the node takes no new work.
    disk: Option<(PathBuf, u64)>,
    /// The backend's failed sub-queries already logged (at start-up, or since).
    degraded: Vec<gpool_gpu::Degraded>,
}

/// Why a node should take no new work: its data directory's file system
/// has less than `reserve` bytes free for it (logs, run directories).
pub fn disk_condition(dir: &std::path::Path, reserve: u64) -> Option<String> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    (free < reserve).then(|| {
        format!(
            "disk: {} MiB free in {}, under the {} MiB reserve (--disk-reserve): no new jobs start here",
            free >> 20,
            dir.display(),
            reserve >> 20
        )
    })
}

impl Sampler {
    pub fn new(node: String, backend: Box<dyn Backend>, interval: Duration, replicas: Replicas) -> Sampler {
        let backend_degraded = backend.degraded();
        Sampler {
            node,
            backend,
            interval,
            replicas,
            prev: BTreeMap::new(),
            ticks_per_sec: rustix::param::clock_ticks_per_second() as f64,
            disk: None,
            degraded: backend_degraded,
        }
    }

    /// Also watches the free space of `dir` against `reserve` bytes.
    pub fn with_disk(mut self, dir: PathBuf, reserve: u64) -> Sampler {
        self.disk = Some((dir, reserve));
        self
    }

    /// Reads everything once.
    pub fn sample(&mut self) -> NodeReport {
        let at_ms = now_ms();
        let (gpus, error) = match self.backend.sample() {
            Ok(g) => (g, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        // A sub-query that stopped answering while the rest do: said once.
        for d in self.backend.degraded() {
            if !self.degraded.contains(&d) {
                tracing::warn!("{d}");
                self.degraded.push(d);
            }
        }
        let replicas: Vec<(ReplicaKey, PathBuf)> =
            lock(&self.replicas).iter().map(|(k, e)| (*k, e.run_dir.clone())).collect();
        // Replicas by the session of their shim.
        let mut by_session: BTreeMap<i32, ReplicaKey> = BTreeMap::new();
        for (key, dir) in &replicas {
            if let Some(st) = read_json::<ShimState>(&dir.join(STATE)) {
                by_session.insert(st.shim_pid, *key);
            }
        }
        let procs = read_procs();
        let mut ticks: BTreeMap<ReplicaKey, u64> = BTreeMap::new();
        let mut pid_jobs: BTreeMap<u32, u64> = BTreeMap::new();
        for p in &procs {
            if let Some(key) = by_session.get(&p.session) {
                *ticks.entry(*key).or_default() += p.ticks;
                pid_jobs.insert(p.pid, key.job);
            }
        }
        // GPU processes outside a replica's session (they left it with setsid): ask their environment.
        for s in &gpus {
            for gp in &s.processes {
                if !pid_jobs.contains_key(&gp.pid)
                    && let Some(job) = env_job(gp.pid)
                {
                    pid_jobs.insert(gp.pid, job);
                }
            }
        }
        let now = Instant::now();
        let mut usage = Vec::new();
        for (key, t) in &ticks {
            if let Some((then, before)) = self.prev.get(key) {
                let secs = now.duration_since(*then).as_secs_f64();
                if secs > 0.0 && *t >= *before {
                    usage.push((*key, (*t - *before) as f64 / self.ticks_per_sec / secs));
                }
            }
        }
        self.prev = ticks.into_iter().map(|(k, t)| (k, (now, t))).collect();
        let conditions =
            self.disk.as_ref().and_then(|(dir, reserve)| disk_condition(dir, *reserve)).into_iter().collect();
        let pulling =
            replicas.iter().filter_map(|(k, dir)| crate::node::pull::progress(dir, at_ms).map(|p| (*k, p))).collect();
        NodeReport {
            node: self.node.clone(),
            at_ms,
            gpus,
            replicas: usage,
            pid_jobs,
            error,
            conditions,
            mig: None,
            pulling,
            health: Vec::new(),
        }
    }

    /// Lays a MIG GPU out, then reads the GPUs again: the outcome travels
    /// with the next report, the inventory as it really is, whatever happened.
    fn apply_mig(&mut self, gpu: u32, layout: &[gpool_gpu::MigSlot]) -> gpool_api::agent::MigOutcome {
        let applied = self.backend.apply_mig_layout(gpu, layout);
        let gpus = self.backend.inventory();
        let error = match (applied, &gpus) {
            (Err(e), _) => Some(e.to_string()),
            (Ok(()), Err(e)) => Some(format!("applied, but the GPUs cannot be read again: {e}")),
            (Ok(()), Ok(_)) => None,
        };
        gpool_api::agent::MigOutcome { gpu, error, gpus: gpus.ok().map(|g| crate::protocol::gpus_to_wire(&g)) }
    }

    /// Samples every interval and sends each report, and carries out what
    /// `ctl` asks of the GPUs, until every sender of `ctl` is gone. While a
    /// profile runs, its devices are also read every [`BURST_EVERY`].
    pub fn run(mut self, send: impl Fn(NodeReport) -> bool, ctl: Receiver<SamplerCtl>) {
        let mut mig = None;
        let mut bursts: Vec<Burst> = Vec::new();
        let mut next_full = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_full {
                let mut report = self.sample();
                report.mig = mig.take();
                if !send(report) {
                    return;
                }
                next_full = now + self.interval;
            }
            if bursts.iter().any(|b| now >= b.next) {
                self.read_bursts(&mut bursts, now);
            }
            let wake = bursts.iter().map(|b| b.next).chain([next_full]).min().unwrap_or(next_full);
            match ctl.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(SamplerCtl::MigLayout { gpu, layout }) => mig = Some(self.apply_mig(gpu, &layout)),
                Ok(SamplerCtl::Fault { gpu, fault }) => {
                    if let Err(e) = self.backend.inject_fault(gpu, fault.as_ref()) {
                        tracing::warn!("GPU {gpu}: {e}");
                    }
                }
                Ok(SamplerCtl::Burst { devices, seconds, reply }) => {
                    let inventory = self.backend.inventory().unwrap_or_default();
                    let targets = devices.into_iter().map(|d| Target::resolve(&inventory, d)).collect();
                    let now = Instant::now();
                    bursts.push(Burst {
                        targets,
                        began: now,
                        until: now + seconds,
                        next: now,
                        readings: Vec::new(),
                        reply,
                    });
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Reads the devices of every burst that is due (one backend read for
    /// all), and hands finished bursts their readings.
    fn read_bursts(&mut self, bursts: &mut Vec<Burst>, now: Instant) {
        let gpus = self.backend.sample().unwrap_or_default();
        for b in bursts.iter_mut().filter(|b| now >= b.next) {
            let t_ms = now.saturating_duration_since(b.began).as_millis() as u64;
            b.readings.extend(b.targets.iter().filter_map(|t| t.reading(&gpus, t_ms)));
            b.next += BURST_EVERY;
        }
        for b in bursts.extract_if(.., |b| now >= b.until) {
            let _ = b.reply.send(b.readings);
        }
    }
}

/// How often a profile reads its devices.
pub const BURST_EVERY: Duration = Duration::from_millis(100);

/// A profile's fast sampling of some devices.
struct Burst {
    targets: Vec<Target>,
    began: Instant,
    until: Instant,
    next: Instant,
    readings: Vec<gpool_api::agent::DeviceReading>,
    reply: Sender<Vec<gpool_api::agent::DeviceReading>>,
}

/// A device a profile reads: a GPU, or a MIG instance of one.
struct Target {
    device: String,
    gpu: String,
    /// A MIG instance: its (GPU instance, compute instance) where known;
    /// `Some(None)`: a MIG instance whose ids could not be read.
    mig: Option<Option<(u32, Option<u32>)>>,
}

impl Target {
    fn resolve(gpus: &[gpool_gpu::GpuInfo], device: String) -> Target {
        for g in gpus {
            if g.uuid == device {
                return Target { gpu: g.uuid.clone(), device, mig: None };
            }
            if let Some(m) = g.mig.iter().flatten().find(|m| m.uuid == device) {
                let ids = m.gi_id.map(|gi| (gi, m.ci_id));
                return Target { gpu: g.uuid.clone(), device, mig: Some(ids) };
            }
        }
        Target { gpu: device.clone(), device, mig: None }
    }

    /// Its reading: a MIG instance has its GPU's utilisation (all the
    /// driver reports) and its own memory.
    fn reading(&self, gpus: &[gpool_gpu::GpuSample], t_ms: u64) -> Option<gpool_api::agent::DeviceReading> {
        let g = gpus.iter().find(|g| g.uuid == self.gpu)?;
        let memory_used_mb = match self.mig {
            None => g.memory_used_mb,
            Some(None) => None,
            Some(Some((gi, ci))) => {
                g.mig.iter().find(|m| m.gi_id == gi && (ci.is_none() || m.ci_id == ci)).and_then(|m| m.memory_used_mb)
            }
        };
        Some(gpool_api::agent::DeviceReading {
            t_ms,
            device: self.device.clone(),
            util_pct: g.gpu_util_pct?,
            memory_used_mb,
        })
    }
}

/// What the sampler thread, which owns the GPU backend, is asked to do.
#[derive(Debug)]
pub enum SamplerCtl {
    /// Lay MIG GPU `gpu` out as `layout` (`Backend::apply_mig_layout`).
    MigLayout { gpu: u32, layout: Vec<gpool_gpu::MigSlot> },
    /// Show (or clear) a fault on a simulated GPU (`Backend::inject_fault`).
    Fault { gpu: u32, fault: Option<gpool_gpu::InjectedFault> },
    /// Read `devices` every [`BURST_EVERY`] for `seconds`, then send what was read.
    Burst { devices: Vec<String>, seconds: Duration, reply: Sender<Vec<gpool_api::agent::DeviceReading>> },
}

/// The job a process belongs to, from its environment.
fn env_job(pid: u32) -> Option<u64> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| std::str::from_utf8(kv).ok()?.strip_prefix("GPOOL_JOB_ID=")?.parse().ok())
}

/// Starts the sampler thread, handing each report to `send` (which says
/// whether to go on); it stops when every clone of the returned sender is dropped.
pub fn spawn(
    sampler: Sampler,
    send: impl Fn(NodeReport) -> bool + Send + 'static,
) -> std::io::Result<Sender<SamplerCtl>> {
    let (ctl_tx, ctl_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("sampler".into()).spawn(move || sampler.run(send, ctl_rx))?;
    Ok(ctl_tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_under_its_reserve_is_a_condition() {
        let dir = std::env::temp_dir();
        let c = disk_condition(&dir, u64::MAX).expect("no disk has that much free");
        assert!(c.contains("under the") && c.contains("--disk-reserve"), "{c}");
        assert_eq!(disk_condition(&dir, 0), None);
    }

    #[test]
    fn declared_loads_parse_and_bad_ones_are_ignored() {
        let l = parse_sim_load("util=35 mem=30000\n").expect("load");
        assert_eq!((l.gpu_util_pct, l.memory_used_mb), (35.0, 30_000));
        let last = parse_sim_load("util=10 mem=1GiB\nutil=90% mem=70000MiB\n").expect("last line");
        assert_eq!((last.gpu_util_pct, last.memory_used_mb), (90.0, 70_000));
        assert_eq!(parse_sim_load("mem=2GiB").map(|l| l.memory_used_mb), Some(2048));
        for bad in ["", "util", "util=x", "speed=3", "util=5 mem=lots"] {
            assert_eq!(parse_sim_load(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpu_time_of_a_session_is_measured() {
        // A busy shell in a session of its own (setsid(1) from util-linux,
        // which Debian always installs): it leads the session, so its
        // session id is its pid, and its CPU ticks only grow. (This test
        // process's own session cannot serve: under a PID namespace whose
        // session leader lives outside it, /proc reports session 0.)
        let mut child = std::process::Command::new("setsid")
            .args(["sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("setsid(1) runs");
        let pid = child.id();
        let ticks = || -> Option<u64> {
            read_procs().iter().find(|p| p.pid == pid && p.session == pid as i32).map(|p| p.ticks)
        };
        let mut seen = Vec::new();
        // Wait (on the kernel's own accounting, not a clock) until the child has been charged two ticks more than at first.
        for _ in 0..1_000_000 {
            if let Some(t) = ticks() {
                seen.push(t);
                if t >= seen[0] + 2 {
                    break;
                }
            }
            std::thread::yield_now();
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(!seen.is_empty(), "the child {pid} was never seen as the leader of its own session");
        assert!(seen.last() >= Some(&(seen[0] + 2)), "CPU time does not grow: {seen:?}");
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "CPU time went back: {seen:?}");
    }
}
