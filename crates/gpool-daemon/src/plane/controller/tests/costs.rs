//! What runs cost.

use super::*;

#[test]
fn a_cpx_partition_is_charged_its_share_of_the_gpu() {
    let mut h = Setup::new().no_local_node().build();
    let mut reg = registration("mi", 8, Vec::new());
    for g in &mut reg.gpus {
        g.kind = "amd-gpu".into();
        g.name = "AMD Instinct MI300X".into();
        g.model = "MI300X-CPX".into();
        g.memory_mb = 24_560;
    }
    h.call(ADMIN, |reply| Call::Register { reg, reply }).expect("registered");
    let id = h.submit("command: [x]\nresources: {amd.com/gpu: 1}\n");
    assert_eq!(h.state(id), api::JobState::Running);
    h.advance(Duration::from_secs(3600));
    let report = h
        .call(ADMIN, |reply| Call::Cost { by: "job".into(), since: Duration::from_secs(86_400), reply })
        .expect("a report");
    // An hour of an eighth of an MI300X ($6.00 an hour): $0.75.
    assert_eq!(report.rows.len(), 1, "{report:?}");
    assert!((report.rows[0].dollars - 0.75).abs() < 1e-3, "{report:?}");
}
