//! Readiness probes: a replica takes requests once `GET <readiness path>`
//! answers 2xx or 3xx. Probed every 100 ms until it first answers (a cold
//! start is noticed within 100 ms), every 2 s after; three failures in a
//! row, or one failed request, take it out of rotation until it answers again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::Request;

use super::table::{Replica, Service};
use super::{Body, Proxy};
use crate::plane::controller::{Event, ProxyReport};

const STARTING: Duration = Duration::from_millis(100);
const READY: Duration = Duration::from_secs(2);
const TIMEOUT: Duration = Duration::from_secs(1);
/// Failures in a row that take a ready replica out.
const FAILURES: u32 = 3;

pub(super) async fn probe(proxy: Arc<Proxy>, svc: Arc<Service>, replica: Arc<Replica>) {
    let mut failures = 0;
    while !replica.gone.load(Ordering::Acquire) {
        let ok = answers(&proxy, &svc, &replica).await;
        let was = replica.ready.load(Ordering::Acquire);
        failures = if ok { 0 } else { failures + 1 };
        let now = if ok {
            true
        } else if was {
            failures < FAILURES
        } else {
            false
        };
        if now != was {
            replica.ready.store(now, Ordering::Release);
            let report = ProxyReport::Ready { job: replica.job, addr: replica.addr.clone(), ready: now };
            let _ = proxy.events.send(Event::Proxy(report));
            if now {
                svc.ready_changed.notify_waiters();
            }
        }
        let wait = if replica.ready.load(Ordering::Acquire) { READY } else { STARTING };
        // A failed request wakes the probe at once; a replica leaving the table ends it.
        let _ = tokio::time::timeout(wait, replica.recheck.notified()).await;
    }
}

async fn answers(proxy: &Proxy, svc: &Service, replica: &Replica) -> bool {
    let path = svc.readiness.read().map(|p| p.clone()).unwrap_or_else(|_| "/".into());
    let body: Body = Empty::new().map_err(|never| match never {}).boxed();
    let Ok(req) = Request::get(format!("http://{}{}", replica.addr, path)).body(body) else { return false };
    match tokio::time::timeout(TIMEOUT, proxy.client.request(req)).await {
        Ok(Ok(resp)) => {
            let ok = resp.status().is_success() || resp.status().is_redirection();
            // Read the body so the connection goes back to the pool.
            let _ = resp.into_body().collect().await;
            ok
        }
        _ => false,
    }
}
