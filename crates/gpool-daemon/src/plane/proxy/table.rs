//! The proxy's live view of the services: per service its replicas (with
//! readiness, draining and in-flight counts) and its load counters, updated
//! from the controller's routing table. Locks here are held for a lookup or
//! a push, never across I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::Notify;

use crate::plane::controller::{LATENCY_BOUNDS, Routes, ServiceLoad};

/// Seconds of latency samples kept for p50/p99.
const WINDOW_PERIODS: usize = 10;

/// One replica as the proxy sees it.
#[derive(Debug)]
pub(super) struct Replica {
    pub job: u64,
    pub addr: String,
    pub ready: AtomicBool,
    pub draining: AtomicBool,
    /// Requests sent to it and not yet answered in full.
    pub in_flight: AtomicU32,
    /// Its drain was reported (once).
    pub drained_sent: AtomicBool,
    /// It left the table: its probe ends.
    pub gone: AtomicBool,
    /// Wakes its probe at once (a request to it failed).
    pub recheck: Notify,
}

impl Replica {
    pub(super) fn takes_requests(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }
}

/// Load counters of one service since the last sample.
#[derive(Debug, Default)]
struct Period {
    requests: u64,
    failed: u64,
    latencies_ms: Vec<f32>,
    counts: Vec<u64>,
    sum_s: f64,
}

/// One service as the proxy sees it.
#[derive(Debug)]
pub(super) struct Service {
    pub name: String,
    pub readiness: RwLock<String>,
    pub replicas: RwLock<Vec<Arc<Replica>>>,
    /// Requests in flight through the proxy, held ones included.
    pub in_flight: AtomicU32,
    /// Requests held for want of a ready replica.
    pub held: AtomicU32,
    /// Woken when a replica becomes ready.
    pub ready_changed: Notify,
    /// Spreads ties of least in-flight.
    pub turn: AtomicU64,
    period: Mutex<Period>,
    window: Mutex<VecDeque<Vec<f32>>>,
}

impl Service {
    fn new(name: &str, readiness: &str) -> Service {
        Service {
            name: name.into(),
            readiness: RwLock::new(readiness.into()),
            replicas: RwLock::new(Vec::new()),
            in_flight: AtomicU32::new(0),
            held: AtomicU32::new(0),
            ready_changed: Notify::new(),
            turn: AtomicU64::new(0),
            period: Mutex::new(Period { counts: vec![0; LATENCY_BOUNDS.len() + 1], ..Period::default() }),
            window: Mutex::new(VecDeque::new()),
        }
    }

    /// The ready replica with the fewest requests in flight, not among `tried`.
    pub(super) fn pick(&self, tried: &[u64]) -> Option<Arc<Replica>> {
        let list = self.replicas.read().ok()?;
        let n = list.len().max(1);
        let start = self.turn.fetch_add(1, Ordering::Relaxed) as usize % n;
        let mut best: Option<&Arc<Replica>> = None;
        for i in 0..list.len() {
            let r = &list[(start + i) % n];
            if !r.takes_requests() || tried.contains(&r.job) {
                continue;
            }
            if best.is_none_or(|b| r.in_flight.load(Ordering::Relaxed) < b.in_flight.load(Ordering::Relaxed)) {
                best = Some(r);
            }
        }
        let best = best?.clone();
        best.in_flight.fetch_add(1, Ordering::AcqRel);
        Some(best)
    }

    /// Counts one answered request (`failed`: the proxy's own 502/503/504) and its latency to the head.
    pub(super) fn record(&self, secs: f64, failed: bool) {
        let Ok(mut p) = self.period.lock() else { return };
        p.requests += 1;
        p.failed += u64::from(failed);
        if failed {
            return;
        }
        p.latencies_ms.push((secs * 1000.0) as f32);
        let i = LATENCY_BOUNDS.iter().position(|b| secs <= *b).unwrap_or(LATENCY_BOUNDS.len());
        p.counts[i] += 1;
        p.sum_s += secs;
    }

    /// The load since the last sample, and resets the period.
    pub(super) fn sample(&self, period_s: f64) -> ServiceLoad {
        let p = self.period.lock().map(|mut p| {
            let counts = vec![0; LATENCY_BOUNDS.len() + 1];
            std::mem::replace(&mut *p, Period { counts, ..Period::default() })
        });
        let p = p.unwrap_or_default();
        let (p50, p99) = match self.window.lock() {
            Ok(mut w) => {
                w.push_back(p.latencies_ms.clone());
                while w.len() > WINDOW_PERIODS {
                    w.pop_front();
                }
                let mut all: Vec<f32> = w.iter().flatten().copied().collect();
                all.sort_by(f32::total_cmp);
                (quantile(&all, 0.5), quantile(&all, 0.99))
            }
            Err(_) => (None, None),
        };
        ServiceLoad {
            name: self.name.clone(),
            in_flight: f64::from(self.in_flight.load(Ordering::Acquire)),
            requests: p.requests,
            failed: p.failed,
            period_s,
            p50_ms: p50,
            p99_ms: p99,
            latency_counts: p.counts,
            latency_sum_s: p.sum_s,
        }
    }
}

fn quantile(sorted: &[f32], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).map(|v| f64::from(*v))
}

/// Every service the proxy serves, by name.
#[derive(Debug, Default)]
pub(super) struct Table {
    services: RwLock<HashMap<String, Arc<Service>>>,
}

impl Table {
    pub(super) fn service(&self, name: &str) -> Option<Arc<Service>> {
        self.services.read().ok()?.get(name).cloned()
    }

    pub(super) fn all(&self) -> Vec<Arc<Service>> {
        self.services.read().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// Takes a new routing table; returns the replicas that are new (their probes start).
    pub(super) fn update(&self, routes: &Routes) -> Vec<(Arc<Service>, Arc<Replica>)> {
        let Ok(mut map) = self.services.write() else { return Vec::new() };
        let mut fresh = Vec::new();
        let names: Vec<&str> = routes.services.iter().map(|r| r.name.as_str()).collect();
        for (name, svc) in map.iter() {
            if !names.contains(&name.as_str())
                && let Ok(list) = svc.replicas.read()
            {
                list.iter().for_each(|r| r.gone.store(true, Ordering::Release));
            }
        }
        map.retain(|name, _| names.contains(&name.as_str()));
        for route in &routes.services {
            let svc =
                map.entry(route.name.clone()).or_insert_with(|| Arc::new(Service::new(&route.name, &route.readiness)));
            if let Ok(mut r) = svc.readiness.write() {
                r.clone_from(&route.readiness);
            }
            let Ok(mut list) = svc.replicas.write() else { continue };
            let mut next = Vec::with_capacity(route.backends.len());
            for b in &route.backends {
                let kept = list.iter().find(|r| r.job == b.job && r.addr == b.addr).cloned();
                let r = kept.unwrap_or_else(|| {
                    let r = Arc::new(Replica {
                        job: b.job,
                        addr: b.addr.clone(),
                        ready: AtomicBool::new(false),
                        draining: AtomicBool::new(false),
                        in_flight: AtomicU32::new(0),
                        drained_sent: AtomicBool::new(false),
                        gone: AtomicBool::new(false),
                        recheck: Notify::new(),
                    });
                    fresh.push((svc.clone(), r.clone()));
                    r
                });
                r.draining.store(b.draining, Ordering::Release);
                next.push(r);
            }
            for old in list.iter().filter(|o| !next.iter().any(|n| Arc::ptr_eq(n, o))) {
                old.gone.store(true, Ordering::Release);
                old.recheck.notify_one();
            }
            *list = next;
        }
        fresh
    }
}
