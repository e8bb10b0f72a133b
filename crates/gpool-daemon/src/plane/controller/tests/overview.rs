//! The dashboard's overview and what views say of waiting jobs.

use super::nodes::register;
use super::*;

/// The dashboard's overview counts GPUs by what they do: a job's GPUs are
/// busy until a reading says they idle, the rest are free, and a draining
/// node's are down; the pending job's wait is counted.
#[test]
fn the_overview_counts_gpus_by_what_they_do_and_the_queue_waits() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let running = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let waiting = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\n");
    assert_eq!(h.state(running), api::JobState::Running);
    assert_eq!(h.state(waiting), api::JobState::Pending);
    h.advance(std::time::Duration::from_secs(90));
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    let g = &o.gpus[0];
    assert_eq!((g.model.as_str(), g.busy, g.idle, g.free, g.down), ("H100-80GB", 2, 0, 2, 0));
    assert_eq!((o.pending, o.running), (1, 1));
    assert_eq!(o.wait_max_s, Some(90.0));
    assert_eq!(o.heat[0].job.iter().filter(|j| **j == Some(running)).count(), 2);
    assert_eq!(o.heat[0].index, [0, 1, 2, 3]);
    // Idle readings on the job's GPUs make them idle.
    let gpus = (0..4)
        .map(|i| gpool_gpu::GpuSample {
            index: i,
            uuid: format!("GPU-n1-{i}"),
            gpu_util_pct: Some(0.0),
            ..gpool_gpu::GpuSample::default()
        })
        .collect();
    h.step(vec![Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        at_ms: T0,
        gpus,
        ..Default::default()
    }))]);
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    assert_eq!((o.gpus[0].busy, o.gpus[0].idle), (0, 2));
    assert_eq!(o.heat[0].util[0], Some(0));
    // A draining node's GPUs are down, whoever holds them.
    h.call(ADMIN, |reply| Call::Drain { node: "n1".into(), draining: true, from: "test".into(), reply })
        .expect("drain");
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("overview");
    assert_eq!((o.gpus[0].busy, o.gpus[0].idle, o.gpus[0].free, o.gpus[0].down), (0, 0, 0, 4));
    assert_eq!(o.heat[0].state, "draining");
}

#[test]
fn the_overview_counts_each_gpu_as_the_nodes_view_shows_it() {
    let mut h = Setup::new().build();
    register(&mut h, "r1", 4, Vec::new());
    let drained = h.call(ADMIN, |reply| Call::Drain { node: "r1".into(), draining: true, from: "t".into(), reply });
    assert!(drained.is_ok(), "{drained:?}");
    let whole = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let quarter = h.submit("command: [y]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    let other = h.submit("command: [z]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    for id in [whole, quarter, other] {
        assert_eq!(h.state(id), api::JobState::Running);
    }
    let o = h.call(ADMIN, |reply| Call::Overview { reply }).expect("the overview");
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("the nodes");
    assert_eq!(o.heat.len(), nodes.len());
    for (cells, n) in o.heat.iter().zip(&nodes) {
        assert_eq!(cells.node, n.name);
        for (at, d) in n.devices.iter().enumerate() {
            assert_eq!(cells.job[at], d.job, "{} GPU {}", n.name, d.index);
            let shared = !d.shares.is_empty() || d.mig.iter().any(|m| m.job.is_some());
            assert_eq!(cells.shared.contains(&(at as u32)), shared, "{} GPU {}", n.name, d.index);
        }
    }
    // On the local node: two GPUs held whole, one shared by both quarters, five free; the drained node's four are down.
    let count = |o: &api::Overview| {
        o.gpus.iter().fold((0, 0, 0, 0), |a, g| (a.0 + g.busy, a.1 + g.idle, a.2 + g.free, a.3 + g.down))
    };
    assert_eq!(count(&o), (3, 0, 5, 4), "{:?}", o.gpus);
    let local = o.heat.iter().find(|c| c.node == "n1").expect("the local node");
    assert_eq!(local.job.iter().filter(|j| **j == Some(whole)).count(), 2);
    assert_eq!(local.shared.len(), 1, "both quarters on one GPU");
}

/// The job backfill holds resources for says when it expects to start:
/// when the job ahead of it reaches its time limit.
#[test]
fn the_reserved_job_shows_when_backfill_expects_it_to_start() {
    let mut h = Setup::new().policy("fifo-backfill").local_gpus(4).build();
    let first = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 1h\n");
    let next = h.submit("command: [x]\nresources: {nvidia.com/gpu: 4}\ntimeLimit: 1h\n");
    assert_eq!(h.state(first), api::JobState::Running);
    let view = h.job(next);
    assert_eq!(view.estimated_start.as_deref(), Some(api::time::rfc3339(T0 + 3_600_000).as_str()));
    assert_eq!(h.job(first).estimated_start, None, "a running job has none");
}
