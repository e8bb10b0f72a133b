//! How many replicas an inference service wants: a planner beside
//! [`crate::schedule`], pure like it (samples and the clock in, a number
//! out). It follows Knative's pod autoscaler: the load averaged over a
//! stable window (60 s) divided by the target per replica (in-flight
//! requests or requests per second), and a panic window (6 s) that scales
//! up at once when load jumps to twice what the replicas can take. It
//! scales up after `scale_up_delay` of wanting more, and down only after
//! wanting fewer for all of `scale_down_delay` — to the most it wanted in
//! that time, so load that wavers around a threshold does not flap. A
//! service at zero replicas gets one as soon as a request waits.

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::time::Time;

/// What one replica should carry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Requests in flight at once per replica.
    InFlight(f64),
    /// Requests per second per replica.
    Rps(f64),
}

/// A service's scaling settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalerConfig {
    pub min: u32,
    pub max: u32,
    pub target: Target,
    pub scale_up_delay: Duration,
    pub scale_down_delay: Duration,
    /// Load is averaged over this (Knative: 60 s).
    pub stable_window: Duration,
    /// And over this, to react to a jump (Knative: 6 s, a tenth of the stable window).
    pub panic_window: Duration,
    /// Panic when the panic window's load wants this many times the replicas there are.
    pub panic_threshold: f64,
}

impl ScalerConfig {
    /// Knative's windows and threshold with the service's own limits, target and delays.
    pub fn new(min: u32, max: u32, target: Target, up: Duration, down: Duration) -> ScalerConfig {
        ScalerConfig {
            min,
            max: max.max(min),
            target,
            scale_up_delay: up,
            scale_down_delay: down,
            stable_window: Duration::from_secs(60),
            panic_window: Duration::from_secs(6),
            panic_threshold: 2.0,
        }
    }
}

/// The load of the whole service at one moment (the proxy's counts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadSample {
    pub at: Time,
    /// Requests in flight, queued ones included.
    pub in_flight: f64,
    /// Requests per second since the previous sample.
    pub rps: f64,
}

/// What the scaler remembers between calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScalerState {
    samples: VecDeque<LoadSample>,
    /// Since when it has wanted more replicas than it has.
    up_since: Option<Time>,
    /// Since when it has wanted fewer, and the most it wanted meanwhile.
    down_since: Option<(Time, u32)>,
    /// Panicking until then: no scaling down.
    panic_until: Option<Time>,
}

/// The scaler's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub desired: u32,
    /// When to ask again even if no sample comes (a delay ends).
    pub wake_at: Option<Time>,
}

impl ScalerState {
    /// Records a sample (in time order; older ones than the stable window are dropped).
    pub fn observe(&mut self, cfg: &ScalerConfig, s: LoadSample) {
        self.samples.push_back(s);
        while self.samples.front().is_some_and(|f| s.at.since(f.at) > cfg.stable_window) {
            self.samples.pop_front();
        }
    }

    fn average(&self, cfg: &ScalerConfig, now: Time, window: Duration) -> Option<f64> {
        let vals: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| now.since(s.at) <= window)
            .map(|s| match cfg.target {
                Target::InFlight(_) => s.in_flight,
                Target::Rps(_) => s.rps,
            })
            .collect();
        (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
    }

    /// The replicas the service should have at `now`, given `current`.
    pub fn desired(&mut self, cfg: &ScalerConfig, now: Time, current: u32) -> Scale {
        let per = match cfg.target {
            Target::InFlight(t) | Target::Rps(t) => t.max(1e-9),
        };
        let want = |load: f64| (load / per).ceil().max(0.0).min(f64::from(u32::MAX)) as u32;
        let stable = self.average(cfg, now, cfg.stable_window).map_or(current, want);
        // The panic window reacts to a jump at its first sample: its average, or the latest load if higher.
        let latest = self.samples.back().filter(|s| now.since(s.at) <= cfg.panic_window).map(|s| match cfg.target {
            Target::InFlight(_) => s.in_flight,
            Target::Rps(_) => s.rps,
        });
        let panic = self.average(cfg, now, cfg.panic_window).into_iter().chain(latest).fold(0.0, f64::max);
        let panic = want(panic);
        let waiting = self.samples.back().is_some_and(|s| s.in_flight > 0.0);
        let clamp = |n: u32| n.clamp(cfg.min, cfg.max.max(cfg.min));

        if current > 0 && f64::from(panic) >= cfg.panic_threshold * f64::from(current) {
            self.panic_until = Some(now.plus(cfg.stable_window));
        }
        let panicking = self.panic_until.is_some_and(|t| now < t);
        let mut wanted = if panicking { stable.max(panic).max(current) } else { stable };
        if current == 0 && waiting {
            wanted = wanted.max(1);
        }
        let wanted = clamp(wanted);
        let mut wake = None;
        let desired = if wanted > current {
            self.down_since = None;
            let since = *self.up_since.get_or_insert(now);
            // A request waiting for a service at zero, or a panic, does not wait for the delay.
            if (current == 0 && waiting) || panicking || now >= since.plus(cfg.scale_up_delay) {
                self.up_since = None;
                wanted
            } else {
                wake = Some(since.plus(cfg.scale_up_delay));
                current
            }
        } else if wanted < current && !panicking {
            self.up_since = None;
            let (since, most) = self.down_since.get_or_insert((now, wanted));
            *most = (*most).max(wanted);
            if now >= since.plus(cfg.scale_down_delay) {
                let to = *most;
                self.down_since = None;
                to
            } else {
                wake = Some(since.plus(cfg.scale_down_delay));
                current
            }
        } else {
            self.up_since = None;
            self.down_since = None;
            wanted.max(if panicking { current } else { 0 })
        };
        if panicking {
            wake = wake.into_iter().chain(self.panic_until).min();
        }
        Scale { desired: clamp(desired), wake_at: wake.filter(|t| *t > now) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ScalerConfig {
        ScalerConfig::new(1, 6, Target::InFlight(4.0), Duration::ZERO, Duration::from_secs(60))
    }

    /// Runs the scaler every second from `from` for `secs` seconds at `load` in flight.
    fn run(st: &mut ScalerState, c: &ScalerConfig, current: &mut u32, from: i64, secs: i64, load: f64) -> Vec<u32> {
        (from..from + secs)
            .map(|t| {
                let at = Time::from_secs(t);
                st.observe(c, LoadSample { at, in_flight: load, rps: 0.0 });
                *current = st.desired(c, at, *current).desired;
                *current
            })
            .collect()
    }

    #[test]
    fn a_step_up_is_followed_within_a_sample_and_the_way_down_waits_for_the_delay() {
        let c = cfg();
        let mut st = ScalerState::default();
        let mut n = 1;
        assert!(run(&mut st, &c, &mut n, 0, 60, 3.0).iter().all(|x| *x == 1), "steady load: no change");
        let step = run(&mut st, &c, &mut n, 60, 10, 24.0);
        assert_eq!(step[0], 6, "24 in flight at 4 each: 6 replicas at the first sample (panic)");
        run(&mut st, &c, &mut n, 70, 120, 24.0);
        assert_eq!(n, 6);
        // The load stops: nothing changes for the down delay (and the stable window draining), then 1.
        let down = run(&mut st, &c, &mut n, 190, 200, 0.0);
        let first_lower = down.iter().position(|x| *x < 6).expect("it scales down");
        assert!(first_lower >= 60, "not before the down delay: after {first_lower} s");
        assert_eq!(n, 1, "back to min");
    }

    #[test]
    fn wavering_load_does_not_flap() {
        let c = cfg();
        let mut st = ScalerState::default();
        let mut n = 1;
        let mut changes = 0;
        let mut last = n;
        for t in 0..600 {
            let load = if t % 2 == 0 { 15.0 } else { 17.5 }; // 4 or 5 replicas' worth
            for x in run(&mut st, &c, &mut n, t, 1, load) {
                if x != last {
                    changes += 1;
                    last = x;
                }
            }
        }
        assert!(changes <= 2, "{changes} changes under steady, wavering load");
        assert_eq!(n, 5, "enough for the peaks");
    }

    #[test]
    fn a_service_at_zero_wakes_for_the_first_request_and_limits_hold() {
        let c = ScalerConfig::new(0, 3, Target::Rps(10.0), Duration::from_secs(5), Duration::from_secs(30));
        let mut st = ScalerState::default();
        let at = Time::from_secs(100);
        st.observe(&c, LoadSample { at, in_flight: 1.0, rps: 0.0 });
        assert_eq!(st.desired(&c, at, 0).desired, 1, "a waiting request brings one replica up at once");
        let at = Time::from_secs(101);
        st.observe(&c, LoadSample { at, in_flight: 50.0, rps: 1000.0 });
        assert_eq!(st.desired(&c, at, 1).desired, 3, "never above max");
        let idle = ScalerConfig::new(0, 3, Target::Rps(10.0), Duration::from_secs(5), Duration::from_secs(30));
        let mut st = ScalerState::default();
        let s = st.desired(&idle, Time::from_secs(0), 0);
        assert_eq!(s, Scale { desired: 0, wake_at: None }, "no load, no replica");
    }

    #[test]
    fn scaling_up_waits_for_the_up_delay_outside_a_panic() {
        let c = ScalerConfig::new(1, 10, Target::InFlight(4.0), Duration::from_secs(10), Duration::from_secs(60));
        let mut st = ScalerState::default();
        let mut n = 2;
        // 6 in flight on 2 replicas wants 2 — then 10 wants 3: under the panic threshold (4), so it waits 10 s.
        run(&mut st, &c, &mut n, 0, 60, 6.0);
        let up = run(&mut st, &c, &mut n, 60, 90, 10.0);
        let first = up.iter().position(|x| *x == 3).expect("it scales up");
        // The 60 s average passes 8 in flight after about 30 s of the new load; then 10 s of delay.
        assert!((38..=43).contains(&first), "after the stable window wants it and the up delay: {first}");
    }
}
