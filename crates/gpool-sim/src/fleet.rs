//! Elastic node pools in the simulation: the autoscaler of gpool-core
//! (`gpool_core::autoscale::plan_scaling`, as the daemon calls it) after
//! every pass, nodes that register `boot_delay` after they were asked for,
//! spot pools that replay an availability trace (reclaims and failed
//! creations), and what every node cost while it existed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use gpool_core::autoscale::{DeleteWhy, PoolNode, PoolNodeState, PoolState, plan_scaling, waiting_for_room};
use gpool_core::pools::{PoolConfig, PoolHealth};
use gpool_core::{NodeId, NodeState, Plan, Snapshot, SnapshotError, Time};

use crate::spot::Availability;

/// Elastic pools to simulate.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    pub pools: Vec<PoolConfig>,
    /// Spot availability per pool (same order); `None`: always available.
    pub availability: Vec<Option<Availability>>,
    pub max_dollars_per_hour: Option<f64>,
    /// From a creation to the node taking work.
    pub boot_delay: Duration,
    /// How often jobs checkpoint: a reclaimed job loses what it did since its last one.
    pub checkpoint_interval: Duration,
    /// At most this many waiting jobs are packed per autoscaler call (the rest wait for the next).
    pub max_waiting: usize,
}

/// What the fleet did and cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetReport {
    /// Per pool: (name, dollars, node-hours, nodes created, creations failed, nodes reclaimed).
    pub pools: Vec<PoolReport>,
    pub total_dollars: f64,
    /// GPU-hours of work reclaimed jobs lost (since their last checkpoint).
    pub lost_gpu_hours: f64,
    /// GPU-hours the jobs ran, lost work included.
    pub used_gpu_hours: f64,
    pub reclaimed_jobs: u64,
    /// The most nodes alive at once.
    pub peak_nodes: u32,
}

/// One pool's part of a [`FleetReport`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolReport {
    pub name: String,
    pub kind: &'static str,
    pub dollars: f64,
    pub node_hours: f64,
    pub created: u64,
    pub failed: u64,
    pub reclaimed: u64,
}

#[derive(Clone, Debug)]
struct FleetNode {
    pool: usize,
    name: Arc<str>,
    created_ms: i64,
    /// `None` while booting.
    id: Option<NodeId>,
    idle_since: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Ready(u64),
    SpotChange(usize),
}

/// The pools' live nodes and their accounts.
pub struct Fleet {
    cfg: FleetConfig,
    /// Live nodes by a sequence number (booting or up).
    live: std::collections::BTreeMap<u64, FleetNode>,
    health: Vec<PoolHealth>,
    due: BinaryHeap<Reverse<(i64, Due)>>,
    /// Snapshot slots of deleted nodes, reused for new ones.
    free_ids: Vec<NodeId>,
    seq: u64,
    wake: Option<i64>,
    report: FleetReport,
}

impl Fleet {
    /// The fleet at time 0: every pool at its `min`, up.
    pub fn new(cfg: FleetConfig, snap: &mut Snapshot) -> Result<Fleet, SnapshotError> {
        let report = FleetReport {
            pools: cfg
                .pools
                .iter()
                .map(|p| PoolReport { name: p.name().to_string(), kind: p.pool.kind.as_str(), ..Default::default() })
                .collect(),
            ..Default::default()
        };
        let mut f = Fleet {
            health: vec![PoolHealth::default(); cfg.pools.len()],
            live: Default::default(),
            due: BinaryHeap::new(),
            free_ids: Vec::new(),
            seq: 0,
            wake: None,
            report,
            cfg,
        };
        for pi in 0..f.cfg.pools.len() {
            for _ in 0..f.cfg.pools[pi].min {
                let s = f.create(pi, 0);
                f.ready(s, 0, snap)?;
            }
            if let Some(a) = &f.cfg.availability[pi]
                && let Some(t) = a.next_change(0)
            {
                f.due.push(Reverse((t, Due::SpotChange(pi))));
            }
        }
        Ok(f)
    }

    /// The most GPUs the pools can hold, and the most per node.
    pub fn capacity(cfg: &FleetConfig) -> (u64, u32) {
        let total = cfg.pools.iter().map(|p| u64::from(p.max) * u64::from(p.shape.gpus)).sum();
        let per = cfg.pools.iter().map(|p| p.shape.gpus).max().unwrap_or(0);
        (total, per)
    }

    /// When the fleet next has something to do.
    pub fn next_event(&self) -> Option<i64> {
        let due = self.due.peek().map(|Reverse((t, _))| *t);
        match (due, self.wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether nodes are booting (pending jobs may be waiting for them).
    pub fn booting(&self) -> bool {
        self.live.values().any(|n| n.id.is_none())
    }

    fn create(&mut self, pi: usize, now_ms: i64) -> u64 {
        self.seq += 1;
        let name: Arc<str> = Arc::from(format!("{}-{}", self.cfg.pools[pi].name(), self.seq));
        self.live.insert(self.seq, FleetNode { pool: pi, name, created_ms: now_ms, id: None, idle_since: None });
        self.report.pools[pi].created += 1;
        self.report.peak_nodes = self.report.peak_nodes.max(self.live.len() as u32);
        self.seq
    }

    fn ready(&mut self, seq: u64, now_ms: i64, snap: &mut Snapshot) -> Result<(), SnapshotError> {
        let Some(n) = self.live.get_mut(&seq) else { return Ok(()) };
        let node = self.cfg.pools[n.pool].template(&n.name);
        let id = match self.free_ids.pop() {
            Some(id) => {
                snap.replace_node(id, node)?;
                id
            }
            None => snap.add_node(node)?,
        };
        n.id = Some(id);
        n.idle_since = Some(now_ms);
        self.health[n.pool].succeeded();
        Ok(())
    }

    /// Removes a node and charges its life. Its jobs must be gone.
    fn remove(&mut self, seq: u64, now_ms: i64, snap: &mut Snapshot) -> Result<(), SnapshotError> {
        let Some(n) = self.live.remove(&seq) else { return Ok(()) };
        self.charge(&n, now_ms);
        if let Some(id) = n.id {
            snap.set_node_state(id, NodeState::Down)?;
            self.free_ids.push(id);
        }
        Ok(())
    }

    fn charge(&mut self, n: &FleetNode, now_ms: i64) {
        let hours = (now_ms - n.created_ms).max(0) as f64 / 3_600_000.0;
        let r = &mut self.report.pools[n.pool];
        r.node_hours += hours;
        r.dollars += hours * self.cfg.pools[n.pool].price_per_node_hour;
    }

    /// Carries out what is due at `now_ms`; returns the nodes whose jobs the
    /// caller must stop as reclaimed (then call [`Fleet::reclaimed`]).
    pub fn advance(&mut self, now_ms: i64, snap: &mut Snapshot) -> Result<Vec<(u64, NodeId)>, SnapshotError> {
        let mut reclaim = Vec::new();
        if self.wake.is_some_and(|w| w <= now_ms) {
            self.wake = None;
        }
        while let Some(Reverse((t, due))) = self.due.peek().copied() {
            if t > now_ms {
                break;
            }
            self.due.pop();
            match due {
                Due::Ready(seq) => self.ready(seq, now_ms, snap)?,
                Due::SpotChange(pi) => {
                    let allowed = self.allowed(pi, now_ms);
                    let mut mine: Vec<u64> = self.live.iter().filter(|(_, n)| n.pool == pi).map(|(s, _)| *s).collect();
                    // The newest go first.
                    while mine.len() as u32 > allowed {
                        let Some(seq) = mine.pop() else { break };
                        self.report.pools[pi].reclaimed += 1;
                        match self.live.get(&seq).and_then(|n| n.id) {
                            Some(id) => reclaim.push((seq, id)),
                            None => self.remove(seq, now_ms, snap)?,
                        }
                    }
                    if let Some(t) = self.cfg.availability[pi].as_ref().and_then(|a| a.next_change(now_ms)) {
                        self.due.push(Reverse((t, Due::SpotChange(pi))));
                    }
                }
            }
        }
        Ok(reclaim)
    }

    /// A reclaimed node, its jobs stopped: it is gone.
    pub fn reclaimed(&mut self, seq: u64, now_ms: i64, snap: &mut Snapshot) -> Result<(), SnapshotError> {
        self.remove(seq, now_ms, snap)
    }

    /// How many nodes pool `pi` may hold at `t_ms` by its spot market.
    fn allowed(&self, pi: usize, t_ms: i64) -> u32 {
        let max = self.cfg.pools[pi].max;
        match &self.cfg.availability[pi] {
            Some(a) => (a.at(t_ms) * f64::from(max) + 1e-9).floor() as u32,
            None => max,
        }
    }

    /// After a pass has been applied: the autoscaler's plan, carried out.
    /// A creation the spot market refuses fails at once, and the autoscaler
    /// looks again (as the daemon does when a provider reports a failure).
    pub fn after_pass(&mut self, now_ms: i64, snap: &mut Snapshot, plan: &Plan) -> Result<(), SnapshotError> {
        for _ in 0..4 {
            if !self.scale(now_ms, snap, plan)? {
                break;
            }
        }
        Ok(())
    }

    /// One autoscaler call; whether a creation failed.
    fn scale(&mut self, now_ms: i64, snap: &mut Snapshot, plan: &Plan) -> Result<bool, SnapshotError> {
        let now = Time::from_millis(now_ms);
        let mut failed = false;
        for n in self.live.values_mut() {
            if let Some(id) = n.id {
                let busy = snap.jobs_on(id).next().is_some();
                n.idle_since = if busy { None } else { Some(n.idle_since.unwrap_or(now_ms)) };
            }
        }
        let mut waiting = waiting_for_room(snap, plan);
        waiting.truncate(self.cfg.max_waiting);
        let states: Vec<PoolState<'_>> = self
            .cfg
            .pools
            .iter()
            .enumerate()
            .map(|(pi, cfg)| PoolState {
                config: cfg,
                nodes: self
                    .live
                    .values()
                    .filter(|n| n.pool == pi)
                    .map(|n| PoolNode {
                        name: n.name.clone(),
                        state: match (n.id, n.idle_since) {
                            (None, _) => PoolNodeState::Booting { since: Time::from_millis(n.created_ms) },
                            (Some(_), Some(s)) => PoolNodeState::Idle { since: Time::from_millis(s) },
                            (Some(_), None) => PoolNodeState::Busy,
                        },
                    })
                    .collect(),
                health: self.health[pi].clone(),
            })
            .collect();
        let scale = plan_scaling(&states, &waiting, self.cfg.max_dollars_per_hour, now);
        drop(states);
        for d in &scale.delete {
            let Some(seq) = self.live.iter().find(|(_, n)| n.name == d.node).map(|(s, _)| *s) else { continue };
            let pi = self.live[&seq].pool;
            if d.why == DeleteWhy::BootTimeout {
                self.health[pi].failed(&self.cfg.pools[pi].retry, now);
                self.report.pools[pi].failed += 1;
            }
            self.remove(seq, now_ms, snap)?;
        }
        for c in &scale.create {
            let Some(pi) = self.cfg.pools.iter().position(|p| p.pool.name == c.pool) else { continue };
            for _ in 0..c.count {
                let live = self.live.values().filter(|n| n.pool == pi).count() as u32;
                if live >= self.allowed(pi, now_ms) {
                    // The spot market has no room: the creation fails at once.
                    self.health[pi].failed(&self.cfg.pools[pi].retry, now);
                    self.report.pools[pi].failed += 1;
                    failed = true;
                    break;
                }
                let seq = self.create(pi, now_ms);
                let ready = now_ms + i64::try_from(self.cfg.boot_delay.as_millis()).unwrap_or(0);
                self.due.push(Reverse((ready, Due::Ready(seq))));
            }
        }
        // A failure just now changes the health the plan was made with: look again when it changes.
        let retry = self.health.iter().filter_map(|h| h.next_change(now)).map(Time::as_millis).min();
        self.wake = [scale.wake_at.map(Time::as_millis), retry].into_iter().flatten().filter(|t| *t > now_ms).min();
        Ok(failed)
    }

    /// Records work a reclaimed job lost, and GPU time used.
    pub fn lost(&mut self, gpu_hours: f64) {
        self.report.lost_gpu_hours += gpu_hours;
        self.report.reclaimed_jobs += 1;
    }

    /// How long jobs go between checkpoints.
    pub fn checkpoint_ms(&self) -> i64 {
        i64::try_from(self.cfg.checkpoint_interval.as_millis()).unwrap_or(i64::MAX)
    }

    /// The report, with every node still alive charged until `end_ms`.
    pub fn finish(mut self, end_ms: i64, used_gpu_hours: f64) -> FleetReport {
        let live: Vec<FleetNode> = self.live.values().cloned().collect();
        for n in &live {
            self.charge(n, end_ms);
        }
        self.report.total_dollars = self.report.pools.iter().map(|p| p.dollars).sum();
        self.report.used_gpu_hours = used_gpu_hours;
        self.report
    }
}
