//! Issue 17: recurring jobs. Cron expressions as Vixie cron reads them, in
//! a time zone with daylight saving, to the second; and a schedule fires
//! once per occurrence whatever the control plane's wake-ups and restarts.

use gpool_core::Time;
use gpool_core::cron::{Cron, ZoneRules, days_from_civil};
use gpool_core::recurring::{Due, due};
use proptest::prelude::*;

/// Unix seconds of a UTC civil time.
fn utc(y: i64, mo: u32, d: u32, h: i64, mi: i64) -> Time {
    Time::from_secs(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60)
}

/// Europe/Paris in 2026: CET (+1), CEST (+2) from 29 March 01:00 UTC to 25 October 01:00 UTC.
fn paris() -> ZoneRules {
    ZoneRules {
        initial: 3600,
        transitions: vec![
            (utc(2026, 3, 29, 1, 0).as_millis() / 1000, 7200),
            (utc(2026, 10, 25, 1, 0).as_millis() / 1000, 3600),
            (utc(2027, 3, 28, 1, 0).as_millis() / 1000, 7200),
        ],
    }
}

fn next(expr: &str, after: Time, zone: &ZoneRules) -> Time {
    Cron::parse(expr).expect("valid").next_after(after, zone).expect("occurs")
}

#[test]
fn expressions_are_read_as_cron_reads_them() {
    let z = ZoneRules::fixed(0);
    let from = utc(2026, 11, 26, 8, 5); // a Thursday
    let table = [
        ("0 2 * * *", utc(2026, 11, 27, 2, 0)),
        ("*/15 * * * *", utc(2026, 11, 26, 8, 15)),
        ("5 8 * * *", utc(2026, 11, 27, 8, 5)),
        ("0 9-17/4 * * mon-fri", utc(2026, 11, 26, 9, 0)),
        ("0 0 * * sat,sun", utc(2026, 11, 28, 0, 0)),
        ("0 0 * * 7", utc(2026, 11, 29, 0, 0)),
        ("0 0 1 jan *", utc(2027, 1, 1, 0, 0)),
        ("0 0 29 2 *", utc(2028, 2, 29, 0, 0)),
        // Both day fields restricted: the 1st, or any Friday (Vixie's rule).
        ("0 0 1 * fri", utc(2026, 11, 27, 0, 0)),
        ("30 12 5/10 * *", utc(2026, 12, 5, 12, 30)),
        ("0 0 * * 5-7", utc(2026, 11, 27, 0, 0)),
        ("@hourly", utc(2026, 11, 26, 9, 0)),
        ("@daily", utc(2026, 11, 27, 0, 0)),
        ("@weekly", utc(2026, 11, 29, 0, 0)),
        ("@monthly", utc(2026, 12, 1, 0, 0)),
    ];
    for (expr, want) in table {
        assert_eq!(next(expr, from, &z), want, "{expr}");
    }
    // Strictly after: an occurrence at `after` itself is not the next one.
    assert_eq!(next("5 8 * * *", utc(2026, 11, 26, 8, 5), &z), utc(2026, 11, 27, 8, 5));
    assert_eq!(
        next("5 8 * * *", Time::from_millis(utc(2026, 11, 26, 8, 5).as_millis() - 1), &z),
        utc(2026, 11, 26, 8, 5)
    );
}

#[test]
fn malformed_expressions_say_what_is_wrong() {
    let table = [
        ("0 2 * *", "a schedule has five fields"),
        ("61 * * * *", "minute field \"61\": 61 is outside 0-59"),
        ("0 24 * * *", "hour field \"24\": 24 is outside 0-23"),
        ("0 0 * foo *", "month field \"foo\": \"foo\" is not a number or one of jan, feb"),
        ("*/0 * * * *", "a step of 0"),
        ("0 0 5-1 * *", "the range 5-1 goes backwards"),
        ("0 0 30 2 *", "never occurs"),
        ("@often", "a schedule has five fields"),
    ];
    for (expr, want) in table {
        let err = Cron::parse(expr).expect_err(expr).to_string();
        assert!(err.contains(want), "{expr}: {err:?} should say {want:?}");
    }
}

#[test]
fn daylight_saving_jumps_neither_skip_nor_repeat_a_run() {
    let z = paris();
    // 02:30 does not exist on 29 March 2026 in Paris: the run is at 03:00 local (01:00 UTC).
    assert_eq!(next("30 2 * * *", utc(2026, 3, 28, 12, 0), &z), utc(2026, 3, 29, 1, 0));
    // The day after, 02:30 CEST is 00:30 UTC.
    assert_eq!(next("30 2 * * *", utc(2026, 3, 29, 1, 0), &z), utc(2026, 3, 30, 0, 30));
    // 02:30 occurs twice on 25 October: the first (CEST, 00:30 UTC) only.
    let first = next("30 2 * * *", utc(2026, 10, 24, 12, 0), &z);
    assert_eq!(first, utc(2026, 10, 25, 0, 30));
    assert_eq!(next("30 2 * * *", first, &z), utc(2026, 10, 26, 1, 30), "not again at 01:30 UTC");
    // Winter: 02:00 local is 01:00 UTC.
    assert_eq!(next("0 2 * * *", utc(2026, 12, 1, 12, 0), &z), utc(2026, 12, 2, 1, 0));
    // An hourly schedule across the spring jump: 01:00, 03:00 local (02:00 never was), 04:00.
    let mut t = utc(2026, 3, 28, 23, 30);
    let mut runs = Vec::new();
    for _ in 0..4 {
        t = next("0 * * * *", t, &z);
        runs.push(t);
    }
    assert_eq!(runs, [utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0), utc(2026, 3, 29, 3, 0)]);
}

#[test]
fn a_schedule_is_due_to_the_second_and_missed_runs_fire_once() {
    let z = ZoneRules::fixed(0);
    let cron = Cron::parse("0 2 * * *").expect("valid");
    let created = utc(2026, 11, 26, 1, 0);
    let at = utc(2026, 11, 26, 2, 0);
    let just_before = Time::from_millis(at.as_millis() - 1);
    assert_eq!(due(&cron, &z, created, just_before, false, false), Due::Wait { next: Some(at) });
    assert_eq!(due(&cron, &z, created, at, false, false), Due::Fire { occurrence: at, missed: 0 });
    // Down for three days: one run, for the latest occurrence.
    let later = utc(2026, 11, 29, 9, 0);
    assert_eq!(
        due(&cron, &z, created, later, false, false),
        Due::Fire { occurrence: utc(2026, 11, 29, 2, 0), missed: 3 }
    );
    // The previous run still going: passed over, unless overlap is allowed.
    assert_eq!(due(&cron, &z, created, at, true, false), Due::Skip { occurrence: at, missed: 0 });
    assert_eq!(due(&cron, &z, created, at, true, true), Due::Fire { occurrence: at, missed: 0 });
}

proptest! {
    /// The shell wakes at arbitrary moments (timers early or late, restarts
    /// that lose everything but the persisted last occurrence, time down):
    /// each occurrence is acted on at most once, in order; and an occurrence
    /// passed over is always one a later occurrence superseded before the
    /// control plane looked.
    #[test]
    fn each_occurrence_fires_at_most_once_and_none_is_lost(
        expr in prop::sample::select(vec!["*/7 * * * *", "0 * * * *", "30 2 * * *", "0 9-17 * * 1-5", "15 */3 * * *"]),
        wakes in proptest::collection::vec(1i64..20_000, 1..120),
    ) {
        let z = paris();
        let cron = Cron::parse(expr).expect("valid");
        let start = utc(2026, 3, 27, 0, 0);
        let mut last = start; // persisted
        let mut now = start;
        let mut acted: Vec<Time> = Vec::new();
        let mut looks: Vec<Time> = Vec::new();
        for step in wakes {
            now = Time::from_secs(now.as_millis() / 1000 + step);
            looks.push(now);
            if let Some(o) = due(&cron, &z, last, now, false, false).occurrence() {
                prop_assert!(o <= now && o > last);
                acted.push(o);
                last = o;
            }
        }
        prop_assert!(acted.windows(2).all(|w| w[0] < w[1]), "in order, none twice: {acted:?}");
        // Every occurrence up to the last look: acted on, or superseded before the next look.
        let mut t = start;
        while let Some(o) = cron.next_after(t, &z).filter(|o| *o <= now) {
            if !acted.contains(&o) {
                let look = looks.iter().find(|l| **l >= o).copied().expect("a look after it");
                let superseding = cron.next_after(o, &z).expect("next");
                prop_assert!(superseding <= look, "{o:?} was lost: the next look at {look:?} came before {superseding:?}");
            }
            t = o;
        }
    }
}
