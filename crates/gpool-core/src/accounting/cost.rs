//! What GPU time costs: an allocation is charged its share of its node's
//! price for the time it held it, and a [`CostLedger`] sums charges by any
//! grouping (job, user, team, queue, pool). What a node cost and its
//! allocations did not is waste: paid, idle capacity.

use std::collections::BTreeMap;
use std::sync::Arc;

/// The share of its node an allocation holds: its GPUs of the node's GPUs
/// (thousandths), or, on a node without GPUs, its CPUs of the node's CPUs.
pub fn node_share(node_gpus: u32, node_cpus_milli: u64, gpu_milli: u64, cpus_milli: u64) -> f64 {
    let share = if node_gpus > 0 {
        gpu_milli as f64 / (f64::from(node_gpus) * 1000.0)
    } else if node_cpus_milli > 0 {
        cpus_milli as f64 / node_cpus_milli as f64
    } else {
        0.0
    };
    share.clamp(0.0, 1.0)
}

/// Dollars for holding `share` of a node priced `per_node_hour` for `seconds`.
pub fn charge(per_node_hour: f64, share: f64, seconds: f64) -> f64 {
    if !(per_node_hour.is_finite() && share.is_finite() && seconds.is_finite()) || seconds <= 0.0 {
        return 0.0;
    }
    per_node_hour.max(0.0) * share.clamp(0.0, 1.0) * seconds / 3600.0
}

/// Who a charge is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChargeKey {
    pub job: u64,
    pub user: Arc<str>,
    pub team: Arc<str>,
    pub queue: Arc<str>,
    pub pool: Arc<str>,
}

/// How charges are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostGroup {
    Job,
    User,
    Team,
    Queue,
    Pool,
}

impl std::str::FromStr for CostGroup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "job" => Ok(CostGroup::Job),
            "user" => Ok(CostGroup::User),
            "team" => Ok(CostGroup::Team),
            "queue" => Ok(CostGroup::Queue),
            "pool" => Ok(CostGroup::Pool),
            other => Err(format!("cannot group costs by {other:?}: use job, user, team, queue or pool")),
        }
    }
}

impl CostGroup {
    pub fn as_str(self) -> &'static str {
        match self {
            CostGroup::Job => "job",
            CostGroup::User => "user",
            CostGroup::Team => "team",
            CostGroup::Queue => "queue",
            CostGroup::Pool => "pool",
        }
    }

    fn of(self, k: &ChargeKey) -> String {
        match self {
            CostGroup::Job => k.job.to_string(),
            CostGroup::User => k.user.to_string(),
            CostGroup::Team => k.team.to_string(),
            CostGroup::Queue => k.queue.to_string(),
            CostGroup::Pool => k.pool.to_string(),
        }
    }
}

/// Charges and GPU-hours per key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostLedger {
    rows: BTreeMap<ChargeKey, (f64, f64)>,
}

impl CostLedger {
    /// Adds `dollars` and `gpu_hours` to `key`.
    pub fn add(&mut self, key: ChargeKey, dollars: f64, gpu_hours: f64) {
        let row = self.rows.entry(key).or_default();
        row.0 += dollars.max(0.0);
        row.1 += gpu_hours.max(0.0);
    }

    /// Total dollars.
    pub fn total(&self) -> f64 {
        self.rows.values().map(|r| r.0).sum()
    }

    /// Dollars and GPU-hours per group, largest spend first (ties by name).
    pub fn by(&self, group: CostGroup) -> Vec<(String, f64, f64)> {
        let mut m: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (k, (d, h)) in &self.rows {
            let e = m.entry(group.of(k)).or_default();
            e.0 += d;
            e.1 += h;
        }
        let mut out: Vec<(String, f64, f64)> = m.into_iter().map(|(k, (d, h))| (k, d, h)).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}
