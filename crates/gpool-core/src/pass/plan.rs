//! What a pass decides: starts, preemptions, a backfill reservation, and a
//! reason for every job left waiting.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::model::job::{GpuRequest, JobId, Placement};
use crate::model::node::NodeId;
use crate::model::resources::{DeviceKind, GpuMilli};
use crate::model::time::Time;
use crate::policies::quota::QuotaBlock;

/// Start a job on a placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    pub placement: Placement,
    /// Started ahead of a blocked higher-ranked job.
    pub backfilled: bool,
}

/// Why a victim was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreemptWhy {
    /// The preemptor's priority class is higher.
    HigherPriority,
    /// Same class; the victim has had much more GPU service (a higher LAS level).
    MoreService,
    /// Same class; the victim has more time left to run.
    LongerRemaining,
    /// The victim's queue borrows; the preemptor's queue is within its guarantee.
    Reclaim { queue: Arc<str> },
    /// An elastic job's replicas above its minimum are lent, not owned: a job
    /// of its class or a higher one, in its queue (or while its queue
    /// borrows), may take them. Only ever a shrink, never a whole preemption.
    AboveMinimum,
}

/// Stop a running job (SIGTERM, then SIGKILL after its grace period) so that `for_job` can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preempt {
    pub victim: JobId,
    pub for_job: JobId,
    pub why: PreemptWhy,
}

/// Why an elastic job changes size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResizeWhy {
    /// Devices were left idle by every pending job, and it was below its maximum.
    Grow,
    /// `for_job` needs some of its devices; it may take them for `why`, and
    /// the job gives them up above its minimum instead of being preempted whole.
    Shrink { for_job: JobId, why: PreemptWhy },
}

/// Restart a running elastic job at another size: stop it (its grace
/// period is its checkpoint) and start it again on `placement`, which the
/// snapshot holds for it meanwhile (a nomination). A grown placement keeps
/// the job's devices and adds free ones; a shrunk one keeps a subset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resize {
    pub job: JobId,
    pub placement: Placement,
    pub why: ResizeWhy,
}

/// The earliest start EASY backfill protects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub job: JobId,
    /// [`Time::NEVER`] when running jobs have no time limit to plan with.
    pub at: Time,
    pub nodes: Vec<NodeId>,
}

/// What a job asks for, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub replicas: u32,
    pub gpu: GpuRequest,
    pub model: Option<Arc<str>>,
    pub kind: Option<DeviceKind>,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.replicas > 1 {
            write!(f, "{} replicas of ", self.replicas)?;
        }
        let model = self.model.as_deref().unwrap_or(match self.kind {
            None => "GPU",
            Some(DeviceKind::NvidiaGpu) => "NVIDIA GPU",
            Some(DeviceKind::AmdGpu) => "AMD GPU",
            Some(DeviceKind::Tpu) => "TPU chip",
        });
        match &self.gpu {
            GpuRequest::None => f.write_str("CPU and memory only"),
            GpuRequest::Gpus { count } => write!(f, "{count}×{model}"),
            GpuRequest::Mig { profile, count } => write!(f, "{count}×MIG {profile}"),
            GpuRequest::Memory { min_mb, count } => {
                write!(f, "{count}×{model} with ≥{} GiB", min_mb.div_ceil(1024))
            }
            GpuRequest::Share { milli, memory_mb } => {
                f.write_str("a share of one ")?;
                f.write_str(model)?;
                match (milli, memory_mb) {
                    (Some(m), Some(mb)) => write!(f, " ({} of it, {mb} MiB)", fraction(*m)),
                    (Some(m), None) => write!(f, " ({} of it)", fraction(*m)),
                    (None, Some(mb)) => write!(f, " ({} MiB)", mb),
                    (None, None) => Ok(()),
                }
            }
        }
    }
}

/// Thousandths as a decimal fraction: 250 → "0.25".
pub(crate) fn fraction(milli: u16) -> String {
    let s = format!("{}.{:03}", milli / 1000, milli % 1000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Why a job is still pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// A dependency has not finished yet.
    Dependency { on: JobId },
    /// A dependency failed or was cancelled: this job can never start.
    DependencyFailed { on: JobId, succeeded: bool },
    /// Held back (retry back-off) until then.
    NotBefore { until: Time },
    /// Its array already runs as many tasks as it may at once (`%N`).
    ArrayLimit { of: JobId, limit: u32 },
    /// It could preempt what it needs, but that work is protected by a
    /// minimum run time (`minRuntime`) until then.
    Protected { until: Time },
    /// Its begin time (`beginAt`) has not come.
    Begin { at: Time },
    /// It runs in an advance reservation whose window opens then.
    ReservationStarts { name: Arc<str>, at: Time },
    /// The advance reservation it names is over or was deleted: it can never start.
    ReservationGone { name: Arc<str> },
    /// The advance reservation it names does not let its user or team in.
    NotInReservation { name: Arc<str> },
    /// GPUs it could use are held by an advance reservation from `at`; it
    /// may use them only if its time limit ends by then.
    ReservedAhead { name: Arc<str>, at: Time },
    /// A node has room, but a power budget over it does not (`power.rs`).
    Power { budget: Arc<str>, used_watts: u64, watts: u32 },
    /// Its queue's windows are closed; they open next at `opens`.
    Window { queue: Arc<str>, opens: Option<Time> },
    /// Its queue's quota does not allow it now.
    Quota(QuotaBlock),
    /// No node has room now. `best_free` = most free matching devices on
    /// any one node; `quarantined` = GPUs out of service for faults on the
    /// nodes it may use.
    NoFit { need: Need, best_free: u32, quarantined: u32 },
    /// No node that is up passes the job's selector, affinity and model constraint.
    NoMatchingNode { need: Need },
    /// Only nodes that are draining or down could run it.
    NodesUnavailable { need: Need, draining: u32, down: u32 },
    /// Strict order: an earlier job that does not fit blocks this one.
    HeadOfLine { blocked_by: JobId },
    /// It would fit, but would delay the reserved start of an earlier job.
    Reserved { for_job: JobId, at: Time },
    /// Jobs were preempted for it; it starts when they have released their devices.
    WaitingForPreemption { victims: u32 },
    /// Not examined in detail: higher-ranked jobs wait too and nothing is free.
    Queued,
}

/// `4 GPUs`, or `4 chips` for TPUs.
fn devices(kind: crate::model::resources::DeviceKind, milli: GpuMilli) -> String {
    let n = gpus(milli);
    if kind == crate::model::resources::DeviceKind::Tpu { n.replace("GPUs", "chips") } else { n }
}

fn gpus(milli: GpuMilli) -> String {
    if milli.is_multiple_of(1000) {
        format!("{} GPUs", milli / 1000)
    } else {
        format!("{:.2} GPUs", milli as f64 / 1000.0)
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::Dependency { on } => write!(f, "waiting for job {on} to finish"),
            PendingReason::DependencyFailed { on, succeeded: false } => {
                write!(f, "job {on} it depends on did not succeed; it can never start")
            }
            PendingReason::DependencyFailed { on, succeeded: true } => {
                write!(f, "job {on} succeeded, and this job runs only if it fails (afternotok); it can never start")
            }
            PendingReason::NotBefore { until } => write!(f, "held until {until} (retry back-off)"),
            PendingReason::Protected { until } => {
                write!(f, "the work it would preempt is protected until {until} (minRuntime)")
            }
            PendingReason::ArrayLimit { of, limit } => {
                write!(f, "array {of} runs at most {limit} task(s) at once (--array=…%{limit})")
            }
            PendingReason::Begin { at } => write!(f, "waiting for its begin time, {at}"),
            PendingReason::ReservationStarts { name, at } => {
                write!(f, "runs in reservation {name}, which starts {at}")
            }
            PendingReason::ReservationGone { name } => {
                write!(
                    f,
                    "reservation {name} is over or was deleted; it can never start: cancel it, or submit it again without --reservation"
                )
            }
            PendingReason::NotInReservation { name } => {
                write!(f, "reservation {name} does not let its user or team in")
            }
            PendingReason::ReservedAhead { name, at } => write!(
                f,
                "GPUs it could use are reserved for {name} from {at}; only jobs whose time limit ends by then may use them"
            ),
            PendingReason::Window { queue, opens: Some(at) } => {
                write!(f, "queue {queue} starts jobs only in its windows; the next opens {at}")
            }
            PendingReason::Power { budget, used_watts, watts } => {
                write!(f, "power budget of {budget}: {used_watts} W of {watts} W in use")
            }
            PendingReason::Window { queue, opens: None } => {
                write!(f, "queue {queue} starts jobs only in its windows, and they never open")
            }
            PendingReason::Quota(QuotaBlock::AtMax { queue, max, used }) => {
                write!(f, "queue {queue} is at its maximum of {} ({} in use)", gpus(*max), gpus(*used))
            }
            PendingReason::Quota(QuotaBlock::KindAtMax { queue, kind, max, used }) => write!(
                f,
                "queue {queue} is at its {} maximum of {} ({} in use)",
                kind.resource(),
                devices(*kind, *max),
                devices(*kind, *used)
            ),
            PendingReason::Quota(QuotaBlock::CohortExhausted { queue, cohort, lendable }) => write!(
                f,
                "queue {queue} is above its guarantee and cohort {cohort} has only {} unused to lend",
                gpus(*lendable)
            ),
            PendingReason::NoFit { need, best_free, quarantined } => {
                let per = if need.replicas > 1 { "per node" } else { "on one node" };
                write!(f, "needs {need} {per}, best node has {best_free} free")?;
                if *quarantined > 0 {
                    write!(f, "; {quarantined} GPU(s) quarantined for faults (gpool health)")?;
                }
                Ok(())
            }
            PendingReason::NoMatchingNode { need } => {
                write!(f, "needs {need}, but no node that is up matches its selector, affinity and GPU model")
            }
            PendingReason::NodesUnavailable { need, draining, down } => {
                let mut parts = Vec::new();
                if *draining > 0 {
                    parts.push(format!("{draining} draining (gpool resume NODE)"));
                }
                if *down > 0 {
                    parts.push(format!("{down} down"));
                }
                write!(f, "needs {need}; the only nodes that could run it are {}", parts.join(" and "))
            }
            PendingReason::HeadOfLine { blocked_by } => {
                write!(f, "strict order: behind job {blocked_by}, which does not fit yet")
            }
            PendingReason::Reserved { for_job, at } => {
                write!(f, "would delay job {for_job}, whose start is reserved")?;
                if *at != Time::NEVER {
                    write!(f, " for {at}")?;
                }
                Ok(())
            }
            PendingReason::WaitingForPreemption { victims } => {
                write!(f, "waiting for {victims} preempted job(s) to release their devices")
            }
            PendingReason::Queued => f.write_str("behind higher-ranked jobs; nothing is free"),
        }
    }
}

/// Counters of one pass, for benchmarks and `gpool` diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Pending jobs looked at.
    pub examined: u32,
    /// Of those, rejected by a cached result for the same shape.
    pub cache_hits: u32,
    /// Preemption searches run.
    pub preemption_searches: u32,
}

/// The outcome of one scheduling pass.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    pub now: Time,
    pub starts: Vec<Start>,
    pub preemptions: Vec<Preempt>,
    /// Running elastic jobs to restart at another size (`pass/elastic.rs`).
    pub resizes: Vec<Resize>,
    pub reservation: Option<Reservation>,
    /// Where each job that preempted others will start once its victims are
    /// gone: the nominations valid after this pass (give them to
    /// [`crate::Snapshot::carry_over`]).
    pub nominated: Vec<(JobId, Placement)>,
    /// Jobs the pass examined and left pending, in rank order, with an index
    /// into `reason_table` (jobs of one shape share one reason).
    pub waiting: Vec<(JobId, u32)>,
    pub reason_table: Vec<PendingReason>,
    /// The reason of every pending job not in `starts` or `waiting`.
    pub others: Option<PendingReason>,
    /// When the current overload began, judged on what the pass leaves
    /// waiting (see [`crate::policies::policy::Overload`]); the snapshot
    /// carries it to the next pass.
    pub overloaded_since: Option<Time>,
    /// The earliest time a pass could decide differently with no event in
    /// between (a starvation-guard promotion, the overload gate starting to
    /// act): the caller should run a pass then.
    pub wake_at: Option<Time>,
    /// Running jobs to stop and requeue now: their queue's windows closed,
    /// and it stops its jobs then (`stopAtEnd`). They start again in its next window.
    pub window_stops: Vec<JobId>,
    /// Running jobs to stop and requeue now: a power budget over them is
    /// over its watts (lowered live), lowest-priority preemptible work first (`power.rs`).
    pub power_stops: Vec<JobId>,
    /// Jobs with deadlines that, as of this pass, will miss them (`deadline.rs`).
    pub late: Vec<(JobId, crate::calendar::deadline::Late)>,
    pub stats: PassStats,
}

impl Plan {
    /// The reason for every pending job the pass examined, by job id.
    pub fn reasons(&self) -> BTreeMap<JobId, &PendingReason> {
        self.waiting_reasons().collect()
    }

    /// The examined pending jobs and their reasons, in rank order.
    pub fn waiting_reasons(&self) -> impl Iterator<Item = (JobId, &PendingReason)> {
        self.waiting.iter().filter_map(|(j, r)| self.reason_table.get(*r as usize).map(|r| (*j, r)))
    }

    /// The reason of a pending job: its own if the pass examined it, else `others`.
    pub fn reason_of(&self, job: JobId) -> Option<&PendingReason> {
        self.waiting_reasons().find(|(j, _)| *j == job).map(|(_, r)| r).or(self.others.as_ref())
    }

    /// Records a waiting job with a new reason; returns the reason's index.
    pub(crate) fn wait(&mut self, job: JobId, reason: PendingReason) -> u32 {
        let id = self.reason_table.len() as u32;
        self.reason_table.push(reason);
        self.waiting.push((job, id));
        id
    }

    /// Whether the plan changes anything.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.preemptions.is_empty() && self.resizes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::GPU;

    #[test]
    fn reasons_read_like_the_issue_promised() {
        let need =
            Need { replicas: 1, gpu: GpuRequest::Gpus { count: 4 }, model: Some(Arc::from("H100-80GB")), kind: None };
        let cases = [
            (
                PendingReason::NoFit { need: need.clone(), best_free: 2, quarantined: 0 },
                "needs 4×H100-80GB on one node, best node has 2 free",
            ),
            (
                PendingReason::NoFit { need, best_free: 3, quarantined: 1 },
                "needs 4×H100-80GB on one node, best node has 3 free; 1 GPU(s) quarantined for faults (gpool health)",
            ),
            (
                PendingReason::Quota(QuotaBlock::AtMax { queue: Arc::from("research"), max: 16 * GPU, used: 16 * GPU }),
                "queue research is at its maximum of 16 GPUs (16 GPUs in use)",
            ),
            (PendingReason::Dependency { on: JobId(7) }, "waiting for job 7 to finish"),
            (PendingReason::HeadOfLine { blocked_by: JobId(3) }, "strict order: behind job 3, which does not fit yet"),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
        }
    }
}
