//! Inference services: a spec with a `service:` block, applied by name
//! (`PUT /api/v1/services/NAME`). Its replicas are ordinary jobs, placed by
//! the same pass with the service's priority (so a growing service preempts
//! preemptible batch jobs), each given a `PORT` to listen on and labelled
//! `gpool.io/service`. This room keeps, per service: the persisted document
//! (spec, generation, replica jobs, desired count, in `PutMeta("services")`),
//! the scaler's window (`gpool_core::service_scaler`), and what the proxy
//! reported (readiness, drains, load). Each turn it asks the rollout planner
//! (`gpool_core::service_rollout`) which replicas to start and which to
//! drain, and publishes the routing table the proxy (`plane/proxy`) follows.
//!
//! A ready replica is drained before it is stopped: the proxy stops sending
//! it requests and reports `Drained` once none is in flight (or the drain
//! times out). A replica that ends by itself is replaced, after a back-off
//! that doubles with each failure in a row (a crash loop does not spin).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpool_api as api;
use gpool_core::service_rollout::{ReplicaState, plan_replicas};
use gpool_core::service_scaler::{LoadSample, ScalerConfig};
use gpool_core::{NodeId, Snapshot, Time};
use gpool_store::{Store, Write};

use super::ApiError;
use super::acts::Acts;
use super::docs::JobDoc;
use super::links::NodeLink;
use super::outbox::Outbox;
use super::proxy_wire::{Backend, ProxyReport, Route, Routes};
use super::service_entry::{ServiceDoc, ServiceEntry};
use super::timers::{Timer, Timers};
use crate::plane::auth::{Caller, Role};
use crate::plane::metrics::ServiceSeries;

/// The label that names a replica's service.
pub const SERVICE_LABEL: &str = "gpool.io/service";
const GENERATION_LABEL: &str = "gpool.io/service-generation";
/// A draining replica is stopped after this even if requests are still in flight.
const DRAIN_TIMEOUT_MS: i64 = 30_000;
/// A new replica waiting this long means the pool has no room for a surge (`service_rollout.rs`).
const FULL_AFTER_MS: i64 = 3_000;
/// The longest back-off between replacements of failing replicas.
const MAX_BACKOFF_MS: i64 = 60_000;
/// The services of this control plane.
#[derive(Default)]
pub(super) struct Services {
    by_name: BTreeMap<String, ServiceEntry>,
    /// The proxy's URL; `None`: this plane runs no proxy, and services cannot be applied.
    proxy_url: Option<String>,
    /// The documents changed: persist them with this turn.
    docs_changed: bool,
    /// The routing table may have changed: publish it with this turn.
    routes_changed: bool,
    published: Option<Arc<Routes>>,
}

/// What to do for one service this turn: replicas to withdraw, and how many
/// to start (the router submits them: `Services::next_replica`).
pub(super) struct Actions {
    pub(super) name: String,
    pub(super) stop: Vec<u64>,
    pub(super) start: u32,
}

/// What the services read of the rest: the live jobs, the snapshot and the nodes (for replicas' addresses).
pub(super) struct World<'a> {
    pub(super) jobs: &'a BTreeMap<u64, JobDoc>,
    pub(super) snap: &'a Snapshot,
    pub(super) links: &'a BTreeMap<NodeId, NodeLink>,
}

impl World<'_> {
    /// Where a running replica listens (`host:port`).
    fn replica_addr(&self, job: u64) -> Option<String> {
        let d = self.jobs.get(&job).filter(|d| d.state == api::JobState::Running)?;
        let run = d.run.as_ref()?;
        let port = run.port?;
        Some(format!("{}:{port}", self.host_of(&run.replicas.first()?.node)?))
    }

    /// The address the proxy reaches a node at.
    fn host_of(&self, node: &str) -> Option<String> {
        let link = self.snap.node_id(node).and_then(|id| self.links.get(&id))?;
        Some(if link.is_local() { "127.0.0.1".to_string() } else { link.doc.addr.clone() })
    }

    /// The ports running jobs expose (`--expose`), each a route of its own,
    /// `job-ID-PORT`, to rank 0's node; ready once it answers on `/`.
    fn exposed(&self) -> Vec<Route> {
        let mut routes = Vec::new();
        for d in self.jobs.values().filter(|d| !d.spec.expose.is_empty() && d.state == api::JobState::Running) {
            let Some(host) = d.run.as_ref().and_then(|r| r.replicas.first()).and_then(|r| self.host_of(&r.node)) else {
                continue;
            };
            routes.extend(d.spec.expose.iter().map(|port| Route {
                name: exposed_name(d.id, *port),
                readiness: "/".into(),
                backends: vec![Backend { job: d.id, addr: format!("{host}:{port}"), draining: false }],
            }));
        }
        routes
    }
}

/// The proxy's name for port `port` of job `job` (`/job-7-8888/`, host `job-7-8888.…`).
pub(super) fn exposed_name(job: u64, port: u16) -> String {
    format!("job-{job}-{port}")
}

impl Services {
    /// Where the proxy serves port `port` of job `job`, if a proxy runs.
    pub(super) fn exposed_url(&self, job: u64, port: u16) -> Option<String> {
        self.proxy_url.as_ref().map(|u| format!("{u}/{}/", exposed_name(job, port)))
    }

    /// Checks an applied spec against its name and this plane: the spec as
    /// it will be kept, its scaler's settings, and a replica's job spec (which
    /// the caller must be able to submit: the router checks it).
    pub(super) fn check(
        &self,
        name: &str,
        mut spec: api::JobSpec,
    ) -> Result<(api::JobSpec, ScalerConfig, api::JobSpec), ApiError> {
        if spec.name.as_deref().is_some_and(|n| n != name) {
            return Err(ApiError::new(
                400,
                format!("name: the spec names {:?} but was applied as {name:?}", spec.name.as_deref().unwrap_or("")),
            ));
        }
        if name.starts_with("job-") {
            return Err(ApiError::new(
                400,
                format!("name {name:?}: names job-… are the proxy's for jobs' exposed ports"),
            ));
        }
        spec.name = Some(name.to_string());
        let cfg = crate::plane::convert::service_config(&spec).map_err(|e| ApiError::new(400, e.to_string()))?;
        if self.proxy_url.is_none() {
            return Err(ApiError::new(
                400,
                "this control plane runs no service proxy: start it with --proxy-listen 127.0.0.1:8780, then apply the service again",
            ));
        }
        let probe = replica_spec(&spec, 1, 0);
        Ok((spec, cfg, probe))
    }

    /// Applies a checked spec (`check`): creates the service, or starts a rolling update if its spec changed.
    pub(super) fn apply(
        &mut self,
        caller: &Caller,
        name: &str,
        (spec, cfg): (api::JobSpec, ScalerConfig),
        out: &mut Outbox,
        now: i64,
    ) -> Result<api::ServiceApplied, ApiError> {
        let endpoint = format!("{}/{name}/", self.proxy_url.as_deref().unwrap_or(""));
        if let Some(e) = self.by_name.get_mut(name) {
            if e.doc.user != caller.user && caller.role != Role::Admin {
                return Err(ApiError::new(403, format!("service {name} belongs to {}; pick another name", e.doc.user)));
            }
            if e.doc.spec == spec {
                let generation = e.doc.generation;
                return Ok(api::ServiceApplied {
                    name: name.into(),
                    generation,
                    outcome: "unchanged".into(),
                    endpoint,
                });
            }
            e.doc.generation += 1;
            e.doc.spec = spec;
            e.doc.desired = e.doc.desired.clamp(cfg.min, cfg.max);
            e.cfg = cfg;
            let generation = e.doc.generation;
            self.docs_changed = true;
            out.event_of(
                now,
                None,
                Some(caller.user.clone()),
                "service_updated",
                format!("service {name}: generation {generation} applied by {}; rolling update", caller.user),
            );
            return Ok(api::ServiceApplied { name: name.into(), generation, outcome: "updated".into(), endpoint });
        }
        let doc = ServiceDoc {
            name: name.into(),
            user: caller.user.clone(),
            team: caller.team.clone(),
            spec,
            generation: 1,
            created_ms: now,
            replicas: BTreeMap::new(),
            desired: cfg.min,
        };
        self.by_name.insert(name.into(), ServiceEntry::new(doc, cfg));
        self.docs_changed = true;
        out.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "service_created",
            format!("service {name} created by {}", caller.user),
        );
        Ok(api::ServiceApplied { name: name.into(), generation: 1, outcome: "created".into(), endpoint })
    }

    /// Deletes a service: its replicas are withdrawn at once (the proxy answers 404 for it from now on).
    pub(super) fn delete(
        &mut self,
        caller: &Caller,
        name: &str,
        world: &World<'_>,
        out: &mut Outbox,
        now: i64,
    ) -> Result<(api::ServiceView, Acts), ApiError> {
        let view = self.views(caller, world).into_iter().find(|v| v.name == name);
        let Some(view) = view else { return Err(ApiError::new(404, format!("no service {name}"))) };
        if view.user != caller.user && caller.role != Role::Admin {
            return Err(ApiError::new(403, format!("service {name} belongs to {}", view.user)));
        }
        let mut acts = Acts::default();
        if let Some(e) = self.by_name.remove(name) {
            for job in e.doc.replicas.keys() {
                acts.withdraw(*job, withdrawn_by(name));
            }
        }
        self.docs_changed = true;
        self.routes_changed = true;
        out.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "service_deleted",
            format!("service {name} deleted by {}", caller.user),
        );
        Ok((view, acts))
    }

    /// What `gpool services` shows: every service for admins and readers, one's own for users.
    pub(super) fn views(&self, caller: &Caller, world: &World<'_>) -> Vec<api::ServiceView> {
        let endpoint = |name: &str| match &self.proxy_url {
            Some(u) => format!("{u}/{name}/"),
            None => format!("/{name}/"),
        };
        self.by_name
            .values()
            .filter(|e| caller.sees_all() || e.doc.user == caller.user)
            .map(|e| api::ServiceView {
                name: e.doc.name.clone(),
                user: e.doc.user.clone(),
                endpoint: endpoint(&e.doc.name),
                generation: e.doc.generation,
                ready: e.ready.keys().filter(|j| !e.draining.contains_key(j)).count() as u32,
                desired: e.doc.desired,
                min: e.cfg.min,
                max: e.cfg.max,
                requests_per_second: if e.load.period_s > 0.0 { e.load.requests as f64 / e.load.period_s } else { 0.0 },
                p50_ms: e.load.p50_ms,
                p99_ms: e.load.p99_ms,
                in_flight: e.load.in_flight,
                requests_total: e.requests_total,
                failed_total: e.failed_total,
                replicas: e
                    .doc
                    .replicas
                    .iter()
                    .map(|(job, generation)| api::ServiceReplicaView {
                        job: *job,
                        generation: *generation,
                        state: world.jobs.get(job).map_or("ended", |d| d.state.as_str()).into(),
                        ready: e.ready.contains_key(job),
                        draining: e.draining.contains_key(job),
                        address: world.replica_addr(*job),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The series `/metrics` shows per service.
    pub(super) fn series(&self) -> Vec<ServiceSeries> {
        self.by_name
            .values()
            .map(|e| ServiceSeries {
                name: e.doc.name.clone(),
                requests_total: e.requests_total,
                failed_total: e.failed_total,
                in_flight: e.load.in_flight,
                ready: e.ready.keys().filter(|j| !e.draining.contains_key(j)).count() as u32,
                desired: e.doc.desired,
                latency: e.latency.clone(),
            })
            .collect()
    }

    /// What the proxy reports: its address, replicas' readiness, drains done, load.
    pub(super) fn on_proxy(&mut self, report: ProxyReport, world: &World<'_>, now: i64) -> Acts {
        let mut acts = Acts::default();
        match report {
            ProxyReport::Bound { url } => self.proxy_url = Some(url),
            ProxyReport::Ready { job, addr, ready } => {
                let current = world.replica_addr(job);
                let Some(e) = self.by_name.values_mut().find(|e| e.doc.replicas.contains_key(&job)) else {
                    return acts;
                };
                if ready && current.as_deref() == Some(addr.as_str()) {
                    e.ready.insert(job, addr);
                    e.failures = 0;
                } else if !ready {
                    e.ready.remove(&job);
                }
            }
            ProxyReport::Drained { job } => {
                let mut name = None;
                for e in self.by_name.values_mut() {
                    if e.draining.remove(&job).is_some() {
                        name = Some(e.doc.name.clone());
                    }
                }
                if let Some(name) = name {
                    self.withdraw(job, &name, &mut acts);
                    self.routes_changed = true;
                }
            }
            ProxyReport::Load(loads) => {
                for l in loads {
                    let Some(e) = self.by_name.get_mut(&l.name) else { continue };
                    let rps = if l.period_s > 0.0 { l.requests as f64 / l.period_s } else { 0.0 };
                    e.scaler.observe(&e.cfg, LoadSample { at: Time::from_millis(now), in_flight: l.in_flight, rps });
                    e.requests_total += l.requests;
                    e.failed_total += l.failed;
                    let mut cumulative = 0;
                    for (i, c) in l.latency_counts.iter().enumerate() {
                        cumulative += c;
                        if let Some(slot) = e.latency.counts.get_mut(i) {
                            *slot += cumulative;
                        }
                    }
                    e.latency.count += l.latency_counts.iter().sum::<u64>();
                    e.latency.sum += l.latency_sum_s;
                    // A wake-up from zero (no period) keeps the last period's figures.
                    if l.period_s > 0.0 {
                        e.load = l;
                    } else {
                        e.load.in_flight = l.in_flight;
                    }
                    e.scale_at_ms = Some(now);
                }
            }
        }
        acts
    }

    /// What each service needs to move toward what its scaler and rollout
    /// want: the replicas to withdraw come back as acts, the starts as `Actions`.
    pub(super) fn reconcile(
        &mut self,
        jobs: &BTreeMap<u64, JobDoc>,
        timers: &mut Timers,
        now: i64,
    ) -> (Acts, Vec<Actions>) {
        let mut actions = Vec::new();
        let running: BTreeMap<u64, bool> =
            jobs.iter().map(|(id, d)| (*id, d.state == api::JobState::Running)).collect();
        let queued_since: BTreeMap<u64, i64> = jobs
            .iter()
            .filter(|(_, d)| d.state == api::JobState::Pending)
            .map(|(id, d)| (*id, d.queued_ms.unwrap_or(d.submitted_ms)))
            .collect();
        for e in self.by_name.values_mut() {
            // Replicas that ended: gone from the table; a failure unless this room stopped them.
            let ended: Vec<u64> = e.doc.replicas.keys().copied().filter(|j| !running.contains_key(j)).collect();
            for j in ended {
                e.doc.replicas.remove(&j);
                e.ready.remove(&j);
                e.draining.remove(&j);
                if !e.stopping.remove(&j) {
                    e.failures += 1;
                    let backoff = (1_000i64 << e.failures.min(16)).min(MAX_BACKOFF_MS);
                    e.retry_at_ms = now + backoff;
                    timers.at(e.retry_at_ms, Timer::Wake);
                }
                self.docs_changed = true;
                self.routes_changed = true;
            }
            // A replica not running (queued, requeued) is not ready, whatever was probed before.
            let before = e.ready.len();
            e.ready.retain(|j, _| running.get(j).copied().unwrap_or(false));
            self.routes_changed |= before != e.ready.len();
            if e.scale_at_ms.is_some_and(|t| t <= now) {
                let s = e.scaler.desired(&e.cfg, Time::from_millis(now), e.doc.desired);
                e.scale_at_ms = s.wake_at.map(Time::as_millis);
                if let Some(t) = e.scale_at_ms {
                    timers.at(t, Timer::Wake);
                }
                if s.desired != e.doc.desired {
                    e.doc.desired = s.desired;
                    self.docs_changed = true;
                }
            }
            let states: Vec<ReplicaState> = e
                .doc
                .replicas
                .iter()
                .map(|(id, generation)| ReplicaState {
                    id: *id,
                    generation: *generation,
                    ready: e.ready.contains_key(id),
                    draining: e.draining.contains_key(id),
                })
                .collect();
            // The pool is full if a replica of this generation waited FULL_AFTER_MS for room.
            let full =
                e.doc.replicas.iter().any(|(j, g)| {
                    *g == e.doc.generation && queued_since.get(j).is_some_and(|t| now - t >= FULL_AFTER_MS)
                });
            let plan = plan_replicas(e.doc.desired, e.doc.generation, &states, full);
            let mut stop = Vec::new();
            for id in plan.drain {
                if e.ready.contains_key(&id) {
                    e.draining.insert(id, now + DRAIN_TIMEOUT_MS);
                    timers.at(now + DRAIN_TIMEOUT_MS, Timer::Wake);
                    self.routes_changed = true;
                } else {
                    stop.push(id);
                }
            }
            let late: Vec<u64> = e.draining.iter().filter(|(_, t)| **t <= now).map(|(j, _)| *j).collect();
            for j in late {
                e.draining.remove(&j);
                stop.push(j);
            }
            let start = if now >= e.retry_at_ms { plan.start } else { 0 };
            if !stop.is_empty() || start > 0 {
                actions.push(Actions { name: e.doc.name.clone(), stop, start });
            }
        }
        let mut acts = Acts::default();
        for a in &mut actions {
            for j in std::mem::take(&mut a.stop) {
                self.withdraw(j, &a.name, &mut acts);
            }
        }
        (acts, actions)
    }

    /// The next replica of a service to submit (`id`: the job id it will get), and as whom.
    pub(super) fn next_replica(&self, name: &str, id: u64) -> Option<(Caller, api::JobSpec, u64)> {
        let e = self.by_name.get(name)?;
        let generation = e.doc.generation;
        // Named after the job id it is about to get.
        let spec = replica_spec(&e.doc.spec, generation, id);
        let caller = Caller { user: e.doc.user.clone(), team: e.doc.team.clone(), role: Role::User };
        Some((caller, spec, generation))
    }

    /// A replica was submitted (`ids`) or refused (`Err`).
    pub(super) fn replica_submitted(
        &mut self,
        name: &str,
        generation: u64,
        submitted: Result<Vec<u64>, ApiError>,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        match submitted {
            Ok(ids) => {
                timers.at(now + FULL_AFTER_MS, Timer::Wake);
                if let Some(e) = self.by_name.get_mut(name) {
                    for id in ids {
                        e.doc.replicas.insert(id, generation);
                    }
                }
                self.docs_changed = true;
            }
            Err(err) => {
                let user = self.by_name.get_mut(name).map(|e| {
                    e.failures += 1;
                    e.retry_at_ms = now + (1_000i64 << e.failures.min(16)).min(MAX_BACKOFF_MS);
                    timers.at(e.retry_at_ms, Timer::Wake);
                    e.doc.user.clone()
                });
                out.event_of(
                    now,
                    None,
                    user,
                    "service_replica_refused",
                    format!("service {name}: a new replica was refused: {}", err.message),
                );
            }
        }
    }

    /// A replica job this room no longer wants: withdrawn (its end is no failure).
    fn withdraw(&mut self, job: u64, name: &str, acts: &mut Acts) {
        if let Some(e) = self.by_name.get_mut(name) {
            e.stopping.insert(job);
        }
        acts.withdraw(job, withdrawn_by(name));
    }

    /// The routing table and the services' documents, when they changed this turn.
    pub(super) fn take_changes(&mut self, world: &World<'_>, out: &mut Outbox) -> Option<Arc<Routes>> {
        if std::mem::take(&mut self.docs_changed) {
            let docs: Vec<&ServiceDoc> = self.by_name.values().map(|e| &e.doc).collect();
            if let Ok(text) = serde_json::to_string(&docs) {
                out.write(Write::PutMeta("services".into(), text));
            }
            self.routes_changed = true;
        }
        // Replicas start and stop in other rooms (the pass, lifecycle.rs): with any service, the
        // table is rebuilt each turn and sent only when it differs from the last one sent.
        let changed = std::mem::take(&mut self.routes_changed);
        let exposed = world.exposed();
        let published_any = self.published.as_ref().is_some_and(|r| !r.services.is_empty());
        if !changed && self.by_name.is_empty() && exposed.is_empty() && !published_any {
            return None;
        }
        let mut routes = Routes {
            services: self
                .by_name
                .values()
                .map(|e| Route {
                    name: e.doc.name.clone(),
                    readiness: e.doc.spec.service.as_ref().map_or_else(|| "/".into(), |s| s.readiness.clone()),
                    backends: e
                        .doc
                        .replicas
                        .keys()
                        .filter_map(|j| {
                            let addr = world.replica_addr(*j)?;
                            Some(Backend { job: *j, addr, draining: e.draining.contains_key(j) })
                        })
                        .collect(),
                })
                .collect(),
        };
        routes.services.extend(exposed);
        if self.published.as_deref() == Some(&routes) {
            return None;
        }
        let routes = Arc::new(routes);
        self.published = Some(routes.clone());
        Some(routes)
    }

    /// Rebuilds the services from the store (their replica jobs are restored with the other jobs).
    pub(super) fn restore(&mut self, store: &mut dyn Store) -> anyhow::Result<()> {
        let Some(text) = store.meta("services")? else { return Ok(()) };
        let docs: Vec<ServiceDoc> = serde_json::from_str(&text)?;
        for doc in docs {
            match crate::plane::convert::service_config(&doc.spec) {
                Ok(cfg) => {
                    self.by_name.insert(doc.name.clone(), ServiceEntry::new(doc, cfg));
                }
                Err(e) => tracing::warn!("service {} not restored: {e}", doc.name),
            }
        }
        self.routes_changed = true;
        Ok(())
    }
}

/// Whether a job is a service replica (it gets a `PORT`).
pub(super) fn is_service_replica(spec: &api::JobSpec) -> bool {
    spec.labels.contains_key(SERVICE_LABEL)
}

/// Who a withdrawn replica's cancellation names.
fn withdrawn_by(name: &str) -> String {
    format!("service {name} (scaled down or updated)")
}

/// A replica's job spec: the service's, without its `service:` block, labelled and named.
fn replica_spec(spec: &api::JobSpec, generation: u64, n: u64) -> api::JobSpec {
    let mut r = spec.clone();
    r.service = None;
    let name = spec.name.clone().unwrap_or_default();
    r.labels.insert(SERVICE_LABEL.into(), name.clone());
    r.labels.insert(GENERATION_LABEL.into(), generation.to_string());
    r.name = Some(format!("{name}-g{generation}-{n}"));
    r
}
