//! # gpool-core
//!
//! gpool's scheduling core: a pure function from a cluster [`Snapshot`] and a
//! time to a [`Plan`] (start these jobs here, preempt those, and why every
//! other job waits). No I/O, no async, no clock, no randomness: the daemon
//! and the trace simulator call the same [`schedule`] with their own notion
//! of time, and equal inputs give equal plans.
//!
//! ## Brief overview
//! - [`Snapshot`]: nodes, devices, queues and jobs, kept current by the
//!   caller event by event (`add_node`, `submit`, `start`, `stop`, …), with
//!   the indexes a pass needs.
//! - [`Policy`]: ordering (multifactor, FIFO, SJF, SRTF, LAS, max-min fair),
//!   backfill (none, first fit, EASY), preemption rules, placement strategy.
//! - [`schedule`]: one pass, returning a [`Plan`].
//! - [`alert`] and [`advice`]: alert rules and diagnosis over GPU telemetry,
//!   pure in the same way (readings and time in, transitions and findings out).
//!
//! The invariants every plan keeps are listed in ARCHITECTURE.md and checked
//! by the property tests in `tests/`.
//!
//! ## Rooms
//! The source is in rooms by concern; each room's `mod.rs` says what it is
//! for and which rooms it may use. Listed from the bottom up: a room uses
//! only rooms listed before it (`tests/workspace_rules.rs` holds the crate to
//! that order, and to no import circle between any two modules):
//! - `model/`: time, accelerator kinds, nodes and devices, jobs, MIG
//!   geometry, pipelines. Plain data.
//! - `calendar/`: cron, recurring schedules, queue windows, deadlines.
//! - `policies/`: the scheduling policy and its knobs, quotas, fair share,
//!   power budgets.
//! - `history/`: run times, draw and the Gittins index, learned from
//!   finished jobs.
//! - `pass/`: [`schedule`] and the state it reads: the [`Snapshot`], free
//!   capacity and the placement search, order, preemption, backfill, the
//!   [`Plan`].
//! - `planners/`: planners beside the pass (autoscaler and pools, MIG
//!   layouts, services' scaling and rollout).
//! - `health/`, `diagnosis/`, `accounting/`: GPU faults and heat; alerts,
//!   advice, stragglers and profiles; costs, prices and usage. None uses the
//!   pass.
//!
//! ## Public surface
//! The rooms are private. What other crates use is re-exported here, at the
//! paths it had before the rooms (`gpool_core::pricing::Prices`,
//! `gpool_core::snapshot::Snapshot`, `gpool_core::Time`): the modules below,
//! each under its own name, and the main types at the root. Inside the
//! crate, code names a module by its room (`crate::model::time::Time`), so
//! that every dependency between rooms is written where it is used.

mod accounting;
mod calendar;
mod diagnosis;
mod health;
mod history;
mod model;
mod pass;
mod planners;
mod policies;

// The modules other crates name, at their paths before the rooms.
pub use accounting::{cost, pricing, usage_ledger};
pub use calendar::{cron, deadline, recurring, reservation, windows};
pub use diagnosis::{advice, alert, profile, series, straggler};
pub use health::{fault, heat, xid};
pub use history::{gittins, power_history, runtime_history};
pub use model::{job, mig_geometry, node, pipeline, resources, time};
pub use pass::{fragmentation, plan, power, snapshot};
pub use planners::{autoscale, mig_planner, pools, service_rollout, service_scaler};
pub use policies::{fairshare, policy, policy_knobs, quota};

// The main types, at the root.
pub use model::job::{
    ArrayLimit, GpuRequest, GpuShare, Job, JobId, JobSpec, JobState, Placement, ReplicaPlacement, ReplicaRequest,
    SpotPolicy, StopCause,
};
pub use model::node::{Device, GpuSharing, MigInstance, Node, NodeId, NodeState, Pool, PoolKind};
pub use model::resources::{DeviceKind, GpuMilli, KindUnits, MigProfile};
pub use model::time::Time;
pub use pass::feasible::Infeasible;
pub use pass::plan::{PendingReason, Plan, Preempt, PreemptWhy, Resize, ResizeWhy, Start};
pub use pass::schedule::schedule;
pub use pass::snapshot::{ReservationRequest, Snapshot, SnapshotError, StopOutcome};
pub use policies::policy::{
    Backfill, Ordering, Overload, PlacementStrategy, Policy, PreemptKey, Preemption, StarvationGuard,
};
pub use policies::quota::QueueConfig;
