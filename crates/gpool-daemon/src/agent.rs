//! `gpool agent`: a node of a cluster. It runs jobs exactly as the agent
//! inside `gpool up` does (shims, logs, telemetry), and speaks the agent
//! protocol (`gpool_api::agent`, docs/cluster.md) with the control plane:
//!
//! - a **session** starts with a registration at the first control plane of
//!   `--server` that answers (standbys do not listen) and lasts until a
//!   request is refused with 409 (the control plane restarted, or declared
//!   the node down) or the control plane cannot be reached;
//! - the **poller** thread long-polls for commands and carries them out
//!   (starts are idempotent; commands are acknowledged with the next poll);
//! - the **reporter** (the session's own thread) sends exits and telemetry as
//!   they happen and a heartbeat when there is nothing to say, keeping
//!   unacknowledged events for the next session; every answered request
//!   renews the lease, which it writes for the shims (see `lease.rs`);
//! - the **shipper** thread sends the output of replicas to the control
//!   plane as it is written (inotify), from the offset the control plane has.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpool_api::agent as wire;
use rustix::fs::{FlockOperation, flock};

use crate::node::agent::{Agent, ReportSink};
use crate::node::conn::{Conn, Current, End, request_timeout};
use crate::node::host::{NodeConfig, describe, discover, host_name};
use crate::node::lease;
use crate::node::log_shipper::spawn_shipper;
use crate::node::outage::Contact;
use crate::node::sampler::{self, Replicas, Sampler};
use crate::protocol::AgentReport;
use crate::wiring::data_dir;

/// Settings of `gpool agent`.
#[derive(Clone, Debug)]
pub struct AgentProcessConfig {
    /// Control planes to try, in order (a leader and its standbys).
    pub servers: Vec<String>,
    pub token: String,
    pub data_dir: PathBuf,
    /// Where other nodes reach this one (default: the address this host uses
    /// to reach the first control plane).
    pub advertise: Option<String>,
    pub node: NodeConfig,
    /// Which control plane it trusts over HTTPS (`trust.rs`).
    pub trust: crate::node::trust::Trust,
    /// Plain HTTP to a control plane beyond loopback was asked for by name (`--insecure-http`).
    pub insecure_http: bool,
    /// Where other agents ask this one whether it hears from a control
    /// plane (`peers.rs`); default: the advertised address, any free port.
    pub peer_listen: Option<std::net::SocketAddr>,
    /// The address peers are told instead of the one listened on (`--peer-advertise`).
    pub peer_advertise: Option<String>,
}

/// The IP address this host uses to reach `server` (no packet is sent).
fn local_addr_towards(server: &str) -> Option<String> {
    let host = server.split("://").nth(1)?.split('/').next()?;
    let target = if host.contains(':') { host.to_string() } else { format!("{host}:80") };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&target).ok()?.next()?;
    let s = std::net::UdpSocket::bind(if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
    s.connect(addr).ok()?;
    Some(s.local_addr().ok()?.ip().to_string())
}

/// Runs the agent until SIGINT/SIGTERM (jobs keep running; a restarted agent re-adopts them).
pub fn run(cfg: AgentProcessConfig) -> anyhow::Result<()> {
    if cfg.servers.is_empty() {
        bail!("--server: give the control plane's URL (several, comma-separated, for a leader and standbys)");
    }
    data_dir(&cfg.data_dir)?;
    crate::wiring::raise_open_file_limit();
    let lock =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(cfg.data_dir.join("agent.lock"))?;
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        bail!("another gpool agent is using {}; stop it first or pass another --data-dir", cfg.data_dir.display());
    }
    if let Some(said) = crate::node::trust::check_schemes(&cfg.trust, &cfg.servers, cfg.insecure_http)? {
        tracing::warn!("{said}");
    }
    let tls = crate::node::trust::resolve(&cfg.trust, &cfg.servers)?;
    let mode = crate::node::account::prepare(cfg.node.run_as, &cfg.data_dir)?;
    tracing::info!("{mode}");
    let cgroups = crate::node::host::cgroups(&cfg.node);
    let container = crate::node::host::container_runtime(&cfg.node)?;
    let name = cfg.node.node_name.clone().unwrap_or_else(host_name);
    let replicas: Replicas = Arc::default();
    let (gpus, backend) = discover(&cfg.node, &name, &replicas)?;
    let source = backend.as_ref().map_or("none", |b| b.name()).to_string();
    let addr =
        cfg.advertise.clone().or_else(|| local_addr_towards(&cfg.servers[0])).unwrap_or_else(|| "127.0.0.1".into());
    let doc = describe(&name, &gpus, backend.as_deref(), &cfg.node, &addr);
    let lease_path = crate::node::outage::lease_path(&cfg.data_dir);
    let contact = Contact::new(lease_path.clone(), name.clone());
    contact.remember_in(cfg.data_dir.join("roster.json"));
    let peer_addr = {
        let listen = match cfg.peer_listen {
            Some(l) => l,
            // A host name as the advertised address: every interface, that name told to peers.
            None => std::net::SocketAddr::new(
                addr.parse().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
                0,
            ),
        };
        let bound = crate::node::peers::listen(listen, contact.clone())?;
        cfg.peer_advertise.clone().unwrap_or_else(|| crate::node::peers::advertised(bound, &addr))
    };
    {
        let me = name.clone();
        let asking = contact.clone();
        crate::node::outage::spawn_keeper(contact.clone(), move |m, key| {
            let timeout =
                Duration::from_millis(asking.lease_ms() / 4).clamp(Duration::from_millis(500), Duration::from_secs(2));
            crate::node::peers::ask(m, &me, key, timeout)
        })?;
    }
    let (report_tx, report_rx) = std::sync::mpsc::channel::<AgentReport>();
    let sink_tx = report_tx.clone();
    let sink: ReportSink = Arc::new(move |r| {
        let _ = sink_tx.send(r);
    });
    let exe = std::env::current_exe().context("cannot find the gpool executable for job shims")?;
    // The sampler thread owns the GPU backend; it stops when the agent and this sender are gone.
    let sampler_ctl = match backend {
        Some(b) => {
            let t = report_tx.clone();
            let s = Sampler::new(name.clone(), b, cfg.node.sample_interval, replicas.clone())
                .with_disk(cfg.data_dir.clone(), cfg.node.disk_reserve);
            Some(sampler::spawn(s, move |r| t.send(AgentReport::Telemetry(r)).is_ok())?)
        }
        None => None,
    };
    let agent = Agent::new(
        crate::node::host::agent_config(
            &cfg.node,
            &cfg.data_dir,
            exe,
            &name,
            Some(lease_path.clone()),
            cgroups.clone(),
            &gpus,
            sampler_ctl.clone(),
            container.clone(),
        ),
        sink,
        replicas.clone(),
    );
    let agent = Arc::new(agent);
    let current: Current = Arc::default();
    spawn_shipper(cfg.data_dir.clone(), current.clone(), name.clone())?;
    if let Some(src) = cfg.node.spot_notice.clone() {
        let (current, node) = (current.clone(), name.clone());
        crate::node::spot_watch::spawn(src, move |left| {
            let conn = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let Some((_, conn)) = conn else { return false };
            let body = serde_json::json!({ "seconds": left.as_secs() });
            match conn.post::<_, serde_json::Value>(&format!("/api/v1/nodes/{node}/notice"), &body) {
                Ok(_) => true,
                Err(End::Unreachable(e)) => {
                    tracing::warn!("cannot pass the spot notice on ({e}); trying again");
                    false
                }
                Err(End::Stale) => false,
            }
        })?;
    }
    println!(
        "gpool agent {name} ({} GPUs: {source}; address {addr}; data in {}) joining {}",
        gpus.len(),
        cfg.data_dir.display(),
        cfg.servers.join(", ")
    );
    // Ready once the node is set up: a control plane that cannot be reached
    // yet (a cluster powering on) must not fail the unit's start; whether it
    // is registered is the unit's status.
    crate::notify::ready(&format!("joining {}", cfg.servers.join(", ")));
    let mut pending: Vec<wire::Event> = Vec::new();
    let mut delay = Duration::from_millis(200);
    // The lease of the last session (the control plane's default before the first).
    let mut lease_ms: u64 = 10_000;
    // Where registration starts: after a session is lost, with the next server.
    let mut first = 0;
    loop {
        let running: Vec<wire::ReplicaId> = agent.live_replicas().into_iter().map(Into::into).collect();
        let reg = wire::Register {
            node: name.clone(),
            addr: addr.clone(),
            cpus: doc.cpus,
            memory_mb: doc.memory_mb,
            labels: doc.labels.clone(),
            pool: doc.pool.clone(),
            source: source.clone(),
            degraded: doc.degraded.clone(),
            gpus: doc.gpus.clone(),
            gpu_sharing: doc.gpu_sharing.clone(),
            container_runtime: doc.container_runtime.clone(),
            mig_managed: doc.mig_managed.clone(),
            running,
            version: env!("CARGO_PKG_VERSION").into(),
            power_budget_w: cfg.node.power_budget_w,
            peer_addr: Some(peer_addr.clone()),
            note: contact.take_held_note(),
        };
        let mut failures = Vec::new();
        let mut session = None;
        let n = cfg.servers.len();
        for s in (0..n).map(|i| &cfg.servers[(first + i) % n]) {
            let conn = Conn::new(s, &cfg.token, request_timeout(lease_ms), tls.clone());
            let sent = lease::monotonic_ms();
            match conn.post::<_, wire::Registered>("/agent/v1/register", &reg) {
                Ok(r) => {
                    session = Some((conn, r, sent));
                    break;
                }
                Err(End::Stale) => failures.push(format!("{s}: refused the registration")),
                Err(End::Unreachable(e)) => failures.push(e),
            }
        }
        let Some((conn, registered, sent)) = session else {
            tracing::warn!("cannot register ({}); retrying", failures.join("; "));
            std::thread::sleep(delay);
            // Retry often: a control plane back within the lease keeps every job running.
            delay = (delay * 2).min(Duration::from_secs(1));
            continue;
        };
        delay = Duration::from_millis(200);
        lease_ms = registered.lease_ms;
        contact.opened(sent, registered.lease_ms, registered.roster.clone());
        tracing::info!("registered with {} (epoch {})", conn.base, registered.epoch);
        crate::notify::status(&format!("registered with {} (epoch {})", conn.base, registered.epoch));
        *current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((registered.epoch, conn.clone()));
        let at = cfg.servers.iter().position(|s| s.trim_end_matches('/') == conn.base).unwrap_or(0);
        let session = Session { conn: &conn, node: &name, reg: &registered, contact: &contact, current: &current };
        let end = run_session(&session, &agent, &report_rx, &mut pending);
        contact.closed();
        *current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        match end {
            End::Stale => {
                first = at;
                tracing::info!("the control plane asks to register again");
            }
            End::Unreachable(e) => {
                first = (at + 1) % n_servers(&cfg.servers);
                tracing::warn!("lost the control plane ({e}); registering again");
            }
        }
    }
}

fn n_servers(servers: &[String]) -> usize {
    servers.len().max(1)
}

/// A session with a control plane: what its two threads share.
struct Session<'a> {
    conn: &'a Conn,
    node: &'a str,
    reg: &'a wire::Registered,
    contact: &'a Contact,
    current: &'a Current,
}

fn run_session(
    session: &Session<'_>,
    agent: &Arc<Agent>,
    reports: &Receiver<AgentReport>,
    pending: &mut Vec<wire::Event>,
) -> End {
    let Session { conn, node, reg, contact, current } = *session;
    let (end_tx, end_rx) = std::sync::mpsc::channel::<End>();
    let poller = {
        let conn = Conn::new(&conn.base, &conn.token, Duration::from_secs(60), conn.tls.clone());
        let (node, epoch, agent, end_tx) = (node.to_string(), reg.epoch, agent.clone(), end_tx.clone());
        let (after, current) = (reg.next_seq.saturating_sub(1), current.clone());
        std::thread::Builder::new().name("poller".into()).spawn(move || {
            let _ = end_tx.send(poll_commands(&conn, &node, epoch, after, &agent, &current));
        })
    };
    if let Err(e) = poller {
        return End::Unreachable(format!("cannot start the poller: {e}"));
    }
    let heartbeat = Duration::from_millis(reg.heartbeat_ms.max(50));
    let reporter = Conn::new(&conn.base, &conn.token, request_timeout(reg.lease_ms), conn.tls.clone());
    let mut telemetry: Option<wire::TelemetryWire> = None;
    let mut last_sent = Instant::now() - heartbeat;
    loop {
        if let Ok(end) = end_rx.try_recv() {
            return end;
        }
        // Wait for news, at most until the next heartbeat is due.
        let wait = heartbeat.saturating_sub(last_sent.elapsed());
        match reports.recv_timeout(wait) {
            Ok(r) => absorb(r, pending, &mut telemetry),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return End::Unreachable("the agent's report channel closed".into()),
        }
        while let Ok(r) = reports.try_recv() {
            absorb(r, pending, &mut telemetry);
        }
        let due = last_sent.elapsed() >= heartbeat;
        if pending.is_empty() && telemetry.is_none() && !due {
            continue;
        }
        let report = wire::Report {
            node: node.to_string(),
            epoch: reg.epoch,
            events: pending.clone(),
            telemetry: telemetry.take(),
            roster_version: contact.roster_version(),
        };
        let sent = lease::monotonic_ms();
        contact.sending();
        match reporter.post::<_, wire::Reported>("/agent/v1/report", &report) {
            Ok(answer) => {
                pending.clear();
                contact.answered(sent);
                if let Some(r) = answer.roster {
                    contact.set_roster(r);
                }
                last_sent = Instant::now();
            }
            Err(e) => return e,
        }
    }
}

/// Folds a report of the local agent into what the next request carries.
fn absorb(r: AgentReport, pending: &mut Vec<wire::Event>, telemetry: &mut Option<wire::TelemetryWire>) {
    match r {
        AgentReport::Running { key } => pending.push(wire::Event::Running { replica: key.into() }),
        AgentReport::Exited { key, exit } => {
            pending.push(wire::Event::Exited { replica: key.into(), exit: exit.into() })
        }
        AgentReport::Lost { key, why } => pending.push(wire::Event::Lost { replica: key.into(), why }),
        AgentReport::Profiled { key, profile, capture } => {
            pending.push(wire::Event::Profiled { replica: key.into(), profile, capture });
        }
        AgentReport::StartFailed { key, error } => {
            pending.push(wire::Event::StartFailed { replica: key.into(), error });
        }
        // Only the latest reading matters; what answers an order does too.
        AgentReport::Telemetry(t) => {
            let next = crate::protocol::telemetry_to_wire(&t);
            *telemetry = Some(match telemetry.take() {
                Some(old) => crate::protocol::merge_telemetry(old, next),
                None => next,
            });
        }
    }
}

/// Long-polls for commands and carries them out until the session ends.
///
/// A command is carried out only while its session is the current one, and
/// the session stays current until it has been: an answer that arrives after
/// the session ended (the control plane may have declared the node down and
/// run its jobs elsewhere) is dropped, and a replica started just before the
/// session ended is in the next registration's list of what runs here.
fn poll_commands(conn: &Conn, node: &str, epoch: u64, mut after: u64, agent: &Agent, current: &Current) -> End {
    loop {
        let r = conn
            .http
            .get(format!("{}/agent/v1/commands", conn.base))
            .query("node", node)
            .query("epoch", epoch.to_string())
            .query("after", after.to_string())
            .header("Authorization", conn.auth())
            .call();
        let mut r = match conn.check("/agent/v1/commands", r) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let cmds: wire::Commands = match r.body_mut().with_config().limit(64 * 1024 * 1024).read_json() {
            Ok(c) => c,
            Err(e) => return End::Unreachable(format!("bad commands: {e}")),
        };
        match crate::node::session_gate::carry_out(cmds.commands, after, epoch, current, |c| {
            crate::node::execute::execute(agent, conn, node, c)
        }) {
            Some(last) => after = last,
            None => return End::Stale,
        }
    }
}
