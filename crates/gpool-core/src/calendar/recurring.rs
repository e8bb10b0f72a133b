//! Recurring jobs and pipelines: whether a schedule is due at `now`.
//!
//! A schedule remembers the last occurrence it acted on (fired or skipped);
//! the shell persists that in the same commit as the jobs it submits, so an
//! occurrence is acted on once across restarts: none lost (one that fell
//! while the control plane was down fires when it is back), none repeated.
//! When several occurrences were missed, only the latest fires (Kubernetes
//! CronJobs and Slurm's scrontab do the same): ten missed nightly runs are
//! one run, not ten at once.

use crate::calendar::cron::{Cron, ZoneRules};
use crate::model::time::Time;

/// What a schedule does at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing is due; look again at `next` (none: it never occurs again).
    Wait { next: Option<Time> },
    /// Submit a run for `occurrence`; `missed` earlier ones were passed over.
    Fire { occurrence: Time, missed: u32 },
    /// The occurrence is passed over: the previous run is still going and
    /// overlap is not allowed.
    Skip { occurrence: Time, missed: u32 },
}

impl Due {
    /// The occurrence acted on, which the shell records as the schedule's last.
    pub fn occurrence(&self) -> Option<Time> {
        match self {
            Due::Wait { .. } => None,
            Due::Fire { occurrence, .. } | Due::Skip { occurrence, .. } => Some(*occurrence),
        }
    }
}

/// Most occurrences counted as missed (the rest are counted as this many).
const COUNT_MISSED: u32 = 10_000;

/// Whether the schedule is due at `now`, given the last occurrence it acted
/// on (or the time it was created, for a new one).
pub fn due(cron: &Cron, zone: &ZoneRules, last: Time, now: Time, previous_running: bool, allow_overlap: bool) -> Due {
    let Some(first) = cron.next_after(last, zone).filter(|t| *t <= now) else {
        return Due::Wait { next: cron.next_after(last, zone) };
    };
    let mut latest = first;
    let mut missed = 0u32;
    while let Some(t) = cron.next_after(latest, zone).filter(|t| *t <= now) {
        latest = t;
        missed += 1;
        if missed >= COUNT_MISSED {
            // Far behind: jump to the last occurrence before `now` without counting.
            while let Some(t) = cron.next_after(latest, zone).filter(|t| *t <= now) {
                latest = t;
            }
            break;
        }
    }
    if previous_running && !allow_overlap {
        Due::Skip { occurrence: latest, missed }
    } else {
        Due::Fire { occurrence: latest, missed }
    }
}
