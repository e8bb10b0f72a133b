//! Idle jobs: a job all of whose GPUs have been idle — the
//! `AllocatedGpuIdle` alert rule, under 5% utilisation for 30 minutes by
//! default, adjustable with `--alert-rules` — gets an `idle_warning` event;
//! where its queue says `idle: stop` it is also stopped (its stop signal,
//! then SIGKILL after its grace period), unless the job opts out with the
//! label `gpool.io/idle: keep`. GPUs paid for and unused are the waste a
//! cost-aware pool exists to end.

use std::collections::{BTreeMap, BTreeSet};

use gpool_core::alert::Transition;
use gpool_core::{JobId, Snapshot};

use super::acts::Acts;
use super::docs::{JobDoc, Stop};

/// The alert rule whose firing on an allocated GPU means "idle".
pub(super) const IDLE_RULE: &str = "AllocatedGpuIdle";

/// The job label that keeps a job running when its queue stops idle jobs.
pub(super) const OPT_OUT: (&str, &str) = ("gpool.io/idle", "keep");

/// The GPUs of each job the idle rule fires on.
#[derive(Debug, Default)]
pub(super) struct IdleGpus(BTreeMap<u64, BTreeSet<String>>);

impl IdleGpus {
    /// Takes the idle rule's transitions into the jobs' idle GPUs, and acts
    /// on jobs whose GPUs are now all idle.
    pub(super) fn on_transitions(
        &mut self,
        transitions: &[Transition],
        snap: &Snapshot,
        jobs: &BTreeMap<u64, JobDoc>,
    ) -> Acts {
        let mut acts = Acts::default();
        let mut changed = BTreeSet::new();
        for t in transitions.iter().filter(|t| t.rule == IDLE_RULE) {
            let Some(job) = t.labels.iter().find(|(k, _)| k == "job_id").and_then(|(_, v)| v.parse::<u64>().ok())
            else {
                continue;
            };
            let set = self.0.entry(job).or_default();
            if t.firing {
                set.insert(t.subject.clone());
            } else {
                set.remove(&t.subject);
            }
            changed.insert(job);
        }
        for job in changed {
            let Some(r) = snap.job(JobId(job)).and_then(|j| j.running()) else {
                self.0.remove(&job);
                continue;
            };
            if r.stopping.is_some() {
                continue;
            }
            let held: usize = r.placement.iter().map(|p| (p.gpus.count_ones() + p.mig.count_ones()) as usize).sum();
            let idle = self.0.get(&job).map_or(0, BTreeSet::len);
            if held == 0 || idle < held {
                continue;
            }
            let Some(d) = jobs.get(&job) else { continue };
            let opted_out = d.spec.labels.get(OPT_OUT.0).is_some_and(|v| v == OPT_OUT.1);
            let stop = !opted_out && snap.queues().any(|q| *q.name == *d.queue && q.idle_stop);
            let queue = d.queue.clone();
            if stop {
                acts.event(
                    Some(job),
                    "idle_stop",
                    format!("job {job}: all its {held} GPU(s) are idle ({IDLE_RULE}); queue {queue} stops idle jobs"),
                );
                acts.stop(job, Stop::Idle { gpus: held as u32 });
            } else {
                let why = if opted_out { " (it opted out of stopping: gpool.io/idle=keep)" } else { "" };
                acts.event(
                    Some(job),
                    "idle_warning",
                    format!(
                        "job {job}: all its {held} GPU(s) are idle ({IDLE_RULE}): it pays for GPUs it does not use{why}"
                    ),
                );
            }
        }
        acts
    }
}
