//! Queue windows (issue 17) through the controller: a job of a windowed
//! queue waits, saying when the window opens; starts when it opens; and,
//! in a queue that stops its jobs at the window's end, is stopped then and
//! requeued for the next window.

use gpool_core::cron::ZoneRules;
use gpool_core::windows::{QueueWindows, Window};

use super::*;

/// 23:00 to 01:00 UTC every day; T0 is 22:13:20 UTC.
fn late(stop_at_end: bool) -> QueueWindows {
    QueueWindows { windows: vec![Window { days: 0x7f, from: 23 * 60, to: 60 }], zone: ZoneRules::fixed(0), stop_at_end }
}

const OPENS: i64 = T0 - T0 % 3_600_000 + 3_600_000;
const CLOSES: i64 = OPENS + 2 * 3_600_000;

#[test]
fn a_job_of_a_windowed_queue_waits_for_its_window_then_starts() {
    let mut h = Setup::new().policy("fifo").windowed_queue("night", late(false)).build();
    let id = h.submit("command: [x]\nqueue: night\nresources: {nvidia.com/gpu: 1}\n");
    assert!(h.starts().is_empty());
    let reason = h.job(id).reason.unwrap_or_default();
    assert_eq!(
        reason,
        format!("queue night starts jobs only in its windows; the next opens at {}", api::time::rfc3339(OPENS))
    );
    h.clock.set(OPENS - 1);
    h.step(Vec::new());
    assert!(h.starts().is_empty(), "not a millisecond early");
    h.clock.set(OPENS);
    h.step(Vec::new());
    assert_eq!(h.starts().len(), 1);
    // Without stopAtEnd it runs on past the window.
    h.clock.set(CLOSES);
    h.step(Vec::new());
    assert_eq!(h.state(id), api::JobState::Running);
}

#[test]
fn a_queue_that_stops_at_its_windows_end_requeues_its_running_jobs() {
    let mut h = Setup::new().policy("fifo").windowed_queue("night", late(true)).build();
    let id = h.submit("command: [x]\nqueue: night\nresources: {nvidia.com/gpu: 1}\n");
    h.clock.set(OPENS);
    h.step(Vec::new());
    assert_eq!(h.starts().len(), 1);
    h.clock.set(CLOSES);
    h.step(Vec::new());
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Stopping, "{j:?}");
    assert!(j.reason.as_deref().is_some_and(|r| r.contains("window closed")), "{j:?}");
    h.exit(key(id, 1, 0), None, Some(15));
    let j = h.job(id);
    assert_eq!(j.state, api::JobState::Pending, "requeued: {j:?}");
    assert!(h.event_messages("window_closed").iter().any(|m| m.contains("resumes in the next")));
    // It starts again when the window opens the next night, as attempt 2.
    h.clock.set(OPENS + 86_400_000);
    h.step(Vec::new());
    let started: Vec<ReplicaKey> = h.starts().into_iter().map(|(k, _)| k).collect();
    assert_eq!(started, [key(id, 2, 0)]);
}
