//! `gpool profile`: the order reaches the node of each replica, the answer
//! waits for the captures (or their deadline), the result is kept as the
//! job's latest profile, and only the job's owner or an admin may take one.

use gpool_api::agent::{DeviceReading, ProfileCapture};

use super::*;
use crate::plane::controller::profiles::GRACE_MS;

fn token(h: &mut Harness, user: &str, role: Option<&str>) -> String {
    let req = api::TokenRequest { user: user.into(), team: None, role: role.map(String::from), ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("a token").token
}

/// Asks for a profile; the receiver of its answer (which comes later).
fn ask(
    h: &mut Harness,
    who: &str,
    id: u64,
    seconds: u32,
) -> tokio::sync::oneshot::Receiver<Result<api::ProfileView, ApiError>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api { who: who.into(), call: Call::Profile { id, seconds, native: false, reply: tx } }]);
    rx
}

fn profile_orders(h: &mut Harness) -> Vec<(ReplicaKey, u64, u32)> {
    h.orders()
        .into_iter()
        .filter_map(|o| match o {
            Order::Profile { key, order } => Some((key, order.profile, order.seconds)),
            _ => None,
        })
        .collect()
}

fn input_bound() -> ProfileCapture {
    ProfileCapture {
        pid: Some(4242),
        stacks: "<module> (t.py:1);__getitem__ (t.py:5) 450\n<module> (t.py:1);step (t.py:9) 50\n".into(),
        samples: (0..50)
            .map(|i| DeviceReading { t_ms: i * 100, device: "GPU-0".into(), util_pct: 7.0, memory_used_mb: None })
            .collect(),
        error: None,
    }
}

#[test]
fn a_profile_is_ordered_answered_when_the_capture_arrives_and_kept() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\n");
    h.orders();
    let mut rx = ask(&mut h, ADMIN, id, 5);
    let orders = profile_orders(&mut h);
    assert_eq!(orders.len(), 1, "{orders:?}");
    let (k, profile, seconds) = orders[0];
    assert_eq!((k, seconds), (key(id, 1, 0), 5));
    assert!(rx.try_recv().is_err(), "no answer before the capture");

    h.step(vec![Event::Agent(AgentReport::Profiled { key: k, profile, capture: input_bound() })]);
    let v = rx.try_recv().expect("answered").expect("a profile");
    assert_eq!(v.bottleneck, "input-bound");
    assert_eq!((v.main_thread_samples, v.replicas[0].pid), (500, Some(4242)));
    assert_eq!(v.accelerator_busy_pct, Some(7.0));
    assert!(h.event_kinds().contains(&"profiled".to_string()));

    let kept = h.call(ADMIN, |reply| Call::LatestProfile { id, reply }).expect("kept");
    assert_eq!(kept.view(), v);
    // A second capture with the same number (a retried report) changes nothing.
    h.step(vec![Event::Agent(AgentReport::Profiled { key: k, profile, capture: ProfileCapture::default() })]);
    assert_eq!(h.call(ADMIN, |reply| Call::LatestProfile { id, reply }).expect("kept").view(), v);
}

#[test]
fn a_node_that_never_answers_is_named_at_the_deadline_and_nothing_is_kept() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\n");
    let mut rx = ask(&mut h, ADMIN, id, 2);
    let (k, profile, _) = profile_orders(&mut h)[0];
    h.advance(Duration::from_millis(2_000 + GRACE_MS as u64 - 1));
    assert!(rx.try_recv().is_err(), "still within its time");
    h.advance(Duration::from_millis(1));
    let err = rx.try_recv().expect("answered").expect_err("no stacks");
    assert_eq!(err.status, 504, "no node answered");
    assert!(err.message.contains("rank 0 on node") && err.message.contains("sent no profile within 30 s"), "{err:?}");
    // The capture that comes too late is dropped.
    h.step(vec![Event::Agent(AgentReport::Profiled { key: k, profile, capture: input_bound() })]);
    let r = h.call(ADMIN, |reply| Call::LatestProfile { id, reply });
    assert!(r.is_err_and(|e| e.status == 404 && e.message.contains("has not been profiled")));
}

#[test]
fn only_the_owner_or_an_admin_may_profile_a_running_job() {
    let mut h = Setup::new().build();
    let ana = token(&mut h, "ana", None);
    let bob = token(&mut h, "bob", None);
    let reader = token(&mut h, "rita", Some("reader"));
    let spec: api::JobSpec =
        gpool_api::yaml::from_str("command: [train]\nresources: {nvidia.com/gpu: 1}\n").expect("spec");
    let id = h.call(ana.as_str(), |reply| Call::Submit { specs: vec![spec], reply }).expect("ana's job").ids[0];
    h.orders();
    let refused = |h: &mut Harness, who: &str, id: u64, seconds: u32| -> ApiError {
        let mut rx = ask(h, who, id, seconds);
        rx.try_recv().expect("answered at once").expect_err("refused")
    };
    assert_eq!(refused(&mut h, &bob, id, 5).status, 404, "bob does not see ana's job");
    let e = refused(&mut h, &reader, id, 5);
    assert_eq!(e.status, 403, "a reader sees it but may not profile it: {e:?}");
    assert_eq!(refused(&mut h, &ana, id, 0).status, 400);
    assert_eq!(refused(&mut h, &ana, id, 301).status, 400);
    assert_eq!(refused(&mut h, &ana, 999, 5).status, 404);
    assert!(profile_orders(&mut h).is_empty(), "nothing was ordered");
    let _ana = ask(&mut h, &ana, id, 5);
    assert_eq!(profile_orders(&mut h).len(), 1, "the owner may");
    let e = refused(&mut h, ADMIN, id, 5);
    assert!(e.status == 409 && e.message.contains("being profiled already"), "one at a time: {e:?}");
    // An admin may profile anyone's job.
    let bobs_spec: api::JobSpec =
        gpool_api::yaml::from_str("command: [x]\nresources: {nvidia.com/gpu: 1}\n").expect("spec");
    let bobs = h.call(bob.as_str(), |reply| Call::Submit { specs: vec![bobs_spec], reply }).expect("bob's").ids[0];
    h.orders();
    let _admin = ask(&mut h, ADMIN, bobs, 5);
    assert_eq!(profile_orders(&mut h).len(), 1, "an admin may");
    // A pending job is not profiled.
    let big = h.submit("command: [x]\nresources: {nvidia.com/gpu: 8}\n");
    let e = refused(&mut h, ADMIN, big, 5);
    assert!(e.status == 409 && e.message.contains("pending"), "{e:?}");
}
