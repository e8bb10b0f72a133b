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

mod accounting;
mod calendar;
mod diagnosis;
mod health;
mod history;
mod model;
mod pass;
mod planners;
mod policies;
pub use pass::{fragmentation, plan, power, snapshot};

pub use planners::{autoscale, mig_planner, pools, service_rollout, service_scaler};

pub use accounting::{cost, pricing, usage_ledger};

pub use diagnosis::{advice, alert, profile, series, straggler};

pub use health::{fault, heat, xid};

pub use history::{gittins, power_history, runtime_history};

pub use policies::{fairshare, policy, policy_knobs, quota};

pub use calendar::{cron, deadline, recurring, windows};

pub use model::{job, mig_geometry, node, pipeline, resources, time};

pub use model::job::{
    GpuRequest, GpuShare, Job, JobId, JobSpec, JobState, Placement, ReplicaPlacement, ReplicaRequest, SpotPolicy,
    StopCause,
};
pub use model::node::{Device, GpuSharing, MigInstance, Node, NodeId, NodeState, Pool, PoolKind};
pub use model::resources::{DeviceKind, GpuMilli, KindUnits, MigProfile};
pub use model::time::Time;
pub use pass::feasible::Infeasible;
pub use pass::plan::{PendingReason, Plan, Preempt, PreemptWhy, Start};
pub use pass::schedule::schedule;
pub use pass::snapshot::{Snapshot, SnapshotError, StopOutcome};
pub use policies::policy::{
    Backfill, Ordering, Overload, PlacementStrategy, Policy, PreemptKey, Preemption, StarvationGuard,
};
pub use policies::quota::QueueConfig;
