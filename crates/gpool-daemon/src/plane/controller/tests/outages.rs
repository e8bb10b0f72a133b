//! Issue 39: outages of the control plane or its database kill no job. The
//! control plane's half of the rule (`roster.rs`): a silent node is
//! declared lost only while at least half of the nodes that knew it are
//! heard in settled sessions, and the roster reaches every agent.

use api::agent as wire;

use super::*;

/// Lease 4 s in the harness: a session is settled after 4 + 1 + 2 = 7 s.
const SETTLED: Duration = Duration::from_secs(7);

fn join(h: &mut Harness, node: &str) -> wire::Registered {
    let mut reg = registration(node, 1, Vec::new());
    reg.peer_addr = Some(format!("10.0.0.{}:7000", node.trim_start_matches('n')));
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered")
}

fn heartbeat(h: &mut Harness, node: &str, epoch: u64, roster_version: u64) -> wire::Reported {
    let report = wire::Report { node: node.into(), epoch, events: Vec::new(), telemetry: None, roster_version };
    h.call(ADMIN, |reply| Call::Report { report, reply }).expect("report taken")
}

/// Three nodes, each running a one-GPU job, in settled sessions; the jobs by node.
fn three_busy_nodes(h: &mut Harness) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for n in ["n1", "n2", "n3"] {
        let reg = join(h, n);
        out.push((n.to_string(), reg.epoch, 0));
    }
    for o in &mut out {
        o.2 = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    }
    for _ in 0..8 {
        h.advance(Duration::from_secs(1));
        for (n, epoch, _) in out.clone() {
            heartbeat(h, &n, epoch, 0);
        }
    }
    for (_, _, id) in &out {
        assert_eq!(h.state(*id), api::JobState::Running);
    }
    out
}

#[test]
fn a_control_plane_that_hears_from_too_few_nodes_declares_none_lost() {
    let mut h = Setup::new().no_local_node().build();
    let nodes = three_busy_nodes(&mut h);
    h.event_kinds();
    // n2 and n3 fall silent; only n1 is heard: maybe the control plane is the one cut off.
    for _ in 0..20 {
        h.advance(Duration::from_secs(1));
        heartbeat(&mut h, "n1", nodes[0].1, 0);
    }
    for (_, _, id) in &nodes {
        assert_eq!(h.state(*id), api::JobState::Running, "1 of 3 heard: nobody is declared lost");
    }
    let said = h.event_messages("node");
    assert_eq!(said.len(), 1, "said once, not at every check: {said:?}");
    assert!(said[0].contains("hears from 1 of the 3 nodes"), "{said:?}");
    // n2 is heard again (its session never ended): 2 of 3, so n3 is declared lost.
    heartbeat(&mut h, "n2", nodes[1].1, 0);
    h.advance(Duration::from_secs(1));
    heartbeat(&mut h, "n1", nodes[0].1, 0);
    heartbeat(&mut h, "n2", nodes[1].1, 0);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.state(nodes[2].2), api::JobState::Pending, "n3's job is requeued");
    assert_eq!(h.state(nodes[0].2), api::JobState::Running);
    assert_eq!(h.state(nodes[1].2), api::JobState::Running);
}

#[test]
fn silence_while_every_node_was_away_is_not_held_against_them() {
    let mut h = Setup::new().no_local_node().build();
    let nodes = three_busy_nodes(&mut h);
    // Nobody is heard for a minute (the control plane was stopped, or the
    // network in front of it was down): every job keeps running.
    h.advance(Duration::from_secs(60));
    for (_, _, id) in &nodes {
        assert_eq!(h.state(*id), api::JobState::Running, "no node is declared lost");
    }
    // They come back, register again (new sessions) and keep their jobs.
    let mut epochs = Vec::new();
    for (n, _, id) in &nodes {
        let mut reg = registration(n, 1, vec![wire::ReplicaId { job: *id, attempt: 1, rank: 0 }]);
        reg.peer_addr = Some("10.0.0.9:7000".into());
        epochs.push(h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered").epoch);
    }
    // n3 falls silent at once; n1 and n2 are heard, but their sessions are
    // new: n3 is declared lost only once they are settled.
    let mut declared_at = None;
    for s in 1..=12 {
        h.advance(Duration::from_secs(1));
        heartbeat(&mut h, "n1", epochs[0], 0);
        heartbeat(&mut h, "n2", epochs[1], 0);
        if declared_at.is_none() && h.state(nodes[2].2) == api::JobState::Pending {
            declared_at = Some(s);
        }
    }
    let at = declared_at.expect("n3 is declared lost once the others' sessions are settled");
    assert!(at >= SETTLED.as_secs(), "not before the sessions settled: {at} s");
    assert_eq!(h.state(nodes[0].2), api::JobState::Running);
}

#[test]
fn the_roster_reaches_every_agent_and_follows_who_is_a_member() {
    let mut h = Setup::new().no_local_node().build();
    let first = join(&mut h, "n1");
    let roster = first.roster.expect("a roster");
    assert_eq!(roster.key.len(), 64, "a 32-byte key in hex");
    assert_eq!(roster.members, vec![wire::RosterMember { node: "n1".into(), peer_addr: Some("10.0.0.1:7000".into()) }]);
    let second = join(&mut h, "n2");
    let now = second.roster.expect("a roster");
    assert_eq!(now.key, roster.key, "one key for the cluster");
    assert_eq!(now.members.len(), 2);
    // n1's roster is out of date: its next report brings the new one; then nothing.
    let got = heartbeat(&mut h, "n1", first.epoch, roster.version).roster.expect("an update");
    assert_eq!(got, now);
    assert_eq!(heartbeat(&mut h, "n1", first.epoch, now.version).roster, None);
    // n2 goes silent and is declared down: it leaves the roster.
    for _ in 0..12 {
        h.advance(Duration::from_secs(1));
        heartbeat(&mut h, "n1", first.epoch, now.version);
    }
    let later = heartbeat(&mut h, "n1", first.epoch, now.version).roster.expect("changed");
    assert_eq!(later.members.iter().map(|m| m.node.as_str()).collect::<Vec<_>>(), ["n1"]);
}

#[test]
fn an_outage_held_through_is_recorded_as_the_nodes_event() {
    let mut h = Setup::new().no_local_node().build();
    let mut reg = registration("n1", 1, Vec::new());
    reg.note = Some("kept its jobs running through an outage of the control planes".into());
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered");
    let said = h.event_messages("node_outage");
    assert_eq!(said, ["node n1: kept its jobs running through an outage of the control planes"]);
}

#[test]
fn the_roster_key_survives_a_restart() {
    let state = super::restore::StateFile::new("roster-key");
    let key = |state: &super::restore::StateFile| {
        let mut h = Setup::new().no_local_node().store(state.open()).build();
        let reg = registration("n1", 1, Vec::new());
        h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered").roster.expect("roster").key
    };
    let a = key(&state);
    assert_eq!(a, key(&state), "a new leader signs with the same key");
}
