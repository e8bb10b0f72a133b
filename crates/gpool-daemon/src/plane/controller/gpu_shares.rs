//! Shared GPUs: what a job is told of its share when it starts, and the
//! memory limit of a share on a time-sliced GPU, enforced from telemetry.
//!
//! With MPS the node enforces a share itself (its compute and memory limits
//! go to the job in `CUDA_MPS_*` variables). With time-slicing nothing in
//! the driver does: the control plane reads each process's GPU memory from
//! the node's reports (NVML or `nvidia-smi --query-compute-apps`), adds it
//! up per job and GPU, and stops a job whose processes use more than its
//! share, failing it with the figures.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_core::{GpuSharing, Snapshot};

use super::acts::Acts;
use super::docs::{JobDoc, Stop};
use crate::protocol::NodeReport;

/// What a replica holding `share` of a GPU on a node in `mode` is told, as
/// environment variables. Its `CUDA_VISIBLE_DEVICES` names the one GPU, so
/// for CUDA it is device 0.
pub(super) fn share_env(share: &api::GpuShareView, mode: GpuSharing) -> Vec<(&'static str, String)> {
    let fraction = format!("{}.{:03}", share.milli / 1000, share.milli % 1000);
    let mut env = vec![
        ("GPOOL_GPU_FRACTION", fraction.trim_end_matches('0').trim_end_matches('.').to_string()),
        ("GPOOL_GPU_MEMORY_MB", share.memory_mb.to_string()),
        ("GPOOL_GPU_SHARING", mode.as_str().to_string()),
    ];
    if mode == GpuSharing::Mps {
        env.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share.milli.div_ceil(10).max(1).to_string()));
        env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", format!("0={}M", share.memory_mb)));
    }
    env
}

/// GPU memory per (job, GPU index) in a report, from its processes.
fn memory_by_job(r: &NodeReport) -> BTreeMap<(u64, u32), u64> {
    let mut used: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    for g in &r.gpus {
        for p in &g.processes {
            if let (Some(job), Some(mb)) = (r.pid_jobs.get(&p.pid), p.used_memory_mb) {
                *used.entry((*job, g.index)).or_default() += mb;
            }
        }
    }
    used
}

/// Stops each job on a time-sliced GPU of this node whose processes use
/// more GPU memory than its share.
pub(super) fn enforce_gpu_shares(r: &NodeReport, snap: &Snapshot, jobs: &BTreeMap<u64, JobDoc>) -> Acts {
    let mut acts = Acts::default();
    let Some(node) = snap.node_id(&r.node) else { return acts };
    if snap.node(node).map(|n| n.sharing) != Some(GpuSharing::TimeSlicing) {
        return acts;
    }
    for ((job, gpu), used_mb) in memory_by_job(r) {
        let Some(run) = jobs.get(&job).and_then(|d| d.run.as_ref()) else { continue };
        if run.stop.is_some() {
            continue;
        }
        let over = run.replicas.iter().find_map(|x| {
            let share = x.gpu_share?;
            (x.node == r.node && x.gpus == [gpu] && used_mb > share.memory_mb).then_some(share.memory_mb)
        });
        let Some(limit_mb) = over else { continue };
        acts.stop(job, Stop::GpuMemory { gpu, used_mb, limit_mb });
        acts.event(
            Some(job),
            "gpu_memory_exceeded",
            format!(
                "job {job} used {used_mb} MiB of GPU {gpu} on {}, over its share of {limit_mb} MiB; stop signal sent",
                r.node
            ),
        );
    }
    acts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_nodes_get_the_limits_in_cuda_variables() {
        let quarter = api::GpuShareView { milli: 250, memory_mb: 20_000 };
        let env: BTreeMap<_, _> = share_env(&quarter, GpuSharing::Mps).into_iter().collect();
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=20000M");
        assert_eq!(env["GPOOL_GPU_FRACTION"], "0.25");
        let env: BTreeMap<_, _> = share_env(&quarter, GpuSharing::TimeSlicing).into_iter().collect();
        assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        assert_eq!((env["GPOOL_GPU_MEMORY_MB"].as_str(), env["GPOOL_GPU_SHARING"].as_str()), ("20000", "time-slicing"));
    }
}
