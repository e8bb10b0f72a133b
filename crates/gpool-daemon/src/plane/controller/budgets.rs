//! Monthly budgets per team or queue (`--budgets FILE`). Spend is what
//! `costs.rs` charges: runs that ended this calendar month (UTC) plus what
//! running jobs have cost so far. At each threshold (`alertAt`, percent) an
//! alert goes out (the event stream and the alert webhook); at 100% a
//! `hard` budget holds the team's or queue's pending and new jobs until the
//! month ends, and a `soft` one lets new jobs run only as preemptible at
//! the lowest priority. Jobs that end this month are counted by their end:
//! a run that spans two months counts in the second.

use std::collections::BTreeMap;

use gpool_core::usage_ledger::UsageLedger;
use gpool_core::{JobId, Snapshot, Time};

use super::docs::JobDoc;
use super::outbox::Outbox;
use super::timers::{Timer, Timers};
use crate::plane::webhook::Notice;

/// What a budget limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetScope {
    Team(String),
    Queue(String),
}

/// What happens at 100%.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetMode {
    /// New and pending jobs wait for next month.
    Hard,
    /// New jobs run only as preemptible at the lowest priority.
    Soft,
}

/// One budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub scope: BudgetScope,
    pub dollars_per_month: f64,
    pub mode: BudgetMode,
    /// Percentages at which an alert goes out, ascending.
    pub alert_at: Vec<u32>,
}

impl Budget {
    fn key(&self) -> String {
        match &self.scope {
            BudgetScope::Team(t) => format!("team {t}"),
            BudgetScope::Queue(q) => format!("queue {q}"),
        }
    }

    fn covers(&self, team: &str, queue: &str) -> bool {
        match &self.scope {
            BudgetScope::Team(t) => t == team,
            BudgetScope::Queue(q) => q == queue,
        }
    }
}

/// The budgets (`--budgets`) and this month's spend against them.
#[derive(Debug, Default)]
pub(super) struct Budgets {
    list: Vec<Budget>,
    state: BudgetState,
}

/// Running jobs' costs so far (`Costs::live_cost`), by job id.
pub(super) type LiveCost<'a> = &'a BTreeMap<u64, f64>;

/// What the controller keeps of budgets.
#[derive(Clone, Debug, Default)]
struct BudgetState {
    /// The month the spend below is of: its first millisecond (UTC).
    pub month_start_ms: i64,
    /// Dollars of runs that ended this month, per (team, queue).
    pub spent: BTreeMap<(String, String), f64>,
    /// The highest threshold alerted this month, per budget.
    pub alerted: BTreeMap<String, u32>,
}

/// The first millisecond of the month `ms` falls in, and of the next one.
pub(super) fn month_bounds(ms: i64) -> (i64, i64) {
    gpool_api::time::utc_month_bounds(ms)
}

impl Budgets {
    /// The budgets, with this month's spend (once, at start): jobs that ended
    /// this month, from the usage ledger, and the finished runs of jobs not yet ended.
    pub(super) fn restore(list: Vec<Budget>, ledger: &UsageLedger, jobs: &BTreeMap<u64, JobDoc>, now: i64) -> Budgets {
        let (start, _) = month_bounds(now);
        let mut state = BudgetState { month_start_ms: start, ..BudgetState::default() };
        if !list.is_empty() {
            // A month starts on an hour: the ledger's hours from it are exactly this month's.
            for (owner, usage) in ledger.since(Time::from_millis(start), |_| true) {
                *state.spent.entry((owner.team.to_string(), owner.queue.to_string())).or_default() += usage.dollars;
            }
            for d in jobs.values() {
                if let Some(c) = d.usage.as_ref().and_then(|u| u.cost_usd) {
                    *state.spent.entry((d.team.clone(), d.queue.clone())).or_default() += c;
                }
            }
        }
        Budgets { list, state }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// A run's cost, charged to this month.
    pub(super) fn charge(&mut self, team: &str, queue: &str, dollars: f64) {
        *self.state.spent.entry((team.to_string(), queue.to_string())).or_default() += dollars;
    }

    /// What a budget's team or queue has spent this month, running jobs included.
    fn spend(&self, b: &Budget, jobs: &BTreeMap<u64, JobDoc>, live: LiveCost<'_>) -> f64 {
        let done: f64 = self.state.spent.iter().filter(|((t, q), _)| b.covers(t, q)).map(|(_, d)| d).sum();
        let live: f64 =
            jobs.iter().filter(|(_, d)| b.covers(&d.team, &d.queue)).filter_map(|(id, _)| live.get(id)).sum();
        done + live
    }

    /// Every budget and this month's spend (`GET /api/v1/budgets`): budgets are the
    /// organisation's, as queues are, so every reader sees them all.
    pub(super) fn views(
        &self,
        jobs: &BTreeMap<u64, JobDoc>,
        live: LiveCost<'_>,
        now: i64,
    ) -> Vec<gpool_api::BudgetView> {
        let (_, next) = month_bounds(now);
        self.list
            .iter()
            .map(|b| {
                let spent = self.spend(b, jobs, live);
                let (scope, name) = match &b.scope {
                    BudgetScope::Team(t) => ("team", t.clone()),
                    BudgetScope::Queue(q) => ("queue", q.clone()),
                };
                let held = jobs.values().filter(|d| d.budget_hold.is_some() && b.covers(&d.team, &d.queue));
                gpool_api::BudgetView {
                    scope: scope.into(),
                    name,
                    dollars_per_month: b.dollars_per_month,
                    mode: match b.mode {
                        BudgetMode::Hard => "hard",
                        BudgetMode::Soft => "soft",
                    }
                    .into(),
                    spent_usd: (spent * 100.0).round() / 100.0,
                    percent: (spent / b.dollars_per_month.max(1e-9) * 1000.0).round() / 10.0,
                    alert_at: b.alert_at.clone(),
                    resets_at: gpool_api::time::rfc3339(next),
                    held_jobs: held.count() as u64,
                }
            })
            .collect()
    }

    /// The budget at or over 100% this job's team or queue is under, if any.
    pub(super) fn exhausted(
        &self,
        team: &str,
        queue: &str,
        jobs: &BTreeMap<u64, JobDoc>,
        live: LiveCost<'_>,
    ) -> Option<(Budget, f64)> {
        self.list
            .iter()
            .filter(|b| b.covers(team, queue))
            .map(|b| (b.clone(), self.spend(b, jobs, live)))
            .find(|(b, spent)| *spent >= b.dollars_per_month)
    }

    /// Why a job of an exhausted hard budget waits.
    pub(super) fn hold_text(b: &Budget, spent: f64, until_ms: i64) -> String {
        format!(
            "{} is over its hard budget: ${spent:.2} of ${:.2} this month; held until {} (or until the budget is raised)",
            b.key(),
            b.dollars_per_month,
            gpool_api::time::rfc3339(until_ms)
        )
    }

    /// After a pass: month rollover, threshold alerts, holds of hard budgets.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check(
        &mut self,
        snap: &mut Snapshot,
        jobs: &mut BTreeMap<u64, JobDoc>,
        live: LiveCost<'_>,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        if self.list.is_empty() {
            return;
        }
        let (start, next) = month_bounds(now);
        if start != self.state.month_start_ms {
            // A new month: spend starts again and held jobs go back to the queue.
            self.state = BudgetState { month_start_ms: start, ..BudgetState::default() };
            for (id, d) in jobs.iter_mut().filter(|(_, d)| d.budget_hold.is_some()) {
                d.budget_hold = None;
                d.not_before_ms = None;
                let _ = snap.set_not_before(JobId(*id), Time::MIN);
                out.touch(*id);
            }
            out.reschedule();
        }
        timers.at(next, Timer::Wake);
        for b in self.list.clone() {
            let spent = self.spend(&b, jobs, live);
            let pct = (spent / b.dollars_per_month.max(1e-9) * 100.0).floor() as u32;
            let key = b.key();
            let already = self.state.alerted.get(&key).copied().unwrap_or(0);
            if let Some(&t) = b.alert_at.iter().rev().find(|t| pct >= **t && **t > already) {
                self.state.alerted.insert(key.clone(), t);
                let summary = format!(
                    "{key} has spent ${spent:.2} of its ${:.2} monthly budget ({t}%){}",
                    b.dollars_per_month,
                    match (t >= 100, b.mode) {
                        (true, BudgetMode::Hard) => ": its jobs wait until next month",
                        (true, BudgetMode::Soft) => ": its new jobs run only as preemptible, at the lowest priority",
                        _ => "",
                    }
                );
                out.event_of(now, None, None, "budget_alert", summary.clone());
                out.notices.push(Notice {
                    status: "firing".into(),
                    labels: [
                        ("alertname".to_string(), "GpoolBudget".to_string()),
                        ("severity".to_string(), if t >= 100 { "critical" } else { "warning" }.to_string()),
                        ("subject".to_string(), key.clone()),
                        ("threshold".to_string(), t.to_string()),
                    ]
                    .into_iter()
                    .collect(),
                    annotations: [("summary".to_string(), summary)].into_iter().collect(),
                    starts_at: gpool_api::time::rfc3339(now),
                    ends_at: "0001-01-01T00:00:00Z".into(),
                });
            }
            if b.mode == BudgetMode::Hard && spent >= b.dollars_per_month {
                let text = Budgets::hold_text(&b, spent, next);
                let pending: Vec<u64> = jobs
                    .iter()
                    .filter(|(_, d)| d.budget_hold.is_none() && b.covers(&d.team, &d.queue))
                    .filter(|(id, _)| snap.job(JobId(**id)).is_some_and(|j| j.running().is_none()))
                    .map(|(id, _)| *id)
                    .collect();
                for id in pending {
                    hold_for_budget(id, &text, next, snap, jobs, out);
                }
            }
        }
    }
}

/// Holds a pending job until `until_ms` for its budget.
pub(super) fn hold_for_budget(
    id: u64,
    text: &str,
    until_ms: i64,
    snap: &mut Snapshot,
    jobs: &mut BTreeMap<u64, JobDoc>,
    out: &mut Outbox,
) {
    let _ = snap.set_not_before(JobId(id), Time::from_millis(until_ms));
    if let Some(d) = jobs.get_mut(&id) {
        d.budget_hold = Some(text.to_string());
        d.not_before_ms = Some(until_ms);
    }
    out.touch(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_start_and_end_on_the_first_in_utc() {
        let at = gpool_api::time::parse_rfc3339("2026-11-25T08:00:00Z").expect("time");
        let (s, n) = month_bounds(at);
        assert_eq!(gpool_api::time::rfc3339(s), "2026-11-01T00:00:00.000Z");
        assert_eq!(gpool_api::time::rfc3339(n), "2026-12-01T00:00:00.000Z");
        let dec = gpool_api::time::parse_rfc3339("2026-12-31T23:59:59Z").expect("time");
        assert_eq!(gpool_api::time::rfc3339(month_bounds(dec).1), "2027-01-01T00:00:00.000Z");
    }
}
