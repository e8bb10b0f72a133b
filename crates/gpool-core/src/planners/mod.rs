//! Planners beside `schedule()`, pure like it: the node autoscaler over node
//! pools (`autoscale.rs`, `pools.rs`), MIG layouts that follow the queue
//! (`mig_planner.rs`), and an inference service's replicas: how many it wants
//! (`service_scaler.rs`) and which to start and drain (`service_rollout.rs`).
//!
//! A planner reads what the pass reads (the snapshot) or what it left (the
//! plan), so it may use the pass and every room below it. The pass may not
//! use a planner: what a planner decides reaches the next pass only through
//! the shell, as events on the snapshot (a node added, a GPU repartitioned, a
//! replica submitted).

pub mod autoscale;
pub mod mig_planner;
pub mod pools;
pub mod service_rollout;
pub mod service_scaler;
