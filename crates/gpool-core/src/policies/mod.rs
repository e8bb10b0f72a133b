//! The policies: the rules a pass follows, as data the operator sets. The
//! scheduling policy, its presets and its named knobs (`policy.rs`,
//! `policy_knobs.rs`), queue quotas in the Kueue model (`quota.rs`), fair-share
//! usage decayed per team and user (`fairshare.rs`) and power budgets
//! (`power_budget.rs`).
//!
//! Policies describe; the pass (`crate::pass`) decides. So this room may use
//! the model and the calendar (a queue's windows) and nothing above them: no
//! snapshot, no capacity, no plan.

pub mod fairshare;
pub mod policy;
pub mod policy_knobs;
pub(crate) mod power_budget;
pub mod quota;
