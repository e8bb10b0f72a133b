//! A replica's place in the agent's table of replicas, taken before its
//! shim starts: the one guard against a start delivered twice running a
//! replica twice.

use crate::node::sampler::{ReplicaEntry, Replicas};
use crate::protocol::ReplicaKey;

/// A replica's place in the agent's table, taken before its shim starts and
/// given back if the start stops short.
pub(crate) struct Claim<'a> {
    replicas: &'a Replicas,
    key: ReplicaKey,
    kept: bool,
}

impl<'a> Claim<'a> {
    /// `None` when the replica is in the table already (started or starting).
    pub(crate) fn new(replicas: &'a Replicas, key: ReplicaKey, entry: ReplicaEntry) -> Option<Self> {
        let mut table = replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.contains_key(&key) {
            return None;
        }
        table.insert(key, entry);
        Some(Claim { replicas, key, kept: false })
    }

    pub(crate) fn keep(&mut self) {
        self.kept = true;
    }

    pub(crate) fn release(&mut self) {
        if !self.kept {
            self.replicas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.key);
            self.kept = true;
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
