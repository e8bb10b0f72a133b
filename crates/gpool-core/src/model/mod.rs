//! The model: what the cluster and its work are. Time as a number passed in
//! (`time.rs`), accelerator kinds, MIG profiles and the units quotas count in
//! (`resources.rs`), nodes and their devices (`node.rs`), jobs and what they ask
//! for (`job.rs`), the MIG geometry of each GPU model (`mig_geometry.rs`) and a
//! pipeline's shape (`pipeline.rs`).
//!
//! Plain data and the checks on it. Every other room builds on this one, so it
//! may use no other room, and it decides nothing: no pass, no index, no policy.

pub mod job;
pub mod mig_geometry;
pub mod node;
pub mod pipeline;
pub mod resources;
pub mod time;
