//! Synthetic clusters and workloads for benchmarks and scaling tests.

use std::sync::Arc;
use std::time::Duration;

use gpool_core::{Device, GpuRequest, JobSpec, MigInstance, MigProfile, Node, Time};

use crate::rng::Rng;

/// H100 memory in MiB as NVML reports it.
pub const H100_MB: u64 = 81_559;

/// `nodes` nodes of `gpus` H100-80GB each; every twentieth node has MIG on,
/// each GPU split 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb.
pub fn cluster(nodes: u32, gpus: u32) -> Vec<Node> {
    (0..nodes)
        .map(|i| {
            let name = format!("node-{i:04}");
            let mut n = Node::with_gpus(&name, gpus, "H100-80GB", H100_MB);
            if i % 20 == 19 {
                for d in &mut n.devices {
                    d.mig = Some(mig_layout(&name, d));
                }
            }
            n
        })
        .collect()
}

fn mig_layout(node: &str, d: &Device) -> Vec<MigInstance> {
    ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let profile: MigProfile = p.parse().ok()?;
            Some(MigInstance {
                memory_mb: u64::from(profile.memory_gb) * 1000 - 500,
                uuid: Arc::from(format!("MIG-{node}-{}-{i}", d.index)),
                gi_id: Some(i as u32 + 1),
                profile,
            })
        })
        .collect()
}

/// The benchmark's job mix: 1/2/4/8-GPU jobs, 10% gangs of 2–8 full nodes,
/// 5% MIG requests, a few CPU-only jobs; 50 users in 5 teams; half the jobs
/// carry an estimate between 10 minutes and a day.
pub fn job(rng: &mut Rng, gpus_per_node: u32, submit: Time) -> JobSpec {
    let user = rng.range(0, 50);
    let mut spec = JobSpec::new(&format!("user{user:02}"), submit);
    spec.team = Arc::from(format!("team{}", user % 5));
    spec.preemptible = rng.unit() < 0.3;
    spec.priority = if rng.unit() < 0.05 { 100 } else { 0 };
    match rng.weighted(&[0.40, 0.18, 0.14, 0.10, 0.10, 0.05, 0.03]) {
        0 => spec.replica.gpu = GpuRequest::Gpus { count: 1 },
        1 => spec.replica.gpu = GpuRequest::Gpus { count: 2.min(gpus_per_node) },
        2 => spec.replica.gpu = GpuRequest::Gpus { count: 4.min(gpus_per_node) },
        3 => spec.replica.gpu = GpuRequest::Gpus { count: gpus_per_node },
        4 => {
            spec.replica.gpu = GpuRequest::Gpus { count: gpus_per_node };
            spec.replicas = rng.range(2, 9) as u32;
        }
        5 => {
            let p = ["1g.10gb", "2g.20gb", "3g.40gb"][rng.range(0, 3) as usize];
            if let Ok(profile) = p.parse() {
                spec.replica.gpu = GpuRequest::Mig { profile, count: 1 };
            }
        }
        _ => spec.replica.gpu = GpuRequest::None,
    }
    spec.replica.gpu_model = None;
    spec.replica.cpus_milli = 1000 * rng.range(1, 9);
    spec.replica.memory_mb = 1024 * rng.range(4, 65);
    if rng.unit() < 0.5 {
        spec.estimate = Some(Duration::from_secs(rng.range(600, 86_400)));
    }
    spec
}
