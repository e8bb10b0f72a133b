//! The core's fault decisions, as tables: which readings take a GPU out,
//! which end only the job, and when a quarantined GPU comes back.

use gpool_core::fault::{
    CHECK_AFTER, CHECK_EVERY, CHECK_TIMEOUT, Fault, FaultChange, FaultReading, Faults, QUIET_FOR, REPEAT_WINDOW,
    Returned,
};
use gpool_core::time::Time;

fn clean() -> FaultReading {
    FaultReading {
        xid_count: Some(0),
        ecc_uncorrected: Some(0),
        remap_pending: Some(false),
        remap_failed: Some(false),
        ..FaultReading::default()
    }
}

fn xids(list: &[u64]) -> FaultReading {
    FaultReading { xid_count: Some(list.len() as u64), xids_recent: list.to_vec(), ..clean() }
}

fn at(s: i64) -> Time {
    Time::from_secs(s)
}

fn secs(d: std::time::Duration) -> i64 {
    d.as_secs() as i64
}

#[test]
fn what_each_reading_does_after_a_clean_one() {
    let cases: Vec<(&str, FaultReading, Vec<FaultChange>)> = vec![
        ("nothing new", clean(), vec![]),
        ("XID 79", xids(&[79]), vec![FaultChange::Quarantined(Fault::Xid(79))]),
        ("XID 48", xids(&[48]), vec![FaultChange::Quarantined(Fault::Xid(48))]),
        ("XID 13 ends the job only", xids(&[13]), vec![FaultChange::JobFatal(13)]),
        ("XID 63 is noted", xids(&[63]), vec![FaultChange::Noted(Fault::Xid(63))]),
        (
            "a job's XID then a fatal one",
            xids(&[13, 95]),
            vec![FaultChange::Quarantined(Fault::Xid(95)), FaultChange::JobFatal(13)],
        ),
        (
            "uncorrectable ECC rose",
            FaultReading { ecc_uncorrected: Some(2), ..clean() },
            vec![FaultChange::Quarantined(Fault::EccUncorrected(2))],
        ),
        (
            "remap failed",
            FaultReading { remap_failed: Some(true), ..clean() },
            vec![FaultChange::Quarantined(Fault::RemapFailed)],
        ),
        (
            "remap pending",
            FaultReading { remap_pending: Some(true), ..clean() },
            vec![FaultChange::Quarantined(Fault::RemapPending)],
        ),
        (
            "missing from the report",
            FaultReading { missing: true, ..FaultReading::default() },
            vec![FaultChange::Quarantined(Fault::Missing)],
        ),
        (
            "the device says so",
            FaultReading { health_fault: Some("GPU is lost".into()), ..clean() },
            vec![FaultChange::Quarantined(Fault::Device("GPU is lost".into()))],
        ),
        ("unknown counters say nothing", FaultReading { xid_count: None, ecc_uncorrected: None, ..clean() }, vec![]),
    ];
    for (name, reading, want) in cases {
        let mut f = Faults::default();
        assert_eq!(f.observe(&0, at(0), &clean()), vec![], "{name}: baseline");
        assert_eq!(f.observe(&0, at(1), &reading), want, "{name}");
        let out = want.iter().any(|c| matches!(c, FaultChange::Quarantined(_)));
        assert_eq!(f.quarantine(&0).is_some(), out, "{name}: quarantined?");
    }
}

#[test]
fn counters_seen_first_set_the_baseline_but_states_count_at_once() {
    let mut f = Faults::default();
    // An agent that restarts reports the XIDs and ECC count it had: not new.
    assert_eq!(f.observe(&0, at(0), &FaultReading { ecc_uncorrected: Some(3), ..xids(&[79]) }), vec![]);
    let mut g = Faults::default();
    let out = g.observe(&0, at(0), &FaultReading { remap_failed: Some(true), ..clean() });
    assert_eq!(out, vec![FaultChange::Quarantined(Fault::RemapFailed)]);
}

#[test]
fn a_quarantine_fires_once_and_later_faults_are_noted() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    assert_eq!(f.observe(&0, at(1), &xids(&[79])).len(), 1);
    assert_eq!(f.observe(&0, at(2), &FaultReading { missing: true, ..FaultReading::default() }), vec![]);
    assert_eq!(f.observe(&0, at(3), &xids(&[79, 48])), vec![FaultChange::Noted(Fault::Xid(48))]);
    assert_eq!(f.quarantined().count(), 1);
}

#[test]
fn the_built_in_check_returns_a_quiet_gpu_and_keeps_a_faulty_one() {
    let (after, every, quiet) = (secs(CHECK_AFTER), secs(CHECK_EVERY), secs(QUIET_FOR));
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    f.observe(&0, at(10), &xids(&[79]));
    assert!(!f.check_due(&0, at(10 + after - 1)), "waits CHECK_AFTER first");
    let t = 10 + after;
    assert!(f.check_due(&0, at(t)));
    f.check_started(&0, at(t));
    assert!(!f.check_due(&0, at(t)), "one check at a time");
    // Still missing: the check fails, the GPU stays out, the next check waits.
    f.observe(&0, at(t), &FaultReading { missing: true, ..FaultReading::default() });
    assert_eq!(f.check_done(&0, at(t), None), None);
    assert!(f.quarantine(&0).and_then(|q| q.last_check.as_ref()).is_some_and(|(_, s)| s.contains("still shows")));
    assert!(!f.check_due(&0, at(t + 1)));
    let t2 = t + every;
    assert!(f.check_due(&0, at(t2)));
    f.check_started(&0, at(t2));
    // Answers again, but faulted just now: not yet, and checked again once quiet long enough.
    assert_eq!(f.observe(&0, at(t2), &xids(&[79, 79])), vec![FaultChange::Noted(Fault::Xid(79))]);
    assert_eq!(f.check_done(&0, at(t2), None), None);
    assert!(!f.check_due(&0, at(t2 + quiet - 1)));
    let t3 = t2 + quiet;
    assert!(f.check_due(&0, at(t3)), "not CHECK_EVERY later: as soon as it is quiet");
    f.observe(&0, at(t3), &xids(&[79, 79]));
    f.check_started(&0, at(t3));
    assert_eq!(f.check_done(&0, at(t3), None), Some(Returned::BuiltIn));
    assert!(f.quarantine(&0).is_none());
}

#[test]
fn a_program_decides_when_the_node_has_one_and_a_hung_check_is_retried() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    f.observe(&0, at(1), &FaultReading { ecc_uncorrected: Some(1), ..clean() });
    let t = 1 + secs(CHECK_AFTER);
    f.check_started(&0, at(t));
    assert!(!f.check_due(&0, at(t + secs(CHECK_TIMEOUT) - 1)));
    assert!(f.check_due(&0, at(t + secs(CHECK_TIMEOUT))), "no answer within the timeout: check again");
    assert_eq!(f.check_done(&0, at(t), Some((false, "dcgmi diag: fail".into()))), None);
    let t2 = t + secs(CHECK_EVERY);
    assert_eq!(f.check_done(&0, at(t2), Some((true, "late".into()))), None, "no check asked: ignored");
    assert!(f.quarantine(&0).is_some());
    f.check_started(&0, at(t2));
    let back = f.check_done(&0, at(t2), Some((true, "dcgmi diag: pass".into())));
    assert_eq!(back, Some(Returned::Program("dcgmi diag: pass".into())));
}

#[test]
fn a_second_fault_within_a_day_keeps_the_gpu_out_until_an_operator_says() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    f.observe(&0, at(1), &xids(&[79]));
    assert!(f.restore_by_operator(&0, at(2)));
    assert!(!f.restore_by_operator(&0, at(2)), "restoring a GPU in service says so");
    let again = 1 + secs(REPEAT_WINDOW) - 10;
    assert_eq!(f.observe(&0, at(again), &xids(&[79, 74])), vec![FaultChange::Quarantined(Fault::Xid(74))]);
    assert!(f.quarantine(&0).expect("out").operator_only);
    let later = again + 10 * secs(CHECK_EVERY);
    assert!(!f.check_due(&0, at(later)), "no check brings it back");
    assert_eq!(f.check_done(&0, at(later), Some((true, "ok".into()))), None);
    assert!(f.restore_by_operator(&0, at(later)));
    // A day after the last fault, a new one is a first one again.
    f.observe(&0, at(again + secs(REPEAT_WINDOW) + 1), &xids(&[79, 74, 79]));
    assert!(f.quarantine(&0).is_some_and(|q| !q.operator_only));
}

#[test]
fn reports_read_before_an_operator_restore_do_not_take_the_gpu_out_again() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    f.observe(&0, at(1), &FaultReading { missing: true, ..FaultReading::default() });
    assert!(f.restore_by_operator(&0, at(5)));
    // Still on its way: a report from before the restore.
    assert_eq!(f.observe(&0, at(6), &FaultReading { missing: true, ..FaultReading::default() }), vec![]);
    // A new XID is a new fault, settling or not.
    assert_eq!(f.observe(&0, at(7), &xids(&[79])).len(), 1);
    assert!(f.restore_by_operator(&0, at(8)));
    // Still gone once the settling time is over: out again.
    let after = 8 + secs(gpool_core::fault::RESTORE_SETTLE);
    let out = f.observe(&0, at(after), &FaultReading { missing: true, ..FaultReading::default() });
    assert_eq!(out, vec![FaultChange::Quarantined(Fault::Missing)]);
}

#[test]
fn counters_that_restarted_count_what_they_show_as_new() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &FaultReading { ecc_uncorrected: Some(5), ..xids(&[13, 13, 13]) });
    // The agent restarted: its XID count is back at 1, the driver's ECC count at 1.
    let out = f.observe(&0, at(1), &FaultReading { ecc_uncorrected: Some(1), ..xids(&[79]) });
    assert_eq!(out, vec![FaultChange::Quarantined(Fault::Xid(79)), FaultChange::Noted(Fault::EccUncorrected(1))]);
}

#[test]
fn recent_faults_of_a_gpu_in_service_outlive_a_restart() {
    let mut f = Faults::default();
    f.observe(&0, at(0), &clean());
    f.observe(&0, at(10), &xids(&[79]));
    f.restore_by_operator(&0, at(20));
    let kept: Vec<(u32, Vec<Time>)> = f.recent_history(at(30)).map(|(k, v)| (*k, v)).collect();
    assert_eq!(kept, vec![(0, vec![at(10)])]);
    assert_eq!(f.recent_history(at(10 + secs(REPEAT_WINDOW))).count(), 0, "a day later it is forgotten");
    let mut g = Faults::default();
    g.restore_history(0, vec![at(10)]);
    g.observe(&0, at(40), &clean());
    g.observe(&0, at(50), &xids(&[48]));
    assert!(g.quarantine(&0).is_some_and(|q| q.operator_only), "a repeat across the restart");
}

#[test]
fn a_kept_quarantine_survives_a_new_control_plane() {
    let mut f = Faults::default();
    f.observe(&(1, 2), at(0), &clean());
    f.observe(&(1, 2), at(5), &xids(&[48]));
    let (k, q) = f.quarantined().next().map(|(k, q)| (*k, q.clone())).expect("one");
    let times = f.fault_times(&k);
    let mut g: Faults<(u32, u32)> = Faults::default();
    g.restore(k, q.clone(), times);
    assert_eq!(g.quarantine(&(1, 2)), Some(&q));
    // Its first reading after the restart (same counters) changes nothing.
    assert_eq!(g.observe(&(1, 2), at(9), &xids(&[48])), vec![]);
    assert!(g.quarantine(&(1, 2)).is_some());
}

mod common;

use common::{Cluster, job, t};
use proptest::prelude::*;

#[test]
fn nothing_new_goes_on_a_quarantined_gpu_and_the_reason_says_so() {
    let mut c = Cluster::new("fifo").node("n", 4, "H100-80GB");
    let n = c.id("n");
    c.snap.set_quarantined_gpus(n, &[1]).expect("quarantine");
    assert_eq!(c.snap.quarantined_gpus(n), [1]);
    let two = c.submit(job("u").gpus(2));
    let plan = c.plan(t(0));
    assert_eq!(c.devices_of(&plan, two), ["0", "2"]);
    c.apply(&plan);
    // Not even the last free GPU's share, nor a 1-GPU job: only GPU 3 is left.
    let one = c.submit(job("u").gpus(1));
    let share = c.submit(job("u").share(Some(250), None));
    let plan = c.plan(t(1));
    assert_eq!(c.devices_of(&plan, one), ["3"]);
    assert!(plan.starts.iter().all(|s| s.job != share), "no share of the quarantined GPU");
    assert!(c.reason(&plan, share).contains("1 GPU(s) quarantined for faults"), "{}", c.reason(&plan, share));
    c.apply(&plan);
    // Back in service: it is used again.
    c.snap.set_quarantined_gpus(n, &[]).expect("restore");
    assert_eq!(c.devices_of(&c.plan(t(2)), share), ["1"]);
}

#[test]
fn a_four_gpu_job_waits_while_one_of_four_is_out_and_preemption_does_not_free_it() {
    let mut c = Cluster::new("default").node("n", 4, "H100-80GB");
    let n = c.id("n");
    // The low job runs on GPU 0 (the first fit).
    c.run(job("u").gpus(1).preemptible(), t(0));
    let big = c.submit(job("v").gpus(4).priority(100));
    assert!(!c.plan(t(1)).preemptions.is_empty(), "with all four in service, the big job preempts");
    c.snap.set_quarantined_gpus(n, &[0]).expect("quarantine");
    let plan = c.plan(t(1));
    assert!(plan.starts.iter().all(|s| s.job != big), "3 usable GPUs cannot run 4");
    assert!(plan.preemptions.is_empty(), "preempting cannot free a quarantined GPU: {:?}", plan.preemptions);
}

#[test]
fn mig_slices_of_a_quarantined_gpu_are_out_too() {
    let mut c = Cluster::new("fifo").mig_node("m", &["3g.40gb", "3g.40gb"]);
    let m = c.id("m");
    c.snap.set_quarantined_gpus(m, &[0]).expect("quarantine");
    assert_eq!(c.snap.quarantined_gpus(m), [0]);
    let slice = c.submit(job("u").mig("3g.40gb"));
    assert!(c.plan(t(0)).starts.is_empty(), "no slice of a quarantined MIG GPU");
    c.snap.set_quarantined_gpus(m, &[]).expect("restore");
    assert_eq!(c.plan(t(1)).starts.iter().map(|s| s.job).collect::<Vec<_>>(), [slice]);
}

proptest! {
    /// Whatever is quarantined and whatever asks, no start lands on a quarantined GPU.
    #[test]
    fn no_start_ever_uses_a_quarantined_gpu(
        out in proptest::collection::btree_set(0u32..8, 0..8),
        asks in proptest::collection::vec((1u32..5, 1u32..3), 1..6),
    ) {
        let mut c = Cluster::new("fifo").node("a", 8, "H100-80GB").node("b", 8, "H100-80GB");
        let a = c.id("a");
        let out: Vec<u32> = out.into_iter().collect();
        c.snap.set_quarantined_gpus(a, &out).expect("quarantine");
        for (gpus, replicas) in asks {
            c.submit(job("u").gpus(gpus).replicas(replicas));
        }
        let plan = c.plan(t(0));
        for s in &plan.starts {
            for r in &s.placement {
                if r.node == a {
                    for d in c.snap.replica_devices(r).0 {
                        prop_assert!(!out.contains(&d.index), "GPU {} of a is quarantined", d.index);
                    }
                }
            }
        }
    }
}

#[test]
fn a_mig_repartition_keeps_the_quarantine_and_the_planner_leaves_a_quarantined_gpu_alone() {
    let mut c = Cluster::new("fifo").mig_node("m", &["3g.40gb", "3g.40gb"]);
    let m = c.id("m");
    c.snap.set_quarantined_gpus(m, &[0]).expect("quarantine");
    let profile: gpool_core::MigProfile = "1g.10gb".parse().expect("profile");
    let one =
        gpool_core::MigInstance { memory_mb: 9_800, profile, uuid: std::sync::Arc::from("MIG-new-0"), gi_id: Some(9) };
    c.snap.repartition(m, 0, vec![one]).expect("repartition");
    assert_eq!(c.snap.quarantined_gpus(m), [0], "rebuilding the node keeps its quarantine");
    c.snap.set_mig_managed(m, 0, true).expect("managed");
    c.submit(job("u").mig("1g.10gb"));
    c.submit(job("u").mig("1g.10gb"));
    let plan = gpool_core::mig_planner::plan_for(&c.snap, |_, _| true);
    assert!(plan.repartitions.is_empty() && plan.drain.is_empty(), "{plan:?}");
}
