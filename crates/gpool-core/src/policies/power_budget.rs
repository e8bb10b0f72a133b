//! What a power budget is: watts over a node, a label's nodes or a pool.
//! The snapshot keeps them; `power.rs` counts draw against them in a pass.

use std::sync::Arc;

use crate::model::node::Node;

/// Which nodes a budget covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerScope {
    Node(Arc<str>),
    /// Nodes whose label `key` has `value` (`rack=r12`).
    Label(Arc<str>, Arc<str>),
    /// Nodes of a pool.
    Pool(Arc<str>),
}

impl std::fmt::Display for PowerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PowerScope::Node(n) => write!(f, "node {n}"),
            PowerScope::Label(k, v) => write!(f, "{k}={v}"),
            PowerScope::Pool(p) => write!(f, "pool {p}"),
        }
    }
}

impl PowerScope {
    pub fn covers(&self, node: &Node) -> bool {
        match self {
            PowerScope::Node(n) => node.name == *n,
            PowerScope::Label(k, v) => node.labels.get(&**k).is_some_and(|x| **x == **v),
            PowerScope::Pool(p) => *node.pool.name == **p,
        }
    }
}

/// A budget in watts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerBudget {
    pub scope: PowerScope,
    pub watts: u32,
}
