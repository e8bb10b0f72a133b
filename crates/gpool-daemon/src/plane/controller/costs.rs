//! What GPU time costs, per job and by any grouping: every run is charged
//! from its allocation to its release at its node's price — the pool's
//! price per node-hour (spot at the spot price, reserved at its committed
//! rate) shared by GPU, or, on a node of no configured pool, the built-in
//! price of its GPU model (the spot price on a spot node). A run's cost goes
//! into the job's usage when it ends (`account_run`), so a job reclaimed or
//! preempted is charged only for what it held. `GET /api/v1/cost` and
//! `gpool cost` sum it by job, user, team, queue or pool over a period;
//! `/metrics` carries `gpool_cost_dollars_total`.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_core::cost::{ChargeKey, CostGroup, CostLedger};
use gpool_core::{JobId, PoolKind, Time};

use super::Controller;
use super::calls::ApiError;
use super::docs::JobDoc;
use crate::plane::auth::{Caller, Role};

/// Pages of this many jobs are read from the store for a cost report.
const PAGE: u32 = 1000;

impl Controller {
    /// The price per GPU-hour of the node a running job holds, and its pool's name.
    pub(super) fn run_price(&self, id: u64) -> Option<(f64, String)> {
        let r = self.snap.job(JobId(id))?.running()?;
        let node = self.snap.node(r.placement.first()?.node)?;
        let pool = node.pool.name.to_string();
        if let Some(p) = self.configured_pool(&pool) {
            return Some((p.price_per_gpu_hour(), pool));
        }
        let model = node.devices.first().map(|d| d.model.to_string())?;
        let price = match node.pool.kind {
            PoolKind::Spot => self.cfg.prices.spot_per_gpu_hour(&model),
            _ => self.cfg.prices.per_gpu_hour(&model),
        }?;
        Some((price, pool))
    }

    /// The current run's cost so far, and its pool.
    pub(super) fn live_cost(&self, id: u64, now: i64) -> Option<(f64, String)> {
        let r = self.snap.job(JobId(id))?.running()?;
        let hours = r.gpu_milli as f64 / 1000.0 * Time::from_millis(now).since(r.started).as_secs_f64() / 3600.0;
        let (price, pool) = self.run_price(id)?;
        Some((price * hours, pool))
    }

    /// A run ends: its cost into the job's record and the exporter's counter.
    pub(super) fn charge_run(&mut self, id: u64, hours: f64, summary: &mut Option<api::UsageSummary>) {
        let Some((price, pool)) = self.run_price(id) else { return };
        let dollars = price * hours;
        let idle = summary.as_ref().map_or(0.0, |s| s.idle_gpu_hours * price);
        if let Some(s) = summary.as_mut() {
            s.cost_usd = Some(dollars);
        }
        let Some(d) = self.jobs.get_mut(&id) else { return };
        d.pool = Some(pool.clone());
        let (team, user, queue) = (d.team.clone(), d.user.clone(), d.queue.clone());
        let key = (team.clone(), user, queue.clone(), pool);
        *self.waste_done.entry(key.clone()).or_default() += idle;
        *self.cost_done.entry(key).or_default() += dollars;
        self.budget_charge(&team, &queue, dollars);
    }

    /// Dollars per (team, user, queue, pool) since this daemon started, running jobs included.
    pub(super) fn cost_counters(&self, now: i64) -> BTreeMap<(String, String, String, String), f64> {
        let mut out = self.cost_done.clone();
        for (id, d) in &self.jobs {
            if let Some((dollars, pool)) = self.live_cost(*id, now) {
                *out.entry((d.team.clone(), d.user.clone(), d.queue.clone(), pool)).or_default() += dollars;
            }
        }
        out
    }

    /// Dollars paid for allocated GPUs while they were idle (under 5%), per
    /// (team, user, queue, pool) since this daemon started, running jobs included.
    pub(super) fn waste_counters(&self) -> BTreeMap<(String, String, String, String), f64> {
        let mut out = self.waste_done.clone();
        for (id, d) in &self.jobs {
            let idle = self.telemetry.summary(*id).map_or(0.0, |s| s.idle_gpu_hours);
            if let Some((price, pool)) = self.run_price(*id).filter(|_| idle > 0.0) {
                *out.entry((d.team.clone(), d.user.clone(), d.queue.clone(), pool)).or_default() += idle * price;
            }
        }
        out
    }

    /// `GET /api/v1/cost?by=team&since=30d`: what jobs that ran in the period
    /// cost, grouped. Admins and readers see every job, users their own.
    pub(super) fn cost_report(
        &mut self,
        caller: &Caller,
        by: &str,
        since_ms: i64,
        now: i64,
    ) -> Result<api::CostReport, ApiError> {
        let group: CostGroup = by.parse().map_err(|e: String| ApiError::new(400, format!("by: {e}")))?;
        let everyone = matches!(caller.role, Role::Admin | Role::Reader);
        let mut ledger = CostLedger::default();
        let mut jobs_per: BTreeMap<String, u64> = BTreeMap::new();
        let mut energy_per: BTreeMap<String, f64> = BTreeMap::new();
        // Per group: idle GPU-hours, and (utilisation × hours, hours) of the runs that sampled it.
        let mut idle_per: BTreeMap<String, f64> = BTreeMap::new();
        let mut util_per: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut after = None;
        loop {
            let q = gpool_store::JobQuery {
                user: (!everyone).then(|| caller.user.clone()),
                queue: None,
                states: Vec::new(),
                after,
                limit: PAGE,
            };
            let rows = self.store.jobs(&q).map_err(|e| ApiError::new(500, e.to_string()))?;
            let n = rows.len();
            for row in rows {
                after = Some(row.id);
                let Ok(stored) = serde_json::from_str::<JobDoc>(&row.doc) else { continue };
                // Live jobs: the controller's record is newer than the store's.
                let d = self.jobs.get(&row.id).cloned().unwrap_or(stored);
                if d.ended_ms.is_some_and(|e| e < since_ms) || d.started_ms.is_none() {
                    continue;
                }
                let (live, live_pool) = self.live_cost(d.id, now).map_or((0.0, None), |(c, p)| (c, Some(p)));
                let done = d.usage.as_ref().and_then(|u| u.cost_usd).unwrap_or(0.0);
                let usage = self.usage_summary(&d);
                let hours = usage.as_ref().map_or(0.0, |u| u.gpu_hours);
                let pool = live_pool.or_else(|| d.pool.clone()).unwrap_or_else(|| "-".into());
                let key = ChargeKey {
                    job: d.id,
                    user: d.user.as_str().into(),
                    team: d.team.as_str().into(),
                    queue: d.queue.as_str().into(),
                    pool: pool.as_str().into(),
                };
                let name = match group {
                    CostGroup::Job => d.id.to_string(),
                    CostGroup::User => d.user.clone(),
                    CostGroup::Team => d.team.clone(),
                    CostGroup::Queue => d.queue.clone(),
                    CostGroup::Pool => pool.clone(),
                };
                if let Some(u) = &usage {
                    *energy_per.entry(name.clone()).or_default() += u.energy_wh.unwrap_or(0.0);
                    *idle_per.entry(name.clone()).or_default() += u.idle_gpu_hours;
                    if let Some(m) = u.mean_gpu_util {
                        let w = util_per.entry(name.clone()).or_default();
                        w.0 += m * u.gpu_hours;
                        w.1 += u.gpu_hours;
                    }
                }
                *jobs_per.entry(name).or_default() += 1;
                ledger.add(key, done + live, hours);
            }
            if n < PAGE as usize {
                break;
            }
        }
        let rows = ledger
            .by(group)
            .into_iter()
            .map(|(key, dollars, gpu_hours)| api::CostRow {
                jobs: jobs_per.get(&key).copied().unwrap_or(0),
                energy_wh: (energy_per.get(&key).copied().unwrap_or(0.0) * 100.0).round() / 100.0,
                idle_gpu_hours: (idle_per.get(&key).copied().unwrap_or(0.0) * 10_000.0).round() / 10_000.0,
                mean_gpu_util: util_per.get(&key).filter(|(_, h)| *h > 0.0).map(|(s, h)| (s / h * 10.0).round() / 10.0),
                key,
                dollars: (dollars * 10_000.0).round() / 10_000.0,
                gpu_hours: (gpu_hours * 10_000.0).round() / 10_000.0,
            })
            .collect();
        Ok(api::CostReport {
            by: group.as_str().into(),
            since: api::time::rfc3339(since_ms),
            total_dollars: (ledger.total() * 10_000.0).round() / 10_000.0,
            rows,
        })
    }
}
