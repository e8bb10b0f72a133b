//! Heat and stragglers through the controller (issue 24): a GPU slowing
//! down for heat is marked degraded (a node view and an event say so), and
//! a gang that asked for it (`onStraggler: requeue`) is stopped and placed
//! again away from its straggler's GPU.

use gpool_gpu::GpuSample;

use super::*;

/// A report of `n` GPUs at full load at second `s`; `hot` slows down for heat.
fn loaded(n: u32, s: i64, hot: Option<u32>) -> Event {
    let gpus = (0..n)
        .map(|i| {
            let slow = hot == Some(i);
            GpuSample {
                index: i,
                uuid: format!("GPU-n1-{i}"),
                gpu_util_pct: Some(100.0),
                power_draw_w: Some(if slow { 500.0 } else { 700.0 }),
                temperature_c: Some(if slow { 91.0 } else { 75.0 }),
                slowdown_temperature_c: Some(90.0),
                sm_clock_mhz: Some(if slow { 1188 } else { 1980 }),
                throttle_reasons: Some(if slow { vec!["hw_thermal_slowdown".into()] } else { Vec::new() }),
                ..GpuSample::default()
            }
        })
        .collect();
    Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        at_ms: T0 + s * 1000,
        gpus,
        ..Default::default()
    }))
}

/// The GPU index each rank of a start got (from `CUDA_VISIBLE_DEVICES`).
fn gpus_by_rank(starts: &[(ReplicaKey, Vec<(String, String)>)]) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = starts
        .iter()
        .map(|(k, e)| {
            let uuid = env(e, "CUDA_VISIBLE_DEVICES").expect("pinned");
            (k.rank, uuid.rsplit('-').next().and_then(|i| i.parse().ok()).expect("GPU-n1-i"))
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn a_gang_with_a_hot_gpu_is_requeued_away_from_it_and_the_gpu_is_shown_degraded() {
    let mut h = Setup::new().policy("fifo").local_gpus(5).build();
    let id = h.submit(
        "command: [train]\nreplicas: 4\nresources: {nvidia.com/gpu: 1}\nonStraggler: requeue\ngracePeriod: 30s\n",
    );
    let first = gpus_by_rank(&h.starts());
    assert_eq!(first, [(0, 0), (1, 1), (2, 2), (3, 3)]);
    // GPU 2 runs hot: three samples make rank 2 the straggler.
    for s in 0..3 {
        h.step(vec![loaded(5, s, Some(2))]);
    }
    assert_eq!(h.state(id), api::JobState::Stopping, "stopped with its grace period");
    let said = h.event_messages("straggler_requeue");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("replica 2 on n1/gpu2 holds the gang back: its GPU slows down for heat"), "{said:?}");
    let alerts = h.call(ADMIN, |reply| Call::Alerts { reply }).expect("alerts");
    assert!(alerts.iter().any(|a| a.rule == "GangStraggler"), "{alerts:?}");
    // Before the replicas exit, GPU 2 has been hot for 10 s: degraded.
    for s in 3..=11 {
        h.step(vec![loaded(5, s, Some(2))]);
    }
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    let gpu2 = nodes[0].devices.iter().find(|d| d.index == 2).expect("GPU 2");
    assert_eq!(gpu2.degraded.as_deref(), Some("hw_thermal_slowdown at 91 °C"));
    assert_eq!(h.event_messages("gpu_degraded").len(), 1);
    for rank in 0..4 {
        h.exit(key(id, 1, rank), None, Some(15));
    }
    assert_eq!(h.state(id), api::JobState::Running, "requeued and started again at once");
    let again = gpus_by_rank(&h.starts());
    assert_eq!(again, [(0, 0), (1, 1), (2, 3), (3, 4)], "away from GPU 2");
    let view = h.job(id);
    assert_eq!(view.restarts, 1);
}

#[test]
fn without_on_straggler_the_gang_is_only_named() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let id = h.submit("command: [train]\nreplicas: 2\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(gpus_by_rank(&h.starts()), [(0, 0), (1, 1)]);
    for s in 0..4 {
        h.step(vec![loaded(4, s, Some(1))]);
    }
    assert_eq!(h.state(id), api::JobState::Running);
    assert!(h.event_messages("straggler_requeue").is_empty());
    let advice = h.call(ADMIN, |reply| Call::Advice { id, min_span: None, reply }).expect("advice");
    let first = advice.findings.first().expect("a finding");
    assert_eq!(first.kind, "straggler");
    assert!(first.summary.starts_with("replica 1 on n1/gpu1 holds the gang back"), "{first:?}");
}

/// The indices of node n1's GPUs its view shows degraded.
fn degraded(h: &mut Harness) -> Vec<u32> {
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    nodes[0].devices.iter().filter(|d| d.degraded.is_some()).map(|d| d.index).collect()
}

#[test]
fn a_degraded_gpu_stays_degraded_across_a_restart_until_it_cools() {
    let state = super::restore::StateFile::new("degraded");
    let clock = ManualClock::new(T0);
    let setup = || Setup::new().policy("fifo").store(state.open()).clock(clock.clone()).local_gpus(4);
    {
        let mut h = setup().build();
        for s in 0..=11 {
            h.step(vec![loaded(4, s, Some(2))]);
        }
        assert_eq!(degraded(&mut h), [2]);
    }
    let mut h = setup().build();
    assert_eq!(degraded(&mut h), [2], "kept across the restart");
    // New work avoids it while another fit exists.
    h.submit("command: [x]\nreplicas: 3\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(gpus_by_rank(&h.starts()).iter().map(|(_, g)| *g).collect::<Vec<_>>(), [0, 1, 3]);
    // Cool for the recovery time: trusted again, and that is kept too.
    let cool = |s: i64| loaded(4, s, None);
    h.step(vec![cool(20)]);
    h.step(vec![cool(20 + gpool_core::heat::RECOVER_AFTER.as_secs() as i64)]);
    assert_eq!(degraded(&mut h), Vec::<u32>::new());
    drop(h);
    let mut h = setup().build();
    assert_eq!(degraded(&mut h), Vec::<u32>::new(), "the recovery is kept as well");
}
