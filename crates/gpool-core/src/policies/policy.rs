//! Scheduling policy: how the queue is ordered, whether jobs may overtake a
//! blocked one, who may preempt whom, and how replicas are placed.
//!
//! Policies are data. [`Policy::by_name`] gives the presets the daemon and
//! the simulator offer; every field can also be set on its own.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::model::job::{JobSpec, Service};
use crate::model::time::Time;

/// How pending jobs are ordered within a priority class. Higher priority
/// classes always come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// Submission order.
    Fifo,
    /// Shortest planned run time first (needs estimates; jobs without one go last).
    ShortestFirst,
    /// Shortest planned remaining time first.
    ShortestRemaining,
    /// Least attained GPU-service first, in discrete levels (Tiresias 2D-LAS),
    /// submission order within a level.
    AttainedService,
    /// The user using the fewest GPUs (relative to their share) goes first:
    /// max-min fairness, re-evaluated after every start.
    MaxMinFair,
    /// Slurm-style multifactor priority: fair share + age − attained-service
    /// level, all weighted.
    Multifactor,
}

/// How [`Ordering::Multifactor`] orders jobs of one attained-service level
/// (and equal fair share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WithinLevel {
    /// First come, first served (Tiresias).
    Submit,
    /// Highest Gittins index first, over the run times of jobs like it
    /// (`JobSpec::similar_runs`; see [`crate::history::gittins`]); jobs with no
    /// such history first, as least attained service would put them.
    Gittins,
}

/// Whether and how later jobs may start while an earlier one is blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backfill {
    /// Strict order: the first job that does not fit blocks everyone behind it.
    None,
    /// Any later job that fits now may start (may delay the blocked ones).
    FirstFit,
    /// EASY: reserve the earliest start of the first blocked job; later jobs
    /// start only where they cannot delay that reservation.
    Easy,
}

/// Replica placement strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementStrategy {
    /// Fill the fullest node that fits (limits fragmentation).
    BestFit,
    /// Use the emptiest node (spreads load and heat).
    Spread,
    /// Place where the cluster's GPU fragmentation, measured against the mix
    /// of requests it sees, grows least (FGD; see
    /// [`crate::pass::fragmentation`]).
    Fragmentation,
}

impl PlacementStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementStrategy::BestFit => "best-fit",
            PlacementStrategy::Spread => "spread",
            PlacementStrategy::Fragmentation => "fragmentation",
        }
    }
}

impl std::str::FromStr for PlacementStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "best-fit" | "bestfit" | "binpack" => Ok(PlacementStrategy::BestFit),
            "spread" => Ok(PlacementStrategy::Spread),
            "fragmentation" | "fgd" => Ok(PlacementStrategy::Fragmentation),
            other => Err(format!("unknown placement {other:?}: expected best-fit, spread or fragmentation")),
        }
    }
}

/// Who may preempt whom.
#[derive(Clone, Debug, PartialEq)]
pub struct Preemption {
    /// Preemptible jobs of a lower priority class may be preempted.
    pub by_priority: bool,
    /// Within one priority class, a preemptible job may be preempted by a job
    /// that ranks strictly better on the policy's preemption key (attained-
    /// service level for [`Ordering::AttainedService`] and
    /// [`Ordering::Multifactor`], remaining time for
    /// [`Ordering::ShortestRemaining`]).
    pub within_class: bool,
    /// A queue below its guarantee may reclaim capacity from queues above theirs.
    pub reclaim: bool,
    /// A job is not preempted *within its class* before it has run this long
    /// (limits churn between peers). Priority and reclaim preemption act at once.
    pub min_runtime: Duration,
    /// Within-class preemption acts only under sustained overload (see
    /// [`Overload`]); `None`: whenever a victim qualifies.
    pub overload: Option<Overload>,
}

/// When within-class preemption may act: only once the cluster has been
/// *overloaded* (pending GPU demand at least `enter` times the GPUs of the
/// nodes that are up) for `after`, and then until demand falls below `exit`
/// times those GPUs. A burst the cluster absorbs by jobs ending in their own
/// time preempts nothing; a backlog that lasts is worked off shortest-first.
/// Priority and reclaim preemption are not gated.
#[derive(Clone, Debug, PartialEq)]
pub struct Overload {
    pub enter: f64,
    pub after: Duration,
    pub exit: f64,
}

impl Preemption {
    pub fn off() -> Preemption {
        Preemption {
            by_priority: false,
            within_class: false,
            reclaim: false,
            min_runtime: Duration::ZERO,
            overload: None,
        }
    }

    /// Only preemptible jobs of lower priority classes (Kubernetes' default).
    pub fn priority_only() -> Preemption {
        Preemption { by_priority: true, ..Preemption::off() }
    }

    pub fn any(&self) -> bool {
        self.by_priority || self.within_class || self.reclaim
    }
}

/// Weights of the multifactor priority, in priority points.
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    /// Points for a fair-share factor of 1 (user far below their share).
    pub fair_share: f64,
    /// Points per hour since submission. Unbounded, so every job eventually
    /// outranks newer work of its class: nothing starves.
    pub age_per_hour: f64,
    /// Points subtracted per attained-service level.
    pub service_level: f64,
    /// Points by which a preemptor must outrank a victim of its own class
    /// (age and service only): hysteresis against churn.
    pub preemption_margin: f64,
    /// Age points per hour when comparing a preemptor with an older victim
    /// (at least `age_per_hour`). Larger values make age protect running
    /// work more than it moves a pending job up the queue; the default keeps
    /// the two equal (see docs/scheduling.md, "Starvation guard").
    pub preemption_age_per_hour: f64,
}

/// Fair-share configuration: shares per team and per user within a team,
/// usage decaying with a half-life.
#[derive(Clone, Debug, PartialEq)]
pub struct FairShare {
    pub half_life: Duration,
    pub team_shares: BTreeMap<Arc<str>, f64>,
    pub user_shares: BTreeMap<Arc<str>, f64>,
}

impl FairShare {
    pub fn team_share(&self, team: &str) -> f64 {
        self.team_shares.get(team).copied().unwrap_or(1.0).max(1e-9)
    }
    pub fn user_share(&self, user: &str) -> f64 {
        self.user_shares.get(user).copied().unwrap_or(1.0).max(1e-9)
    }
}

impl Default for FairShare {
    fn default() -> Self {
        FairShare {
            half_life: Duration::from_secs(7 * 86_400),
            team_shares: BTreeMap::new(),
            user_shares: BTreeMap::new(),
        }
    }
}

/// Tiresias-style starvation guard for [`Ordering::Multifactor`]. A job that
/// has run before (attained-service level above 0), has run less than
/// `max_runtime` in all, and was submitted at least `after` ago is *promoted*:
/// the order treats it as if it had no attained service. The run it is
/// promoted into keeps level 0 for within-class preemption while its total
/// run time stays below `max_runtime`, so the jobs it overtook cannot preempt
/// it straight back. Jobs that have run longer than `max_runtime` are the
/// heavy tail that least-attained-service deliberately puts last; they are not
/// promoted (age still moves them up, slowly).
#[derive(Clone, Debug, PartialEq)]
pub struct StarvationGuard {
    pub after: Duration,
    pub max_runtime: Duration,
}

/// A complete scheduling policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    pub ordering: Ordering,
    pub backfill: Backfill,
    pub preemption: Preemption,
    pub placement: PlacementStrategy,
    pub weights: Weights,
    pub fair_share: FairShare,
    /// EASY backfill without planned ends can only reserve "forever", which
    /// idles the reserved devices; it does so only for a job blocked at the
    /// head this long (so nothing starves behind a stream of smaller jobs),
    /// and backfills first-fit before that.
    pub open_reservation_after: Duration,
    /// An elastic job grows into idle devices only once its current run has
    /// lasted this long: each resize restarts it from its checkpoint, so
    /// growing into every short gap would spend more than it gains.
    pub resize_after: Duration,
    /// Attained-service level boundaries in GPU-seconds, ascending: level 0 is
    /// below the first, level `k` between boundary `k-1` and `k`.
    pub service_levels: Vec<u64>,
    /// Promotes preempted jobs that have waited too long (see [`StarvationGuard`]).
    pub starvation_guard: Option<StarvationGuard>,
    /// Whether jobs submitted without an estimate are planned with the one
    /// learned from history (`runtime_history`); `None`: the policy's own
    /// choice, [`Policy::plans_with_learned_estimates`].
    pub learned_estimates: Option<bool>,
    /// How jobs of one attained-service level are ordered (multifactor only).
    pub within_level: WithinLevel,
}

/// What within-class preemption compares, lower is more deserving in both
/// parts: `rank` is the attained-service level (multifactor, LAS) or the
/// planned time left in ms (SRTF); `submit_ms` is used by multifactor only
/// (0 otherwise). A job whose key is no lower in both parts than another's
/// can preempt nothing the other could not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PreemptKey {
    pub rank: i64,
    pub submit_ms: i64,
}

/// A policy name that is not one of the presets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}: expected one of {names}", names = Policy::NAMES.join(", "))]
pub struct UnknownPolicy(pub String);

impl Policy {
    /// Whether this policy decides by jobs' run-time estimates: it orders by
    /// (remaining) length, or is the FIFO + EASY baseline (its reservations
    /// come from them; gpool's default uses them when given). A shell that
    /// replays a trace gives such a policy the trace's durations as estimates.
    pub fn needs_estimates(&self) -> bool {
        matches!(self.ordering, Ordering::ShortestFirst | Ordering::ShortestRemaining)
            || (self.ordering == Ordering::Fifo && self.backfill == Backfill::Easy)
    }

    /// Whether the scheduler plans with learned estimates. By default only
    /// shortest-job-first does: a noisy estimate that orders jobs without
    /// preemption costs little when it is wrong (the misplaced job just runs).
    /// Preemptive shortest-remaining-time and EASY reservations amplify the
    /// error: they preempt the wrong job, or hold devices for a start
    /// computed from ends that do not come. Replayed on the five traces,
    /// learned estimates cut SJF's average JCT on every one (3–24%).
    /// They cost SRTF, FIFO + EASY and gpool's default up to 49% on some
    /// (BENCHMARKS.md, "Run times learned from history"). Learned
    /// estimates are shown either way; `learned_estimates` overrides.
    pub fn plans_with_learned_estimates(&self) -> bool {
        self.learned_estimates.unwrap_or(self.ordering == Ordering::ShortestFirst)
    }

    /// Whether the order reads the run times of jobs like each one
    /// (`JobSpec::similar_runs`): a shell gives them at submission.
    pub fn orders_by_history(&self) -> bool {
        self.ordering == Ordering::Multifactor && self.within_level == WithinLevel::Gittins
    }

    /// Preset names accepted by [`Policy::by_name`].
    pub const NAMES: &'static [&'static str] = &["default", "fifo", "fifo-backfill", "sjf", "srtf", "las", "fair"];

    /// gpool's default: Tiresias' discretised two-level least attained
    /// service (3,200 and 32,000 GPU-seconds) with fair share within a level,
    /// EASY backfill, priority preemption and, for jobs marked preemptible,
    /// preemption of jobs a level above a waiting one while the cluster is
    /// overloaded (demand at least its GPUs for 6 h, until demand falls
    /// below a tenth of them), with a starvation guard for preempted jobs
    /// (those that ran under 24 h, promoted 48 h after their submission).
    /// Needs no run-time estimates. Chosen on the robustness table of
    /// docs/scheduling.md ("A default that holds").
    pub fn gpool_default() -> Policy {
        Policy {
            name: "default".into(),
            ordering: Ordering::Multifactor,
            backfill: Backfill::Easy,
            preemption: Preemption {
                by_priority: true,
                within_class: true,
                reclaim: true,
                // Tiresias has no minimum run: the restart delay is the cost.
                min_runtime: Duration::ZERO,
                overload: Some(Overload { enter: 1.0, after: Duration::from_secs(6 * 3600), exit: 0.1 }),
            },
            placement: PlacementStrategy::BestFit,
            weights: Weights {
                fair_share: 1000.0,
                // Strict levels, first come first served within one: the
                // starvation guard bounds the wait across levels, the
                // open-ended reservation a gang's (docs/scheduling.md).
                age_per_hour: 0.0,
                service_level: 1000.0,
                preemption_margin: 1000.0,
                preemption_age_per_hour: 0.0,
            },
            fair_share: FairShare::default(),
            open_reservation_after: Duration::from_secs(1000 * 3600),
            resize_after: Duration::from_secs(30),
            // Tiresias' two thresholds: 3,200 and 32,000 GPU-seconds.
            service_levels: vec![3_200, 32_000],
            // Issue 45: 48 h and 24 h meet its goals on all 15 rows of `gpool
            // bench policies` (tuned on four traces, held-out ITP cluster06
            // checked after); 60 h and 72 h before.
            starvation_guard: Some(StarvationGuard {
                after: Duration::from_secs(48 * 3600),
                max_runtime: Duration::from_secs(24 * 3600),
            }),
            learned_estimates: None,
            within_level: WithinLevel::Submit,
        }
    }

    /// One of the presets: `default`, `fifo` (strict), `fifo-backfill` (EASY),
    /// `sjf` (oracle shortest job first), `srtf` (oracle shortest remaining,
    /// preemptive), `las` (Tiresias discretised 2D-LAS, preemptive),
    /// `fair` (max-min fair share between users).
    pub fn by_name(name: &str) -> Result<Policy, UnknownPolicy> {
        let base = Policy::gpool_default();
        let plain = |name: &str, ordering, backfill, preemption| Policy {
            name: name.into(),
            ordering,
            backfill,
            preemption,
            ..Policy::gpool_default()
        };
        let within = Preemption { within_class: true, ..Preemption::priority_only() };
        Ok(match name {
            "default" | "gpool" => base,
            "fifo" => plain("fifo", Ordering::Fifo, Backfill::None, Preemption::priority_only()),
            "fifo-backfill" | "easy" => {
                plain("fifo-backfill", Ordering::Fifo, Backfill::Easy, Preemption::priority_only())
            }
            "sjf" => plain("sjf", Ordering::ShortestFirst, Backfill::FirstFit, Preemption::priority_only()),
            "srtf" => plain("srtf", Ordering::ShortestRemaining, Backfill::FirstFit, within),
            "las" | "tiresias" => Policy {
                // Tiresias (NSDI'19) thresholds: 3,200 GPU-seconds, then ten times that.
                service_levels: vec![3_200, 32_000],
                ..plain("las", Ordering::AttainedService, Backfill::FirstFit, within)
            },
            "fair" | "max-min" => plain("fair", Ordering::MaxMinFair, Backfill::FirstFit, Preemption::priority_only()),
            other => return Err(UnknownPolicy(other.to_string())),
        })
    }

    /// The attained-service level of `gpu_secs` GPU-seconds.
    pub fn service_level(&self, gpu_secs: u64) -> u32 {
        self.service_levels.iter().take_while(|b| gpu_secs >= **b).count() as u32
    }

    /// Multifactor points, without fair share, of a job submitted at
    /// `submit_ms` at service level `level`, in milli-points (higher first).
    /// The age term is written relative to a fixed origin, so it does not
    /// change with time; differences between jobs are what count.
    pub fn multifactor_points(&self, submit_ms: i64, level: u32) -> i64 {
        self.points_with_age(submit_ms, level, self.weights.age_per_hour)
    }

    fn points_with_age(&self, submit_ms: i64, level: u32, age_per_hour: f64) -> i64 {
        let age = -(submit_ms as f64) / 3_600_000.0 * age_per_hour;
        let service = -f64::from(level) * self.weights.service_level;
        ((age + service) * 1000.0) as i64
    }

    /// Whether a job with preemption key `job` may preempt a victim with key
    /// `victim` of the same class (see [`PreemptKey`]).
    ///
    /// Multifactor: the preemptor must beat the victim by
    /// `weights.preemption_margin` points of age and service, where age counts
    /// `age_per_hour` when the preemptor is the older job (the order's own
    /// weight, so the order and preemption agree) and the larger
    /// `preemption_age_per_hour` when the victim is older (age protects
    /// running work). Both conditions of "beats the victim in the order and in
    /// protection" reduce to this one comparison because both are linear.
    /// Other orderings: strictly better key (lower level, less time left).
    pub fn outranks(&self, job: PreemptKey, victim: PreemptKey) -> bool {
        match self.ordering {
            Ordering::Multifactor => {
                let hours = (job.submit_ms - victim.submit_ms) as f64 / 3_600_000.0;
                let w = if hours >= 0.0 {
                    self.weights.preemption_age_per_hour.max(self.weights.age_per_hour)
                } else {
                    self.weights.age_per_hour
                };
                let points = -hours * w - (job.rank - victim.rank) as f64 * self.weights.service_level;
                points >= self.weights.preemption_margin.max(1e-3)
            }
            _ => victim.rank > job.rank,
        }
    }

    /// When the starvation guard promotes a pending job with this spec and
    /// history (see [`StarvationGuard`]); `None` if it never does.
    pub fn promotion_time(&self, spec: &JobSpec, service: &Service) -> Option<Time> {
        self.promotion_time_at(spec.submit_time, service)
    }

    /// [`Policy::promotion_time`] of a job submitted at `submit`.
    pub(crate) fn promotion_time_at(&self, submit: Time, service: &Service) -> Option<Time> {
        let guard = self.starvation_guard.as_ref()?;
        let level = self.service_level(service.prior_gpu_milli_secs / 1000);
        if self.ordering != Ordering::Multifactor || level == 0 || service.prior_runtime >= guard.max_runtime {
            return None;
        }
        Some(submit.plus(guard.after))
    }

    /// Whether the order depends on the user (fair share), so the pending
    /// index groups jobs per user.
    pub(crate) fn groups_by_user(&self) -> bool {
        matches!(self.ordering, Ordering::Multifactor | Ordering::MaxMinFair)
    }
}

impl fmt::Display for Ordering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ordering::Fifo => "fifo",
            Ordering::ShortestFirst => "shortest-first",
            Ordering::ShortestRemaining => "shortest-remaining",
            Ordering::AttainedService => "attained-service",
            Ordering::MaxMinFair => "max-min-fair",
            Ordering::Multifactor => "multifactor",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_duration_based_presets_need_estimates() {
        let cases = [
            ("default", false),
            ("fifo", false),
            ("fifo-backfill", true),
            ("sjf", true),
            ("srtf", true),
            ("las", false),
            ("fair", false),
        ];
        for (name, want) in cases {
            assert_eq!(Policy::by_name(name).expect(name).needs_estimates(), want, "{name}");
        }
    }

    #[test]
    fn every_preset_name_resolves_and_unknown_names_are_listed() {
        for name in Policy::NAMES {
            assert_eq!(Policy::by_name(name).map(|p| p.name), Ok((*name).to_string()));
        }
        let err = Policy::by_name("lottery").unwrap_err().to_string();
        assert!(err.contains("lottery") && err.contains("fifo-backfill"), "{err}");
    }

    #[test]
    fn service_levels_follow_the_boundaries() {
        let p = Policy::gpool_default();
        let cases = [(0, 0), (3_199, 0), (3_200, 1), (31_999, 1), (32_000, 2), (1_000_000, 2)];
        for (secs, level) in cases {
            assert_eq!(p.service_level(secs), level, "{secs} GPU-s");
        }
    }
}
