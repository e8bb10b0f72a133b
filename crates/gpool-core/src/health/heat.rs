//! Heat: which GPUs are slowing down, from their samples, and when a GPU
//! counts as degraded.
//!
//! A GPU is *hot* in a sample when its clock-event reasons show a thermal or
//! hardware slowdown (`hw_thermal_slowdown`, `sw_thermal_slowdown`,
//! `hw_slowdown`), or when its temperature is within [`NEAR_SLOWDOWN_C`] of
//! the temperature at which it starts slowing (NVML's slowdown threshold).
//! It becomes *degraded* once it has been hot for [`DEGRADE_AFTER`], and
//! stops being degraded once it has been cool for [`RECOVER_AFTER`]: a GPU
//! that cools because its job was stopped is not trusted with the next gang
//! at once (the hold-out is what makes "placed again away from the slow
//! GPU" hold), and one hot sample does not mark a GPU.
//!
//! Pure: the caller passes the time of each sample.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::time::Time;

/// "Within a few degrees" of the slowdown temperature. NVIDIA's boards start
/// slowing at the threshold; 3 °C is under one sample's rise of a GPU under
/// load, so a GPU this close is about to slow.
pub const NEAR_SLOWDOWN_C: f64 = 3.0;
/// How long a GPU must stay hot before it is marked degraded.
pub const DEGRADE_AFTER: Duration = Duration::from_secs(10);
/// How long a degraded GPU must stay cool before it is trusted again.
pub const RECOVER_AFTER: Duration = Duration::from_secs(600);

/// NVML clock-event reason bits (`nvmlClocksEventReason*`).
pub mod throttle {
    pub const SW_POWER_CAP: u32 = 0x4;
    pub const HW_SLOWDOWN: u32 = 0x8;
    pub const SW_THERMAL: u32 = 0x20;
    pub const HW_THERMAL: u32 = 0x40;
    pub const HW_POWER_BRAKE: u32 = 0x80;
    /// Slowdowns for heat (a hardware slowdown is most often thermal; NVML
    /// sets it with the thermal bit).
    pub const THERMAL: u32 = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL;
    /// Slowdowns for power: the power cap, or an external power brake.
    pub const POWER: u32 = SW_POWER_CAP | HW_POWER_BRAKE;

    const NAMES: [(u32, &str); 5] = [
        (SW_POWER_CAP, "sw_power_cap"),
        (HW_SLOWDOWN, "hw_slowdown"),
        (SW_THERMAL, "sw_thermal_slowdown"),
        (HW_THERMAL, "hw_thermal_slowdown"),
        (HW_POWER_BRAKE, "hw_power_brake_slowdown"),
    ];

    /// The bits of the named reasons gpool acts on (others are ignored).
    pub fn bits<S: AsRef<str>>(names: &[S]) -> u32 {
        names.iter().filter_map(|n| NAMES.iter().find(|(_, x)| *x == n.as_ref())).fold(0, |a, (b, _)| a | b)
    }

    /// The names of the bits set, in bit order.
    pub fn names(bits: u32) -> Vec<&'static str> {
        NAMES.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect()
    }
}

/// What one sample says about a GPU's heat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeatSample {
    pub temperature_c: Option<f64>,
    pub slowdown_c: Option<f64>,
    /// [`throttle`] bits.
    pub throttle: u32,
}

/// Why a sample is hot, for people: `hw_thermal_slowdown at 91 °C`, or
/// `88 °C, within 3 °C of its slowdown temperature 90 °C`; `None` if it is not.
pub fn hot_reason(s: &HeatSample) -> Option<String> {
    let at = s.temperature_c.filter(|t| t.is_finite()).map(|t| format!(" at {t:.0} °C")).unwrap_or_default();
    let thermal = s.throttle & throttle::THERMAL;
    if thermal != 0 {
        return Some(format!("{}{at}", throttle::names(thermal).join(", ")));
    }
    match (s.temperature_c, s.slowdown_c) {
        (Some(t), Some(limit)) if t.is_finite() && limit > 0.0 && t >= limit - NEAR_SLOWDOWN_C => {
            Some(format!("{t:.0} °C, within {NEAR_SLOWDOWN_C:.0} °C of its slowdown temperature {limit:.0} °C"))
        }
        _ => None,
    }
}

/// A GPU's heat changed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeatChange {
    /// Hot for long enough: degraded, with the reason of the latest hot sample.
    Degraded(String),
    /// Cool for long enough: trusted again.
    Recovered,
}

#[derive(Clone, Debug, Default)]
struct Track {
    /// Since when it has been hot, while it is.
    hot_since: Option<Time>,
    /// Since when it has been cool, while it is degraded and cool.
    cool_since: Option<Time>,
    /// Why it is degraded, while it is.
    degraded: Option<String>,
}

/// Degraded GPUs by key (a node and GPU index, say), from their samples.
#[derive(Clone, Debug)]
pub struct HeatWatch<K> {
    tracks: BTreeMap<K, Track>,
    degrade_after: Duration,
    recover_after: Duration,
}

impl<K: Ord + Clone> Default for HeatWatch<K> {
    fn default() -> Self {
        HeatWatch::new(DEGRADE_AFTER, RECOVER_AFTER)
    }
}

impl<K: Ord + Clone> HeatWatch<K> {
    pub fn new(degrade_after: Duration, recover_after: Duration) -> HeatWatch<K> {
        HeatWatch { tracks: BTreeMap::new(), degrade_after, recover_after }
    }

    /// Takes one sample of `key` at `now`; says when its state changes.
    pub fn observe(&mut self, key: &K, now: Time, sample: &HeatSample) -> Option<HeatChange> {
        let hot = hot_reason(sample);
        let t = self.tracks.entry(key.clone()).or_default();
        match hot {
            Some(why) => {
                t.cool_since = None;
                let since = *t.hot_since.get_or_insert(now);
                match &mut t.degraded {
                    Some(reason) => {
                        // Still degraded: the reason follows the latest sample.
                        *reason = why;
                        None
                    }
                    None if now.since(since) >= self.degrade_after => {
                        t.degraded = Some(why.clone());
                        Some(HeatChange::Degraded(why))
                    }
                    None => None,
                }
            }
            None => {
                t.hot_since = None;
                if t.degraded.is_none() {
                    self.tracks.remove(key);
                    return None;
                }
                let since = *t.cool_since.get_or_insert(now);
                if now.since(since) >= self.recover_after {
                    self.tracks.remove(key);
                    return Some(HeatChange::Recovered);
                }
                None
            }
        }
    }

    /// Why `key` is degraded, if it is.
    pub fn degraded(&self, key: &K) -> Option<&str> {
        self.tracks.get(key).and_then(|t| t.degraded.as_deref())
    }

    /// Every degraded key and why.
    pub fn all_degraded(&self) -> impl Iterator<Item = (&K, &str)> {
        self.tracks.iter().filter_map(|(k, t)| Some((k, t.degraded.as_deref()?)))
    }

    /// Marks `key` degraded for `reason` as a control plane that restarts
    /// finds it kept: it stays so until it has been cool for the recovery
    /// time, as if it had just been marked.
    pub fn restore(&mut self, key: K, reason: String) {
        self.tracks.insert(key, Track { degraded: Some(reason), ..Track::default() });
    }

    /// Forgets every key `gone` selects (a node that left); says which were degraded.
    pub fn forget(&mut self, gone: impl Fn(&K) -> bool) -> Vec<K> {
        let keys: Vec<K> = self.tracks.keys().filter(|k| gone(k)).cloned().collect();
        keys.into_iter().filter(|k| self.tracks.remove(k).is_some_and(|t| t.degraded.is_some())).collect()
    }
}
