//! Gangs kept on one value of a label (`JobSpec::same_label`: a multi-host
//! TPU slice): placement and the victim search try one value at a time,
//! lowest first, with eligibility kept to that value's nodes.

use std::collections::BTreeSet;

use crate::model::job::{Job, Placement};
use crate::model::time::Time;
use crate::pass::capacity::Capacity;
use crate::policies::policy::PlacementStrategy;

impl Capacity<'_> {
    /// The values of `label` on the nodes `job` may use (power aside), lowest first.
    pub(crate) fn label_values(&self, job: &Job, label: &str) -> BTreeSet<String> {
        (0..self.node_count())
            .filter(|n| self.eligible_ignoring_power(*n, job))
            .filter_map(|n| self.entry(n).node.labels.get(label).cloned())
            .collect()
    }

    /// Keeps eligibility to the nodes whose `label` has this value (`None`: no restriction).
    pub(crate) fn restrict_to(&mut self, only: Option<(std::sync::Arc<str>, String)>) {
        self.only = only;
    }

    /// Places all replicas of `job` or none. On success the resources are taken.
    /// A job whose replicas must share a label's value (a TPU slice) is tried
    /// on each value in turn, lowest first, until one holds the whole gang.
    pub(crate) fn place_job(&mut self, job: &Job, ends: Time, strategy: PlacementStrategy) -> Result<Placement, ()> {
        let Some(key) = job.spec.same_label.clone() else { return self.place_gang(job, ends, strategy) };
        let values: BTreeSet<String> = (0..self.node_count())
            .filter(|n| self.eligible(*n, job))
            .filter_map(|n| self.entry(n).node.labels.get(&*key).cloned())
            .collect();
        for v in values {
            self.only = Some((key.clone(), v));
            let placed = self.place_gang(job, ends, strategy);
            self.only = None;
            if placed.is_ok() {
                return placed;
            }
        }
        Err(())
    }
}
