//! `gpool-devtools bench chaos`: a real cluster under random faults, checked from the
//! jobs' own records. A PostgreSQL server, a leader and a standby `gpool
//! serve`, and agents with simulated GPUs run a steady stream of jobs (one
//! in ten a gang across nodes) while a seeded schedule of faults hits them
//! (`schedule.rs`: kill -9 or SIGSTOP of an agent, the leader or the
//! standby; the database server stopped and started again; its disk slow
//! (`slow_disk.rs`); an agent's network to the control planes cut; an
//! agent cut off from everything, peers included; an agent's disk filled to
//! the last byte, each agent's data directory being a small tmpfs, which
//! needs root; and the long outages, held for `--outage` (ten leases by
//! default): the database stopped, both control planes stopped with
//! SIGSTOP, both killed and started again). Then it checks that
//! every acknowledged job ended, that none ran twice at once and no GPU was
//! held by two runs at once (each job holds a lock per GPU and one for
//! itself), that nothing is left running, and that no job failed: every
//! fault here is the infrastructure's, so every job must succeed; and that
//! no long outage killed a job: four jobs that outlast each by two leases
//! are started before it and must succeed in their first attempt.

mod proxy;
mod schedule;
mod slow_disk;
mod world;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};

use schedule::{Fault, Kind};
use world::World;

#[derive(Args, Debug)]
pub(crate) struct ChaosArgs {
    /// Faults to inject, one after another.
    #[arg(long, default_value_t = 20)]
    faults: usize,
    /// Seed of the fault schedule: the same seed replays the same faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Agents (nodes of 4 simulated GPUs each).
    #[arg(long, default_value_t = 3)]
    agents: usize,
    /// The nodes' lease: faults hold 1 s to 1.5 leases, so some outlast it.
    #[arg(long, default_value = "6s")]
    lease: String,
    /// How long the long outages hold (the database stopped, both control
    /// planes stopped or killed); default: ten leases.
    #[arg(long)]
    outage: Option<String>,
    /// Only these kinds of fault, comma-separated (e.g. `db-outage,planes-stop`); default: every kind.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Jobs submitted per second while faults run.
    #[arg(long, default_value_t = 4)]
    rate: u32,
    /// Keep the scratch directory (logs of every process) instead of removing it.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    print: crate::print::Print,
}

/// The job every chaos job runs: it locks each of its GPUs and itself (two
/// holders at once leave a violation record), records its start, sleeps,
/// and records its end.
const JOB: &str = r#"#!/bin/bash
D="$1"
for g in ${CUDA_VISIBLE_DEVICES//,/ }; do
  exec {fd}>"$D/locks/$GPOOL_NODE-gpu$g"
  flock -n "$fd" || echo "job $GPOOL_JOB_ID: $GPOOL_NODE gpu$g held by another run" >> "$D/violations"
done
exec {me}>"$D/locks/job-$GPOOL_JOB_ID-rank${RANK:-0}"
flock -n "$me" || echo "job $GPOOL_JOB_ID rank ${RANK:-0} runs twice at once" >> "$D/violations"
echo "$GPOOL_JOB_ID $GPOOL_ATTEMPT ${RANK:-0} $GPOOL_NODE $(date +%s%3N)" >> "$D/starts"
sleep "$2"
echo "$GPOOL_JOB_ID $GPOOL_ATTEMPT ${RANK:-0} $GPOOL_NODE" >> "$D/done"
"#;

pub(crate) fn run(a: ChaosArgs, gpool: &Path) -> anyhow::Result<()> {
    let lease = gpool_api::quantity::parse_duration(&a.lease).map_err(|e| anyhow::anyhow!("--lease: {e}"))?;
    anyhow::ensure!(a.agents >= 2, "--agents: at least 2 (gangs span two nodes)");
    let outage = match &a.outage {
        Some(o) => gpool_api::quantity::parse_duration(o).map_err(|e| anyhow::anyhow!("--outage: {e}"))?,
        None => lease * 10,
    };
    let kinds = a
        .kinds
        .iter()
        .map(|k| {
            Kind::named(k).ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                anyhow::anyhow!("--kinds: no fault is called {k:?}; the kinds are {}", names.join(", "))
            })
        })
        .collect::<anyhow::Result<Vec<Kind>>>()?;
    let faults: Vec<Fault> = schedule::schedule(a.seed, a.faults, a.agents, lease * 3 / 2, &kinds)
        .into_iter()
        .map(|f| if f.kind.is_outage() { Fault { hold: outage, ..f } } else { f })
        .collect();
    let dir = std::env::temp_dir().join(format!("gpool-chaos-{}-{}", std::process::id(), a.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("locks"))?;
    std::fs::write(dir.join("job.sh"), JOB)?;
    let result = chaos(&a, gpool, &dir, &faults);
    if !a.keep && result.as_ref().is_ok_and(|r| r["ok"] == true) {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = result?;
    if a.print.data().is_some() {
        println!("{}", a.print.render(&report)?);
    } else {
        print_report(&report);
    }
    anyhow::ensure!(report["ok"] == true, "the chaos run broke a promise (seed {}; logs in {})", a.seed, dir.display());
    Ok(())
}

fn chaos(a: &ChaosArgs, gpool: &Path, dir: &Path, faults: &[Fault]) -> anyhow::Result<Value> {
    let mut w = World::start(gpool, dir, a.agents, &a.lease)?;
    // The stream of jobs, submitted to whichever control plane leads.
    let acknowledged: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = {
        let (ports, token) = (w.planes.iter().map(|(p, _)| *p).collect::<Vec<_>>(), w.token.clone());
        let (acked, stop, dir) = (acknowledged.clone(), stop.clone(), dir.to_path_buf());
        let pause = Duration::from_millis(1_000 / u64::from(a.rate.max(1)));
        std::thread::spawn(move || submit_stream(&ports, &token, &dir, pause, &acked, &stop))
    };
    let mut injected: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut takeovers = Vec::new();
    let mut rejoins = Vec::new();
    // When each fault that takes a node away began: (node name, ms since the epoch).
    let mut node_faults: Vec<(String, i64)> = Vec::new();
    let mut outages = Outages::default();
    let lease = gpool_api::quantity::parse_duration(&a.lease).map_err(|e| anyhow::anyhow!("--lease: {e}"))?;
    for (i, f) in faults.iter().enumerate() {
        if a.print.data().is_none() {
            eprintln!("fault {}/{}: {} (agent {}, {:?})", i + 1, faults.len(), f.kind.name(), f.agent, f.hold);
        }
        if matches!(f.kind, Kind::AgentKill | Kind::AgentStop | Kind::NetCut | Kind::DiskFull | Kind::Isolate) {
            node_faults.push((format!("n{}", f.agent), epoch_ms()));
        }
        // Jobs that outlast an outage by two leases: none may die of it.
        let long = if f.kind.is_outage() { Some(outages.submit(&mut w, dir, f.hold + lease * 2)?) } else { None };
        inject(&mut w, f, &mut takeovers, &mut rejoins)?;
        if let Some(ids) = long {
            outages.check(&mut w, &ids, f.hold + lease * 4)?;
            if let Ok(mut acked) = acknowledged.lock() {
                acked.extend(&ids);
            }
        }
        *injected.entry(f.kind.name()).or_default() += 1;
        std::thread::sleep(f.calm);
    }
    stop.store(true, Ordering::SeqCst);
    let _ = submitter.join();
    let ids = acknowledged.lock().map(|v| v.clone()).unwrap_or_default();
    // Every acknowledged job must end. The queue left behind is drained for
    // as long as jobs keep ending: the check fails when none has ended for
    // STALL (something is stuck), not when a backlog is merely long.
    const STALL: Duration = Duration::from_secs(120);
    let mut states: BTreeMap<u64, Value> = BTreeMap::new();
    let t_settle = Instant::now();
    let (mut ended_before, mut progress_at) = (0usize, Instant::now());
    let settle = w.until("every acknowledged job to end", Duration::from_secs(3_600), |w| {
        states = all_jobs(w);
        let ended = ids.iter().filter(|id| states.get(id).is_some_and(|j| is_terminal(&j["state"]))).count();
        if ended > ended_before {
            (ended_before, progress_at) = (ended, Instant::now());
        }
        ended == ids.len() || progress_at.elapsed() > STALL
    });
    let settle = settle.and_then(|d| {
        anyhow::ensure!(ended_before == ids.len(), "no job ended for {STALL:?} with {} left", ids.len() - ended_before);
        Ok(d)
    });
    let settle_ms = t_settle.elapsed().as_millis() as u64;
    let lines = |name: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(name)).map(|t| t.lines().map(String::from).collect()).unwrap_or_default()
    };
    let violations = lines("violations");
    let overlaps = violations.iter().filter(|v| v.contains("runs twice")).count();
    let double_booked = violations.iter().filter(|v| v.contains("held by another")).count();
    let count = |state: &str| ids.iter().filter(|id| states.get(id).is_some_and(|j| j["state"] == state)).count();
    let lost = ids.iter().filter(|id| !states.get(id).is_some_and(|j| is_terminal(&j["state"]))).count();
    let failed = ids.len() - count("succeeded") - lost;
    let restarts: u64 = ids.iter().filter_map(|id| states.get(id)?["restarts"].as_u64()).sum();
    let leftovers = running_job_processes(dir);
    let ok = settle.is_ok()
        && lost == 0
        && failed == 0
        && overlaps == 0
        && double_booked == 0
        && leftovers == 0
        && outages.killed.is_empty();
    let ms = |v: &[Duration]| -> Value {
        let mut ms: Vec<u64> = v.iter().map(|d| d.as_millis() as u64).collect();
        ms.sort_unstable();
        let q = |p: f64| ms.get(((ms.len().max(1) - 1) as f64 * p).round() as usize).copied();
        json!({"count": ms.len(), "p50_ms": q(0.5), "max_ms": ms.last()})
    };
    Ok(json!({
        "ok": ok,
        "seed": a.seed,
        "faults": faults.len(),
        "faults_by_kind": injected,
        "acknowledged": ids.len(),
        "succeeded": count("succeeded"),
        "lost": lost,
        "failed": failed,
        "runs_overlapping": overlaps,
        "gpu_double_bookings": double_booked,
        "left_running": leftovers,
        "restarts": restarts,
        "runs_started": lines("starts").len(),
        "outage_jobs": outages.jobs,
        "killed_by_outage": outages.killed.len(),
        "killed_by_outage_jobs": outages.killed,
        "recovery": {
            "standby_takeover": ms(&takeovers),
            "node_rejoin": ms(&rejoins),
            "requeue_after_node_loss": ms(&requeue_gaps(&lines("starts"), &node_faults)),
        },
        "settled": settle.is_ok(),
        "settle_ms": settle_ms,
        "logs": dir.display().to_string(),
    }))
}

/// Injects one fault, holds it, heals it, and measures the recovery where there is one.
fn inject(w: &mut World, f: &Fault, takeovers: &mut Vec<Duration>, rejoins: &mut Vec<Duration>) -> anyhow::Result<()> {
    let settle = Duration::from_secs(60);
    match f.kind {
        Kind::AgentKill => {
            w.agents[f.agent].kill9();
            std::thread::sleep(f.hold);
            w.agents[f.agent].start()?;
            let n = w.agents.len();
            rejoins.push(w.until("the agent to rejoin", settle, |w| w.nodes_up() == n)?);
        }
        Kind::AgentStop => {
            w.agents[f.agent].signal("STOP")?;
            std::thread::sleep(f.hold);
            w.agents[f.agent].signal("CONT")?;
        }
        Kind::DiskFull => {
            w.disks[f.agent].fill(true)?;
            std::thread::sleep(f.hold);
            w.disks[f.agent].fill(false)?;
        }
        Kind::NetCut => {
            w.proxies[f.agent].iter().for_each(|p| p.set_cut(true));
            std::thread::sleep(f.hold);
            w.proxies[f.agent].iter().for_each(|p| p.set_cut(false));
        }
        Kind::Isolate => {
            w.proxies[f.agent].iter().for_each(|p| p.set_cut(true));
            w.peer_proxies[f.agent].set_cut(true);
            std::thread::sleep(f.hold);
            w.proxies[f.agent].iter().for_each(|p| p.set_cut(false));
            w.peer_proxies[f.agent].set_cut(false);
        }
        Kind::DbOutage => {
            w.db_stopped(true)?;
            std::thread::sleep(f.hold);
            w.db_stopped(false)?;
            w.until("a leader after the outage", settle, |w| w.leader().is_some())?;
        }
        Kind::PlanesStop | Kind::PlanesKill => {
            let kill = f.kind == Kind::PlanesKill;
            for (_, p) in &mut w.planes {
                if kill {
                    p.kill9();
                } else {
                    p.signal("STOP")?;
                }
            }
            std::thread::sleep(f.hold);
            for (_, p) in &mut w.planes {
                if kill {
                    p.start()?;
                } else {
                    p.signal("CONT")?;
                }
            }
            w.until("a leader after the outage", settle, |w| w.leader().is_some())?;
        }
        Kind::LeaderKill | Kind::LeaderStop | Kind::StandbyKill | Kind::StandbyStop => {
            let leader = match w.leader() {
                Some(l) => l,
                None => w.until("a leader", settle, |w| w.leader().is_some()).map(|_| w.leader().unwrap_or(0))?,
            };
            let target = match f.kind {
                Kind::LeaderKill | Kind::LeaderStop => leader,
                _ => 1 - leader,
            };
            let t0 = Instant::now();
            if matches!(f.kind, Kind::LeaderKill | Kind::StandbyKill) {
                w.planes[target].1.kill9();
            } else {
                w.planes[target].1.signal("STOP")?;
            }
            if target == leader {
                w.until("the standby to take over", settle, |w| w.leader().is_some_and(|l| l != leader))?;
                takeovers.push(t0.elapsed());
            }
            std::thread::sleep(f.hold.saturating_sub(t0.elapsed()));
            if matches!(f.kind, Kind::LeaderKill | Kind::StandbyKill) {
                w.planes[target].1.start()?;
            } else {
                w.planes[target].1.signal("CONT")?;
            }
        }
        Kind::DbRestart => {
            w.db_stopped(true)?;
            std::thread::sleep(f.hold);
            w.db_stopped(false)?;
            w.until("a leader after the restart", settle, |w| w.leader().is_some())?;
        }
        Kind::SlowDisk => {
            w.slow_disk.set(Some(f.slow_ms))?;
            // The fault must be real: a commit now waits for at least one slowed flush.
            let probe = w.commit_time();
            std::thread::sleep(f.hold.saturating_sub(probe.as_ref().map_or(Duration::ZERO, |d| *d)));
            w.slow_disk.set(None)?;
            let took = probe?;
            anyhow::ensure!(
                took >= Duration::from_millis(f.slow_ms),
                "the slow-disk fault did not slow the database: a commit took {took:?}, expected {} ms or more",
                f.slow_ms
            );
        }
    }
    // A control plane may have stepped down and be reconnecting: it never exits.
    for (i, (_, p)) in w.planes.iter_mut().enumerate() {
        anyhow::ensure!(!p.exited(), "control plane {i} exited after {}", f.kind.name());
    }
    Ok(())
}

/// The jobs each long outage must not kill, and those it did.
#[derive(Default)]
struct Outages {
    jobs: usize,
    /// "job N: state, attempt A" of each job an outage killed.
    killed: Vec<String>,
}

impl Outages {
    /// Four one-GPU jobs of `secs`, running before the outage begins.
    fn submit(&mut self, w: &mut World, dir: &Path, secs: Duration) -> anyhow::Result<Vec<u64>> {
        let script = dir.join("job.sh").display().to_string();
        let spec = json!({"command": ["bash", script, dir.display().to_string(), secs.as_secs().to_string()],
                          "resources": {"nvidia.com/gpu": 1}});
        let url = match w.leader_url() {
            Some(u) => u,
            None => {
                w.until("a leader", Duration::from_secs(60), |w| w.leader().is_some())?;
                w.leader_url().unwrap_or_default()
            }
        };
        let ids: Vec<u64> = w.post(&url, "/api/v1/jobs", &json!({"jobs": [spec, spec, spec, spec]}))?["ids"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        // Running by their own word (their start records), not only by the
        // control plane's: a start the outage caught before its agent took it
        // never ran, and is not an outage's kill.
        let starts = dir.join("starts");
        w.until("the outage's jobs to run", Duration::from_secs(120), |_| {
            let text = std::fs::read_to_string(&starts).unwrap_or_default();
            ids.iter().all(|id| text.lines().any(|l| l.starts_with(&format!("{id} 1 "))))
        })?;
        self.jobs += ids.len();
        Ok(ids)
    }

    /// After the outage: each job ends succeeded in its first attempt.
    fn check(&mut self, w: &mut World, ids: &[u64], within: Duration) -> anyhow::Result<()> {
        let mut ended: Vec<Value> = Vec::new();
        w.until("the outage's jobs to end", within + Duration::from_secs(120), |w| {
            ended = ids.iter().filter_map(|id| w.get(&format!("/api/v1/jobs/{id}"))).collect();
            ended.len() == ids.len() && ended.iter().all(|j| is_terminal(&j["state"]) || j["attempt"] != 1)
        })?;
        for j in ended {
            if j["state"] != "succeeded" || j["attempt"] != 1 {
                self.killed.push(format!("job {}: {}, attempt {}", j["id"], j["state"], j["attempt"]));
            }
        }
        Ok(())
    }
}

fn submit_stream(ports: &[u16], token: &str, dir: &Path, pause: Duration, acked: &Mutex<Vec<u64>>, stop: &AtomicBool) {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let script = dir.join("job.sh").display().to_string();
    let d = dir.display().to_string();
    let mut i: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        // Half a second to 1.5 s: the mix asks about 70% of the GPUs at 4 jobs/s,
        // so the queue drains between faults and a job waits for faults, not for a backlog.
        let secs = ["0.5", "1", "1.5"][(i % 3) as usize];
        let spec = if i.is_multiple_of(10) {
            json!({"command": ["bash", &script, &d, secs], "replicas": 2, "resources": {"nvidia.com/gpu": 4}})
        } else {
            json!({"command": ["bash", &script, &d, secs], "resources": {"nvidia.com/gpu": 1 + (i % 2)}})
        };
        for port in ports {
            let sent = http
                .post(format!("http://127.0.0.1:{port}/api/v1/jobs"))
                .header("Authorization", format!("Bearer {token}"))
                .send_json(&spec);
            let Ok(mut r) = sent else { continue };
            if !r.status().is_success() {
                continue;
            }
            if let Ok(v) = r.body_mut().read_json::<Value>()
                && let Some(ids) = v["ids"].as_array()
            {
                // Acknowledged: the job must now end, whatever happens.
                if let Ok(mut a) = acked.lock() {
                    a.extend(ids.iter().filter_map(Value::as_u64));
                }
                break;
            }
        }
        std::thread::sleep(pause);
    }
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// For each job run again after its node was hit: the time from the fault
/// on the node its previous attempt ran on to the new attempt's start (rank
/// 0), from the jobs' own start records ("job attempt rank node ms").
fn requeue_gaps(starts: &[String], node_faults: &[(String, i64)]) -> Vec<Duration> {
    let mut first_rank: BTreeMap<(u64, u64), (String, i64)> = BTreeMap::new();
    for line in starts {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [job, attempt, "0", node, ms] = f[..]
            && let (Ok(job), Ok(attempt), Ok(ms)) = (job.parse(), attempt.parse(), ms.parse())
        {
            first_rank.insert((job, attempt), (node.to_string(), ms));
        }
    }
    let mut gaps = Vec::new();
    for ((job, attempt), (_, started)) in &first_rank {
        let Some((node, before)) = attempt.checked_sub(1).and_then(|p| first_rank.get(&(*job, p))) else { continue };
        let hit =
            node_faults.iter().filter(|(n, at)| n == node && at >= before && at <= started).map(|(_, at)| *at).max();
        if let Some(at) = hit {
            gaps.push(Duration::from_millis((started - at) as u64));
        }
    }
    gaps
}

fn all_jobs(w: &World) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    let mut after = 0;
    loop {
        let Some(page) = w.get(&format!("/api/v1/jobs?limit=1000&after={after}")) else { return out };
        for j in page["jobs"].as_array().into_iter().flatten() {
            if let Some(id) = j["id"].as_u64() {
                out.insert(id, j.clone());
            }
        }
        match page["next"].as_u64() {
            Some(n) => after = n,
            None => return out,
        }
    }
}

fn is_terminal(state: &Value) -> bool {
    matches!(state.as_str(), Some("succeeded" | "failed" | "cancelled" | "timed_out"))
}

/// Processes still running a job of this run (its script under `dir`).
fn running_job_processes(dir: &Path) -> usize {
    let needle = dir.join("job.sh").display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle.as_str()))
        })
        .count()
}

fn print_report(r: &Value) {
    println!(
        "chaos (seed {}): {} faults {}; {} jobs acknowledged, {} succeeded, {} lost, {} failed; \
         {} runs overlapping, {} GPU double-bookings, {} left running; {} restarts over {} runs started; \
         {} of {} jobs killed by an outage of the database or the control planes",
        r["seed"],
        r["faults"],
        r["faults_by_kind"],
        r["acknowledged"],
        r["succeeded"],
        r["lost"],
        r["failed"],
        r["runs_overlapping"],
        r["gpu_double_bookings"],
        r["left_running"],
        r["restarts"],
        r["runs_started"],
        r["killed_by_outage"],
        r["outage_jobs"],
    );
    println!("recovery: {}", r["recovery"]);
    println!("{}", if r["ok"] == true { "every promise held" } else { "A PROMISE BROKE: see the logs" });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requeue_is_timed_from_the_fault_on_the_node_of_the_attempt_before() {
        let starts: Vec<String> = [
            "7 1 0 n0 1000",
            "7 1 1 n1 1000",
            "7 2 0 n2 9500", // after the fault on n0 at 1500
            "8 1 0 n1 2000",
            "8 2 0 n1 4000", // restarted, but its node had no fault: not a node loss
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let faults = vec![("n0".to_string(), 1_500), ("n0".to_string(), 20_000), ("n2".to_string(), 3_000)];
        assert_eq!(requeue_gaps(&starts, &faults), [Duration::from_millis(8_000)]);
    }
}
