//! What the scheduling passes leave for others to read: why each waiting
//! job waits, the job backfill reserves for and when, and the counters and
//! histograms `/metrics` shows (starts, preemptions, waits, pass times).

use gpool_api as api;
use gpool_core::Plan;

use crate::plane::metrics::Histogram;

pub(super) struct PassRecord {
    /// Why each job the last pass examined waits: (job, index into `reason_texts`), sorted by job; one reason per job shape.
    pub(super) waiting: Vec<(u64, u32)>,
    pub(super) reason_texts: Vec<String>,
    /// The reason of jobs the last pass did not examine.
    pub(super) default_reason: Option<String>,
    /// The job backfill holds resources for, and when it expects it to start (`Plan::reservation`).
    pub(super) reserved: Option<(u64, i64)>,
    /// Seconds from queueing to start.
    pub(super) wait: Histogram,
    /// Seconds per pass.
    pub(super) passes: Histogram,
    /// No scheduling pass before this (see `Controller::turn`).
    pub(super) next_pass_ms: i64,
    pub(super) allocations: u64,
    pub(super) preemptions: u64,
    /// Elastic jobs restarted at another size.
    pub(super) resizes: u64,
}

impl Default for PassRecord {
    fn default() -> PassRecord {
        PassRecord {
            waiting: Vec::new(),
            reason_texts: Vec::new(),
            default_reason: None,
            reserved: None,
            wait: Histogram::wait_seconds(),
            passes: Histogram::pass_seconds(),
            next_pass_ms: 0,
            allocations: 0,
            preemptions: 0,
            resizes: 0,
        }
    }
}

impl PassRecord {
    /// Keeps what a pass said of the jobs it did not start.
    pub(super) fn record(&mut self, plan: &mut Plan) {
        self.reason_texts = plan.reason_table.iter().map(reason_text).collect();
        self.waiting = std::mem::take(&mut plan.waiting).into_iter().map(|(j, r)| (j.0, r)).collect();
        self.waiting.sort_unstable();
        self.default_reason = plan.others.as_ref().map(ToString::to_string);
        self.reserved =
            plan.reservation.as_ref().filter(|r| r.at < gpool_core::Time::NEVER).map(|r| (r.job.0, r.at.as_millis()));
    }

    /// Why a pending job waits, as the last pass said.
    pub(super) fn reason(&self, id: u64) -> Option<&str> {
        let i = self.waiting.binary_search_by_key(&id, |(j, _)| *j).ok()?;
        self.reason_texts.get(self.waiting[i].1 as usize).map(String::as_str)
    }
}

/// A pass's reason as the API says it: times as RFC 3339, not the core's `t=…s`.
pub(super) fn reason_text(r: &gpool_core::PendingReason) -> String {
    match r {
        gpool_core::PendingReason::Window { queue, opens: Some(at) } => format!(
            "queue {queue} starts jobs only in its windows; the next opens at {}",
            api::time::rfc3339(at.as_millis())
        ),
        gpool_core::PendingReason::Protected { until } => format!(
            "the work it would preempt is protected until {} (minRuntime)",
            api::time::rfc3339(until.as_millis())
        ),
        other => other.to_string(),
    }
}
