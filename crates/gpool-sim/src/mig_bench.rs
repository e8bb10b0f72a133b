//! `gpool bench mig`: static MIG layouts against layouts that follow the
//! queue (`gpool_core::mig_planner`), on a stream of MIG requests whose mix
//! changes through the day.
//!
//! The cluster: half its nodes A100-80GB, half H100-80GB (the two share
//! their profile names), every GPU in MIG mode. The workload: Poisson
//! arrivals for `hours`, in phases of six hours that alternate between
//! small instances (notebooks, inference: mostly `1g.10gb` and `2g.20gb`)
//! and large ones (training: mostly `7g.80gb`, `4g.40gb`, `3g.40gb`), at
//! `load` times the cluster's compute slices. Each layout runs the same
//! stream through the same scheduler (`engine::run`); a request is served
//! if it completed by the end of the arrivals. A static layout can never
//! serve a profile it does not have; those requests count as not served.

use std::sync::Arc;
use std::time::Duration;

use gpool_core::mig_geometry::geometry;
use gpool_core::{Device, DeviceKind, MigInstance, MigProfile, Node, Policy};

use crate::engine::{Estimates, SimConfig, SimError, run};
use crate::rng::Rng;
use crate::trace::TraceJob;

/// The benchmark's settings.
#[derive(Clone, Debug)]
pub struct MigBench {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Hours of arrivals.
    pub hours: f64,
    /// Offered compute slices over the cluster's.
    pub load: f64,
    pub seed: u64,
}

/// One layout's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct MigRow {
    /// `planner`, or the static layout (`3g.40gb+3g.40gb`, `mixed`).
    pub layout: String,
    pub submitted: usize,
    /// Completed by the end of the arrivals.
    pub served: usize,
    /// Compute-slice hours of the served requests.
    pub slice_hours: f64,
    /// Mean wait of the requests that started, in seconds.
    pub mean_wait_s: f64,
    pub repartitions: u64,
}

/// The profiles requested, with their shares in the two kinds of phase.
const MIX: [(&str, f64, f64); 5] = [
    ("1g.10gb", 0.55, 0.05),
    ("2g.20gb", 0.25, 0.05),
    ("3g.40gb", 0.10, 0.20),
    ("4g.40gb", 0.05, 0.20),
    ("7g.80gb", 0.05, 0.50),
];

/// The layouts a GPU of the cluster may be given statically: each distinct
/// maximal layout of H100-80GB (A100-80GB's are the same), as profiles.
pub fn static_layouts() -> Vec<Vec<MigProfile>> {
    geometry("H100-80GB").map(|g| g.profile_sets()).unwrap_or_default()
}

/// The "mixed" static layout, one of these per GPU in turn: every requested
/// profile is somewhere, in about the proportions of the whole day's mix.
fn mixed() -> Vec<Vec<MigProfile>> {
    let p = |names: &[&str]| names.iter().filter_map(|n| n.parse().ok()).collect::<Vec<MigProfile>>();
    vec![
        p(&["1g.10gb"; 7]),
        p(&["7g.80gb"]),
        p(&["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]),
        p(&["4g.40gb", "3g.40gb"]),
        p(&["7g.80gb"]),
        p(&["3g.40gb", "3g.40gb"]),
    ]
}

fn cluster(b: &MigBench, layout_of: &dyn Fn(usize) -> Vec<MigProfile>) -> Vec<Node> {
    let mut k = 0;
    (0..b.nodes)
        .map(|i| {
            let name = format!("mig-{i:03}");
            let model = if i % 2 == 0 { "A100-80GB" } else { "H100-80GB" };
            let mut n = Node::new(&name, 128_000, 2_000_000);
            for index in 0..b.gpus_per_node {
                let layout = layout_of(k);
                k += 1;
                let instances = layout
                    .iter()
                    .enumerate()
                    .map(|(j, p)| MigInstance {
                        profile: p.clone(),
                        uuid: Arc::from(format!("MIG-{name}-{index}-{j}")),
                        gi_id: Some(j as u32 + 1),
                        memory_mb: u64::from(p.memory_gb) * 1000,
                    })
                    .collect();
                n.devices.push(Device {
                    index,
                    uuid: Arc::from(format!("GPU-{name}-{index}")),
                    kind: DeviceKind::NvidiaGpu,
                    model: Arc::from(model),
                    memory_mb: 81_559,
                    nvlink_group: None,
                    numa_node: None,
                    mig: Some(instances),
                });
            }
            n
        })
        .collect()
}

/// The request stream.
pub fn workload(b: &MigBench) -> Vec<TraceJob> {
    let mut rng = Rng::new(b.seed);
    let profiles: Vec<(MigProfile, f64, f64)> =
        MIX.iter().filter_map(|(n, small, large)| Some((n.parse().ok()?, *small, *large))).collect();
    let mean_duration_s = |p: &MigProfile| if p.compute_slices >= 3 { 3.0 * 3600.0 } else { 1800.0 };
    // Offered slice-seconds per second = load × slices; the mean request
    // (over both phases) sets the arrival rate.
    let mean_work: f64 =
        profiles.iter().map(|(p, s, l)| (s + l) / 2.0 * f64::from(p.compute_slices) * mean_duration_s(p)).sum();
    let slices = f64::from(b.nodes * b.gpus_per_node * 7);
    let rate = b.load * slices / mean_work;
    let mut jobs = Vec::new();
    let mut t = 0.0;
    let end = b.hours * 3600.0;
    loop {
        t += -(1.0 - rng.unit()).ln() / rate;
        if t >= end {
            break;
        }
        let small_phase = ((t / (6.0 * 3600.0)) as u64).is_multiple_of(2);
        let weights: Vec<f64> = profiles.iter().map(|(_, s, l)| if small_phase { *s } else { *l }).collect();
        let (p, _, _) = &profiles[rng.weighted(&weights)];
        let duration = -(1.0 - rng.unit()).ln() * mean_duration_s(p);
        jobs.push(TraceJob {
            line: jobs.len() + 1,
            submit_s: t,
            duration_s: duration.max(60.0),
            gpus: 1,
            group: format!("team-{}", rng.range(0, 5)),
            gpu_models: Vec::new(),
            cpus_milli: 1000,
            memory_mb: 4096,
            mig: Some(p.clone()),
            gpu_milli: None,
            kind: None,
        });
    }
    jobs
}

fn row(layout: String, b: &MigBench, trace: &[TraceJob], cfg: &SimConfig) -> Result<MigRow, SimError> {
    let result = run(trace, cfg, |_, _| {})?;
    let end = b.hours * 3600.0;
    let served: Vec<_> = result.jobs.iter().filter(|j| j.end_s.is_some_and(|e| e <= end)).collect();
    let slices =
        |line: usize| trace.get(line - 1).and_then(|t| t.mig.as_ref()).map_or(0.0, |p| f64::from(p.compute_slices));
    let waits: Vec<f64> = result.jobs.iter().filter_map(|j| j.queue_s()).collect();
    Ok(MigRow {
        layout,
        submitted: trace.len(),
        served: served.len(),
        slice_hours: served.iter().map(|j| slices(j.line) * j.duration_s / 3600.0).sum(),
        mean_wait_s: if waits.is_empty() {
            0.0
        } else {
            (waits.iter().sum::<f64>() / waits.len() as f64).max(0.0) + 0.0
        },
        repartitions: result.repartitions,
    })
}

/// Every static layout, the mixed one and the planner (starting from the
/// mixed one), best served first.
pub fn compare(b: &MigBench, policy: &Policy) -> Result<Vec<MigRow>, SimError> {
    let trace = workload(b);
    let cfg = |nodes: Vec<Node>, planner: bool| SimConfig {
        elastic: None,
        reservations: Vec::new(),
        policy: policy.clone(),
        nodes,
        estimates: Estimates::None,
        restart_delay: Duration::ZERO,
        preemptible: false,
        sample: Duration::from_secs(3600),
        mig_planner: planner,
        power_budgets: Vec::new(),
        faults: Vec::new(),
        fleet: None,
    };
    let mut rows = Vec::new();
    for layout in static_layouts() {
        let name = layout.iter().map(ToString::to_string).collect::<Vec<_>>().join("+");
        let nodes = cluster(b, &|_| layout.clone());
        rows.push(row(name, b, &trace, &cfg(nodes, false))?);
    }
    let mix = mixed();
    let mixed_nodes = || cluster(b, &|k| mix[k % mix.len()].clone());
    rows.push(row("mixed (static)".into(), b, &trace, &cfg(mixed_nodes(), false))?);
    rows.push(row("planner (from mixed)".into(), b, &trace, &cfg(mixed_nodes(), true))?);
    let whole: Vec<MigProfile> = "7g.80gb".parse().into_iter().collect();
    rows.push(row("planner (from 7g everywhere)".into(), b, &trace, &cfg(cluster(b, &|_| whole.clone()), true))?);
    rows.sort_by(|a, b| b.served.cmp(&a.served).then(a.layout.cmp(&b.layout)));
    Ok(rows)
}

/// The planner's cost on a cluster of `nodes` × `gpus_per_node` MIG GPUs
/// (the mixed layout, every GPU busy but one instance) with `pending` MIG
/// requests waiting: the median of five calls of `plan_for`, and how many
/// GPUs it asked to change or drain.
pub fn planner_cost(nodes: u32, gpus_per_node: u32, pending: usize) -> Result<(Duration, usize), SimError> {
    let b = MigBench { nodes, gpus_per_node, hours: 24.0, load: 1.0, seed: 1 };
    let mix = mixed();
    let mut snap = gpool_core::Snapshot::new(Policy::by_name("fifo-backfill").map_err(|_| SimError::EmptyCluster)?);
    for n in cluster(&b, &|k| mix[k % mix.len()].clone()) {
        let gpus: Vec<u32> = n.devices.iter().map(|d| d.index).collect();
        let id = snap.add_node(n).map_err(SimError::Cluster)?;
        for gpu in gpus {
            snap.set_mig_managed(id, gpu, true).map_err(SimError::Cluster)?;
        }
    }
    // Fill every instance but one per GPU with a running job.
    let t0 = gpool_core::Time::from_millis(0);
    let mut id = 0u64;
    let ids: Vec<(gpool_core::NodeId, u32)> =
        snap.nodes().flat_map(|(nid, n)| n.devices.iter().map(move |d| (nid, d.index)).collect::<Vec<_>>()).collect();
    for (nid, gpu) in ids {
        let Some(instances) = snap.mig_instances(nid, gpu) else { continue };
        let uuids: Vec<String> = instances.iter().skip(1).map(|(i, _)| i.uuid.to_string()).collect();
        for uuid in uuids {
            let Some((_, mig)) = snap.slots_of(nid, &[], &[uuid.as_str()]) else { continue };
            let mut spec = gpool_core::JobSpec::new("fill", t0);
            let profile = snap
                .mig_instances(nid, gpu)
                .and_then(|v| v.into_iter().find(|(i, _)| *i.uuid == *uuid).map(|(i, _)| i.profile.clone()));
            let Some(profile) = profile else { continue };
            spec.replica.gpu = gpool_core::GpuRequest::Mig { profile, count: 1 };
            let job = gpool_core::JobId(id);
            id += 1;
            snap.submit(job, spec).map_err(|err| SimError::Apply { t: 0.0, err })?;
            let placement = vec![gpool_core::ReplicaPlacement {
                node: nid,
                gpus: 0,
                mig,
                cpus_milli: 0,
                memory_mb: 0,
                share: None,
            }];
            snap.start(job, placement, t0).map_err(|err| SimError::Apply { t: 0.0, err })?;
        }
    }
    // The day's mix of requests, cycled.
    let day = workload(&MigBench { nodes: 8, gpus_per_node: 8, ..b.clone() });
    for j in day.iter().cycle().take(pending).cloned() {
        let mut spec = gpool_core::JobSpec::new("wait", t0);
        spec.replica.gpu =
            gpool_core::GpuRequest::Mig { profile: j.mig.unwrap_or(MigProfile::gpu_instance(7, 80)), count: 1 };
        snap.submit(gpool_core::JobId(id), spec).map_err(|err| SimError::Apply { t: 0.0, err })?;
        id += 1;
    }
    let mut times = Vec::new();
    let mut changes = 0;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let p = gpool_core::mig_planner::plan_for(&snap, |_, _| true);
        times.push(t.elapsed());
        changes = p.repartitions.len() + p.drain.len();
    }
    times.sort();
    Ok((times[2], changes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planner_serves_more_than_every_static_layout_on_a_small_day() {
        let b = MigBench { nodes: 2, gpus_per_node: 4, hours: 24.0, load: 0.9, seed: 7 };
        let rows = compare(&b, &Policy::by_name("fifo-backfill").expect("preset")).expect("ran");
        let planner = rows.iter().find(|r| r.layout.starts_with("planner")).expect("planner row");
        let best_static = rows.iter().filter(|r| !r.layout.starts_with("planner")).map(|r| r.served).max();
        assert!(planner.repartitions > 0, "{rows:#?}");
        assert!(Some(planner.served) > best_static, "{rows:#?}");
        assert!(rows.iter().all(|r| r.submitted == rows[0].submitted && r.served <= r.submitted));
    }

    #[test]
    fn the_planners_cost_is_measured_on_a_busy_cluster() {
        let (took, changes) = planner_cost(4, 8, 200).expect("measured");
        assert!(changes > 0, "with every GPU busy and requests waiting, some GPUs drain");
        assert!(took > Duration::ZERO);
    }

    #[test]
    fn the_stream_is_seeded_and_mixes_every_profile() {
        let b = MigBench { nodes: 4, gpus_per_node: 8, hours: 24.0, load: 1.0, seed: 1 };
        let (a, c) = (workload(&b), workload(&b));
        assert_eq!(a, c);
        for (name, _, _) in MIX {
            assert!(a.iter().any(|j| j.mig.as_ref().is_some_and(|p| p.to_string() == name)), "{name}");
        }
    }
}
