//! The dashboard's overview (`GET /api/v1/overview`): GPUs by what they
//! do per pool and model, every GPU as a heat-map cell, the queue and its
//! waits, the alerts firing. Aggregated here so that the page reads one
//! small document whatever the size of the cluster.

use std::collections::BTreeMap;

use gpool_api as api;

use super::Controller;
use crate::plane::auth::Caller;
use crate::plane::telemetry::IDLE_UTIL;

/// The `q`-quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get(((last as f64) * q).round() as usize).copied()
}

fn percent(x: f64) -> u8 {
    x.clamp(0.0, 100.0).round() as u8
}

impl Controller {
    pub(super) fn overview(&self, caller: &Caller, now: i64) -> api::Overview {
        let nodes = self.nodes();
        let mut counts: BTreeMap<(String, String, String), api::GpuCount> = BTreeMap::new();
        let mut heat = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let takes_work = n.state == "up";
            let mut cells = api::NodeHeat {
                node: n.name.clone(),
                pool: n.pool.clone(),
                state: n.state.clone(),
                ..api::NodeHeat::default()
            };
            for (at, d) in n.devices.iter().enumerate() {
                let t = d.telemetry.as_ref();
                let util = t.and_then(|t| t.gpu_util).filter(|u| u.is_finite());
                let memory = t.and_then(|t| match (t.memory_used_mb, t.memory_total_mb) {
                    (Some(u), Some(m)) if m > 0 => Some(percent(u as f64 / m as f64 * 100.0)),
                    _ => None,
                });
                let shared = !d.shares.is_empty() || d.mig.iter().any(|m| m.job.is_some());
                let held = d.job.is_some() || shared;
                let key = (n.pool.clone(), d.model.clone(), d.kind.clone());
                let c = counts.entry(key).or_insert_with(|| api::GpuCount {
                    pool: n.pool.clone(),
                    model: d.model.clone(),
                    kind: d.kind.clone(),
                    ..api::GpuCount::default()
                });
                match (takes_work, held) {
                    (false, _) => c.down += 1,
                    (true, false) => c.free += 1,
                    (true, true) if util.is_some_and(|u| u < IDLE_UTIL) => c.idle += 1,
                    (true, true) => c.busy += 1,
                }
                cells.index.push(d.index);
                cells.util.push(util.map(percent));
                cells.memory.push(memory);
                cells.job.push(d.job);
                if shared {
                    cells.shared.push(at as u32);
                }
                if d.degraded.is_some() {
                    cells.degraded.push(at as u32);
                }
            }
            heat.push(cells);
        }
        let mut waits: Vec<f64> = self
            .jobs
            .values()
            .filter(|d| d.state == api::JobState::Pending)
            .map(|d| (now - d.queued_ms.unwrap_or(d.submitted_ms)).max(0) as f64 / 1000.0)
            .collect();
        waits.sort_by(f64::total_cmp);
        let running =
            self.jobs.values().filter(|d| matches!(d.state, api::JobState::Running | api::JobState::Stopping));
        api::Overview {
            gpus: counts.into_values().collect(),
            heat,
            pending: waits.len() as u64,
            running: running.count() as u64,
            wait_p50_s: quantile(&waits, 0.5),
            wait_p90_s: quantile(&waits, 0.9),
            wait_max_s: waits.last().copied(),
            alerts: self.alerts(caller),
        }
    }
}
