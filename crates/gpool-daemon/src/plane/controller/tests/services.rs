//! Services in the controller: a replica is a job with a `PORT`, the scaler
//! follows the proxy's load samples on the manual clock, ready replicas are
//! drained before they are stopped, and a crashed replica is replaced after
//! a back-off.

use super::*;
use crate::plane::controller::{ProxyReport, ServiceLoad};

const SVC: &str = "name: llm\ncommand: [serve]\nresources: {nvidia.com/gpu: 1}\nservice:\n  readiness: /health\n  replicas: {min: 1, max: 3}\n  target: {inFlight: 4}\n  scaleDownDelay: 3s\n  window: 6s\n";

fn apply(h: &mut Harness, yaml: &str) -> Result<api::ServiceApplied, ApiError> {
    let spec: api::JobSpec = gpool_api::yaml::from_str(yaml).expect("a valid spec");
    h.call(ADMIN, |reply| Call::ApplyService { name: "llm".into(), spec: Box::new(spec), reply })
}

fn view(h: &mut Harness) -> api::ServiceView {
    let all = h.call(ADMIN, |reply| Call::Services { reply }).expect("services");
    all.into_iter().find(|s| s.name == "llm").expect("the service")
}

fn load(h: &mut Harness, in_flight: f64) {
    let l = ServiceLoad { name: "llm".into(), in_flight, requests: 10, period_s: 1.0, ..ServiceLoad::default() };
    h.step(vec![Event::Proxy(ProxyReport::Load(vec![l]))]);
}

/// Reports every running replica ready at its address.
fn all_ready(h: &mut Harness) {
    let reports: Vec<Event> = view(h)
        .replicas
        .into_iter()
        .filter_map(|r| r.address.map(|addr| Event::Proxy(ProxyReport::Ready { job: r.job, addr, ready: true })))
        .collect();
    h.step(reports);
}

#[test]
fn replicas_follow_load_and_ready_ones_drain_before_they_stop() {
    let mut h = Setup::new().local_gpus(4).build();
    let err = apply(&mut h, SVC).expect_err("no proxy");
    assert!(err.message.contains("--proxy-listen"), "{}", err.message);
    h.step(vec![Event::Proxy(ProxyReport::Bound { url: "http://127.0.0.1:8780".into() })]);
    let a = apply(&mut h, SVC).expect("created");
    assert_eq!((a.outcome.as_str(), a.endpoint.as_str()), ("created", "http://127.0.0.1:8780/llm/"));
    let starts = h.starts();
    assert_eq!(starts.len(), 1, "min 1");
    assert_eq!(env(&starts[0].1, "PORT"), Some("29400"));
    assert_eq!(apply(&mut h, SVC).expect("again").outcome, "unchanged");
    all_ready(&mut h);
    assert_eq!((view(&mut h).ready, view(&mut h).desired), (1, 1));

    // 12 in flight at 4 each: 3 replicas at the first sample.
    load(&mut h, 12.0);
    assert_eq!(view(&mut h).desired, 3);
    assert_eq!(h.starts().len(), 2);
    all_ready(&mut h);
    // Load gone: after the window and the down delay, back to one; the two others drain first.
    for _ in 0..12 {
        h.clock.advance(Duration::from_secs(1));
        load(&mut h, 0.0);
    }
    let v = view(&mut h);
    assert_eq!(v.desired, 1);
    let draining: Vec<u64> = v.replicas.iter().filter(|r| r.draining).map(|r| r.job).collect();
    assert_eq!(draining.len(), 2, "{v:?}");
    assert!(signals(&h.orders()).is_empty(), "no stop signal while draining");
    h.step(vec![Event::Proxy(ProxyReport::Drained { job: draining[0] })]);
    assert_eq!(signals(&h.orders()), [(key(draining[0], 1, 0), Signal::TERM)], "drained: stopped");
    h.exit(key(draining[0], 1, 0), Some(0), None);
    // The other never reports drained: stopped after the drain timeout.
    h.advance(Duration::from_secs(31));
    assert_eq!(signals(&h.orders()), [(key(draining[1], 1, 0), Signal::TERM)]);
    h.exit(key(draining[1], 1, 0), Some(0), None);
    let v = view(&mut h);
    assert_eq!((v.replicas.len(), v.ready), (1, 1), "{v:?}");
    assert!(h.starts().is_empty(), "stopped replicas are no failures: nothing replaces them");
}

#[test]
fn a_crashed_replica_is_replaced_after_a_back_off_and_an_update_rolls() {
    let mut h = Setup::new().local_gpus(2).build();
    h.step(vec![Event::Proxy(ProxyReport::Bound { url: "http://127.0.0.1:8780".into() })]);
    apply(&mut h, SVC).expect("created");
    let first = h.starts()[0].0;
    h.exit(first, Some(1), None);
    assert!(h.starts().is_empty(), "not at once: a crash loop must not spin");
    h.advance(Duration::from_secs(2));
    assert_eq!(h.starts().len(), 1, "replaced after the back-off");
    all_ready(&mut h);
    let old = view(&mut h).replicas[0].job;

    let updated = apply(&mut h, &SVC.replace("command: [serve]", "command: [serve, --v2]")).expect("updated");
    assert_eq!((updated.outcome.as_str(), updated.generation), ("updated", 2));
    let new = h.starts();
    assert_eq!(new.len(), 1, "one surge replica");
    assert!(view(&mut h).replicas.iter().all(|r| !r.draining), "the old one serves until the new one is ready");
    all_ready(&mut h);
    let v = view(&mut h);
    assert!(v.replicas.iter().any(|r| r.job == old && r.draining), "{v:?}");
    h.step(vec![Event::Proxy(ProxyReport::Drained { job: old })]);
    assert_eq!(signals(&h.orders()), [(key(old, 1, 0), Signal::TERM)]);
}
