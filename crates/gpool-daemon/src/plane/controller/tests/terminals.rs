//! `gpool attach`: the node that runs an interactive job is told to join the
//! session, the launch carries the detach grace, and whoever may not type
//! into the job, or a job with no terminal, is refused with why.

use super::*;

fn token(h: &mut Harness, user: &str, role: Option<&str>) -> String {
    let req = api::TokenRequest { user: user.into(), team: None, role: role.map(String::from), ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("a token").token
}

fn attach(h: &mut Harness, who: &str, id: u64) -> Result<api::terminal::AttachView, ApiError> {
    h.call(who, |reply| Call::Attach { id, session: "5e55".into(), reply })
}

#[test]
fn the_owner_attaches_and_the_node_is_told_to_join_the_session() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [bash]\nresources: {nvidia.com/gpu: 1}\ninteractive: {detachGrace: 90s}\n");
    let launch = h
        .orders()
        .into_iter()
        .find_map(|o| match o {
            Order::Start { launch, .. } => Some(launch),
            _ => None,
        })
        .expect("started");
    assert_eq!(launch.tty_grace_ms, Some(90_000), "the shim gets the grace");
    let view = attach(&mut h, ADMIN, id).expect("attached");
    assert_eq!((view.job, view.session.as_str(), view.detach_grace_s), (id, "5e55", 90));
    let joins: Vec<_> = h.orders().into_iter().filter(|o| matches!(o, Order::Attach { .. })).collect();
    assert_eq!(joins, vec![Order::Attach { key: key(id, 1, 0), session: "5e55".into() }]);
}

#[test]
fn who_may_not_type_and_what_has_no_terminal_are_refused_with_why() {
    let mut h = Setup::new().build();
    let reader = token(&mut h, "rita", Some("reader"));
    let other = token(&mut h, "bob", None);
    let id = h.submit("command: [bash]\nresources: {nvidia.com/gpu: 1}\ninteractive: {}\n");
    h.orders();
    for who in [&reader, &other] {
        let e = attach(&mut h, who, id).expect_err("not theirs");
        assert!(e.status == 403 || e.status == 404, "{e:?}");
    }
    let e = attach(&mut h, &reader, id).expect_err("a reader sees, does not type");
    assert!(e.message.contains("owner") || e.status == 403, "{e:?}");
    let batch = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\n");
    let e = attach(&mut h, ADMIN, batch).expect_err("no terminal");
    assert!(e.message.contains("not interactive") && e.message.contains("gpool logs -f"), "{e:?}");
    // All GPUs taken: the next interactive job waits, and says when attach works.
    let waits = h.submit("command: [bash]\nresources: {nvidia.com/gpu: 8}\ninteractive: {}\n");
    let e = attach(&mut h, ADMIN, waits).expect_err("pending");
    assert!(e.message.contains("pending"), "{e:?}");
    h.exit(key(id, 1, 0), Some(0), None);
    let e = attach(&mut h, ADMIN, id).expect_err("ended");
    assert!(e.message.contains("succeeded"), "{e:?}");
    assert!(h.orders().iter().all(|o| !matches!(o, Order::Attach { .. })), "no refused attach reaches a node");
}

#[test]
fn an_interactive_job_is_one_replica_within_its_grace_bounds() {
    let mut h = Setup::new().build();
    for (yaml, says) in [
        ("command: [bash]\nreplicas: 2\ninteractive: {}\n", "one replica"),
        ("command: [bash]\narray: 0-3\ninteractive: {}\n", "an array"),
        ("command: [bash]\ninteractive: {detachGrace: 1s}\n", "5s to 24h"),
        ("command: [bash]\ninteractive: {detachGrace: 2d}\n", "5s to 24h"),
        ("command: [bash]\nexpose: [0]\n", "65535"),
    ] {
        let spec: api::JobSpec = gpool_api::yaml::from_str(yaml).expect("a spec");
        let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err(yaml);
        assert!(e.message.contains(says), "{yaml}: {e:?}");
    }
}
