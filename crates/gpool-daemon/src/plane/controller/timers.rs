//! Timers: what the controller must do at a time even if nothing happens
//! (SIGKILL after a grace period, a time limit, a back-off ending, a lease
//! check, a parked poll's empty answer). They fire at the first turn whose
//! clock reading has reached them; the shell sleeps until the earliest.

use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    /// SIGKILL whatever of this run is left.
    Kill {
        job: u64,
        attempt: u32,
    },
    TimeLimit {
        job: u64,
        attempt: u32,
    },
    /// Has every remote replica of this run been seen running?
    Unseen {
        job: u64,
        attempt: u32,
    },
    /// A retry back-off ends: schedule again.
    Wake,
    /// Is this node's lease still alive?
    Lease {
        node: u32,
    },
    /// A node held after a failed start may take new work again.
    StartHold {
        node: u32,
    },
    /// A profile's nodes have had their time (`profiles.rs`).
    ProfileDeadline {
        profile: u64,
    },
    /// A parked long poll gets an empty answer.
    PollTimeout {
        node: u32,
        park: u64,
    },
}

/// The timers set, earliest first.
#[derive(Debug, Default)]
pub(super) struct Timers(BTreeSet<(i64, Timer)>);

impl Timers {
    /// `timer` fires at the first turn at or after `at_ms`.
    pub(super) fn at(&mut self, at_ms: i64, timer: Timer) {
        self.0.insert((at_ms, timer));
    }

    /// When the earliest timer is due.
    pub(super) fn next(&self) -> Option<i64> {
        self.0.first().map(|(t, _)| *t)
    }

    /// Takes the earliest timer due by `now`.
    pub(super) fn pop_due(&mut self, now: i64) -> Option<Timer> {
        let &(t, _) = self.0.first()?;
        (t <= now).then(|| self.0.pop_first().map(|(_, timer)| timer)).flatten()
    }
}
