//! # gpool-daemon
//!
//! `gpool up`: the control plane, a local node agent and the REST API in one
//! process. See ARCHITECTURE.md ("gpool-daemon") for the event loop.

pub mod agent;
pub mod agent_client;
pub mod auth;
pub mod controller;
pub mod convert;
pub mod http;
pub mod lease;
pub mod metrics;
pub mod openapi;
pub mod prices;
pub mod sampler;
pub mod serve;
pub mod shim;
pub mod telemetry;
pub mod up;
pub mod webhook;
