//! The plane wing: the control plane. The controller owns all state and
//! decides; `http` is the REST API and the plane's side of the agent
//! protocol; `server` wires a controller thread and the HTTP server; the
//! rest serve them (telemetry store and alerts, metrics, webhook delivery,
//! tokens, the OpenAPI document, input checks at the boundary, spec conversion). It speaks to
//! nodes only through `crate::protocol` and never imports `crate::node`.

pub mod auth;
pub mod controller;
pub mod convert;
pub mod http;
pub mod identity;
pub mod input;
pub mod listen;
pub mod metrics;
pub mod process;
pub mod profile_doc;
pub mod profile_svg;
pub mod provision;
pub mod proxy;
pub mod server;
pub mod telemetry;
pub mod terminals;
pub mod tls;
pub mod usage_rows;
pub mod web;
pub mod webhook;
