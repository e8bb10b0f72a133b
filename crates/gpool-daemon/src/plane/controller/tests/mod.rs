//! Unit tests of the controller: no threads, sockets or sleeping. A
//! [`Harness`] drives a controller with events on a [`ManualClock`],
//! carries its turns out with the real shell over a fake local agent, and
//! lets the tests assert on the effects (orders, answers, events, writes).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpool_api as api;
use gpool_core::Policy;
use gpool_store::{Sqlite, Store};
use rustix::process::Signal;
use tokio::sync::broadcast;

use super::{
    ApiError, Call, Config, Controller, Event, LocalNode, ManualClock, Order, Reply, Shell, StoreFailed, Turn,
};
use crate::plane::telemetry::TelemetryConfig;
use crate::protocol::{AgentReport, ExitRecord, Found, Launch, NodeInfo, ReplicaKey};
use gpool_core::pricing::Prices;

mod calls;
mod costs;
mod deadlines;
mod elastic;
mod elastic_jobs;
mod faults;
mod gittins;
mod health;
mod holds;
mod idle;
mod lifecycle;
mod mig_layouts;
mod node_trust;
mod nodes;
mod outages;
mod overview;
mod pipelines;
mod power;
mod preemption;
mod profiles;
mod registries;
mod reservations;
mod restore;
mod schedules;
mod services;
mod spot;
mod store;
mod terminals;
mod windows;

/// The admin token every harness has.
const ADMIN: &str = "admin-secret";
/// When every test starts (ms since the epoch).
const T0: i64 = 1_700_000_000_000;

/// The fake agent of the local node: records orders, answers reconciles as told.
#[derive(Clone, Default)]
struct FakeAgent {
    orders: Arc<Mutex<Vec<Order>>>,
    /// What a reconcile finds (default: the shim is alive).
    lost: Arc<Mutex<bool>>,
    /// Starts fail (the shim cannot be spawned).
    broken: Arc<Mutex<bool>>,
}

impl LocalNode for FakeAgent {
    fn start(&self, key: ReplicaKey, launch: Launch, devices: Vec<String>) -> std::io::Result<()> {
        self.orders.lock().expect("lock").push(Order::Start { key, launch: Box::new(launch), devices });
        if *self.broken.lock().expect("lock") {
            return Err(std::io::Error::other("fork failed"));
        }
        Ok(())
    }

    fn signal(&self, key: ReplicaKey, signal: Signal) {
        self.orders.lock().expect("lock").push(Order::Signal { key, signal });
    }

    fn reconcile(&self, key: ReplicaKey, devices: Vec<String>) -> Found {
        let lost = *self.lock_lost();
        self.orders.lock().expect("lock").push(Order::Reconcile { key, devices });
        if lost { Found::Lost } else { Found::Adopted }
    }

    fn mig_layout(&self, gpu: u32, layout: Vec<gpool_gpu::MigSlot>) {
        self.orders.lock().expect("lock").push(Order::MigLayout { gpu, layout });
    }

    fn prefetch(&self, image: String, registry_auth: Option<crate::protocol::Secret>) {
        self.orders.lock().expect("lock").push(Order::Prefetch { image, registry_auth });
    }

    fn profile(&self, key: ReplicaKey, order: crate::protocol::ProfileOrder) {
        self.orders.lock().expect("lock").push(Order::Profile { key, order });
    }

    fn inject_fault(&self, gpu: u32, fault: Option<gpool_gpu::InjectedFault>) {
        self.orders.lock().expect("lock").push(Order::InjectFault { gpu, fault });
    }

    fn check_health(&self, gpu: u32, uuid: String) {
        self.orders.lock().expect("lock").push(Order::CheckHealth { gpu, uuid });
    }

    fn attach(&self, key: ReplicaKey, session: String) {
        self.orders.lock().expect("lock").push(Order::Attach { key, session });
    }
}

impl FakeAgent {
    fn lock_lost(&self) -> std::sync::MutexGuard<'_, bool> {
        self.lost.lock().expect("lock")
    }
}

/// How a harness is built.
struct Setup {
    policy: Policy,
    single_user: Option<String>,
    identities: crate::plane::identity::Identities,
    queues: Vec<gpool_core::QueueConfig>,
    power_budgets: Vec<gpool_core::power::PowerBudget>,
    local_gpus: Option<u32>,
    store: Option<Box<dyn Store>>,
    agent: FakeAgent,
    clock: ManualClock,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            policy: Policy::gpool_default(),
            single_user: None,
            identities: Default::default(),
            queues: Vec::new(),
            power_budgets: Vec::new(),
            local_gpus: Some(8),
            store: None,
            agent: FakeAgent::default(),
            clock: ManualClock::new(T0),
        }
    }

    fn policy(mut self, name: &str) -> Setup {
        self.policy = Policy::by_name(name).expect("a known policy");
        self
    }

    /// Sets a knob of the policy, as `--policy-set` does.
    fn policy_set(mut self, knob: &str) -> Setup {
        self.policy.set(knob).expect("a known knob");
        self
    }

    /// Quota queues by these names (4 GPUs guaranteed each).
    fn queues(mut self, names: &[&str]) -> Setup {
        self.queues = names
            .iter()
            .map(|n| gpool_core::QueueConfig {
                name: (*n).into(),
                cohort: None,
                guarantee: 4_000,
                max: None,
                kind_max: Default::default(),
                spot: None,
                idle_stop: false,
                min_runtime: std::time::Duration::ZERO,
                windows: None,
            })
            .collect();
        self
    }

    /// Power budgets from the configuration.
    fn power_budgets(mut self, budgets: Vec<gpool_core::power::PowerBudget>) -> Setup {
        self.power_budgets = budgets;
        self
    }

    /// A queue with windows, besides those of `queues`.
    fn windowed_queue(mut self, name: &str, windows: gpool_core::windows::QueueWindows) -> Setup {
        let mut q = gpool_core::QueueConfig::new(name);
        q.windows = Some(std::sync::Arc::new(windows));
        self.queues.push(q);
        self
    }

    /// A control plane with no node of its own (`gpool serve`).
    fn no_local_node(mut self) -> Setup {
        self.local_gpus = None;
        self
    }

    fn local_gpus(mut self, n: u32) -> Setup {
        self.local_gpus = Some(n);
        self
    }

    fn store(mut self, s: Box<dyn Store>) -> Setup {
        self.store = Some(s);
        self
    }

    fn agent(mut self, a: FakeAgent) -> Setup {
        self.agent = a;
        self
    }

    fn clock(mut self, c: ManualClock) -> Setup {
        self.clock = c;
        self
    }

    fn build(self) -> Harness {
        let store = self.store.unwrap_or_else(|| Box::new(Sqlite::memory().expect("in-memory store")));
        let local = self.local_gpus.map(|n| node_info("n1", n));
        let cfg = Config {
            queues: self.queues,
            power_budgets: self.power_budgets,
            single_user: self.single_user,
            identities: self.identities,
            elastic: None,
            budgets: Vec::new(),
            ..config(self.policy)
        };
        let (mut ctl, first) = Controller::new(cfg, store, local, Box::new(self.clock.clone())).expect("a controller");
        ctl.ensure_admin_token(ADMIN, "root").expect("admin token");
        let (events, rx) = broadcast::channel(65_536);
        let shell = Shell {
            local: Some(Box::new(self.agent.clone())),
            events,
            webhook: None,
            renew_every: None,
            provision: None,
            routes: None,
        };
        let mut h = Harness { ctl, shell, clock: self.clock, agent: self.agent, published: rx, fed: Vec::new() };
        h.carry_out(first).expect("the first turn commits");
        h
    }
}

fn config(policy: Policy) -> Config {
    Config {
        data_dir: PathBuf::from("/nonexistent/gpool-controller-tests"),
        policy,
        queues: Vec::new(),
        power_budgets: Vec::new(),
        retry_backoff: Duration::from_secs(10),
        health_checks: Default::default(),
        telemetry: TelemetryConfig::default(),
        prices: Prices::built_in(),
        lease: Duration::from_secs(4),
        master_ports: 29_500..29_510,
        local_port: || Some(29_400),
        single_user: None,
        daemon_account: None,
        identities: Default::default(),
        elastic: None,
        budgets: Vec::new(),
    }
}

fn node_info(name: &str, gpus: u32) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        addr: "127.0.0.1".into(),
        source: "simulated".into(),
        cpus: 96.0,
        memory_mb: 1_024_000,
        gpu_sharing: "time-slicing".into(),
        container_runtime: None,
        mig_managed: Vec::new(),
        gpus: (0..gpus)
            .map(|i| api::agent::GpuWire {
                kind: "nvidia-gpu".into(),
                index: i,
                uuid: format!("GPU-{name}-{i}"),
                name: "NVIDIA H100 80GB HBM3".into(),
                model: "H100-80GB".into(),
                memory_mb: 81_559,
                pci_bus_id: None,
                nvlink_group: None,
                numa_node: None,
                mig: None,
            })
            .collect(),
        ..NodeInfo::default()
    }
}

/// A controller under test, with its shell and fake agent.
struct Harness {
    ctl: Controller,
    shell: Shell,
    clock: ManualClock,
    agent: FakeAgent,
    published: broadcast::Receiver<api::EventView>,
    /// Reports the shell fed back, handled at the next turn.
    fed: Vec<Event>,
}

impl Harness {
    fn carry_out(&mut self, turn: Turn) -> Result<(), StoreFailed> {
        let fed = self.shell.carry_out(&mut self.ctl, turn)?;
        self.fed.extend(fed);
        Ok(())
    }

    /// One turn with these events (and whatever the shell fed back).
    fn step(&mut self, events: Vec<Event>) {
        self.try_step(events).expect("the turn commits");
    }

    fn try_step(&mut self, events: Vec<Event>) -> Result<(), StoreFailed> {
        let mut batch = std::mem::take(&mut self.fed);
        batch.extend(events);
        let fed = self.shell.step(&mut self.ctl, batch)?;
        self.fed.extend(fed);
        Ok(())
    }

    /// Moves the clock and runs a turn, as the shell does when a timer is due.
    fn advance(&mut self, by: Duration) {
        self.clock.advance(by);
        self.step(Vec::new());
    }

    /// Makes a call and returns its answer, given in the same turn.
    fn call<T>(
        &mut self,
        who: impl Into<crate::plane::auth::Credential>,
        make: impl FnOnce(Reply<T>) -> Call,
    ) -> Result<T, ApiError> {
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        self.step(vec![Event::Api { who: who.into(), call: make(tx) }]);
        rx.try_recv().expect("answered in the turn that handled it")
    }

    /// Submits one job from its YAML spec as the admin; its id.
    fn submit(&mut self, yaml: &str) -> u64 {
        let spec: api::JobSpec = gpool_api::yaml::from_str(yaml).expect("a valid spec");
        let ids = self.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect("accepted").ids;
        ids[0]
    }

    fn job(&mut self, id: u64) -> api::JobView {
        self.call(ADMIN, |reply| Call::Get { id, reply }).expect("the job")
    }

    fn state(&mut self, id: u64) -> api::JobState {
        self.job(id).state
    }

    /// The local orders carried out since the last call.
    fn orders(&mut self) -> Vec<Order> {
        std::mem::take(&mut *self.agent.orders.lock().expect("lock"))
    }

    /// The replicas started since the last call of `orders`, with their environments.
    fn starts(&mut self) -> Vec<(ReplicaKey, Vec<(String, String)>)> {
        self.orders()
            .into_iter()
            .filter_map(|o| match o {
                Order::Start { key, launch, .. } => Some((key, launch.env)),
                _ => None,
            })
            .collect()
    }

    /// The kinds of the events published since the last call.
    fn event_kinds(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(e) = self.published.try_recv() {
            out.push(e.kind);
        }
        out
    }

    /// The messages of the events of this kind published since the last look.
    fn event_messages(&mut self, kind: &str) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(e) = self.published.try_recv() {
            if e.kind == kind {
                out.push(e.message);
            }
        }
        out
    }

    fn exit(&mut self, key: ReplicaKey, code: Option<i32>, signal: Option<i32>) {
        let now = self.clock.now_ms();
        let exit = ExitRecord { code, signal, started_ms: now, ended_ms: now, error: None, fenced: false };
        self.step(vec![Event::Agent(AgentReport::Exited { key, exit })]);
    }
}

/// What the agent of a remote node with `gpus` GPUs says when it registers.
fn registration(node: &str, gpus: u32, running: Vec<api::agent::ReplicaId>) -> api::agent::Register {
    let info = node_info(node, gpus);
    api::agent::Register {
        node: node.into(),
        addr: format!("{node}.cluster.test"),
        cpus: info.cpus,
        memory_mb: info.memory_mb,
        gpu_sharing: info.gpu_sharing.clone(),
        container_runtime: info.container_runtime.clone(),
        mig_managed: info.mig_managed.clone(),
        labels: Default::default(),
        pool: None,
        source: info.source,
        degraded: Vec::new(),
        gpus: info.gpus,
        running,
        version: "test".into(),
        power_budget_w: None,
        peer_addr: None,
        note: None,
    }
}

fn key(job: u64, attempt: u32, rank: u32) -> ReplicaKey {
    ReplicaKey { job, attempt, rank }
}

fn env<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn signals(orders: &[Order]) -> Vec<(ReplicaKey, Signal)> {
    orders
        .iter()
        .filter_map(|o| match o {
            Order::Signal { key, signal } => Some((*key, *signal)),
            _ => None,
        })
        .collect()
}

use super::Clock as _;
