//! `gpool bench schedule`: full scheduling passes on a synthetic cluster.
//!
//! The first pass starts from an empty cluster and a full queue; then, for
//! every further pass, the clock moves a minute, about 2% of the running
//! jobs finish, as many new jobs arrive, and the pass is timed. Only the
//! pass itself (`schedule`) is timed, not applying its plan.

use std::time::{Duration, Instant};

use gpool_core::{JobId, Plan, Policy, Snapshot, StopOutcome, Time, schedule};

use crate::rng::Rng;
use crate::synthetic;

/// Benchmark parameters.
#[derive(Clone, Debug)]
pub struct ScheduleBench {
    pub pending: u32,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub passes: u32,
    pub policy: Policy,
    pub seed: u64,
    /// Nodes with one degraded GPU (GPU 0): placement then weighs every node (`snapshot/health.rs`).
    pub degraded_nodes: u32,
    /// Jobs come in arrays of this many tasks of one shape, each array running at most a
    /// quarter of its tasks at once (`--array=…%N`); 0 or 1: plain jobs.
    pub array_tasks: u32,
}

/// The synthetic workload: plain jobs, or arrays of one shape with a limit.
struct Workload {
    array_tasks: u32,
    /// The array being submitted: its first id, its task, and the tasks left.
    current: Option<(JobId, gpool_core::JobSpec, u32)>,
}

impl Workload {
    fn next(&mut self, rng: &mut Rng, gpus_per_node: u32, id: u64, submit: Time) -> gpool_core::JobSpec {
        if self.array_tasks <= 1 {
            return synthetic::job(rng, gpus_per_node, submit);
        }
        let (first, spec, left) = match self.current.take() {
            Some((first, spec, left)) if left > 0 => (first, spec, left),
            _ => {
                let mut spec = synthetic::job(rng, gpus_per_node, submit);
                let limit = (self.array_tasks / 4).max(1);
                spec.array = Some(gpool_core::ArrayLimit { of: JobId(id), limit });
                (JobId(id), spec, self.array_tasks)
            }
        };
        let mut task = spec.clone();
        task.submit_time = submit;
        self.current = Some((first, spec, left - 1));
        task
    }
}

/// Benchmark results. Times in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleBenchResult {
    /// Median over the steady-state passes.
    pub pass_ms: f64,
    pub p90_pass_ms: f64,
    pub max_pass_ms: f64,
    /// The first pass, which fills an empty cluster.
    pub first_pass_ms: f64,
    pub first_pass_started: usize,
    pub jobs_started: usize,
    pub preemptions: usize,
    /// Pending and running at the end.
    pub pending: usize,
    pub running: usize,
    pub passes: u32,
    /// Median number of pending jobs a steady-state pass examined.
    pub examined: u32,
    /// Median number a steady-state pass skipped through the shape caches.
    pub cache_hits: u32,
    /// Median number of victim searches per steady-state pass.
    pub preemption_searches: u32,
    pub gpus: u64,
}

fn apply(snap: &mut Snapshot, plan: &Plan) -> Result<(), gpool_core::SnapshotError> {
    for p in &plan.preemptions {
        snap.stop(p.victim, plan.now, StopOutcome::Requeue { not_before: Time::MIN })?;
    }
    for s in &plan.starts {
        snap.start(s.job, s.placement.clone(), plan.now)?;
    }
    snap.carry_over(plan);
    Ok(())
}

fn timed(snap: &Snapshot, now: Time) -> (Plan, f64) {
    let t = Instant::now();
    let plan = schedule(snap, now);
    (plan, t.elapsed().as_secs_f64() * 1000.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs the benchmark; `progress(done, total)` is called after every pass.
pub fn run(
    cfg: &ScheduleBench,
    mut progress: impl FnMut(u32, u32),
) -> Result<ScheduleBenchResult, gpool_core::SnapshotError> {
    let mut rng = Rng::new(cfg.seed);
    // Measure the worst case: within-class preemption acting in every pass,
    // as under a sustained overload (the gate would keep it shut for the
    // bench's first 6 virtual hours).
    let mut policy = cfg.policy.clone();
    policy.preemption.overload = None;
    let mut snap = Snapshot::new(policy);
    for (i, n) in synthetic::cluster(cfg.nodes, cfg.gpus_per_node).into_iter().enumerate() {
        let id = snap.add_node(n)?;
        if (i as u32) < cfg.degraded_nodes {
            snap.set_degraded_gpus(id, &[0])?;
        }
    }
    let mut next_id = 1u64;
    let mut now = Time::from_secs(1_700_000_000);
    let mut work = Workload { array_tasks: cfg.array_tasks, current: None };
    for i in 0..cfg.pending {
        let submit = Time::from_secs(now.as_millis() / 1000 - i64::from(cfg.pending - i));
        snap.submit(JobId(next_id), work.next(&mut rng, cfg.gpus_per_node, next_id, submit))?;
        next_id += 1;
    }
    let (plan, first_pass_ms) = timed(&snap, now);
    let first_pass_started = plan.starts.len();
    let (mut started, mut preemptions) = (plan.starts.len(), plan.preemptions.len());
    apply(&mut snap, &plan)?;
    progress(1, cfg.passes);

    let mut times = Vec::new();
    let mut examined = Vec::new();
    let mut hits = Vec::new();
    let mut searches = Vec::new();
    for pass in 1..cfg.passes {
        now = now.plus(Duration::from_secs(60));
        let running: Vec<JobId> =
            snap.running_jobs().map(|j| j.id).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let churn = (running.len() / 50).max(1);
        for _ in 0..churn.min(running.len()) {
            let victim = running[rng.range(0, running.len() as u64) as usize];
            if snap.job(victim).and_then(|j| j.running()).is_some() {
                snap.stop(victim, now, StopOutcome::Finished { success: true })?;
            }
        }
        while snap.pending_count() < cfg.pending as usize {
            snap.submit(JobId(next_id), work.next(&mut rng, cfg.gpus_per_node, next_id, now))?;
            next_id += 1;
        }
        let (plan, ms) = timed(&snap, now);
        times.push(ms);
        examined.push(plan.stats.examined);
        hits.push(plan.stats.cache_hits);
        searches.push(plan.stats.preemption_searches);
        started += plan.starts.len();
        preemptions += plan.preemptions.len();
        apply(&mut snap, &plan)?;
        progress(pass + 1, cfg.passes);
    }
    times.sort_by(f64::total_cmp);
    let median = |mut v: Vec<u32>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    Ok(ScheduleBenchResult {
        pass_ms: percentile(&times, 0.5),
        p90_pass_ms: percentile(&times, 0.9),
        max_pass_ms: times.last().copied().unwrap_or(0.0),
        first_pass_ms,
        first_pass_started,
        jobs_started: started,
        preemptions,
        pending: snap.pending_count(),
        running: snap.running_count(),
        passes: cfg.passes,
        examined: median(examined),
        cache_hits: median(hits),
        preemption_searches: median(searches),
        gpus: u64::from(cfg.nodes) * u64::from(cfg.gpus_per_node),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_bench_runs_and_keeps_the_queue_full() {
        let cfg = ScheduleBench {
            pending: 300,
            nodes: 20,
            gpus_per_node: 8,
            passes: 5,
            policy: Policy::gpool_default(),
            seed: 1,
            degraded_nodes: 0,
            array_tasks: 0,
        };
        let mut calls = 0;
        let r = run(&cfg, |_, _| calls += 1).expect("bench");
        assert_eq!(calls, 5);
        assert!(r.first_pass_started > 0 && r.jobs_started >= r.first_pass_started);
        assert!(r.pending >= 250, "queue refilled: {r:?}");
        assert!(r.running > 0);
    }

    #[test]
    fn arrays_hold_their_tasks_to_their_limit_in_the_bench() {
        let cfg = ScheduleBench {
            pending: 400,
            nodes: 1_000,
            gpus_per_node: 8,
            passes: 2,
            policy: Policy::gpool_default(),
            seed: 1,
            degraded_nodes: 0,
            array_tasks: 40,
        };
        let arrays = run(&cfg, |_, _| {}).expect("bench");
        let plain = run(&ScheduleBench { array_tasks: 0, ..cfg }, |_, _| {}).expect("bench");
        // Room for every job: plain, nearly all start; ten arrays of forty, at most ten each at once.
        assert!(arrays.first_pass_started <= 100, "{arrays:?}");
        assert!(plain.first_pass_started > 300, "{plain:?}");
    }
}
