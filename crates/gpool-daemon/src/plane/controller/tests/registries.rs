//! Registry logins are per user: a job in an image from a registry its
//! owner logged in to starts with that login; another user's job, or an
//! image from another registry, starts without; listings, events and job
//! views never show a password.

use super::*;

fn user(h: &mut Harness, name: &str) -> String {
    let req = api::TokenRequest { user: name.into(), team: None, role: None, ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("a token").token
}

fn login(
    h: &mut Harness,
    who: &str,
    registry: &str,
    user: &str,
    password: &str,
) -> Result<api::RegistryView, ApiError> {
    let req = api::RegistryLogin { username: user.into(), password: password.into() };
    h.call(who, |reply| Call::RegistryLogin { registry: registry.into(), req, reply })
}

/// The registry login of each start order since the last call.
fn auths(h: &mut Harness) -> Vec<Option<String>> {
    h.orders()
        .into_iter()
        .filter_map(|o| match o {
            Order::Start { launch, .. } => Some(launch.registry_auth.map(|s| s.0)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_login_reaches_only_its_owners_jobs_from_that_registry_and_is_never_shown() {
    let mut h = Setup::new().local_gpus(4).build();
    let ana = user(&mut h, "ana");
    let bob = user(&mut h, "bob");
    let v = login(&mut h, &ana, "https://ghcr.io/", "ana", "s3cret").expect("stored");
    assert_eq!((v.registry.as_str(), v.username.as_str()), ("ghcr.io", "ana"));
    assert!(login(&mut h, &ana, "ghcr.io/org", "ana", "x").is_err_and(|e| e.status == 400));
    let listed = h.call(ana.as_str(), |reply| Call::Registries { reply }).expect("list");
    assert_eq!(listed, [api::RegistryView { registry: "ghcr.io".into(), username: "ana".into() }]);
    assert!(
        h.call(bob.as_str(), |reply| Call::Registries { reply }).expect("list").is_empty(),
        "bob sees none of ana's"
    );

    let spec = |image: &str| -> api::JobSpec {
        gpool_api::yaml::from_str(&format!("command: [serve]\nimage: {image}\n")).expect("spec")
    };
    h.call(ana.as_str(), |reply| Call::Submit { specs: vec![spec("ghcr.io/ana/model:1")], reply }).expect("ana's job");
    let got = auths(&mut h);
    assert_eq!(got.len(), 1);
    assert!(got[0].as_deref().is_some_and(|a| a.contains("ghcr.io") && a.contains("YW5hOnMzY3JldA==")), "{got:?}");
    h.call(ana.as_str(), |reply| Call::Submit { specs: vec![spec("docker.io/library/ubuntu")], reply })
        .expect("other registry");
    h.call(bob.as_str(), |reply| Call::Submit { specs: vec![spec("ghcr.io/ana/model:1")], reply }).expect("bob's job");
    assert_eq!(auths(&mut h), [None, None], "another registry, another user: no login");
    let events = format!("{:?}", h.event_messages("registry_login"));
    assert!(!events.contains("s3cret"), "{events}");
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    h.step(vec![Event::Api {
        who: ADMIN.into(),
        call: Call::List { query: super::super::ListQuery { limit: 100, ..Default::default() }, reply: tx },
    }]);
    let jobs = serde_json::to_string(&rx.try_recv().expect("answered").expect("jobs")).expect("json");
    assert!(!jobs.contains("s3cret") && !jobs.contains("YW5hOnMzY3JldA"), "no view carries it");

    let out = h.call(ana.as_str(), |reply| Call::RegistryLogout { registry: "ghcr.io".into(), reply }).expect("logout");
    assert_eq!(out.registry, "ghcr.io");
    assert!(
        h.call(ana.as_str(), |reply| Call::RegistryLogout { registry: "ghcr.io".into(), reply })
            .is_err_and(|e| e.status == 404)
    );
}

/// A replica its node reports pulling its image says so in its view, until the pull is over.
#[test]
fn a_job_pulling_its_image_says_so_until_its_node_reports_the_pull_over() {
    let mut h = Setup::new().build();
    let id = h.submit("command: [serve]\nimage: ghcr.io/org/model:1\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(h.starts().len(), 1);
    let report = |pulling: Vec<(ReplicaKey, String)>| {
        Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
            node: "n1".into(),
            at_ms: T0,
            pulling,
            ..Default::default()
        }))
    };
    let text = "pulling ghcr.io/org/model:1 for 12s: 2 of 5 layers copied".to_string();
    h.step(vec![report(vec![(key(id, 1, 0), text.clone())])]);
    assert_eq!(h.job(id).reason.as_deref(), Some(text.as_str()));
    h.step(vec![report(Vec::new())]);
    assert_eq!(h.job(id).reason, None, "pulled: running, no reason");
}

/// A job in an image that preempted others has its image pulled on its node while their grace periods run, once.
#[test]
fn a_preemptor_s_image_is_pulled_ahead_on_its_nominated_node_with_its_owner_s_login() {
    let mut h = Setup::new().policy("fifo").build();
    let ana = user(&mut h, "ana");
    login(&mut h, &ana, "ghcr.io", "ana", "s3cret").expect("stored");
    h.submit("command: [low]\nresources: {nvidia.com/gpu: 8}\npriority: low\npreemptible: true\ngracePeriod: 30s\n");
    h.orders();
    let spec: api::JobSpec = gpool_api::yaml::from_str(
        "command: [serve]\nimage: ghcr.io/ana/model:2\nresources: {nvidia.com/gpu: 8}\npriority: high\n",
    )
    .expect("spec");
    h.call(ana.as_str(), |reply| Call::Submit { specs: vec![spec], reply }).expect("submitted");
    let prefetches = |orders: Vec<Order>| -> Vec<(String, Option<String>)> {
        orders
            .into_iter()
            .filter_map(|o| match o {
                Order::Prefetch { image, registry_auth } => Some((image, registry_auth.map(|s| s.0))),
                _ => None,
            })
            .collect()
    };
    let got = prefetches(h.orders());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "ghcr.io/ana/model:2");
    assert!(got[0].1.as_deref().is_some_and(|a| a.contains("YW5hOnMzY3JldA==")), "with ana's login");
    h.advance(Duration::from_secs(5));
    assert!(prefetches(h.orders()).is_empty(), "ordered once");
}
