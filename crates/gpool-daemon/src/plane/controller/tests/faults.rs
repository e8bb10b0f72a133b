//! GPU faults through the controller (issue 38): a fault fatal to a GPU
//! quarantines it and requeues its jobs as infrastructure failures, an
//! application's XID ends only its job, a check or an operator brings a
//! GPU back, and a quarantine outlives the control plane.

use gpool_gpu::GpuSample;

use super::restore::StateFile;
use super::*;

/// A report of `n` GPUs of node n1 at second `s`; `fault` changes one GPU's sample.
fn report(n: u32, s: i64, fault: Option<(u32, &dyn Fn(&mut GpuSample))>) -> Event {
    let gpus = (0..n)
        .map(|i| {
            let mut g = GpuSample {
                index: i,
                uuid: format!("GPU-n1-{i}"),
                gpu_util_pct: Some(50.0),
                ecc_uncorrected_volatile: Some(0),
                xid_count: Some(0),
                remap_pending: Some(false),
                remap_failed: Some(false),
                ..GpuSample::default()
            };
            if let Some((gpu, f)) = &fault
                && *gpu == i
            {
                f(&mut g);
            }
            g
        })
        .collect();
    Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        at_ms: T0 + s * 1000,
        gpus,
        ..Default::default()
    }))
}

fn xid(x: u64) -> impl Fn(&mut GpuSample) {
    move |g| {
        g.xid_count = Some(1);
        g.xids_recent = vec![x];
    }
}

/// The GPU indices a job's latest start got, sorted.
fn gpus_of(h: &mut Harness) -> Vec<u32> {
    let mut v: Vec<u32> = h
        .starts()
        .iter()
        .flat_map(|(_, e)| env(e, "CUDA_VISIBLE_DEVICES").map(str::to_string))
        .flat_map(|u| u.split(',').filter_map(|x| x.rsplit('-').next()?.parse().ok()).collect::<Vec<u32>>())
        .collect();
    v.sort_unstable();
    v
}

fn quarantine_of(h: &mut Harness, gpu: u32) -> Option<api::QuarantineView> {
    let nodes = h.call(ADMIN, |reply| Call::Nodes { page: None, reply }).expect("nodes");
    nodes[0].devices.iter().find(|d| d.index == gpu).and_then(|d| d.quarantine.clone())
}

fn token(h: &mut Harness, user: &str, role: &str) -> String {
    let req = api::TokenRequest { user: user.into(), team: None, role: Some(role.into()), ttl: None };
    h.call(ADMIN, |reply| Call::CreateToken { req, from: "test".into(), reply }).expect("created").token
}

fn restore(h: &mut Harness, who: &str, gpu: u32) -> Result<api::NodeView, ApiError> {
    h.call(who, |reply| Call::RestoreGpu { node: "n1".into(), gpu, from: "test".into(), reply })
}

#[test]
fn an_xid_79_quarantines_the_gpu_and_requeues_its_job_as_an_infrastructure_failure() {
    let mut h = Setup::new().policy("fifo").local_gpus(4).build();
    let id = h.submit("command: [sleep, '300']\nresources: {nvidia.com/gpu: 2}\nretries: 0\n");
    assert_eq!(gpus_of(&mut h), [0, 1]);
    h.step(vec![report(4, 0, None)]);
    h.step(vec![report(4, 1, Some((1, &xid(79))))]);
    assert_eq!(h.state(id), api::JobState::Stopping, "stopped with its grace period, to checkpoint");
    let said = h.event_messages("gpu_quarantined");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("GPU 1 of node n1 quarantined: XID 79 (GPU has fallen off the bus); job 1 requeued"),
        "{said:?}"
    );
    let q = quarantine_of(&mut h, 1).expect("GPU 1 is out");
    assert_eq!((q.fault.as_str(), q.action.as_str()), ("XID 79 (GPU has fallen off the bus)", "job 1 requeued"));
    // The same reading again changes nothing: the alert fires once.
    h.step(vec![report(4, 2, Some((1, &xid(79))))]);
    assert!(h.event_messages("gpu_quarantined").is_empty(), "said once");
    for rank in 0..1 {
        h.exit(key(id, 1, rank), None, Some(15));
    }
    let view = h.job(id);
    assert_eq!(view.state, api::JobState::Running, "placed again at once: {:?}", view.reason);
    let failures = h.ctl.jobs.get(&id).map(|d| d.failures);
    assert_eq!((view.restarts, failures), (1, Some(0)), "not the job's failure: its retries are untouched");
    assert_eq!(gpus_of(&mut h), [0, 2], "away from GPU 1");
    // A 4-GPU job waits, and says why.
    let big = h.submit("command: [train]\nresources: {nvidia.com/gpu: 4}\n");
    let reason = h.job(big).reason.unwrap_or_default();
    assert!(reason.contains("1 GPU(s) quarantined for faults"), "{reason}");
    let health = h.call(ADMIN, |reply| Call::Health { reply }).expect("health");
    assert_eq!(health.len(), 1);
    assert_eq!((health[0].node.as_str(), health[0].gpu), ("n1", 1));
    // Only admins restore; a GPU in service has nothing to restore.
    let user = token(&mut h, "ana", "user");
    let err = restore(&mut h, &user, 1).expect_err("a user may not");
    assert_eq!(err.status, 403);
    restore(&mut h, ADMIN, 1).expect("restored");
    assert!(
        h.orders().iter().any(|o| matches!(o, Order::InjectFault { gpu: 1, fault: None })),
        "a simulated GPU forgets its faults"
    );
    assert_eq!(quarantine_of(&mut h, 1), None);
    assert!(h.event_messages("gpu_restored")[0].contains("restored by root"));
    assert_eq!(restore(&mut h, ADMIN, 1).expect_err("not out").status, 409);
    assert_eq!(restore(&mut h, ADMIN, 9).expect_err("no such GPU").status, 404);
}

#[test]
fn an_application_xid_ends_only_its_job_and_the_gpu_stays_in_service() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\n");
    h.step(vec![report(2, 0, None)]);
    h.step(vec![report(2, 1, Some((0, &xid(13))))]);
    assert_eq!(h.state(id), api::JobState::Stopping);
    h.exit(key(id, 1, 0), None, Some(15));
    let view = h.job(id);
    assert_eq!(view.state, api::JobState::Failed);
    assert!(
        view.reason.as_deref().is_some_and(|r| r.contains("XID 13 (graphics engine exception)")),
        "{:?}",
        view.reason
    );
    assert_eq!(quarantine_of(&mut h, 0), None, "the GPU stays in service");
    let next = h.submit("command: [train]\nresources: {nvidia.com/gpu: 2}\n");
    assert_eq!(h.state(next), api::JobState::Running);
}

#[test]
fn a_quarantined_gpu_is_checked_once_idle_and_comes_back_when_the_check_passes() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    h.step(vec![report(2, 0, None)]);
    let ecc = |g: &mut GpuSample| g.ecc_uncorrected_volatile = Some(1);
    h.step(vec![report(2, 1, Some((1, &ecc)))]);
    assert!(quarantine_of(&mut h, 1).is_some_and(|q| q.fault.contains("uncorrectable ECC")));
    let checks = |h: &mut Harness| h.orders().iter().filter(|o| matches!(o, Order::CheckHealth { gpu: 1, .. })).count();
    assert_eq!(checks(&mut h), 0, "not before CHECK_AFTER");
    h.clock.advance(gpool_core::fault::CHECK_AFTER);
    h.step(vec![report(2, 70, Some((1, &ecc)))]);
    assert_eq!(checks(&mut h), 1);
    let verdict = |passed: bool| {
        Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
            node: "n1".into(),
            health: vec![api::agent::HealthVerdict { gpu: 1, program: true, passed, output: "dcgmi diag".into() }],
            ..Default::default()
        }))
    };
    h.step(vec![verdict(false)]);
    assert!(quarantine_of(&mut h, 1).is_some_and(|q| q.last_check.is_some()), "a failed check keeps it out");
    assert!(h.event_messages("gpu_check")[0].contains("stays out"));
    h.clock.advance(gpool_core::fault::CHECK_EVERY);
    h.step(vec![report(2, 700, Some((1, &ecc)))]);
    assert_eq!(checks(&mut h), 1, "checked again after CHECK_EVERY");
    h.step(vec![verdict(true)]);
    assert_eq!(quarantine_of(&mut h, 1), None);
    assert!(h.event_messages("gpu_restored")[0].contains("health check passed"));
}

#[test]
fn a_quarantine_outlives_the_control_plane() {
    let state = StateFile::new("quarantine");
    let clock = ManualClock::new(T0);
    {
        let mut h = Setup::new().store(state.open()).clock(clock.clone()).local_gpus(2).build();
        h.step(vec![report(2, 0, None)]);
        h.step(vec![report(2, 1, Some((0, &xid(48))))]);
        assert!(quarantine_of(&mut h, 0).is_some());
    }
    let mut h = Setup::new().store(state.open()).clock(clock.clone()).local_gpus(2).build();
    let q = quarantine_of(&mut h, 0).expect("still out after a restart");
    assert_eq!(q.fault, "XID 48 (double-bit ECC error)");
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\n");
    assert_eq!(h.state(id), api::JobState::Running);
    assert_eq!(gpus_of(&mut h), [1], "nothing goes on the quarantined GPU");
}

#[test]
fn faults_are_injected_only_into_simulated_gpus_by_admins() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let inject = |h: &mut Harness, who: &str, gpu: u32| {
        let fault = gpool_gpu::InjectedFault::Xid(79);
        h.call(who, |reply| Call::InjectFault { node: "n1".into(), gpu, fault, from: "test".into(), reply })
    };
    let user = token(&mut h, "ana", "user");
    assert_eq!(inject(&mut h, &user, 1).expect_err("admins only").status, 403);
    assert_eq!(inject(&mut h, ADMIN, 7).expect_err("no GPU 7").status, 404);
    inject(&mut h, ADMIN, 1).expect("injected");
    assert!(h.orders().iter().any(|o| matches!(o, Order::InjectFault { gpu: 1, fault: Some(_) })));
    let n2 = token(&mut h, "n2", "node");
    h.call(&n2, |reply| Call::Register { reg: registration_with_source("n2", "nvml"), reply }).expect("joins");
    let fault = gpool_gpu::InjectedFault::Gone;
    let err = h
        .call(ADMIN, |reply| Call::InjectFault { node: "n2".into(), gpu: 0, fault, from: "test".into(), reply })
        .expect_err("real devices refuse");
    assert!(err.message.contains("reads real devices (nvml)"), "{}", err.message);
}

fn registration_with_source(node: &str, source: &str) -> api::agent::Register {
    let mut r = registration(node, 1, Vec::new());
    r.source = source.into();
    r
}

#[test]
fn an_application_xid_on_a_shared_gpu_ends_nobody_and_a_gpu_fault_under_it_is_not_the_jobs() {
    let mut h = Setup::new().policy("fifo").local_gpus(1).build();
    let a = h.submit("command: [y]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    let b = h.submit("command: [z]\nresources: {gpool.io/gpu-fraction: 0.25}\n");
    h.step(vec![report(1, 0, None)]);
    h.step(vec![report(1, 1, Some((0, &xid(13))))]);
    assert_eq!((h.state(a), h.state(b)), (api::JobState::Running, api::JobState::Running));
    assert!(h.event_messages("gpu_xid")[0].contains("share it; none is ended"));
    // One job alone on a GPU stops for its own XID, then the GPU fails under it: infrastructure, not its failure.
    let mut h = Setup::new().policy("fifo").local_gpus(1).build();
    let id = h.submit("command: [train]\nresources: {nvidia.com/gpu: 1}\nretries: 3\n");
    h.step(vec![report(1, 0, None)]);
    h.step(vec![report(1, 1, Some((0, &xid(13))))]);
    let both = |g: &mut GpuSample| {
        g.xid_count = Some(2);
        g.xids_recent = vec![13, 79];
    };
    h.step(vec![report(1, 2, Some((0, &both)))]);
    h.exit(key(id, 1, 0), None, Some(15));
    let failures = h.ctl.jobs.get(&id).map(|d| d.failures);
    assert_eq!(failures, Some(0), "the GPU fault replaced the XID as the cause");
    let view = h.job(id);
    assert_eq!(view.state, api::JobState::Pending, "requeued: its only GPU is out");
    assert!(view.reason.unwrap_or_default().contains("quarantined for faults"));
}

#[test]
fn a_verdict_no_check_asked_for_changes_nothing() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    h.step(vec![report(2, 0, None)]);
    h.step(vec![report(2, 1, Some((1, &xid(79))))]);
    let verdict = Event::Agent(AgentReport::Telemetry(crate::protocol::NodeReport {
        node: "n1".into(),
        health: vec![api::agent::HealthVerdict { gpu: 1, program: true, passed: true, output: "old".into() }],
        ..Default::default()
    }));
    h.step(vec![verdict]);
    assert!(quarantine_of(&mut h, 1).is_some(), "a verdict nobody ordered does not bring a GPU back");
    assert!(h.event_messages("gpu_check").is_empty() && h.event_messages("gpu_restored").is_empty());
}
