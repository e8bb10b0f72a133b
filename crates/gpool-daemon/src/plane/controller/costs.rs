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
use gpool_core::cost::CostGroup;
use gpool_core::usage_ledger::{HOUR_MS, Usage, by_group, hour_of};
use gpool_core::{JobId, PoolKind, Time};

use super::Controller;
use super::calls::ApiError;
use super::docs::JobDoc;
use crate::plane::auth::{Caller, Role};

/// Pages of this many jobs are read from the store for a cost report.
const PAGE: u32 = 1000;

/// What the usage ledger needs of a finished job's document (`JobDoc`'s
/// fields of the same names): at start every job of the store is read, and
/// its spec is the bulk of it.
#[derive(serde::Deserialize)]
struct Ended {
    #[serde(default)]
    id: u64,
    user: String,
    team: String,
    queue: String,
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    started_ms: Option<i64>,
    #[serde(default)]
    ended_ms: Option<i64>,
    #[serde(default)]
    usage: Option<api::UsageSummary>,
}

/// Groups a report charts step by step; the rest are summed as `others`.
const CHARTED: usize = 8;

/// The chart of a report from `since` to `now`: per step (hours over two
/// days or less, else days; UTC) and group, GPU-hours and dollars, for the
/// `CHARTED` largest groups of `grouped` and the rest as `others`.
fn steps_of(grouped: &[(String, Usage)], dated: Vec<(i64, String, Usage)>, since: i64, now: i64) -> Vec<api::CostStep> {
    const DAY_MS: i64 = 86_400_000;
    let (step, name) = if now - since <= 2 * DAY_MS { (HOUR_MS, "hour") } else { (DAY_MS, "day") };
    let charted: std::collections::BTreeSet<&str> = grouped.iter().take(CHARTED).map(|(n, _)| n.as_str()).collect();
    let mut steps: BTreeMap<(i64, &str), (f64, f64)> = BTreeMap::new();
    for (at, key, u) in &dated {
        let key = if charted.contains(key.as_str()) { key.as_str() } else { "others" };
        let d = steps.entry((at.div_euclid(step) * step, key)).or_default();
        d.0 += u.gpu_hours;
        d.1 += u.dollars;
    }
    steps
        .into_iter()
        .map(|((at, key), (h, d))| api::CostStep {
            at: api::time::rfc3339(at),
            step: name.into(),
            key: key.into(),
            gpu_hours: (h * 10_000.0).round() / 10_000.0,
            dollars: (d * 10_000.0).round() / 10_000.0,
        })
        .collect()
}

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

    /// A job reached its end: what it used, over all its runs, into the usage ledger.
    pub(super) fn ledger_add(&mut self, d: &JobDoc) {
        let ended = Ended {
            id: d.id,
            user: d.user.clone(),
            team: d.team.clone(),
            queue: d.queue.clone(),
            pool: d.pool.clone(),
            started_ms: d.started_ms,
            ended_ms: d.ended_ms,
            usage: d.usage.clone(),
        };
        self.ledger_add_ended(&ended);
    }

    fn ledger_add_ended(&mut self, d: &Ended) {
        let (Some(ended), Some(_)) = (d.ended_ms, d.started_ms) else { return };
        let usage = match &d.usage {
            Some(u) => Usage::of_job(
                u.cost_usd.unwrap_or(0.0),
                u.gpu_hours,
                u.idle_gpu_hours,
                u.energy_wh.unwrap_or(0.0),
                u.mean_gpu_util,
            ),
            None => Usage::of_job(0.0, 0.0, 0.0, 0.0, None),
        };
        let pool = d.pool.as_deref().unwrap_or("-");
        self.usage_ledger.add(Time::from_millis(ended), &d.user, &d.team, &d.queue, pool, usage);
        self.usage_ledger.note_job(Time::from_millis(ended), d.id);
    }

    /// What a job used and cost, as a report counts it: `live` dollars of its current run on top.
    fn job_usage(&self, d: &JobDoc, live: f64) -> Usage {
        let done = d.usage.as_ref().and_then(|u| u.cost_usd).unwrap_or(0.0);
        match self.usage_summary(d) {
            Some(u) => {
                Usage::of_job(done + live, u.gpu_hours, u.idle_gpu_hours, u.energy_wh.unwrap_or(0.0), u.mean_gpu_util)
            }
            None => Usage::of_job(done + live, 0.0, 0.0, 0.0, None),
        }
    }

    /// Builds the usage ledger from the store's finished jobs (once, at start):
    /// one read of every job, so that reports need not read any.
    pub(super) fn restore_usage_ledger(&mut self) -> anyhow::Result<()> {
        let mut after = None;
        loop {
            let q = gpool_store::JobQuery { after, limit: PAGE, ..gpool_store::JobQuery::default() };
            let rows = self.store.jobs(&q)?;
            let n = rows.len();
            for row in rows {
                after = Some(row.id);
                if self.jobs.contains_key(&row.id) {
                    continue;
                }
                if let Ok(mut d) = serde_json::from_str::<Ended>(&row.doc) {
                    d.id = row.id;
                    self.ledger_add_ended(&d);
                }
            }
            if n < PAGE as usize {
                break;
            }
        }
        Ok(())
    }

    /// `GET /api/v1/cost?by=team&since=30d`: what jobs that ran in the period
    /// cost, grouped. Admins and readers see every job, users their own.
    /// Finished jobs come from the usage ledger (hour resolution: the period
    /// starts at the beginning of `since_ms`'s hour), running ones live;
    /// `by=job` reads the store's jobs instead, as it lists each.
    pub(super) fn cost_report(
        &mut self,
        caller: &Caller,
        by: &str,
        since_ms: i64,
        now: i64,
    ) -> Result<api::CostReport, ApiError> {
        let group: CostGroup = by.parse().map_err(|e: String| ApiError::new(400, format!("by: {e}")))?;
        let everyone = matches!(caller.role, Role::Admin | Role::Reader);
        let sees = |user: &str| everyone || user == caller.user;
        let since = hour_of(Time::from_millis(since_ms));
        let mut rows: Vec<(String, Usage)> = Vec::new();
        // (when, group, usage) for the chart: ledger hours, and running jobs now.
        let mut dated: Vec<(i64, String, Usage)> = Vec::new();
        if group == CostGroup::Job {
            let counts = |d: &JobDoc| {
                sees(&d.user) && d.started_ms.is_some() && d.ended_ms.is_none_or(|e| e >= since.as_millis())
            };
            // Jobs that ended in the period have ids from the first the ledger
            // noted on; older ones that count are still running, so live.
            let first = self.usage_ledger.first_job_since(since);
            for d in self.jobs.range(..first.unwrap_or(u64::MAX)).map(|(_, d)| d).filter(|d| counts(d)) {
                rows.push((d.id.to_string(), self.report_usage(d, now).1));
            }
            if let Some(first) = first {
                self.each_stored_job(first.checked_sub(1), |c, d| {
                    if counts(d) {
                        rows.push((d.id.to_string(), c.report_usage(d, now).1));
                    }
                })?;
            }
        } else {
            for (hour, o, u) in self.usage_ledger.hours_since(since).filter(|(_, o, _)| sees(&o.user)) {
                dated.push((hour.as_millis(), o.group(group).unwrap_or("-").to_string(), *u));
            }
            for d in self.jobs.values().filter(|d| d.started_ms.is_some() && sees(&d.user)) {
                let (pool, usage) = self.report_usage(d, now);
                let name = match group {
                    CostGroup::User => d.user.clone(),
                    CostGroup::Team => d.team.clone(),
                    CostGroup::Queue => d.queue.clone(),
                    CostGroup::Pool | CostGroup::Job => pool,
                };
                dated.push((now, name, usage));
            }
            rows.extend(dated.iter().map(|(_, name, u)| (name.clone(), *u)));
        }
        let grouped = by_group(rows);
        let steps = steps_of(&grouped, dated, since.as_millis(), now);
        let round = |x: f64, to: f64| (x * to).round() / to;
        Ok(api::CostReport {
            by: group.as_str().into(),
            since: api::time::rfc3339(since.as_millis()),
            total_dollars: round(grouped.iter().map(|(_, u)| u.dollars).sum(), 10_000.0),
            rows: grouped
                .into_iter()
                .map(|(key, u)| api::CostRow {
                    jobs: u.jobs,
                    energy_wh: round(u.energy_wh, 100.0),
                    idle_gpu_hours: round(u.idle_gpu_hours, 10_000.0),
                    mean_gpu_util: u.mean_gpu_util().map(|m| round(m, 10.0)),
                    key,
                    dollars: round(u.dollars, 10_000.0),
                    gpu_hours: round(u.gpu_hours, 10_000.0),
                })
                .collect(),
            steps,
        })
    }

    /// A job's pool (where its current or last run was) and its usage with its live cost.
    fn report_usage(&self, d: &JobDoc, now: i64) -> (String, Usage) {
        let (live, live_pool) = self.live_cost(d.id, now).map_or((0.0, None), |(c, p)| (c, Some(p)));
        let pool = live_pool.or_else(|| d.pool.clone()).unwrap_or_else(|| "-".into());
        (pool, self.job_usage(d, live))
    }

    /// Calls `f` with every job of the store with an id over `after`, live
    /// ones as the controller has them (newer than the store's).
    fn each_stored_job(
        &mut self,
        mut after: Option<u64>,
        mut f: impl FnMut(&Controller, &JobDoc),
    ) -> Result<(), ApiError> {
        loop {
            let q = gpool_store::JobQuery { after, limit: PAGE, ..gpool_store::JobQuery::default() };
            let rows = self.store.jobs(&q).map_err(|e| ApiError::new(500, e.to_string()))?;
            let n = rows.len();
            for row in rows {
                after = Some(row.id);
                match self.jobs.get(&row.id) {
                    Some(d) => f(self, d),
                    None => {
                        if let Ok(d) = serde_json::from_str::<JobDoc>(&row.doc) {
                            f(self, &d);
                        }
                    }
                }
            }
            if n < PAGE as usize {
                return Ok(());
            }
        }
    }
}
