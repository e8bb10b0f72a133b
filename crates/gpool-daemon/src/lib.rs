//! # gpool-daemon
//!
//! gpool's processes, in two wings and the protocol between them:
//! - [`node`]: what runs on a GPU node (agent, shims, sampler);
//! - [`plane`]: the control plane (controller, HTTP API, telemetry, alerts);
//! - [`protocol`]: what the two say to each other, imported by both.
//!
//! The three processes are wired side by side at the crate's root, from the
//! same parts: [`up`] (`gpool up`) wires one plane and one local node
//! together; [`serve`] (`gpool serve`) wires a plane alone; [`agent`]
//! (`gpool agent`) wires a node alone; [`wiring`] is what they share, and
//! [`accounts`] the Unix accounts both wings ask about. See
//! ARCHITECTURE.md ("gpool-daemon").

pub mod accounts;
pub mod agent;
pub mod node;
pub mod notify;
pub mod plane;
pub mod pools_file;
pub mod protocol;
pub mod serve;
pub mod up;
pub mod wiring;
pub mod zones;
