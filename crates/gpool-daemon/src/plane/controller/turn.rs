//! What goes into a turn of the controller (events) and what comes out of
//! it (the values the shell carries out), and the orders to nodes.

use gpool_api as api;
use gpool_store::Write;

use super::calls::{Answer, Call, Open};
use super::elastic::{ProvisionOp, ProvisionOrder};
use super::proxy_wire::{ProxyReport, Routes};
use crate::plane::webhook::Notice;
use crate::protocol::{AgentReport, Order};

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

/// What one turn asks of the outside world; see the module docs for the order.
#[derive(Debug, Default)]
pub struct Turn {
    pub writes: Vec<Write>,
    pub answers: Vec<Answer>,
    pub local: Vec<Order>,
    pub published: Vec<api::EventView>,
    pub notices: Vec<Notice>,
    /// Node pool provider programs to run (`elastic.rs`).
    pub provision: Vec<ProvisionOrder>,
    /// The proxy's new routing table, when it changed (`services.rs`).
    pub routes: Option<std::sync::Arc<Routes>>,
}
