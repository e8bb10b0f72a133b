//! The discrete-event simulation: a virtual clock, arrivals and completions,
//! and the scheduling core called exactly as the daemon calls it (keep the
//! snapshot current, `schedule(&snapshot, now)`, apply the plan).
//!
//! Preemption is immediate in the simulation (no grace period), and every
//! run after the first pays `restart_delay` before the job makes progress
//! again (reloading a checkpoint, warming up): preemptive policies pay for
//! what they do.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpool_core::job::{LabelExpr, LabelOp};
use gpool_core::{
    DeviceKind, GpuRequest, JobId, JobSpec, KindUnits, Node, Policy, Snapshot, StopOutcome, Time, schedule,
};

use gpool_core::runtime_history::{HistoryConfig, RunKey, RuntimeHistory};

use crate::fleet::{Fleet, FleetConfig, FleetReport};
use crate::trace::TraceJob;

/// Whether jobs carry their true duration as an estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimates {
    /// Estimates equal the real run time (the oracle of SJF/SRTF studies).
    Oracle,
    /// No estimates: the scheduler knows nothing about durations.
    None,
    /// Learned from the jobs like it that ended before it was submitted
    /// (`gpool_core::runtime_history`), at this quantile in thousandths.
    Learned { quantile_milli: u16 },
}

impl Estimates {
    /// `oracle`, `none`, `learned` (the daemon's default quantile) or `learned:Q` (Q in 0..=1).
    pub fn parse(text: &str) -> Result<Estimates, String> {
        let default_q = gpool_core::runtime_history::HistoryConfig::default().quantile;
        match text.split_once(':') {
            None if text == "oracle" => Ok(Estimates::Oracle),
            None if text == "none" => Ok(Estimates::None),
            None if text == "learned" => Ok(Estimates::Learned { quantile_milli: (default_q * 1000.0) as u16 }),
            Some(("learned", q)) => match q.parse::<f64>() {
                Ok(q) if (0.0..=1.0).contains(&q) => {
                    Ok(Estimates::Learned { quantile_milli: (q * 1000.0).round() as u16 })
                }
                _ => Err(format!("learned:{q}: the quantile must be a number from 0 to 1, e.g. learned:0.5")),
            },
            _ => Err(format!("{text:?}: expected auto, oracle, none, learned or learned:Q (a quantile from 0 to 1)")),
        }
    }
}

impl Estimates {
    /// What a policy expects: the oracle for policies that decide by
    /// duration (`Policy::needs_estimates`), nothing for the others (gpool's
    /// default does not need them).
    pub fn for_policy(policy: &Policy) -> Estimates {
        if policy.needs_estimates() {
            Estimates::Oracle
        } else if policy.orders_by_history() {
            Estimates::parse("learned").unwrap_or(Estimates::None)
        } else {
            Estimates::None
        }
    }
}

/// Simulation settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub policy: Policy,
    pub nodes: Vec<Node>,
    pub estimates: Estimates,
    /// Lost time at the start of every run after the first.
    pub restart_delay: Duration,
    /// Whether trace jobs may be preempted.
    pub preemptible: bool,
    /// Width of one time-series bucket.
    pub sample: Duration,
    /// Lay out idle MIG GPUs for the queue's MIG demand before each pass
    /// (`gpool_core::mig_planner`), as a node that lets gpool manage MIG does.
    pub mig_planner: bool,
    /// Elastic node pools the autoscaler grows and shrinks (`gpool sim --pools`).
    pub fleet: Option<FleetConfig>,
    /// Power budgets the scheduler keeps (`gpool sim --power-budget`; nodes need `power`).
    pub power_budgets: Vec<gpool_core::power::PowerBudget>,
    /// GPU faults to replay (`gpool sim --faults`, `faults.rs`).
    pub faults: Vec<crate::faults::FaultEvent>,
    /// Replay whole-GPU jobs as elastic ones under this scaling model (`gpool sim --elastic`, `elastic.rs`).
    pub elastic: Option<crate::elastic::ElasticModel>,
    /// Advance reservations no trace job runs in: GPUs kept from the trace
    /// over their windows (`gpool sim --reservation`), by the daemon's rules.
    pub reservations: Vec<gpool_core::ReservationRequest>,
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub line: usize,
    pub group: Arc<str>,
    pub gpus: u32,
    pub submit_s: f64,
    pub duration_s: f64,
    pub first_start_s: Option<f64>,
    pub end_s: Option<f64>,
    pub preemptions: u32,
    /// The accelerator kind it asked for; `None`: any GPU.
    pub kind: Option<DeviceKind>,
}

impl JobRecord {
    pub fn jct_s(&self) -> Option<f64> {
        self.end_s.map(|e| e - self.submit_s)
    }
    pub fn queue_s(&self) -> Option<f64> {
        self.first_start_s.map(|s| s - self.submit_s)
    }
}

/// One time-series bucket: time-weighted averages over `[t_s, t_s + width)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub t_s: f64,
    pub utilization: f64,
    pub queued: f64,
    pub running: f64,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub jobs: Vec<JobRecord>,
    /// Jobs no node set could ever run (too many GPUs, unknown model), by file line.
    pub rejected: Vec<(usize, String)>,
    pub series: Vec<Sample>,
    pub capacity_gpus: u64,
    pub preemptions: u64,
    /// Elastic jobs restarted at another size (`SimConfig::elastic`).
    pub resizes: u64,
    /// MIG GPUs laid out anew (`SimConfig::mig_planner`).
    pub repartitions: u64,
    /// Calls of `schedule` and the wall time they took.
    pub sched_calls: u64,
    pub sched_time: Duration,
    pub sched_max: Duration,
    pub wall: Duration,
    /// Cost, reclaims and lost work of elastic pools (`SimConfig::fleet`).
    pub fleet: Option<FleetReport>,
    /// With learned estimates: (estimate, true duration) in seconds of each job that got one.
    pub learned: Vec<(f64, f64)>,
    /// Devices and their allocated time per accelerator kind (the fixed nodes').
    pub kinds: KindUse,
    /// What the replayed GPU faults cost (`SimConfig::faults`).
    pub faults: Option<crate::faults::FaultReport>,
}

/// Devices of each accelerator kind and the time they were allocated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindUse {
    /// Devices (whole GPUs, TPU chips, MIG-mode GPUs) per kind, by [`DeviceKind::index`].
    pub devices: [u64; 3],
    /// Allocated device-seconds per kind (a MIG instance counts by its compute slices).
    pub allocated_s: [f64; 3],
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("the cluster is invalid: {0}")]
    Cluster(gpool_core::SnapshotError),
    #[error(
        "the scheduler produced a plan the cluster refused at t={t}s: {err} (this is a bug in gpool; please report it)"
    )]
    Apply { t: f64, err: gpool_core::SnapshotError },
    #[error("the cluster has no GPUs and no CPUs")]
    EmptyCluster,
    #[error("reservation {name}: {err}")]
    Reservation { name: String, err: gpool_core::reservation::ReservationError },
    #[error("pool {pool}: {err}")]
    Pool { pool: String, err: gpool_core::SnapshotError },
    #[error("the fault trace: {0}")]
    Faults(String),
}

/// Per-job simulation state.
struct State {
    /// Useful work left, ms at the GPU count the job asked for.
    left_ms: i64,
    /// Its speed in the current run relative to that count (1 for a rigid job).
    speed: f64,
    /// Start of the current run and the overhead it pays first.
    run: Option<(i64, i64)>,
    epoch: u32,
    runs: u32,
}

/// Runs a trace through the scheduling core. `progress(done, total)` is called as jobs finish.
pub fn run(trace: &[TraceJob], cfg: &SimConfig, mut progress: impl FnMut(u64, u64)) -> Result<SimResult, SimError> {
    let wall = Instant::now();
    let mut snap = Snapshot::new(cfg.policy.clone());
    snap.set_power_budgets(cfg.power_budgets.clone());
    let mut gpus_per_node = 0u32;
    let mut capacity_gpus = 0u64;
    let mut kinds = KindUse::default();
    for n in &cfg.nodes {
        let mut n = n.clone();
        for d in &n.devices {
            kinds.devices[d.kind.index()] += 1;
        }
        if let Some(d) = n.devices.first() {
            n.labels.entry("gpool.io/gpu-model".into()).or_insert_with(|| d.model.to_string());
        }
        let whole = n.devices.iter().filter(|d| d.mig.is_none()).count() as u32;
        gpus_per_node = gpus_per_node.max(whole);
        capacity_gpus += u64::from(whole);
        let mig_gpus: Vec<u32> = n.devices.iter().filter(|d| d.mig.is_some()).map(|d| d.index).collect();
        let id = snap.add_node(n).map_err(SimError::Cluster)?;
        if cfg.mig_planner {
            for gpu in mig_gpus {
                snap.set_mig_managed(id, gpu, true).map_err(SimError::Cluster)?;
            }
        }
    }
    if cfg.nodes.is_empty() && cfg.fleet.as_ref().is_none_or(|f| f.pools.is_empty()) {
        return Err(SimError::EmptyCluster);
    }
    for r in &cfg.reservations {
        let made = snap.reservable(r).map_err(|err| SimError::Reservation { name: r.name.to_string(), err })?;
        let mut all = snap.reservations().to_vec();
        all.push(made);
        snap.set_reservations(all);
    }
    // Jobs are checked against the largest cluster the pools can make.
    let mut largest = snap.clone();
    if let Some(f) = &cfg.fleet {
        let (gpus, per) = Fleet::capacity(f);
        capacity_gpus += gpus;
        gpus_per_node = gpus_per_node.max(per);
        for p in &f.pools {
            for i in 0..p.max {
                largest
                    .add_node(p.template(&format!("{}-max-{i}", p.name())))
                    .map_err(|err| SimError::Pool { pool: p.name().to_string(), err })?;
            }
        }
    }
    let mut faults = match cfg.faults.is_empty() {
        true => None,
        false => Some(crate::faults::FaultReplay::new(cfg.faults.clone(), &snap).map_err(SimError::Faults)?),
    };
    let mut fleet = match &cfg.fleet {
        Some(f) => Some(Fleet::new(f.clone(), &mut snap).map_err(SimError::Cluster)?),
        None => None,
    };

    let mut records = Vec::with_capacity(trace.len());
    let mut specs = Vec::with_capacity(trace.len());
    let mut rejected = Vec::new();
    let mut groups: std::collections::BTreeMap<String, Arc<str>> = Default::default();
    for j in trace {
        let group = groups.entry(j.group.clone()).or_insert_with(|| Arc::from(j.group.as_str())).clone();
        let spec = job_spec(j, &group, gpus_per_node, cfg);
        if let Err(why) = largest.check_feasible(&spec) {
            rejected.push((j.line, why.to_string()));
            continue;
        }
        records.push(JobRecord {
            line: j.line,
            group,
            gpus: j.gpus,
            submit_s: j.submit_s,
            duration_s: j.duration_s,
            first_start_s: None,
            end_s: None,
            preemptions: 0,
            kind: j.kind,
        });
        specs.push(spec);
    }
    let total = records.len() as u64;
    let mut states: Vec<State> = records
        .iter()
        .map(|r| State { left_ms: (r.duration_s * 1000.0).round() as i64, speed: 1.0, run: None, epoch: 0, runs: 0 })
        .collect();
    let delay_ms = i64::try_from(cfg.restart_delay.as_millis()).unwrap_or(i64::MAX);

    let mut completions: BinaryHeap<Reverse<(i64, usize, u32)>> = BinaryHeap::new();
    let mut next_arrival = 0usize;
    let mut series = Series::new(cfg.sample, capacity_gpus);
    let mut stats = Stats::default();
    let mut done = 0u64;
    let mut allocated_gpus = 0u64;

    // When the last pass asked for another one (see `Plan::wake_at`).
    let mut wake: Option<i64> = None;
    let mut used_gpu_ms = 0f64;
    let mut history = match cfg.estimates {
        Estimates::Learned { quantile_milli } => Some(RuntimeHistory::new(HistoryConfig {
            quantile: f64::from(quantile_milli) / 1000.0,
            ..HistoryConfig::default()
        })),
        _ => None,
    };
    let mut learned = Vec::new();
    // Units held per kind since the last event.
    let mut held = KindUnits::default();
    let mut last_ms = 0i64;
    // Pending jobs that only pools could still run wait at most this long after the last arrival.
    let give_up_ms = specs.last().map_or(0, |s| s.submit_time.as_millis()).saturating_add(400 * 86_400_000);
    loop {
        let arrival = specs.get(next_arrival).map(|s| s.submit_time.as_millis());
        let completion = completions.peek().map(|Reverse((t, _, _))| *t);
        let fleet_next = fleet.as_ref().and_then(Fleet::next_event);
        // Faults after the last job are of no interest; those before it may hold jobs back.
        let fault_next = faults.as_ref().and_then(crate::faults::FaultReplay::next_event);
        let now_ms = match (arrival, completion) {
            // A pass that asked to be woken (a reservation's window ending, a begin time) may start what is left.
            (None, None)
                if snap.pending_count() == 0
                    || (fleet_next.is_none_or(|t| t > give_up_ms)
                        && fault_next.is_none_or(|t| t > give_up_ms)
                        && wake.is_none_or(|t| t > give_up_ms)) =>
            {
                break;
            }
            (a, c) => a
                .unwrap_or(i64::MAX)
                .min(c.unwrap_or(i64::MAX))
                .min(wake.unwrap_or(i64::MAX))
                .min(fleet_next.unwrap_or(i64::MAX))
                .min(fault_next.unwrap_or(i64::MAX)),
        };
        let now = Time::from_millis(now_ms);
        used_gpu_ms += allocated_gpus as f64 * (now_ms - last_ms).max(0) as f64;
        for k in DeviceKind::ALL {
            kinds.allocated_s[k.index()] += held.get(k) as f64 * (now_ms - last_ms).max(0) as f64 / 1e6;
        }
        last_ms = now_ms;
        if let Some(f) = fleet.as_mut() {
            let reclaim = f.advance(now_ms, &mut snap).map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
            for (seq, node) in reclaim {
                let jobs: Vec<JobId> = snap.jobs_on(node).collect();
                for id in jobs {
                    let idx = id.0 as usize;
                    let gpus = snap.job(id).and_then(|j| j.running()).map_or(0, |r| r.gpu_milli / 1000);
                    allocated_gpus -= gpus;
                    snap.stop(id, now, StopOutcome::Requeue { not_before: Time::MIN })
                        .map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
                    let s = &mut states[idx];
                    if let Some((start, overhead)) = s.run.take() {
                        let done_ms = (now_ms - start - overhead).max(0);
                        let every = f.checkpoint_ms().max(1);
                        let saved = if every == i64::MAX { 0 } else { done_ms - done_ms % every };
                        s.left_ms -= (saved as f64 * s.speed).round() as i64;
                        f.lost((done_ms - saved) as f64 * gpus as f64 / 3_600_000.0);
                    }
                    s.epoch += 1;
                    records[idx].preemptions += 1;
                }
                f.reclaimed(seq, now_ms, &mut snap).map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
            }
        }

        if let Some(f) = faults.as_mut() {
            let hit = f.advance(now_ms, &mut snap).map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
            for id in hit {
                let idx = id.0 as usize;
                let milli = snap.job(id).and_then(|j| j.running()).map_or(0, |r| r.gpu_milli);
                allocated_gpus -= milli / 1000;
                snap.stop(id, now, StopOutcome::Requeue { not_before: Time::MIN })
                    .map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
                let s = &mut states[idx];
                if let Some((start, overhead)) = s.run.take() {
                    // No checkpoint: the work since the start is lost.
                    // In GPU units: a share of a GPU loses its share's worth.
                    let gpus = milli as f64 / 1000.0;
                    f.report.lost_gpu_hours += (now_ms - start - overhead).max(0) as f64 * gpus / 3_600_000.0;
                }
                s.epoch += 1;
                records[idx].preemptions += 1;
            }
        }

        // Completions at `now` are scheduled before arrivals at `now` join the
        // queue: a job that ends at t ended just before one that arrives at t.
        let mut finished_any = false;
        while let Some(Reverse((t, idx, epoch))) = completions.peek().copied() {
            if t > now_ms {
                break;
            }
            completions.pop();
            if states[idx].epoch != epoch {
                continue; // preempted since: stale
            }
            let id = JobId(idx as u64);
            allocated_gpus -= snap.job(id).and_then(|j| j.running()).map_or(0, |r| r.gpu_milli / 1000);
            snap.stop(id, now, StopOutcome::Finished { success: true })
                .map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
            states[idx].run = None;
            records[idx].end_s = Some(now.as_secs_f64());
            if let Some(h) = history.as_mut() {
                h.record(&run_key(&specs[idx], &records[idx]), Duration::from_secs_f64(records[idx].duration_s));
            }
            finished_any = true;
            done += 1;
            if done.is_multiple_of(1024) {
                progress(done, total);
            }
        }
        let mut ctx = Ctx {
            snap: &mut snap,
            states: &mut states,
            records: &mut records,
            completions: &mut completions,
            allocated_gpus: &mut allocated_gpus,
            stats: &mut stats,
            mig_planner: cfg.mig_planner,
            wake: &mut wake,
            delay_ms,
            elastic: cfg.elastic,
        };
        if finished_any && specs.get(next_arrival).is_some_and(|s| s.submit_time.as_millis() == now_ms) {
            ctx.schedule(now)?;
        }
        while let Some(spec) = specs.get(next_arrival) {
            if spec.submit_time.as_millis() > now_ms {
                break;
            }
            let mut spec = spec.clone();
            if let Some(h) = &history
                && cfg.policy.orders_by_history()
                && let Some((runs, _)) = h.similar(&run_key(&spec, &ctx.records[next_arrival]))
            {
                spec.similar_runs = Some(runs.into());
            }
            if let Some(h) = &history
                && let Some(e) = h.estimate(&run_key(&spec, &ctx.records[next_arrival]))
            {
                if cfg.policy.plans_with_learned_estimates() {
                    spec.estimate = Some(e.estimate);
                    spec.estimate_learned = true;
                }
                learned.push((e.estimate.as_secs_f64(), ctx.records[next_arrival].duration_s));
            }
            ctx.snap
                .submit(JobId(next_arrival as u64), spec)
                .map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
            next_arrival += 1;
        }
        let plan = ctx.schedule(now)?;
        if let Some(f) = fleet.as_mut() {
            f.after_pass(now_ms, &mut snap, &plan).map_err(|err| SimError::Apply { t: now.as_secs_f64(), err })?;
        }
        // The state from now until the next event.
        series.advance(now_ms, allocated_gpus, snap.pending_count(), snap.running_count());
        held = snap.kind_usage();
    }
    progress(done, total);
    let fleet = fleet.map(|f| f.finish(last_ms, used_gpu_ms / 3_600_000.0));
    let faults = faults.map(|f| f.finish(last_ms));
    Ok(SimResult {
        jobs: records,
        rejected,
        series: series.finish(),
        capacity_gpus,
        preemptions: stats.preemptions,
        resizes: stats.resizes,
        repartitions: stats.repartitions,
        sched_calls: stats.calls,
        sched_time: stats.time,
        sched_max: stats.max,
        wall: wall.elapsed(),
        fleet,
        learned,
        kinds,
        faults,
    })
}

#[derive(Default)]
struct Stats {
    preemptions: u64,
    resizes: u64,
    repartitions: u64,
    calls: u64,
    time: Duration,
    max: Duration,
}

/// What applying a plan touches.
struct Ctx<'a> {
    snap: &'a mut Snapshot,
    states: &'a mut [State],
    records: &'a mut [JobRecord],
    completions: &'a mut BinaryHeap<Reverse<(i64, usize, u32)>>,
    allocated_gpus: &'a mut u64,
    stats: &'a mut Stats,
    mig_planner: bool,
    wake: &'a mut Option<i64>,
    delay_ms: i64,
    elastic: Option<crate::elastic::ElasticModel>,
}

impl Ctx<'_> {
    /// Schedules at `now` and applies the plan; re-runs at the same instant
    /// (at most three more times) while preemptions free devices.
    fn schedule(&mut self, now: Time) -> Result<gpool_core::Plan, SimError> {
        let now_ms = now.as_millis();
        let apply_err = |err| SimError::Apply { t: now.as_secs_f64(), err };
        let mut last = gpool_core::Plan::default();
        for _ in 0..4 {
            let t0 = Instant::now();
            if self.mig_planner {
                self.repartition(now)?;
            }
            let plan = schedule(self.snap, now);
            let took = t0.elapsed();
            self.stats.calls += 1;
            self.stats.time += took;
            self.stats.max = self.stats.max.max(took);
            // Jobs stopped at their queue's window's end, or for a power budget, are requeued as preempted ones are.
            // Stopped work is requeued, keeping what it did; a resize (`true`)
            // restarts the job from its checkpoint at the new size and is no preemption.
            let stops = plan.window_stops.iter().chain(&plan.power_stops).copied();
            let stopped = plan.preemptions.iter().map(|p| p.victim).chain(stops).map(|j| (j, false));
            for (job, resize) in stopped.chain(plan.resizes.iter().map(|r| (r.job, true))) {
                let idx = job.0 as usize;
                *self.allocated_gpus -= self.snap.job(job).and_then(|j| j.running()).map_or(0, |r| r.gpu_milli / 1000);
                self.snap.stop(job, now, StopOutcome::Requeue { not_before: Time::MIN }).map_err(apply_err)?;
                let s = &mut self.states[idx];
                if let Some((start, overhead)) = s.run.take() {
                    s.left_ms -= ((now_ms - start - overhead).max(0) as f64 * s.speed).round() as i64;
                }
                s.epoch += 1;
                if resize {
                    self.stats.resizes += 1;
                } else {
                    self.records[idx].preemptions += 1;
                    self.stats.preemptions += 1;
                }
            }
            for st in &plan.starts {
                let idx = st.job.0 as usize;
                self.snap.start(st.job, st.placement.clone(), now).map_err(apply_err)?;
                *self.allocated_gpus +=
                    self.snap.job(st.job).and_then(|j| j.running()).map_or(0, |r| r.gpu_milli / 1000);
                let s = &mut self.states[idx];
                let overhead = if s.runs > 0 { self.delay_ms } else { 0 };
                s.runs += 1;
                s.run = Some((now_ms, overhead));
                s.speed = match (self.elastic, self.records[idx].gpus) {
                    (Some(m), gpus) if gpus > 0 => m.speed(gpus, st.placement.len() as u32),
                    _ => 1.0,
                };
                let left = (s.left_ms.max(0) as f64 / s.speed).ceil() as i64;
                self.completions.push(Reverse((now_ms + overhead + left, idx, s.epoch)));
                self.records[idx].first_start_s.get_or_insert(now.as_secs_f64());
            }
            self.snap.carry_over(&plan);
            *self.wake = plan.wake_at.map(Time::as_millis).filter(|t| *t > now_ms);
            let again = !plan.preemptions.is_empty()
                || !plan.resizes.is_empty()
                || !plan.window_stops.is_empty()
                || !plan.power_stops.is_empty();
            last = plan;
            if !again {
                break;
            }
        }
        Ok(last)
    }
}

impl Ctx<'_> {
    /// Lays out idle MIG GPUs for the pending MIG demand, at once (a real
    /// repartition takes seconds; the jobs here take minutes to hours).
    fn repartition(&mut self, now: Time) -> Result<(), SimError> {
        let apply_err = |err| SimError::Apply { t: now.as_secs_f64(), err };
        let plan = gpool_core::mig_planner::plan_for(self.snap, |_, _| true);
        for (node, gpu, r) in plan.repartitions {
            self.stats.repartitions += 1;
            let n = self.stats.repartitions;
            let instances = r.instances(|i| format!("MIG-sim-{}-{gpu}-{n}-{i}", node.0));
            self.snap.repartition(node, gpu, instances).map_err(apply_err)?;
        }
        for (node, gpu) in plan.drain {
            self.snap.hold_mig_gpu(node, gpu, true).map_err(apply_err)?;
        }
        for (node, gpu) in plan.undrain {
            self.snap.hold_mig_gpu(node, gpu, false).map_err(apply_err)?;
        }
        Ok(())
    }
}

/// What a trace job is compared by for learned estimates: its group (user),
/// GPU count and queue; traces name no jobs.
fn run_key(spec: &JobSpec, r: &JobRecord) -> RunKey {
    RunKey { user: r.group.clone(), name: Arc::from(""), gpus: r.gpus, queue: spec.queue.clone() }
}

/// The core's view of a trace job.
fn job_spec(j: &TraceJob, group: &Arc<str>, gpus_per_node: u32, cfg: &SimConfig) -> JobSpec {
    let mut spec = JobSpec::new("sim", Time::from_millis((j.submit_s * 1000.0).round() as i64));
    spec.user = group.clone();
    spec.team = group.clone();
    spec.preemptible = cfg.preemptible;
    spec.replica.gpu_kind = j.kind;
    let (replicas, per) = split_gpus(j.gpus, gpus_per_node.max(1));
    spec.replicas = replicas;
    spec.replica.gpu = match (&j.mig, per) {
        (Some(profile), _) => GpuRequest::Mig { profile: profile.clone(), count: j.gpus.max(1) },
        (None, 1) if j.gpu_milli.is_some() => GpuRequest::Share { milli: j.gpu_milli, memory_mb: None },
        (None, 0) => GpuRequest::None,
        (None, _) => GpuRequest::Gpus { count: per },
    };
    if j.mig.is_some() {
        spec.replicas = 1;
    }
    spec.replica.cpus_milli = j.cpus_milli / u64::from(replicas);
    spec.replica.memory_mb = j.memory_mb / u64::from(replicas);
    match j.gpu_models.as_slice() {
        [] => {}
        [one] => spec.replica.gpu_model = Some(Arc::from(one.as_str())),
        many => {
            spec.affinity.required.push(LabelExpr { key: "gpool.io/gpu-model".into(), op: LabelOp::In(many.to_vec()) })
        }
    }
    if cfg.estimates == Estimates::Oracle {
        spec.estimate = Some(Duration::from_secs_f64(j.duration_s));
    }
    // Whole-GPU jobs replay as elastic ones of one-GPU replicas (`elastic.rs`).
    if let Some(m) = cfg.elastic
        && j.mig.is_none()
        && j.gpu_milli.is_none()
        && j.gpus > 0
    {
        let (min, max) = m.range(j.gpus);
        spec.replica.gpu = GpuRequest::Gpus { count: 1 };
        spec.replicas = min;
        spec.max_replicas = Some(max);
        spec.replica.cpus_milli = j.cpus_milli / u64::from(j.gpus);
        spec.replica.memory_mb = j.memory_mb / u64::from(j.gpus);
    }
    spec
}

/// Splits a GPU count into equal replicas of at most `per_node`: the fewest
/// replicas whose size divides the count (12 GPUs on 8-GPU nodes: 2 × 6).
pub fn split_gpus(gpus: u32, per_node: u32) -> (u32, u32) {
    if gpus <= per_node {
        return (1, gpus);
    }
    let min = gpus.div_ceil(per_node);
    (min..=gpus).find(|r| gpus.is_multiple_of(*r)).map_or((gpus, 1), |r| (r, gpus / r))
}

/// Time-weighted averages per bucket.
struct Series {
    width_ms: i64,
    capacity: f64,
    out: Vec<Sample>,
    bucket: i64,
    last_ms: Option<i64>,
    last: (f64, f64, f64),
    acc: (f64, f64, f64),
}

impl Series {
    fn new(width: Duration, capacity_gpus: u64) -> Series {
        Series {
            width_ms: i64::try_from(width.as_millis()).unwrap_or(3_600_000).max(1),
            capacity: capacity_gpus.max(1) as f64,
            out: Vec::new(),
            bucket: 0,
            last_ms: None,
            last: (0.0, 0.0, 0.0),
            acc: (0.0, 0.0, 0.0),
        }
    }

    /// Closes the interval since the last call with the state recorded then,
    /// and records `(allocated, pending, running)` as held from `now_ms` on.
    fn advance(&mut self, now_ms: i64, allocated: u64, pending: usize, running: usize) {
        let Some(mut t) = self.last_ms else {
            self.bucket = now_ms.div_euclid(self.width_ms);
            self.last_ms = Some(now_ms);
            self.last = (allocated as f64, pending as f64, running as f64);
            return;
        };
        while t < now_ms {
            let end = ((self.bucket + 1) * self.width_ms).min(now_ms);
            let dt = (end - t) as f64;
            self.acc.0 += self.last.0 * dt;
            self.acc.1 += self.last.1 * dt;
            self.acc.2 += self.last.2 * dt;
            t = end;
            if t == (self.bucket + 1) * self.width_ms {
                self.flush();
            }
        }
        self.last_ms = Some(now_ms);
        self.last = (allocated as f64, pending as f64, running as f64);
    }

    fn flush(&mut self) {
        let w = self.width_ms as f64;
        self.out.push(Sample {
            t_s: (self.bucket * self.width_ms) as f64 / 1000.0,
            utilization: self.acc.0 / w / self.capacity,
            queued: self.acc.1 / w,
            running: self.acc.2 / w,
        });
        self.acc = (0.0, 0.0, 0.0);
        self.bucket += 1;
    }

    fn finish(self) -> Vec<Sample> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_counts_split_into_equal_replicas() {
        let cases = [
            (1, 8, (1, 1)),
            (8, 8, (1, 8)),
            (12, 8, (2, 6)),
            (16, 8, (2, 8)),
            (24, 8, (3, 8)),
            (128, 8, (16, 8)),
            (7, 4, (7, 1)),
        ];
        for (g, per, want) in cases {
            assert_eq!(split_gpus(g, per), want, "{g} on {per}");
        }
    }
}
