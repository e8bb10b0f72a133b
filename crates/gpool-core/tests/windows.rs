//! Issue 17: queue windows. A queue's jobs start only inside its windows,
//! to the second, in its time zone; the pass wakes when a window opens;
//! jobs waiting for a window are not demand; and a queue that says so has
//! its running jobs stopped (and requeued) when its windows close.

mod common;

use common::*;
use gpool_core::cron::{ZoneRules, days_from_civil};
use gpool_core::windows::{QueueWindows, Window, parse_clock, parse_days};
use gpool_core::{PendingReason, Time};

/// Unix time of a UTC civil time, seconds precision.
fn utc(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64) -> Time {
    Time::from_secs(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Weeknights 20:00 to 07:00 in UTC+1.
fn nights(stop_at_end: bool) -> QueueWindows {
    QueueWindows {
        windows: vec![Window { days: parse_days("mon-fri").expect("days"), from: 20 * 60, to: 7 * 60 }],
        zone: ZoneRules::fixed(3600),
        stop_at_end,
    }
}

#[test]
fn windows_read_days_and_times_as_people_write_them() {
    assert_eq!(parse_days("mon-fri"), Ok(0b0111110));
    assert_eq!(parse_days("sat,sun"), Ok(0b1000001));
    assert_eq!(parse_days("fri-mon"), Ok(0b1100011), "a range may wrap over the week's end");
    assert_eq!(parse_days("*"), Ok(0x7f));
    assert!(parse_days("someday").expect_err("bad").contains("is not a day"));
    assert_eq!(parse_clock("07:30"), Ok(450));
    assert_eq!(parse_clock("24:00"), Ok(1440));
    assert!(parse_clock("7pm").is_err() && parse_clock("25:00").is_err() && parse_clock("10:60").is_err());
}

#[test]
fn a_window_opens_and_closes_to_the_second_and_runs_past_midnight() {
    let w = nights(false);
    // Thursday 26 November 2026, 20:00 local is 19:00 UTC.
    assert!(!w.is_open(utc(2026, 11, 26, 18, 59, 59)));
    assert!(w.is_open(utc(2026, 11, 26, 19, 0, 0)));
    assert_eq!(w.next_change(utc(2026, 11, 26, 12, 0, 0)), Some(utc(2026, 11, 26, 19, 0, 0)));
    // Friday 07:00 local (06:00 UTC) it closes.
    assert!(w.is_open(utc(2026, 11, 27, 5, 59, 59)));
    assert!(!w.is_open(utc(2026, 11, 27, 6, 0, 0)));
    assert_eq!(w.next_change(utc(2026, 11, 26, 19, 0, 0)), Some(utc(2026, 11, 27, 6, 0, 0)));
    // Friday night's window runs into Saturday morning; none opens on Saturday or Sunday night.
    assert!(w.is_open(utc(2026, 11, 28, 5, 0, 0)));
    assert!(!w.is_open(utc(2026, 11, 28, 22, 0, 0)));
    assert_eq!(w.next_change(utc(2026, 11, 28, 6, 0, 0)), Some(utc(2026, 11, 30, 19, 0, 0)), "Monday night");
}

#[test]
fn a_queues_jobs_wait_for_its_window_and_the_pass_wakes_when_it_opens() {
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB").windowed_queue("night", nights(false));
    let batch = c.submit(job("u").gpus(4).queue("night"));
    let day = c.submit(job("u").gpus(2));
    let noon = utc(2026, 11, 26, 11, 0, 0);
    let plan = c.plan(noon);
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [day], "other queues run as ever");
    let opens = utc(2026, 11, 26, 19, 0, 0);
    assert_eq!(plan.reason_of(batch), Some(&PendingReason::Window { queue: "night".into(), opens: Some(opens) }));
    assert_eq!(plan.wake_at, Some(opens));
    c.apply(&plan);
    assert!(c.plan(Time::from_millis(opens.as_millis() - 1)).starts.is_empty(), "not a millisecond early");
    let plan = c.plan(opens);
    assert_eq!(plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(), [batch]);
}

#[test]
fn running_jobs_go_on_past_the_window_unless_the_queue_stops_them() {
    for stop in [false, true] {
        let mut c = Cluster::new("default").node("n", 8, "H100-80GB").windowed_queue("night", nights(stop));
        let opens = utc(2026, 11, 26, 19, 0, 0);
        let id = c.run(job("u").gpus(4).queue("night"), opens);
        let closes = utc(2026, 11, 27, 6, 0, 0);
        let before = c.plan(Time::from_millis(closes.as_millis() - 1));
        assert!(before.window_stops.is_empty());
        let plan = c.plan(closes);
        let want = if stop { vec![id] } else { vec![] };
        assert_eq!(plan.window_stops, want, "stopAtEnd: {stop}");
    }
}

#[test]
fn jobs_waiting_for_a_window_are_not_demand() {
    // Everything busy with preemptible work; a big job waits for tonight's window.
    let mut c = Cluster::new("default").node("n", 8, "H100-80GB").windowed_queue("night", nights(false));
    let noon = utc(2026, 11, 26, 11, 0, 0);
    c.run(job("a").gpus(8).preemptible(), noon);
    c.submit(job("b").gpus(8).queue("night"));
    let plan = c.plan(Time::from_secs(noon.as_millis() / 1000 + 5 * 3600));
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
    assert_eq!(plan.overloaded_since, None);
}
