//! Nodes and their agents: the one in this process (`gpool up`) and remote
//! ones speaking the agent protocol (`gpool agent`; docs/cluster.md).
//!
//! A remote node's commands wait in its outbox until its agent's long poll
//! takes them; a poll with `after = SEQ` acknowledges every command up to
//! SEQ. Every request of the agent renews the node's lease; a lease that
//! runs out makes the node down and its replicas lost (their jobs are
//! requeued, or failed if they asked for it). Registration starts a new
//! epoch and re-synchronises: every replica the store says runs on the node
//! is reconciled by the agent, and every other replica it has is killed.

use std::collections::{BTreeMap, VecDeque};

use gpool_api::agent as wire;
use gpool_core::{NodeId, NodeState};

use gpool_api as api;
use rustix::process::Signal;

use super::Controller;
use super::calls::{Answer, ApiError, Reply};
use super::docs::ReplicaDoc;
use super::links::{LEASE_MARGIN_MS, Link, NodeLink, POLL_MS, Remote};
use super::timers::Timer;
use crate::plane::auth::{Caller, Role};
use crate::protocol::{ReplicaKey, parse_signal};

use super::node_doc::{NodeDoc, core_node, node_row};

impl Controller {
    /// Adds (or updates) a node in the snapshot and the link table.
    pub(super) fn install_node(&mut self, doc: NodeDoc, link: Link, now: i64) -> Result<NodeId, ApiError> {
        let mut node = core_node(&doc);
        if let Some(p) = doc.pool.as_deref().and_then(|p| self.fleet.configured_pool(p)) {
            node.pool = p.pool.clone();
        }
        self.fleet.registered(&doc.name, &mut self.out);
        let id = match self.snap.node_id(&doc.name) {
            Some(id) => {
                let same = self.snap.node(id).is_some_and(|n| n.devices == node.devices);
                if !same {
                    match self.snap.replace_node(id, node) {
                        Ok(()) => {}
                        Err(e) => {
                            // Jobs run on the old inventory: keep it until they end.
                            self.event(
                                now,
                                None,
                                "node",
                                format!("node {}: its inventory changed but is kept while jobs run ({e})", doc.name),
                            );
                        }
                    }
                } else {
                    let _ =
                        self.snap.set_node_state(id, if doc.draining { NodeState::Draining } else { NodeState::Up });
                }
                id
            }
            None => self.snap.add_node(node).map_err(|e| ApiError::new(400, format!("node {}: {e}", doc.name)))?,
        };
        let state = if doc.draining { NodeState::Draining } else { NodeState::Up };
        let _ = self.snap.set_node_state(id, state);
        super::mig_layouts::apply_mig_managed(&mut self.snap, id, &doc.mig_managed);
        self.faults.apply_quarantine(id, &mut self.snap, &mut self.out);
        // A reservation's GPUs on a node the snapshot did not know until now.
        self.reservations.apply(&mut self.snap);
        self.mig_changes.forget(&mut self.snap, id, &doc.name);
        self.out.write(node_row(&doc, now));
        self.links.insert(id, NodeLink { doc, link, conditions: Vec::new(), hold: None });
        self.out.reschedule();
        Ok(id)
    }

    /// Nodes the store remembers and nobody has served yet: down until their agents register.
    pub(super) fn restore_nodes(&mut self, now: i64) -> anyhow::Result<()> {
        for row in self.store.nodes()? {
            if self.snap.node_id(&row.name).is_some() {
                continue;
            }
            // A record that does not load is set aside, said, and the rest served.
            let set_aside = |why: String| {
                format!(
                    "node {}: its stored record is set aside and the node stays out until its agent registers again: {why}",
                    row.name
                )
            };
            let doc = match serde_json::from_str::<NodeDoc>(&row.doc) {
                Ok(doc) => doc,
                Err(e) => {
                    let why = set_aside(e.to_string());
                    tracing::error!("{why}");
                    self.event(now, None, "node", why);
                    continue;
                }
            };
            let mut node = core_node(&doc);
            if let Some(p) = doc.pool.as_deref().and_then(|p| self.fleet.configured_pool(p)) {
                node.pool = p.pool.clone();
            }
            let id = match super::node_doc::check(&doc)
                .map_err(anyhow::Error::msg)
                .and_then(|()| Ok(self.snap.add_node(node)?))
            {
                Ok(id) => id,
                Err(e) => {
                    let why = set_aside(format!("{e:#}"));
                    tracing::error!("{why}");
                    self.event(now, None, "node", why);
                    continue;
                }
            };
            self.snap.set_node_state(id, NodeState::Down)?;
            super::mig_layouts::apply_mig_managed(&mut self.snap, id, &doc.mig_managed);
            let link = Link::Remote(Remote { last_seen_ms: now, ..Remote::new() });
            self.links.insert(id, NodeLink { doc, link, conditions: Vec::new(), hold: None });
            // Give its agent a lease's time to find this controller.
            self.timers.at(now + self.lease_ms() + LEASE_MARGIN_MS, Timer::Lease { node: id.0 });
        }
        Ok(())
    }

    pub(super) fn lease_ms(&self) -> i64 {
        self.cfg.lease.as_millis() as i64
    }

    /// `POST /agent/v1/register`.
    pub(super) fn register(&mut self, reg: wire::Register, now: i64) -> Result<wire::Registered, ApiError> {
        if reg.node.trim().is_empty() || reg.node.contains(char::is_whitespace) || reg.node.contains('/') {
            return Err(ApiError::new(400, "node: must be a non-empty name without spaces or '/'"));
        }
        if !(reg.cpus.is_finite() && reg.cpus >= 0.0) {
            return Err(ApiError::new(400, "cpus: must be a number of CPUs ≥ 0"));
        }
        let existing = self.snap.node_id(&reg.node).and_then(|id| self.links.get(&id).map(|l| (id, l)));
        if let Some((_, l)) = &existing
            && l.is_local()
        {
            return Err(ApiError::new(409, format!("node {}: the control plane's own agent serves it", reg.node)));
        }
        let (epoch, draining) = existing.map_or_else(
            || {
                let stored = self
                    .store
                    .nodes()
                    .ok()
                    .and_then(|rows| rows.into_iter().find(|r| r.name == reg.node))
                    .and_then(|r| serde_json::from_str::<NodeDoc>(&r.doc).ok());
                stored.map_or((0, false), |d| (d.epoch, d.draining))
            },
            |(_, l)| (l.doc.epoch, l.doc.draining),
        );
        let doc = NodeDoc {
            name: reg.node.clone(),
            addr: reg.addr.clone(),
            source: reg.source.clone(),
            degraded: reg.degraded.clone(),
            labels: reg.labels.clone(),
            pool: reg.pool.clone(),
            cpus: reg.cpus,
            memory_mb: reg.memory_mb,
            gpus: reg.gpus.clone(),
            gpu_sharing: reg.gpu_sharing.clone(),
            container_runtime: reg.container_runtime.clone(),
            mig_managed: reg.mig_managed.clone(),
            epoch: epoch + 1,
            draining,
            local: false,
        };
        // Checked whole before anything changes: a record the control plane
        // could not load again is never stored.
        super::node_doc::check(&doc).map_err(|why| ApiError::new(400, format!("node {}: {why}", reg.node)))?;
        // The outbox of the old session is void: the new agent starts from the
        // next sequence number. Its undelivered starts are sent again below.
        let (next_seq, parked, unsent) = match existing.map(|(id, _)| id).and_then(|id| self.links.get_mut(&id)) {
            Some(NodeLink { link: Link::Remote(r), .. }) => {
                (r.next_seq, r.parked.take(), std::mem::take(&mut r.outbox))
            }
            _ => (Remote::new().next_seq, None, VecDeque::new()),
        };
        if let Some((_, reply)) = parked {
            self.reply(reply, Err(ApiError::new(409, "the node registered again")));
        }
        let remote = Remote { registered: true, next_seq, last_seen_ms: now, session_since_ms: now, ..Remote::new() };
        self.roster.registered(&reg.node, reg.peer_addr.clone(), now);
        let id = self.install_node(doc, Link::Remote(remote), now)?;
        self.power.set_agent_budget(&reg.node, reg.power_budget_w, &mut self.snap, &mut self.out);
        self.event(
            now,
            None,
            "node_up",
            format!("node {} registered (epoch {}, {} GPUs)", reg.node, epoch + 1, reg.gpus.len()),
        );
        if let Some(note) = reg.note.as_deref().filter(|n| !n.trim().is_empty()) {
            let note: String = note.chars().take(500).collect();
            self.event(now, None, "node_outage", format!("node {}: {note}", reg.node));
        }
        // Re-synchronise: what the store says runs here is reconciled; anything else is killed.
        let expected: Vec<(ReplicaKey, Vec<String>)> =
            self.live_replicas_on(id).into_iter().map(|(key, r)| (key, self.reading().device_uuids(&r))).collect();
        // A start the old session never acknowledged may never have reached the
        // agent (it restarted within its lease): unless the replica runs, the
        // start goes again. Starts are idempotent on the agent (a replica
        // started before is reconciled instead), so a start that did arrive
        // is not run twice.
        let mut resend: BTreeMap<wire::ReplicaId, wire::Command> = unsent
            .into_iter()
            .filter_map(|c| match &c.command {
                wire::Command::Start { replica, .. } if !reg.running.contains(replica) => Some((*replica, c.command)),
                _ => None,
            })
            .collect();
        for (key, devices) in &expected {
            let cmd = resend.remove(&wire::ReplicaId::from(*key)).unwrap_or_else(|| wire::Command::Reconcile {
                replica: wire::ReplicaId::from(*key),
                devices: devices.clone(),
            });
            super::orders::push_command(&mut self.links, &mut self.out, id, cmd);
        }
        for r in &reg.running {
            if !expected.iter().any(|(k, _)| wire::ReplicaId::from(*k) == *r) {
                super::orders::push_command(&mut self.links, &mut self.out, id, wire::Command::Kill { replica: *r });
            }
        }
        // Runs being stopped: their stop signal again (the old session may not have delivered it).
        let stopping: Vec<(ReplicaKey, Signal)> = expected
            .iter()
            .filter_map(|(key, _)| {
                let d = self.jobs.get(&key.job)?;
                d.run.as_ref().filter(|r| r.stop.is_some())?;
                Some((*key, d.spec.stop_signal.as_deref().and_then(parse_signal).unwrap_or(Signal::TERM)))
            })
            .collect();
        for (key, sig) in stopping {
            super::orders::push_command(
                &mut self.links,
                &mut self.out,
                id,
                wire::Command::Signal { replica: wire::ReplicaId::from(key), signal: sig.as_raw() },
            );
        }
        self.timers.at(now + self.lease_ms() + LEASE_MARGIN_MS, Timer::Lease { node: id.0 });
        Ok(wire::Registered {
            epoch: epoch + 1,
            lease_ms: self.lease_ms() as u64,
            heartbeat_ms: (self.lease_ms() / 4).max(100) as u64,
            next_seq,
            roster: Some(self.roster.wire()),
        })
    }

    /// The node of a request, if its session is current; renews its lease.
    fn session(&mut self, node: &str, epoch: u64, now: i64) -> Result<NodeId, ApiError> {
        let stale = || {
            ApiError::new(
                409,
                format!("node {node}: register again (the control plane restarted or declared the node down)"),
            )
        };
        let id = self.snap.node_id(node).ok_or_else(stale)?;
        let link = self.links.get_mut(&id).ok_or_else(stale)?;
        match &mut link.link {
            Link::Remote(r) if r.registered && link.doc.epoch == epoch => {
                r.last_seen_ms = now;
                Ok(id)
            }
            _ => Err(stale()),
        }
    }

    /// Replicas the store says run on a node and have not ended (the jobs
    /// holding resources there, from the snapshot's index).
    pub(super) fn live_replicas_on(&self, id: NodeId) -> Vec<(ReplicaKey, ReplicaDoc)> {
        let Some(name) = self.snap.node(id).map(|n| n.name.to_string()) else { return Vec::new() };
        let mut out = Vec::new();
        for j in self.snap.jobs_on(id) {
            let Some(run) = self.jobs.get(&j.0).and_then(|d| d.run.as_ref()) else { continue };
            for r in run.replicas.iter().filter(|r| r.node == name && !r.ended()) {
                out.push((ReplicaKey { job: j.0, attempt: run.attempt, rank: r.rank }, r.clone()));
            }
        }
        out
    }

    /// `GET /agent/v1/commands`: answers at once if commands wait, else parks the poll.
    pub(super) fn poll(&mut self, node: &str, epoch: u64, after: u64, reply: Reply<wire::Commands>, now: i64) {
        let id = match self.session(node, epoch, now) {
            Ok(id) => id,
            Err(e) => return self.reply(reply, Err(e)),
        };
        let Some(NodeLink { link: Link::Remote(r), .. }) = self.links.get_mut(&id) else { return };
        while r.outbox.front().is_some_and(|c| c.seq <= after) {
            r.outbox.pop_front();
        }
        let old = r.parked.take();
        let ready: Vec<wire::Sequenced> = r.outbox.iter().cloned().collect();
        let parked_timer = if ready.is_empty() {
            r.park_id += 1;
            r.parked = Some((r.park_id, reply));
            Some(r.park_id)
        } else {
            self.out.replies.push(Answer::new(reply, Ok(wire::Commands { commands: ready })));
            None
        };
        if let Some((_, o)) = old {
            self.reply(o, Ok(wire::Commands { commands: Vec::new() }));
        }
        if let Some(p) = parked_timer {
            self.timers.at(now + POLL_MS, Timer::PollTimeout { node: id.0, park: p });
        }
    }

    /// A parked poll's time is up: it gets an empty answer.
    pub(super) fn poll_timeout(&mut self, node: u32, park: u64) {
        if let Some(NodeLink { link: Link::Remote(r), .. }) = self.links.get_mut(&NodeId(node))
            && r.parked.as_ref().is_some_and(|(p, _)| *p == park)
            && let Some((_, reply)) = r.parked.take()
        {
            self.reply(reply, Ok(wire::Commands { commands: Vec::new() }));
        }
    }

    /// `POST /agent/v1/report`.
    pub(super) fn agent_report(&mut self, rep: wire::Report, now: i64) -> Result<wire::Reported, ApiError> {
        let id = self.session(&rep.node, rep.epoch, now)?;
        let roster_version = rep.roster_version;
        // A node speaks only for itself: a report about a replica the current
        // run placed on another node is refused whole, and nothing of it is done.
        for e in &rep.events {
            let replica = match e {
                wire::Event::Running { replica }
                | wire::Event::Exited { replica, .. }
                | wire::Event::Lost { replica, .. }
                | wire::Event::StartFailed { replica, .. }
                | wire::Event::Profiled { replica, .. } => ReplicaKey::from(*replica),
            };
            if let Some(elsewhere) = super::node_trust::placed_elsewhere(&self.jobs, replica, &rep.node) {
                return Err(ApiError::new(
                    403,
                    format!(
                        "node {} reported on replica {} of job {} (attempt {}), which runs on node {elsewhere}; \
                         a node reports only its own replicas",
                        rep.node, replica.rank, replica.job, replica.attempt
                    ),
                ));
            }
        }
        for e in rep.events {
            match e {
                wire::Event::Running { replica } => self.mark_seen(ReplicaKey::from(replica)),
                wire::Event::Exited { replica, exit } => {
                    self.on_replica_end(ReplicaKey::from(replica), Some(exit.into()), None, now)
                }
                wire::Event::Lost { replica, why } => {
                    self.on_replica_end(ReplicaKey::from(replica), None, Some(why), now)
                }
                wire::Event::StartFailed { replica, error } => {
                    self.on_start_failed(ReplicaKey::from(replica), error, now)
                }
                wire::Event::Profiled { replica, profile, capture } => {
                    let acts = self.profiling.on_profiled(ReplicaKey::from(replica), profile, capture, &mut self.out);
                    self.act(acts, now);
                }
            }
        }
        if let Some(t) = rep.telemetry {
            let report = crate::protocol::telemetry_from_wire(&rep.node, t);
            self.on_telemetry(report, now);
        }
        let _ = id;
        Ok(wire::Reported { roster: self.roster.update_for(roster_version) })
    }

    /// How long a remote replica may go unseen after its start was queued:
    /// two leases (the agent re-registers within one and is sent the start
    /// again) and the margin.
    pub(super) fn start_bound_ms(&self) -> i64 {
        2 * self.lease_ms() + LEASE_MARGIN_MS
    }

    /// The agent says a replica runs.
    fn mark_seen(&mut self, key: ReplicaKey) {
        let Some(doc) = self.jobs.get_mut(&key.job) else { return };
        let Some(run) = doc.run.as_mut().filter(|r| r.attempt == key.attempt) else { return };
        if let Some(r) = run.replicas.iter_mut().find(|r| r.rank == key.rank && !r.seen) {
            r.seen = true;
            self.out.touch(key.job);
        }
    }

    /// A run's remote replicas that no agent has said run by now are lost:
    /// their start or its answer went missing. Whatever may run them is told
    /// to kill them, and the run ends as after a lost replica (requeued, or
    /// cancelled if it was being cancelled).
    pub(super) fn unseen_check(&mut self, job: u64, attempt: u32, now: i64) {
        let Some(run) = self.jobs.get(&job).and_then(|d| d.run.as_ref()).filter(|r| r.attempt == attempt) else {
            return;
        };
        let unseen: Vec<(NodeId, ReplicaKey)> = run
            .replicas
            .iter()
            .filter(|r| !r.seen && !r.ended())
            .filter_map(|r| {
                let node = self.snap.node_id(&r.node)?;
                let remote = self.links.get(&node).is_some_and(|l| !l.is_local());
                remote.then_some((node, ReplicaKey { job, attempt, rank: r.rank }))
            })
            .collect();
        let bound = self.start_bound_ms() / 1000;
        for (node, key) in unseen {
            super::orders::push_command(
                &mut self.links,
                &mut self.out,
                node,
                wire::Command::Kill { replica: wire::ReplicaId::from(key) },
            );
            let why = format!("its agent did not say it runs within {bound} s of its start");
            self.on_replica_end(key, None, Some(why), now);
        }
    }

    /// A node's lease check: down if it has been silent too long.
    pub(super) fn lease_check(&mut self, node: u32, now: i64) {
        let id = NodeId(node);
        let lease = self.lease_ms();
        let Some(NodeLink { link: Link::Remote(r), doc, .. }) = self.links.get(&id) else { return };
        let deadline = r.last_seen_ms + lease + LEASE_MARGIN_MS;
        if deadline > now {
            self.timers.at(deadline, Timer::Lease { node });
            return;
        }
        // Silent for its lease; declared lost only with a quorum (`roster.rs`),
        // else checked again a heartbeat later.
        let (name, seen) = (doc.name.clone(), r.last_seen_ms);
        if !self.roster.quorum_for_loss(&name, seen, &self.links, self.lease_ms(), &mut self.out, now) {
            self.timers.at(now + (lease / 4).max(100), Timer::Lease { node });
            return;
        }
        self.roster.left(&name);
        let Some(NodeLink { link: Link::Remote(r), doc, .. }) = self.links.get_mut(&id) else { return };
        let was_registered = r.registered;
        let cut_off = r.cut_off.take();
        r.registered = false;
        r.outbox.clear();
        let parked = r.parked.take();
        let name = doc.name.clone();
        if let Some((_, reply)) = parked {
            self.reply(reply, Err(ApiError::new(409, "the node was declared down")));
        }
        let _ = self.snap.set_node_state(id, NodeState::Down);
        let why = if let Some(cut) = cut_off {
            format!("node {name} was cut off ({cut}) and its lease has run out: its jobs are stopped there")
        } else if was_registered {
            format!("node {name} missed its lease ({} ms without a word from its agent)", lease + LEASE_MARGIN_MS)
        } else {
            format!("node {name} did not register within its lease after the control plane started")
        };
        self.event(now, None, "node_down", why.clone());
        self.telemetry_forget_node(&name, now);
        // Its replicas are gone (their shims killed them when the lease ran out).
        let lost: Vec<ReplicaKey> = self.live_replicas_on(id).into_iter().map(|(k, _)| k).collect();
        for key in lost {
            self.on_replica_end(key, None, Some(format!("node {name} is down")), now);
        }
        self.out.reschedule();
    }

    /// `POST /api/v1/nodes/{name}/drain|resume` (admins).
    pub(super) fn set_draining(
        &mut self,
        caller: &Caller,
        name: &str,
        draining: bool,
        from: &str,
        now: i64,
    ) -> Result<api::NodeView, ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins drain or resume nodes"));
        }
        let id = self.snap.node_id(name).ok_or_else(|| ApiError::new(404, format!("node {name} not found")))?;
        let link = self.links.get_mut(&id).ok_or_else(|| ApiError::new(404, format!("node {name} not found")))?;
        link.doc.draining = draining;
        let doc = link.doc.clone();
        super::conditions::apply_node_state(&mut self.snap, &self.links, id, &mut self.out);
        self.out.write(node_row(&doc, now));
        let what = if draining {
            "draining: running jobs finish, nothing new starts there"
        } else {
            "resumed: takes new work"
        };
        self.event(
            now,
            None,
            if draining { "node_draining" } else { "node_resumed" },
            format!("node {name} {what} (by {})", caller.user),
        );
        self.out.audit(caller, from, &format!("{} node {name}", if draining { "drained" } else { "resumed" }), now);
        self.out.reschedule();
        self.reading().nodes().into_iter().find(|n| n.name == name).ok_or_else(|| ApiError::new(404, "node vanished"))
    }
}
