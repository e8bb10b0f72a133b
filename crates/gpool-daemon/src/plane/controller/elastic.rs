//! Elastic node pools: after each pass the autoscaler of gpool-core
//! (`gpool_core::autoscale`, the simulator's too) decides which nodes to
//! create and delete; this room names them, mints each new node its own
//! node token, orders the provider's programs through the shell
//! ([`ProvisionOrder`]), and hears back ([`Event::Provisioned`]) and from
//! the node itself when its agent registers.
//!
//! A node is `creating` from the order until its agent registers (the boot
//! timeout counts from the order), then up; the autoscaler deletes it after
//! its pool's idle time. A failed creation or a node that never registers
//! counts against its pool (`PoolHealth`): back-off, then fallback to the
//! next pool. A fleet node whose agent is lost is deleted at once. What the
//! fleet holds is kept in the store (`PutMeta("fleet")`), so a restarted
//! control plane still deletes the machines it made.

use std::collections::BTreeMap;
use std::time::Duration;

use gpool_core::autoscale::{DeleteWhy, PoolNode, PoolNodeState, PoolState, plan_scaling, waiting_for_room};
use gpool_core::pools::{PoolConfig, PoolHealth};
use gpool_core::{NodeId, NodeState, Plan, Policy, QueueConfig, Snapshot, Time};
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::links::NodeLink;
use super::outbox::Outbox;
use super::timers::{Timer, Timers};
use super::tokens::Tokens;

/// A pool's provider, as the controller orders it: programs called with
/// `POOL NODE` after their own words (the `local` provider is `gpool
/// local-node create|delete`, set up by the wiring).
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderPrograms {
    pub create: Vec<String>,
    pub delete: Vec<String>,
    pub timeout: Duration,
}

/// Elastic pools of a control plane.
#[derive(Clone, Debug)]
pub struct ElasticConfig {
    pub pools: Vec<PoolConfig>,
    /// Each pool's provider, in the same order.
    pub providers: Vec<ProviderPrograms>,
    pub max_dollars_per_hour: Option<f64>,
    /// The URL new nodes' agents reach this control plane at (`GPOOL_SERVER`).
    pub server_url: String,
}

/// A provider program to run: the shell runs it (at most `timeout`) and
/// answers with [`super::Event::Provisioned`].
#[derive(Clone, Debug, PartialEq)]
pub struct ProvisionOrder {
    pub op: ProvisionOp,
    pub pool: String,
    pub node: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProvisionOp {
    Create,
    Delete,
}

/// One node the fleet made.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct FleetNode {
    pub pool: String,
    pub created_ms: i64,
    pub registered: bool,
    pub deleting: bool,
    pub idle_since_ms: Option<i64>,
    /// A deletion that failed is ordered again then.
    #[serde(default)]
    pub retry_delete_ms: Option<i64>,
}

/// What the fleet holds (persisted) and each pool's health (not persisted:
/// a restart gives every pool a fresh chance).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Fleet {
    pub nodes: BTreeMap<String, FleetNode>,
    pub seq: u64,
    #[serde(skip)]
    pub health: BTreeMap<String, PoolHealth>,
    /// When this controller started: a node down this soon after may just not have re-registered yet.
    #[serde(skip)]
    pub started_ms: i64,
    /// The largest cluster the pools can make (at most 64 nodes each), for
    /// the feasibility check of submissions.
    #[serde(skip)]
    pub largest: Option<gpool_core::Snapshot>,
    /// The pools and their providers (`--pools`); `None`: a fixed cluster.
    #[serde(skip)]
    cfg: Option<ElasticConfig>,
    /// The control plane's data directory (providers are told where to keep their state).
    #[serde(skip)]
    data_dir: std::path::PathBuf,
}

impl Fleet {
    /// The fleet as the store last had it.
    /// With pools configured, the first turn runs a pass so that pools
    /// below their minimum grow and forgotten nodes go, with no event needed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn restore(
        store: &mut dyn Store,
        cfg: Option<ElasticConfig>,
        data_dir: &std::path::Path,
        policy: &Policy,
        queues: &[QueueConfig],
        timers: &mut Timers,
        now: i64,
    ) -> anyhow::Result<Fleet> {
        let mut fleet: Fleet = match store.meta("fleet")? {
            Some(text) => serde_json::from_str(&text).unwrap_or_default(),
            None => Fleet::default(),
        };
        fleet.started_ms = now;
        fleet.data_dir = data_dir.to_path_buf();
        if let Some(cfg) = &cfg {
            timers.at(now, Timer::Wake);
            let mut largest = gpool_core::Snapshot::new(policy.clone());
            for q in queues {
                largest.set_queue(q.clone());
            }
            for p in &cfg.pools {
                for i in 0..p.max.min(64) {
                    largest.add_node(p.template(&format!("{}-largest-{i}", p.name())))?;
                }
            }
            fleet.largest = Some(largest);
        }
        fleet.cfg = cfg;
        Ok(fleet)
    }

    fn save(&self, out: &mut Outbox) {
        if let Ok(text) = serde_json::to_string(self) {
            out.write(Write::PutMeta("fleet".into(), text));
        }
    }

    /// Whether nodes the pools could make would run `spec` (a job no node
    /// that exists now could run is accepted then: nodes are made for it).
    pub(super) fn could_run(&self, spec: &gpool_core::JobSpec) -> bool {
        self.largest.as_ref().is_some_and(|s| s.check_feasible(spec).is_ok())
    }

    /// The configured pool a node registering under `pool` belongs to, if any.
    pub(super) fn configured_pool(&self, pool: &str) -> Option<&PoolConfig> {
        self.cfg.as_ref()?.pools.iter().find(|p| p.name() == pool)
    }

    /// A node's agent registered: a node the fleet made is up.
    pub(super) fn registered(&mut self, name: &str, out: &mut Outbox) {
        let Some(n) = self.nodes.get_mut(name) else { return };
        if !n.registered {
            n.registered = true;
            let pool = n.pool.clone();
            self.health.entry(pool).or_default().succeeded();
            self.save(out);
        }
    }

    /// After a pass: the autoscaler's plan, carried out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn autoscale(
        &mut self,
        plan: &Plan,
        snap: &mut Snapshot,
        tokens: &mut Tokens,
        lease_ms: i64,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        let Some(cfg) = self.cfg.clone() else { return };
        let t = Time::from_millis(now);
        // Registered nodes: idle since when, or lost (deleted at once).
        let mut lost = Vec::new();
        let settled = now - self.started_ms > 2 * lease_ms + 1000;
        for (name, n) in self.nodes.iter_mut().filter(|(_, n)| n.registered && !n.deleting) {
            let Some(id) = snap.node_id(name) else { continue };
            if snap.node(id).is_some_and(|x| x.state == NodeState::Down) {
                if settled {
                    lost.push(name.clone());
                }
                continue;
            }
            let busy = snap.jobs_on(id).next().is_some();
            n.idle_since_ms = if busy { None } else { Some(n.idle_since_ms.unwrap_or(now)) };
        }
        for name in lost {
            self.delete_node(&cfg, &name, "its agent was lost", snap, out, now);
        }
        let again: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.deleting && n.retry_delete_ms.is_some_and(|t| t <= now))
            .map(|(name, _)| name.clone())
            .collect();
        for name in again {
            if let Some(n) = self.nodes.get_mut(&name) {
                n.retry_delete_ms = None;
            }
            self.delete_node(&cfg, &name, "trying again", snap, out, now);
        }
        let states: Vec<PoolState<'_>> = cfg
            .pools
            .iter()
            .map(|p| PoolState {
                config: p,
                nodes: self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.pool == p.name() && !n.deleting)
                    .map(|(name, n)| PoolNode {
                        name: name.as_str().into(),
                        state: match (n.registered, n.idle_since_ms) {
                            (false, _) => PoolNodeState::Booting { since: Time::from_millis(n.created_ms) },
                            (true, Some(s)) => PoolNodeState::Idle { since: Time::from_millis(s) },
                            (true, None) => PoolNodeState::Busy,
                        },
                    })
                    .collect(),
                health: self.health.get(p.name()).cloned().unwrap_or_default(),
            })
            .collect();
        let waiting = waiting_for_room(snap, plan);
        let scale = plan_scaling(&states, &waiting, cfg.max_dollars_per_hour, t);
        drop(states);
        for d in &scale.delete {
            let why = match d.why {
                DeleteWhy::Idle => "idle for its pool's idle time",
                DeleteWhy::BootTimeout => {
                    if let Some(p) = cfg.pools.iter().find(|p| *p.pool.name == *d.pool) {
                        self.health.entry(d.pool.to_string()).or_default().failed(&p.retry, t);
                    }
                    "it did not register within its pool's boot timeout"
                }
                DeleteWhy::AboveMax => "its pool is above its maximum",
            };
            self.delete_node(&cfg, &d.node, why, snap, out, now);
        }
        for c in &scale.create {
            let Some(pi) = cfg.pools.iter().position(|p| p.pool.name == c.pool) else { continue };
            for _ in 0..c.count {
                self.create_node(&cfg, pi, &c.for_jobs, tokens, timers, out, now);
            }
        }
        if !scale.create.is_empty() || !scale.delete.is_empty() {
            self.save(out);
        }
        if let Some(at) = scale.wake_at {
            timers.at(at.as_millis(), Timer::Wake);
        }
        for h in self.health.values() {
            if let Some(at) = h.next_change(t) {
                timers.at(at.as_millis(), Timer::Wake);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &mut self,
        cfg: &ElasticConfig,
        pi: usize,
        for_jobs: &[gpool_core::JobId],
        tokens: &mut Tokens,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        let pool = &cfg.pools[pi];
        self.seq += 1;
        let name = format!("{}-{}", pool.name(), self.seq);
        let token = match tokens.mint_node(&name, out, now) {
            Ok(t) => t,
            Err(e) => {
                out.event_of(now, None, None, "pool", format!("pool {}: cannot make a node token: {e}", pool.name()));
                return;
            }
        };
        self.nodes.insert(
            name.clone(),
            FleetNode {
                pool: pool.name().to_string(),
                created_ms: now,
                registered: false,
                deleting: false,
                idle_since_ms: None,
                retry_delete_ms: None,
            },
        );
        let jobs: Vec<String> = for_jobs.iter().map(|j| j.0.to_string()).collect();
        let why =
            if jobs.is_empty() { "to keep its minimum".to_string() } else { format!("for job(s) {}", jobs.join(", ")) };
        out.event_of(now, None, None, "node_create", format!("creating node {name} in pool {} {why}", pool.name()));
        // Look again when its boot time is up, should nothing else happen by then.
        let boot_ms = i64::try_from(pool.boot_timeout.as_millis()).unwrap_or(i64::MAX / 2);
        timers.at(now.saturating_add(boot_ms), Timer::Wake);
        let mut env = provider_env(&self.data_dir, cfg, pool, &name);
        env.push(("GPOOL_TOKEN".into(), token));
        let p = &cfg.providers[pi];
        let mut argv = p.create.clone();
        argv.extend([pool.name().to_string(), name.clone()]);
        out.provision.push(ProvisionOrder {
            op: ProvisionOp::Create,
            pool: pool.name().to_string(),
            node: name,
            argv,
            env,
            timeout: p.timeout,
        });
    }

    fn delete_node(
        &mut self,
        cfg: &ElasticConfig,
        name: &str,
        why: &str,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) {
        let Some(n) = self.nodes.get_mut(name) else { return };
        n.deleting = true;
        let pool = n.pool.clone();
        if let Some(id) = snap.node_id(name) {
            let _ = snap.set_node_state(id, NodeState::Draining);
        }
        out.event_of(now, None, None, "node_delete", format!("deleting node {name} of pool {pool}: {why}"));
        let Some(pi) = cfg.pools.iter().position(|p| p.name() == pool) else { return };
        let p = &cfg.providers[pi];
        let mut argv = p.delete.clone();
        argv.extend([pool.clone(), name.to_string()]);
        let env = provider_env(&self.data_dir, cfg, &cfg.pools[pi], name);
        out.provision.push(ProvisionOrder {
            op: ProvisionOp::Delete,
            pool,
            node: name.to_string(),
            argv,
            env,
            timeout: p.timeout,
        });
        self.save(out);
    }

    /// A provider program ended.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_provisioned(
        &mut self,
        node: String,
        op: ProvisionOp,
        result: Result<(), String>,
        snap: &mut Snapshot,
        links: &mut BTreeMap<NodeId, NodeLink>,
        tokens: &mut Tokens,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        let Some(cfg) = self.cfg.clone() else { return };
        let Some(n) = self.nodes.get(&node).cloned() else { return };
        match (op, result) {
            (ProvisionOp::Create, Ok(())) => {}
            (ProvisionOp::Create, Err(e)) => {
                if let Some(p) = cfg.pools.iter().find(|p| p.name() == n.pool) {
                    self.health.entry(n.pool.clone()).or_default().failed(&p.retry, Time::from_millis(now));
                }
                out.event_of(
                    now,
                    None,
                    None,
                    "node_create_failed",
                    format!("pool {}: creating node {node} failed: {e}", n.pool),
                );
                // Clean up whatever the program left behind.
                self.delete_node(&cfg, &node, "its creation failed", snap, out, now);
                out.reschedule();
            }
            (ProvisionOp::Delete, Ok(())) => {
                self.nodes.remove(&node);
                tokens.revoke_node(&node, out);
                if let Some(id) = snap.node_id(&node) {
                    let _ = snap.set_node_state(id, NodeState::Down);
                    links.remove(&id);
                }
                out.write(Write::DeleteNode(node.clone()));
                out.event_of(now, None, None, "node_deleted", format!("node {node} of pool {} deleted", n.pool));
                self.save(out);
                out.reschedule();
            }
            (ProvisionOp::Delete, Err(e)) => {
                out.event_of(
                    now,
                    None,
                    None,
                    "node_delete_failed",
                    format!("pool {}: deleting node {node} failed: {e}; trying again in 30 s", n.pool),
                );
                if let Some(x) = self.nodes.get_mut(&node) {
                    x.retry_delete_ms = Some(now + 30_000);
                }
                timers.at(now + 30_000, Timer::Wake);
            }
        }
    }

    /// `GET /api/v1/pools`.
    pub(super) fn views(&self, now: i64) -> Vec<gpool_api::PoolView> {
        let Some(cfg) = &self.cfg else { return Vec::new() };
        let t = Time::from_millis(now);
        cfg.pools
            .iter()
            .map(|p| {
                let mine: Vec<(&String, &FleetNode)> = self.nodes.iter().filter(|(_, n)| n.pool == p.name()).collect();
                let count = |f: &dyn Fn(&FleetNode) -> bool| mine.iter().filter(|(_, n)| f(n)).count() as u32;
                let health = self.health.get(p.name()).cloned().unwrap_or_default();
                let idle = count(&|n| n.registered && !n.deleting && n.idle_since_ms.is_some());
                let busy = count(&|n| n.registered && !n.deleting && n.idle_since_ms.is_none());
                let paid = if p.pool.kind == gpool_core::PoolKind::Reserved {
                    (mine.len() as u32).max(p.min)
                } else {
                    mine.len() as u32
                };
                let unused =
                    if p.pool.kind == gpool_core::PoolKind::Reserved { paid.saturating_sub(busy) } else { idle };
                gpool_api::PoolView {
                    name: p.name().to_string(),
                    kind: p.pool.kind.as_str().into(),
                    gpus: p.shape.gpus,
                    gpu_model: p.shape.gpu_model.to_string(),
                    cpus: p.shape.cpus,
                    memory_gb: p.shape.memory_mb / 1024,
                    price_per_node_hour: p.price_per_node_hour,
                    min: p.min,
                    max: p.max,
                    nodes: mine.len() as u32,
                    creating: count(&|n| !n.registered && !n.deleting),
                    deleting: count(&|n| n.deleting),
                    idle,
                    unused_per_hour: f64::from(unused) * p.price_per_node_hour,
                    node_names: mine.iter().map(|(name, _)| (*name).clone()).collect(),
                    failures: health.failures,
                    available: !health.unavailable_at(t),
                    retry_at: health.retry_at.filter(|r| *r > t).map(|r| gpool_api::time::rfc3339(r.as_millis())),
                }
            })
            .collect()
    }
}

/// What a provider program is told about the node, besides `POOL NODE`.
fn provider_env(
    data_dir: &std::path::Path,
    cfg: &ElasticConfig,
    pool: &PoolConfig,
    node: &str,
) -> Vec<(String, String)> {
    let labels: Vec<String> = pool.shape.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    vec![
        ("GPOOL_POOL".into(), pool.name().to_string()),
        ("GPOOL_POOL_KIND".into(), pool.pool.kind.as_str().into()),
        ("GPOOL_NODE".into(), node.to_string()),
        ("GPOOL_SERVER".into(), cfg.server_url.clone()),
        ("GPOOL_GPUS".into(), pool.shape.gpus.to_string()),
        ("GPOOL_GPU_MODEL".into(), pool.shape.gpu_model.to_string()),
        ("GPOOL_CPUS".into(), pool.shape.cpus.to_string()),
        ("GPOOL_MEMORY_GB".into(), (pool.shape.memory_mb / 1024).to_string()),
        ("GPOOL_LABELS".into(), labels.join(",")),
        ("GPOOL_PROVIDER_DIR".into(), data_dir.join("pools").join("nodes").display().to_string()),
    ]
}
