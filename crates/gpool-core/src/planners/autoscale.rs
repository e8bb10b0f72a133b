//! The node autoscaler: a planner beside [`crate::schedule`], pure like it.
//!
//! From the node pools (their nodes booting, idle or busy, their health and
//! limits), the jobs the scheduler could not place, an hourly spending cap
//! and the time, [`plan_scaling`] returns which nodes to create in which
//! pool and which to delete. It estimates as the Kubernetes cluster
//! autoscaler does: it packs the waiting jobs, in rank order, onto nodes of
//! each pool's shape (first the nodes already booting or idle, then new
//! ones), and creates what it packed onto new nodes.
//!
//! Rules it keeps (checked by `tests/autoscale.rs`):
//! - a gang gets nodes for all its replicas, or none are created for it;
//! - no pool goes above its `max`, nor the fleet above the spending cap;
//! - an idle node goes only after its pool's idle time, never below `min`;
//! - equal inputs give equal plans.
//!
//! A pool is chosen per job: the most preferred by the job (its
//! `preferredDuringScheduling` weights, `spot: preferred`), then the
//! cheapest for the nodes the job needs, then the first configured. A pool
//! backing off after a failure keeps its demand until it tries again; a pool
//! that is unavailable (failed repeatedly) passes its demand to the next.
//! MIG requests are not served by the autoscaler: pools have no MIG layout.

use std::fmt;
use std::sync::Arc;

use crate::model::job::{GpuRequest, GpuShare, JobId, JobSpec};
use crate::model::time::Time;
use crate::pass::plan::{PendingReason, Plan};
use crate::pass::snapshot::Snapshot;
use crate::planners::pools::{PoolConfig, PoolHealth};

/// Where a pool's node stands, as the shell knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolNodeState {
    /// Asked for at `since`; not registered yet.
    Booting { since: Time },
    /// Registered and running nothing since `since`.
    Idle { since: Time },
    /// Running at least one job, or draining.
    Busy,
}

/// One node of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolNode {
    pub name: Arc<str>,
    pub state: PoolNodeState,
}

/// A pool with its nodes and health, as the autoscaler reads it.
#[derive(Clone, Debug)]
pub struct PoolState<'a> {
    pub config: &'a PoolConfig,
    pub nodes: Vec<PoolNode>,
    pub health: PoolHealth,
}

impl PoolState<'_> {
    /// What the pool costs per hour now: its nodes, and at least the
    /// committed `min` of a reserved pool.
    pub fn spend_per_hour(&self) -> f64 {
        let paid = if self.config.pool.kind == crate::model::node::PoolKind::Reserved {
            self.nodes.len().max(self.config.min as usize)
        } else {
            self.nodes.len()
        };
        paid as f64 * self.config.price_per_node_hour
    }
}

/// Nodes to create in one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Create {
    pub pool: Arc<str>,
    pub count: u32,
    /// The jobs these nodes are for (empty when only `min` asks for them).
    pub for_jobs: Vec<JobId>,
}

/// Why a node is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteWhy {
    /// It ran nothing for its pool's idle time.
    Idle,
    /// It did not register within its pool's boot timeout (the shell counts
    /// this as a failure of the pool: [`PoolHealth::failed`]).
    BootTimeout,
    /// Its pool has more nodes than its `max` (the configuration changed).
    AboveMax,
}

impl DeleteWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteWhy::Idle => "idle",
            DeleteWhy::BootTimeout => "boot-timeout",
            DeleteWhy::AboveMax => "above-max",
        }
    }
}

/// A node to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    pub pool: Arc<str>,
    pub node: Arc<str>,
    pub why: DeleteWhy,
}

/// Why no node is created for a waiting job.
#[derive(Clone, Debug, PartialEq)]
pub enum Unmet {
    /// No pool's nodes could run it (shape, labels, GPU model, MIG, spot).
    NoPool,
    /// Every pool that could run it is unavailable after failures.
    Unavailable { until: Time },
    /// The pool it needs failed and tries again then.
    BackingOff { pool: Arc<str>, until: Time },
    /// The pools that could run it are at their `max`.
    AtMax,
    /// More nodes would take the fleet over its spending cap.
    OverBudget { cap_per_hour: f64 },
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::NoPool => f.write_str("no node pool's nodes could run it"),
            Unmet::Unavailable { until } => {
                write!(f, "every pool that could run it failed repeatedly; trying again at {until}")
            }
            Unmet::BackingOff { pool, until } => {
                write!(f, "pool {pool} failed to create a node; trying again at {until}")
            }
            Unmet::AtMax => f.write_str("the pools that could run it are at their maximum size"),
            Unmet::OverBudget { cap_per_hour } => {
                write!(f, "more nodes would take the fleet over its cap of ${cap_per_hour:.2} per hour")
            }
        }
    }
}

/// What the autoscaler decided.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ScalePlan {
    pub create: Vec<Create>,
    pub delete: Vec<Delete>,
    /// Waiting jobs no node is created for, and why.
    pub unmet: Vec<(JobId, Unmet)>,
    /// Jobs that nodes booting, idle or created now are expected to take.
    pub covered: Vec<JobId>,
    /// When a plan could differ with nothing else happening (an idle node's
    /// time is up, a boot times out, a pool may be tried again).
    pub wake_at: Option<Time>,
}

/// The jobs the scheduler left waiting for room, in the order it ranked
/// them: not those waiting for a dependency, a retry back-off, their
/// queue's quota or their victims. Call after applying `plan`.
pub fn waiting_for_room<'a>(snap: &'a Snapshot, plan: &Plan) -> Vec<(JobId, &'a JobSpec)> {
    let for_room = |r: Option<&PendingReason>| {
        !matches!(
            r,
            Some(
                PendingReason::Dependency { .. }
                    | PendingReason::DependencyFailed { .. }
                    | PendingReason::NotBefore { .. }
                    | PendingReason::ArrayLimit { .. }
                    | PendingReason::Begin { .. }
                    | PendingReason::Window { .. }
                    | PendingReason::Quota(_)
                    | PendingReason::WaitingForPreemption { .. }
            )
        )
    };
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (id, reason) in plan.waiting_reasons() {
        if let Some(job) = snap.job(id).filter(|j| j.running().is_none())
            && seen.insert(id)
            && for_room(Some(reason))
        {
            out.push((id, job.spec.as_ref()));
        }
    }
    if for_room(plan.others.as_ref()) {
        let mut rest: Vec<(JobId, &JobSpec)> = snap
            .pending_ids()
            .filter(|id| !seen.contains(id))
            .filter_map(|id| snap.job(id).map(|j| (id, j.spec.as_ref())))
            .collect();
        rest.sort_by_key(|(id, s)| (std::cmp::Reverse(s.priority), s.submit_time, *id));
        out.extend(rest);
    }
    out
}

/// One node of the estimate: what is left of it.
#[derive(Clone, Debug)]
struct Room {
    pool: usize,
    /// Free compute and memory of each GPU (thousandths, MiB).
    gpus: Vec<(u16, u64)>,
    cpus_milli: u64,
    memory_mb: u64,
    /// Which existing node, or `None` for one created by this plan.
    existing: Option<usize>,
    /// Jobs packed onto it in this plan.
    used: bool,
    /// The last job packed here (replicas of a self-repelling job spread).
    last_job: Option<JobId>,
}

impl Room {
    fn empty(pool: usize, cfg: &PoolConfig, existing: Option<usize>) -> Room {
        let s = &cfg.shape;
        Room {
            pool,
            gpus: vec![(1000, s.gpu_memory_mb); s.gpus as usize],
            cpus_milli: u64::from(s.cpus) * 1000,
            memory_mb: s.memory_mb,
            existing,
            used: false,
            last_job: None,
        }
    }

    /// Takes one replica of `spec` if it fits.
    fn take(&mut self, job: JobId, spec: &JobSpec, gpu_memory_mb: u64) -> bool {
        let r = &spec.replica;
        if r.cpus_milli > self.cpus_milli || r.memory_mb > self.memory_mb {
            return false;
        }
        if self.last_job == Some(job) && spec.repels(&spec.labels) {
            return false;
        }
        let whole = |count: u32, gpus: &mut Vec<(u16, u64)>| {
            let free: Vec<usize> = (0..gpus.len()).filter(|&i| gpus[i].0 == 1000).take(count as usize).collect();
            if free.len() < count as usize {
                return false;
            }
            for i in free {
                gpus[i] = (0, 0);
            }
            true
        };
        let ok = match &r.gpu {
            GpuRequest::None => true,
            GpuRequest::Gpus { count } => whole(*count, &mut self.gpus),
            GpuRequest::Memory { min_mb, count } => gpu_memory_mb >= *min_mb && whole(*count, &mut self.gpus),
            GpuRequest::Mig { .. } => false,
            GpuRequest::Share { milli, memory_mb } => {
                match GpuShare::on_device(*milli, *memory_mb, gpu_memory_mb) {
                    None => false,
                    Some(share) => {
                        // Best fit: the fullest GPU the share still fits on.
                        let best = (0..self.gpus.len())
                            .filter(|&i| self.gpus[i].0 >= share.milli && self.gpus[i].1 >= share.memory_mb)
                            .min_by_key(|&i| (self.gpus[i].0, i));
                        match best {
                            Some(i) => {
                                self.gpus[i].0 -= share.milli;
                                self.gpus[i].1 -= share.memory_mb;
                                true
                            }
                            None => false,
                        }
                    }
                }
            }
        };
        if ok {
            self.cpus_milli -= r.cpus_milli;
            self.memory_mb -= r.memory_mb;
            self.used = true;
            self.last_job = Some(job);
        }
        ok
    }
}

/// What the autoscaler should do now.
pub fn plan_scaling(
    pools: &[PoolState<'_>],
    waiting: &[(JobId, &JobSpec)],
    max_dollars_per_hour: Option<f64>,
    now: Time,
) -> ScalePlan {
    let mut plan = ScalePlan::default();
    let mut wake = Wake(None);
    let templates: Vec<_> = pools.iter().map(|p| p.config.template(&format!("{}-new", p.config.name()))).collect();
    let mut spend: f64 = pools.iter().map(PoolState::spend_per_hour).sum();
    let cap = max_dollars_per_hour.filter(|c| c.is_finite());
    let within_cap = |spend: f64, more: f64| cap.is_none_or(|c| spend + more <= c + 1e-9);

    // Nodes that count as room: booting within their timeout, and idle.
    let mut rooms: Vec<Room> = Vec::new();
    let mut count: Vec<u32> = Vec::with_capacity(pools.len());
    // Health as it is once this plan's boot time-outs count as failures (the
    // shell records them with `PoolHealth::failed` as it deletes the nodes).
    let mut health: Vec<PoolHealth> = pools.iter().map(|p| p.health.clone()).collect();
    for (pi, p) in pools.iter().enumerate() {
        let mut live = 0u32;
        for (ni, n) in p.nodes.iter().enumerate() {
            match n.state {
                PoolNodeState::Booting { since } => {
                    let deadline = since.plus(p.config.boot_timeout);
                    if now >= deadline {
                        health[pi].failed(&p.config.retry, now);
                        plan.delete.push(Delete {
                            pool: p.config.pool.name.clone(),
                            node: n.name.clone(),
                            why: DeleteWhy::BootTimeout,
                        });
                        continue;
                    }
                    wake.at(deadline);
                    rooms.push(Room::empty(pi, p.config, Some(ni)));
                }
                PoolNodeState::Idle { .. } => rooms.push(Room::empty(pi, p.config, Some(ni))),
                PoolNodeState::Busy => {}
            }
            live += 1;
        }
        count.push(live);
    }

    // Pack the waiting jobs, in order.
    let mut created: Vec<(u32, Vec<JobId>)> = vec![(0, Vec::new()); pools.len()];
    for &(job, spec) in waiting {
        let eligible: Vec<usize> = (0..pools.len())
            .filter(|&pi| spec.node_matches(&templates[pi]) && spec.model_allows(&pools[pi].config.shape.gpu_model))
            .filter(|&pi| Room::empty(pi, pools[pi].config, None).take(job, spec, pools[pi].config.shape.gpu_memory_mb))
            .collect();
        if eligible.is_empty() {
            plan.unmet.push((job, Unmet::NoPool));
            continue;
        }
        let ranked = rank_pools(&eligible, pools, &templates, spec, job);
        let rooms_before = rooms.len();
        let mut undo: Vec<(usize, Room)> = Vec::new();
        let mut left = spec.replicas;
        // Existing room first, in the job's pool order.
        'replicas: while left > 0 {
            for &pi in &ranked {
                if let Some(ri) = (0..rooms.len()).find(|&ri| {
                    rooms[ri].pool == pi && {
                        let mut trial = rooms[ri].clone();
                        trial.take(job, spec, pools[pi].config.shape.gpu_memory_mb)
                    }
                }) {
                    undo.push((ri, rooms[ri].clone()));
                    rooms[ri].take(job, spec, pools[pi].config.shape.gpu_memory_mb);
                    left -= 1;
                    continue 'replicas;
                }
            }
            break;
        }
        // The rest on new nodes of one pool, the first in order that can.
        let mut why: Option<Unmet> = None;
        if left > 0 {
            let mut done = false;
            for &pi in &ranked {
                let p = &pools[pi];
                let h = &health[pi];
                if h.unavailable_at(now) {
                    let until = h.retry_at.unwrap_or(now);
                    wake.at(until);
                    if why.is_none() {
                        why = Some(Unmet::Unavailable { until });
                    }
                    continue;
                }
                if !h.can_create(now) {
                    let until = h.retry_at.unwrap_or(now);
                    wake.at(until);
                    why = Some(Unmet::BackingOff { pool: p.config.pool.name.clone(), until });
                    break;
                }
                let mut extra: Vec<Room> = Vec::new();
                let mut placed = 0u32;
                let gpu_mb = p.config.shape.gpu_memory_mb;
                while placed < left {
                    if extra.last_mut().is_some_and(|r| r.take(job, spec, gpu_mb)) {
                        placed += 1;
                        continue;
                    }
                    let mut r = Room::empty(pi, p.config, None);
                    if !r.take(job, spec, gpu_mb) {
                        break;
                    }
                    extra.push(r);
                    placed += 1;
                }
                let n = extra.len() as u32;
                let price = f64::from(n) * p.config.price_per_node_hour;
                if placed < left || count[pi] + created[pi].0 + n > p.config.max {
                    if why.is_none() {
                        why = Some(Unmet::AtMax);
                    }
                    continue;
                }
                if !within_cap(spend, price) {
                    why = Some(Unmet::OverBudget { cap_per_hour: cap.unwrap_or(f64::INFINITY) });
                    continue;
                }
                spend += price;
                created[pi].0 += n;
                created[pi].1.push(job);
                rooms.extend(extra);
                done = true;
                break;
            }
            if !done {
                // All or nothing: give back what the job took of existing room.
                for (ri, before) in undo.into_iter().rev() {
                    rooms[ri] = before;
                }
                rooms.truncate(rooms_before);
                plan.unmet.push((job, why.unwrap_or(Unmet::AtMax)));
                continue;
            }
        }
        plan.covered.push(job);
    }

    // Pools below their minimum.
    for (pi, p) in pools.iter().enumerate() {
        let have = count[pi] + created[pi].0;
        if have < p.config.min {
            if !health[pi].can_create(now) {
                wake.at(health[pi].retry_at.unwrap_or(now));
                continue;
            }
            let n = p.config.min - have;
            // A reserved pool's minimum is paid already.
            let price = if p.config.pool.kind == crate::model::node::PoolKind::Reserved {
                0.0
            } else {
                f64::from(n) * p.config.price_per_node_hour
            };
            if within_cap(spend, price) {
                spend += price;
                created[pi].0 += n;
            }
        }
    }
    for (pi, (n, jobs)) in created.into_iter().enumerate() {
        if n > 0 {
            plan.create.push(Create { pool: pools[pi].config.pool.name.clone(), count: n, for_jobs: jobs });
        }
    }

    // Idle nodes nothing was packed onto go after their idle time, oldest
    // idle first, never below min; above max they go at once.
    for (pi, p) in pools.iter().enumerate() {
        let mut idle: Vec<(Time, &Arc<str>)> = rooms
            .iter()
            .filter(|r| r.pool == pi && !r.used)
            .filter_map(|r| r.existing)
            .filter_map(|ni| match p.nodes[ni].state {
                PoolNodeState::Idle { since } => Some((since, &p.nodes[ni].name)),
                _ => None,
            })
            .collect();
        idle.sort();
        let mut have = count[pi];
        for (since, name) in idle {
            let why = if have > p.config.max {
                DeleteWhy::AboveMax
            } else if have > p.config.min && now >= since.plus(p.config.idle_timeout) {
                DeleteWhy::Idle
            } else {
                if have > p.config.min {
                    wake.at(since.plus(p.config.idle_timeout));
                }
                continue;
            };
            plan.delete.push(Delete { pool: p.config.pool.name.clone(), node: name.clone(), why });
            have -= 1;
        }
    }
    plan.wake_at = wake.0.filter(|t| *t > now);
    plan
}

/// The earliest of several times.
struct Wake(Option<Time>);

impl Wake {
    fn at(&mut self, t: Time) {
        self.0 = Some(self.0.map_or(t, |w| w.min(t)));
    }
}

/// The job's pools, best first: most preferred, then cheapest for the
/// nodes the job needs, then cheapest per GPU-hour, then as configured.
fn rank_pools(
    eligible: &[usize],
    pools: &[PoolState<'_>],
    templates: &[crate::model::node::Node],
    spec: &JobSpec,
    job: JobId,
) -> Vec<usize> {
    let mut keyed: Vec<(std::cmp::Reverse<u32>, u64, u64, usize)> = eligible
        .iter()
        .map(|&pi| {
            let cfg = pools[pi].config;
            let mut nodes = 0u32;
            let mut room: Option<Room> = None;
            for _ in 0..spec.replicas {
                if room.as_mut().is_some_and(|r| r.take(job, spec, cfg.shape.gpu_memory_mb)) {
                    continue;
                }
                let mut r = Room::empty(pi, cfg, None);
                r.take(job, spec, cfg.shape.gpu_memory_mb);
                room = Some(r);
                nodes += 1;
            }
            // Prices compared in hundredths of a cent, so the key is exact.
            let cents = |dollars: f64| (dollars * 10_000.0).round().max(0.0) as u64;
            (
                std::cmp::Reverse(spec.node_preference(&templates[pi])),
                cents(f64::from(nodes) * cfg.price_per_node_hour),
                cents(cfg.price_per_gpu_hour()),
                pi,
            )
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|k| k.3).collect()
}
