//! Issue 42: advance reservations through the controller, on the manual
//! clock: 8 GPUs, 4 reserved for team vision from 40 s for 10 minutes.

use super::*;

fn token_in(h: &mut Harness, user: &str, team: &str) -> String {
    let req = api::TokenRequest { user: user.into(), team: Some(team.into()), role: None, ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "10.0.0.9:4242".into(), reply }).expect("created").token
}

fn submit_as(h: &mut Harness, token: &str, yaml: &str) -> Result<u64, ApiError> {
    let spec: api::JobSpec = gpool_api::yaml::from_str(yaml).expect("a valid spec");
    h.call(token, |reply| Call::Submit { specs: vec![spec], reply }).map(|s| s.ids[0])
}

fn reservation(name: &str, start_ms: i64) -> api::reservation::ReservationRequest {
    api::reservation::ReservationRequest {
        name: name.into(),
        gpus: 4,
        model: None,
        nodes: Vec::new(),
        start: api::time::rfc3339(start_ms),
        duration: "10m".into(),
        users: Vec::new(),
        teams: vec!["vision".into()],
    }
}

#[test]
fn a_reservation_keeps_four_gpus_for_its_team_and_others_backfill_around_it() {
    let mut h = Setup::new().build();
    let ana = token_in(&mut h, "ana", "ml");
    let vi = token_in(&mut h, "vi", "vision");
    let req = reservation("demo", T0 + 40_000);
    let e = h.call(&ana, |reply| Call::CreateReservation { req, reply }).expect_err("admins only");
    assert_eq!(e.status, 403);
    let req = reservation("demo", T0 + 40_000);
    let made = h.call(ADMIN, |reply| Call::CreateReservation { req, reply }).expect("made");
    assert_eq!((made.gpus, made.state.as_str()), (4, "upcoming"));
    let req = reservation("demo", T0 + 40_000);
    assert_eq!(h.call(ADMIN, |reply| Call::CreateReservation { req, reply }).expect_err("twice").status, 409);

    let six = submit_as(&mut h, &ana, "command: [six]\nresources: {nvidia.com/gpu: 6}\ntimeLimit: 20m\n").expect("six");
    let four =
        submit_as(&mut h, &ana, "command: [four]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 20m\n").expect("four");
    let mine = "command: [mine]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 5m\nreservation: demo\n";
    let e = submit_as(&mut h, &ana, mine).expect_err("ana is not in it");
    assert!(e.message.contains("does not let user ana"), "{}", e.message);
    let e = submit_as(&mut h, &vi, &mine.replace("demo", "nope")).expect_err("no such reservation");
    assert!(e.message.contains("no reservation nope"), "{}", e.message);
    let mine = submit_as(&mut h, &vi, mine).expect("vi's");

    let started: Vec<u64> = h.starts().into_iter().map(|(k, _)| k.job).collect();
    assert_eq!(started, [four], "the 4-GPU job of another team fits beside the reservation");
    let why = h.job(six).reason.unwrap_or_default();
    assert!(why.contains("reserved for demo"), "{why}");
    let why = h.job(mine).reason.unwrap_or_default();
    assert!(why.contains("runs in reservation demo, which starts"), "{why}");

    h.advance(Duration::from_secs(40));
    let started: Vec<u64> = h.starts().into_iter().map(|(k, _)| k.job).collect();
    assert_eq!(started, [mine], "the reservation's job starts when it begins");
    let list = h.call(ADMIN, |reply| Call::Reservations { reply }).expect("list");
    assert_eq!((list[0].state.as_str(), list[0].running_jobs), ("active", 1));

    // Deleted, its GPUs are anyone's; a job still naming it says it can never start.
    let gone = h.call(ADMIN, |reply| Call::DeleteReservation { name: "demo".into(), reply }).expect("deleted");
    assert_eq!(gone.name, "demo");
    assert!(h.call(ADMIN, |reply| Call::Reservations { reply }).expect("list").is_empty());
}

#[test]
fn reservations_survive_a_restart_of_the_control_plane() {
    let dir = std::env::temp_dir().join(format!("gpool-resv-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("state.db");
    let store = || Box::new(gpool_store::Sqlite::open(&db, false).expect("store")) as Box<dyn gpool_store::Store>;
    let mut h = Setup::new().store(store()).build();
    let req = reservation("kept", T0 + 60_000);
    h.call(ADMIN, |reply| Call::CreateReservation { req, reply }).expect("made");
    drop(h);
    let mut h = Setup::new().store(store()).build();
    let list = h.call(ADMIN, |reply| Call::Reservations { reply }).expect("list");
    assert_eq!(list.iter().map(|r| (r.name.as_str(), r.gpus)).collect::<Vec<_>>(), [("kept", 4)]);
    let other = h.submit("command: [x]\nresources: {nvidia.com/gpu: 8}\n");
    assert!(h.starts().is_empty(), "the reserved GPUs are kept after the restart");
    assert!(h.job(other).reason.unwrap_or_default().contains("reserved for kept"));
    let _ = std::fs::remove_dir_all(&dir);
}
