//! Spot availability traces (the format of the *Can't Be Late* traces,
//! NSDI'24, in `data/spot`): `{"metadata": {"gap_seconds": G}, "data":
//! [v0, v1, ...]}`, one sample every G seconds, `v` the number of spot
//! instances obtainable (or still alive) at that tick out of the trace's N
//! (its largest value). A pool replaying a trace may hold at most
//! `floor(v / N × max)` nodes at a time: above that, the newest are taken
//! back and creations fail. The trace repeats when the simulation outlasts it.

/// A spot availability trace, reduced to the times its value changes.
#[derive(Clone, Debug, PartialEq)]
pub struct Availability {
    period_ms: i64,
    /// (offset in the period, fraction available from then on), offsets ascending, the first at 0.
    changes: Vec<(i64, f64)>,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SpotTraceError {
    #[error("not a spot availability trace: {0} (expected {{\"metadata\": {{\"gap_seconds\": G}}, \"data\": [...]}})")]
    Format(String),
}

impl Availability {
    /// Always available: the pool is limited only by its `max`.
    pub fn always() -> Availability {
        Availability { period_ms: i64::MAX, changes: vec![(0, 1.0)] }
    }

    /// Reads the JSON text of a trace.
    pub fn from_json(text: &str) -> Result<Availability, SpotTraceError> {
        let bad = |s: &str| SpotTraceError::Format(s.to_string());
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
        let gap = v
            .pointer("/metadata/gap_seconds")
            .and_then(serde_json::Value::as_f64)
            .filter(|g| *g > 0.0 && g.is_finite())
            .ok_or_else(|| bad("metadata.gap_seconds is missing or not a positive number"))?;
        let data: Vec<f64> = v
            .get("data")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("data is missing"))?
            .iter()
            .map(|x| x.as_f64().filter(|x| *x >= 0.0 && x.is_finite()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("data holds something other than counts ≥ 0"))?;
        Availability::from_samples(gap, &data).ok_or_else(|| bad("data is empty"))
    }

    /// A trace of `data` sampled every `gap_s` seconds.
    pub fn from_samples(gap_s: f64, data: &[f64]) -> Option<Availability> {
        let n = data.iter().copied().fold(0.0, f64::max).max(1.0);
        let gap_ms = (gap_s * 1000.0).round() as i64;
        let mut changes: Vec<(i64, f64)> = Vec::new();
        for (i, v) in data.iter().enumerate() {
            let f = v / n;
            if changes.last().is_none_or(|(_, last)| *last != f) {
                changes.push((i as i64 * gap_ms, f));
            }
        }
        (!changes.is_empty()).then(|| Availability { period_ms: gap_ms * data.len() as i64, changes })
    }

    /// The fraction available at `t_ms`.
    pub fn at(&self, t_ms: i64) -> f64 {
        let off = t_ms.rem_euclid(self.period_ms.max(1));
        let i = self.changes.partition_point(|(o, _)| *o <= off);
        self.changes[i.saturating_sub(1)].1
    }

    /// The first time after `t_ms` the fraction changes.
    pub fn next_change(&self, t_ms: i64) -> Option<i64> {
        if self.changes.len() < 2 {
            return None;
        }
        let p = self.period_ms.max(1);
        let base = t_ms.div_euclid(p) * p;
        let off = t_ms - base;
        let i = self.changes.partition_point(|(o, _)| *o <= off);
        Some(match self.changes.get(i) {
            Some((o, _)) => base + o,
            // The next period starts with a change only if its value differs from the last.
            None => {
                base + p
                    + if self.changes[0].1 != self.changes[self.changes.len() - 1].1 { 0 } else { self.changes[1].0 }
            }
        })
    }

    /// Mean fraction available over one period.
    pub fn mean(&self) -> f64 {
        if self.period_ms == i64::MAX {
            return 1.0;
        }
        let mut sum = 0.0;
        for (i, (o, f)) in self.changes.iter().enumerate() {
            let end = self.changes.get(i + 1).map_or(self.period_ms, |c| c.0);
            sum += f * (end - o) as f64;
        }
        sum / self.period_ms as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_as_its_changes_and_repeats() {
        let a =
            Availability::from_json(r#"{"metadata": {"gap_seconds": 10}, "data": [1, 1, 0, 0, 1]}"#).expect("valid");
        assert_eq!(a.at(0), 1.0);
        assert_eq!(a.at(19_999), 1.0);
        assert_eq!(a.at(20_000), 0.0);
        assert_eq!(a.at(40_000), 1.0);
        assert_eq!(a.at(50_000), 1.0, "the period repeats");
        assert_eq!(a.at(70_000), 0.0);
        assert_eq!(a.next_change(0), Some(20_000));
        assert_eq!(a.next_change(20_000), Some(40_000));
        assert_eq!(a.next_change(40_000), Some(70_000), "no change at the wrap: 1 then 1");
        assert!((a.mean() - 0.6).abs() < 1e-9);
        let many = Availability::from_samples(300.0, &[16.0, 8.0, 4.0]).expect("samples");
        assert_eq!(many.at(300_000), 0.5, "out of the trace's 16");
        for bad in [
            "{}",
            r#"{"metadata": {"gap_seconds": 0}, "data": [1]}"#,
            r#"{"metadata": {"gap_seconds": 5}, "data": []}"#,
            r#"{"metadata": {"gap_seconds": 5}, "data": [-1]}"#,
        ] {
            assert!(Availability::from_json(bad).is_err(), "{bad}");
        }
        assert_eq!(Availability::always().next_change(5), None);
    }
}
