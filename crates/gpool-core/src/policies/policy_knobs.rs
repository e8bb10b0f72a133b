//! Named knobs of a [`Policy`], set from text (`gpool sim --set
//! overload.after=4h`): how an operator tries a variant of a preset on their
//! own trace without a rebuild, and how the robustness table of
//! docs/scheduling.md was swept.

use std::time::Duration;

use crate::policies::policy::{Overload, Policy, StarvationGuard};

/// A `--set KEY=VALUE` that names no knob or gives it a value it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KnobError {
    #[error("{0:?} is not KEY=VALUE (e.g. overload.after=4h)")]
    NotAssignment(String),
    #[error("unknown policy knob {0:?}: expected one of {names}", names = KNOBS.join(", "))]
    Unknown(String),
    #[error("{key}={value:?}: {why}")]
    Value { key: String, value: String, why: String },
}

/// Every knob `set` understands.
pub const KNOBS: &[&str] = &[
    "overload",
    "overload.enter",
    "overload.after",
    "overload.exit",
    "guard",
    "guard.after",
    "guard.max_runtime",
    "within_class",
    "min_runtime",
    "age_per_hour",
    "preemption_age_per_hour",
    "preemption_margin",
    "service_level_weight",
    "service_levels",
    "open_reservation_after",
    "resize_after",
    "backfill",
    "learned_estimates",
    "within_level",
    "fair_share_weight",
];

fn duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().map_err(|_| "expected a duration such as 90s, 30m, 6h or 2d".to_string())?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        other => return Err(format!("unknown unit {other:?}: use s, m, h or d")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err("a duration must be finite and not negative".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn number(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 => Ok(n),
        _ => Err("expected a number ≥ 0".into()),
    }
}

fn switch(v: &str) -> Result<bool, String> {
    match v.trim() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

impl Policy {
    /// Applies `KEY=VALUE`. Setting a part of the overload gate or the
    /// starvation guard turns it on with the default's other values.
    pub fn set(&mut self, assignment: &str) -> Result<(), KnobError> {
        let (key, value) =
            assignment.split_once('=').ok_or_else(|| KnobError::NotAssignment(assignment.to_string()))?;
        let key = key.trim();
        let wrap = |why: String| KnobError::Value { key: key.to_string(), value: value.to_string(), why };
        let base = Policy::gpool_default();
        let overload = |p: &mut Policy| -> Overload {
            p.preemption.overload.clone().or(base.preemption.overload.clone()).unwrap_or(Overload {
                enter: 1.0,
                after: Duration::ZERO,
                exit: 1.0,
            })
        };
        let guard = |p: &mut Policy| -> StarvationGuard {
            p.starvation_guard
                .clone()
                .or(base.starvation_guard.clone())
                .unwrap_or(StarvationGuard { after: Duration::MAX, max_runtime: Duration::ZERO })
        };
        match key {
            "overload" => {
                self.preemption.overload = if switch(value).map_err(wrap)? { Some(overload(self)) } else { None }
            }
            "overload.enter" | "overload.after" | "overload.exit" => {
                let mut o = overload(self);
                match key {
                    "overload.enter" => o.enter = number(value).map_err(wrap)?,
                    "overload.after" => o.after = duration(value).map_err(wrap)?,
                    _ => o.exit = number(value).map_err(wrap)?,
                }
                self.preemption.overload = Some(o);
            }
            "guard" => self.starvation_guard = if switch(value).map_err(wrap)? { Some(guard(self)) } else { None },
            "guard.after" | "guard.max_runtime" => {
                let mut g = guard(self);
                let d = duration(value).map_err(wrap)?;
                if key == "guard.after" {
                    g.after = d
                } else {
                    g.max_runtime = d
                }
                self.starvation_guard = Some(g);
            }
            "within_class" => self.preemption.within_class = switch(value).map_err(wrap)?,
            "min_runtime" => self.preemption.min_runtime = duration(value).map_err(wrap)?,
            "age_per_hour" => self.weights.age_per_hour = number(value).map_err(wrap)?,
            "preemption_age_per_hour" => self.weights.preemption_age_per_hour = number(value).map_err(wrap)?,
            "preemption_margin" => self.weights.preemption_margin = number(value).map_err(wrap)?,
            "service_level_weight" => self.weights.service_level = number(value).map_err(wrap)?,
            "service_levels" => {
                let mut levels = Vec::new();
                for part in value.split(',').filter(|p| !p.trim().is_empty()) {
                    let secs = part.trim().parse::<u64>().map_err(|_| {
                        wrap("expected GPU-seconds, comma-separated and rising (e.g. 3600,36000)".into())
                    })?;
                    levels.push(secs);
                }
                if levels.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(wrap("the thresholds must rise".into()));
                }
                self.service_levels = levels;
            }
            "open_reservation_after" => self.open_reservation_after = duration(value).map_err(wrap)?,
            "resize_after" => self.resize_after = duration(value).map_err(wrap)?,
            "backfill" => {
                self.backfill = match value.trim() {
                    "none" => crate::policies::policy::Backfill::None,
                    "first-fit" => crate::policies::policy::Backfill::FirstFit,
                    "easy" => crate::policies::policy::Backfill::Easy,
                    _ => return Err(wrap("expected none, first-fit or easy".into())),
                }
            }
            "learned_estimates" => {
                self.learned_estimates = match value.trim() {
                    "plan" => Some(true),
                    "show" => Some(false),
                    "auto" => None,
                    _ => return Err(wrap("expected plan, show or auto (plan under shortest-job-first only)".into())),
                }
            }
            "within_level" => {
                self.within_level = match value.trim() {
                    "submit" => crate::policies::policy::WithinLevel::Submit,
                    "gittins" => crate::policies::policy::WithinLevel::Gittins,
                    _ => return Err(wrap("expected submit or gittins".into())),
                }
            }
            "fair_share_weight" => self.weights.fair_share = number(value).map_err(wrap)?,
            other => return Err(KnobError::Unknown(other.to_string())),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_set_and_bad_ones_are_named() {
        let mut p = Policy::gpool_default();
        p.set("overload.after=4h").unwrap();
        assert_eq!(p.preemption.overload.as_ref().map(|o| o.after), Some(Duration::from_secs(4 * 3600)));
        p.set("overload=off").unwrap();
        assert_eq!(p.preemption.overload, None);
        p.set("overload.exit=0.5").unwrap();
        assert_eq!(p.preemption.overload.as_ref().map(|o| (o.enter, o.exit)), Some((1.0, 0.5)));
        p.set("service_levels=100,1000").unwrap();
        assert_eq!(p.service_levels, vec![100, 1000]);
        p.set("backfill=first-fit").unwrap();
        assert_eq!(p.backfill, crate::policies::policy::Backfill::FirstFit);
        p.set("guard=off").unwrap();
        assert_eq!(p.starvation_guard, None);
        p.set("within_level=gittins").unwrap();
        assert!(p.orders_by_history());
        assert!(matches!(p.set("within_level=random"), Err(KnobError::Value { .. })));
        p.set("fair_share_weight=0").unwrap();
        assert_eq!(p.weights.fair_share, 0.0);
        assert!(matches!(p.set("nope=1"), Err(KnobError::Unknown(_))));
        assert!(matches!(p.set("overload.after"), Err(KnobError::NotAssignment(_))));
        assert!(matches!(p.set("overload.after=4y"), Err(KnobError::Value { .. })));
        assert!(matches!(p.set("service_levels=10,5"), Err(KnobError::Value { .. })));
        assert!(matches!(p.set("age_per_hour=-1"), Err(KnobError::Value { .. })));
    }
}
