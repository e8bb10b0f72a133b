//! What `gpool sim --elastic` assumes of elastic jobs: which replica counts
//! a trace job may run at, and how fast it goes at each.
//!
//! Traces record a job's GPU count and its run time at that count. An
//! elastic replay turns a job of `n` GPUs into one-GPU replicas it may run
//! from `ceil(n × min_fraction)` to `n × max_factor` of, and scales its
//! progress with the size it runs at: each doubling of GPUs multiplies its
//! throughput by `1 + efficiency` (so `efficiency` 1 is linear scaling and 0
//! no gain at all), the same curve for every job since no shared trace
//! names its model. Pollux (OSDI '21) measured 0.6–0.95 per doubling for
//! its models at these sizes; the default, 0.8, is in that range. Each
//! resize restarts the job from its checkpoint and costs it the
//! simulation's restart delay.

/// The scaling model of an elastic replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElasticModel {
    /// Throughput gained per doubling of GPUs, 0..=1.
    pub efficiency: f64,
    /// The fewest replicas, as a fraction of the job's GPUs (rounded up).
    pub min_fraction: f64,
    /// The most replicas, as a multiple of the job's GPUs.
    pub max_factor: f64,
}

impl Default for ElasticModel {
    fn default() -> ElasticModel {
        ElasticModel { efficiency: 0.8, min_fraction: 0.5, max_factor: 2.0 }
    }
}

impl ElasticModel {
    /// The replica range (min, max) of a job that asked for `gpus`.
    pub fn range(&self, gpus: u32) -> (u32, u32) {
        let n = f64::from(gpus.max(1));
        let min = ((n * self.min_fraction).ceil() as u32).clamp(1, gpus.max(1));
        let max = ((n * self.max_factor).floor() as u32).max(min);
        (min, max)
    }

    /// Its speed at `size` GPUs relative to its speed at the `gpus` it asked for.
    pub fn speed(&self, gpus: u32, size: u32) -> f64 {
        if gpus == 0 || size == 0 {
            return 1.0;
        }
        let exponent = (1.0 + self.efficiency.clamp(0.0, 1.0)).log2();
        (f64::from(size) / f64::from(gpus)).powf(exponent)
    }

    /// Checks the model's numbers, saying which flag is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.efficiency) {
            return Err(format!("--scaling-efficiency must be within 0..1, got {}", self.efficiency));
        }
        let min_ok = self.min_fraction > 0.0 && self.min_fraction <= 1.0;
        if !min_ok || !(1.0..=64.0).contains(&self.max_factor) {
            return Err(format!(
                "--elastic-range MIN:MAX takes a fraction 0 < MIN ≤ 1 and a factor 1 ≤ MAX ≤ 64 of each job's GPUs, got {}:{}",
                self.min_fraction, self.max_factor
            ));
        }
        Ok(())
    }

    /// Reads `--elastic-range`: `0.5:2` (half to twice each job's GPUs).
    pub fn with_range(self, text: &str) -> Result<ElasticModel, String> {
        let bad = || format!("--elastic-range {text:?}: expected MIN:MAX, e.g. 0.5:2 (half to twice each job's GPUs)");
        let (min, max) = text.split_once(':').ok_or_else(bad)?;
        let min: f64 = min.trim().parse().map_err(|_| bad())?;
        let max: f64 = max.trim().parse().map_err(|_| bad())?;
        let m = ElasticModel { min_fraction: min, max_factor: max, ..self };
        m.check()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_speeds_follow_the_documented_model() {
        let m = ElasticModel::default();
        assert_eq!([m.range(1), m.range(2), m.range(8), m.range(3)], [(1, 2), (1, 4), (4, 16), (2, 6)]);
        assert!((m.speed(4, 4) - 1.0).abs() < 1e-12);
        assert!((m.speed(4, 8) - 1.8).abs() < 1e-9, "one doubling gains 80%");
        assert!((m.speed(4, 2) - 1.0 / 1.8).abs() < 1e-9, "one halving loses it");
        let linear = ElasticModel { efficiency: 1.0, ..m };
        assert!((linear.speed(2, 6) - 3.0).abs() < 1e-9);
        assert!(ElasticModel { efficiency: 1.5, ..m }.check().is_err());
        assert_eq!(m.with_range("1:1.5").map(|r| r.range(4)), Ok((4, 6)));
        for bad in ["", "2", "0:2", "1:0.5", "x:2", "0.5:100"] {
            assert!(m.with_range(bad).is_err(), "{bad}");
        }
    }
}
