//! The autoscaler's rules: gangs whole, never above `max` or the spending
//! cap, idle nodes go after their pool's idle time and not before, the
//! cheapest pool that fits first, failures back off and then fall back, and
//! equal inputs give equal plans.

use std::sync::Arc;
use std::time::Duration;

use gpool_core::autoscale::{DeleteWhy, PoolNode, PoolNodeState, PoolState, Unmet, plan_scaling};
use gpool_core::pools::{NodeShape, PoolConfig, PoolHealth, RetryRules};
use gpool_core::{GpuRequest, JobId, JobSpec, Pool, PoolKind, SpotPolicy, Time};
use proptest::prelude::*;

fn pool(name: &str, kind: PoolKind, gpus: u32, price: f64, min: u32, max: u32) -> PoolConfig {
    PoolConfig {
        pool: Pool { name: Arc::from(name), kind },
        shape: NodeShape {
            gpus,
            gpu_model: Arc::from("H100-80GB"),
            gpu_memory_mb: 80 * 1024,
            cpus: 96,
            memory_mb: 1024 * 1024,
            labels: Default::default(),
        },
        price_per_node_hour: price,
        min,
        max,
        boot_timeout: Duration::from_secs(300),
        idle_timeout: Duration::from_secs(600),
        retry: RetryRules::default(),
    }
}

fn state<'a>(cfg: &'a PoolConfig, nodes: &[(&str, PoolNodeState)]) -> PoolState<'a> {
    PoolState {
        config: cfg,
        nodes: nodes.iter().map(|(n, s)| PoolNode { name: Arc::from(*n), state: *s }).collect(),
        health: PoolHealth::default(),
    }
}

fn job(gpus: u32, replicas: u32) -> JobSpec {
    let mut s = JobSpec::new("alice", Time::from_secs(0));
    s.replica.gpu = GpuRequest::Gpus { count: gpus };
    s.replica.cpus_milli = 4000;
    s.replicas = replicas;
    s
}

const T: Time = Time::from_secs(10_000);

#[test]
fn a_gang_gets_all_its_nodes_or_none() {
    let small = pool("od", PoolKind::OnDemand, 8, 98.0, 0, 3);
    let jobs = [job(8, 4), job(8, 2)];
    let waiting: Vec<(JobId, &JobSpec)> = jobs.iter().enumerate().map(|(i, s)| (JobId(i as u64), s)).collect();
    let plan = plan_scaling(&[state(&small, &[])], &waiting, None, T);
    // The 4-node gang does not fit under max 3: nothing for it; the 2-node one gets 2.
    assert_eq!(plan.create.len(), 1);
    assert_eq!((plan.create[0].count, plan.create[0].for_jobs.clone()), (2, vec![JobId(1)]));
    assert_eq!(plan.unmet, vec![(JobId(0), Unmet::AtMax)]);
}

#[test]
fn the_cheapest_pool_that_fits_is_chosen_and_spot_follows_the_job() {
    let od = pool("od", PoolKind::OnDemand, 8, 98.0, 0, 10);
    let spot = pool("spot", PoolKind::Spot, 8, 10.0, 0, 10);
    let one = pool("one", PoolKind::OnDemand, 1, 12.3, 0, 10);
    let pools = [state(&od, &[]), state(&spot, &[]), state(&one, &[])];
    let mut never = job(1, 1);
    never.spot = SpotPolicy::Never;
    let allowed = job(1, 1);
    let big = job(8, 1);
    let mut big_never = job(8, 1);
    big_never.spot = SpotPolicy::Never;
    let cases: [(&str, &JobSpec, &str); 4] = [
        ("a 1-GPU job goes to the cheapest node that holds it", &never, "one"),
        ("spot is cheaper still when allowed", &allowed, "spot"),
        ("8 GPUs: spot", &big, "spot"),
        ("8 GPUs, never spot: on-demand", &big_never, "od"),
    ];
    for (what, spec, want) in cases {
        let plan = plan_scaling(&pools, &[(JobId(1), spec)], None, T);
        assert_eq!(plan.create.first().map(|c| &*c.pool), Some(want), "{what}");
    }
    let mut prefer = job(1, 1);
    prefer.spot = SpotPolicy::Preferred;
    let pricey_spot = pool("spot", PoolKind::Spot, 8, 500.0, 0, 10);
    let plan = plan_scaling(&[state(&od, &[]), state(&pricey_spot, &[])], &[(JobId(1), &prefer)], None, T);
    assert_eq!(plan.create[0].pool.as_ref(), "spot", "spot: preferred outranks price");
}

#[test]
fn booting_and_idle_nodes_absorb_demand_before_new_ones_are_made() {
    let od = pool("od", PoolKind::OnDemand, 8, 98.0, 0, 10);
    let jobs = [job(4, 1), job(4, 1), job(8, 1)];
    let waiting: Vec<(JobId, &JobSpec)> = jobs.iter().enumerate().map(|(i, s)| (JobId(i as u64), s)).collect();
    let booting = [("od-1", PoolNodeState::Booting { since: Time::from_secs(9_900) })];
    let plan = plan_scaling(&[state(&od, &booting)], &waiting, None, T);
    // Two 4-GPU jobs share the booting node; the 8-GPU one needs a new node.
    assert_eq!(plan.create[0].count, 1);
    assert_eq!(plan.create[0].for_jobs, vec![JobId(2)]);
    assert_eq!(plan.covered.len(), 3);
    assert_eq!(plan.wake_at, Some(Time::from_secs(10_200)), "the boot deadline");
}

#[test]
fn idle_nodes_go_after_the_idle_time_and_not_before_and_never_below_min() {
    let od = pool("od", PoolKind::OnDemand, 8, 98.0, 1, 10);
    let nodes = [
        ("od-a", PoolNodeState::Idle { since: Time::from_secs(9_000) }),
        ("od-b", PoolNodeState::Idle { since: Time::from_secs(9_500) }),
        ("od-c", PoolNodeState::Idle { since: Time::from_secs(9_700) }),
        ("od-d", PoolNodeState::Busy),
    ];
    let plan = plan_scaling(&[state(&od, &nodes)], &[], None, T);
    let gone: Vec<&str> = plan.delete.iter().map(|d| &*d.node).collect();
    assert_eq!(gone, ["od-a"], "a has been idle 1000 s, b 500 s, c 300 s; the idle time is 600 s");
    assert_eq!(plan.wake_at, Some(Time::from_secs(10_100)), "when b's time is up");
    let min3 = pool("od", PoolKind::OnDemand, 8, 98.0, 3, 10);
    let late = Time::from_secs(20_000);
    let plan = plan_scaling(&[state(&min3, &nodes)], &[], None, late);
    assert_eq!(plan.delete.len(), 1, "four nodes, min 3: one goes, the longest idle");
    assert_eq!(&*plan.delete[0].node, "od-a");
}

#[test]
fn idle_time_is_exact() {
    let od = pool("od", PoolKind::OnDemand, 8, 98.0, 0, 10);
    let idle = [("od-a", PoolNodeState::Idle { since: Time::from_secs(9_400) })];
    let before = plan_scaling(&[state(&od, &idle)], &[], None, Time::from_secs(9_999));
    assert!(before.delete.is_empty());
    assert_eq!(before.wake_at, Some(Time::from_secs(10_000)));
    let after = plan_scaling(&[state(&od, &idle)], &[], None, T);
    assert_eq!(after.delete.len(), 1);
    assert_eq!(after.delete[0].why, DeleteWhy::Idle);
    // Demand that fits on the idle node keeps it.
    let j = job(8, 1);
    let kept = plan_scaling(&[state(&od, &idle)], &[(JobId(1), &j)], None, T);
    assert!(kept.delete.is_empty() && kept.create.is_empty());
}

#[test]
fn a_boot_past_its_timeout_is_deleted_and_a_failing_pool_falls_back() {
    let cheap = pool("cheap", PoolKind::Spot, 8, 20.0, 0, 10);
    let dear = pool("dear", PoolKind::OnDemand, 8, 98.0, 0, 10);
    let j = job(8, 1);
    let late = [("cheap-1", PoolNodeState::Booting { since: Time::from_secs(9_000) })];
    let mut s = state(&cheap, &late);
    let plan = plan_scaling(&[s.clone(), state(&dear, &[])], &[(JobId(1), &j)], None, T);
    assert_eq!(plan.delete[0].why, DeleteWhy::BootTimeout);
    assert!(plan.create.is_empty(), "the time-out is a failure: the pool backs off before it tries again");
    assert!(matches!(plan.unmet[0].1, Unmet::BackingOff { .. }), "one failure is not a reason to pay more");

    // After one failure the pool backs off: the job waits for it.
    s.nodes.clear();
    s.health.failed(&cheap.retry, T);
    let plan = plan_scaling(&[s.clone(), state(&dear, &[])], &[(JobId(1), &j)], None, T);
    assert!(plan.create.is_empty());
    assert!(matches!(plan.unmet[0].1, Unmet::BackingOff { .. }));
    assert_eq!(plan.wake_at, s.health.retry_at);

    // After the second it is unavailable: the next pool gets the job.
    s.health.failed(&cheap.retry, T);
    let plan = plan_scaling(&[s.clone(), state(&dear, &[])], &[(JobId(1), &j)], None, T);
    assert_eq!(plan.create[0].pool.as_ref(), "dear");
}

#[test]
fn the_spending_cap_holds_and_min_is_kept() {
    let od = pool("od", PoolKind::OnDemand, 8, 100.0, 2, 10);
    let jobs = [job(8, 1), job(8, 1), job(8, 1)];
    let waiting: Vec<(JobId, &JobSpec)> = jobs.iter().enumerate().map(|(i, s)| (JobId(i as u64), s)).collect();
    let plan = plan_scaling(&[state(&od, &[])], &waiting, Some(250.0), T);
    assert_eq!(plan.create[0].count, 2, "two jobs' nodes fit under $250/h; they also satisfy min");
    assert!(matches!(plan.unmet[0].1, Unmet::OverBudget { .. }));
    let empty = plan_scaling(&[state(&od, &[])], &[], None, T);
    assert_eq!(empty.create[0].count, 2, "min");
    let reserved = pool("res", PoolKind::Reserved, 8, 100.0, 3, 3);
    let r = plan_scaling(&[state(&reserved, &[])], &[], Some(300.0), T);
    assert_eq!(r.create[0].count, 3, "a reserved pool's minimum is paid for anyway");
}

#[test]
fn jobs_no_pool_can_run_are_said_so() {
    let od = pool("od", PoolKind::OnDemand, 8, 100.0, 0, 10);
    let mut mig = job(0, 1);
    mig.replica.gpu = GpuRequest::Mig { profile: "1g.10gb".parse().expect("profile"), count: 1 };
    let mut a100 = job(1, 1);
    a100.replica.gpu_model = Some(Arc::from("A100-80GB"));
    let nine = job(9, 1);
    for spec in [&mig, &a100, &nine] {
        let plan = plan_scaling(&[state(&od, &[])], &[(JobId(1), spec)], None, T);
        assert_eq!(plan.unmet, vec![(JobId(1), Unmet::NoPool)]);
    }
}

#[test]
fn shares_pack_onto_one_gpu() {
    let one = pool("one", PoolKind::OnDemand, 1, 12.0, 0, 10);
    let mut q = job(0, 1);
    q.replica.gpu = GpuRequest::Share { milli: Some(250), memory_mb: None };
    let jobs = [q.clone(), q.clone(), q.clone(), q.clone(), q];
    let waiting: Vec<(JobId, &JobSpec)> = jobs.iter().enumerate().map(|(i, s)| (JobId(i as u64), s)).collect();
    let plan = plan_scaling(&[state(&one, &[])], &waiting, None, T);
    assert_eq!(plan.create[0].count, 2, "four quarters on one GPU, the fifth on another");
}

fn arb_state() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0u8..4, 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn plans_keep_the_limits_and_are_deterministic(
        nodes_a in arb_state(), nodes_b in arb_state(),
        max_a in 0u32..6, max_b in 0u32..6, min_a in 0u32..3,
        jobs in prop::collection::vec((1u32..9, 1u32..5, any::<bool>()), 0..12),
        cap in prop::option::of(50u32..2000),
        now_s in 9_000i64..11_000,
    ) {
        let a = pool("a", PoolKind::Spot, 8, 30.0, min_a.min(max_a), max_a);
        let b = pool("b", PoolKind::OnDemand, 4, 50.0, 0, max_b);
        let decode = |v: &[u8], p: &str| -> Vec<(String, PoolNodeState)> {
            v.iter().enumerate().map(|(i, k)| (format!("{p}-{i}"), match k {
                0 => PoolNodeState::Busy,
                1 => PoolNodeState::Booting { since: Time::from_secs(9_000 + i64::from(*k) * 100) },
                _ => PoolNodeState::Idle { since: Time::from_secs(8_900 + i64::from(*k) * 300) },
            })).collect()
        };
        let na = decode(&nodes_a, "a");
        let nb = decode(&nodes_b, "b");
        let sa: Vec<(&str, PoolNodeState)> = na.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let sb: Vec<(&str, PoolNodeState)> = nb.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let pools = [state(&a, &sa), state(&b, &sb)];
        let specs: Vec<JobSpec> = jobs.iter().map(|(g, r, never)| {
            let mut s = job(*g, *r);
            if *never { s.spot = SpotPolicy::Never; }
            s
        }).collect();
        let waiting: Vec<(JobId, &JobSpec)> = specs.iter().enumerate().map(|(i, s)| (JobId(i as u64), s)).collect();
        let now = Time::from_secs(now_s);
        let cap = cap.map(f64::from);
        let plan = plan_scaling(&pools, &waiting, cap, now);
        prop_assert_eq!(&plan, &plan_scaling(&pools, &waiting, cap, now), "deterministic");

        let spend_before: f64 = pools.iter().map(PoolState::spend_per_hour).sum();
        let mut spend_after = spend_before;
        for (p, cfg) in pools.iter().zip([&a, &b]) {
            let created: u32 = plan.create.iter().filter(|c| *c.pool == *cfg.name()).map(|c| c.count).sum();
            let deleted = plan.delete.iter().filter(|d| *d.pool == *cfg.name()).count() as u32;
            let timed_out =
                plan.delete.iter().filter(|d| *d.pool == *cfg.name() && d.why == DeleteWhy::BootTimeout).count() as u32;
            let before = p.nodes.len() as u32 - timed_out;
            let deleted = deleted - timed_out;
            if created > 0 {
                prop_assert!(before + created <= cfg.max.max(before), "never above max");
            }
            prop_assert!(before + created - deleted >= cfg.min.min(before + created), "never below min by deleting");
            spend_after += f64::from(created) * cfg.price_per_node_hour;
            for d in plan.delete.iter().filter(|d| *d.pool == *cfg.name()) {
                let node = p.nodes.iter().find(|n| n.name == d.node).expect("a node of the pool");
                match (node.state, d.why) {
                    (PoolNodeState::Idle { since }, DeleteWhy::Idle) =>
                        prop_assert!(now >= since.plus(cfg.idle_timeout), "not before the idle time"),
                    (PoolNodeState::Booting { since }, DeleteWhy::BootTimeout) =>
                        prop_assert!(now >= since.plus(cfg.boot_timeout)),
                    (PoolNodeState::Idle { .. }, DeleteWhy::AboveMax) => prop_assert!(before + created > cfg.max),
                    (s, w) => prop_assert!(false, "deleted {:?} for {:?}", s, w),
                }
            }
        }
        if let Some(c) = cap && spend_after > spend_before + 1e-9 {
            prop_assert!(spend_after <= c + 1e-9, "never above the cap: {} > {}", spend_after, c);
        }
        // Gangs whole: a job nodes were made for has all its replicas covered.
        for c in &plan.create {
            for j in &c.for_jobs {
                prop_assert!(plan.covered.contains(j));
                prop_assert!(!plan.unmet.iter().any(|(u, _)| u == j));
            }
        }
        prop_assert_eq!(plan.covered.len() + plan.unmet.len(), waiting.len());
        // A job that never goes on spot is never the reason for a spot node.
        for c in plan.create.iter().filter(|c| &*c.pool == "a") {
            for j in &c.for_jobs {
                prop_assert!(specs[j.0 as usize].spot != SpotPolicy::Never);
            }
        }
    }
}
