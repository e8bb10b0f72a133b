//! A job's expected draw per GPU, learned from the jobs like it that ran:
//! the same user, name and GPU model (and, for a job that names no model,
//! the same user and name on any model). The power budgets count a job at
//! this draw instead of its GPUs' power limit once it has a history.
//!
//! The expectation is the highest mean draw of the last [`WINDOW`] runs:
//! a budget is a limit, so a job is counted at what it drew at its most,
//! and a job that changed is followed within [`WINDOW`] runs.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Runs remembered per key.
pub const WINDOW: usize = 8;

/// What jobs are compared by; `model` is empty for "any model".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DrawKey {
    pub user: Arc<str>,
    pub name: Arc<str>,
    pub model: Arc<str>,
}

/// Mean draws per GPU of recent runs, by key.
#[derive(Clone, Debug, Default)]
pub struct DrawHistory {
    runs: HashMap<DrawKey, VecDeque<u32>>,
}

impl DrawHistory {
    /// A run of `key` drew `watts_per_gpu` on average per GPU it held;
    /// recorded under its model and under any model.
    pub fn record(&mut self, key: &DrawKey, watts_per_gpu: f64) {
        if !watts_per_gpu.is_finite() || watts_per_gpu <= 0.0 {
            return;
        }
        let w = watts_per_gpu.round().min(f64::from(u32::MAX)) as u32;
        let any = DrawKey { model: Arc::from(""), ..key.clone() };
        for k in [key.clone(), any] {
            let v = self.runs.entry(k).or_default();
            if v.len() == WINDOW {
                v.pop_front();
            }
            v.push_back(w);
            if key.model.is_empty() {
                break;
            }
        }
    }

    /// The draw per GPU to count `key` at, if jobs like it ran.
    pub fn expected(&self, key: &DrawKey) -> Option<u32> {
        self.runs.get(key).and_then(|v| v.iter().copied().max())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(model: &str) -> DrawKey {
        DrawKey { user: "ana".into(), name: "train".into(), model: model.into() }
    }

    #[test]
    fn the_highest_of_the_recent_runs_is_expected_per_model_and_for_any_model() {
        let mut h = DrawHistory::default();
        assert_eq!(h.expected(&key("H100-80GB")), None);
        h.record(&key("H100-80GB"), 412.4);
        h.record(&key("H100-80GB"), 380.0);
        h.record(&key("L4"), 70.0);
        h.record(&key("L4"), f64::NAN);
        assert_eq!(h.expected(&key("H100-80GB")), Some(412));
        assert_eq!(h.expected(&key("L4")), Some(70));
        assert_eq!(h.expected(&key("")), Some(412), "any model: the most of all");
        for _ in 0..WINDOW {
            h.record(&key("H100-80GB"), 300.0);
        }
        assert_eq!(h.expected(&key("H100-80GB")), Some(300), "an old peak leaves the window");
    }
}
