//! The shell around the controller: the thread that feeds it events and
//! carries out its turns. It holds what touches the outside world: the
//! event channel, the agent in this process (`gpool up`), the stream
//! subscribers and the alert webhook. It makes no decision: a failed store
//! write ends it with [`StoreFailed`], and the process decides what then.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use gpool_api as api;
use gpool_store::StoreError;
use rustix::process::Signal;
use tokio::sync::broadcast;

use super::{Controller, Event, Order, Turn};
use crate::plane::webhook::Webhook;
use crate::protocol::{AgentReport, Found, Launch, ReplicaKey};

/// The agent in this process, as the controller's shell drives it
/// (`gpool up` gives it its node agent; `gpool serve` has none).
pub trait LocalNode: Send {
    /// Starts a replica's shim; an error means no shim runs.
    fn start(&self, key: ReplicaKey, launch: Launch, devices: Vec<String>) -> std::io::Result<()>;
    fn signal(&self, key: ReplicaKey, signal: Signal);
    /// Watches a replica again after a restart (killing strays on `Lost`).
    fn reconcile(&self, key: ReplicaKey, devices: Vec<String>) -> Found;
    /// Lays a MIG GPU out; the outcome comes with the node's telemetry.
    fn mig_layout(&self, gpu: u32, layout: Vec<gpool_gpu::MigSlot>);
    /// Pulls an image in the background (`node/pull.rs`), for a job that will start here.
    fn prefetch(&self, image: String, registry_auth: Option<crate::protocol::Secret>);
    /// Profiles a replica in the background; the capture comes back as a report.
    fn profile(&self, key: ReplicaKey, order: crate::protocol::ProfileOrder);
    /// Shows (or clears) a fault on a simulated GPU.
    fn inject_fault(&self, gpu: u32, fault: Option<gpool_gpu::InjectedFault>);
    /// Checks a quarantined GPU; the verdict comes with the node's telemetry.
    fn check_health(&self, gpu: u32, uuid: String);
    /// Connects an interactive replica's terminal to a client's session (`plane/terminals.rs`).
    fn attach(&self, key: ReplicaKey, session: String);
}

/// Runs node pool provider programs (`plane/provision.rs`); each one's end
/// comes back as [`Event::Provisioned`].
pub trait Provision: Send {
    fn provision(&self, order: super::ProvisionOrder);
}

/// The store refused a turn's writes: memory is ahead of what is durable, so
/// the controller stopped; nothing of that turn was answered or carried out.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to the store ({0}); stopped so that a restart recovers from durable state")]
pub struct StoreFailed(#[source] pub StoreError);

/// What the controller's turns are carried out with.
pub struct Shell {
    pub local: Option<Box<dyn LocalNode>>,
    pub events: broadcast::Sender<api::EventView>,
    pub webhook: Option<Webhook>,
    /// How often to tell the store that this leader lives (`Store::renew`),
    /// when nothing else is committed; `None`: never (tests).
    pub renew_every: Option<Duration>,
    /// Provider programs of elastic pools; `None`: orders are dropped (no pools, or tests).
    pub provision: Option<Box<dyn Provision>>,
    /// The service proxy's routing table (`plane/proxy`); `None`: no proxy runs.
    pub routes: Option<tokio::sync::watch::Sender<std::sync::Arc<super::Routes>>>,
}

/// Most events taken into one turn: a burst is answered in slices, so the
/// first requests of a burst are not held back by the last.
const BATCH: usize = 4096;

impl Shell {
    /// Runs the controller until a `Shutdown` event, the channel's end, or a
    /// failed store write. `first` is the turn `Controller::new` returned.
    pub fn run(&mut self, ctl: &mut Controller, first: Turn, rx: &Receiver<Event>) -> Result<(), StoreFailed> {
        let mut fed = self.carry_out(ctl, first)?;
        let every = self.renew_every.map(|d| d.as_millis() as i64);
        let mut next_renew = every.map(|d| ctl.now_ms() + d);
        let mut watchdog = crate::notify::Watchdog::from_env();
        loop {
            if let Some(w) = &mut watchdog {
                w.alive();
            }
            let mut batch = std::mem::take(&mut fed);
            if batch.is_empty() {
                let watched = watchdog.as_ref().map(|w| ctl.now_ms() + w.due_in().as_millis() as i64);
                let wake = [ctl.next_timer(), next_renew, watched].into_iter().flatten().min();
                let first = match wake {
                    Some(t) => match rx.recv_timeout(Duration::from_millis((t - ctl.now_ms()).max(0) as u64)) {
                        Ok(e) => Some(e),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => return Ok(()),
                    },
                    None => match rx.recv() {
                        Ok(e) => Some(e),
                        Err(_) => return Ok(()),
                    },
                };
                batch.extend(first);
            }
            while batch.len() < BATCH
                && let Ok(e) = rx.try_recv()
            {
                batch.push(e);
            }
            fed = self.step(ctl, batch)?;
            if let (Some(every), Some(at)) = (every, next_renew)
                && ctl.now_ms() >= at
            {
                ctl.renew().map_err(StoreFailed)?;
                next_renew = Some(ctl.now_ms() + every);
            }
            if ctl.stopped() {
                return Ok(());
            }
        }
    }

    /// After a failed store write (`gpool serve` while its database is
    /// away): answers the calls that only read, from the state in memory as
    /// the last turn committed it, and refuses every other call with 503 and
    /// `why`, until a `Shutdown` event or the channel's end. Nothing is
    /// written and no timer fires: the next leader takes over from durable
    /// state.
    pub fn answer_reads(&mut self, ctl: &mut Controller, rx: &Receiver<Event>, why: &str) {
        while let Ok(e) = rx.recv() {
            match e {
                Event::Shutdown => return,
                Event::Api { ref call, .. } if call.only_reads() => {
                    let mut batch = vec![e];
                    for a in ctl.answer_views(&mut batch) {
                        a.send();
                    }
                    // A token's last use, the one thing a view writes, is not kept.
                    ctl.forget_writes();
                }
                Event::Api { call, .. } => call.refuse(super::calls::ApiError::new(503, why)).send(),
                _ => {}
            }
        }
    }

    /// Handles one batch: its views answered at once, from what the last turn
    /// committed (`Controller::answer_views`), then a turn for the rest,
    /// carried out. Returns what the local agent fed back.
    pub fn step(&mut self, ctl: &mut Controller, mut batch: Vec<Event>) -> Result<Vec<Event>, StoreFailed> {
        for a in ctl.answer_views(&mut batch) {
            a.send();
        }
        let turn = ctl.turn(batch);
        self.carry_out(ctl, turn)
    }

    /// Carries out a turn in the documented order; returns what the local
    /// agent answered that the controller must hear (a start that failed, a
    /// replica found lost).
    pub fn carry_out(&mut self, ctl: &mut Controller, turn: Turn) -> Result<Vec<Event>, StoreFailed> {
        ctl.commit(&turn.writes).map_err(StoreFailed)?;
        for a in turn.answers {
            a.send();
        }
        let mut fed = Vec::new();
        for order in turn.local {
            let Some(node) = &self.local else { continue };
            if let Some(report) = carry_out_order(node.as_ref(), order) {
                fed.push(Event::Agent(report));
            }
        }
        for order in turn.provision {
            if let Some(p) = &self.provision {
                p.provision(order);
            }
        }
        if let (Some(tx), Some(routes)) = (&self.routes, turn.routes) {
            // The proxy gone (shutting down) is no error.
            let _ = tx.send(routes);
        }
        for e in turn.published {
            // Each state change of a job or node, logged once, when committed.
            tracing::info!(target: "gpool::event", seq = e.seq, kind = %e.kind, job = e.job, user = e.user.as_deref(), "{}", e.message);
            // No subscriber is not an error.
            let _ = self.events.send(e);
        }
        if let Some(w) = &self.webhook {
            w.send(turn.notices);
        }
        Ok(fed)
    }
}

/// One order to the local agent, and the report it must produce, if any.
pub(super) fn carry_out_order(node: &dyn LocalNode, order: Order) -> Option<AgentReport> {
    match order {
        Order::Start { key, launch, devices } => match node.start(key, *launch, devices) {
            Ok(()) => None,
            Err(err) => Some(AgentReport::StartFailed { key, error: err.to_string() }),
        },
        Order::Signal { key, signal } => {
            node.signal(key, signal);
            None
        }
        Order::Reconcile { key, devices } => (node.reconcile(key, devices) == Found::Lost)
            .then(|| AgentReport::Lost { key, why: "its shim was gone when the daemon restarted".into() }),
        Order::Abandon { key } => {
            node.reconcile(key, Vec::new());
            None
        }
        Order::MigLayout { gpu, layout } => {
            node.mig_layout(gpu, layout);
            None
        }
        Order::Prefetch { image, registry_auth } => {
            node.prefetch(image, registry_auth);
            None
        }
        Order::Profile { key, order } => {
            node.profile(key, order);
            None
        }
        Order::Attach { key, session } => {
            node.attach(key, session);
            None
        }
        Order::InjectFault { gpu, fault } => {
            node.inject_fault(gpu, fault);
            None
        }
        Order::CheckHealth { gpu, uuid } => {
            node.check_health(gpu, uuid);
            None
        }
    }
}
