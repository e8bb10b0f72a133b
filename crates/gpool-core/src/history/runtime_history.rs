//! Run times learned from history: a job that comes with no estimate gets
//! one from the jobs like it that finished.
//!
//! Jobs are alike at four levels, most specific first: the same user, name,
//! GPU count and queue; the same user and name; the same user, GPU count and
//! queue; the same queue and GPU count. A job's estimate is a quantile of the
//! recent run times at the first level that has seen enough of them (the
//! last [`HistoryConfig::window`] successes per key, so a job that got
//! faster or slower is followed within a few runs). Only successes are
//! recorded: a failed or cancelled run says little about how long the job
//! takes.
//!
//! The same code serves the daemon (which records every job that succeeds
//! and gives the estimate at submission) and `gpool sim --estimates learned`
//! (which records each trace job as it ends).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What jobs are compared by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    pub user: Arc<str>,
    /// The job's name (its command's first word when it has none).
    pub name: Arc<str>,
    /// GPUs (or chips, MIG instances) over all replicas.
    pub gpus: u32,
    pub queue: Arc<str>,
}

/// The level of likeness an estimate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Basis {
    /// Same user, name, GPU count and queue.
    Same,
    /// Same user and name.
    UserName,
    /// Same user, GPU count and queue.
    UserGpus,
    /// Same queue and GPU count.
    QueueGpus,
}

impl Basis {
    const ALL: [Basis; 4] = [Basis::Same, Basis::UserName, Basis::UserGpus, Basis::QueueGpus];

    /// A short name for APIs: `same`, `user-name`, `user-gpus`, `queue-gpus`.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Same => "same",
            Basis::UserName => "user-name",
            Basis::UserGpus => "user-gpus",
            Basis::QueueGpus => "queue-gpus",
        }
    }

    /// The key of `k` at this level (fields that do not count are blanked).
    fn key(self, k: &RunKey) -> RunKey {
        let blank: Arc<str> = Arc::from("");
        match self {
            Basis::Same => k.clone(),
            Basis::UserName => RunKey { gpus: 0, queue: blank, ..k.clone() },
            Basis::UserGpus => RunKey { name: blank, ..k.clone() },
            Basis::QueueGpus => RunKey { user: blank.clone(), name: blank, ..k.clone() },
        }
    }
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Basis::Same => "same user, name, GPUs and queue",
            Basis::UserName => "same user and name",
            Basis::UserGpus => "same user, GPUs and queue",
            Basis::QueueGpus => "same queue and GPUs",
        })
    }
}

/// How estimates are learned.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryConfig {
    /// Recent successes kept per key.
    pub window: usize,
    /// Successes a level needs before it gives estimates.
    pub min_samples: usize,
    /// The quantile of the recent run times taken as the estimate (0.5: the median).
    pub quantile: f64,
}

impl Default for HistoryConfig {
    /// The median of the last 16 successes, from two on. `gpool sim
    /// --estimates learned:Q` compares quantiles; docs/scheduling.md says why the median.
    fn default() -> Self {
        HistoryConfig { window: 16, min_samples: 2, quantile: 0.5 }
    }
}

/// An estimate and what it rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learned {
    pub estimate: Duration,
    /// Successes it was computed from.
    pub samples: u32,
    pub basis: Basis,
}

/// Recent run times per key, at every level.
#[derive(Clone, Debug, Default)]
pub struct RuntimeHistory {
    cfg: HistoryConfig,
    recent: HashMap<(Basis, RunKey), VecDeque<u64>>,
}

impl RuntimeHistory {
    pub fn new(cfg: HistoryConfig) -> RuntimeHistory {
        RuntimeHistory { cfg, recent: HashMap::new() }
    }

    /// A job like `key` succeeded after running `ran` in all.
    pub fn record(&mut self, key: &RunKey, ran: Duration) {
        let ms = u64::try_from(ran.as_millis()).unwrap_or(u64::MAX);
        let window = self.cfg.window.max(1);
        for b in Basis::ALL {
            let q = self.recent.entry((b, b.key(key))).or_default();
            if q.len() == window {
                q.pop_front();
            }
            q.push_back(ms);
        }
    }

    /// The estimate for a job like `key`, from the most specific level that
    /// has seen enough successes; `None` before any has.
    pub fn estimate(&self, key: &RunKey) -> Option<Learned> {
        let min = self.cfg.min_samples.max(1);
        Basis::ALL.into_iter().find_map(|b| {
            let q = self.recent.get(&(b, b.key(key))).filter(|q| q.len() >= min)?;
            let mut v: Vec<u64> = q.iter().copied().collect();
            v.sort_unstable();
            let at = ((v.len() - 1) as f64 * self.cfg.quantile.clamp(0.0, 1.0)).round() as usize;
            Some(Learned { estimate: Duration::from_millis(v[at]), samples: v.len() as u32, basis: b })
        })
    }

    /// The recent run times in ms behind [`RuntimeHistory::estimate`]: the
    /// window of the most specific level that has seen enough successes.
    pub fn similar(&self, key: &RunKey) -> Option<(Vec<u64>, Basis)> {
        let min = self.cfg.min_samples.max(1);
        Basis::ALL.into_iter().find_map(|b| {
            let q = self.recent.get(&(b, b.key(key))).filter(|q| q.len() >= min)?;
            Some((q.iter().copied().collect(), b))
        })
    }

    /// Keys known at all levels (how much memory the history holds).
    pub fn keys(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str, name: &str, gpus: u32) -> RunKey {
        RunKey { user: Arc::from(user), name: Arc::from(name), gpus, queue: Arc::from("default") }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn nothing_is_guessed_before_enough_successes() {
        let mut h = RuntimeHistory::new(HistoryConfig::default());
        assert_eq!(h.estimate(&key("ana", "train", 8)), None);
        h.record(&key("ana", "train", 8), secs(100));
        assert_eq!(h.estimate(&key("ana", "train", 8)), None, "one success is not enough");
        h.record(&key("ana", "train", 8), secs(300));
        let e = h.estimate(&key("ana", "train", 8)).expect("two are");
        assert_eq!((e.samples, e.basis), (2, Basis::Same));
    }

    #[test]
    fn the_most_specific_level_with_enough_successes_answers() {
        let mut h = RuntimeHistory::new(HistoryConfig::default());
        for s in [60, 60, 60] {
            h.record(&key("ana", "train", 8), secs(s * 60));
            h.record(&key("ana", "eval", 1), secs(s));
        }
        // Same name, other GPU count: the user's "train" jobs.
        let e = h.estimate(&key("ana", "train", 4)).expect("user and name");
        assert_eq!((e.estimate, e.basis), (secs(3600), Basis::UserName));
        // A new name on 8 GPUs: the user's 8-GPU jobs in that queue.
        let e = h.estimate(&key("ana", "sweep", 8)).expect("user and GPUs");
        assert_eq!((e.estimate, e.basis), (secs(3600), Basis::UserGpus));
        // Another user's first 1-GPU job: the queue's 1-GPU jobs.
        let e = h.estimate(&key("bo", "x", 1)).expect("queue and GPUs");
        assert_eq!((e.estimate, e.basis), (secs(60), Basis::QueueGpus));
        assert_eq!(h.estimate(&key("bo", "x", 2)), None, "nothing like it");
    }

    #[test]
    fn the_estimate_is_the_quantile_of_the_recent_window() {
        let cfg = HistoryConfig { window: 4, min_samples: 1, quantile: 0.5 };
        let mut h = RuntimeHistory::new(cfg.clone());
        let k = key("ana", "train", 1);
        for s in [1000, 10, 20, 30, 40] {
            h.record(&k, secs(s));
        }
        // 1000 s fell out of the window of four: the median of 10, 20, 30, 40 (rounded up).
        assert_eq!(h.estimate(&k).map(|e| (e.estimate, e.samples)), Some((secs(30), 4)));
        let mut high = RuntimeHistory::new(HistoryConfig { quantile: 1.0, ..cfg });
        for s in [10, 20, 30] {
            high.record(&k, secs(s));
        }
        assert_eq!(high.estimate(&k).map(|e| e.estimate), Some(secs(30)));
    }
}
