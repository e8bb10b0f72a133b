//! A service as the controller keeps it: its persisted document, and what
//! this control plane has learned of it since it started (readiness,
//! drains, failures, load). `services.rs` acts on them.

use std::collections::{BTreeMap, BTreeSet};

use gpool_api as api;
use gpool_core::service_scaler::{ScalerConfig, ScalerState};
use serde::{Deserialize, Serialize};

use super::proxy_wire::{LATENCY_BOUNDS, ServiceLoad};
use crate::plane::metrics::Histogram;

/// A service as persisted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ServiceDoc {
    pub name: String,
    pub user: String,
    pub team: String,
    pub spec: api::JobSpec,
    pub generation: u64,
    pub created_ms: i64,
    /// Its replica jobs, and the generation each runs.
    pub replicas: BTreeMap<u64, u64>,
    /// The replicas the scaler last wanted.
    pub desired: u32,
}

/// A service and what this control plane knows of it since it started.
pub(super) struct ServiceEntry {
    pub(super) doc: ServiceDoc,
    pub(super) cfg: ScalerConfig,
    pub(super) scaler: ScalerState,
    /// Replicas whose probe answers, at the address they answer on.
    pub(super) ready: BTreeMap<u64, String>,
    /// Replicas draining, and when they are stopped even so.
    pub(super) draining: BTreeMap<u64, i64>,
    /// Replicas this room stopped (their end is no failure).
    pub(super) stopping: BTreeSet<u64>,
    pub(super) failures: u32,
    pub(super) retry_at_ms: i64,
    /// Ask the scaler again at this time, even with no new sample.
    pub(super) scale_at_ms: Option<i64>,
    pub(super) load: ServiceLoad,
    pub(super) requests_total: u64,
    pub(super) failed_total: u64,
    pub(super) latency: Histogram,
}

impl ServiceEntry {
    pub(super) fn new(doc: ServiceDoc, cfg: ScalerConfig) -> ServiceEntry {
        ServiceEntry {
            doc,
            cfg,
            scaler: ScalerState::default(),
            ready: BTreeMap::new(),
            draining: BTreeMap::new(),
            stopping: BTreeSet::new(),
            failures: 0,
            retry_at_ms: 0,
            scale_at_ms: None,
            load: ServiceLoad::default(),
            requests_total: 0,
            failed_total: 0,
            latency: latency_histogram(),
        }
    }
}

fn latency_histogram() -> Histogram {
    Histogram { bounds: LATENCY_BOUNDS.to_vec(), counts: vec![0; LATENCY_BOUNDS.len()], sum: 0.0, count: 0 }
}
