//! History: what finished jobs teach about the next ones. Run times of jobs
//! alike (`runtime_history.rs`), their draw per GPU (`power_history.rs`), and
//! the Gittins index over such run times (`gittins.rs`).
//!
//! The shell feeds finished jobs in and writes what is learned into the specs
//! of new jobs (`JobSpec::estimate`, `JobSpec::similar_runs`,
//! `JobSpec::watts_per_gpu`), so the pass reads only specs. This room uses no
//! other room: it knows nothing of the snapshot, a node or a policy.

pub mod gittins;
pub mod power_history;
pub mod runtime_history;
