//! The call surface: tokens, access and visibility, and all-or-nothing batches.

use super::*;

fn user_token(h: &mut Harness, user: &str) -> String {
    let req = api::TokenRequest { user: user.into(), team: Some("ml".into()), role: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, reply }).expect("created").token
}

#[test]
fn a_bad_token_is_refused_with_401_whatever_the_call() {
    let mut h = Setup::new().build();
    let e = h.call("nope", |reply| Call::Nodes { reply }).expect_err("refused");
    assert_eq!(e.status, 401);
    let e = h.call("nope", |reply| Call::Get { id: 1, reply }).expect_err("refused");
    assert_eq!(e.status, 401);
}

#[test]
fn users_see_their_own_jobs_and_others_are_not_found() {
    let mut h = Setup::new().build();
    let alice = user_token(&mut h, "alice");
    let bob = user_token(&mut h, "bob");
    let spec: api::JobSpec = serde_yaml::from_str("command: [x]\n").expect("spec");
    let id = h.call(&alice, |reply| Call::Submit { specs: vec![spec], reply }).expect("ok").ids[0];
    assert_eq!(h.call(&alice, |reply| Call::Get { id, reply }).expect("hers").user, "alice");
    assert_eq!(h.call(&bob, |reply| Call::Get { id, reply }).expect_err("not his").status, 404);
    assert_eq!(h.call(&bob, |reply| Call::Cancel { id, reply }).expect_err("not his").status, 404);
    assert_eq!(h.call(&bob, |reply| Call::Get { id: 987_654, reply }).expect_err("none").status, 404);
    let who = h.call(&bob, |reply| Call::WhoAmI { reply }).expect("anyone may ask");
    assert_eq!((who.user.as_str(), who.role.as_str()), ("bob", "user"));
}

#[test]
fn node_tokens_speak_only_the_agent_protocol_and_users_only_the_api() {
    let mut h = Setup::new().build();
    let req = api::TokenRequest { user: "node-a".into(), team: None, role: Some("node".into()) };
    let node = h.call(ADMIN, |reply| Call::CreateToken { req, reply }).expect("created").token;
    let alice = user_token(&mut h, "alice");
    assert_eq!(h.call(&node, |reply| Call::Nodes { reply }).expect_err("api").status, 403);
    let e = h.call(&alice, |reply| Call::Poll { node: "n1".into(), epoch: 1, after: 0, reply }).expect_err("agent");
    assert_eq!(e.status, 403);
    let req = api::TokenRequest { user: "mallory".into(), team: None, role: Some("admin".into()) };
    assert_eq!(h.call(&alice, |reply| Call::CreateToken { req, reply }).expect_err("admins only").status, 403);
}

#[test]
fn a_batch_with_one_bad_spec_is_refused_whole() {
    let mut h = Setup::new().build();
    let good: api::JobSpec = serde_yaml::from_str("command: [x]\n").expect("spec");
    let bad: api::JobSpec = serde_yaml::from_str("command: [x]\nresources: {nvidia.com/gpu: 64}\n").expect("spec");
    let e = h.call(ADMIN, |reply| Call::Submit { specs: vec![good, bad], reply }).expect_err("refused");
    assert_eq!(e.status, 400);
    assert!(e.message.starts_with("jobs[1]."), "the bad spec is named: {}", e.message);
    let list = h
        .call(ADMIN, |reply| Call::List { query: super::super::ListQuery { limit: 10, ..Default::default() }, reply })
        .expect("list");
    assert!(list.jobs.is_empty(), "nothing of the batch was kept");
    assert!(h.starts().is_empty());
}
