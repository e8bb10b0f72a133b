//! The documents the controller persists: a job (its spec, state and
//! current run) as the store's JSON, and how documents become store writes.
//! A restart rebuilds everything from these (`restore.rs`).

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_store::Write;
use serde::{Deserialize, Serialize};

use super::calls::ApiError;
use crate::protocol::ExitRecord;

/// The states of jobs not yet finished (loaded at restore).
pub(super) const ACTIVE: [&str; 4] = ["pending", "starting", "running", "stopping"];

/// Why a run is being stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "cause")]
pub enum Stop {
    Cancel {
        by: String,
    },
    Preempt {
        for_job: u64,
    },
    /// An elastic job restarting at another size (`Plan::resizes`): shrunk
    /// for `for_job`, or grown into idle devices (`None`).
    Resize {
        from: u32,
        to: u32,
        for_job: Option<u64>,
    },
    TimeLimit,
    /// Another replica of the gang failed.
    GangFailure {
        rank: u32,
    },
    /// A replica was lost (its shim vanished).
    Lost,
    /// All its GPUs stayed idle and its queue stops idle jobs (`idle.rs`).
    Idle {
        gpus: u32,
    },
    /// A power budget over its nodes is over its watts (lowered live), and it was the lowest-priority work there.
    Power,
    /// A replica of its gang held the others back (`straggler.rs`) and it
    /// asked to be placed again (`onStraggler: requeue`).
    Straggler {
        device: String,
    },
    /// Its queue's windows closed, and the queue stops its jobs then (`stopAtEnd`).
    Window {
        queue: String,
    },
    /// Its node is being taken back by its provider (a spot notice) at `at_ms`.
    Reclaim {
        node: String,
        at_ms: i64,
    },
    /// A GPU it runs on was quarantined for a fault (`faults.rs`): requeued
    /// as an infrastructure failure, not counted against its retries.
    GpuFault {
        node: String,
        gpu: u32,
        fault: String,
    },
    /// A GPU it runs on raised an XID of the application's own (`faults.rs`).
    GpuXid {
        node: String,
        gpu: u32,
        xid: String,
    },
    /// Its processes used more of a shared GPU's memory than its share.
    GpuMemory {
        gpu: u32,
        used_mb: u64,
        limit_mb: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDoc {
    pub rank: u32,
    pub node: String,
    pub gpus: Vec<u32>,
    pub mig: Vec<String>,
    pub cpus_milli: u64,
    pub memory_mb: u64,
    pub cuda_visible_devices: String,
    /// Its share of the one GPU in `gpus`, when it shares that GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<api::GpuShareView>,
    #[serde(default)]
    pub exit: Option<ExitRecord>,
    #[serde(default)]
    pub lost: bool,
    /// Its agent said it runs (or how it ended). A replica on a remote node
    /// that is not seen within `Controller::start_bound_ms` of its start is
    /// declared lost (the start or its answer went missing).
    #[serde(default)]
    pub seen: bool,
}

impl ReplicaDoc {
    pub(super) fn ended(&self) -> bool {
        self.exit.is_some() || self.lost
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDoc {
    pub attempt: u32,
    pub started_ms: i64,
    pub replicas: Vec<ReplicaDoc>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub kill_at_ms: Option<i64>,
    /// `MASTER_PORT` of a gang spread over several nodes (reserved on rank 0's node).
    #[serde(default)]
    pub master_port: Option<u16>,
    /// `PORT` of a service replica (reserved on its node like a `MASTER_PORT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// How many earlier attempts' nodes a job remembers.
pub(super) const EARLIER_NODES: usize = 32;

/// A job as persisted: the store's JSON document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDoc {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub team: String,
    pub queue: String,
    pub priority: i32,
    pub spec: api::JobSpec,
    pub state: api::JobState,
    #[serde(default)]
    pub end_reason: Option<String>,
    pub submitted_ms: i64,
    #[serde(default)]
    pub started_ms: Option<i64>,
    #[serde(default)]
    pub ended_ms: Option<i64>,
    pub attempt: u32,
    pub restarts: u32,
    pub failures: u32,
    #[serde(default)]
    pub not_before_ms: Option<i64>,
    pub prior_runtime_ms: u64,
    pub prior_gpu_milli_secs: u64,
    #[serde(default)]
    pub run: Option<RunDoc>,
    /// The nodes its earlier attempts ran on (at most [`EARLIER_NODES`]):
    /// their output may still be arriving after it runs elsewhere (`node_trust.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_nodes: Vec<String>,
    #[serde(default)]
    pub exit: Option<api::ExitView>,
    /// When it last joined the queue (submission or requeue).
    #[serde(default)]
    pub queued_ms: Option<i64>,
    /// Usage of its finished runs (their cost included, `costs.rs`).
    #[serde(default)]
    pub usage: Option<api::UsageSummary>,
    /// The node pool its last run was charged to.
    #[serde(default)]
    pub pool: Option<String>,
    /// Why it is held for its team's or queue's hard budget (`budgets.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_hold: Option<String>,
    /// The run time learned for it at submission, when its spec gave none (`history.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_estimate: Option<api::LearnedEstimate>,
    /// Run times in ms of jobs like it at submission, for a policy that
    /// orders by the Gittins index (`history.rs`, `gpool_core::gittins`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub similar_runs_ms: Vec<u64>,
    /// Who holds it back (`gpool hold`), while held (`holds.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// The draw per GPU its power budgets count it at, learned from jobs like it (`history.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_watts_per_gpu: Option<u32>,
    /// Why it will miss its deadline, once a pass found it would (reported once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<String>,
    /// The pipeline run it is a stage of (`pipelines.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineRef>,
    /// The job array it is a task of (`spec.array`, `admission.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<api::ArrayView>,
    /// An elastic job's changes of size, oldest first (at most [`RESIZES_KEPT`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resizes: Vec<ResizeDoc>,
}

/// How many changes of size a job keeps.
pub(super) const RESIZES_KEPT: usize = 64;

/// One change of an elastic job's size, as persisted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeDoc {
    pub at_ms: i64,
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// A job's place in a pipeline run. A run's jobs have consecutive ids from
/// the run's id (its first job's), so a run is found from any of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineRef {
    pub run: u64,
    /// The pipeline's name.
    pub name: String,
    pub stage: String,
    /// The stage with its matrix values (`train[lr=0.1]`).
    pub label: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub matrix: std::collections::BTreeMap<String, String>,
    /// Stages before it on its longest chain of needs.
    pub depth: u32,
    /// How many jobs the run has.
    pub jobs: u32,
}

/// Adds up the usage of two runs (means weighted by GPU-hours).
pub(super) fn merge_usage(a: Option<api::UsageSummary>, b: Option<api::UsageSummary>) -> Option<api::UsageSummary> {
    let (a, b) = match (a, b) {
        (None, x) | (x, None) => return x,
        (Some(a), Some(b)) => (a, b),
    };
    let w = |x: &api::UsageSummary| x.gpu_hours.max(1e-12);
    let mean = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some((x * w(&a) + y * w(&b)) / (w(&a) + w(&b))),
        (x, None) | (None, x) => x,
    };
    Some(api::UsageSummary {
        gpu_hours: a.gpu_hours + b.gpu_hours,
        idle_gpu_hours: a.idle_gpu_hours + b.idle_gpu_hours,
        mean_gpu_util: mean(a.mean_gpu_util, b.mean_gpu_util),
        peak_memory_mb: a.peak_memory_mb.max(b.peak_memory_mb),
        mean_cpu_cores: mean(a.mean_cpu_cores, b.mean_cpu_cores),
        energy_wh: match (a.energy_wh, b.energy_wh) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        },
        cost_usd: match (a.cost_usd, b.cost_usd) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        },
    })
}

pub(super) fn put_job(d: &JobDoc) -> Write {
    Write::PutJob(gpool_store::JobRow {
        id: d.id,
        user: d.user.clone(),
        team: d.team.clone(),
        queue: d.queue.clone(),
        state: d.state.as_str().into(),
        submitted_ms: d.submitted_ms,
        ended_ms: d.ended_ms,
        doc: serde_json::to_string(d).unwrap_or_default(),
    })
}

pub(super) fn default_name(spec: &api::JobSpec) -> String {
    let argv = spec.command.argv();
    let prog = match spec.command {
        api::Command::Shell(ref s) => s.split_whitespace().next().unwrap_or("job").to_string(),
        api::Command::Argv(_) => argv.first().cloned().unwrap_or_else(|| "job".into()),
    };
    std::path::Path::new(&prog).file_name().map_or(prog.clone(), |f| f.to_string_lossy().into_owned())
}

/// A job the caller may see: their own, or any for admins and readers. Others' jobs are "not found".
pub(super) fn visible(
    jobs: &BTreeMap<u64, JobDoc>,
    store: &mut dyn gpool_store::Store,
    caller: &crate::plane::auth::Caller,
    id: u64,
) -> Result<JobDoc, ApiError> {
    let doc = match jobs.get(&id) {
        Some(d) => Some(d.clone()),
        None => store
            .job(id)
            .map_err(|e| ApiError::new(500, e.to_string()))?
            .and_then(|r| serde_json::from_str::<JobDoc>(&r.doc).ok()),
    };
    match doc {
        Some(d) if caller.sees_all() || d.user == caller.user => Ok(d),
        _ => Err(ApiError::new(404, format!("job {id} not found"))),
    }
}
