//! Node pools: named groups of nodes of one shape, bought one way, that the
//! autoscaler ([`crate::planners::autoscale`]) grows and shrinks between `min`
//! and `max`. A pool's health ([`PoolHealth`]) remembers failed creations, so
//! that a pool that keeps failing (a spot market with no capacity) is left
//! alone for a while and its demand falls back to the next pool.

use std::sync::Arc;
use std::time::Duration;

use crate::model::node::{Labels, Node, Pool, PoolKind};
use crate::model::time::Time;

/// What every node of a pool has.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeShape {
    pub gpus: u32,
    pub gpu_model: Arc<str>,
    pub gpu_memory_mb: u64,
    pub cpus: u32,
    pub memory_mb: u64,
    /// Labels every node of the pool carries (besides `gpool.io/pool`).
    pub labels: Labels,
}

impl NodeShape {
    /// A node of this shape in `pool`, as the scheduler would see it once it
    /// registered (what the autoscaler tests a job's constraints against).
    pub fn node(&self, name: &str, pool: &Pool) -> Node {
        let mut n = Node::with_gpus(name, self.gpus, &self.gpu_model, self.gpu_memory_mb);
        n.cpus_milli = u64::from(self.cpus) * 1000;
        n.memory_mb = self.memory_mb;
        n.labels = self.labels.clone();
        if self.gpus > 0 {
            n.labels.entry("gpool.io/gpu-model".into()).or_insert_with(|| self.gpu_model.to_string());
        }
        n.pool = pool.clone();
        n
    }
}

/// How failures of one pool are retried (Slurm's `ResumeTimeout` and
/// SkyPilot's failover, in one rule): after each failed creation the pool
/// waits `backoff × 2^(failures-1)` (at most `max_backoff`) before it creates
/// again; after `failures_before_unavailable` failures in a row it is
/// unavailable for `unavailable_for`, and its demand goes to the next pool.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryRules {
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub failures_before_unavailable: u32,
    pub unavailable_for: Duration,
}

impl Default for RetryRules {
    fn default() -> Self {
        RetryRules {
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            failures_before_unavailable: 2,
            unavailable_for: Duration::from_secs(600),
        }
    }
}

/// A node pool as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    pub pool: Pool,
    pub shape: NodeShape,
    /// Dollars per node-hour. For a reserved pool, the committed rate, paid
    /// for `min` nodes whether they are used or not.
    pub price_per_node_hour: f64,
    pub min: u32,
    pub max: u32,
    /// A node that has not registered this long after its creation was asked
    /// for is deleted and counted as a failure.
    pub boot_timeout: Duration,
    /// A node that ran nothing this long is deleted (never below `min`).
    pub idle_timeout: Duration,
    pub retry: RetryRules,
}

impl PoolConfig {
    pub fn name(&self) -> &str {
        &self.pool.name
    }

    /// Whether nodes come and go (a fixed pool has `min == max`).
    pub fn elastic(&self) -> bool {
        self.min < self.max
    }

    /// Dollars per GPU-hour of this pool's nodes (per node-hour without GPUs).
    pub fn price_per_gpu_hour(&self) -> f64 {
        self.price_per_node_hour / f64::from(self.shape.gpus.max(1))
    }

    /// A node of this pool's shape named `name`.
    pub fn template(&self, name: &str) -> Node {
        self.shape.node(name, &self.pool)
    }

    pub fn is_spot(&self) -> bool {
        self.pool.kind == PoolKind::Spot
    }
}

/// What the shell knows about one pool's failures.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PoolHealth {
    /// Failed creations (or boot time-outs) since the last node that came up.
    pub failures: u32,
    /// No creation before this time (back-off).
    pub retry_at: Option<Time>,
    /// Whether the back-off is the long one: demand goes to other pools meanwhile.
    pub unavailable: bool,
}

impl PoolHealth {
    /// A creation failed at `now`, or a node did not come up in time.
    pub fn failed(&mut self, rules: &RetryRules, now: Time) {
        self.failures = self.failures.saturating_add(1);
        if self.failures >= rules.failures_before_unavailable {
            self.unavailable = true;
            self.retry_at = Some(now.plus(rules.unavailable_for));
        } else {
            let factor = 1u32 << (self.failures - 1).min(16);
            self.retry_at = Some(now.plus(rules.backoff.saturating_mul(factor).min(rules.max_backoff)));
        }
    }

    /// A node of the pool came up: the pool works.
    pub fn succeeded(&mut self) {
        *self = PoolHealth::default();
    }

    /// Whether the pool may be asked for a node at `now`.
    pub fn can_create(&self, now: Time) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
    }

    /// Whether demand should look elsewhere at `now`: the pool is in its long back-off.
    pub fn unavailable_at(&self, now: Time) -> bool {
        self.unavailable && !self.can_create(now)
    }

    /// The time the health changes by itself, if any.
    pub fn next_change(&self, now: Time) -> Option<Time> {
        self.retry_at.filter(|t| *t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_then_make_the_pool_unavailable_until_it_works() {
        let rules = RetryRules {
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            failures_before_unavailable: 3,
            unavailable_for: Duration::from_secs(600),
        };
        let mut h = PoolHealth::default();
        let t0 = Time::from_secs(100);
        assert!(h.can_create(t0));
        h.failed(&rules, t0);
        assert_eq!(h.retry_at, Some(Time::from_secs(110)));
        assert!(!h.can_create(Time::from_secs(109)) && h.can_create(Time::from_secs(110)));
        assert!(!h.unavailable_at(Time::from_secs(105)), "a short back-off keeps the demand here");
        h.failed(&rules, Time::from_secs(110));
        assert_eq!(h.retry_at, Some(Time::from_secs(130)));
        h.failed(&rules, Time::from_secs(130));
        assert!(h.unavailable_at(Time::from_secs(131)));
        assert_eq!(h.next_change(Time::from_secs(131)), Some(Time::from_secs(730)));
        assert!(!h.unavailable_at(Time::from_secs(730)), "tried again after the long back-off");
        h.succeeded();
        assert_eq!(h, PoolHealth::default());
    }
}
