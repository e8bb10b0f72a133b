//! `gpool hold` and `gpool release`.

use super::*;

/// A held job waits, saying who held it, until it is released; only a
/// pending job can be held.
#[test]
fn a_held_job_waits_until_it_is_released() {
    let mut h = Setup::new().policy("fifo").local_gpus(2).build();
    let busy = h.submit("command: [x]\nresources: {nvidia.com/gpu: 2}\n");
    let id = h.submit("command: [x]\nresources: {nvidia.com/gpu: 1}\n");
    let hold = |h: &mut Harness, id: u64, hold: bool| {
        h.call(ADMIN, |reply| Call::Hold { id, hold, from: "test".into(), reply })
    };
    let e = hold(&mut h, busy, true).expect_err("a running job");
    assert_eq!(e.status, 409, "{e:?}");
    assert!(e.message.contains("only a pending job can be held"), "{e:?}");
    let v = hold(&mut h, id, true).expect("held");
    assert_eq!(v.reason.as_deref(), Some(format!("held by root (gpool release {id})").as_str()));
    h.exit(key(busy, 1, 0), Some(0), None);
    assert_eq!(h.state(id), api::JobState::Pending, "held: the free GPUs do not start it");
    assert_eq!(h.event_messages("held").len(), 1);
    hold(&mut h, id, false).expect("released");
    assert_eq!(h.state(id), api::JobState::Running, "released: it starts");
}
