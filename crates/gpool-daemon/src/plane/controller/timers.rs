//! Timers: what the controller must do at a time even if nothing happens
//! (SIGKILL after a grace period, a time limit, a back-off ending, a lease
//! check, a parked poll's empty answer). They fire at the first turn whose
//! clock reading has reached them; the shell sleeps until the earliest.

use rustix::process::Signal;

use super::docs::Stop;
use super::{Controller, Order};
use crate::protocol::ReplicaKey;

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

impl Controller {
    pub(super) fn fire_timers(&mut self, now: i64) {
        while let Some(&(t, timer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Wake => self.out.dirty = true,
                Timer::Unseen { job, attempt } => self.unseen_check(job, attempt, now),
                Timer::Lease { node } => self.lease_check(node, now),
                Timer::StartHold { node } => self.start_hold_check(node, now),
                Timer::PollTimeout { node, park } => self.poll_timeout(node, park),
                Timer::ProfileDeadline { profile } => self.profile_deadline(profile, now),
                Timer::Kill { job, attempt } => {
                    let left: Vec<_> = self
                        .jobs
                        .get(&job)
                        .and_then(|d| d.run.as_ref())
                        .filter(|r| r.attempt == attempt)
                        .map(|run| {
                            run.replicas
                                .iter()
                                .filter(|r| !r.ended())
                                .filter_map(|r| Some((self.snap.node_id(&r.node)?, r.rank)))
                                .collect()
                        })
                        .unwrap_or_default();
                    for (node, rank) in left {
                        let key = ReplicaKey { job, attempt, rank };
                        self.order(node, Order::Signal { key, signal: Signal::KILL });
                    }
                }
                Timer::TimeLimit { job, attempt } => {
                    let live = self.jobs.get(&job).and_then(|d| d.run.as_ref()).is_some_and(|r| r.attempt == attempt);
                    if live {
                        self.stop_run(job, Stop::TimeLimit, now);
                        self.event(
                            now,
                            Some(job),
                            "time_limit",
                            format!("job {job} reached its time limit; stop signal sent"),
                        );
                    }
                }
            }
        }
    }
}
