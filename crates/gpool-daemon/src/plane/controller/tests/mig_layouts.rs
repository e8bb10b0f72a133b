//! MIG layouts that follow the queue (`mig_layouts.rs`): a change that
//! failed is not ordered again until its back-off ends (issue 40, point 1).

use api::agent as wire;

use super::*;

/// A remote node with one H100 in MIG mode, no instances yet, managed by the planner.
fn mig_node(h: &mut Harness) -> u64 {
    let mut reg = registration("m1", 1, Vec::new());
    reg.gpus[0].mig = Some(Vec::new());
    reg.mig_managed = vec![0];
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered").epoch
}

/// Layout commands waiting for the node, acknowledging everything before `after`.
fn layouts(h: &mut Harness, epoch: u64, after: &mut u64) -> usize {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let call = Call::Poll { node: "m1".into(), epoch, after: *after, reply: tx };
    h.step(vec![Event::Api { who: ADMIN.into(), call }]);
    let Ok(Ok(cmds)) = rx.try_recv() else { return 0 };
    if let Some(last) = cmds.commands.last() {
        *after = last.seq;
    }
    cmds.commands.iter().filter(|c| matches!(c.command, wire::Command::MigLayout { .. })).count()
}

fn outcome(h: &mut Harness, epoch: u64, error: Option<&str>) {
    let telemetry = wire::TelemetryWire {
        mig: Some(wire::MigOutcome { gpu: 0, error: error.map(String::from), gpus: None }),
        ..wire::TelemetryWire::default()
    };
    let report =
        wire::Report { node: "m1".into(), epoch, events: Vec::new(), telemetry: Some(telemetry), roster_version: 0 };
    h.call(ADMIN, |reply| Call::Report { report, reply }).expect("report taken");
}

fn heartbeats(h: &mut Harness, epoch: u64, secs: u64) {
    for _ in 0..secs {
        h.advance(Duration::from_secs(1));
        let report = wire::Report { node: "m1".into(), epoch, events: Vec::new(), telemetry: None, roster_version: 0 };
        h.call(ADMIN, |reply| Call::Report { report, reply }).expect("heartbeat");
    }
}

#[test]
fn a_failed_layout_change_is_not_ordered_again_until_its_back_off_ends() {
    let mut h = Setup::new().no_local_node().build();
    let epoch = mig_node(&mut h);
    let mut after = 0;
    h.submit("command: [x]\nresources: {nvidia.com/mig-1g.10gb: 1}\n");
    assert_eq!(layouts(&mut h, epoch, &mut after), 1, "the planner lays the GPU out for the job");
    h.event_kinds();
    outcome(&mut h, epoch, Some("nvidia-smi: not found"));
    let said = h.event_messages("mig_repartition_failed");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("not found") && said[0].contains("left alone for 30 s"), "{said:?}");
    // Passes go on (heartbeats, the job still waiting), but the GPU is left alone.
    heartbeats(&mut h, epoch, 25);
    assert_eq!(layouts(&mut h, epoch, &mut after), 0, "not ordered again within its back-off");
    heartbeats(&mut h, epoch, 6);
    assert_eq!(layouts(&mut h, epoch, &mut after), 1, "ordered again once it ended");
    outcome(&mut h, epoch, Some("nvidia-smi: not found"));
    let said = h.event_messages("mig_repartition_failed");
    assert!(said.iter().any(|m| m.contains("left alone for 60 s")), "the back-off doubles: {said:?}");
}
