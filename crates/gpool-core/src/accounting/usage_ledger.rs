//! Usage of finished jobs kept per hour of their end and per owner (user,
//! team, queue, pool), as the jobs end: a cost report over a period reads
//! the period's hours, not every job the cluster ever ran, and so costs
//! the same with 100,000 jobs kept as with 100.
//!
//! The ledger counts a job once, in the hour it ended, with everything it
//! used over all its runs: a report "since" an instant counts jobs that
//! ended from the start of that instant's hour on. Running jobs are not in
//! it; the report adds them live.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::accounting::cost::CostGroup;
use crate::model::time::Time;

/// One hour, in milliseconds: the ledger's resolution.
pub const HOUR_MS: i64 = 3_600_000;

/// What jobs used, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub jobs: u64,
    pub dollars: f64,
    pub gpu_hours: f64,
    /// GPU-hours allocated while idle (under 5% utilisation).
    pub idle_gpu_hours: f64,
    pub energy_wh: f64,
    /// Σ mean utilisation × GPU-hours of the jobs whose utilisation was sampled…
    pub util_hours: f64,
    /// …and those jobs' GPU-hours: their ratio is the mean utilisation.
    pub sampled_hours: f64,
}

/// A figure as the ledger keeps it: non-negative and finite, else nothing.
fn amount(x: f64) -> f64 {
    if x.is_finite() { x.max(0.0) } else { 0.0 }
}

impl Usage {
    /// One job's usage; `mean_util` (percent) is `None` where nothing sampled it.
    pub fn of_job(dollars: f64, gpu_hours: f64, idle_gpu_hours: f64, energy_wh: f64, mean_util: Option<f64>) -> Usage {
        let gpu_hours = amount(gpu_hours);
        let sampled = mean_util.filter(|u| u.is_finite()).map(|u| u.clamp(0.0, 100.0));
        Usage {
            jobs: 1,
            dollars: amount(dollars),
            gpu_hours,
            idle_gpu_hours: amount(idle_gpu_hours),
            energy_wh: amount(energy_wh),
            util_hours: sampled.map_or(0.0, |u| u * gpu_hours),
            sampled_hours: if sampled.is_some() { gpu_hours } else { 0.0 },
        }
    }

    pub fn add(&mut self, o: &Usage) {
        self.jobs += o.jobs;
        self.dollars += o.dollars;
        self.gpu_hours += o.gpu_hours;
        self.idle_gpu_hours += o.idle_gpu_hours;
        self.energy_wh += o.energy_wh;
        self.util_hours += o.util_hours;
        self.sampled_hours += o.sampled_hours;
    }

    /// Mean GPU utilisation (percent) weighted by GPU-hours, over the jobs that sampled it.
    pub fn mean_gpu_util(&self) -> Option<f64> {
        (self.sampled_hours > 0.0).then(|| self.util_hours / self.sampled_hours)
    }
}

/// Whose usage it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub user: Arc<str>,
    pub team: Arc<str>,
    pub queue: Arc<str>,
    pub pool: Arc<str>,
}

impl Owner {
    /// The name of this owner's group, for every grouping but per job (which the ledger does not keep).
    pub fn group(&self, by: CostGroup) -> Option<&str> {
        match by {
            CostGroup::Job => None,
            CostGroup::User => Some(&self.user),
            CostGroup::Team => Some(&self.team),
            CostGroup::Queue => Some(&self.queue),
            CostGroup::Pool => Some(&self.pool),
        }
    }
}

/// Finished jobs' usage per hour of their end and per owner.
#[derive(Clone, Debug, Default)]
pub struct UsageLedger {
    hours: BTreeMap<i64, BTreeMap<Owner, Usage>>,
    /// Every name once, shared by the keys.
    names: BTreeSet<Arc<str>>,
    /// The smallest job id that ended in each hour: where a report that
    /// lists jobs one by one starts reading the store.
    first_ids: BTreeMap<i64, u64>,
}

/// The start of the hour `t` falls in.
pub fn hour_of(t: Time) -> Time {
    Time::from_millis(t.as_millis().div_euclid(HOUR_MS) * HOUR_MS)
}

impl UsageLedger {
    fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Arc<str> = s.into();
        self.names.insert(n.clone());
        n
    }

    /// A job that ended at `ended` used `usage`.
    pub fn add(&mut self, ended: Time, user: &str, team: &str, queue: &str, pool: &str, usage: Usage) {
        let owner =
            Owner { user: self.name(user), team: self.name(team), queue: self.name(queue), pool: self.name(pool) };
        let hour = hour_of(ended).as_millis();
        self.hours.entry(hour).or_default().entry(owner).or_default().add(&usage);
    }

    /// Job `id` ended at `ended` (ids are given in submission order).
    pub fn note_job(&mut self, ended: Time, id: u64) {
        let first = self.first_ids.entry(hour_of(ended).as_millis()).or_insert(id);
        *first = (*first).min(id);
    }

    /// The smallest id of the jobs noted as ended from the start of
    /// `since`'s hour on; `None` if none ended since.
    pub fn first_job_since(&self, since: Time) -> Option<u64> {
        self.first_ids.range(hour_of(since).as_millis()..).map(|(_, id)| *id).min()
    }

    /// Usage of the jobs that ended from the start of `since`'s hour on, per
    /// owner, of the owners `keep` admits.
    pub fn since(&self, since: Time, keep: impl Fn(&Owner) -> bool) -> BTreeMap<Owner, Usage> {
        let mut out: BTreeMap<Owner, Usage> = BTreeMap::new();
        for owners in self.hours.range(hour_of(since).as_millis()..).map(|(_, o)| o) {
            for (owner, usage) in owners.iter().filter(|(o, _)| keep(o)) {
                out.entry(owner.clone()).or_default().add(usage);
            }
        }
        out
    }

    /// Every entry from the start of `since`'s hour on: (hour, owner, usage), hours ascending.
    pub fn hours_since(&self, since: Time) -> impl Iterator<Item = (Time, &Owner, &Usage)> {
        self.hours
            .range(hour_of(since).as_millis()..)
            .flat_map(|(h, owners)| owners.iter().map(move |(o, u)| (Time::from_millis(*h), o, u)))
    }

    /// Entries kept (hours × owners active in them): what a report over everything reads.
    pub fn entries(&self) -> usize {
        self.hours.values().map(BTreeMap::len).sum()
    }
}

/// Usage per group name, largest spend first (ties by name).
pub fn by_group(rows: impl IntoIterator<Item = (String, Usage)>) -> Vec<(String, Usage)> {
    let mut m: BTreeMap<String, Usage> = BTreeMap::new();
    for (name, u) in rows {
        m.entry(name).or_default().add(&u);
    }
    let mut out: Vec<(String, Usage)> = m.into_iter().collect();
    out.sort_by(|a, b| b.1.dollars.total_cmp(&a.1.dollars).then_with(|| a.0.cmp(&b.0)));
    out
}
