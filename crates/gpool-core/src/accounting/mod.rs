//! Accounting: what GPU time costs and who used it. An allocation's share of
//! its node's price and a ledger summing charges by any grouping (`cost.rs`),
//! prices per GPU-hour (`pricing.rs`), and finished jobs' usage per hour and
//! owner (`usage_ledger.rs`).
//!
//! Costs are counted from what ran, after the fact: this room may use the
//! model only, and no decision of the pass depends on it.

pub mod cost;
pub mod pricing;
pub mod usage_ledger;
