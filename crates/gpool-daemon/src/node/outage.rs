//! When no control plane answers: keep the node's jobs running, or let
//! them end with the lease?
//!
//! A node cut off alone must stop its jobs by the end of its lease, because
//! the control plane then runs them elsewhere. But when the database or
//! every control plane is away, nobody can run them elsewhere, and killing
//! them loses hours of work for nothing. The agent tells the two apart by
//! asking its peers (the roster the control plane last sent) whether they
//! are in a session with a leading control plane ([`decide`]):
//!
//! - one of them is: a leader leads and reaches it, so this node is the one
//!   cut off. Its lease is not extended: its shims kill its jobs at the end.
//! - a majority of the roster (this node included) answers and none is:
//!   the control planes are away, not this node. The lease is extended by
//!   a lease from the start of the round, and asked again each round.
//! - fewer answer: it cannot tell, so it stops its jobs as it always did.
//!
//! Why this never runs a job twice is in `plane/controller/roster.rs` (the
//! control plane's half) and docs/cluster.md.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpool_api::agent as wire;

use crate::node::lease;

/// What one peer said when asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// It answered, with a valid signature: whether it is in a session with a leader.
    Answered { in_session: bool },
    /// No answer, a refusal or a bad signature: counted as not reached.
    Unreached(String),
}

/// The verdict of one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The control planes are away: keep the jobs for another lease.
    Hold { reached: usize, members: usize },
    /// Let the lease run out: the jobs end with it.
    Fence(String),
}

/// The rule, a pure function of what the agent heard: `members` is the
/// size of its roster (itself included) and `answers` what the others said.
pub fn decide(members: usize, answers: &[(String, Asked)]) -> Verdict {
    if let Some((node, _)) = answers.iter().find(|(_, a)| *a == Asked::Answered { in_session: true }) {
        return Verdict::Fence(format!(
            "node {node} is in a session with a leading control plane, so this node is the one cut off"
        ));
    }
    if members < 2 {
        return Verdict::Fence("this node has no other node to ask".into());
    }
    let reached = 1 + answers.iter().filter(|(_, a)| matches!(a, Asked::Answered { .. })).count();
    if 2 * reached > members {
        Verdict::Hold { reached, members }
    } else {
        Verdict::Fence(format!(
            "it reached {reached} of the {members} nodes (itself included); a majority is needed to tell an \
             outage of the control planes from this node being cut off"
        ))
    }
}

/// What the agent knows of its contact with the control planes, shared by
/// the session (which renews the lease), the peer listener (which answers
/// from it) and the keeper (which extends the lease in an outage).
#[derive(Debug)]
pub struct Contact {
    path: PathBuf,
    node: String,
    state: Mutex<State>,
}

/// What an agent keeps of its last session across its own restart (in
/// `roster.json`, mode 0600: it holds the roster's key), so that an agent
/// restarted while no control plane answers can still ask its peers.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    lease_ms: u64,
    roster: wire::Roster,
}

#[derive(Debug, Default)]
struct State {
    /// A session with a leading control plane is open and none of its requests failed.
    in_session: bool,
    /// When the last answer of a leader arrived (monotonic).
    heard_ms: i64,
    /// When the request now waiting for its answer was sent, if one is.
    pending_since: Option<i64>,
    lease_ms: u64,
    roster: Option<wire::Roster>,
    /// The deadline last written to the lease file.
    deadline_ms: i64,
    /// Where the roster is kept across restarts (`remember_in`).
    kept: Option<PathBuf>,
    /// The outage held through, for the next registration: (since, rounds held).
    held: Option<(i64, u32)>,
    /// The last verdict said in the log, not to repeat it every round.
    said: Option<Verdict>,
}

impl Contact {
    pub fn new(path: PathBuf, node: String) -> Arc<Contact> {
        Arc::new(Contact { path, node, state: Mutex::new(State { lease_ms: 10_000, ..State::default() }) })
    }

    /// Keeps the roster in `file` from now on, and takes the one kept there
    /// by the agent before this one, if any.
    pub fn remember_in(&self, file: PathBuf) {
        let kept = std::fs::read_to_string(&file).ok().and_then(|t| serde_json::from_str::<Kept>(&t).ok());
        let mut s = self.state();
        if let Some(k) = kept {
            s.lease_ms = k.lease_ms;
            s.roster = Some(k.roster);
        }
        // The shims' lease file, as the agent before this one left it.
        s.deadline_ms = lease::read(&self.path).unwrap_or(0);
        s.kept = Some(file);
    }

    fn keep(s: &State) {
        let (Some(file), Some(roster)) = (&s.kept, &s.roster) else { return };
        let Ok(text) = serde_json::to_string(&Kept { lease_ms: s.lease_ms, roster: roster.clone() }) else { return };
        let tmp = file.with_extension("tmp");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, file));
        if let Err(e) = written {
            tracing::warn!("cannot keep the roster in {}: {e}", file.display());
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn lease_ms(&self) -> u64 {
        self.state().lease_ms
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// A session opened: a request sent at `sent_ms` was answered by a leader.
    pub fn opened(&self, sent_ms: i64, lease_ms: u64, roster: Option<wire::Roster>) {
        let mut s = self.state();
        s.in_session = true;
        s.lease_ms = lease_ms;
        if roster.is_some() {
            s.roster = roster;
        }
        Contact::keep(&s);
        drop(s);
        self.answered(sent_ms);
    }

    /// A request sent at `sent_ms` was answered: the lease lasts a lease from then.
    /// A request to the leader is about to be sent.
    pub fn sending(&self) {
        let mut s = self.state();
        s.pending_since = s.pending_since.or(Some(lease::monotonic_ms()));
    }

    pub fn answered(&self, sent_ms: i64) {
        let mut s = self.state();
        s.heard_ms = lease::monotonic_ms();
        s.pending_since = None;
        let to = sent_ms + s.lease_ms as i64;
        self.extend_locked(&mut s, to);
    }

    /// The session ended (a request failed, or was refused).
    pub fn closed(&self) {
        let mut s = self.state();
        s.in_session = false;
        s.pending_since = None;
    }

    pub fn set_roster(&self, roster: wire::Roster) {
        let mut s = self.state();
        s.roster = Some(roster);
        Contact::keep(&s);
    }

    pub fn roster_version(&self) -> u64 {
        self.state().roster.as_ref().map_or(0, |r| r.version)
    }

    /// The roster's key, to check and sign peers' questions and answers.
    pub fn key(&self) -> Option<String> {
        self.state().roster.as_ref().map(|r| r.key.clone())
    }

    /// What this node answers a peer, and whether its keeper asks peers:
    /// in a session with a leader that answered within half a lease (two
    /// heartbeats), with no request waiting longer than an eighth of a
    /// lease. A stopped or hung control plane holds requests until they
    /// time out, which for a short lease is longer than the lease: a request
    /// that waits that long says the session is gone before it ends, so
    /// that every node notices an outage well within its lease.
    pub fn in_session(&self) -> bool {
        let s = self.state();
        let now = lease::monotonic_ms();
        let lease = s.lease_ms as i64;
        s.in_session && now - s.heard_ms < lease / 2 && s.pending_since.is_none_or(|t| now - t <= lease / 8)
    }

    /// What the next registration tells the control plane of an outage held
    /// through (said once).
    pub fn take_held_note(&self) -> Option<String> {
        let (since, rounds) = self.state().held.take()?;
        let secs = (lease::monotonic_ms() - since) / 1000;
        Some(format!(
            "kept its jobs running through an outage of the control planes (no peer was in a session with one): \
             about {secs} s without a leading control plane, {rounds} rounds of asking its peers"
        ))
    }

    fn extend_locked(&self, s: &mut State, to_ms: i64) {
        if to_ms <= s.deadline_ms {
            return;
        }
        match lease::write(&self.path, to_ms) {
            Ok(()) => s.deadline_ms = to_ms,
            Err(e) => tracing::warn!("cannot write the lease file {}: {e}", self.path.display()),
        }
    }

    /// One round of the keeper: nothing while in session; else ask the
    /// peers and extend the lease on a hold.
    pub fn round(&self, ask: &(dyn Fn(&wire::RosterMember, &str) -> Asked + Sync)) {
        if self.in_session() {
            let mut s = self.state();
            if s.said.take().is_some() {
                tracing::info!("a leading control plane answers again");
            }
            return;
        }
        let started = lease::monotonic_ms();
        let (roster, lease_ms) = {
            let s = self.state();
            (s.roster.clone(), s.lease_ms)
        };
        let verdict = match &roster {
            // Never registered: no lease to keep, nobody to ask.
            None => return,
            Some(r) => {
                let others: Vec<&wire::RosterMember> = r.members.iter().filter(|m| m.node != self.node).collect();
                let members = others.len() + 1;
                let answers = ask_peers(&others, members, &r.key, ask);
                decide(members, &answers)
            }
        };
        let mut s = self.state();
        if let Verdict::Hold { .. } = verdict {
            self.extend_locked(&mut s, started + lease_ms as i64);
            let since = s.held.map_or(started, |(t, _)| t);
            let rounds = s.held.map_or(0, |(_, n)| n) + 1;
            s.held = Some((since, rounds));
        }
        if s.said.as_ref() != Some(&verdict) {
            match &verdict {
                Verdict::Hold { reached, members } => tracing::warn!(
                    "no control plane answers, and none of the {reached} of {members} nodes reached is in a \
                     session with one: the control planes are away, not this node; its jobs keep running"
                ),
                Verdict::Fence(why) => tracing::warn!(
                    "no control plane answers and {why}: this node's jobs end when its lease does \
                     (the control plane may run them elsewhere)"
                ),
            }
            s.said = Some(verdict);
        }
    }
}

/// Asks the peers, a batch at a time, until the verdict cannot change: one
/// in session decides it, and so does a majority reached.
fn ask_peers(
    others: &[&wire::RosterMember],
    members: usize,
    key: &str,
    ask: &(dyn Fn(&wire::RosterMember, &str) -> Asked + Sync),
) -> Vec<(String, Asked)> {
    const BATCH: usize = 32;
    let mut answers = Vec::new();
    for batch in others.chunks(BATCH) {
        let got: Vec<(String, Asked)> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch.iter().map(|m| (m.node.clone(), scope.spawn(move || ask(m, key)))).collect();
            handles
                .into_iter()
                .map(|(n, h)| (n, h.join().unwrap_or_else(|_| Asked::Unreached("the question failed".into()))))
                .collect()
        });
        answers.extend(got);
        if !matches!(decide(members, &answers), Verdict::Fence(_))
            || answers.iter().any(|(_, a)| *a == Asked::Answered { in_session: true })
        {
            break;
        }
    }
    answers
}

/// Runs the keeper's rounds every sixteenth of the lease, in a thread.
pub fn spawn_keeper(
    contact: Arc<Contact>,
    ask: impl Fn(&wire::RosterMember, &str) -> Asked + Send + Sync + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new().name("outage".into()).spawn(move || {
        loop {
            let every = Duration::from_millis((contact.state().lease_ms / 16).max(50));
            std::thread::sleep(every);
            contact.round(&ask);
        }
    })?;
    Ok(())
}

/// The lease file of an agent's data directory.
pub fn lease_path(data_dir: &Path) -> PathBuf {
    data_dir.join("lease")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes(n: &str) -> (String, Asked) {
        (n.into(), Asked::Answered { in_session: true })
    }
    fn no(n: &str) -> (String, Asked) {
        (n.into(), Asked::Answered { in_session: false })
    }
    fn gone(n: &str) -> (String, Asked) {
        (n.into(), Asked::Unreached("connection refused".into()))
    }

    #[test]
    fn the_rule_as_a_table() {
        let hold = |reached, members| Verdict::Hold { reached, members };
        let cases: Vec<(&str, usize, Vec<(String, Asked)>, Option<Verdict>)> = vec![
            ("planes away, the one other node answers", 2, vec![no("b")], Some(hold(2, 2))),
            ("planes away, every node answers", 4, vec![no("b"), no("c"), no("d")], Some(hold(4, 4))),
            ("planes away, a majority answers", 3, vec![no("b"), gone("c")], Some(hold(2, 3))),
            ("a peer still has a leader: this node is cut off", 2, vec![yes("b")], None),
            ("one peer in session outweighs any number that are not", 4, vec![no("b"), no("c"), yes("d")], None),
            ("reaches no peer: cannot tell", 3, vec![gone("b"), gone("c")], None),
            ("half is not a majority", 4, vec![no("b"), gone("c"), gone("d")], None),
            ("alone in its roster", 1, vec![], None),
        ];
        for (what, members, answers, want) in cases {
            let got = decide(members, &answers);
            match want {
                Some(v) => assert_eq!(got, v, "{what}"),
                None => assert!(matches!(got, Verdict::Fence(_)), "{what}: {got:?}"),
            }
        }
        let Verdict::Fence(why) = decide(2, &[yes("b")]) else { panic!("fence") };
        assert!(why.contains("node b") && why.contains("cut off"), "{why}");
        let Verdict::Fence(why) = decide(3, &[gone("b"), gone("c")]) else { panic!("fence") };
        assert!(why.contains("1 of the 3"), "{why}");
    }

    #[test]
    fn a_request_waiting_longer_than_an_eighth_of_the_lease_ends_the_session_for_peers() {
        let dir = std::env::temp_dir().join(format!("gpool-outage-pending-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let c = Contact::new(lease_path(&dir), "a".into());
        c.opened(lease::monotonic_ms(), 80_000, None);
        c.sending();
        assert!(c.in_session(), "a request just sent");
        c.state().pending_since = Some(lease::monotonic_ms() - 10_001);
        assert!(!c.in_session(), "10 s without its answer, with a lease of 80 s");
        c.answered(lease::monotonic_ms());
        assert!(c.in_session(), "answered: in session again");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    fn roster(nodes: &[&str]) -> wire::Roster {
        wire::Roster {
            version: 3,
            key: "ab".repeat(32),
            members: nodes
                .iter()
                .map(|n| wire::RosterMember { node: (*n).into(), peer_addr: Some(format!("{n}:1")) })
                .collect(),
        }
    }

    #[test]
    fn a_hold_extends_the_lease_and_a_fence_does_not() {
        let dir = std::env::temp_dir().join(format!("gpool-outage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let c = Contact::new(lease_path(&dir), "a".into());
        // Never registered: nothing to ask, nothing extended.
        c.round(&|_, _| panic!("no roster, nobody to ask"));
        assert_eq!(lease::read(&lease_path(&dir)), None);
        let sent = lease::monotonic_ms();
        c.opened(sent, 60_000, Some(roster(&["a", "b", "c"])));
        assert_eq!(lease::read(&lease_path(&dir)), Some(sent + 60_000));
        assert!(c.in_session(), "a leader just answered");
        c.round(&|_, _| panic!("no peer is asked while a leader answers"));
        c.closed();
        assert!(!c.in_session());
        // Peers out of session: held.
        c.round(&|_, key| {
            assert_eq!(key, "ab".repeat(32));
            Asked::Answered { in_session: false }
        });
        let held = lease::read(&lease_path(&dir)).expect("lease");
        assert!(held > lease::monotonic_ms(), "extended into the future");
        assert!(c.take_held_note().is_some_and(|n| n.contains("1 rounds")));
        // A peer in session: not extended further.
        c.round(&|m, _| Asked::Answered { in_session: m.node == "c" });
        assert_eq!(lease::read(&lease_path(&dir)), Some(held));
        // An agent restarted in the outage takes the roster its predecessor kept.
        c.remember_in(dir.join("roster.json"));
        c.set_roster(roster(&["a", "b", "c"]));
        lease::write(&lease_path(&dir), lease::monotonic_ms() + 1_000).expect("a lease about to end");
        let again = Contact::new(lease_path(&dir), "a".into());
        again.remember_in(dir.join("roster.json"));
        again.round(&|_, _| Asked::Answered { in_session: false });
        let now = lease::monotonic_ms();
        assert!(lease::read(&lease_path(&dir)).expect("lease") > now + 30_000, "the restarted agent holds on");
        let mode = std::fs::metadata(dir.join("roster.json")).expect("kept").permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0, "the key is private");
        // Its own peers only: a question never goes to itself.
        c.round(&|m, _| {
            assert_ne!(m.node, "a");
            Asked::Unreached("down".into())
        });
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
