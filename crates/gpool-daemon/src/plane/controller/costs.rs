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
use gpool_core::pricing::Prices;
use gpool_core::usage_ledger::UsageLedger;
use gpool_core::usage_ledger::{HOUR_MS, Usage, by_group, hour_of};
use gpool_core::{JobId, PoolKind, Snapshot, Time};
use gpool_store::Store;

use super::calls::ApiError;
use super::docs::{JobDoc, merge_usage};
use crate::plane::auth::{Caller, Role};

/// Dollars per (team, user, queue, pool).
pub(super) type Dollars = BTreeMap<(String, String, String, String), f64>;

/// What GPU time costs and what it has cost: the prices, the finished
/// runs' dollars and GPU-hours since this daemon started (for `/metrics`),
/// and the usage ledger of finished jobs (for cost reports).
pub(super) struct Costs {
    prices: Prices,
    /// Each configured node pool's price per GPU-hour.
    pool_prices: BTreeMap<String, f64>,
    /// Dollars of finished runs.
    cost_done: Dollars,
    /// Of those, dollars of allocated GPUs that were idle.
    waste_done: Dollars,
    /// GPU-hours of finished runs per (user, team).
    gpu_hours_done: BTreeMap<(String, String), f64>,
    /// Finished jobs' usage per hour and owner.
    pub(super) ledger: UsageLedger,
}

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

impl Costs {
    /// `pool_prices`: each configured node pool's price per GPU-hour.
    pub(super) fn new(prices: Prices, pool_prices: BTreeMap<String, f64>) -> Costs {
        Costs {
            prices,
            pool_prices,
            cost_done: Dollars::new(),
            waste_done: Dollars::new(),
            gpu_hours_done: BTreeMap::new(),
            ledger: UsageLedger::default(),
        }
    }

    /// The price per GPU-hour of a model's GPU (its spot price if `spot`).
    pub(super) fn model_price(&self, model: &str, spot: bool) -> Option<f64> {
        if spot { self.prices.spot_per_gpu_hour(model) } else { self.prices.per_gpu_hour(model) }
    }

    /// The price per GPU-hour of the node a running job holds, and its pool's name.
    pub(super) fn run_price(&self, snap: &Snapshot, id: u64) -> Option<(f64, String)> {
        let r = snap.job(JobId(id))?.running()?;
        let node = snap.node(r.placement.first()?.node)?;
        let pool = node.pool.name.to_string();
        if let Some(p) = self.pool_prices.get(&pool) {
            return Some((*p, pool));
        }
        let model = node.devices.first().map(|d| d.model.to_string())?;
        let price = self.model_price(&model, node.pool.kind == PoolKind::Spot)?;
        Some((price, pool))
    }

    /// The current run's cost so far, and its pool.
    pub(super) fn live_cost(&self, snap: &Snapshot, id: u64, now: i64) -> Option<(f64, String)> {
        let hours = allocated_hours(snap, id, now)?;
        let (price, pool) = self.run_price(snap, id)?;
        Some((price * hours, pool))
    }

    /// The price of one GPU-hour of a job's devices, if known.
    pub(super) fn price_of(&self, snap: &Snapshot, d: &JobDoc) -> Option<f64> {
        self.model_price(&model_of(snap, d)?, false)
    }

    /// A job's usage: its finished runs plus the live one (at `now`).
    pub(super) fn usage_summary(
        &self,
        snap: &Snapshot,
        telemetry: &crate::plane::telemetry::Telemetry,
        d: &JobDoc,
        now: i64,
    ) -> Option<api::UsageSummary> {
        let live = match (telemetry.summary(d.id), allocated_hours(snap, d.id, now)) {
            (Some(s), Some(h)) => Some(api::UsageSummary { gpu_hours: h, ..s }),
            (None, Some(h)) if h > 0.0 => Some(api::UsageSummary { gpu_hours: h, ..api::UsageSummary::default() }),
            (s, _) => s,
        };
        let done = d.usage.as_ref().map(|u| {
            // Runs recorded before costs were kept per run: at the model's price.
            u.cost_usd.or_else(|| self.price_of(snap, d).map(|p| p * u.gpu_hours))
        });
        let live_cost = self.live_cost(snap, d.id, now).map(|(c, _)| c);
        let mut s = merge_usage(d.usage.clone(), live)?;
        s.cost_usd = match (done.flatten(), live_cost) {
            (None, None) => self.price_of(snap, d).map(|p| p * s.gpu_hours),
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        Some(s)
    }

    /// Running jobs' costs so far, by job (for the budgets).
    pub(super) fn live_costs(&self, snap: &Snapshot, jobs: &BTreeMap<u64, JobDoc>, now: i64) -> BTreeMap<u64, f64> {
        jobs.keys().filter_map(|id| Some((*id, self.live_cost(snap, *id, now)?.0))).collect()
    }

    /// A run of `d` ends, having held `hours` GPU-hours: its cost into the
    /// job's record and the exporter's counters; the dollars, for the budgets.
    pub(super) fn charge_run(
        &mut self,
        snap: &Snapshot,
        d: &mut JobDoc,
        hours: f64,
        summary: &mut Option<api::UsageSummary>,
    ) -> Option<f64> {
        *self.gpu_hours_done.entry((d.user.clone(), d.team.clone())).or_default() += hours;
        let (price, pool) = self.run_price(snap, d.id)?;
        let dollars = price * hours;
        let idle = summary.as_ref().map_or(0.0, |s| s.idle_gpu_hours * price);
        if let Some(s) = summary.as_mut() {
            s.cost_usd = Some(dollars);
        }
        d.pool = Some(pool.clone());
        let key = (d.team.clone(), d.user.clone(), d.queue.clone(), pool);
        *self.waste_done.entry(key.clone()).or_default() += idle;
        *self.cost_done.entry(key).or_default() += dollars;
        Some(dollars)
    }

    /// GPU-hours per (user, team) since this daemon started, running jobs included.
    pub(super) fn gpu_hours(
        &self,
        snap: &Snapshot,
        jobs: &BTreeMap<u64, JobDoc>,
        now: i64,
    ) -> BTreeMap<(String, String), f64> {
        let mut gpu_hours = self.gpu_hours_done.clone();
        for j in snap.running_jobs() {
            if let (Some(h), Some(d)) = (allocated_hours(snap, j.id.0, now), jobs.get(&j.id.0)) {
                *gpu_hours.entry((d.user.clone(), d.team.clone())).or_default() += h;
            }
        }
        gpu_hours
    }

    /// Dollars per (team, user, queue, pool) since this daemon started, running jobs included.
    pub(super) fn cost_counters(&self, snap: &Snapshot, jobs: &BTreeMap<u64, JobDoc>, now: i64) -> Dollars {
        let mut out = self.cost_done.clone();
        for (id, d) in jobs {
            if let Some((dollars, pool)) = self.live_cost(snap, *id, now) {
                *out.entry((d.team.clone(), d.user.clone(), d.queue.clone(), pool)).or_default() += dollars;
            }
        }
        out
    }

    /// Dollars paid for allocated GPUs while they were idle (under 5%), per
    /// (team, user, queue, pool) since this daemon started, running jobs included.
    pub(super) fn waste_counters(
        &self,
        snap: &Snapshot,
        jobs: &BTreeMap<u64, JobDoc>,
        telemetry: &crate::plane::telemetry::Telemetry,
    ) -> Dollars {
        let mut out = self.waste_done.clone();
        for (id, d) in jobs {
            let idle = telemetry.summary(*id).map_or(0.0, |s| s.idle_gpu_hours);
            if let Some((price, pool)) = self.run_price(snap, *id).filter(|_| idle > 0.0) {
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
        self.ledger.add(Time::from_millis(ended), &d.user, &d.team, &d.queue, pool, usage);
        self.ledger.note_job(Time::from_millis(ended), d.id);
    }

    /// What a job used and cost, as a report counts it: `live` dollars of its current run on top.
    fn job_usage(d: &JobDoc, summary: Option<api::UsageSummary>, live: f64) -> Usage {
        let done = d.usage.as_ref().and_then(|u| u.cost_usd).unwrap_or(0.0);
        match summary {
            Some(u) => {
                Usage::of_job(done + live, u.gpu_hours, u.idle_gpu_hours, u.energy_wh.unwrap_or(0.0), u.mean_gpu_util)
            }
            None => Usage::of_job(done + live, 0.0, 0.0, 0.0, None),
        }
    }

    /// Builds the usage ledger from the store's finished jobs (once, at start):
    /// one read of every job, so that reports need not read any.
    pub(super) fn restore_ledger(&mut self, store: &mut dyn Store, jobs: &BTreeMap<u64, JobDoc>) -> anyhow::Result<()> {
        let mut after = None;
        loop {
            let q = gpool_store::JobQuery { after, limit: PAGE, ..gpool_store::JobQuery::default() };
            let rows = store.jobs(&q)?;
            let n = rows.len();
            for row in rows {
                after = Some(row.id);
                if jobs.contains_key(&row.id) {
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
    /// `usage`: a job's usage so far (`Costs::usage_summary`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn report(
        &self,
        caller: &Caller,
        by: &str,
        since_ms: i64,
        snap: &Snapshot,
        jobs: &BTreeMap<u64, JobDoc>,
        store: &mut dyn Store,
        usage: &dyn Fn(&JobDoc) -> Option<api::UsageSummary>,
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
            let first = self.ledger.first_job_since(since);
            for d in jobs.range(..first.unwrap_or(u64::MAX)).map(|(_, d)| d).filter(|d| counts(d)) {
                rows.push((d.id.to_string(), self.report_usage(snap, d, usage(d), now).1));
            }
            if let Some(first) = first {
                each_stored_job(store, jobs, first.checked_sub(1), |d| {
                    if counts(d) {
                        rows.push((d.id.to_string(), self.report_usage(snap, d, usage(d), now).1));
                    }
                })?;
            }
        } else {
            for (hour, o, u) in self.ledger.hours_since(since).filter(|(_, o, _)| sees(&o.user)) {
                dated.push((hour.as_millis(), o.group(group).unwrap_or("-").to_string(), *u));
            }
            for d in jobs.values().filter(|d| d.started_ms.is_some() && sees(&d.user)) {
                let (pool, usage) = self.report_usage(snap, d, usage(d), now);
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
    fn report_usage(
        &self,
        snap: &Snapshot,
        d: &JobDoc,
        summary: Option<api::UsageSummary>,
        now: i64,
    ) -> (String, Usage) {
        let (live, live_pool) = self.live_cost(snap, d.id, now).map_or((0.0, None), |(c, p)| (c, Some(p)));
        let pool = live_pool.or_else(|| d.pool.clone()).unwrap_or_else(|| "-".into());
        (pool, Costs::job_usage(d, summary, live))
    }
}

/// Calls `f` with every job of the store with an id over `after`, live
/// ones as the controller has them (newer than the store's).
fn each_stored_job(
    store: &mut dyn Store,
    jobs: &BTreeMap<u64, JobDoc>,
    mut after: Option<u64>,
    mut f: impl FnMut(&JobDoc),
) -> Result<(), ApiError> {
    loop {
        let q = gpool_store::JobQuery { after, limit: PAGE, ..gpool_store::JobQuery::default() };
        let rows = store.jobs(&q).map_err(|e| ApiError::new(500, e.to_string()))?;
        let n = rows.len();
        for row in rows {
            after = Some(row.id);
            match jobs.get(&row.id) {
                Some(d) => f(d),
                None => {
                    if let Ok(d) = serde_json::from_str::<JobDoc>(&row.doc) {
                        f(&d);
                    }
                }
            }
        }
        if n < PAGE as usize {
            return Ok(());
        }
    }
}

/// The GPU model of a job's (last) run, else the one its spec asks for.
pub(super) fn model_of(snap: &Snapshot, d: &JobDoc) -> Option<String> {
    d.run
        .as_ref()
        .and_then(|r| r.replicas.first())
        .and_then(|r| {
            let node = snap.node(snap.node_id(&r.node)?)?;
            let index = r.gpus.first().copied().or_else(|| {
                node.devices
                    .iter()
                    .find(|dev| dev.mig.as_ref().is_some_and(|m| m.iter().any(|i| r.mig.contains(&i.uuid.to_string()))))
                    .map(|dev| dev.index)
            })?;
            node.devices.iter().find(|dev| dev.index == index).map(|dev| dev.model.to_string())
        })
        .or_else(|| d.spec.gpu_model.clone())
}

/// GPU-hours of the current run from its allocation to `now`, at its
/// share (a MIG instance or a GPU share counts its fraction): what is
/// charged, not what samples happened to see.
pub(super) fn allocated_hours(snap: &Snapshot, id: u64, now: i64) -> Option<f64> {
    let r = snap.job(JobId(id))?.running()?;
    Some(r.gpu_milli as f64 / 1000.0 * Time::from_millis(now).since(r.started).as_secs_f64() / 3600.0)
}
