//! What goes into a turn of the controller (events) and what comes out of
//! it (the values the shell carries out), and the orders to nodes.

use gpool_api as api;
use gpool_store::Write;
use rustix::process::Signal;

use super::calls::{Answer, Call, Open};
use super::elastic::{ProvisionOp, ProvisionOrder};
use super::proxy_wire::{ProxyReport, Routes};
use crate::plane::webhook::Notice;
use crate::protocol::{AgentReport, Launch, ReplicaKey};

/// Everything the controller reacts to.
#[derive(Debug)]
pub enum Event {
    /// An API call and who makes it.
    Api {
        who: crate::plane::auth::Credential,
        call: Call,
    },
    Open(Open),
    /// What the agent in this process reports.
    Agent(AgentReport),
    /// A node pool's provider program ended (`elastic.rs`).
    Provisioned {
        node: String,
        op: ProvisionOp,
        result: Result<(), String>,
    },
    /// What the service proxy reports (`services.rs`).
    Proxy(ProxyReport),
    Shutdown,
}

/// An order to the agent in this process (`gpool up`), carried out by the shell.
#[derive(Debug, Clone, PartialEq)]
pub enum LocalOrder {
    /// Start a replica on these devices (GPU or MIG UUIDs).
    Start {
        key: ReplicaKey,
        launch: Box<Launch>,
        devices: Vec<String>,
    },
    Signal {
        key: ReplicaKey,
        signal: Signal,
    },
    /// After a restart: watch the replica again, or report it `Lost` if nothing runs it.
    Reconcile {
        key: ReplicaKey,
        devices: Vec<String>,
    },
    /// After a restart: the replica cannot be run any more; kill whatever is left of it.
    Abandon {
        key: ReplicaKey,
    },
    /// Lay MIG GPU `gpu` out as `layout` (`mig_layouts.rs`).
    MigLayout {
        gpu: u32,
        layout: Vec<gpool_gpu::MigSlot>,
    },
    /// Pull `image` now, for a job that will run here once its victims are gone (`prefetch.rs`).
    Prefetch {
        image: String,
        registry_auth: Option<crate::protocol::Secret>,
    },
    /// Profile a replica (`profiles.rs`).
    Profile {
        key: ReplicaKey,
        order: crate::protocol::ProfileOrder,
    },
    /// Show or clear a fault on a simulated GPU (`faults.rs`).
    InjectFault {
        gpu: u32,
        fault: Option<gpool_gpu::InjectedFault>,
    },
    /// Run the health check on a quarantined GPU (`faults.rs`).
    CheckHealth {
        gpu: u32,
        uuid: String,
    },
}

/// An order to some node: routed to the local agent or a remote outbox.
#[derive(Debug)]
pub(crate) enum Order {
    Start { key: ReplicaKey, launch: Box<Launch>, devices: Vec<String> },
    Signal { key: ReplicaKey, signal: Signal },
    MigLayout { gpu: u32, layout: Vec<gpool_gpu::MigSlot> },
    Prefetch { image: String, registry_auth: Option<crate::protocol::Secret> },
    Profile { key: ReplicaKey, order: crate::protocol::ProfileOrder },
    InjectFault { gpu: u32, fault: Option<gpool_gpu::InjectedFault> },
    CheckHealth { gpu: u32, uuid: String },
}

/// What one turn asks of the outside world; see the module docs for the order.
#[derive(Debug, Default)]
pub struct Turn {
    pub writes: Vec<Write>,
    pub answers: Vec<Answer>,
    pub local: Vec<LocalOrder>,
    pub published: Vec<api::EventView>,
    pub notices: Vec<Notice>,
    /// Node pool provider programs to run (`elastic.rs`).
    pub provision: Vec<ProvisionOrder>,
    /// The proxy's new routing table, when it changed (`services.rs`).
    pub routes: Option<std::sync::Arc<Routes>>,
}
