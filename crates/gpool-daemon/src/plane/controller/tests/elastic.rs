//! The fleet of elastic node pools (`elastic.rs`) as a part: a pool below
//! its minimum creates a node with a token bound to it, a failed creation
//! counts against the pool and cleans up, a deleted node is forgotten.

use std::sync::Arc;
use std::time::Duration;

use gpool_core::pools::{NodeShape, PoolConfig};
use gpool_core::{Pool, PoolKind, Snapshot, Time};

use super::super::elastic::{ElasticConfig, Fleet, ProviderPrograms, ProvisionOp};
use super::super::outbox::Outbox;
use super::super::timers::Timers;
use super::super::tokens::Tokens;
use super::*;

fn pool(name: &str, min: u32, max: u32) -> PoolConfig {
    PoolConfig {
        pool: Pool { name: Arc::from(name), kind: PoolKind::OnDemand },
        shape: NodeShape {
            gpus: 8,
            gpu_model: Arc::from("H100-80GB"),
            gpu_memory_mb: 81_920,
            cpus: 64,
            memory_mb: 512 * 1024,
            labels: Default::default(),
        },
        price_per_node_hour: 24.0,
        min,
        max,
        boot_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        retry: Default::default(),
    }
}

struct Parts {
    fleet: Fleet,
    snap: Snapshot,
    links: std::collections::BTreeMap<gpool_core::NodeId, super::super::links::NodeLink>,
    tokens: Tokens,
    timers: Timers,
    out: Outbox,
}

fn parts(min: u32, max: u32) -> Parts {
    let cfg = ElasticConfig {
        pools: vec![pool("gpu", min, max)],
        providers: vec![ProviderPrograms {
            create: vec!["mk".into()],
            delete: vec!["rm".into()],
            timeout: Duration::from_secs(60),
        }],
        max_dollars_per_hour: None,
        server_url: "http://plane:8700".into(),
    };
    let mut store = Sqlite::memory().expect("a store");
    let mut timers = Timers::default();
    let policy = Policy::gpool_default();
    let fleet =
        Fleet::restore(&mut store, Some(cfg), std::path::Path::new("/var/lib/gpool"), &policy, &[], &mut timers, T0)
            .expect("restored");
    Parts {
        fleet,
        snap: Snapshot::new(policy),
        links: Default::default(),
        tokens: Tokens::default(),
        timers,
        out: Outbox::new(1),
    }
}

fn autoscale(p: &mut Parts, now: i64) {
    let plan = gpool_core::schedule(&p.snap, Time::from_millis(now));
    p.fleet.autoscale(&plan, &mut p.snap, &mut p.tokens, 4_000, &mut p.timers, &mut p.out, now);
}

fn provisioned(p: &mut Parts, node: &str, op: ProvisionOp, result: Result<(), String>, now: i64) {
    let (snap, links, tokens, timers, out) = (&mut p.snap, &mut p.links, &mut p.tokens, &mut p.timers, &mut p.out);
    p.fleet.on_provisioned(node.into(), op, result, snap, links, tokens, timers, out, now);
}

fn kinds(out: &Outbox) -> Vec<String> {
    out.published.iter().map(|e| e.kind.clone()).collect()
}

#[test]
fn a_pool_below_its_minimum_creates_a_node_with_its_own_token() {
    let mut p = parts(1, 2);
    assert!(
        p.fleet.could_run(&gpool_core::JobSpec::new("ana", Time::from_millis(T0))),
        "the largest fleet runs an empty job"
    );
    autoscale(&mut p, T0);
    assert_eq!(p.out.provision.len(), 1, "{:?}", p.out.provision);
    let order = &p.out.provision[0];
    assert_eq!((order.op, order.argv.clone()), (ProvisionOp::Create, vec!["mk".into(), "gpu".into(), "gpu-1".into()]));
    let env: std::collections::BTreeMap<_, _> = order.env.iter().cloned().collect();
    assert_eq!(env.get("GPOOL_SERVER").map(String::as_str), Some("http://plane:8700"));
    let token = env.get("GPOOL_TOKEN").expect("the node's token");
    let who = p
        .tokens
        .identify(
            &crate::plane::auth::Credential::Token(token.clone()),
            &config(Policy::gpool_default()),
            &mut p.out,
            T0,
        )
        .expect("the token is live");
    assert_eq!((who.user.as_str(), who.role), ("gpu-1", crate::plane::auth::Role::Node));
    assert_eq!(kinds(&p.out), ["node_create"]);
    let view = &p.fleet.views(T0)[0];
    assert_eq!((view.nodes, view.creating), (1, 1));
    // Asked again at once, it does not create a second: the first is booting.
    p.out.provision.clear();
    autoscale(&mut p, T0 + 1_000);
    assert!(p.out.provision.is_empty(), "{:?}", p.out.provision);
}

#[test]
fn a_failed_creation_counts_against_the_pool_and_is_cleaned_up() {
    let mut p = parts(1, 2);
    autoscale(&mut p, T0);
    p.out.provision.clear();
    provisioned(&mut p, "gpu-1", ProvisionOp::Create, Err("quota exceeded".into()), T0 + 5_000);
    assert_eq!(p.out.provision.len(), 1);
    assert_eq!(p.out.provision[0].op, ProvisionOp::Delete, "what the program left behind is deleted");
    assert!(kinds(&p.out).contains(&"node_create_failed".to_string()), "{:?}", kinds(&p.out));
    assert_eq!(p.fleet.views(T0 + 5_000)[0].failures, 1);
    // The deletion done: the node is forgotten and its token revoked.
    provisioned(&mut p, "gpu-1", ProvisionOp::Delete, Ok(()), T0 + 6_000);
    assert_eq!(p.fleet.views(T0 + 6_000)[0].nodes, 0);
    assert!(p.out.writes.iter().any(|w| matches!(w, gpool_store::Write::DeleteNode(n) if n == "gpu-1")));
    assert!(p.out.writes.iter().any(|w| matches!(w, gpool_store::Write::DeleteToken(_))), "its token goes");
}

#[test]
fn a_failed_deletion_is_tried_again_later() {
    let mut p = parts(1, 2);
    autoscale(&mut p, T0);
    provisioned(&mut p, "gpu-1", ProvisionOp::Create, Err("boom".into()), T0);
    p.out.provision.clear();
    provisioned(&mut p, "gpu-1", ProvisionOp::Delete, Err("api down".into()), T0 + 1_000);
    assert!(kinds(&p.out).contains(&"node_delete_failed".to_string()));
    autoscale(&mut p, T0 + 2_000);
    assert!(p.out.provision.iter().all(|o| o.op != ProvisionOp::Delete), "not before 30 s");
    autoscale(&mut p, T0 + 31_000);
    assert!(p.out.provision.iter().any(|o| o.op == ProvisionOp::Delete && o.node == "gpu-1"), "{:?}", p.out.provision);
}
