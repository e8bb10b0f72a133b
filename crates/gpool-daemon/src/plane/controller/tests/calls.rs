//! The call surface: tokens, access and visibility, and all-or-nothing batches.

use super::*;
use crate::plane::controller::ListQuery;

fn token(h: &mut Harness, user: &str, role: Option<&str>, ttl: Option<&str>) -> api::TokenCreated {
    let req = api::TokenRequest {
        user: user.into(),
        team: Some("ml".into()),
        role: role.map(String::from),
        ttl: ttl.map(String::from),
    };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "10.0.0.9:4242".into(), reply }).expect("created")
}

fn user_token(h: &mut Harness, user: &str) -> String {
    token(h, user, None, None).token
}

#[test]
fn a_bad_token_is_refused_with_401_whatever_the_call() {
    let mut h = Setup::new().build();
    let e = h.call("nope", |reply| Call::Nodes { page: None, reply }).expect_err("refused");
    assert_eq!(e.status, 401);
    let e = h.call("nope", |reply| Call::Get { id: 1, reply }).expect_err("refused");
    assert_eq!(e.status, 401);
}

#[test]
fn users_see_their_own_jobs_and_others_are_not_found() {
    let mut h = Setup::new().build();
    let alice = user_token(&mut h, "alice");
    let bob = user_token(&mut h, "bob");
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let id = h.call(&alice, |reply| Call::Submit { specs: vec![spec], reply }).expect("ok").ids[0];
    assert_eq!(h.call(&alice, |reply| Call::Get { id, reply }).expect("hers").user, "alice");
    assert_eq!(h.call(&bob, |reply| Call::Get { id, reply }).expect_err("not his").status, 404);
    assert_eq!(h.call(&bob, |reply| Call::Cancel { id, from: "test".into(), reply }).expect_err("not his").status, 404);
    assert_eq!(h.call(&bob, |reply| Call::Get { id: 987_654, reply }).expect_err("none").status, 404);
    let who = h.call(&bob, |reply| Call::WhoAmI { reply }).expect("anyone may ask");
    assert_eq!((who.user.as_str(), who.role.as_str()), ("bob", "user"));
}

#[test]
fn node_tokens_speak_only_the_agent_protocol_and_users_only_the_api() {
    let mut h = Setup::new().build();
    let node = token(&mut h, "node-a", Some("node"), None).token;
    let alice = user_token(&mut h, "alice");
    assert_eq!(h.call(&node, |reply| Call::Nodes { page: None, reply }).expect_err("api").status, 403);
    let e = h.call(&alice, |reply| Call::Poll { node: "n1".into(), epoch: 1, after: 0, reply }).expect_err("agent");
    assert_eq!(e.status, 403);
    let req = api::TokenRequest { user: "mallory".into(), team: None, role: Some("admin".into()), ttl: None };
    let e = h.call(&alice, |reply| Call::CreateToken { req, from: "x".into(), reply }).expect_err("admins only");
    assert_eq!(e.status, 403);
}

#[test]
fn a_batch_with_one_bad_spec_is_refused_whole() {
    let mut h = Setup::new().build();
    let good: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let bad: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nresources: {nvidia.com/gpu: 64}\n").expect("spec");
    let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![good, bad], reply }).expect_err("refused");
    assert_eq!(e.status, 400);
    assert!(e.message.starts_with("jobs[1]."), "the bad spec is named: {}", e.message);
    let list = h
        .call(ADMIN, |reply| Call::List { query: super::super::ListQuery { limit: 10, ..Default::default() }, reply })
        .expect("list");
    assert!(list.jobs.is_empty(), "nothing of the batch was kept");
    assert!(h.starts().is_empty());
}

#[test]
fn a_revoked_token_gets_401_at_its_next_request_and_the_revocation_is_audited() {
    let mut h = Setup::new().build();
    let alice = token(&mut h, "alice", None, None);
    assert_eq!(h.call(&alice.token, |reply| Call::WhoAmI { reply }).expect("live").user, "alice");
    let listed = h.call(ADMIN, |reply| Call::Tokens { reply }).expect("list");
    assert!(listed.iter().any(|t| t.id == alice.id && t.user == "alice"), "{listed:?}");
    let id = alice.id.clone();
    h.call(ADMIN, |reply| Call::RevokeToken { id, from: "10.0.0.9:4242".into(), reply }).expect("revoked");
    let e = h.call(&alice.token, |reply| Call::WhoAmI { reply }).expect_err("revoked");
    assert_eq!(e.status, 401, "{e:?}");
    let audit = h.event_messages("audit");
    assert!(
        audit.iter().any(|m| m.contains("root (admin) from 10.0.0.9:4242: revoked token") && m.contains("alice")),
        "{audit:?}"
    );
    assert!(audit.iter().any(|m| m.contains("created token")), "{audit:?}");
}

#[test]
fn an_expired_token_gets_401_saying_when_it_expired() {
    let mut h = Setup::new().build();
    let t = token(&mut h, "alice", None, Some("1h"));
    assert_eq!(t.expires_ms, Some(T0 + 3_600_000));
    h.advance(Duration::from_secs(3_599));
    assert!(h.call(&t.token, |reply| Call::WhoAmI { reply }).is_ok());
    h.advance(Duration::from_secs(1));
    let e = h.call(&t.token, |reply| Call::WhoAmI { reply }).expect_err("expired");
    assert_eq!(e.status, 401);
    assert!(e.message.contains("expired at 2023-11-14T23:13:20"), "{}", e.message);
}

#[test]
fn a_reader_reads_everything_and_changes_nothing() {
    let mut h = Setup::new().build();
    let alice = user_token(&mut h, "alice");
    let reader = token(&mut h, "grafana", Some("reader"), None).token;
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let id = h.call(&alice, |reply| Call::Submit { specs: vec![spec.clone()], reply }).expect("ok").ids[0];
    assert_eq!(h.call(&reader, |reply| Call::Get { id, reply }).expect("sees alice's job").user, "alice");
    assert!(h.call(&reader, |reply| Call::Events { after: 0, job: None, reply }).is_ok());
    assert!(h.call(&reader, |reply| Call::Metrics { reply }).is_ok());
    for e in [
        h.call(&reader, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("no submit"),
        h.call(&reader, |reply| Call::Cancel { id, from: "x".into(), reply }).expect_err("no cancel"),
        h.call(&reader, |reply| Call::Drain { node: "n1".into(), draining: true, from: "x".into(), reply })
            .expect_err("no drain"),
    ] {
        assert_eq!(e.status, 403, "{e:?}");
    }
    assert_eq!(h.state(id), api::JobState::Running, "untouched");
}

#[test]
fn users_list_and_revoke_only_their_own_tokens() {
    let mut h = Setup::new().build();
    let alice = token(&mut h, "alice", None, None);
    let bob = token(&mut h, "bob", None, None);
    let mine = h.call(&alice.token, |reply| Call::Tokens { reply }).expect("list");
    assert_eq!(mine.iter().map(|t| t.user.as_str()).collect::<Vec<_>>(), ["alice"]);
    let id = bob.id.clone();
    let e = h.call(&alice.token, |reply| Call::RevokeToken { id, from: "x".into(), reply }).expect_err("not hers");
    assert_eq!(e.status, 404);
    assert!(h.call(&bob.token, |reply| Call::WhoAmI { reply }).is_ok(), "bob's token lives");
    let id = alice.id.clone();
    h.call(&alice.token, |reply| Call::RevokeToken { id, from: "x".into(), reply }).expect("her own");
    assert_eq!(h.call(&alice.token, |reply| Call::WhoAmI { reply }).expect_err("gone").status, 401);
}

#[test]
fn with_queues_configured_an_unknown_queue_is_refused_naming_the_known_ones() {
    let mut h = Setup::new().queues(&["research", "prod"]).build();
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nqueue: reserch\n").expect("spec");
    let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("unknown");
    assert_eq!(e.status, 400);
    assert!(e.message.contains("unknown queue \"reserch\"") && e.message.contains("research, prod"), "{}", e.message);
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("no default");
    assert!(e.message.contains("no default queue"), "{}", e.message);
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nqueue: prod\n").expect("spec");
    assert!(h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).is_ok());
}

#[test]
fn a_spec_with_a_control_character_is_refused_naming_the_field() {
    let mut h = Setup::new().build();
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nname: \"a\\u001b[2J\"\n").expect("spec");
    let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err("refused");
    assert_eq!(e.status, 400);
    assert!(e.message.starts_with("name: contains the control character"), "{}", e.message);
}

#[test]
fn in_single_user_mode_tokens_name_only_that_user() {
    let mut cfg_user = Setup::new();
    cfg_user.single_user = Some("ana".into());
    let mut h = cfg_user.build();
    let req = api::TokenRequest { user: "bob".into(), team: None, role: None, ttl: None };
    let e = h.call(ADMIN, |reply| Call::CreateToken { req, from: "x".into(), reply }).expect_err("not bob");
    assert_eq!(e.status, 400);
    assert!(e.message.contains("single-user mode"), "{}", e.message);
    assert_eq!(token(&mut h, "ana", None, None).user, "ana");
    assert_eq!(token(&mut h, "grafana", Some("reader"), None).role, "reader", "readers and nodes are no users");
}

#[test]
fn a_local_caller_is_who_the_kernel_says_with_the_role_the_identity_file_gives() {
    use crate::plane::auth::LocalUser;
    let local = |uid: u32, name: &str| LocalUser { uid, name: name.into(), groups: vec![name.into(), "ml".into()] };
    let mut setup = Setup::new();
    setup.identities = crate::plane::identity::Identities::parse("admins: {users: [ana]}\nteams: {ml: research}\n")
        .expect("identities");
    let mut h = setup.build();
    let who = |h: &mut Harness, u: LocalUser| h.call(u, |reply| Call::WhoAmI { reply });
    let bo = who(&mut h, local(1002, "bo")).expect("bo");
    assert_eq!((bo.user.as_str(), bo.team.as_str(), bo.role.as_str()), ("bo", "research", "user"));
    assert_eq!(who(&mut h, local(1001, "ana")).expect("ana").role, "admin");
    assert_eq!(who(&mut h, local(0, "root")).expect("root").role, "admin");
    // A local user may do what a user's token may, as itself: its job is its own.
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\n").expect("spec");
    let id = h.call(local(1002, "bo"), |reply| Call::Submit { specs: vec![spec], reply }).expect("submitted").ids[0];
    assert_eq!(h.job(id).user, "bo");

    let mut single = Setup::new();
    single.single_user = Some("me".into());
    let mut h = single.build();
    let e = who(&mut h, local(1002, "bo")).expect_err("not the daemon's account");
    assert_eq!(e.status, 403);
    assert!(e.message.contains("single-user mode"), "{}", e.message);
}

#[test]
fn numbers_out_of_their_range_are_refused_naming_the_limit() {
    let mut h = Setup::new().build();
    let cases = [
        ("command: [x]\nresources: {cpu: 0}\n", "resources.cpu: 0 CPUs: a job needs some CPU"),
        ("command: [x]\nretries: 1000000\n", "retries: 1000000 is more than the most, 100"),
    ];
    for (yaml, want) in cases {
        let spec: api::JobSpec = gpool_api::yaml::from_str(yaml).expect("spec");
        let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![spec], reply }).expect_err(yaml);
        assert_eq!(e.status, 400, "{yaml}");
        assert!(e.message.starts_with(want), "{yaml}: {}", e.message);
    }
    let ok: api::JobSpec =
        gpool_api::yaml::from_str("command: [x]\nretries: 100\nresources: {cpu: 1m}\n").expect("spec");
    h.call(ADMIN, |reply| Call::Submit { specs: vec![ok], reply }).expect("at the limits");
}

/// Issue 18: a user's own live event stream (which keeps the events whose
/// user is the caller) shows its jobs' `submitted` and terminal events.
#[test]
fn a_jobs_submitted_and_ended_events_name_its_owner() {
    let mut h = Setup::new().build();
    let ana = token(&mut h, "ana", None, None).token;
    // Every GPU taken: ana's job waits, and is cancelled while pending.
    h.submit("command: [x]\nresources: {nvidia.com/gpu: 8}\n");
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [x]\nresources: {nvidia.com/gpu: 1}\n").expect("spec");
    let id = h.call(ana.as_str(), |reply| Call::Submit { specs: vec![spec], reply }).expect("submitted").ids[0];
    h.call(ana.as_str(), |reply| Call::Cancel { id, from: "test".into(), reply }).expect("cancelled");
    let mut owners = Vec::new();
    while let Ok(e) = h.published.try_recv() {
        if e.job == Some(id) {
            owners.push((e.kind, e.user));
        }
    }
    for kind in ["submitted", "cancelled"] {
        let owner = owners.iter().find(|(k, _)| k == kind).map(|(_, u)| u.clone());
        assert_eq!(owner, Some(Some("ana".to_string())), "{kind}: {owners:?}");
    }
}

#[test]
fn views_are_answered_from_committed_state_before_their_batch_changes_anything() {
    let mut h = Setup::new().build();
    let running = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(h.state(running), api::JobState::Running);
    // A submission and a listing in one batch: the listing is answered first, from the committed state.
    let spec: api::JobSpec = gpool_api::yaml::from_str("command: [y]\n").expect("a spec");
    let (submit, mut submitted) = tokio::sync::oneshot::channel();
    let (list, mut listed) = tokio::sync::oneshot::channel();
    h.step(vec![
        Event::Api { who: ADMIN.into(), call: Call::Submit { specs: vec![spec], reply: submit } },
        Event::Api {
            who: ADMIN.into(),
            call: Call::List { query: ListQuery { limit: 100, ..ListQuery::default() }, reply: list },
        },
    ]);
    let new = submitted.try_recv().expect("answered").expect("accepted").ids[0];
    let ids = |l: api::JobList| l.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids(listed.try_recv().expect("answered").expect("a list")), vec![running]);
    let again = h.call(ADMIN, |reply| Call::List { query: ListQuery { limit: 100, ..ListQuery::default() }, reply });
    assert_eq!(ids(again.expect("a list")), vec![running, new]);

    // Every view changes nothing: no write but a token's last use, no event, no order, no pass.
    macro_rules! view {
        ($call:ident { $($f:ident : $v:expr),* }) => {{
            let (reply, _) = tokio::sync::oneshot::channel();
            Call::$call { $($f: $v,)* reply }
        }};
    }
    let views = vec![
        view!(Get { id: running }),
        view!(List { query: ListQuery::default() }),
        view!(Nodes { page: Some((0, 1)) }),
        view!(Cost { by: "team".into(), since: Duration::from_secs(86_400) }),
        view!(Cost { by: "job".into(), since: Duration::from_secs(86_400) }),
        view!(Budgets {}),
        view!(Pools {}),
        view!(Queues {}),
        view!(Events { after: 0, job: None }),
        view!(Tokens {}),
        view!(WhoAmI {}),
        view!(Usage { id: running }),
        view!(Advice { id: running, min_span: None }),
        view!(Alerts {}),
        view!(Overview {}),
        view!(Services {}),
        view!(Pipeline { run: 1 }),
        view!(Pipelines { limit: 10 }),
        view!(Power {}),
        view!(Schedules {}),
        view!(Registries {}),
        view!(Logs { id: running, rank: 0, stream: "stdout".into() }),
    ];
    h.clock.advance(Duration::from_secs(3600));
    for call in views {
        let name = format!("{call:?}");
        assert!(call.only_reads(), "{name}");
        let mut batch = vec![Event::Api { who: ADMIN.into(), call }];
        let answers = h.ctl.answer_views(&mut batch);
        assert_eq!((answers.len(), batch.len()), (1, 0), "{name} answered at once");
        let writes: Vec<_> =
            h.ctl.out.writes.iter().filter(|w| !matches!(w, gpool_store::Write::PutToken(_))).collect();
        assert!(writes.is_empty(), "{name} wrote {writes:?}");
        assert!(h.ctl.out.published.is_empty() && h.ctl.out.local.is_empty() && h.ctl.out.touched.is_empty(), "{name}");
        assert!(!h.ctl.out.dirty, "{name} asks for a pass");
    }
    // A call that changes something stays in the batch for the turn.
    let (reply, _) = tokio::sync::oneshot::channel();
    let mut batch = vec![Event::Api { who: ADMIN.into(), call: Call::Cancel { id: running, from: "t".into(), reply } }];
    assert!(h.ctl.answer_views(&mut batch).is_empty() && batch.len() == 1);
}
