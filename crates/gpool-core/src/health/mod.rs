//! GPU health: whether a GPU can be trusted with work. NVIDIA's XIDs and what
//! each asks of gpool (`xid.rs`), faults and quarantine (`fault.rs`), and heat:
//! when a GPU that keeps slowing down counts as degraded (`heat.rs`).
//!
//! Readings and the time in, verdicts out. The shell hands the verdicts to the
//! snapshot (`Snapshot::set_quarantined_gpus`, `Snapshot::set_degraded_gpus`),
//! so this room may use the model only and never the pass.

pub mod fault;
pub mod heat;
pub mod xid;
