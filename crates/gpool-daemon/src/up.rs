//! `gpool up`: one control plane and one local node in one process, wired
//! from the two wings: the node's agent is the controller's `LocalNode`,
//! and its reports and samples arrive on the controller's event channel.

use std::sync::Arc;

use anyhow::{Context, bail};
use gpool_store::Sqlite;
use rustix::fs::{FlockOperation, flock};
use rustix::process::Signal;

use crate::node::agent::{Agent, ReportSink};
use crate::node::host::{NodeConfig, describe, discover, host_name};
use crate::node::sampler::{self, Replicas, Sampler};
use crate::plane::controller::{Controller, Event, LocalNode, SystemClock};
use crate::plane::server::{Ended, PlaneConfig, Process, Ready, controller_config, serve};
use crate::protocol::{AgentReport, Found, Launch, ReplicaKey};
use crate::wiring::data_dir;

/// Settings of `gpool up`.
#[derive(Clone, Debug)]
pub struct UpConfig {
    pub plane: PlaneConfig,
    pub node: NodeConfig,
}

/// The node agent is the controller's local node; interactive sessions
/// join the plane's relay in this process.
struct Local {
    agent: Agent,
    terminals: Arc<crate::plane::terminals::Relay>,
}

impl std::ops::Deref for Local {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.agent
    }
}

impl LocalNode for Local {
    fn start(&self, key: ReplicaKey, launch: Launch, devices: Vec<String>) -> std::io::Result<()> {
        Agent::start(self, key, launch, devices)
    }

    fn signal(&self, key: ReplicaKey, signal: Signal) {
        Agent::signal(self, key, signal);
    }

    fn reconcile(&self, key: ReplicaKey, devices: Vec<String>) -> Found {
        Agent::reconcile(self, key, devices)
    }

    fn mig_layout(&self, gpu: u32, layout: Vec<gpool_gpu::MigSlot>) {
        Agent::mig_layout(self, gpu, layout);
    }

    fn prefetch(&self, image: String, registry_auth: Option<crate::protocol::Secret>) {
        Agent::prefetch(self, image, registry_auth);
    }

    fn profile(&self, key: ReplicaKey, order: crate::protocol::ProfileOrder) {
        Agent::profile(self, key, order);
    }

    fn inject_fault(&self, gpu: u32, fault: Option<gpool_gpu::InjectedFault>) {
        Agent::inject_fault(self, gpu, fault);
    }

    fn check_health(&self, gpu: u32, uuid: String) {
        Agent::check_health(self, gpu, uuid);
    }

    fn attach(&self, key: ReplicaKey, session: String) {
        let (dir, terminals) = (self.run_dir(key), Arc::clone(&self.terminals));
        // The shim may still be starting: wait for it off the controller's thread.
        let spawned = std::thread::Builder::new().name("tty-link".into()).spawn(move || {
            let joined =
                crate::node::terminal_link::connect_shim(&dir).and_then(|shim| terminals.join_local(&session, shim));
            if let Err(e) = joined {
                terminals.say_and_close(&session, &crate::node::terminal_link::notice(&e.to_string()));
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a thread for an interactive session: {e}");
        }
    }
}

/// Runs `gpool up` until SIGINT/SIGTERM. Jobs keep running when the daemon stops;
/// the next `gpool up` on the same data directory re-adopts them.
pub fn run(cfg: UpConfig) -> anyhow::Result<()> {
    let plane = &cfg.plane;
    data_dir(&plane.data_dir)?;
    crate::wiring::raise_open_file_limit();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(plane.data_dir.join("daemon.lock"))?;
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        bail!("another gpool daemon is using {}; stop it first or pass another --data-dir", plane.data_dir.display());
    }
    let mode = crate::node::account::prepare(cfg.node.run_as, &plane.data_dir)?;
    tracing::info!("{mode}");
    let cgroups = crate::node::host::cgroups(&cfg.node);
    let container = crate::node::host::container_runtime(&cfg.node)?;
    let mut config = controller_config(plane)?;
    if cfg.node.run_as == crate::node::account::RunAs::Daemon {
        // Every job runs as this account: tokens for others would pretend to separate them.
        config.single_user = crate::wiring::this_account();
    }
    let node_name = cfg.node.node_name.clone().unwrap_or_else(host_name);
    if let Some(watts) = cfg.node.power_budget_w {
        let scope = gpool_core::power::PowerScope::Node(node_name.as_str().into());
        config.power_budgets.push(gpool_core::power::PowerBudget { scope, watts });
    }
    let replicas: Replicas = Arc::default();
    let (gpus, backend) = discover(&cfg.node, &node_name, &replicas)?;
    let source = backend.as_ref().map_or("none", |b| b.name()).to_string();
    let info = describe(&node_name, &gpus, backend.as_deref(), &cfg.node, "127.0.0.1");
    let store = Sqlite::open(&plane.data_dir.join("state.db"), plane.fsync)?.with_reserve(plane.state_reserve);
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let exe = std::env::current_exe().context("cannot find the gpool executable for job shims")?;
    let sink_tx = tx.clone();
    let sink: ReportSink = Arc::new(move |r| {
        let _ = sink_tx.send(Event::Agent(r));
    });
    // The sampler stops when this sender and the agent's clone are dropped, at the end of `run`.
    let sampler_ctl = match backend {
        Some(b) => {
            let t = tx.clone();
            let sampler = Sampler::new(node_name.clone(), b, cfg.node.sample_interval, replicas.clone())
                .with_disk(plane.data_dir.clone(), cfg.node.disk_reserve);
            Some(sampler::spawn(sampler, move |r| t.send(Event::Agent(AgentReport::Telemetry(r))).is_ok())?)
        }
        None => None,
    };
    let agent_cfg = crate::node::host::agent_config(
        &cfg.node,
        &plane.data_dir,
        exe,
        &node_name,
        None,
        cgroups.clone(),
        &gpus,
        sampler_ctl.clone(),
        container.clone(),
    );
    let terminals: Arc<crate::plane::terminals::Relay> = Arc::default();
    let agent = Local { agent: Agent::new(agent_cfg, sink, replicas.clone()), terminals: Arc::clone(&terminals) };
    let (controller, first) = Controller::new(config, Box::new(store), Some(info), Box::new(SystemClock))?;
    let n = gpus.len();
    let dir = plane.data_dir.display().to_string();
    let ready = Ready { controller, first, local: Some(Box::new(agent)), tx, rx, terminals };
    let process = Process::new()?;
    let banner = move |url: &str| format!("gpool is up at {url} ({n} GPUs: {source}; node {node_name}; data in {dir})");
    match serve(&process, plane, ready, banner, None)? {
        Ended::Stopped => Ok(()),
        // SQLite on this machine: what failed (a full disk) needs a person; a
        // restart (systemd) recovers from what is durable.
        Ended::StoreFailed(failed) | Ended::Relead(failed, _) => Err(failed.into()),
    }
}
