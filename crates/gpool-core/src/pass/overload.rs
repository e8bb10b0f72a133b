//! Whether the cluster is overloaded long enough for within-class
//! preemption to act (see [`Overload`]).
//!
//! The state is one time: when the current overload began (`None`: not
//! overloaded). Each pass computes the next state from the last one, the
//! pending GPU demand and the capacity, reports it in its plan, and the
//! snapshot carries it to the next pass ([`crate::Snapshot::carry_over`]).
//! Time only moves through `now`, so the daemon and the simulator agree.

use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::policies::policy::Overload;

impl Overload {
    /// The state after a pass at `now` with `demand` pending and `capacity`
    /// up, both in thousandths of a GPU, given the state before.
    ///
    /// Demand at or above `enter` starts (or continues) an overload. Below
    /// it, an overload that has not yet lasted `after` ends; one that has
    /// continues until demand falls below `exit` (hysteresis: a backlog
    /// being worked off dips in and out of `enter` as jobs start and end).
    pub(crate) fn next(&self, since: Option<Time>, demand: GpuMilli, capacity: GpuMilli, now: Time) -> Option<Time> {
        let (demand, capacity) = (demand as f64, capacity as f64);
        if capacity > 0.0 && demand >= self.enter * capacity {
            return Some(since.map_or(now, |s| s.min(now)));
        }
        match since {
            Some(s) if self.acts(Some(s), now) && demand >= self.exit * capacity => Some(s),
            _ => None,
        }
    }

    /// Whether within-class preemption acts at `now` in this state.
    pub(crate) fn acts(&self, since: Option<Time>, now: Time) -> bool {
        since.is_some_and(|s| now.since(s) >= self.after)
    }

    /// When a pass must run for this state to start acting without other
    /// events (`None`: it acts already, or no overload is under way).
    pub(crate) fn acts_at(&self, since: Option<Time>, now: Time) -> Option<Time> {
        let s = since?;
        (!self.acts(since, now)).then(|| s.plus(self.after))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const HOUR: i64 = 3_600_000;

    fn t(hours: i64) -> Time {
        Time::from_millis(hours * HOUR)
    }

    fn gate() -> Overload {
        Overload { enter: 1.0, after: Duration::from_secs(6 * 3600), exit: 0.1 }
    }

    #[test]
    fn overload_starts_lasts_and_ends_as_the_demand_says() {
        let cap = 64_000;
        // (state before, demand, now, state after, acts after)
        let cases = [
            (None, 63_999, 0, None, false),
            (None, 64_000, 0, Some(0), false),
            (Some(0), 90_000, 5, Some(0), false),
            (Some(0), 64_000, 6, Some(0), true),
            // Below `enter` before `after`: a burst, over.
            (Some(0), 63_999, 5, None, false),
            // Below `enter` after `after`: still working off the backlog.
            (Some(0), 6_400, 7, Some(0), true),
            // Below `exit`: over.
            (Some(0), 6_399, 7, None, false),
            (Some(3), 0, 100, None, false),
        ];
        for (before, demand, now, after, acts) in cases {
            let before = before.map(t);
            let next = gate().next(before, demand, cap, t(now));
            assert_eq!(next, after.map(t), "{before:?} demand {demand} at {now} h");
            assert_eq!(gate().acts(next, t(now)), acts, "{before:?} demand {demand} at {now} h");
        }
    }

    #[test]
    fn a_cluster_without_gpus_is_never_overloaded() {
        assert_eq!(gate().next(None, 8_000, 0, t(1)), None);
        assert_eq!(gate().next(None, 0, 0, t(1)), None);
    }

    #[test]
    fn a_pass_is_due_when_the_overload_starts_acting() {
        assert_eq!(gate().acts_at(None, t(1)), None);
        assert_eq!(gate().acts_at(Some(t(1)), t(2)), Some(t(7)));
        assert_eq!(gate().acts_at(Some(t(1)), t(7)), None);
    }
}
