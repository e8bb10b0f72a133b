//! The controller: the state machine of the control plane. It owns all
//! mutable state (the scheduling core's snapshot, the job records, the
//! nodes) and handles a closed set of [`Event`]s. Nothing else mutates
//! state, so nothing needs a lock.
//!
//! It does no I/O of its own beyond reading the store: each [`turn`]
//! handles a batch of events at one reading of its [`Clock`], fires the
//! timers that are due, runs one scheduling pass if anything relevant
//! changed, and returns a [`Turn`]: the values the shell (`shell.rs`) must
//! carry out, in this order:
//! 1. commit the store writes in one transaction (if that fails, nothing
//!    else of the turn happens: the shell stops the controller);
//! 2. send the answers to API calls (so a 2xx means "committed");
//! 3. carry out the orders to the agent in this process (start, signal,
//!    reconcile); orders to remote agents are already in their outboxes;
//! 4. publish events to stream subscribers and alert notices to the webhook.
//!
//! The rooms, and what each may touch, are listed in ARCHITECTURE.md ("The controller's rooms").
//!
//! [`turn`]: Controller::turn

use std::collections::BTreeMap;

use gpool_core::{NodeId, Snapshot, Time};
use gpool_store::{Store, StoreError, Write};

use crate::plane::telemetry::Telemetry;
use crate::protocol::{AgentReport, NodeInfo};

/// The state as views read it (`views.rs`), borrowing the fields one by
/// one, so that the store may be borrowed beside it (`Controller::reading`).
macro_rules! reading {
    ($c:expr) => {
        $crate::plane::controller::views::Reading {
            now: $c.clock.now_ms(),
            snap: &$c.snap,
            jobs: &$c.jobs,
            links: &$c.links,
            telemetry: &$c.telemetry,
            faults: &$c.faults,
            costs: &$c.costs,
            pass: &$c.pass,
            pulling: &$c.pulling,
            services: &$c.services,
        }
    };
}

/// Admission (`admission.rs`), borrowing the fields it needs one by one.
macro_rules! admission {
    ($c:expr) => {
        $crate::plane::controller::admission::Admission {
            snap: &mut $c.snap,
            jobs: &mut $c.jobs,
            next_id: &mut $c.next_id,
            store: $c.store.as_mut(),
            out: &mut $c.out,
            queues: &$c.cfg.queues,
            data_dir: &$c.cfg.data_dir,
            state_disk: &$c.state_disk,
            costs: &$c.costs,
            budgets: &$c.budgets,
            history: &$c.history,
            fleet: &$c.fleet,
            reservations: &$c.reservations,
        }
    };
}

mod acts;
mod admission;
mod budgets;
mod calls;
mod clock;
mod conditions;
mod config;
mod costs;
mod docs;
mod elastic;
mod faults;
mod gpu_shares;
mod health;
mod history;
mod holds;
mod idle;
mod launch;
mod lifecycle;
mod links;
mod mig_layouts;
mod node_doc;
mod node_trust;
mod nodes;
mod observe;
mod orders;
mod outbox;
mod overview;
mod pass_record;
mod pipelines;
mod power;
mod prefetch;
mod profiles;
mod proxy_wire;
mod registries;
mod requests;
mod reservations;
mod restore;
mod roster;
mod schedules;
mod service_entry;
mod services;
mod shell;
mod spot;
mod terminals;
mod timers;
mod tokens;
mod turn;
mod views;

#[cfg(test)]
mod tests;

pub use crate::protocol::Order;
pub use budgets::{Budget, BudgetMode, BudgetScope};
pub use calls::{Access, Answer, ApiError, Call, EVENTS_PAGE, ListQuery, LogTarget, Open, Reply};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::Config;
pub use docs::{JobDoc, ReplicaDoc, RunDoc, Stop};
pub use elastic::{ElasticConfig, ProviderPrograms, ProvisionOp, ProvisionOrder};
pub use launch::free_local_port;
pub use node_doc::{NodeDoc, core_node};
pub use proxy_wire::{Backend, LATENCY_BOUNDS, ProxyReport, Route, Routes, ServiceLoad};
pub use services::SERVICE_LABEL;
pub use shell::{LocalNode, Provision, Shell, StoreFailed};
pub use turn::{Event, Turn};

use links::{Link, NodeLink};
use timers::Timer;

/// Where the store keeps when the current overload began (ms; empty: none).
const OVERLOAD_KEY: &str = "overload_since";

/// The owner of all state. See the module docs.
pub struct Controller {
    cfg: Config,
    clock: Box<dyn Clock>,
    store: Box<dyn Store>,
    snap: Snapshot,
    /// Every node's agent link and record.
    links: BTreeMap<NodeId, NodeLink>,
    /// Ports given to jobs, per node (`launch.rs`).
    ports: launch::Ports,
    /// Jobs not yet finished.
    jobs: BTreeMap<u64, JobDoc>,
    /// What the passes leave for others to read (`pass_record.rs`).
    pass: pass_record::PassRecord,
    /// Live tokens by the SHA-256 of their secret (tokens.rs).
    tokens: tokens::Tokens,
    next_id: u64,
    timers: timers::Timers,
    /// What the next `Turn` carries (`outbox.rs`).
    out: outbox::Outbox,
    /// Nodes the elastic pools made (`elastic.rs`).
    fleet: elastic::Fleet,
    /// MIG GPUs being laid out, and those left alone after a failed change (`mig_layouts.rs`).
    mig_changes: mig_layouts::MigChanges,
    shutdown: bool,
    /// Whether the store's disk is full (`conditions.rs`): submissions are refused then.
    state_disk: conditions::StateDisk,
    // Telemetry and the exporter's counters.
    telemetry: Telemetry,
    /// Prices, and what runs have cost (`costs.rs`).
    costs: costs::Costs,
    /// Budgets and this month's spend (`budgets.rs`).
    budgets: budgets::Budgets,
    /// GPUs of each job the idle rule fires on (`idle.rs`).
    idle_gpus: idle::IdleGpus,
    /// Inference services (`services.rs`).
    services: services::Services,
    /// Users' logins to image registries (`registries.rs`).
    registries: registries::Logins,
    /// Advance reservations (`reservations.rs`).
    reservations: reservations::Reservations,
    power: power::Power,
    schedules: schedules::Schedules,
    /// Jobs pulling their image, by node, as the nodes last reported (`observe.rs`).
    pulling: BTreeMap<u64, (String, String)>,
    /// (job, node) pairs whose image was ordered pulled ahead (`prefetch.rs`).
    prefetched: prefetch::Prefetched,
    /// Profiles under way (`profiles.rs`).
    profiling: profiles::Profiling,
    /// Run times of recent successes, for jobs submitted without an estimate (`history.rs`).
    history: history::History,
    /// GPUs out of service for faults (`faults.rs`).
    faults: faults::GpuFaults,
    /// The nodes agents may ask when no control plane answers (`roster.rs`).
    roster: roster::Roster,
}

impl Controller {
    /// The one account this daemon runs jobs as, in single-user mode.
    pub fn single_user(&self) -> Option<&str> {
        self.cfg.single_user.as_deref()
    }

    /// Builds the controller from the store: its nodes (with `local`, the node of this process's own agent),
    /// then its jobs. The returned turn re-adopts or requeues what was running; the shell carries it out first.
    pub fn new(
        cfg: Config,
        mut store: Box<dyn Store>,
        local: Option<NodeInfo>,
        clock: Box<dyn Clock>,
    ) -> anyhow::Result<(Controller, Turn)> {
        let mut snap = Snapshot::new(cfg.policy.clone());
        cfg.queues.iter().for_each(|q| snap.set_queue(q.clone()));
        let tokens = tokens::Tokens::from_rows(store.tokens()?);
        let next_id = store.max_job_id()? + 1;
        let next_seq = store.max_event_seq()? + 1;
        let (cfg_telemetry, fault_timing) = (cfg.telemetry.clone(), cfg.health_checks);
        let power_budgets = cfg.power_budgets.clone();
        let ports = launch::Ports::new(cfg.master_ports.clone(), cfg.local_port);
        let prices = cfg.prices.clone();
        let pool_prices = (cfg.elastic.iter().flat_map(|e| &e.pools))
            .map(|p| (p.name().to_string(), p.price_per_gpu_hour()))
            .collect();
        let mut c = Controller {
            cfg,
            clock,
            store,
            snap,
            links: BTreeMap::new(),
            ports,
            jobs: BTreeMap::new(),
            pass: pass_record::PassRecord::default(),
            tokens,
            next_id,
            timers: timers::Timers::default(),
            out: outbox::Outbox::new(next_seq),
            fleet: elastic::Fleet::default(),
            mig_changes: mig_layouts::MigChanges::default(),
            shutdown: false,
            state_disk: conditions::StateDisk::default(),
            telemetry: Telemetry::new(cfg_telemetry),
            costs: costs::Costs::new(prices, pool_prices),
            budgets: budgets::Budgets::default(),
            idle_gpus: idle::IdleGpus::default(),
            services: services::Services::default(),
            registries: registries::Logins::default(),
            reservations: reservations::Reservations::default(),
            power: power::Power::new(power_budgets),
            schedules: schedules::Schedules::default(),
            pulling: BTreeMap::new(),
            prefetched: prefetch::Prefetched::default(),
            profiling: profiles::Profiling::default(),
            history: history::History::default(),
            faults: faults::GpuFaults::new(fault_timing),
            roster: roster::Roster::new(String::new()),
        };
        let now = c.clock.now_ms();
        if let Some(info) = local {
            let mut doc = NodeDoc::from_info(info);
            doc.local = true;
            // A drain of this node holds across restarts.
            if let Some(row) = c.store.nodes()?.into_iter().find(|r| r.name == doc.name)
                && let Ok(old) = serde_json::from_str::<NodeDoc>(&row.doc)
            {
                doc.draining = old.draining;
                doc.epoch = old.epoch;
            }
            c.install_node(doc, Link::Local, now).map_err(|e| anyhow::anyhow!(e.message))?;
        }
        c.fleet = elastic::Fleet::restore(
            c.store.as_mut(),
            c.cfg.elastic.clone(),
            &c.cfg.data_dir,
            &c.cfg.policy,
            &c.cfg.queues,
            &mut c.timers,
            now,
        )?;
        c.restore_nodes(now)?;
        c.roster = roster::Roster::restore(c.store.as_mut(), &c.links, &mut c.out)?;
        c.restore()?;
        c.costs.restore_ledger(c.store.as_mut(), &c.jobs)?;
        c.budgets = budgets::Budgets::restore(c.cfg.budgets.clone(), &c.costs.ledger, &c.jobs, now);
        c.services.restore(c.store.as_mut())?;
        c.registries = registries::Logins::restore(c.store.as_mut())?;
        c.reservations = reservations::Reservations::restore(c.store.as_mut(), &mut c.snap)?;
        c.schedules = schedules::Schedules::restore(c.store.as_mut())?;
        c.power.restore(c.store.as_mut(), &mut c.snap)?;
        health::restore_degraded(c.store.as_mut(), &mut c.telemetry, &mut c.snap)?;
        c.faults.restore(c.store.as_mut(), &mut c.snap, &mut c.out)?;
        // The overload gate's count goes on where the last control plane left it.
        let since = c.store.meta(OVERLOAD_KEY)?.and_then(|t| t.parse().ok()).map(Time::from_millis);
        c.snap.restore_overload(since);
        let first = c.take_turn();
        Ok((c, first))
    }

    /// Handles a batch of events at one reading of the clock, fires the timers due by then,
    /// runs a scheduling pass if needed, and returns what the shell must carry out.
    pub fn turn(&mut self, events: impl IntoIterator<Item = Event>) -> Turn {
        let now = self.clock.now_ms();
        self.state_disk.check(self.store.as_mut(), &self.cfg.data_dir, &mut self.out, now);
        for e in events {
            self.handle(e, now);
        }
        self.fire_timers(now);
        self.fire_schedules(now);
        self.reconcile_services(now);
        if self.out.dirty {
            // Passes take at most half of the controller's time: after a
            // pass of P ms, the next waits P ms, and the requests and
            // reports of that time are answered in between. A pass of a
            // few hundred µs (most clusters) delays nothing.
            if now >= self.pass.next_pass_ms {
                self.schedule(now);
            } else {
                self.timers.at(self.pass.next_pass_ms, Timer::Wake);
            }
        }
        self.take_turn()
    }

    /// When the next timer is due (ms since the epoch): the shell wakes the controller then even if no event comes.
    pub fn next_timer(&self) -> Option<i64> {
        self.timers.next()
    }

    /// Drops writes no turn will commit (the store is away: `Shell::answer_reads`).
    pub fn forget_writes(&mut self) {
        self.out.writes.clear();
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Whether a `Shutdown` event was handled.
    pub fn stopped(&self) -> bool {
        self.shutdown
    }

    /// Commits a turn's writes to the store, in one transaction.
    pub fn commit(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.store.commit(writes)
    }

    /// Tells the store that this leader lives (see `Store::renew`).
    pub fn renew(&mut self) -> Result<(), StoreError> {
        self.store.renew()
    }

    /// Packs what this turn produced.
    fn take_turn(&mut self) -> Turn {
        let world = services::World { jobs: &self.jobs, snap: &self.snap, links: &self.links };
        let routes = self.services.take_changes(&world, &mut self.out);
        for id in std::mem::take(&mut self.out.touched) {
            if let Some(d) = self.jobs.get(&id) {
                self.out.write(docs::put_job(d));
            }
        }
        self.out.take(routes)
    }

    fn handle(&mut self, e: Event, now: i64) {
        match e {
            Event::Api { who, call } => self.api(&who, call, now),
            Event::Agent(AgentReport::Exited { key, exit }) => self.on_replica_end(key, Some(exit), None, now),
            Event::Agent(AgentReport::Lost { key, why }) => self.on_replica_end(key, None, Some(why), now),
            Event::Agent(AgentReport::StartFailed { key, error }) => self.on_start_failed(key, error, now),
            Event::Agent(AgentReport::Telemetry(r)) => self.on_telemetry(r, now),
            Event::Agent(AgentReport::Running { .. }) => {}
            Event::Agent(AgentReport::Profiled { key, profile, capture }) => {
                let acts = self.profiling.on_profiled(key, profile, capture, &mut self.out);
                self.act(acts, now);
            }
            Event::Provisioned { node, op, result } => self.fleet.on_provisioned(
                node,
                op,
                result,
                &mut self.snap,
                &mut self.links,
                &mut self.tokens,
                &mut self.timers,
                &mut self.out,
                now,
            ),
            Event::Proxy(r) => {
                let world = services::World { jobs: &self.jobs, snap: &self.snap, links: &self.links };
                let acts = self.services.on_proxy(r, &world, now);
                self.act(acts, now);
            }
            Event::Open(Open::Metrics { reply }) => {
                let scrape = self.reading().scrape(now);
                self.out.replies.push(Answer::open(reply, scrape));
            }
            Event::Shutdown => self.shutdown = true,
        }
    }

    /// Carries out the timers due by `now`.
    fn fire_timers(&mut self, now: i64) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Wake => self.out.reschedule(),
                Timer::Unseen { job, attempt } => self.unseen_check(job, attempt, now),
                Timer::Lease { node } => self.lease_check(node, now),
                Timer::StartHold { node } => {
                    conditions::start_hold_check(&mut self.snap, &mut self.links, node, &mut self.out, now)
                }
                Timer::PollTimeout { node, park } => self.poll_timeout(node, park),
                Timer::ProfileDeadline { profile } => {
                    let acts = self.profiling.deadline(profile, &mut self.out);
                    self.act(acts, now);
                }
                Timer::Kill { job, attempt } => self.kill_what_is_left(job, attempt),
                Timer::TimeLimit { job, attempt } => self.time_limit(job, attempt, now),
            }
        }
    }

    /// Submits what the schedules due now ask for, as their owners (`schedules.rs`).
    fn fire_schedules(&mut self, now: i64) {
        let due = self.schedules.due(&self.jobs, &mut self.timers, now);
        if due.is_empty() {
            return;
        }
        for o in due {
            let submitted = o.submits().then(|| self.submit_scheduled(&o.doc, now));
            self.schedules.settle(o, submitted, &mut self.timers, &mut self.out, now);
        }
        self.schedules.persist(&mut self.out);
    }

    fn reply<T: Send + 'static>(&mut self, tx: Reply<T>, v: Result<T, ApiError>) {
        self.out.reply(tx, v);
    }

    fn event(&mut self, now: i64, job: Option<u64>, kind: &str, message: String) {
        let user = job.and_then(|j| self.jobs.get(&j)).map(|d| d.user.clone());
        self.event_of(now, job, user, kind, message);
    }

    /// An event of a job whose document is not among the live ones (being
    /// submitted, or just ended): its owner is given, so that the owner's
    /// own event stream shows it.
    /// What a node's agent reports of its devices, routed to the rooms that act on it.
    fn on_telemetry(&mut self, r: crate::protocol::NodeReport, now: i64) {
        let Some(node) = self.snap.node_id(&r.node) else { return };
        if r.gpus.is_empty() && r.error.is_none() && r.mig.is_none() && !r.health.is_empty() {
            // Only health verdicts (`agent/gpu_health.rs`): no reading to take.
            let acts = self.faults.on_report(node, &r, &mut self.snap, &mut self.out, now);
            self.act(acts, now);
            return;
        }
        conditions::set_conditions(&mut self.snap, &mut self.links, node, r.conditions.clone(), &mut self.out, now);
        let acts = gpu_shares::enforce_gpu_shares(&r, &self.snap, &self.jobs);
        self.act(acts, now);
        if let Some(outcome) = r.mig.clone() {
            self.mig_changes.on_outcome(
                node,
                outcome,
                &mut self.snap,
                &mut self.links,
                &mut self.timers,
                &mut self.out,
                now,
            );
        }
        // Replicas pulling their image: shown as such, and their GPUs are not theirs to idle yet.
        self.pulling.retain(|_, (n, _)| *n != r.node);
        for (key, text) in &r.pulling {
            self.pulling.insert(key.job, (r.node.clone(), text.clone()));
        }
        let holders = self.reading().holders(node);
        let busy: Vec<u32> = holders
            .keys()
            .map(|d| match d {
                crate::plane::telemetry::DevRef::Gpu(i)
                | crate::plane::telemetry::DevRef::Mig { gpu: i, .. }
                | crate::plane::telemetry::DevRef::Share { gpu: i, .. } => *i,
            })
            .collect();
        power::learn_node_power(&r.node, &r.gpus, &busy, &mut self.snap, &mut self.out);
        if let Some(e) = &r.error
            && self.telemetry.node_error(&r.node) != Some(e.as_str())
        {
            self.event(now, None, "telemetry", format!("node {}: cannot read its GPUs: {e}", r.node));
        }
        let acts = self.faults.on_report(node, &r, &mut self.snap, &mut self.out, now);
        self.act(acts, now);
        let (name, at_ms) = (r.node.clone(), r.at_ms);
        let out = self.telemetry.on_report(r, &holders);
        let t = power::Power::watch(&name, at_ms, &self.snap, &mut self.telemetry);
        self.publish_alerts(t, now);
        health::on_heat(node, &name, &out.heat, &self.telemetry, &mut self.snap, &mut self.out, now);
        let acts = health::on_stragglers(&out.stragglers, &self.jobs, &mut self.snap);
        self.act(acts, now);
        // A full state disk keeps the readings in memory only (conditions.rs).
        if !out.rows.is_empty() && !self.state_disk.is_full() {
            self.out.write(gpool_store::Write::AppendSamples(out.rows));
        }
        self.publish_alerts(out.transitions, now);
    }

    /// Alert transitions become events (`alert_firing`, `alert_resolved`) and webhook notices;
    /// the idle rule's also act on idle jobs (`idle.rs`).
    fn publish_alerts(&mut self, transitions: Vec<gpool_core::alert::Transition>, now: i64) {
        let acts = self.idle_gpus.on_transitions(&transitions, &self.snap, &self.jobs);
        self.act(acts, now);
        for t in transitions {
            let job = t.labels.iter().find(|(k, _)| k == "job_id").and_then(|(_, v)| v.parse().ok());
            let kind = if t.firing { "alert_firing" } else { "alert_resolved" };
            self.event(now, job, kind, format!("[{}] {}", t.severity.as_str(), t.summary));
            self.out.notices.push(observe::alert_notice(&t, now));
        }
    }

    /// A node went down: its GPUs' readings go, and their alerts resolve.
    pub(super) fn telemetry_forget_node(&mut self, node: &str, now: i64) {
        let t = self.telemetry.forget_node(node);
        self.publish_alerts(t, now);
    }

    /// The state as views read it (`views.rs`).
    fn reading(&self) -> views::Reading<'_> {
        reading!(self)
    }

    /// Carries out what a room asked of state it does not own, in order (`acts.rs`).
    fn act(&mut self, acts: acts::Acts, now: i64) {
        for a in acts.0 {
            match a {
                acts::Act::Event { job, kind, message } => self.event(now, job, kind, message),
                acts::Act::Stop { job, why } => self.stop_run(job, why, now),
                acts::Act::Order { node, order } => orders::order(&mut self.links, &mut self.out, node, order),
                acts::Act::NodeState(node) => {
                    conditions::apply_node_state(&mut self.snap, &self.links, node, &mut self.out)
                }
                acts::Act::Withdraw { job, by } => self.withdraw(job, by, now),
            }
        }
    }

    fn event_of(&mut self, now: i64, job: Option<u64>, user: Option<String>, kind: &str, message: String) {
        self.out.event_of(now, job, user, kind, message);
    }

    // ----- scheduling -----

    fn schedule(&mut self, now: i64) {
        if !self.budgets.is_empty() {
            let live = self.costs.live_costs(&self.snap, &self.jobs, now);
            self.budgets.check(&mut self.snap, &mut self.jobs, &live, &mut self.timers, &mut self.out, now);
        }
        self.out.dirty = false;
        let t0 = self.clock.monotonic();
        let mut plan = gpool_core::schedule(&self.snap, Time::from_millis(now));
        let took = self.clock.monotonic().saturating_sub(t0);
        self.pass.passes.observe(took.as_secs_f64());
        self.pass.next_pass_ms = self.clock.now_ms() + took.as_millis() as i64;
        self.stop_for_plan(&plan, now);
        self.report_late(&plan.late, now);
        for p in &plan.preemptions {
            self.pass.preemptions += 1;
            self.stop_run(p.victim.0, Stop::Preempt { for_job: p.for_job.0 }, now);
            self.event(
                now,
                Some(p.victim.0),
                "preempted",
                format!("job {} preempted for job {} ({})", p.victim, p.for_job, lifecycle::why_text(&p.why)),
            );
        }
        for r in &plan.resizes {
            self.resize(r, now);
        }
        for s in &plan.starts {
            self.start(s.job.0, s.placement.clone(), now);
        }
        if plan.overloaded_since != self.snap.overloaded_since() {
            let since = plan.overloaded_since.map_or_else(String::new, |t| t.as_millis().to_string());
            self.out.write(Write::PutMeta(OVERLOAD_KEY.into(), since));
        }
        self.snap.carry_over(&plan);
        let acts = self.prefetched.on_plan(&plan, &self.jobs, &self.registries);
        self.act(acts, now);
        self.fail_never_startable(&plan, now);
        let acts = self.mig_changes.plan(&mut self.snap, &self.links, &mut self.out, now);
        self.act(acts, now);
        let lease_ms = self.lease_ms();
        self.fleet.autoscale(&plan, &mut self.snap, &mut self.tokens, lease_ms, &mut self.timers, &mut self.out, now);
        if let Some(at) = plan.wake_at {
            self.timers.at(at.as_millis(), Timer::Wake);
        }
        self.pass.record(&mut plan);
    }
}
