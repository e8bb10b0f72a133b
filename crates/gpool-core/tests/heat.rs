//! Heat and stragglers: which GPU is degraded, and which replica holds its
//! gang back, from samples (`heat.rs`, `straggler.rs`).

use std::time::Duration;

use gpool_core::advice::{DevicePoint, DeviceSeries, FindingKind, JobUsage, Thresholds, advise};
use gpool_core::heat::{DEGRADE_AFTER, HeatChange, HeatSample, HeatWatch, RECOVER_AFTER, hot_reason, throttle};
use gpool_core::straggler::{StragglerReason, WINDOW, find_straggler};
use gpool_core::time::Time;
use proptest::prelude::*;

fn sample(temp: f64, reasons: &[&str]) -> HeatSample {
    HeatSample { temperature_c: Some(temp), slowdown_c: Some(90.0), throttle: throttle::bits(reasons) }
}

#[test]
fn a_sample_is_hot_for_a_thermal_reason_or_near_its_slowdown_temperature() {
    let cases: [(HeatSample, Option<&str>); 7] = [
        (sample(60.0, &[]), None),
        (sample(60.0, &["sw_power_cap"]), None),
        (sample(60.0, &["idle"]), None),
        (sample(91.0, &["hw_thermal_slowdown"]), Some("hw_thermal_slowdown at 91 °C")),
        (sample(70.0, &["sw_thermal_slowdown", "hw_slowdown"]), Some("hw_slowdown, sw_thermal_slowdown at 70 °C")),
        (sample(87.0, &[]), Some("87 °C, within 3 °C of its slowdown temperature 90 °C")),
        (HeatSample { temperature_c: Some(89.0), slowdown_c: None, throttle: 0 }, None),
    ];
    for (s, want) in cases {
        assert_eq!(hot_reason(&s).as_deref(), want, "{s:?}");
    }
}

#[test]
fn a_gpu_is_degraded_after_staying_hot_and_trusted_again_after_staying_cool() {
    let mut w: HeatWatch<u32> = HeatWatch::default();
    let at = |s: u64| Time::from_secs(0).plus(Duration::from_secs(s));
    let hot = sample(91.0, &["hw_thermal_slowdown"]);
    let cool = sample(50.0, &[]);
    assert_eq!(w.observe(&2, at(0), &hot), None, "one hot sample is not enough");
    assert_eq!(w.observe(&2, at(5), &cool), None, "a cool sample starts over");
    assert_eq!(w.observe(&2, at(6), &hot), None);
    assert_eq!(w.observe(&2, at(15), &hot), None);
    assert_eq!(
        w.observe(&2, at(16), &hot),
        Some(HeatChange::Degraded("hw_thermal_slowdown at 91 °C".into())),
        "hot for DEGRADE_AFTER"
    );
    assert_eq!(w.degraded(&2), Some("hw_thermal_slowdown at 91 °C"));
    assert_eq!(w.observe(&2, at(17), &hot), None, "said once");
    assert_eq!(w.observe(&2, at(20), &cool), None);
    assert_eq!(w.observe(&2, at(20 + RECOVER_AFTER.as_secs() - 1), &cool), None, "still degraded while cooling");
    assert_eq!(w.observe(&2, at(20 + RECOVER_AFTER.as_secs()), &cool), Some(HeatChange::Recovered));
    assert_eq!(w.degraded(&2), None);
    assert_eq!(w.all_degraded().count(), 0);
}

#[test]
fn a_restored_mark_holds_until_the_gpu_has_stayed_cool() {
    let mut w: HeatWatch<u32> = HeatWatch::default();
    let at = |s: u64| Time::from_secs(0).plus(Duration::from_secs(s));
    w.restore(2, "hw_thermal_slowdown at 91 °C".into());
    assert_eq!(w.degraded(&2), Some("hw_thermal_slowdown at 91 °C"));
    assert_eq!(w.observe(&2, at(0), &sample(92.0, &["hw_thermal_slowdown"])), None, "still hot: no second mark");
    assert_eq!(w.degraded(&2), Some("hw_thermal_slowdown at 92 °C"), "the reason follows the samples");
    assert_eq!(w.observe(&2, at(1), &sample(50.0, &[])), None);
    assert_eq!(w.observe(&2, at(1 + RECOVER_AFTER.as_secs()), &sample(50.0, &[])), Some(HeatChange::Recovered));
    assert_eq!(w.all_degraded().count(), 0);
}

proptest! {
    /// Whatever the samples: a GPU is degraded only after DEGRADE_AFTER of
    /// unbroken hot samples, and recovers only after RECOVER_AFTER of unbroken
    /// cool ones; changes alternate.
    #[test]
    fn degradation_follows_unbroken_runs(steps in prop::collection::vec((1u64..30, any::<bool>()), 1..80)) {
        let mut w: HeatWatch<u8> = HeatWatch::default();
        let (mut now, mut hot_since, mut cool_since, mut degraded) = (0u64, None::<u64>, None::<u64>, false);
        for (dt, hot) in steps {
            now += dt;
            let s = if hot { sample(95.0, &["hw_thermal_slowdown"]) } else { sample(40.0, &[]) };
            if hot { cool_since = None; hot_since.get_or_insert(now); } else { hot_since = None; cool_since.get_or_insert(now); }
            let change = w.observe(&0, Time::from_secs(now as i64), &s);
            match change {
                Some(HeatChange::Degraded(_)) => {
                    prop_assert!(!degraded);
                    prop_assert!(now - hot_since.unwrap_or(now) >= DEGRADE_AFTER.as_secs());
                    degraded = true;
                }
                Some(HeatChange::Recovered) => {
                    prop_assert!(degraded);
                    prop_assert!(now - cool_since.unwrap_or(now) >= RECOVER_AFTER.as_secs());
                    degraded = false;
                }
                None => {}
            }
            prop_assert_eq!(w.degraded(&0).is_some(), degraded);
        }
    }
}

/// A device of a gang: a sample a second for 30 s ending at 100 s.
fn device(name: &str, rank: u32, clock: u32, util: f64, reasons: &[&str]) -> DeviceSeries {
    DeviceSeries {
        name: name.into(),
        memory_total_mb: 81_559,
        points: (70..=100)
            .map(|s| DevicePoint {
                at: Time::from_secs(s),
                util: Some(util),
                memory_used_mb: Some(40_000),
                sm_clock_mhz: Some(clock),
                throttle: throttle::bits(reasons),
                gpu_util: None,
            })
            .collect(),
        node: "n1".into(),
        rank: Some(rank),
        model: Some("H100-80GB".into()),
        numa_node: Some(0),
        shared: false,
        ..DeviceSeries::default()
    }
}

fn gang(hot: DeviceSeries) -> Vec<DeviceSeries> {
    let mut v: Vec<DeviceSeries> =
        [0, 1, 3].iter().map(|r| device(&format!("n1/gpu{r}"), *r, 1980, 100.0, &[])).collect();
    v.insert(2, hot);
    v
}

/// GPU 2 at full clock for the first 20 s of the window, then slowing down for heat.
fn warming() -> DeviceSeries {
    let mut d = device("n1/gpu2", 2, 1980, 100.0, &[]);
    for p in d.points.iter_mut().filter(|p| p.at >= Time::from_secs(90)) {
        p.sm_clock_mhz = Some(900);
        p.throttle = throttle::HW_THERMAL;
    }
    d
}

#[test]
fn the_straggler_of_a_gang_is_named_with_its_reason() {
    let now = Time::from_secs(100);
    let slower = DeviceSeries { model: Some("A100-80GB".into()), ..device("n1/gpu2", 2, 1410, 100.0, &[]) };
    let shared = DeviceSeries {
        shared: true,
        points: device("n1/gpu2 (shared)", 2, 1980, 40.0, &[])
            .points
            .into_iter()
            .map(|p| DevicePoint { gpu_util: Some(100.0), ..p })
            .collect(),
        ..device("n1/gpu2 (shared)", 2, 1980, 40.0, &[])
    };
    type Case<'a> = (&'a str, Vec<DeviceSeries>, Option<(&'a str, Option<u32>, &'a str)>);
    let cases: Vec<Case> = vec![
        ("thermal since mid-window", gang(warming()), Some(("n1/gpu2", Some(2), "thermal"))),
        ("level", gang(device("n1/gpu2", 2, 1980, 100.0, &[])), None),
        (
            "thermal",
            gang(device("n1/gpu2", 2, 1188, 100.0, &["hw_thermal_slowdown"])),
            Some(("n1/gpu2", Some(2), "thermal")),
        ),
        (
            "power cap",
            gang(device("n1/gpu2", 2, 1400, 100.0, &["sw_power_cap"])),
            Some(("n1/gpu2", Some(2), "power_cap")),
        ),
        ("slower model", gang(slower), Some(("n1/gpu2", Some(2), "slower_model"))),
        ("slow clock", gang(device("n1/gpu2", 2, 1500, 100.0, &[])), Some(("n1/gpu2", Some(2), "slow_clock"))),
        ("a few percent is level", gang(device("n1/gpu2", 2, 1850, 100.0, &[])), None),
        ("busy neighbour", gang(shared), Some(("n1/gpu2 (shared)", Some(2), "busy_neighbour"))),
        ("low and unexplained", gang(device("n1/gpu2", 2, 1980, 30.0, &[])), None),
        ("one device", vec![device("n1/gpu2", 2, 1188, 100.0, &["hw_thermal_slowdown"])], None),
    ];
    for (what, devices, want) in cases {
        let got = find_straggler(&devices, now, WINDOW);
        let got = got.as_ref().map(|s| (s.device.as_str(), s.rank, s.reason.as_str()));
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_replica_across_numa_nodes_is_named_when_it_lags() {
    let mut devices = gang(device("n1/gpu2", 2, 1980, 100.0, &[]));
    // Rank 2 has two GPUs on different NUMA nodes and runs behind.
    devices[2] = DeviceSeries { numa_node: Some(0), ..device("n1/gpu2", 2, 1980, 50.0, &[]) };
    devices.push(DeviceSeries { numa_node: Some(1), ..device("n1/gpu6", 2, 1980, 55.0, &[]) });
    let s = find_straggler(&devices, Time::from_secs(100), WINDOW).expect("a straggler");
    assert_eq!((s.device.as_str(), &s.reason), ("n1/gpu2", &StragglerReason::AcrossNuma { nodes: vec![0, 1] }));
}

#[test]
fn too_few_recent_samples_name_nobody() {
    let mut devices = gang(device("n1/gpu2", 2, 1188, 100.0, &["hw_thermal_slowdown"]));
    // Judged long after the samples: none is inside the window.
    assert_eq!(find_straggler(&devices, Time::from_secs(1000), WINDOW), None);
    for d in &mut devices {
        d.points.truncate(2);
    }
    assert_eq!(find_straggler(&devices, Time::from_secs(71), WINDOW), None);
}

#[test]
fn the_advisor_names_the_straggler_before_it_has_enough_data_for_the_rest() {
    let u = JobUsage {
        devices: gang(device("n1/gpu2", 2, 1188, 100.0, &["hw_thermal_slowdown"])),
        runtime: Duration::from_secs(30),
        ..JobUsage::default()
    };
    let a = advise(&u, &Thresholds::default());
    let kinds: Vec<FindingKind> = a.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FindingKind::Straggler, FindingKind::NotEnoughData]);
    let f = &a.findings[0];
    assert_eq!(
        f.summary,
        "replica 2 on n1/gpu2 holds the gang back: its GPU slows down for heat (hw_thermal_slowdown)"
    );
    assert!(
        f.evidence[0].contains("SM clock 1188 MHz on n1/gpu2 against a median of 1980 MHz on the other 3"),
        "{:?}",
        f.evidence
    );
    let ended = advise(&JobUsage { ended: true, ..u }, &Thresholds::default());
    assert!(ended.findings.iter().all(|f| f.kind != FindingKind::Straggler), "no straggler of an ended job");
}
