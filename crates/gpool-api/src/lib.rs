//! # gpool-api
//!
//! The wire types of gpool: the job spec users write (YAML or JSON,
//! Kubernetes-like, unknown fields rejected) and the JSON the REST API under
//! `/api/v1` returns. The CLI speaks only these types; the daemon converts
//! them to and from the scheduling core's domain types.
//!
//! Compatibility: fields are only ever added to views; a field of the spec
//! keeps its meaning once released.

pub mod agent;
pub mod dashboard;
pub mod patterns;
pub mod pipeline;
pub mod profile;
pub mod quantity;
pub mod reservation;
pub mod schedule;
pub mod spec;
pub mod telemetry;
pub mod terminal;
pub mod time;
pub mod view;
pub mod yaml;

pub use dashboard::*;
pub use profile::*;
pub use spec::{Command, JobSpec};
pub use telemetry::*;
pub use view::*;
