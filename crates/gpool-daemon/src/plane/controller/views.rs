//! What the API shows of jobs, nodes and queues.

use std::collections::{BTreeMap, BTreeSet};

use gpool_api as api;
use gpool_core::{JobId, NodeId, Snapshot};

use super::costs::Costs;
use super::faults::GpuFaults;
use super::links::{Link, NodeLink};
use super::pass_record::PassRecord;
use super::services::Services;
use super::{ApiError, JobDoc, NodeDoc, Stop, power};
use crate::plane::telemetry::Telemetry;

/// The controller's state as what the API and `/metrics` show read it:
/// shared references only, so nothing shown changes what it shows.
pub(super) struct Reading<'a> {
    pub(super) now: i64,
    pub(super) snap: &'a Snapshot,
    pub(super) jobs: &'a BTreeMap<u64, JobDoc>,
    pub(super) links: &'a BTreeMap<NodeId, NodeLink>,
    pub(super) telemetry: &'a Telemetry,
    pub(super) faults: &'a GpuFaults,
    pub(super) costs: &'a Costs,
    pub(super) pass: &'a PassRecord,
    /// Jobs pulling their image, by node, as the nodes last reported.
    pub(super) pulling: &'a BTreeMap<u64, (String, String)>,
    pub(super) services: &'a Services,
}

impl Reading<'_> {
    // ----- views -----

    pub(super) fn view(&self, d: &JobDoc) -> api::JobView {
        let reason = match d.state {
            api::JobState::Pending => d
                .held_by
                .as_ref()
                .map(|by| format!("held by {by} (gpool release {})", d.id))
                .or_else(|| d.budget_hold.clone())
                .or_else(|| {
                    let at = d.spec.begin_at.as_deref().and_then(api::time::parse_rfc3339)?;
                    (at > self.now)
                        .then(|| format!("waiting for its begin time, {}", api::time::rfc3339(at)))
                })
                .or_else(|| self.pass.reason(d.id).map(String::from))
                .or_else(|| {
                    d.not_before_ms
                        .filter(|t| *t > self.now)
                        .map(|t| format!("retry back-off until {}", api::time::rfc3339(t)))
                })
                .or_else(|| self.pass.default_reason.clone())
                .or_else(|| d.end_reason.clone()),
            api::JobState::Stopping => d.run.as_ref().and_then(|r| r.stop.as_ref()).map(|s| match s {
                Stop::Cancel { by } => format!("cancelled by {by}; waiting for its processes to exit"),
                Stop::Preempt { for_job } => format!("preempted for job {for_job}; checkpointing before it exits"),
                Stop::Resize { from, to, .. } => {
                    format!("resizing from {from} to {to} replicas; checkpointing before it restarts at the new size")
                }
                Stop::Window { queue } => format!("queue {queue}'s window closed; checkpointing before it exits"),
                Stop::Power => "a power budget was lowered below what runs; checkpointing before it exits".into(),
                Stop::Straggler { device } => {
                    format!("its replica on {device} holds the gang back; checkpointing to be placed again away from it")
                }
                Stop::TimeLimit => "time limit reached; waiting for its processes to exit".into(),
                Stop::Idle { gpus } => format!("its {gpus} GPU(s) stayed idle; stopping it (its queue's idle policy)"),
                Stop::GangFailure { rank } => format!("rank {rank} failed; stopping the other replicas"),
                Stop::Lost => "a replica was lost; stopping the others".into(),
                Stop::Reclaim { node, at_ms } => format!(
                    "its node {node} is taken back at {}; checkpointing before it exits",
                    api::time::rfc3339(*at_ms)
                ),
                Stop::GpuMemory { gpu, used_mb, limit_mb } => {
                    format!("used {used_mb} MiB of GPU {gpu}, over its share of {limit_mb} MiB; waiting for its processes to exit")
                }
                Stop::GpuFault { node, gpu, fault } => {
                    format!("GPU {gpu} of node {node} faulted ({fault}); checkpointing, then requeued away from it")
                }
                Stop::GpuXid { node, gpu, xid } => {
                    format!("GPU {gpu} of node {node} raised {xid} in this job; waiting for its processes to exit")
                }
            }),
            api::JobState::Running => {
                self.pulling.get(&d.id).map(|(_, text)| text.clone()).or_else(|| d.end_reason.clone())
            }
            _ => d.end_reason.clone(),
        };
        let live = !d.state.is_terminal() && d.state != api::JobState::Pending;
        let replicas = d
            .run
            .as_ref()
            .filter(|_| live || d.state.is_terminal())
            .map(|r| {
                r.replicas
                    .iter()
                    .map(|x| api::ReplicaView {
                        rank: x.rank,
                        node: x.node.clone(),
                        gpus: x.gpus.clone(),
                        mig: x.mig.clone(),
                        cuda_visible_devices: x.cuda_visible_devices.clone(),
                        gpu_share: x.gpu_share,
                        pid: None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        api::JobView {
            id: d.id,
            name: d.name.clone(),
            user: d.user.clone(),
            team: d.team.clone(),
            queue: d.queue.clone(),
            state: d.state,
            reason,
            priority: d.priority,
            submitted_at: api::time::rfc3339(d.submitted_ms),
            started_at: d.started_ms.map(api::time::rfc3339),
            ended_at: d.ended_ms.map(api::time::rfc3339),
            attempt: d.attempt,
            restarts: d.restarts,
            replicas,
            exit: d.exit.clone(),
            usage: self.costs.usage_summary(self.snap, self.telemetry, d, self.now),
            learned_estimate: d.learned_estimate.clone(),
            late: d.late.clone().filter(|_| !d.state.is_terminal()),
            estimated_start: self
                .pass
                .reserved
                .filter(|(j, _)| *j == d.id && d.state == api::JobState::Pending)
                .map(|(_, at)| api::time::rfc3339(at)),
            array: d.array,
            running_replicas: d
                .run
                .as_ref()
                .filter(|_| matches!(d.state, api::JobState::Running | api::JobState::Stopping))
                .map_or(0, |r| r.replicas.iter().filter(|x| !x.ended()).count() as u32),
            resizes: d
                .resizes
                .iter()
                .map(|r| api::ResizeView {
                    at: api::time::rfc3339(r.at_ms),
                    from: r.from,
                    to: r.to,
                    why: r.why.clone(),
                })
                .collect(),
            spec: d.spec.clone(),
        }
    }

    /// `gpool power`: each budget and what it holds back.
    pub(super) fn power_views(&self) -> Vec<api::PowerView> {
        power::Power::views(self.snap, self.telemetry, &self.pass.reason_texts, &self.pass.waiting)
    }

    /// A node's record, by name.
    pub(super) fn node_doc(&self, name: &str) -> Option<&NodeDoc> {
        self.snap.node_id(name).and_then(|id| self.links.get(&id)).map(|l| &l.doc)
    }

    /// One node's view (after a call that changed it).
    pub(super) fn node_view(&self, name: &str) -> Result<api::NodeView, ApiError> {
        self.nodes().into_iter().find(|n| n.name == name).ok_or_else(|| ApiError::new(404, "node vanished"))
    }

    pub(super) fn nodes(&self) -> Vec<api::NodeView> {
        self.nodes_page(0, usize::MAX)
    }

    /// `limit` nodes from the `offset`th, in the order they joined: only those are built.
    pub(super) fn nodes_page(&self, offset: usize, limit: usize) -> Vec<api::NodeView> {
        // A node deleted from its pool stays in the snapshot (ids are stable), down and unlinked.
        self.snap
            .nodes()
            .filter(|(id, _)| self.links.contains_key(id))
            .skip(offset)
            .take(limit)
            .map(|(id, n)| {
                let (free_gpus, free_mig) = self.snap.free_masks(id).unwrap_or_default();
                let jobs: Vec<u64> = self.snap.jobs_on(id).map(|j| j.0).collect();
                let holder = |slot_mask: u64, is_mig: bool| -> Option<u64> {
                    jobs.iter().copied().find(|j| {
                        self.snap.job(JobId(*j)).and_then(|x| x.running()).is_some_and(|r| {
                            r.placement.iter().any(|p| {
                                p.node == id && if is_mig { p.mig & slot_mask != 0 } else { p.gpus & slot_mask != 0 }
                            })
                        })
                    })
                };
                let shares_of = |slot_mask: u64| -> Vec<api::DeviceShareView> {
                    jobs.iter()
                        .filter_map(|j| Some((*j, self.snap.job(JobId(*j))?.running()?)))
                        .flat_map(|(j, r)| {
                            r.placement.iter().filter(move |p| p.node == id && p.gpus & slot_mask != 0).filter_map(
                                move |p| {
                                    let s = p.share?;
                                    Some(api::DeviceShareView { job: j, milli: s.milli, memory_mb: s.memory_mb })
                                },
                            )
                        })
                        .collect()
                };
                let (mut gslot, mut mslot) = (0u32, 0u32);
                let devices = n
                    .devices
                    .iter()
                    .map(|d| {
                        let track = self.telemetry.gpu(&n.name, d.index);
                        let meta = self.gpu_meta(id, d.index);
                        let mut shares = Vec::new();
                        let (job, mig) = match &d.mig {
                            None => {
                                let bit = 1u64 << gslot;
                                gslot += 1;
                                shares = shares_of(bit);
                                let whole = free_gpus & bit == 0 && shares.is_empty();
                                (if whole { holder(bit, false) } else { None }, Vec::new())
                            }
                            Some(list) => (
                                None,
                                list.iter()
                                    .map(|m| {
                                        let bit = 1u64 << mslot;
                                        mslot += 1;
                                        api::MigView {
                                            profile: m.profile.to_string(),
                                            uuid: m.uuid.to_string(),
                                            gi_id: m.gi_id,
                                            memory_mb: m.memory_mb,
                                            shared_memory: m.profile.shares_memory(),
                                            job: if free_mig & bit == 0 { holder(bit, true) } else { None },
                                            memory_used_mb: track.and_then(|t| {
                                                t.sample.mig.iter().find(|x| Some(x.gi_id) == m.gi_id)?.memory_used_mb
                                            }),
                                        }
                                    })
                                    .collect(),
                            ),
                        };
                        api::DeviceView {
                            index: d.index,
                            uuid: d.uuid.to_string(),
                            kind: d.kind.to_string(),
                            model: d.model.to_string(),
                            memory_mb: d.memory_mb,
                            nvlink_group: d.nvlink_group,
                            mig,
                            job,
                            shares,
                            name: meta.map(|m| m.name.clone()).filter(|n| !n.is_empty()),
                            pci_bus_id: meta.and_then(|m| m.pci_bus_id.clone()),
                            telemetry: track.map(|t| {
                                crate::plane::telemetry::device_view(t, |pid| self.telemetry.job_of_pid(&n.name, pid))
                            }),
                            degraded: self.telemetry.degraded(&n.name, d.index).map(str::to_string),
                            quarantine: self.faults.view_of(&n.name, d.index, self.now),
                        }
                    })
                    .collect();
                let used: (u64, u64) = jobs
                    .iter()
                    .filter_map(|j| self.snap.job(JobId(*j)).and_then(|x| x.running()))
                    .flat_map(|r| r.placement.iter().filter(|p| p.node == id))
                    .fold((0, 0), |(c, m), p| (c + p.cpus_milli, m + p.memory_mb));
                api::NodeView {
                    name: n.name.to_string(),
                    gpu_sharing: n.sharing.as_str().into(),
                    container_runtime: self.links.get(&id).and_then(|l| l.doc.container_runtime.clone()),
                    state: n.state.as_str().into(),
                    pool: n.pool.name.to_string(),
                    cpus: n.cpus_milli as f64 / 1000.0,
                    memory_mb: n.memory_mb,
                    free_cpus: n.cpus_milli.saturating_sub(used.0) as f64 / 1000.0,
                    free_memory_mb: n.memory_mb.saturating_sub(used.1),
                    labels: n.labels.clone(),
                    source: self.links.get(&id).map_or_else(|| "none".into(), |l| l.doc.source.clone()),
                    degraded: self.links.get(&id).map(|l| l.doc.degraded.clone()).unwrap_or_default(),
                    addr: self.links.get(&id).map(|l| l.doc.addr.clone()).filter(|a| !a.is_empty()),
                    agent: self.links.get(&id).map(|l| match &l.link {
                        Link::Local => "local".to_string(),
                        Link::Remote(r) if r.registered => format!("remote, epoch {}", l.doc.epoch),
                        Link::Remote(_) => "remote, not registered".to_string(),
                    }),
                    devices,
                    jobs,
                    conditions: self.links.get(&id).map(NodeLink::shown_conditions).unwrap_or_default(),
                }
            })
            .collect()
    }

    pub(super) fn queues(&self) -> Vec<api::QueueView> {
        let mut names: BTreeSet<String> = self.snap.queues().map(|q| q.name.to_string()).collect();
        names.extend(self.jobs.values().map(|d| d.queue.clone()));
        names
            .into_iter()
            .map(|name| {
                let cfg = self.snap.queues().find(|q| *q.name == *name);
                let (pending, running) =
                    self.jobs.values().filter(|d| d.queue == name).fold((0, 0), |(p, r), d| {
                        if d.state == api::JobState::Pending { (p + 1, r) } else { (p, r + 1) }
                    });
                api::QueueView {
                    cohort: cfg.and_then(|c| c.cohort.as_ref().map(|x| x.to_string())),
                    guarantee_gpus: cfg.map_or(0.0, |c| c.guarantee as f64 / 1000.0),
                    max_gpus: cfg.and_then(|c| c.max.map(|m| m as f64 / 1000.0)),
                    used_gpus: self.snap.queue_usage(&name) as f64 / 1000.0,
                    max_per_kind: cfg
                        .map(|c| {
                            c.kind_max.iter().map(|(k, m)| (k.resource().to_string(), *m as f64 / 1000.0)).collect()
                        })
                        .unwrap_or_default(),
                    used_per_kind: self
                        .snap
                        .queue_kind_usage(&name)
                        .iter()
                        .map(|(k, u)| (k.resource().to_string(), u as f64 / 1000.0))
                        .collect(),
                    pending,
                    running,
                    window: cfg.and_then(|c| c.windows.as_deref()).map(|w| {
                        let now = gpool_core::Time::from_millis(self.now);
                        let state = if w.is_open(now) { "open" } else { "closed" };
                        match w.next_change(now) {
                            Some(t) => format!("{state} until {}", api::time::rfc3339(t.as_millis())),
                            None => state.to_string(),
                        }
                    }),
                    name,
                }
            })
            .collect()
    }
}
