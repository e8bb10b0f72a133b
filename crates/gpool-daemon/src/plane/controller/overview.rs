//! The dashboard's overview (`GET /api/v1/overview`): GPUs by what they
//! do per pool and model, every GPU as a heat-map cell, the queue and its
//! waits, the alerts firing. Aggregated here so that the page reads one
//! small document whatever the size of the cluster.

use std::collections::BTreeMap;

use gpool_api as api;

use super::views::Reading;
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

impl Reading<'_> {
    pub(super) fn overview(&self, caller: &Caller, now: i64) -> api::Overview {
        let mut counts: BTreeMap<(String, String, String), api::GpuCount> = BTreeMap::new();
        let mut heat = Vec::new();
        // Straight from the snapshot, not through the nodes' full views: this
        // is read by every open overview page, on 1,000 nodes.
        for (id, n) in self.snap.nodes().filter(|(id, _)| self.links.contains_key(id)) {
            let takes_work = n.state.as_str() == "up";
            // Per GPU slot and per MIG slot of the node: the job holding it whole, or whether it is shared.
            let (mut whole, mut shared_bits, mut mig_bits) = (BTreeMap::new(), 0u64, 0u64);
            for j in self.snap.jobs_on(id) {
                let Some(r) = self.snap.job(j).and_then(|x| x.running()) else { continue };
                for p in r.placement.iter().filter(|p| p.node == id) {
                    mig_bits |= p.mig;
                    if p.share.is_some() {
                        shared_bits |= p.gpus;
                    } else {
                        (0..64).filter(|b| p.gpus & (1u64 << b) != 0).for_each(|b| {
                            whole.insert(b, j.0);
                        });
                    }
                }
            }
            let mut cells = api::NodeHeat {
                node: n.name.to_string(),
                pool: n.pool.name.to_string(),
                state: n.state.as_str().into(),
                ..api::NodeHeat::default()
            };
            // What placement keeps out, read once per node (no node has any, mostly).
            let out = self.snap.quarantined_gpus(id);
            let (mut gslot, mut mslot) = (0u32, 0u32);
            for (at, d) in n.devices.iter().enumerate() {
                let (job, shared) = match &d.mig {
                    None => {
                        let slot = gslot;
                        gslot += 1;
                        (whole.get(&slot).copied(), shared_bits & (1u64 << slot) != 0)
                    }
                    Some(list) => {
                        let mask = (0..list.len() as u32).fold(0u64, |m, i| m | 1u64 << (mslot + i));
                        mslot += list.len() as u32;
                        (None, mig_bits & mask != 0)
                    }
                };
                let t = self.telemetry.gpu(&n.name, d.index).map(|t| &t.sample);
                let util = t.and_then(|t| t.gpu_util_pct).filter(|u| u.is_finite());
                let memory = t.and_then(|t| match (t.memory_used_mb, t.memory_total_mb) {
                    (Some(u), Some(m)) if m > 0 => Some(percent(u as f64 / m as f64 * 100.0)),
                    _ => None,
                });
                let (model, kind) = (d.model.to_string(), d.kind.to_string());
                let c = counts.entry((cells.pool.clone(), model.clone(), kind.clone())).or_insert_with(|| {
                    api::GpuCount { pool: cells.pool.clone(), model, kind, ..api::GpuCount::default() }
                });
                match (takes_work, job.is_some() || shared) {
                    (false, _) => c.down += 1,
                    (true, false) => c.free += 1,
                    (true, true) if util.is_some_and(|u| u < IDLE_UTIL) => c.idle += 1,
                    (true, true) => c.busy += 1,
                }
                cells.index.push(d.index);
                cells.util.push(util.map(percent));
                cells.memory.push(memory);
                cells.job.push(job);
                if shared {
                    cells.shared.push(at as u32);
                }
                if self.telemetry.degraded(&n.name, d.index).is_some() {
                    cells.degraded.push(at as u32);
                }
                if out.contains(&d.index) {
                    cells.quarantined.push(at as u32);
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
