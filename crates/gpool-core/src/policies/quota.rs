//! Queue quotas in the Kueue model: a guarantee, a maximum, and borrowing of
//! the unused guarantees of the other queues in a cohort.
//!
//! Quota is counted in [`GpuMilli`]: a whole GPU is 1000, a MIG instance its
//! compute slices out of seven.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::resources::{DeviceKind, GpuMilli, KindUnits};

/// A quota queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub name: Arc<str>,
    /// Queues in one cohort lend each other their unused guarantees.
    pub cohort: Option<Arc<str>>,
    /// Capacity the queue can always get back by reclaiming from borrowers.
    pub guarantee: GpuMilli,
    /// Hard cap on the queue's usage (`None` = no cap).
    pub max: Option<GpuMilli>,
    /// Hard caps per accelerator kind (`maxPerKind`); a kind not named has
    /// none beyond `max`. Guarantees and borrowing stay across kinds.
    pub kind_max: std::collections::BTreeMap<DeviceKind, GpuMilli>,
    /// Whether its jobs may run on spot nodes when they do not say (`None`: allowed).
    pub spot: Option<crate::model::job::SpotPolicy>,
    /// Jobs whose GPUs all stay idle are stopped (the daemon's `idle: stop`), not only warned.
    pub idle_stop: bool,
    /// When its jobs may start (`windows.rs`); `None`: at any time.
    pub windows: Option<Arc<crate::calendar::windows::QueueWindows>>,
    /// A started job of this queue is preempted by no one (priority, within
    /// its class, reclaim) for this long (`minRuntime`; KAI's
    /// `preemptMinRuntime`, Slurm's `PreemptExemptTime`); zero: off. A job's own
    /// `JobSpec::min_runtime` wins. Power and health stops are not preemptions.
    pub min_runtime: std::time::Duration,
}

impl QueueConfig {
    pub fn new(name: &str) -> QueueConfig {
        QueueConfig {
            name: Arc::from(name),
            cohort: None,
            guarantee: 0,
            max: None,
            kind_max: BTreeMap::new(),
            spot: None,
            idle_stop: false,
            windows: None,
            min_runtime: std::time::Duration::ZERO,
        }
    }
}

/// Why a job's queue cannot take it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaBlock {
    /// The queue would exceed its maximum.
    AtMax { queue: Arc<str>, max: GpuMilli, used: GpuMilli },
    /// The queue would borrow more than its cohort has unused.
    CohortExhausted { queue: Arc<str>, cohort: Arc<str>, lendable: GpuMilli },
    /// The queue would exceed its maximum for one accelerator kind.
    KindAtMax { queue: Arc<str>, kind: DeviceKind, max: GpuMilli, used: GpuMilli },
}

/// Usage per queue and cohort during a pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct QuotaState {
    usage: BTreeMap<Arc<str>, GpuMilli>,
    cohort_usage: BTreeMap<Arc<str>, GpuMilli>,
    cohort_guarantee: BTreeMap<Arc<str>, GpuMilli>,
    /// Per queue and accelerator kind, for queues with per-kind maximums.
    kind_usage: BTreeMap<Arc<str>, KindUnits>,
}

impl QuotaState {
    pub(crate) fn new<'a>(
        queues: &BTreeMap<Arc<str>, QueueConfig>,
        usage: impl Iterator<Item = (&'a Arc<str>, GpuMilli)>,
    ) -> QuotaState {
        let mut s = QuotaState::default();
        for q in queues.values() {
            if let Some(c) = &q.cohort {
                *s.cohort_guarantee.entry(c.clone()).or_default() += q.guarantee;
                s.cohort_usage.entry(c.clone()).or_default();
            }
        }
        for (queue, used) in usage {
            if used > 0 {
                s.add(queues, queue, used);
            }
        }
        s
    }

    /// Also counts each queue's use per accelerator kind.
    pub(crate) fn with_kinds<'a>(mut self, usage: impl Iterator<Item = (&'a Arc<str>, KindUnits)>) -> QuotaState {
        for (queue, used) in usage {
            self.kind_usage.entry(queue.clone()).or_default().add_all(&used);
        }
        self
    }

    /// Whether `queue` may take `units` more of each kind (its per-kind maximums).
    pub(crate) fn check_kinds(
        &self,
        queues: &BTreeMap<Arc<str>, QueueConfig>,
        queue: &Arc<str>,
        units: &KindUnits,
    ) -> Result<(), QuotaBlock> {
        let Some(q) = queues.get(queue) else {
            return Ok(());
        };
        let used = self.kind_usage.get(queue).copied().unwrap_or_default();
        for (kind, want) in units.iter() {
            if let Some(&max) = q.kind_max.get(&kind)
                && used.get(kind) + want > max
            {
                return Err(QuotaBlock::KindAtMax { queue: queue.clone(), kind, max, used: used.get(kind) });
            }
        }
        Ok(())
    }

    pub(crate) fn add_kinds(&mut self, queue: &Arc<str>, units: &KindUnits) {
        self.kind_usage.entry(queue.clone()).or_default().add_all(units);
    }

    pub(crate) fn used(&self, queue: &str) -> GpuMilli {
        self.usage.get(queue).copied().unwrap_or(0)
    }

    /// Whether `queue` may take `units` more.
    pub(crate) fn check(
        &self,
        queues: &BTreeMap<Arc<str>, QueueConfig>,
        queue: &Arc<str>,
        units: GpuMilli,
    ) -> Result<(), QuotaBlock> {
        let Some(q) = queues.get(queue) else {
            return Ok(());
        };
        let used = self.used(queue);
        if let Some(max) = q.max
            && used + units > max
        {
            return Err(QuotaBlock::AtMax { queue: queue.clone(), max, used });
        }
        if let Some(c) = &q.cohort {
            let pool = self.cohort_guarantee.get(c).copied().unwrap_or(0);
            let cohort_used = self.cohort_usage.get(c).copied().unwrap_or(0);
            // A cohort without guarantees does not limit borrowing.
            if pool > 0 && used + units > q.guarantee && cohort_used + units > pool {
                return Err(QuotaBlock::CohortExhausted {
                    queue: queue.clone(),
                    cohort: c.clone(),
                    lendable: pool.saturating_sub(cohort_used),
                });
            }
        }
        Ok(())
    }

    /// Whether `queue`, after taking `units`, is still within its guarantee
    /// (and so may reclaim from borrowers).
    pub(crate) fn within_guarantee(
        &self,
        queues: &BTreeMap<Arc<str>, QueueConfig>,
        queue: &str,
        units: GpuMilli,
    ) -> bool {
        queues.get(queue).is_some_and(|q| self.used(queue) + units <= q.guarantee)
    }

    pub(crate) fn add(&mut self, queues: &BTreeMap<Arc<str>, QueueConfig>, queue: &Arc<str>, units: GpuMilli) {
        *self.usage.entry(queue.clone()).or_default() += units;
        if let Some(c) = queues.get(queue).and_then(|q| q.cohort.as_ref()) {
            *self.cohort_usage.entry(c.clone()).or_default() += units;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::GPU;

    fn queues(list: &[(&str, Option<&str>, u64, Option<u64>)]) -> BTreeMap<Arc<str>, QueueConfig> {
        list.iter()
            .map(|(n, c, g, m)| {
                let q = QueueConfig {
                    name: Arc::from(*n),
                    cohort: c.map(Arc::from),
                    guarantee: g * GPU,
                    max: m.map(|m| m * GPU),
                    kind_max: BTreeMap::new(),
                    spot: None,
                    idle_stop: false,
                    min_runtime: std::time::Duration::ZERO,
                    windows: None,
                };
                (q.name.clone(), q)
            })
            .collect()
    }

    #[test]
    fn quota_checks_follow_the_kueue_model() {
        let qs = queues(&[
            ("research", Some("lab"), 8, Some(16)),
            ("prod", Some("lab"), 8, None),
            ("capped", None, 0, Some(4)),
        ]);
        let q = |s: &str| Arc::<str>::from(s);
        struct Case {
            name: &'static str,
            usage: Vec<(&'static str, u64)>,
            queue: &'static str,
            want: u64,
            ok: bool,
        }
        let cases = vec![
            Case { name: "within guarantee", usage: vec![], queue: "research", want: 8, ok: true },
            Case { name: "borrow prod's idle guarantee", usage: vec![], queue: "research", want: 12, ok: true },
            Case { name: "max caps borrowing", usage: vec![("research", 12)], queue: "research", want: 8, ok: false },
            Case {
                name: "nothing left to borrow",
                usage: vec![("prod", 8), ("research", 8)],
                queue: "research",
                want: 1,
                ok: false,
            },
            Case { name: "own guarantee always ok", usage: vec![("research", 12)], queue: "prod", want: 4, ok: true },
            Case { name: "unknown queue unlimited", usage: vec![], queue: "scratch", want: 1000, ok: true },
            Case { name: "cap without cohort", usage: vec![("capped", 3)], queue: "capped", want: 2, ok: false },
        ];
        for c in cases {
            let usage: Vec<(Arc<str>, u64)> = c.usage.iter().map(|(n, u)| (q(n), u * GPU)).collect();
            let s = QuotaState::new(&qs, usage.iter().map(|(n, u)| (n, *u)));
            assert_eq!(s.check(&qs, &q(c.queue), c.want * GPU).is_ok(), c.ok, "{}", c.name);
        }
    }

    #[test]
    fn a_kind_maximum_caps_that_kind_only() {
        let mut qs = queues(&[("ml", None, 0, Some(16))]);
        if let Some(q) = qs.get_mut("ml") {
            q.kind_max.insert(DeviceKind::AmdGpu, 4 * GPU);
        }
        let ml = Arc::<str>::from("ml");
        let mut used = KindUnits::default();
        used.add(DeviceKind::AmdGpu, 3 * GPU);
        used.add(DeviceKind::NvidiaGpu, 8 * GPU);
        let s = QuotaState::new(&qs, [(&ml, 11 * GPU)].into_iter()).with_kinds([(&ml, used)].into_iter());
        let want = |k: DeviceKind, n: u64| {
            let mut u = KindUnits::default();
            u.add(k, n * GPU);
            u
        };
        assert!(s.check_kinds(&qs, &ml, &want(DeviceKind::AmdGpu, 1)).is_ok(), "4 of 4");
        assert_eq!(
            s.check_kinds(&qs, &ml, &want(DeviceKind::AmdGpu, 2)),
            Err(QuotaBlock::KindAtMax { queue: ml.clone(), kind: DeviceKind::AmdGpu, max: 4 * GPU, used: 3 * GPU })
        );
        assert!(s.check_kinds(&qs, &ml, &want(DeviceKind::NvidiaGpu, 5)).is_ok(), "no NVIDIA maximum of its own");
        assert!(s.check(&qs, &ml, 6 * GPU).is_err(), "the queue's maximum still holds across kinds");
        assert!(s.check_kinds(&qs, &Arc::from("other"), &want(DeviceKind::AmdGpu, 99)).is_ok(), "unknown queue");
    }

    #[test]
    fn reclaim_needs_room_in_the_guarantee_and_a_borrower() {
        let qs = queues(&[("a", Some("c"), 4, None), ("b", Some("c"), 4, None)]);
        let a = Arc::<str>::from("a");
        let b = Arc::<str>::from("b");
        let s = QuotaState::new(&qs, [(&b, 8 * GPU)].into_iter());
        assert!(s.within_guarantee(&qs, &a, 4 * GPU));
        assert!(!s.within_guarantee(&qs, &a, 5 * GPU));
        assert_eq!(s.used(&b), 8 * GPU);
    }
}
