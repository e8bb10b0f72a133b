//! Stragglers: the replica of a gang that holds the others back, and why.
//!
//! A synchronous gang (data-parallel training, a collective) runs at the pace
//! of its slowest member. Over the last [`WINDOW`] of samples, each device
//! of the gang is compared with the others:
//! - **by clock**: a device whose mean SM clock is more than [`CLOCK_GAP`]
//!   below the median of the others' is the straggler. Its reason is a
//!   thermal slowdown or a power cap when its clock-event reasons said so in
//!   the window (the more often of the two), else a different (slower) GPU
//!   model than the others', else just its lower clock.
//! - **by utilisation**, when the clocks are level: a device whose mean
//!   utilisation is more than [`UTIL_GAP`] points below the median of the
//!   others' is the straggler when something explains it: it shares its GPU
//!   with a busy neighbour (the GPU is much busier than this replica's part
//!   of it), its replica's GPUs span NUMA nodes, or it is another model.
//!   A low device with no explanation is left to the advisor's idle and
//!   over-provisioned findings: it may be a rank that does less by design.
//!
//! The clock is the first witness because it is what a slow GPU changes: in
//! a synchronous gang the fast replicas wait for the slow one inside their
//! collectives, which keeps their utilisation counters busy, so utilisation
//! alone does not say who is slow.
//!
//! Pure: the caller passes the series and the time.

use std::fmt;
use std::time::Duration;

use crate::diagnosis::series::DeviceSeries;
use crate::health::heat::throttle;
use crate::model::time::{Time, human_duration};

/// How far back the comparison looks.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Samples each device needs inside the window to be compared.
pub const MIN_POINTS: usize = 3;
/// A clock this far below the others' median (a share) makes a straggler.
/// Boost clocks of healthy GPUs of one model differ by a few percent.
pub const CLOCK_GAP: f64 = 0.15;
/// Utilisation this many points below the others' median makes a straggler
/// (when something explains it).
pub const UTIL_GAP: f64 = 20.0;

/// Why a replica is slow.
#[derive(Clone, Debug, PartialEq)]
pub enum StragglerReason {
    /// Its GPU slows down for heat (`hw_thermal_slowdown`, …).
    Thermal { reasons: Vec<&'static str> },
    /// Its GPU is held at a power cap (`sw_power_cap`, a power brake).
    PowerCap { reasons: Vec<&'static str> },
    /// Its GPU is another, slower model than the others'.
    SlowerModel { model: String, others: String },
    /// It shares its GPU and the neighbour keeps the GPU busy.
    BusyNeighbour { gpu_util: f64 },
    /// Its replica's GPUs sit on more than one NUMA node.
    AcrossNuma { nodes: Vec<u32> },
    /// Its clock is lower and nothing it reports says why.
    SlowClock,
}

impl StragglerReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            StragglerReason::Thermal { .. } => "thermal",
            StragglerReason::PowerCap { .. } => "power_cap",
            StragglerReason::SlowerModel { .. } => "slower_model",
            StragglerReason::BusyNeighbour { .. } => "busy_neighbour",
            StragglerReason::AcrossNuma { .. } => "across_numa",
            StragglerReason::SlowClock => "slow_clock",
        }
    }
}

impl fmt::Display for StragglerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StragglerReason::Thermal { reasons } => write!(f, "its GPU slows down for heat ({})", reasons.join(", ")),
            StragglerReason::PowerCap { reasons } => {
                write!(f, "its GPU is held at a power cap ({})", reasons.join(", "))
            }
            StragglerReason::SlowerModel { model, others } => write!(f, "its GPU is a {model} among {others}"),
            StragglerReason::BusyNeighbour { gpu_util } => {
                write!(f, "it shares its GPU with a busy neighbour (the GPU is {gpu_util:.0}% busy)")
            }
            StragglerReason::AcrossNuma { nodes } => {
                let n: Vec<String> = nodes.iter().map(u32::to_string).collect();
                write!(f, "its GPUs sit on NUMA nodes {}", n.join(" and "))
            }
            StragglerReason::SlowClock => write!(f, "its SM clock is lower than the others' and it reports no reason"),
        }
    }
}

/// The replica that holds its gang back.
#[derive(Clone, Debug, PartialEq)]
pub struct Straggler {
    /// The device's name (`node1/gpu2`), node and GPU index.
    pub device: String,
    pub node: String,
    pub gpu: Option<u32>,
    /// Its replica's rank, where known.
    pub rank: Option<u32>,
    pub reason: StragglerReason,
    /// The numbers behind it.
    pub evidence: Vec<String>,
}

impl Straggler {
    /// `replica 2 on node1/gpu2`.
    pub fn who(&self) -> String {
        match self.rank {
            Some(r) => format!("replica {r} on {}", self.device),
            None => self.device.clone(),
        }
    }
}

impl fmt::Display for Straggler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} holds the gang back: {}", self.who(), self.reason)
    }
}

/// One device's figures over the window.
struct Window<'a> {
    series: &'a DeviceSeries,
    points: usize,
    clock: Option<f64>,
    util: Option<f64>,
    gpu_util: Option<f64>,
    /// Samples with each throttle bit group set.
    thermal: usize,
    power: usize,
    bits: u32,
}

impl Window<'_> {
    /// This device named as its gang's straggler.
    fn straggler(&self, reason: StragglerReason, evidence: Vec<String>) -> Straggler {
        let d = self.series;
        Straggler { device: d.name.clone(), node: d.node.clone(), gpu: d.gpu, rank: d.rank, reason, evidence }
    }
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = v.filter(|x| x.is_finite()).fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len().is_multiple_of(2) { (v[m - 1] + v[m]) / 2.0 } else { v[m] })
}

fn window<'a>(d: &'a DeviceSeries, from: Time) -> Window<'a> {
    let pts: Vec<_> = d.points.iter().filter(|p| p.at >= from).collect();
    Window {
        series: d,
        points: pts.len(),
        clock: mean(pts.iter().filter_map(|p| p.sm_clock_mhz).map(f64::from)),
        util: mean(pts.iter().filter_map(|p| p.util)),
        gpu_util: mean(pts.iter().filter_map(|p| p.gpu_util)),
        thermal: pts.iter().filter(|p| p.throttle & throttle::THERMAL != 0).count(),
        power: pts.iter().filter(|p| p.throttle & throttle::POWER != 0).count(),
        bits: pts.iter().fold(0, |a, p| a | p.throttle),
    }
}

/// The most common model among `others`, if they name one.
fn majority_model(others: &[&Window]) -> Option<String> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for w in others {
        let Some(m) = &w.series.model else { continue };
        match counts.iter_mut().find(|(x, _)| x == m) {
            Some((_, n)) => *n += 1,
            None => counts.push((m.clone(), 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(m, _)| m)
}

fn other_model(w: &Window, others: &[&Window]) -> Option<StragglerReason> {
    let mine = w.series.model.clone()?;
    let theirs = majority_model(others)?;
    (mine != theirs).then_some(StragglerReason::SlowerModel { model: mine, others: theirs })
}

/// The NUMA nodes of the devices of `w`'s replica, when they are more than one.
fn numa_spread(w: &Window, all: &[Window]) -> Option<Vec<u32>> {
    let rank = w.series.rank?;
    let mut nodes: Vec<u32> = all
        .iter()
        .filter(|o| o.series.rank == Some(rank) && o.series.node == w.series.node)
        .filter_map(|o| o.series.numa_node)
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    (nodes.len() > 1).then_some(nodes)
}

/// The straggler of a gang whose devices are `devices`, judged at `now`
/// over the last `span`; `None` when the gang is level, too small, or has
/// too few samples.
pub fn find_straggler(devices: &[DeviceSeries], now: Time, span: Duration) -> Option<Straggler> {
    let from = now.minus(span);
    let all: Vec<Window> = devices.iter().map(|d| window(d, from)).filter(|w| w.points >= MIN_POINTS).collect();
    if all.len() < 2 {
        return None;
    }
    let seconds = human_duration(span);
    // By clock.
    if let Some((i, low)) =
        all.iter().enumerate().filter_map(|(i, w)| Some((i, w.clock?))).min_by(|a, b| a.1.total_cmp(&b.1))
    {
        let others: Vec<&Window> = all.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, w)| w).collect();
        let reference = median(others.iter().filter_map(|w| w.clock).collect());
        if let Some(reference) = reference.filter(|r| low < r * (1.0 - CLOCK_GAP)) {
            let w = &all[i];
            // Any slowdown it reported while its clock lagged explains it
            // (the window starts before the slowdown did).
            let reason = if w.thermal > 0 && w.thermal >= w.power {
                StragglerReason::Thermal { reasons: throttle::names(w.bits & throttle::THERMAL) }
            } else if w.power > 0 {
                StragglerReason::PowerCap { reasons: throttle::names(w.bits & throttle::POWER) }
            } else {
                other_model(w, &others).unwrap_or(StragglerReason::SlowClock)
            };
            let mut evidence = vec![format!(
                "SM clock {low:.0} MHz on {} against a median of {reference:.0} MHz on the other {} over the last {seconds}",
                w.series.name,
                others.len()
            )];
            if w.thermal + w.power > 0 {
                evidence.push(format!(
                    "{} in {} of its {} samples",
                    throttle::names(w.bits & (throttle::THERMAL | throttle::POWER)).join(", "),
                    w.thermal.max(w.power),
                    w.points
                ));
            }
            return Some(w.straggler(reason, evidence));
        }
    }
    // By utilisation, when something explains it.
    let (i, low) = all.iter().enumerate().filter_map(|(i, w)| Some((i, w.util?))).min_by(|a, b| a.1.total_cmp(&b.1))?;
    let others: Vec<&Window> = all.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, w)| w).collect();
    let reference = median(others.iter().filter_map(|w| w.util).collect())?;
    if low >= reference - UTIL_GAP {
        return None;
    }
    let w = &all[i];
    let reason = match (w.series.shared, w.gpu_util) {
        (true, Some(g)) if g - low > UTIL_GAP => StragglerReason::BusyNeighbour { gpu_util: g },
        _ => match numa_spread(w, &all) {
            Some(nodes) => StragglerReason::AcrossNuma { nodes },
            None => other_model(w, &others)?,
        },
    };
    let evidence = vec![format!(
        "utilisation {low:.0}% on {} against a median of {reference:.0}% on the other {} over the last {seconds}",
        w.series.name,
        others.len()
    )];
    Some(w.straggler(reason, evidence))
}
