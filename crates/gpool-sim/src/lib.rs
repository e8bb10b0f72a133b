//! # gpool-sim
//!
//! The trace-replay simulator and the scheduling benchmarks. Both drive
//! `gpool-core` exactly as the daemon does: keep a `Snapshot` current, call
//! `schedule(&snapshot, now)`, apply the plan. Here `now` is a virtual clock.

pub mod bench;
pub mod rng;
pub mod synthetic;
