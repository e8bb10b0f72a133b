//! Diagnosis: findings over telemetry, for people and for the shell. Alert
//! rules held for a duration (`alert.rs`), right-sizing advice from a job's
//! series (`advice.rs`, over `series.rs`), the straggler of a gang
//! (`straggler.rs`) and where a job's time goes, from its stacks
//! (`profile.rs`).
//!
//! Readings and the time in, findings out. It may use the model and GPU health
//! (`crate::health`, for heat); nothing here places, preempts or stops a job,
//! so it never uses the pass.

pub mod advice;
pub mod alert;
pub mod profile;
pub mod series;
pub mod straggler;
