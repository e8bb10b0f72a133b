//! The service proxy (`--proxy-listen`): one HTTP/1.1 endpoint in front of
//! every inference service. A request goes to the service named by the
//! first label of its `Host` header (`llm.example.com`) or else by its first
//! path segment (`/llm/v1/chat`, forwarded as `/v1/chat`); within it, to the
//! ready replica with the fewest requests in flight. Bodies stream through
//! both ways unbuffered (server-sent events, chunked answers); connections
//! to replicas are pooled and kept alive.
//!
//! - No ready replica (a service at zero, or all starting): the request is
//!   held until one is ready, at most [`HOLD_LIMIT`] per service for at
//!   most [`HOLD_FOR`]; beyond that, 503 with `Retry-After`.
//! - A replica that cannot be reached: an idempotent request without a body
//!   is retried on another replica (at most [`TRIES`] in all); any other
//!   gets 502. The replica is probed again at once.
//! - Draining replicas get no new request; once none is in flight the
//!   controller hears `Drained` and stops the replica.
//!
//! The proxy decides nothing about replicas: it follows the controller's
//! routing table (a `watch` channel) and reports readiness, drains and load
//! (each second) as [`Event::Proxy`]. Readiness is probed, as Kubernetes
//! does: every 100 ms until a replica first answers, every 2 s after.

mod probe;
mod table;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

use crate::plane::controller::{Event, ProxyReport, Routes, ServiceLoad};
use table::{Replica, Service, Table};

/// Requests held per service while no replica is ready.
pub const HOLD_LIMIT: u32 = 1000;
/// How long a request is held at most.
pub const HOLD_FOR: Duration = Duration::from_secs(120);
/// Attempts of an idempotent request on distinct replicas.
pub const TRIES: usize = 3;
/// How often load is sampled and sent to the controller.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

type Body = BoxBody<Bytes, hyper::Error>;
type Upstream = Client<HttpConnector, Body>;

struct Proxy {
    table: Table,
    client: Upstream,
    events: Sender<Event>,
}

/// Serves the proxy on `listener` until `stopping` resolves, with at most
/// `limits.connections` client connections at once (the rest wait in the
/// kernel's backlog) and each closed when it does not send a whole request
/// head within `limits.header_timeout`: half-sent requests and idle
/// keep-alive connections cannot hold the daemon's descriptors (the API's
/// own listener is bounded the same way, apart: `listen.rs`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    mut routes: watch::Receiver<Arc<Routes>>,
    events: Sender<Event>,
    limits: crate::plane::listen::Limits,
    stopping: impl std::future::Future<Output = ()>,
) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(1024)
        .build(connector);
    let proxy = Arc::new(Proxy { table: Table::default(), client, events });
    if let Ok(addr) = listener.local_addr() {
        let _ = proxy.events.send(Event::Proxy(ProxyReport::Bound { url: format!("http://{addr}") }));
    }
    let follow = {
        let proxy = proxy.clone();
        async move {
            loop {
                let current = routes.borrow_and_update().clone();
                for (svc, replica) in proxy.table.update(&current) {
                    tokio::spawn(probe::probe(proxy.clone(), svc, replica));
                }
                if routes.changed().await.is_err() {
                    return;
                }
            }
        }
    };
    let sampler = {
        let proxy = proxy.clone();
        async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = Instant::now();
            loop {
                tick.tick().await;
                let period = last.elapsed().as_secs_f64();
                last = Instant::now();
                proxy.sample(period);
            }
        }
    };
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let accept = async {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else { return };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors: wait a moment rather than spin.
                    tracing::warn!("the service proxy cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let proxy = proxy.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(proxy.handle(req, peer).await) }
                });
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                drop(permit);
            });
        }
    };
    tokio::select! {
        () = stopping => {}
        () = follow => {}
        () = sampler => {}
        () = accept => {}
    }
}

/// Keeps a count up while a request (and its streamed answer) lives.
struct Held(Arc<Service>, Option<Arc<Replica>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(r) = &self.1 {
            r.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn text(status: StatusCode, msg: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(msg + "\n")).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), not forwarded.
const HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

impl Proxy {
    /// The service a request is for, and the path to forward; else the name it asked for.
    fn route(&self, req: &Request<Incoming>) -> Result<(Arc<Service>, String), String> {
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        let label = host.split(['.', ':']).next().unwrap_or("");
        if !label.is_empty()
            && host.contains('.')
            && let Some(svc) = self.table.service(label)
        {
            return Ok((svc, pq.to_string()));
        }
        let rest = pq.strip_prefix('/').unwrap_or(pq);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (name, tail) = rest.split_at(end);
        match self.table.service(name) {
            Some(svc) => {
                let tail = if tail.starts_with('/') { tail.to_string() } else { format!("/{tail}") };
                Ok((svc, tail))
            }
            None => Err(name.to_string()),
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let t0 = Instant::now();
        let (svc, path) = match self.route(&req) {
            Ok(x) => x,
            Err(name) => {
                return text(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no service {name:?} here: send requests to /NAME/… or Host: NAME.…; `gpool services` lists them"
                    ),
                );
            }
        };
        svc.in_flight.fetch_add(1, Ordering::AcqRel);
        let mut held = Held(svc.clone(), None);
        let retryable =
            matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE)
                && hyper::body::Body::is_end_stream(req.body());
        let (parts, body) = req.into_parts();
        let mut body = Some(body);
        let mut tried: Vec<u64> = Vec::new();
        let deadline = t0 + HOLD_FOR;
        let mut last_error = String::new();
        while tried.len() < TRIES {
            let Some(replica) = self.wait_for_replica(&svc, &tried, deadline).await else {
                let why = if svc.held.load(Ordering::Acquire) >= HOLD_LIMIT {
                    format!("service {}: {HOLD_LIMIT} requests already wait for a replica", svc.name)
                } else if tried.is_empty() {
                    format!("service {}: no replica became ready within {}s", svc.name, HOLD_FOR.as_secs())
                } else {
                    format!("service {}: no other replica to retry on ({last_error})", svc.name)
                };
                svc.record(t0.elapsed().as_secs_f64(), true);
                let mut r = text(StatusCode::SERVICE_UNAVAILABLE, why);
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            };
            tried.push(replica.job);
            let uri = format!("http://{}{}", replica.addr, path);
            let mut out = Request::builder().method(parts.method.clone()).uri(uri).version(hyper::Version::HTTP_11);
            for (k, v) in &parts.headers {
                if !HOP.contains(&k.as_str()) {
                    out = out.header(k, v);
                }
            }
            out = out.header("x-forwarded-for", peer.ip().to_string());
            let b: Body = match (retryable, body.take()) {
                (false, Some(b)) => b.boxed(),
                _ => Empty::new().map_err(|never| match never {}).boxed(),
            };
            let Ok(out) = out.body(b) else {
                replica.in_flight.fetch_sub(1, Ordering::AcqRel);
                return text(StatusCode::BAD_REQUEST, "the request cannot be forwarded (a header is malformed)".into());
            };
            match self.client.request(out).await {
                Ok(resp) => {
                    svc.record(t0.elapsed().as_secs_f64(), false);
                    held.1 = Some(replica);
                    let (mut rp, rb) = resp.into_parts();
                    for h in HOP {
                        rp.headers.remove(h);
                    }
                    // The guard lives as long as the streamed body: in-flight counts cover the whole answer.
                    let body = rb.map_frame(move |f| {
                        let _ = &held;
                        f
                    });
                    return Response::from_parts(rp, body.boxed());
                }
                Err(e) => {
                    replica.in_flight.fetch_sub(1, Ordering::AcqRel);
                    last_error = format!("replica job {} at {}: {e}", replica.job, replica.addr);
                    if replica.ready.swap(false, Ordering::AcqRel) {
                        let _ = self.events.send(Event::Proxy(ProxyReport::Ready {
                            job: replica.job,
                            addr: replica.addr.clone(),
                            ready: false,
                        }));
                    }
                    replica.recheck.notify_one();
                    if !retryable {
                        break;
                    }
                }
            }
        }
        svc.record(t0.elapsed().as_secs_f64(), true);
        text(StatusCode::BAD_GATEWAY, format!("service {}: {last_error}", svc.name))
    }

    /// A ready replica (its in-flight count taken), holding the request while none is.
    async fn wait_for_replica(&self, svc: &Arc<Service>, tried: &[u64], deadline: Instant) -> Option<Arc<Replica>> {
        if let Some(r) = svc.pick(tried) {
            return Some(r);
        }
        let held_before = svc.held.fetch_add(1, Ordering::AcqRel);
        if held_before >= HOLD_LIMIT {
            svc.held.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // The first request for a service at zero: tell the scaler now, not at the next sample.
        if held_before == 0 && svc.replicas.read().is_ok_and(|l| l.is_empty()) {
            let wake = ServiceLoad {
                name: svc.name.clone(),
                in_flight: f64::from(svc.in_flight.load(Ordering::Acquire)),
                ..ServiceLoad::default()
            };
            let _ = self.events.send(Event::Proxy(ProxyReport::Load(vec![wake])));
        }
        let got = loop {
            let woken = svc.ready_changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(r) = svc.pick(tried) {
                break Some(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, woken).await.is_err() {
                break svc.pick(tried);
            }
        };
        svc.held.fetch_sub(1, Ordering::AcqRel);
        got
    }

    /// Sends each service's load, and the drains that are done.
    fn sample(&self, period_s: f64) {
        let services = self.table.all();
        if services.is_empty() {
            return;
        }
        let mut loads = Vec::with_capacity(services.len());
        for svc in services {
            if let Ok(list) = svc.replicas.read() {
                for r in list.iter() {
                    if r.draining.load(Ordering::Acquire)
                        && r.in_flight.load(Ordering::Acquire) == 0
                        && !r.drained_sent.swap(true, Ordering::AcqRel)
                    {
                        let _ = self.events.send(Event::Proxy(ProxyReport::Drained { job: r.job }));
                    }
                }
            }
            loads.push(svc.sample(period_s));
        }
        let _ = self.events.send(Event::Proxy(ProxyReport::Load(loads)));
    }
}
