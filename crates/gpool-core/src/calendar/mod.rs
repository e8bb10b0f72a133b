//! The calendar: time of day and of the week, as data. Cron schedules
//! (`cron.rs`), whether a recurring job is due (`recurring.rs`), the weekly
//! windows a queue's jobs may start in (`windows.rs`), soft deadlines
//! (`deadline.rs`), and GPUs reserved for a window (`reservation.rs`).
//!
//! Time zones come in as data (`ZoneRules`, which the shell reads from the
//! time-zone database); nothing here reads a clock or a zone file. It may use
//! the model (`crate::model`) only.

pub mod cron;
pub mod deadline;
pub mod recurring;
pub mod reservation;
pub mod windows;
