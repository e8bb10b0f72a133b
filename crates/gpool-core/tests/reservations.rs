//! Issue 42: advance reservations. GPUs set aside for a team over a window:
//! before it, only jobs that end by its start may use them; in it, only the
//! reservation's jobs, and those only on its GPUs; after it, anyone.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use gpool_core::reservation::{Reservation, ReservationError};
use gpool_core::{JobId, PendingReason, ReservationRequest};

fn request(name: &str, gpus: u32, start: i64, end: i64) -> ReservationRequest {
    ReservationRequest {
        name: Arc::from(name),
        gpus,
        model: None,
        nodes: Vec::new(),
        start: t(start),
        end: t(end),
        users: BTreeSet::new(),
        teams: BTreeSet::from([Arc::from("vision")]),
    }
}

fn reserve(c: &mut Cluster, r: &ReservationRequest) -> Reservation {
    let made = c.snap.reservable(r).expect("reservable");
    let mut all = c.snap.reservations().to_vec();
    all.push(made.clone());
    c.snap.set_reservations(all);
    made
}

fn in_reservation(j: J, name: &str) -> J {
    let mut j = j;
    j.spec.reservation = Some(Arc::from(name));
    j
}

fn started(c: &Cluster, now: i64) -> Vec<JobId> {
    let mut s: Vec<JobId> = c.plan(t(now)).starts.iter().map(|s| s.job).collect();
    s.sort();
    s
}

/// The scenario: 8 GPUs, 4 reserved for team vision from 40 s for 10 minutes.
#[test]
fn a_reservation_keeps_its_gpus_for_its_team_from_its_start() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    let r = reserve(&mut c, &request("demo", 4, 40, 640));
    assert_eq!(r.gpu_count(), 4);
    let six = c.submit(job("ana").team("ml").gpus(6).limit(1200));
    let four = c.submit(job("bo").team("ml").gpus(4).limit(1200));
    let mine = c.submit(in_reservation(job("vi").team("vision").gpus(4).limit(600), "demo"));
    let plan = c.plan(t(0));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [four], "{plan:#?}");
    assert_eq!(plan.reason_of(six), Some(&PendingReason::ReservedAhead { name: Arc::from("demo"), at: t(40) }));
    assert!(c.reason(&plan, six).contains("reserved for demo"), "{}", c.reason(&plan, six));
    assert_eq!(plan.reason_of(mine), Some(&PendingReason::ReservationStarts { name: Arc::from("demo"), at: t(40) }));
    assert_eq!(plan.wake_at, Some(t(40)), "the pass wakes when the window opens");
    c.apply(&plan);
    let plan = c.plan(t(40));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [mine]);
    let on: u64 = plan.starts[0].placement.iter().map(|p| p.gpus).fold(0, |a, b| a | b);
    assert_eq!(on, r.devices[0].1, "on the reserved GPUs");
}

#[test]
fn before_the_window_a_job_that_ends_by_its_start_may_use_the_reserved_gpus() {
    let cases = [
        // (time limit in s, submitted at 0: starts now?)
        (Some(30), true),
        (Some(40), true),
        (Some(41), false),
        (None, false),
    ];
    for (limit, starts) in cases {
        let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
        reserve(&mut c, &request("demo", 8, 40, 640));
        let mut j = job("ana").team("ml").gpus(2);
        if let Some(l) = limit {
            j = j.limit(l);
        }
        let id = c.submit(j);
        assert_eq!(started(&c, 0).contains(&id), starts, "limit {limit:?}");
    }
}

#[test]
fn in_the_window_only_its_jobs_use_its_gpus_and_only_those() {
    let mut c = Cluster::new("default").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
    let mut r = request("demo", 8, 0, 600);
    r.nodes = vec![Arc::from("b")];
    reserve(&mut c, &r);
    // Its job may not spill onto node a, though a is idle.
    let big = c.submit(in_reservation(job("vi").team("vision").gpus(8).replicas(2), "demo"));
    let other = c.submit(job("ana").team("ml").gpus(8).limit(60));
    let plan = c.plan(t(1));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [other], "{plan:#?}");
    assert_eq!(c.nodes_of(&plan, other), ["a"]);
    assert!(plan.reason_of(big).is_some());
    // A job of another team naming it is not let in.
    let stranger = c.submit(in_reservation(job("eve").team("ml").gpus(1), "demo"));
    assert_eq!(c.plan(t(1)).reason_of(stranger), Some(&PendingReason::NotInReservation { name: Arc::from("demo") }));
}

#[test]
fn after_the_window_its_gpus_are_anyones_and_its_late_jobs_say_it_is_over() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB");
    reserve(&mut c, &request("demo", 8, 0, 100));
    // 7 GPUs: one stays free afterwards, so the pass looks at the late job too.
    let other = c.submit(job("ana").team("ml").gpus(7));
    let plan = c.plan(t(50));
    assert!(plan.starts.is_empty() && plan.wake_at == Some(t(100)), "{plan:#?}");
    assert_eq!(plan.reason_of(other), Some(&PendingReason::ReservedAhead { name: Arc::from("demo"), at: t(0) }));
    let late = c.submit(in_reservation(job("vi").team("vision").gpus(1), "demo"));
    let plan = c.plan(t(100));
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [other]);
    assert_eq!(plan.reason_of(late), Some(&PendingReason::ReservationGone { name: Arc::from("demo") }));
}

#[test]
fn gpus_are_chosen_packed_of_the_model_asked_and_never_twice_over_a_window() {
    let mut c = Cluster::new("default").node("a", 4, "A100-80GB").node("b", 8, "H100-80GB").node("c", 8, "H100-80GB");
    let mut r = request("one", 6, 0, 100);
    r.model = Some(Arc::from("H100-80GB"));
    let one = reserve(&mut c, &r);
    assert_eq!(one.devices, [(c.id("b"), 0b11_1111)], "packed on one node of the model");
    // Overlapping: the 10 H100s left are b's 2 and c's 8.
    let mut r2 = request("two", 10, 50, 150);
    r2.model = Some(Arc::from("H100-80GB"));
    let two = c.snap.reservable(&r2).expect("two");
    assert_eq!(two.gpu_count(), 10);
    r2.gpus = 11;
    let err = c.snap.reservable(&r2).expect_err("too many");
    assert_eq!(err, ReservationError::NotEnough { want: 11, free: 10, what: " of model H100-80GB".into() });
    assert!(err.to_string().contains("only 10 GPU(s) of model H100-80GB"), "{err}");
    // Not overlapping: all 16 again.
    let mut r3 = request("three", 16, 100, 200);
    r3.model = Some(Arc::from("H100-80GB"));
    assert_eq!(c.snap.reservable(&r3).expect("after").gpu_count(), 16);
    for (bad, want) in [
        (ReservationRequest { gpus: 0, ..request("x", 1, 0, 1) }, ReservationError::NoGpus),
        (request("x", 1, 5, 5), ReservationError::EmptyWindow),
        (ReservationRequest { teams: BTreeSet::new(), ..request("x", 1, 0, 1) }, ReservationError::NobodyAdmitted),
        (request("one", 1, 0, 1), ReservationError::Exists("one".into())),
    ] {
        assert_eq!(c.snap.reservable(&bad), Err(want));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Whatever is reserved, whatever is asked, and whenever the pass runs:
    /// a start on reserved GPUs is a member's in the window, or a job that
    /// ends by the window's start; a member starts only in its window and
    /// only on its GPUs.
    #[test]
    fn no_plan_breaks_a_reservation(
        reserved in 1u32..=12,
        start in 0i64..=100,
        span in 1i64..=200,
        now in 0i64..=300,
        jobs in proptest::collection::vec((1u32..=6, proptest::option::of(1u64..=300), proptest::bool::ANY, proptest::bool::ANY), 1..8),
    ) {
        let mut c = Cluster::new("default").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
        let r = reserve(&mut c, &request("demo", reserved, start, start + span));
        let mut specs = std::collections::BTreeMap::new();
        for (gpus, limit, member, vision) in jobs {
            let mut j = job("u").team(if vision { "vision" } else { "ml" }).gpus(gpus);
            if let Some(l) = limit {
                j = j.limit(l);
            }
            if member {
                j = in_reservation(j, "demo");
            }
            let spec = j.spec.clone();
            specs.insert(c.submit(j), spec);
        }
        let plan = c.plan(t(now));
        let held = |node: gpool_core::NodeId, gpus: u64| r.devices.iter().any(|(n, m)| *n == node && m & gpus != 0);
        for s in &plan.starts {
            let spec = &specs[&s.job];
            let member = spec.reservation.is_some();
            if member {
                proptest::prop_assert!(r.active(t(now)) && r.admits(spec), "{} started outside its window or not let in", s.job);
                for p in &s.placement {
                    let mine = r.devices.iter().filter(|(n, _)| *n == p.node).fold(0, |a, (_, m)| a | m);
                    proptest::prop_assert!(p.gpus & !mine == 0, "{} ran off its reservation's GPUs", s.job);
                }
            } else if s.placement.iter().any(|p| held(p.node, p.gpus)) {
                let ends = spec.time_limit.map(|l| t(now).plus(l));
                proptest::prop_assert!(
                    t(now) >= r.end || (t(now) < r.start && ends.is_some_and(|e| e <= r.start)),
                    "{} took reserved GPUs and ends {ends:?}, after the start {:?}", s.job, r.start
                );
            }
        }
    }
}
