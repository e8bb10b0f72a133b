//! # gpool-sim
//!
//! The trace-replay simulator and the scheduling benchmarks. Both drive
//! `gpool-core` exactly as the daemon does: keep a `Snapshot` current, call
//! `schedule(&snapshot, now)`, apply the plan. Here `now` is a virtual clock.
//!
//! - [`trace`]: readers for the Philly, ITP and Alibaba openb traces and a generic CSV;
//! - [`engine`]: the discrete-event simulation;
//! - [`metrics`]: JCT, queueing, utilisation, slowdown, fairness;
//! - [`plot`]: SVG charts; [`bench`]: `gpool bench schedule`.

pub mod bench;
pub mod cluster;
pub mod elastic;
pub mod engine;
pub mod faults;
pub mod fleet;
pub mod kinds;
pub mod metrics;
pub mod mig_bench;
pub mod plot;
pub mod policy_table;
pub mod rng;
pub mod sharing_bench;
pub mod spot;
pub mod synthetic;
pub mod trace;
