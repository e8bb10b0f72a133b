//! Soft deadlines (`--deadline`): a job with one rises in the order as it
//! nears, and a job that can no longer make it is said to be late.
//!
//! A job becomes *urgent* at the latest moment that still leaves twice its
//! expected run time before the deadline (its estimate, learned or given,
//! else its time limit); without either, halfway from its submission to the
//! deadline. From then on it goes first in its priority class, urgent jobs
//! earliest deadline first (EDF). A deadline never lifts a job over a
//! higher class, never preempts, and is never enforced: a late job runs on.

use std::time::Duration;

use crate::model::job::JobSpec;
use crate::model::time::Time;

/// What the order and the reports go by: its estimate, else its time limit.
pub fn expected_run(spec: &JobSpec) -> Option<Duration> {
    spec.estimate.or(spec.time_limit)
}

/// When a job with a deadline goes first in its class.
pub fn urgent_at(spec: &JobSpec) -> Option<Time> {
    let deadline = spec.deadline?;
    let d = deadline.as_millis();
    let at = match expected_run(spec) {
        Some(run) => d.saturating_sub((run.as_millis() as i64).saturating_mul(2)),
        None => spec.submit_time.as_millis() + (d - spec.submit_time.as_millis()).max(0) / 2,
    };
    Some(Time::from_millis(at.max(spec.submit_time.as_millis()).min(d)))
}

/// Why a job will miss its deadline, as far as `now` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Late {
    /// The deadline passed and the job has not ended.
    Passed { deadline: Time },
    /// Started now (or running since `started`), its expected run time ends after the deadline.
    CannotMake { deadline: Time, expected_end: Time },
}

impl std::fmt::Display for Late {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Late::Passed { deadline } => write!(f, "its deadline {deadline} passed"),
            Late::CannotMake { deadline, expected_end } => {
                write!(f, "it cannot make its deadline {deadline}: at its expected run time it ends {expected_end}")
            }
        }
    }
}

/// Whether a job that has not ended will be late: pending (`started`
/// `None`) or running since `started`.
pub fn late(spec: &JobSpec, now: Time, started: Option<Time>) -> Option<Late> {
    let deadline = spec.deadline?;
    if now > deadline {
        return Some(Late::Passed { deadline });
    }
    let run = expected_run(spec)?;
    let expected_end = started.unwrap_or(now).plus(run);
    (expected_end > deadline).then_some(Late::CannotMake { deadline, expected_end })
}

/// The order's `primary` value of an urgent job: above every other job of
/// its class (those have 0, or less under max-min fairness), earliest deadline first.
pub(crate) fn urgent_rank(deadline: Time) -> i64 {
    i64::MAX / 4 - deadline.as_millis() / 1000
}
