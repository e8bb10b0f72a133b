//! Power budgets (issue 24): watts for a node, for the nodes with a label
//! (a rack, a row, a room) or for a pool, which the pass never lets its
//! starts take over.
//!
//! A node's draw is counted as: every GPU at its idle draw, plus, for each
//! replica running on it, its GPUs' share of (the job's expected draw per
//! GPU − idle). A job's expected draw is what the shell learned for it (its
//! history) or, without one, the GPU's power limit (`NodePower::max_watts`):
//! a budget is kept against what the jobs could draw, not what they drew a
//! moment ago. A node without `NodePower` draws nothing in this count.
//!
//! A start is allowed only if every budget over its node stays within its
//! watts; jobs are looked at in the pass's order, so the budget goes to
//! higher-priority work first. Budgets never preempt for a pending job. A
//! budget already exceeded (lowered live) starts nothing more there.

use crate::model::job::Job;
pub use crate::model::node::NodePower;
use crate::model::resources::GpuMilli;
use crate::pass::snapshot::Snapshot;
pub use crate::policies::power_budget::{PowerBudget, PowerScope};

/// Watts a replica of `job` adds on a node over its GPUs' idle draw, for `units` thousandths of GPUs.
pub(crate) fn replica_watts(job: &Job, power: &NodePower, units: GpuMilli) -> u64 {
    let per_gpu = job.spec.watts_per_gpu.unwrap_or(power.max_watts).max(power.idle_watts) - power.idle_watts;
    u64::from(per_gpu) * units / 1000
}

/// The budgets during a pass: what each has used, kept current as replicas are placed.
#[derive(Clone, Debug, Default)]
pub(crate) struct PowerState {
    budgets: Vec<(PowerBudget, u64)>,
    /// For each node, the budgets over it.
    of_node: Vec<Vec<usize>>,
}

impl PowerState {
    /// `None` when no budget is set.
    pub(crate) fn new(snap: &Snapshot) -> Option<PowerState> {
        PowerState::counting(snap, |n| node_draw(snap, n))
    }

    /// The budgets of the cluster with nothing running: every GPU idle.
    pub(crate) fn idle(snap: &Snapshot) -> Option<PowerState> {
        PowerState::counting(snap, |n| {
            let e = &snap.nodes[n];
            e.node.power.map_or(0, |p| e.node.devices.len() as u64 * u64::from(p.idle_watts))
        })
    }

    fn counting(snap: &Snapshot, node_draw: impl Fn(usize) -> u64) -> Option<PowerState> {
        if snap.power_budgets.is_empty() {
            return None;
        }
        let mut s = PowerState {
            budgets: snap.power_budgets.iter().map(|b| (b.clone(), 0)).collect(),
            of_node: vec![Vec::new(); snap.nodes.len()],
        };
        for (n, e) in snap.nodes.iter().enumerate() {
            s.of_node[n] = (0..s.budgets.len()).filter(|&b| s.budgets[b].0.scope.covers(&e.node)).collect();
            let draw = node_draw(n);
            for &b in &s.of_node[n] {
                s.budgets[b].1 += draw;
            }
        }
        Some(s)
    }

    /// Whether `watts` more on node `n` keeps every budget over it.
    pub(crate) fn fits(&self, n: u32, watts: u64) -> bool {
        self.of_node[n as usize].iter().all(|&b| self.budgets[b].1 + watts <= u64::from(self.budgets[b].0.watts))
    }

    pub(crate) fn add(&mut self, n: u32, watts: u64) {
        for &b in &self.of_node[n as usize] {
            self.budgets[b].1 += watts;
        }
    }

    pub(crate) fn remove(&mut self, n: u32, watts: u64) {
        for &b in &self.of_node[n as usize] {
            self.budgets[b].1 = self.budgets[b].1.saturating_sub(watts);
        }
    }

    /// The budget over node `n` with the least room for `watts` more, if one lacks it.
    pub(crate) fn blocking(&self, n: u32, watts: u64) -> Option<(&PowerBudget, u64)> {
        self.of_node[n as usize]
            .iter()
            .map(|&b| (&self.budgets[b].0, self.budgets[b].1))
            .filter(|(b, used)| used + watts > u64::from(b.watts))
            .min_by_key(|(b, used)| i64::from(b.watts) - *used as i64)
    }

    /// Each budget and its use.
    pub(crate) fn usage(&self) -> impl Iterator<Item = (&PowerBudget, u64)> {
        self.budgets.iter().map(|(b, u)| (b, *u))
    }
}

/// A node's counted draw now: idle GPUs, plus its running replicas' extra.
pub(crate) fn node_draw(snap: &Snapshot, n: usize) -> u64 {
    let e = &snap.nodes[n];
    let Some(power) = e.node.power else { return 0 };
    let gpus = e.node.devices.len() as u64;
    let mut draw = gpus * u64::from(power.idle_watts);
    for id in &e.jobs {
        let Some(job) = snap.job(*id) else { continue };
        let Some(run) = job.running() else { continue };
        let units: GpuMilli =
            run.placement.iter().filter(|r| r.node.0 as usize == n).map(|r| r.gpu_units() + e.mig_units(r.mig)).sum();
        draw += replica_watts(job, &power, units);
    }
    draw
}

/// Every budget and what it has used now, for reports.
pub fn budget_use(snap: &Snapshot) -> Vec<(PowerBudget, u64)> {
    PowerState::new(snap).map(|s| s.usage().map(|(b, u)| (b.clone(), u)).collect()).unwrap_or_default()
}

/// Running jobs to stop (with their grace period, then requeue) because a
/// budget is over its watts, as after it was lowered live: over each such
/// budget, preemptible jobs first, then the lowest priority, then the
/// latest started (the least work lost), until what stays is within the
/// budget. Jobs already stopping count as gone, and are not listed again.
pub(crate) fn over_budget_stops(snap: &Snapshot) -> Vec<crate::model::job::JobId> {
    let Some(state) = PowerState::new(snap) else { return Vec::new() };
    let mut chosen: Vec<crate::model::job::JobId> = Vec::new();
    // A job's counted watts on the nodes of budget `b`.
    let watts_in = |job: &Job, b: &PowerBudget| -> u64 {
        let Some(run) = job.running() else { return 0 };
        run.placement
            .iter()
            .filter(|r| b.scope.covers(&snap.nodes[r.node.index()].node))
            .filter_map(|r| {
                let e = &snap.nodes[r.node.index()];
                e.node.power.map(|p| replica_watts(job, &p, r.gpu_units() + e.mig_units(r.mig)))
            })
            .sum()
    };
    for (b, used) in state.usage() {
        if used <= u64::from(b.watts) {
            continue;
        }
        let mut jobs: Vec<&Job> = snap
            .running_jobs()
            .filter(|j| {
                j.running()
                    .is_some_and(|r| r.placement.iter().any(|p| b.scope.covers(&snap.nodes[p.node.index()].node)))
            })
            .collect();
        // Already going, or chosen for another budget: their watts leave.
        let mut left = used;
        jobs.retain(|j| {
            let going = j.running().is_some_and(|r| r.stopping.is_some()) || chosen.contains(&j.id);
            if going {
                left = left.saturating_sub(watts_in(j, b));
            }
            !going
        });
        jobs.sort_by_key(|j| {
            let started = j.running().map_or(0, |r| r.started.as_millis());
            (!j.spec.preemptible, j.spec.priority, std::cmp::Reverse(started), std::cmp::Reverse(j.id))
        });
        for j in jobs {
            if left <= u64::from(b.watts) {
                break;
            }
            left = left.saturating_sub(watts_in(j, b));
            chosen.push(j.id);
        }
    }
    chosen
}
