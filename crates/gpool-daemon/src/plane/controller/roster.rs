//! The roster: the nodes an agent may ask, when no control plane answers
//! it, whether they still hear from one (docs/cluster.md, "When no control
//! plane answers"), and the quorum the control plane needs before it
//! declares a silent node lost.
//!
//! The two halves make one argument. An agent keeps its jobs past its lease
//! only when a majority of the roster it was last sent (itself included)
//! answers it and none of them is in a session with a leading control plane
//! (`node/outage.rs`). The control plane declares a silent node lost only
//! while at least half of the members that knew that node hear from it in
//! sessions older than a lease, a heartbeat and the margin. The two sets
//! intersect, so a node that holds on has asked, within its lease, a node
//! whose unbroken session proves a leader leads, and would have stopped:
//! no job runs twice. The rest is timing, written out in docs/cluster.md.

use std::collections::BTreeMap;

use gpool_api::agent as wire;

use gpool_core::NodeId;
use gpool_store::Store;

use super::links::{LEASE_MARGIN_MS, Link, NodeLink};
use super::outbox::Outbox;

/// Where the roster's key is kept, so that every leader signs with the same one.
const KEY_META: &str = "peer_key";

/// A member's standing with this control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    /// When it became a member: 0 for members loaded from the store.
    pub joined_ms: i64,
    /// When its current session with this control plane began; `None`
    /// until its agent registered with it.
    pub session_since_ms: Option<i64>,
    /// Its agent's last request.
    pub last_seen_ms: i64,
}

/// Whether the control plane may declare lost a member silent since
/// `silent_seen_ms`: `Err` says why not yet.
///
/// Counted are the members that were members when the silent one last spoke
/// (the roster its agent may hold); of those, at least half must be in
/// sessions older than `lease + heartbeat + margin` and heard within a
/// lease. A member alone may always be declared: its agent, having no one
/// to ask, stops its jobs at its lease's end.
pub(crate) fn may_declare_lost(
    members: &[Standing],
    silent_seen_ms: i64,
    now: i64,
    lease_ms: i64,
) -> Result<(), String> {
    let knew: Vec<&Standing> = members.iter().filter(|m| m.joined_ms <= silent_seen_ms).collect();
    let n = knew.len();
    if n <= 1 {
        return Ok(());
    }
    let settled = settled_ms(lease_ms);
    let heard = knew
        .iter()
        .filter(|m| m.session_since_ms.is_some_and(|t| t <= now - settled) && m.last_seen_ms >= now - lease_ms)
        .count();
    if 2 * heard >= n {
        Ok(())
    } else {
        Err(format!(
            "the control plane hears from {heard} of the {n} nodes in settled sessions (older than {} s): it may be \
             the one cut off, or just took the lead; no node is declared lost until half of them are",
            settled / 1000
        ))
    }
}

/// How old a session must be to count in the quorum: a lease, a heartbeat
/// (an agent asks its peers that often) and the margin.
pub(crate) fn settled_ms(lease_ms: i64) -> i64 {
    lease_ms + lease_ms / 4 + LEASE_MARGIN_MS
}

/// The roster as this control plane keeps it.
pub(super) struct Roster {
    version: u64,
    key: String,
    /// Members by name: their peer listener, when their agent said.
    members: BTreeMap<String, Member>,
    /// Whether the last lease check that was held back said so (said once).
    held_back: bool,
}

struct Member {
    joined_ms: i64,
    peer_addr: Option<String>,
}

impl Roster {
    pub(super) fn new(key: String) -> Roster {
        Roster { version: 1, key, members: BTreeMap::new(), held_back: false }
    }

    /// A member loaded from the store (it joined before this control plane led).
    pub(super) fn restored(&mut self, node: &str) {
        self.members.entry(node.to_string()).or_insert(Member { joined_ms: 0, peer_addr: None });
        self.version += 1;
    }

    /// A node registered: a member from now if it was not one.
    pub(super) fn registered(&mut self, node: &str, peer_addr: Option<String>, now: i64) {
        let m = self.members.entry(node.to_string()).or_insert(Member { joined_ms: now, peer_addr: None });
        m.peer_addr = peer_addr;
        self.version += 1;
    }

    /// A node declared down leaves the roster.
    pub(super) fn left(&mut self, node: &str) {
        if self.members.remove(node).is_some() {
            self.version += 1;
        }
    }

    fn joined_ms(&self, node: &str) -> Option<i64> {
        self.members.get(node).map(|m| m.joined_ms)
    }

    pub(super) fn wire(&self) -> wire::Roster {
        wire::Roster {
            version: self.version,
            key: self.key.clone(),
            members: self
                .members
                .iter()
                .map(|(node, m)| wire::RosterMember { node: node.clone(), peer_addr: m.peer_addr.clone() })
                .collect(),
        }
    }

    /// The roster for an agent that has `version`: `None` when it is current.
    pub(super) fn update_for(&self, version: u64) -> Option<wire::Roster> {
        (version != self.version).then(|| self.wire())
    }
}

/// A fresh key: 32 random bytes in hex.
fn new_key() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for the roster's key: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Roster {
    /// The roster with its key from the store (made and kept on first
    /// start), and the restored remote nodes as its members.
    pub(super) fn restore(
        store: &mut dyn Store,
        links: &BTreeMap<NodeId, NodeLink>,
        out: &mut Outbox,
    ) -> anyhow::Result<Roster> {
        let key = match store.meta(KEY_META)? {
            Some(k) if k.len() == 64 => k,
            _ => {
                let k = new_key()?;
                out.write(gpool_store::Write::PutMeta(KEY_META.into(), k.clone()));
                k
            }
        };
        let mut roster = Roster::new(key);
        for l in links.values().filter(|l| !l.is_local()) {
            roster.restored(&l.doc.name);
        }
        Ok(roster)
    }

    /// Whether a silent node may be declared lost now (see [`may_declare_lost`]);
    /// the first refusal in a row is said as an event.
    pub(super) fn quorum_for_loss(
        &mut self,
        silent: &str,
        silent_seen_ms: i64,
        links: &BTreeMap<NodeId, NodeLink>,
        lease_ms: i64,
        out: &mut Outbox,
        now: i64,
    ) -> bool {
        let members: Vec<Standing> = links
            .values()
            .filter_map(|l| match &l.link {
                Link::Remote(r) => {
                    let joined_ms = self.joined_ms(&l.doc.name)?;
                    let session_since_ms = r.registered.then_some(r.session_since_ms);
                    Some(Standing { joined_ms, session_since_ms, last_seen_ms: r.last_seen_ms })
                }
                Link::Local => None,
            })
            .collect();
        match may_declare_lost(&members, silent_seen_ms, now, lease_ms) {
            Ok(()) => {
                self.held_back = false;
                true
            }
            Err(why) => {
                if !self.held_back {
                    self.held_back = true;
                    tracing::warn!("node {silent} is silent, but {why}");
                    out.event_of(now, None, None, "node", format!("node {silent} is silent, but {why}"));
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: i64 = 10_000;

    fn settled(now: i64) -> Standing {
        Standing { joined_ms: 0, session_since_ms: Some(now - settled_ms(LEASE)), last_seen_ms: now - 1_000 }
    }

    #[test]
    fn the_quorum_to_declare_a_node_lost() {
        let now = 1_000_000;
        let silent = Standing { joined_ms: 0, session_since_ms: Some(0), last_seen_ms: now - 12_000 };
        let young = Standing { session_since_ms: Some(now - 1_000), ..settled(now) };
        let quiet = Standing { last_seen_ms: now - LEASE - 1, ..settled(now) };
        let unregistered = Standing { session_since_ms: None, ..settled(now) };
        let newcomer = Standing { joined_ms: now - 5_000, ..settled(now) };
        let cases: &[(&str, Vec<Standing>, bool)] = &[
            ("alone: its agent fences itself, so it may be declared", vec![silent], true),
            ("one of two heard in a settled session", vec![silent, settled(now)], true),
            ("two of three heard", vec![silent, settled(now), settled(now)], true),
            ("one of three heard: maybe the plane is the one cut off", vec![silent, settled(now), quiet], false),
            ("sessions too young (just took the lead)", vec![silent, young, young], false),
            ("nobody registered yet", vec![silent, unregistered, unregistered], false),
            ("nobody heard within a lease (the plane was stopped)", vec![silent, quiet, quiet], false),
            (
                "nodes that joined after it went silent do not count for or against",
                vec![silent, quiet, newcomer, newcomer, newcomer],
                false,
            ),
            ("half of four", vec![silent, quiet, settled(now), settled(now)], true),
        ];
        for (what, members, allowed) in cases {
            let got = may_declare_lost(members, silent.last_seen_ms, now, LEASE);
            assert_eq!(got.is_ok(), *allowed, "{what}: {got:?}");
            if let Err(why) = got {
                assert!(why.contains("no node is declared lost"), "{what}: {why}");
            }
        }
    }

    #[test]
    fn the_roster_changes_version_when_members_change() {
        let mut r = Roster::new("k".repeat(64));
        let v0 = r.wire().version;
        assert!(r.update_for(v0).is_none());
        r.registered("a", Some("10.0.0.1:7000".into()), 5);
        let w = r.wire();
        assert!(w.version > v0);
        assert_eq!(w.members, vec![wire::RosterMember { node: "a".into(), peer_addr: Some("10.0.0.1:7000".into()) }]);
        assert_eq!(r.update_for(v0).map(|w| w.members.len()), Some(1));
        r.left("a");
        r.left("a");
        assert_eq!(r.wire().version, w.version + 1, "leaving twice changes it once");
        assert_eq!(r.joined_ms("a"), None);
    }
}
