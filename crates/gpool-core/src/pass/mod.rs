//! The pass: `schedule(&Snapshot, now) -> Plan` (`schedule.rs` and
//! `schedule/`), and the state it reads. The snapshot and its indexes, kept
//! current event by event (`snapshot.rs` and `snapshot/`), the running jobs in
//! compact form (`running.rs`), job shapes and the interner behind them
//! (`shapes.rs`, `intern.rs`); the working copy of free capacity a pass places
//! into and the placement search (`capacity.rs` and `capacity/`), what a pass
//! keeps for the next and the change logs behind it (`kept.rs`), shared GPUs
//! (`shares.rs`), fragmentation (`fragmentation.rs`), label slices
//! (`slices.rs`), a node's MIG GPUs one at a time (`mig_slots.rs`), power
//! budgets counted in a pass (`power.rs`); the order (`order.rs`), preemption
//! (`preempt.rs`, `victim_pool.rs`, `releasing.rs`), backfill (`backfill.rs`), the overload gate
//! (`overload.rs`), feasibility (`feasible.rs`), and the plan it returns
//! (`plan.rs`).
//!
//! It may use the model, the calendar, the policies and history. It may not
//! use planners, GPU health, diagnosis or accounting: those sit beside or above
//! the pass, and reach it only through the snapshot's events.

mod backfill;
mod capacity;
pub(crate) mod feasible;
pub mod fragmentation;
mod intern;
mod kept;
mod mig_slots;
mod order;
mod overload;
pub mod plan;
pub mod power;
mod preempt;
mod releasing;
mod running;
pub(crate) mod schedule;
mod shapes;
mod shares;
mod slices;
pub mod snapshot;
mod victim_pool;

#[cfg(test)]
thread_local! {
    /// Passes run as if their caches of failed searches (`Pass::no_victims`)
    /// and of the last victim looked for (`VictimPool::most_preemptible`)
    /// did not exist (`schedule/cache_tests.rs`).
    pub(crate) static UNCACHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
