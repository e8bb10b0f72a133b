//! The controller: one thread owns all mutable state (the scheduling core's
//! snapshot, the job records, the store) and handles a closed set of
//! [`Event`]s. Nothing else mutates state, so nothing needs a lock.
//!
//! Each turn of the loop takes every event waiting (a batch), handles them,
//! runs one scheduling pass if anything relevant changed, and then, in this
//! order:
//! 1. commits every change of the batch to the store in one transaction;
//! 2. answers the API requests of the batch (so a 2xx means "committed");
//! 3. carries out the plan: starts replicas, sends signals;
//! 4. publishes events to stream subscribers.
//!
//! There is no polling: the loop sleeps until the next event or the next
//! timer (time limits, kill deadlines, retry back-off).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use gpool_api as api;
use gpool_core::{
    JobId, NodeId, Placement, Policy, QueueConfig, Snapshot, StopCause, StopOutcome, Time, job::Service, schedule,
};
use gpool_store::{EventRow, JobQuery, Store, TokenRow, Write};
use rustix::process::Signal;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

use crate::agent::{Agent, AgentReport, Found, ReplicaKey, parse_signal};
use crate::auth::{Caller, Role, hash_token};
use crate::convert::to_core;
use crate::metrics::{Histogram, Scrape};
use crate::prices::Prices;
use crate::shim::{ExitRecord, Launch, now_ms};
use crate::telemetry::{Telemetry, TelemetryConfig};
use crate::webhook::{Notice, Webhook};

mod nodes;
mod observe;
mod views;

use nodes::{Link, NodeLink};
pub use nodes::{NodeDoc, core_node, gpus_to_wire};

/// An API failure: HTTP status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
}

pub type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// Where a job's log is and whether more can come.
#[derive(Debug, Clone)]
pub struct LogTarget {
    pub path: PathBuf,
    pub finished: bool,
}

/// Filters of a job listing.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub states: Vec<api::JobState>,
    pub user: Option<String>,
    pub queue: Option<String>,
    pub after: Option<u64>,
    pub limit: u32,
}

/// An API call.
#[derive(Debug)]
pub enum Call {
    Submit {
        specs: Vec<api::JobSpec>,
        reply: Reply<api::Submitted>,
    },
    Get {
        id: u64,
        reply: Reply<api::JobView>,
    },
    List {
        query: ListQuery,
        reply: Reply<api::JobList>,
    },
    Cancel {
        id: u64,
        reply: Reply<api::JobView>,
    },
    Logs {
        id: u64,
        rank: u32,
        stream: String,
        reply: Reply<LogTarget>,
    },
    Nodes {
        reply: Reply<Vec<api::NodeView>>,
    },
    Queues {
        reply: Reply<Vec<api::QueueView>>,
    },
    Events {
        after: u64,
        job: Option<u64>,
        reply: Reply<Vec<api::EventView>>,
    },
    CreateToken {
        req: api::TokenRequest,
        reply: Reply<api::TokenCreated>,
    },
    WhoAmI {
        reply: Reply<api::WhoAmI>,
    },
    /// A job's utilisation curve and usage.
    Usage {
        id: u64,
        reply: Reply<api::JobUsageView>,
    },
    /// The advisor's findings for a job; `min_span` overrides how much telemetry it needs.
    Advice {
        id: u64,
        min_span: Option<Duration>,
        reply: Reply<api::AdviceView>,
    },
    Alerts {
        reply: Reply<Vec<api::AlertView>>,
    },
    /// Drain a node (`draining: true`) or let it take work again.
    Drain {
        node: String,
        draining: bool,
        reply: Reply<api::NodeView>,
    },
    /// The agent protocol.
    Register {
        reg: api::agent::Register,
        reply: Reply<api::agent::Registered>,
    },
    Poll {
        node: String,
        epoch: u64,
        after: u64,
        reply: Reply<api::agent::Commands>,
    },
    Report {
        report: api::agent::Report,
        reply: Reply<()>,
    },
}

/// A request that needs no token (the Prometheus scrape).
#[derive(Debug)]
pub enum Open {
    Metrics { reply: oneshot::Sender<Scrape> },
}

/// Everything the controller reacts to.
#[derive(Debug)]
pub enum Event {
    /// An API call with the caller's bearer token.
    Api {
        token: String,
        call: Call,
    },
    Open(Open),
    Agent(AgentReport),
    Shutdown,
}

/// Why a run is being stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "cause")]
pub enum Stop {
    Cancel {
        by: String,
    },
    Preempt {
        for_job: u64,
    },
    TimeLimit,
    /// Another replica of the gang failed.
    GangFailure {
        rank: u32,
    },
    /// A replica was lost (its shim vanished).
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDoc {
    pub rank: u32,
    pub node: String,
    pub gpus: Vec<u32>,
    pub mig: Vec<String>,
    pub cpus_milli: u64,
    pub memory_mb: u64,
    pub cuda_visible_devices: String,
    #[serde(default)]
    pub exit: Option<ExitRecord>,
    #[serde(default)]
    pub lost: bool,
}

impl ReplicaDoc {
    fn ended(&self) -> bool {
        self.exit.is_some() || self.lost
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDoc {
    pub attempt: u32,
    pub started_ms: i64,
    pub replicas: Vec<ReplicaDoc>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub kill_at_ms: Option<i64>,
    /// `MASTER_PORT` of a gang spread over several nodes (reserved on rank 0's node).
    #[serde(default)]
    pub master_port: Option<u16>,
}

/// A job as persisted: the store's JSON document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDoc {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub team: String,
    pub queue: String,
    pub priority: i32,
    pub spec: api::JobSpec,
    pub state: api::JobState,
    #[serde(default)]
    pub end_reason: Option<String>,
    pub submitted_ms: i64,
    #[serde(default)]
    pub started_ms: Option<i64>,
    #[serde(default)]
    pub ended_ms: Option<i64>,
    pub attempt: u32,
    pub restarts: u32,
    pub failures: u32,
    #[serde(default)]
    pub not_before_ms: Option<i64>,
    pub prior_runtime_ms: u64,
    pub prior_gpu_milli_secs: u64,
    #[serde(default)]
    pub run: Option<RunDoc>,
    #[serde(default)]
    pub exit: Option<api::ExitView>,
    /// When it last joined the queue (submission or requeue).
    #[serde(default)]
    pub queued_ms: Option<i64>,
    /// Usage of its finished runs.
    #[serde(default)]
    pub usage: Option<api::UsageSummary>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// SIGKILL whatever of this run is left.
    Kill {
        job: u64,
        attempt: u32,
    },
    TimeLimit {
        job: u64,
        attempt: u32,
    },
    /// A retry back-off ends: schedule again.
    Wake,
    /// Is this node's lease still alive?
    Lease {
        node: u32,
    },
    /// A parked long poll gets an empty answer.
    PollTimeout {
        node: u32,
        park: u64,
    },
}

enum Effect {
    /// Start a replica on a node's devices (GPU or MIG UUIDs).
    Start(NodeId, ReplicaKey, Launch, Vec<String>),
    Signal(NodeId, ReplicaKey, Signal),
}

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where job logs are kept (agents ship theirs here).
    pub data_dir: PathBuf,
    pub policy: Policy,
    pub queues: Vec<QueueConfig>,
    /// First retry back-off; doubles with each failure, at most ten minutes.
    pub retry_backoff: Duration,
    pub telemetry: TelemetryConfig,
    pub prices: Prices,
    /// Where to POST alert notifications (Alertmanager webhook format).
    pub webhook: Option<Webhook>,
    /// A remote node silent for this long is down.
    pub lease: Duration,
    /// `MASTER_PORT`s for gangs spread over several nodes.
    pub master_ports: std::ops::Range<u16>,
}

const ACTIVE: [&str; 4] = ["pending", "starting", "running", "stopping"];

/// The owner of all state. See the module docs.
pub struct Controller {
    cfg: Config,
    store: Box<dyn Store>,
    snap: Snapshot,
    /// Every node's agent link and record.
    links: BTreeMap<NodeId, NodeLink>,
    /// `MASTER_PORT`s in use, per master node.
    master_ports: BTreeMap<(NodeId, u16), u64>,
    /// Jobs not yet finished.
    jobs: BTreeMap<u64, JobDoc>,
    /// Why each job the last pass examined waits: (job, index into
    /// `reason_texts`), sorted by job. The pass gives a reason per job shape,
    /// so a pass over 100,000 jobs formats a few hundred texts, not 100,000.
    waiting: Vec<(u64, u32)>,
    reason_texts: Vec<String>,
    default_reason: Option<String>,
    tokens: HashMap<String, Caller>,
    next_id: u64,
    next_seq: u64,
    timers: BTreeSet<(i64, Timer)>,
    events: broadcast::Sender<api::EventView>,
    own: Sender<Event>,
    // Per batch.
    writes: Vec<Write>,
    touched: BTreeSet<u64>,
    replies: Vec<Box<dyn FnOnce() + Send>>,
    effects: Vec<Effect>,
    published: Vec<api::EventView>,
    dirty: bool,
    shutdown: bool,
    // Telemetry and the exporter's counters.
    telemetry: Telemetry,
    notices: Vec<Notice>,
    wait: Histogram,
    passes: Histogram,
    /// No scheduling pass before this (see `run`).
    next_pass_ms: i64,
    allocations: u64,
    preemptions: u64,
    /// GPU-hours of finished runs per (user, team), since the daemon started.
    gpu_hours_done: BTreeMap<(String, String), f64>,
}

fn state_str(s: api::JobState) -> &'static str {
    s.as_str()
}

impl Controller {
    /// Builds the controller from the store: its nodes (with `local`, the
    /// node of this process's own agent), then its jobs; re-adopts or
    /// requeues what was running.
    pub fn new(
        cfg: Config,
        mut store: Box<dyn Store>,
        local: Option<(NodeDoc, Agent)>,
        events: broadcast::Sender<api::EventView>,
        own: Sender<Event>,
    ) -> anyhow::Result<Controller> {
        let mut snap = Snapshot::new(cfg.policy.clone());
        for q in &cfg.queues {
            snap.set_queue(q.clone());
        }
        let tokens = store
            .tokens()?
            .into_iter()
            .map(|t| (t.hash, Caller { user: t.user, team: t.team, role: Role::parse(&t.role) }))
            .collect();
        let next_id = store.max_job_id()? + 1;
        let next_seq = store.max_event_seq()? + 1;
        let cfg_telemetry = cfg.telemetry.clone();
        let mut c = Controller {
            cfg,
            store,
            snap,
            links: BTreeMap::new(),
            master_ports: BTreeMap::new(),
            jobs: BTreeMap::new(),
            waiting: Vec::new(),
            reason_texts: Vec::new(),
            default_reason: None,
            tokens,
            next_id,
            next_seq,
            timers: BTreeSet::new(),
            events,
            own,
            writes: Vec::new(),
            touched: BTreeSet::new(),
            replies: Vec::new(),
            effects: Vec::new(),
            published: Vec::new(),
            dirty: true,
            shutdown: false,
            telemetry: Telemetry::new(cfg_telemetry),
            notices: Vec::new(),
            wait: Histogram::wait_seconds(),
            passes: Histogram::pass_seconds(),
            next_pass_ms: 0,
            allocations: 0,
            preemptions: 0,
            gpu_hours_done: BTreeMap::new(),
        };
        let now = now_ms();
        if let Some((mut doc, agent)) = local {
            // A drain of this node holds across restarts.
            if let Some(row) = c.store.nodes()?.into_iter().find(|r| r.name == doc.name)
                && let Ok(old) = serde_json::from_str::<NodeDoc>(&row.doc)
            {
                doc.draining = old.draining;
                doc.epoch = old.epoch;
            }
            c.install_node(doc, Link::Local(agent), now).map_err(|e| anyhow::anyhow!(e.message))?;
        }
        c.restore_nodes(now)?;
        c.restore()?;
        Ok(c)
    }

    /// Ensures an admin token with this secret exists.
    pub fn ensure_admin_token(&mut self, secret: &str, user: &str) -> anyhow::Result<()> {
        let hash = hash_token(secret);
        if !self.tokens.contains_key(&hash) {
            let row = TokenRow {
                hash: hash.clone(),
                user: user.into(),
                team: "admin".into(),
                role: "admin".into(),
                created_ms: now_ms(),
            };
            self.store.commit(&[Write::PutToken(row)])?;
            self.tokens.insert(hash, Caller { user: user.into(), team: "admin".into(), role: Role::Admin });
        }
        Ok(())
    }

    /// Loads unfinished jobs into the snapshot and reconciles running replicas with the agent.
    fn restore(&mut self) -> anyhow::Result<()> {
        let rows = self.store.jobs_in_states(&ACTIVE)?;
        let mut deps = BTreeSet::new();
        for row in rows {
            let doc: JobDoc = serde_json::from_str(&row.doc)?;
            deps.extend(doc.spec.depends_on.iter().copied());
            self.jobs.insert(doc.id, doc);
        }
        for d in deps {
            if !self.jobs.contains_key(&d)
                && let Some(row) = self.store.job(d)?
            {
                self.snap.record_finished(JobId(d), row.state == "succeeded");
            }
        }
        let now = now_ms();
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(doc) = self.jobs.get(&id).cloned() else { continue };
            let Ok(core) = to_core(&doc.spec, &doc.user, &doc.team, doc.submitted_ms) else {
                self.finish_terminal(
                    id,
                    api::JobState::Failed,
                    "its spec is no longer valid for this gpool".into(),
                    now,
                );
                continue;
            };
            let service = Service {
                prior_runtime: Duration::from_millis(doc.prior_runtime_ms),
                prior_gpu_milli_secs: doc.prior_gpu_milli_secs,
                restarts: doc.restarts,
            };
            let not_before = doc.not_before_ms.map_or(Time::MIN, Time::from_millis);
            self.snap.restore_pending(JobId(id), std::sync::Arc::new(core), service, not_before)?;
            let Some(run) = doc.run.clone().filter(|_| doc.state != api::JobState::Pending) else { continue };
            // The run's devices, mapped onto today's inventory.
            let placement: Option<Placement> = run
                .replicas
                .iter()
                .map(|r| {
                    let node = self.snap.node_id(&r.node)?;
                    let mig: Vec<&str> = r.mig.iter().map(String::as_str).collect();
                    let (gpus, mig) = self.snap.slots_of(node, &r.gpus, &mig)?;
                    Some(gpool_core::ReplicaPlacement {
                        node,
                        gpus,
                        mig,
                        cpus_milli: r.cpus_milli,
                        memory_mb: r.memory_mb,
                    })
                })
                .collect();
            match placement.map(|p| self.snap.start(JobId(id), p, Time::from_millis(run.started_ms))) {
                Some(Ok(())) => {}
                _ => {
                    // Its devices are gone or taken: nothing can run it there any more.
                    for r in &run.replicas {
                        let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                        let Some(node) = self.snap.node_id(&r.node) else { continue };
                        match self.links.get(&node) {
                            Some(NodeLink { link: Link::Local(agent), .. }) => {
                                agent.reconcile(key, Vec::new());
                            }
                            Some(_) => self.push_command(node, api::agent::Command::Kill { replica: key.into() }),
                            None => {}
                        }
                    }
                    self.requeue_after_loss(id, "its devices are no longer in its nodes' inventory", now);
                    continue;
                }
            }
            if let (Some(port), Some(node)) =
                (run.master_port, run.replicas.first().and_then(|r| self.snap.node_id(&r.node)))
            {
                self.master_ports.insert((node, port), id);
            }
            match &run.stop {
                Some(Stop::Preempt { for_job }) => {
                    let _ = self.snap.request_stop(JobId(id), StopCause::Preempted { for_job: JobId(*for_job) });
                }
                Some(_) => {
                    let _ = self.snap.request_stop(JobId(id), StopCause::Cancelled);
                }
                None => {}
            }
            if let Some(k) = run.kill_at_ms {
                self.timers.insert((k, Timer::Kill { job: id, attempt: run.attempt }));
            }
            if let Some(limit) = self.snap.job(JobId(id)).and_then(|j| j.spec.time_limit) {
                self.timers.insert((
                    run.started_ms + limit.as_millis() as i64,
                    Timer::TimeLimit { job: id, attempt: run.attempt },
                ));
            }
            // Replicas on this process's own node are reconciled now; remote
            // ones when their agents register.
            for r in run.replicas.iter().filter(|r| !r.ended()) {
                let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                let devices = self.device_uuids(r);
                let found = match self.snap.node_id(&r.node).and_then(|n| self.links.get(&n)) {
                    Some(NodeLink { link: Link::Local(agent), .. }) => Some(agent.reconcile(key, devices)),
                    _ => None,
                };
                if found == Some(Found::Lost) {
                    self.on_replica_end(key, None, Some("its shim was gone when the daemon restarted".into()), now);
                }
            }
        }
        self.flush();
        Ok(())
    }

    /// Runs the loop until shutdown.
    pub fn run(mut self, rx: Receiver<Event>) {
        loop {
            let first = match self.timers.first().map(|(t, _)| *t) {
                Some(t) => {
                    let wait = (t - now_ms()).max(0) as u64;
                    match rx.recv_timeout(Duration::from_millis(wait)) {
                        Ok(e) => Some(e),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                None => match rx.recv() {
                    Ok(e) => Some(e),
                    Err(_) => return,
                },
            };
            let now = now_ms();
            if let Some(e) = first {
                self.handle(e, now);
            }
            let mut n = 0;
            while n < 4096
                && let Ok(e) = rx.try_recv()
            {
                self.handle(e, now);
                n += 1;
            }
            self.fire_timers(now);
            if self.dirty {
                // Passes take at most half of the controller's time: after a
                // pass of P ms, the next waits P ms, and the requests and
                // reports of that time are answered in between. A pass of a
                // few hundred µs (most clusters) delays nothing.
                if now >= self.next_pass_ms {
                    self.schedule(now);
                } else {
                    self.timers.insert((self.next_pass_ms, Timer::Wake));
                }
            }
            self.flush();
            if self.shutdown {
                return;
            }
        }
    }

    fn handle(&mut self, e: Event, now: i64) {
        match e {
            Event::Api { token, call } => self.api(&token, call, now),
            Event::Agent(AgentReport::Exited { key, exit }) => self.on_replica_end(key, Some(exit), None, now),
            Event::Agent(AgentReport::Lost { key, why }) => self.on_replica_end(key, None, Some(why), now),
            Event::Agent(AgentReport::Telemetry(r)) => self.on_telemetry(r, now),
            Event::Agent(AgentReport::Running { .. }) => {}
            Event::Open(Open::Metrics { reply }) => {
                let scrape = self.scrape(now);
                let _ = reply.send(scrape);
            }
            Event::Shutdown => self.shutdown = true,
        }
    }

    fn reply<T: Send + 'static>(&mut self, tx: Reply<T>, v: Result<T, ApiError>) {
        self.replies.push(Box::new(move || {
            let _ = tx.send(v);
        }));
    }

    fn event(&mut self, now: i64, job: Option<u64>, kind: &str, message: String) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.writes.push(Write::AppendEvent(EventRow {
            seq,
            at_ms: now,
            job,
            kind: kind.into(),
            message: message.clone(),
        }));
        let user = job.and_then(|j| self.jobs.get(&j)).map(|d| d.user.clone());
        self.published.push(api::EventView { seq, at: api::time::rfc3339(now), job, user, kind: kind.into(), message });
    }

    // ----- API -----

    fn api(&mut self, token: &str, call: Call, now: i64) {
        let Some(caller) = self.tokens.get(&hash_token(token)).cloned() else {
            let err = ApiError::new(
                401,
                "invalid token: pass a token of `gpool token create` as 'Authorization: Bearer <token>'",
            );
            return self.refuse(call, err);
        };
        // Node tokens speak the agent protocol and nothing else; the agent
        // protocol takes node and admin tokens.
        let agent_call = matches!(call, Call::Register { .. } | Call::Poll { .. } | Call::Report { .. });
        let anyone = matches!(call, Call::WhoAmI { .. });
        if caller.role != Role::Admin && !anyone && agent_call != (caller.role == Role::Node) {
            let why = if agent_call {
                "only node tokens (gpool token create --role node) speak the agent protocol"
            } else {
                "a node token only speaks the agent protocol"
            };
            return self.refuse(call, ApiError::new(403, why));
        }
        match call {
            Call::Drain { node, draining, reply } => {
                let r = self.set_draining(&caller, &node, draining, now);
                self.reply(reply, r);
            }
            Call::Register { reg, reply } => {
                let r = self.register(reg, now);
                self.reply(reply, r);
            }
            Call::Poll { node, epoch, after, reply } => self.poll(&node, epoch, after, reply, now),
            Call::Report { report, reply } => {
                let r = self.agent_report(report, now);
                self.reply(reply, r);
            }
            Call::Submit { specs, reply } => {
                let r = self.submit(&caller, specs, now);
                self.reply(reply, r);
            }
            Call::Get { id, reply } => {
                let r = self.visible(&caller, id).map(|d| self.view(&d));
                self.reply(reply, r);
            }
            Call::List { query, reply } => {
                let r = self.list(&caller, query);
                self.reply(reply, r);
            }
            Call::Cancel { id, reply } => {
                let r = self.cancel(&caller, id, now);
                self.reply(reply, r);
            }
            Call::Logs { id, rank, stream, reply } => {
                let r = self.visible(&caller, id).and_then(|d| {
                    if rank >= d.spec.replicas {
                        return Err(ApiError::new(
                            400,
                            format!("rank {rank}: job {id} has {} replica(s)", d.spec.replicas),
                        ));
                    }
                    Ok(LogTarget {
                        path: crate::agent::log_path(&self.cfg.data_dir, id, rank, &stream),
                        finished: d.state.is_terminal(),
                    })
                });
                self.reply(reply, r);
            }
            Call::Nodes { reply } => {
                let r = Ok(self.nodes());
                self.reply(reply, r);
            }
            Call::Queues { reply } => {
                let r = Ok(self.queues());
                self.reply(reply, r);
            }
            Call::Events { after, job, reply } => {
                let r = self.history(&caller, after, job);
                self.reply(reply, r);
            }
            Call::CreateToken { req, reply } => {
                let r = self.create_token(&caller, req, now);
                self.reply(reply, r);
            }
            Call::WhoAmI { reply } => {
                let r = Ok(api::WhoAmI {
                    user: caller.user.clone(),
                    team: caller.team.clone(),
                    role: caller.role.as_str().into(),
                });
                self.reply(reply, r);
            }
            Call::Usage { id, reply } => {
                let r = self.visible(&caller, id).and_then(|d| self.usage(&d));
                self.reply(reply, r);
            }
            Call::Advice { id, min_span, reply } => {
                let r = self.visible(&caller, id).and_then(|d| self.advice(&d, min_span));
                self.reply(reply, r);
            }
            Call::Alerts { reply } => {
                let r = Ok(self.alerts(&caller));
                self.reply(reply, r);
            }
        }
    }

    /// Answers a call with an error, whatever its kind.
    fn refuse(&mut self, call: Call, err: ApiError) {
        match call {
            Call::Submit { reply, .. } => self.reply(reply, Err(err)),
            Call::Get { reply, .. } | Call::Cancel { reply, .. } => self.reply(reply, Err(err)),
            Call::List { reply, .. } => self.reply(reply, Err(err)),
            Call::Logs { reply, .. } => self.reply(reply, Err(err)),
            Call::Nodes { reply } => self.reply(reply, Err(err)),
            Call::Queues { reply } => self.reply(reply, Err(err)),
            Call::Events { reply, .. } => self.reply(reply, Err(err)),
            Call::CreateToken { reply, .. } => self.reply(reply, Err(err)),
            Call::WhoAmI { reply } => self.reply(reply, Err(err)),
            Call::Usage { reply, .. } => self.reply(reply, Err(err)),
            Call::Advice { reply, .. } => self.reply(reply, Err(err)),
            Call::Alerts { reply } => self.reply(reply, Err(err)),
            Call::Drain { reply, .. } => self.reply(reply, Err(err)),
            Call::Register { reply, .. } => self.reply(reply, Err(err)),
            Call::Poll { reply, .. } => self.reply(reply, Err(err)),
            Call::Report { reply, .. } => self.reply(reply, Err(err)),
        }
    }

    fn submit(&mut self, caller: &Caller, specs: Vec<api::JobSpec>, now: i64) -> Result<api::Submitted, ApiError> {
        if specs.is_empty() {
            return Err(ApiError::new(400, "jobs: the batch is empty"));
        }
        let batch = specs.len() > 1;
        let at = |i: usize, msg: String| if batch { format!("jobs[{i}].{msg}") } else { msg };
        // Check everything first: a batch is accepted whole or not at all.
        let mut cores = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let core =
                to_core(spec, &caller.user, &caller.team, now).map_err(|e| ApiError::new(400, at(i, e.to_string())))?;
            if let Err(why) = self.snap.check_feasible(&core) {
                return Err(ApiError::new(400, at(i, format!("rejected: {why}"))));
            }
            if let Some(dir) = &spec.workdir
                && !std::path::Path::new(dir).is_dir()
            {
                return Err(ApiError::new(400, at(i, format!("workdir: {dir:?} is not a directory on the node"))));
            }
            for d in &spec.depends_on {
                let known = self.jobs.contains_key(d)
                    || *d < self.next_id && {
                        match self.store.job(*d) {
                            Ok(Some(row)) => {
                                self.snap.record_finished(JobId(*d), row.state == "succeeded");
                                true
                            }
                            _ => false,
                        }
                    };
                if !known {
                    return Err(ApiError::new(400, at(i, format!("dependsOn: job {d} does not exist"))));
                }
            }
            cores.push(core);
        }
        let mut ids = Vec::new();
        for (spec, core) in specs.into_iter().zip(cores) {
            let id = self.next_id;
            self.next_id += 1;
            let doc = JobDoc {
                id,
                name: spec.name.clone().unwrap_or_else(|| default_name(&spec)),
                user: caller.user.clone(),
                team: caller.team.clone(),
                queue: core.queue.to_string(),
                priority: core.priority,
                spec,
                state: api::JobState::Pending,
                end_reason: None,
                submitted_ms: now,
                started_ms: None,
                ended_ms: None,
                attempt: 0,
                restarts: 0,
                failures: 0,
                not_before_ms: None,
                prior_runtime_ms: 0,
                prior_gpu_milli_secs: 0,
                run: None,
                exit: None,
                queued_ms: Some(now),
                usage: None,
            };
            if let Err(e) = self.snap.submit(JobId(id), core) {
                return Err(ApiError::new(500, format!("internal error: {e}")));
            }
            self.event(now, Some(id), "submitted", format!("job {id} ({}) submitted by {}", doc.name, doc.user));
            self.jobs.insert(id, doc);
            self.touched.insert(id);
            ids.push(id);
        }
        self.dirty = true;
        Ok(api::Submitted { ids })
    }

    /// A job the caller may see: their own, or any for admins. Others' jobs are "not found".
    fn visible(&mut self, caller: &Caller, id: u64) -> Result<JobDoc, ApiError> {
        let doc = match self.jobs.get(&id) {
            Some(d) => Some(d.clone()),
            None => self
                .store
                .job(id)
                .map_err(|e| ApiError::new(500, e.to_string()))?
                .and_then(|r| serde_json::from_str::<JobDoc>(&r.doc).ok()),
        };
        match doc {
            Some(d) if caller.role == Role::Admin || d.user == caller.user => Ok(d),
            _ => Err(ApiError::new(404, format!("job {id} not found"))),
        }
    }

    fn list(&mut self, caller: &Caller, q: ListQuery) -> Result<api::JobList, ApiError> {
        let user = if caller.role == Role::Admin { q.user } else { Some(caller.user.clone()) };
        let limit = q.limit.clamp(1, 1000);
        let rows = self
            .store
            .jobs(&JobQuery {
                user,
                queue: q.queue,
                states: q.states.iter().map(|s| s.as_str().to_string()).collect(),
                after: q.after,
                limit: limit + 1,
            })
            .map_err(|e| ApiError::new(500, e.to_string()))?;
        let more = rows.len() > limit as usize;
        let mut jobs = Vec::new();
        for r in rows.into_iter().take(limit as usize) {
            let doc = match self.jobs.get(&r.id) {
                Some(d) => d.clone(),
                None => serde_json::from_str(&r.doc).map_err(|e| ApiError::new(500, e.to_string()))?,
            };
            jobs.push(self.view(&doc));
        }
        let next = if more { jobs.last().map(|j| j.id) } else { None };
        Ok(api::JobList { jobs, next })
    }

    fn cancel(&mut self, caller: &Caller, id: u64, now: i64) -> Result<api::JobView, ApiError> {
        let doc = self.visible(caller, id)?;
        match doc.state {
            s if s.is_terminal() => return Err(ApiError::new(409, format!("job {id} already ended ({})", s.as_str()))),
            api::JobState::Pending => {
                let _ = self.snap.remove_pending(JobId(id), false);
                self.finish_terminal(id, api::JobState::Cancelled, format!("cancelled by {}", caller.user), now);
                self.dirty = true;
            }
            _ => {
                self.stop_run(id, Stop::Cancel { by: caller.user.clone() }, now);
                self.event(
                    now,
                    Some(id),
                    "cancelling",
                    format!("job {id} cancelled by {}; stop signal sent", caller.user),
                );
            }
        }
        let d = self.jobs.get(&id).cloned().or_else(|| self.visible(caller, id).ok()).unwrap_or(doc);
        Ok(self.view(&d))
    }

    fn create_token(
        &mut self,
        caller: &Caller,
        req: api::TokenRequest,
        now: i64,
    ) -> Result<api::TokenCreated, ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins create tokens"));
        }
        let role = match req.role.as_deref() {
            None | Some("user") => Role::User,
            Some("admin") => Role::Admin,
            Some("node") => Role::Node,
            Some(other) => return Err(ApiError::new(400, format!("role: {other:?} is not user, admin or node"))),
        };
        if req.user.trim().is_empty() || req.user.contains(char::is_whitespace) {
            return Err(ApiError::new(400, "user: must be a non-empty name without spaces"));
        }
        let team = req.team.unwrap_or_else(|| "default".into());
        let secret = crate::auth::new_secret().map_err(|e| ApiError::new(500, e))?;
        let hash = hash_token(&secret);
        self.writes.push(Write::PutToken(TokenRow {
            hash: hash.clone(),
            user: req.user.clone(),
            team: team.clone(),
            role: role.as_str().into(),
            created_ms: now,
        }));
        self.tokens.insert(hash, Caller { user: req.user.clone(), team: team.clone(), role });
        Ok(api::TokenCreated { token: secret, user: req.user, team, role: role.as_str().into() })
    }

    fn history(&mut self, caller: &Caller, after: u64, job: Option<u64>) -> Result<Vec<api::EventView>, ApiError> {
        if let Some(j) = job {
            self.visible(caller, j)?;
        } else if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins may read every job's events; pass ?job=ID"));
        }
        let rows = self.store.events(after, job, 1000).map_err(|e| ApiError::new(500, e.to_string()))?;
        Ok(rows
            .into_iter()
            .map(|e| api::EventView {
                seq: e.seq,
                at: api::time::rfc3339(e.at_ms),
                job: e.job,
                user: None,
                kind: e.kind,
                message: e.message,
            })
            .collect())
    }

    // ----- runs -----

    /// Sends the stop signal to every live replica of a running job and arms the SIGKILL timer.
    fn stop_run(&mut self, id: u64, cause: Stop, now: i64) {
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        let Some(run) = doc.run.as_mut() else { return };
        // A cancel overrides an earlier cause (a preempted job that is cancelled does not come back).
        let upgrade = matches!(cause, Stop::Cancel { .. }) && !matches!(run.stop, Some(Stop::Cancel { .. }));
        if run.stop.is_some() && !upgrade {
            return;
        }
        let core_cause = match &cause {
            Stop::Preempt { for_job } => StopCause::Preempted { for_job: JobId(*for_job) },
            _ => StopCause::Cancelled,
        };
        let grace = self.snap.job(JobId(id)).map_or(crate::convert::DEFAULT_GRACE, |j| j.spec.grace);
        let sig = doc.spec.stop_signal.as_deref().and_then(parse_signal).unwrap_or(Signal::TERM);
        let first = run.stop.is_none();
        run.stop = Some(cause);
        doc.state = api::JobState::Stopping;
        let _ = self.snap.request_stop(JobId(id), core_cause);
        if first {
            let kill_at = now + grace.as_millis() as i64;
            run.kill_at_ms = Some(kill_at);
            for r in run.replicas.iter().filter(|r| !r.ended()) {
                if let Some(node) = self.snap.node_id(&r.node) {
                    let key = ReplicaKey { job: id, attempt: run.attempt, rank: r.rank };
                    self.effects.push(Effect::Signal(node, key, sig));
                }
            }
            self.timers.insert((kill_at, Timer::Kill { job: id, attempt: run.attempt }));
        }
        self.touched.insert(id);
    }

    fn on_replica_end(&mut self, key: ReplicaKey, exit: Option<ExitRecord>, lost: Option<String>, now: i64) {
        let Some(doc) = self.jobs.get_mut(&key.job) else { return };
        let Some(run) = doc.run.as_mut().filter(|r| r.attempt == key.attempt) else { return };
        let Some(rep) = run.replicas.iter_mut().find(|r| r.rank == key.rank) else { return };
        if rep.ended() {
            return;
        }
        let failed = lost.is_some() || exit.as_ref().is_none_or(|e| e.code != Some(0));
        if let Some(e) = &exit {
            rep.exit = Some(e.clone());
        } else {
            rep.lost = true;
        }
        let all_ended = run.replicas.iter().all(ReplicaDoc::ended);
        let live = run.replicas.iter().any(|r| !r.ended());
        let stopping = run.stop.is_some();
        if lost.is_some() && !stopping && !live {
            // Nothing left to stop, but the run ends because a replica was
            // lost, not because the job failed: it goes back to the queue.
            run.stop = Some(Stop::Lost);
        }
        self.touched.insert(key.job);
        if let Some(why) = &lost {
            self.event(now, Some(key.job), "lost", format!("job {} rank {} lost: {why}", key.job, key.rank));
        }
        if failed && live && !stopping {
            // Gang semantics: one replica failing ends the others.
            let cause = if lost.is_some() { Stop::Lost } else { Stop::GangFailure { rank: key.rank } };
            self.stop_run(key.job, cause, now);
        }
        if all_ended {
            self.finish_run(key.job, now);
        }
    }

    /// All replicas of the current run are gone: free the devices and decide what next.
    fn finish_run(&mut self, id: u64, now: i64) {
        self.account_run(id, now);
        self.master_ports.retain(|_, j| *j != id);
        let Some(doc) = self.jobs.get(&id).cloned() else { return };
        let Some(run) = doc.run.clone() else { return };
        let exits: Vec<&ExitRecord> = run.replicas.iter().filter_map(|r| r.exit.as_ref()).collect();
        let all_ok = !run.replicas.iter().any(|r| r.lost) && exits.iter().all(|e| e.code == Some(0));
        let first_bad = run.replicas.iter().find(|r| r.lost || r.exit.as_ref().is_some_and(|e| e.code != Some(0)));
        let exit_view = first_bad
            .or_else(|| run.replicas.first())
            .and_then(|r| r.exit.as_ref())
            .map(|e| api::ExitView { code: e.code, signal: e.signal });
        let describe = |e: &Option<api::ExitView>| match e {
            Some(api::ExitView { code: Some(c), .. }) => format!("exit code {c}"),
            Some(api::ExitView { signal: Some(s), .. }) => format!("signal {s}"),
            _ => "lost".to_string(),
        };
        enum Next {
            Done(api::JobState, String),
            Requeue(String, i64, bool),
        }
        let next = match &run.stop {
            Some(Stop::Cancel { by }) => Next::Done(api::JobState::Cancelled, format!("cancelled by {by}")),
            Some(Stop::TimeLimit) => Next::Done(api::JobState::TimedOut, "killed at its time limit".into()),
            Some(Stop::Preempt { for_job }) => Next::Requeue(format!("preempted for job {for_job}"), now, false),
            Some(Stop::Lost) if doc.spec.on_node_failure == Some(api::spec::NodeFailure::Fail) => Next::Done(
                api::JobState::Failed,
                "a replica was lost (its node failed) and the job asked not to be requeued (onNodeFailure: fail)"
                    .into(),
            ),
            Some(Stop::Lost) => Next::Requeue("a replica was lost; requeued".into(), now, false),
            Some(Stop::GangFailure { .. }) | None if all_ok => {
                Next::Done(api::JobState::Succeeded, "exit code 0".into())
            }
            _ => {
                if doc.failures < doc.spec.retries {
                    let backoff = self.cfg.retry_backoff.as_millis() as i64 * (1i64 << doc.failures.min(16));
                    let backoff = backoff.min(600_000);
                    Next::Requeue(
                        format!(
                            "failed with {}; retry {} of {}",
                            describe(&exit_view),
                            doc.failures + 1,
                            doc.spec.retries
                        ),
                        now + backoff,
                        true,
                    )
                } else {
                    Next::Done(api::JobState::Failed, format!("failed with {}", describe(&exit_view)))
                }
            }
        };
        match next {
            Next::Done(state, reason) => {
                let _ = self.snap.stop(
                    JobId(id),
                    Time::from_millis(now),
                    StopOutcome::Finished { success: state == api::JobState::Succeeded },
                );
                if let Some(d) = self.jobs.get_mut(&id) {
                    d.exit = exit_view;
                }
                self.finish_terminal(id, state, reason, now);
            }
            Next::Requeue(reason, not_before, failure) => {
                let nb = if not_before > now { Time::from_millis(not_before) } else { Time::MIN };
                let _ = self.snap.stop(JobId(id), Time::from_millis(now), StopOutcome::Requeue { not_before: nb });
                if let Some(d) = self.jobs.get_mut(&id) {
                    d.state = api::JobState::Pending;
                    d.queued_ms = Some(now);
                    d.restarts += 1;
                    d.failures += u32::from(failure);
                    d.not_before_ms = (not_before > now).then_some(not_before);
                    d.exit = exit_view;
                    d.end_reason = Some(reason.clone());
                    if let Some(j) = self.snap.job(JobId(id)) {
                        d.prior_runtime_ms = j.service.prior_runtime.as_millis() as u64;
                        d.prior_gpu_milli_secs = j.service.prior_gpu_milli_secs;
                    }
                }
                if not_before > now {
                    self.timers.insert((not_before, Timer::Wake));
                }
                self.touched.insert(id);
                self.event(now, Some(id), "requeued", format!("job {id}: {reason}"));
            }
        }
        self.dirty = true;
    }

    /// Moves a job to a terminal state and out of the active set.
    fn finish_terminal(&mut self, id: u64, state: api::JobState, reason: String, now: i64) {
        let Some(mut doc) = self.jobs.remove(&id) else { return };
        doc.state = state;
        doc.ended_ms = Some(now);
        doc.end_reason = Some(reason.clone());
        self.touched.remove(&id);
        self.writes.push(put_job(&doc));
        self.event(now, Some(id), state.as_str(), format!("job {id} {}: {reason}", state.as_str()));
        if let Some(e) = self.published.last_mut() {
            e.user = Some(doc.user.clone());
        }
    }

    /// A running job whose replicas cannot be accounted for goes back to the queue.
    fn requeue_after_loss(&mut self, id: u64, why: &str, now: i64) {
        let _ = self.snap.stop(JobId(id), Time::from_millis(now), StopOutcome::Requeue { not_before: Time::MIN });
        if let Some(d) = self.jobs.get_mut(&id) {
            d.state = api::JobState::Pending;
            d.queued_ms = Some(now);
            d.restarts += 1;
            d.end_reason = Some(format!("requeued: {why}"));
        }
        self.touched.insert(id);
        self.event(now, Some(id), "requeued", format!("job {id} requeued: {why}"));
        self.dirty = true;
    }

    fn fire_timers(&mut self, now: i64) {
        while let Some(&(t, timer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Wake => self.dirty = true,
                Timer::Lease { node } => self.lease_check(node, now),
                Timer::PollTimeout { node, park } => self.poll_timeout(node, park),
                Timer::Kill { job, attempt } => {
                    if let Some(run) = self.jobs.get(&job).and_then(|d| d.run.as_ref()).filter(|r| r.attempt == attempt)
                    {
                        for r in run.replicas.iter().filter(|r| !r.ended()) {
                            if let Some(node) = self.snap.node_id(&r.node) {
                                let key = ReplicaKey { job, attempt, rank: r.rank };
                                self.effects.push(Effect::Signal(node, key, Signal::KILL));
                            }
                        }
                    }
                }
                Timer::TimeLimit { job, attempt } => {
                    let live = self.jobs.get(&job).and_then(|d| d.run.as_ref()).is_some_and(|r| r.attempt == attempt);
                    if live {
                        self.stop_run(job, Stop::TimeLimit, now);
                        self.event(
                            now,
                            Some(job),
                            "time_limit",
                            format!("job {job} reached its time limit; stop signal sent"),
                        );
                    }
                }
            }
        }
    }

    // ----- scheduling -----

    fn schedule(&mut self, now: i64) {
        self.dirty = false;
        let t0 = std::time::Instant::now();
        let mut plan = schedule(&self.snap, Time::from_millis(now));
        let took = t0.elapsed();
        self.passes.observe(took.as_secs_f64());
        self.next_pass_ms = now_ms() + took.as_millis() as i64;
        for p in &plan.preemptions {
            self.preemptions += 1;
            self.stop_run(p.victim.0, Stop::Preempt { for_job: p.for_job.0 }, now);
            self.event(
                now,
                Some(p.victim.0),
                "preempted",
                format!("job {} preempted for job {} ({:?})", p.victim, p.for_job, p.why),
            );
        }
        for s in &plan.starts {
            self.start(s.job.0, s.placement.clone(), now);
        }
        self.snap.carry_over(&plan);
        if let Some(at) = plan.wake_at {
            self.timers.insert((at.as_millis(), Timer::Wake));
        }
        self.reason_texts = plan.reason_table.iter().map(ToString::to_string).collect();
        self.waiting = std::mem::take(&mut plan.waiting).into_iter().map(|(j, r)| (j.0, r)).collect();
        self.waiting.sort_unstable();
        self.default_reason = plan.others.as_ref().map(ToString::to_string);
    }

    /// Why a pending job waits, as the last pass said.
    fn reason(&self, id: u64) -> Option<&str> {
        let i = self.waiting.binary_search_by_key(&id, |(j, _)| *j).ok()?;
        self.reason_texts.get(self.waiting[i].1 as usize).map(String::as_str)
    }

    fn start(&mut self, id: u64, placement: Placement, now: i64) {
        if let Err(e) = self.snap.start(JobId(id), placement.clone(), Time::from_millis(now)) {
            eprintln!("gpool: internal error: the plan's start of job {id} was refused: {e}");
            return;
        }
        let names: Vec<String> =
            placement.iter().map(|r| self.snap.node(r.node).map_or_else(String::new, |n| n.name.to_string())).collect();
        // torchrun's rendezvous: rank 0's node, and a port on it.
        let world = placement.len() as u32;
        let master = placement.first().map(|r| r.node);
        let spread = placement.iter().any(|r| Some(r.node) != master);
        let master_addr = master.and_then(|m| self.links.get(&m)).map_or_else(
            || "127.0.0.1".to_string(),
            |l| if l.is_local() { "127.0.0.1".into() } else { l.doc.addr.clone() },
        );
        let master_port = match (world > 1, spread, master) {
            (false, _, _) | (_, _, None) => None,
            // All replicas here: any free port of this host.
            (true, false, Some(m)) if self.links.get(&m).is_some_and(NodeLink::is_local) => free_port(),
            // Across nodes (or on a remote node): one from the range not used by another gang on that node.
            (true, _, Some(m)) => {
                let port = self.cfg.master_ports.clone().find(|p| !self.master_ports.contains_key(&(m, *p)));
                if let Some(p) = port {
                    self.master_ports.insert((m, p), id);
                }
                port
            }
        };
        let node_rank: BTreeMap<NodeId, usize> = {
            let mut seen: Vec<NodeId> = Vec::new();
            for r in &placement {
                if !seen.contains(&r.node) {
                    seen.push(r.node);
                }
            }
            seen.into_iter().enumerate().map(|(i, n)| (n, i)).collect()
        };
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        self.allocations += 1;
        self.wait.observe((now - doc.queued_ms.unwrap_or(doc.submitted_ms)).max(0) as f64 / 1000.0);
        doc.attempt += 1;
        doc.state = api::JobState::Running;
        doc.started_ms.get_or_insert(now);
        doc.not_before_ms = None;
        let attempt = doc.attempt;
        let mut replicas = Vec::new();
        let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
        // The agent fills in what only the node knows (its PATH, HOME, checkpoint directory, …).
        let cwd = doc.spec.workdir.clone().map_or_else(PathBuf::new, PathBuf::from);
        for (rank, r) in placement.iter().enumerate() {
            let (gpus, mig) = self.snap.replica_devices(r);
            let gpu_idx: Vec<u32> = gpus.iter().map(|d| d.index).collect();
            let mig_uuids: Vec<String> = mig.iter().map(|(_, m)| m.uuid.to_string()).collect();
            let device_uuids: Vec<String> =
                gpus.iter().map(|d| d.uuid.to_string()).chain(mig_uuids.iter().cloned()).collect();
            let visible = if mig_uuids.is_empty() {
                gpu_idx.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            } else {
                mig_uuids.join(",")
            };
            let local_rank = {
                let c = per_node.entry(r.node).or_default();
                *c += 1;
                *c - 1
            };
            let mut env: BTreeMap<String, String> = doc.spec.env.clone();
            let mut set = |k: &str, v: String| {
                env.insert(k.to_string(), v);
            };
            set("CUDA_VISIBLE_DEVICES", visible.clone());
            set("NVIDIA_VISIBLE_DEVICES", if visible.is_empty() { "void".into() } else { visible.clone() });
            set("GPOOL_JOB_ID", id.to_string());
            set("GPOOL_JOB_NAME", doc.name.clone());
            set("GPOOL_ATTEMPT", attempt.to_string());
            set("GPOOL_RESTART_COUNT", doc.restarts.to_string());
            set("GPOOL_USER", doc.user.clone());
            if world > 1 {
                set("WORLD_SIZE", world.to_string());
                set("RANK", rank.to_string());
                set("LOCAL_RANK", local_rank.to_string());
                set("LOCAL_WORLD_SIZE", placement.iter().filter(|p| p.node == r.node).count().to_string());
                set("NODE_RANK", node_rank.get(&r.node).copied().unwrap_or(0).to_string());
                set("NNODES", node_rank.len().to_string());
                set("MASTER_ADDR", master_addr.clone());
                if let Some(p) = master_port {
                    set("MASTER_PORT", p.to_string());
                }
            }
            replicas.push(ReplicaDoc {
                rank: rank as u32,
                node: names[rank].clone(),
                gpus: gpu_idx,
                mig: mig_uuids,
                cpus_milli: r.cpus_milli,
                memory_mb: r.memory_mb,
                cuda_visible_devices: visible,
                exit: None,
                lost: false,
            });
            let launch = Launch {
                argv: doc.spec.command.argv(),
                env: env.into_iter().collect(),
                cwd: cwd.clone(),
                stdout: PathBuf::new(),
                stderr: PathBuf::new(),
                lease: None,
            };
            let key = ReplicaKey { job: id, attempt, rank: rank as u32 };
            self.effects.push(Effect::Start(r.node, key, launch, device_uuids));
        }
        let spread_port = master_port
            .filter(|_| master.is_some_and(|m| !self.links.get(&m).is_some_and(NodeLink::is_local) || spread));
        doc.run =
            Some(RunDoc { attempt, started_ms: now, replicas, stop: None, kill_at_ms: None, master_port: spread_port });
        if let Some(limit) = self.snap.job(JobId(id)).and_then(|j| j.spec.time_limit) {
            self.timers.insert((now + limit.as_millis() as i64, Timer::TimeLimit { job: id, attempt }));
        }
        self.touched.insert(id);
        let devices = doc
            .run
            .as_ref()
            .map(|r| {
                r.replicas
                    .iter()
                    .map(|x| format!("{}:{}", x.node, x.cuda_visible_devices))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        self.event(
            now,
            Some(id),
            "started",
            format!("job {id} attempt {attempt} started on {devices} (node:CUDA_VISIBLE_DEVICES)"),
        );
    }

    // ----- the end of a turn -----

    /// Carries out one decision (after it was committed): the local agent
    /// acts at once, a remote one gets a command.
    fn act(&mut self, e: Effect) {
        let node = match &e {
            Effect::Start(n, ..) | Effect::Signal(n, ..) => *n,
        };
        let Some(link) = self.links.get(&node) else { return };
        match (&link.link, e) {
            (Link::Local(agent), Effect::Start(_, key, launch, devices)) => {
                if let Err(err) = agent.start(key, launch, devices) {
                    let exit = ExitRecord {
                        code: Some(127),
                        signal: None,
                        started_ms: now_ms(),
                        ended_ms: now_ms(),
                        error: Some(format!("the agent could not start the shim: {err}")),
                    };
                    let _ = self.own.send(Event::Agent(AgentReport::Exited { key, exit }));
                }
            }
            (Link::Local(agent), Effect::Signal(_, key, sig)) => agent.signal(key, sig),
            (Link::Remote(_), Effect::Start(_, key, launch, devices)) => {
                let cwd = (!launch.cwd.as_os_str().is_empty()).then(|| launch.cwd.display().to_string());
                let cmd = api::agent::Command::Start {
                    replica: key.into(),
                    argv: launch.argv,
                    env: launch.env,
                    cwd,
                    devices,
                };
                self.push_command(node, cmd);
                self.send_replies();
            }
            (Link::Remote(_), Effect::Signal(_, key, sig)) => {
                self.push_command(node, api::agent::Command::Signal { replica: key.into(), signal: sig.as_raw() });
                self.send_replies();
            }
        }
    }

    /// Answers what is ready to be answered (after the commit of this turn).
    fn send_replies(&mut self) {
        for r in std::mem::take(&mut self.replies) {
            r();
        }
    }

    fn flush(&mut self) {
        let touched = std::mem::take(&mut self.touched);
        for id in touched {
            if let Some(d) = self.jobs.get(&id) {
                self.writes.push(put_job(d));
            }
        }
        let writes = std::mem::take(&mut self.writes);
        if let Err(e) = self.store.commit(&writes) {
            // State in memory is ahead of the store: the only safe move is to
            // stop, so that a restart rebuilds from what is durable. Nothing
            // of this batch was acknowledged.
            eprintln!("gpool: cannot write to the store ({e}); stopping so that a restart recovers from durable state");
            std::process::exit(2);
        }
        self.send_replies();
        for e in std::mem::take(&mut self.effects) {
            self.act(e);
        }
        for e in std::mem::take(&mut self.published) {
            let _ = self.events.send(e);
        }
        if let Some(w) = &self.cfg.webhook {
            w.send(std::mem::take(&mut self.notices));
        } else {
            self.notices.clear();
        }
    }
}

/// Adds up the usage of two runs (means weighted by GPU-hours).
fn merge_usage(a: Option<api::UsageSummary>, b: Option<api::UsageSummary>) -> Option<api::UsageSummary> {
    let (a, b) = match (a, b) {
        (None, x) | (x, None) => return x,
        (Some(a), Some(b)) => (a, b),
    };
    let w = |x: &api::UsageSummary| x.gpu_hours.max(1e-12);
    let mean = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some((x * w(&a) + y * w(&b)) / (w(&a) + w(&b))),
        (x, None) | (None, x) => x,
    };
    Some(api::UsageSummary {
        gpu_hours: a.gpu_hours + b.gpu_hours,
        idle_gpu_hours: a.idle_gpu_hours + b.idle_gpu_hours,
        mean_gpu_util: mean(a.mean_gpu_util, b.mean_gpu_util),
        peak_memory_mb: a.peak_memory_mb.max(b.peak_memory_mb),
        mean_cpu_cores: mean(a.mean_cpu_cores, b.mean_cpu_cores),
        cost_usd: None,
    })
}

fn put_job(d: &JobDoc) -> Write {
    Write::PutJob(gpool_store::JobRow {
        id: d.id,
        user: d.user.clone(),
        team: d.team.clone(),
        queue: d.queue.clone(),
        state: state_str(d.state).into(),
        submitted_ms: d.submitted_ms,
        doc: serde_json::to_string(d).unwrap_or_default(),
    })
}

fn default_name(spec: &api::JobSpec) -> String {
    let argv = spec.command.argv();
    let prog = match spec.command {
        api::Command::Shell(ref s) => s.split_whitespace().next().unwrap_or("job").to_string(),
        api::Command::Argv(_) => argv.first().cloned().unwrap_or_else(|| "job".into()),
    };
    std::path::Path::new(&prog).file_name().map_or(prog.clone(), |f| f.to_string_lossy().into_owned())
}

/// A TCP port free right now, for `MASTER_PORT`.
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0)).ok().and_then(|l| l.local_addr().ok()).map(|a| a.port())
}
