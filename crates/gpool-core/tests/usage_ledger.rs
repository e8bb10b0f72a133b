//! The usage ledger: a report over a period from the hourly rollup equals
//! the sum over the jobs themselves, for every grouping, period and viewer.

use gpool_core::Time;
use gpool_core::cost::CostGroup;
use gpool_core::usage_ledger::{HOUR_MS, Usage, UsageLedger, by_group, hour_of};
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// A finished job: when it ended, its owner's indices and what it used.
type Job = (i64, usize, usize, usize, usize, f64, f64, f64, Option<f64>);

fn job() -> impl Strategy<Value = Job> {
    (
        0i64..(72 * HOUR_MS),
        0usize..3,
        0usize..3,
        0usize..3,
        0usize..3,
        0.0f64..100.0,
        0.0f64..10.0,
        0.0f64..500.0,
        prop::option::of(0.0f64..100.0),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn a_job_counts_in_the_hour_it_ended_and_a_report_starts_at_the_hour_of_since() {
    let mut l = UsageLedger::default();
    let at = |h: i64, m: i64| Time::from_millis(h * HOUR_MS + m * 60_000);
    l.add(at(10, 59), "ana", "vision", "batch", "p", Usage::of_job(2.0, 1.0, 0.5, 700.0, Some(40.0)));
    l.add(at(11, 0), "ana", "vision", "batch", "p", Usage::of_job(4.0, 3.0, 0.0, 2100.0, None));
    l.add(at(11, 30), "bo", "nlp", "batch", "p", Usage::of_job(1.0, 1.0, 0.0, 0.0, Some(80.0)));
    // Since 11:20: the 11 o'clock hour, both of its jobs; not the one that ended at 10:59.
    let rows = l.since(at(11, 20), |_| true);
    let teams = by_group(rows.iter().map(|(o, u)| (o.team.to_string(), *u)));
    assert_eq!(teams.iter().map(|(t, u)| (t.as_str(), u.jobs)).collect::<Vec<_>>(), vec![("vision", 1), ("nlp", 1)]);
    assert!(close(teams[0].1.dollars, 4.0) && close(teams[0].1.gpu_hours, 3.0));
    // Since 10:00: all three; ana's mean utilisation weighs only the job that sampled it.
    let ana: Vec<Usage> = l.since(at(10, 0), |o| &*o.user == "ana").into_values().collect();
    assert_eq!(ana.len(), 1);
    assert_eq!(ana[0].jobs, 2);
    assert_eq!(ana[0].mean_gpu_util(), Some(40.0));
    assert!(close(ana[0].idle_gpu_hours, 0.5) && close(ana[0].energy_wh, 2800.0));
    // Nonsense figures count as nothing, and nothing sampled means no mean.
    let mut bad = UsageLedger::default();
    bad.add(at(1, 0), "x", "t", "q", "p", Usage::of_job(f64::NAN, -3.0, f64::INFINITY, -1.0, Some(f64::NAN)));
    let u = bad.since(Time::from_millis(0), |_| true).into_values().next().expect("one owner");
    assert_eq!((u.jobs, u.dollars, u.gpu_hours, u.idle_gpu_hours, u.energy_wh), (1, 0.0, 0.0, 0.0, 0.0));
    assert_eq!(u.mean_gpu_util(), None);
    assert_eq!(hour_of(Time::from_millis(-1)).as_millis(), -HOUR_MS, "hours before 1970 round down too");
}

#[test]
fn a_report_by_job_starts_at_the_smallest_id_that_ended_in_the_period() {
    let mut l = UsageLedger::default();
    let at = |h: i64| Time::from_millis(h * HOUR_MS + 30 * 60_000);
    assert_eq!(l.first_job_since(at(0)), None);
    // Job 3 was submitted first of those still running at 10:00 and ended at 12:30.
    for (id, h) in [(1, 9), (2, 10), (7, 11), (3, 12), (9, 12)] {
        l.note_job(at(h), id);
    }
    assert_eq!(l.first_job_since(at(10)), Some(2), "10:30 is in the hour from 10:00");
    assert_eq!(l.first_job_since(at(11)), Some(3), "job 3 ended after 11:00 though job 7 ended first");
    assert_eq!(l.first_job_since(at(13)), None);
}

proptest! {
    #[test]
    fn a_report_from_the_ledger_equals_the_sum_over_its_jobs(
        jobs in prop::collection::vec(job(), 0..80),
        since in 0i64..(80 * HOUR_MS),
        viewer in prop::option::of(0usize..3),
    ) {
        let mut l = UsageLedger::default();
        for &(ended, u, t, q, p, dollars, hours, energy, util) in &jobs {
            l.add(Time::from_millis(ended), NAMES[u], NAMES[t], NAMES[q], NAMES[p], Usage::of_job(dollars, hours, hours / 2.0, energy, util));
        }
        let from = hour_of(Time::from_millis(since)).as_millis();
        let sees = |u: usize| viewer.is_none_or(|v| v == u);
        let rows = l.since(Time::from_millis(since), |o| viewer.is_none_or(|v| &*o.user == NAMES[v]));
        for by in [CostGroup::User, CostGroup::Team, CostGroup::Queue, CostGroup::Pool] {
            let got = by_group(rows.iter().map(|(o, u)| (o.group(by).unwrap_or("-").to_string(), *u)));
            for (name, usage) in &got {
                let of = |j: &Job| match by {
                    CostGroup::User => j.1,
                    CostGroup::Team => j.2,
                    CostGroup::Queue => j.3,
                    _ => j.4,
                };
                let mine: Vec<&Job> = jobs.iter().filter(|j| j.0 >= from && sees(j.1) && NAMES[of(j)] == name).collect();
                prop_assert_eq!(usage.jobs, mine.len() as u64, "{:?} {}", by, name);
                prop_assert!(close(usage.dollars, mine.iter().map(|j| j.5).sum()));
                prop_assert!(close(usage.gpu_hours, mine.iter().map(|j| j.6).sum()));
                prop_assert!(close(usage.energy_wh, mine.iter().map(|j| j.7).sum()));
                let sampled: f64 = mine.iter().filter(|j| j.8.is_some()).map(|j| j.6).sum();
                let weighted: f64 = mine.iter().filter_map(|j| j.8.map(|m| m * j.6)).sum();
                match usage.mean_gpu_util() {
                    Some(m) => prop_assert!(sampled > 0.0 && close(m * sampled, weighted)),
                    None => prop_assert!(sampled == 0.0),
                }
            }
            // Every job of the period is in some row, and largest spend comes first.
            let counted: u64 = got.iter().map(|(_, u)| u.jobs).sum();
            prop_assert_eq!(counted, jobs.iter().filter(|j| j.0 >= from && sees(j.1)).count() as u64);
            prop_assert!(got.windows(2).all(|w| w[0].1.dollars >= w[1].1.dollars));
        }
        prop_assert!(l.entries() <= jobs.len());
    }
}
