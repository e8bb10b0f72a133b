//! `gpool bench sharing`: the workload-inflation protocol of the FGD paper
//! (Weng et al., USENIX ATC'23) on Alibaba's openb cluster, for each
//! placement strategy of the core.
//!
//! Pods arrive in the order of their list (re-sampled from it, seeded, once
//! it runs out) and never leave. Each arrival is submitted to the snapshot
//! and one scheduling pass runs (`gpool_core::schedule`, as in the daemon);
//! a pod the pass does not start is skipped for good. The measure, sampled
//! as the arriving GPU requests grow to `until` times the cluster's GPUs, is
//! the share of GPU capacity allocated to the pods started and the GPUs left
//! unallocated (whole-GPU equivalents: a GPU with a quarter given out counts
//! 0.75; under `whole-gpu` a quarter that holds a whole GPU still counts a
//! quarter, since that is all its owner asked for).
//!
//! `whole-gpu` is gpool before GPU sharing: a fractional pod takes a whole
//! GPU, best fit. The others place shares: `best-fit`, `spread` and
//! `fragmentation` (FGD).

use std::sync::Arc;

use gpool_core::job::{LabelExpr, LabelOp};
use gpool_core::{GpuRequest, JobId, JobSpec, Node, PlacementStrategy, Policy, Snapshot, Time, schedule};

use crate::cluster::model_memory_mb;
use crate::rng::Rng;
use crate::trace::TraceError;
use crate::trace::csv::{Header, Record, records};

/// A pod of an openb pod list.
#[derive(Clone, Debug, PartialEq)]
pub struct Pod {
    pub cpus_milli: u64,
    pub memory_mb: u64,
    pub gpus: u32,
    /// The share of each GPU, in thousandths (1000 = whole).
    pub gpu_milli: u16,
    /// Allowed GPU models; empty = any.
    pub models: Vec<String>,
}

impl Pod {
    /// GPUs the pod asks for, in whole-GPU equivalents.
    pub fn gpu_request(&self) -> f64 {
        f64::from(self.gpus) * f64::from(self.gpu_milli) / 1000.0
    }
}

/// How pods are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// gpool before sharing: a fraction takes a whole GPU.
    WholeGpu,
    Shared(PlacementStrategy),
}

impl Placement {
    pub const ALL: [Placement; 4] = [
        Placement::WholeGpu,
        Placement::Shared(PlacementStrategy::BestFit),
        Placement::Shared(PlacementStrategy::Spread),
        Placement::Shared(PlacementStrategy::Fragmentation),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Placement::WholeGpu => "whole-gpu",
            Placement::Shared(s) => s.as_str(),
        }
    }
}

/// One point of a run: arrived GPU requests and what was allocated then.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Arrived GPU requests over the cluster's GPUs.
    pub arrived: f64,
    /// Allocated GPU capacity over the cluster's.
    pub allocated: f64,
    /// GPUs left unallocated (whole-GPU equivalents).
    pub unallocated: f64,
}

/// One placement's run.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub placement: Placement,
    pub points: Vec<Point>,
    pub arrived_pods: usize,
    pub skipped_pods: usize,
}

impl Run {
    /// The last point at or before `arrived` (the state when arrivals reached it).
    pub fn at(&self, arrived: f64) -> Option<Point> {
        self.points.iter().rev().find(|p| p.arrived <= arrived + 1e-9).copied()
    }
}

fn field(r: &Record, i: usize) -> &str {
    r.fields.get(i).map_or("", |s| s.trim())
}

fn number(r: &Record, i: usize, name: &str) -> Result<u64, TraceError> {
    field(r, i)
        .parse()
        .map_err(|_| TraceError::Row { line: r.line, what: format!("{name} {:?} is not a whole number", field(r, i)) })
}

/// Reads `openb_node_list_gpu_node.csv` (`sn, cpu_milli, memory_mib, gpu, model`).
/// Every node shares its GPUs (time-slicing) and carries `gpool.io/gpu-model`.
pub fn read_nodes(text: &str) -> Result<Vec<Node>, TraceError> {
    let recs = records(text)?;
    let (head, rows) = recs.split_first().ok_or(TraceError::Empty)?;
    let h = Header::new(head);
    let (sn, cpu, mem, gpu, model) =
        (h.require("sn")?, h.require("cpu_milli")?, h.require("memory_mib")?, h.require("gpu")?, h.require("model")?);
    rows.iter()
        .map(|r| {
            let gpus = u32::try_from(number(r, gpu, "gpu")?)
                .map_err(|_| TraceError::Row { line: r.line, what: "too many GPUs".into() })?;
            let m = field(r, model);
            let mut n = Node::with_gpus(field(r, sn), gpus, m, model_memory_mb(m));
            n.cpus_milli = number(r, cpu, "cpu_milli")?;
            n.memory_mb = number(r, mem, "memory_mib")?;
            n.labels.insert("gpool.io/gpu-model".into(), m.to_string());
            Ok(n)
        })
        .collect()
}

/// Reads an openb pod list (`cpu_milli, memory_mib, num_gpu, gpu_milli`, optional `gpu_spec`).
pub fn read_pods(text: &str) -> Result<Vec<Pod>, TraceError> {
    let recs = records(text)?;
    let (head, rows) = recs.split_first().ok_or(TraceError::Empty)?;
    let h = Header::new(head);
    let (cpu, mem, gpus, milli) =
        (h.require("cpu_milli")?, h.require("memory_mib")?, h.require("num_gpu")?, h.require("gpu_milli")?);
    let spec = h.find("gpu_spec");
    rows.iter()
        .map(|r| {
            let g = number(r, gpus, "num_gpu")?;
            let m = number(r, milli, "gpu_milli")?;
            if g > 64 || m > 1000 || (g > 0 && m == 0) || (g > 1 && m < 1000) {
                return Err(TraceError::Row {
                    line: r.line,
                    what: format!("num_gpu {g} with gpu_milli {m}: a share is of one GPU, 1 to 1000 thousandths"),
                });
            }
            Ok(Pod {
                cpus_milli: number(r, cpu, "cpu_milli")?,
                memory_mb: number(r, mem, "memory_mib")?,
                gpus: g as u32,
                gpu_milli: if g == 0 { 0 } else { m as u16 },
                models: spec
                    .map(|s| {
                        field(r, s).split('|').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

fn spec_of(pod: &Pod, placement: Placement, at: Time) -> JobSpec {
    let mut spec = JobSpec::new("openb", at);
    spec.replica.cpus_milli = pod.cpus_milli;
    spec.replica.memory_mb = pod.memory_mb;
    spec.replica.gpu = match (pod.gpus, pod.gpu_milli, placement) {
        (0, _, _) => GpuRequest::None,
        (1, m, Placement::Shared(_)) if m < 1000 => GpuRequest::Share { milli: Some(m), memory_mb: None },
        (g, _, _) => GpuRequest::Gpus { count: g },
    };
    match pod.models.as_slice() {
        [] => {}
        [one] => spec.replica.gpu_model = Some(Arc::from(one.as_str())),
        many => {
            spec.affinity.required.push(LabelExpr { key: "gpool.io/gpu-model".into(), op: LabelOp::In(many.to_vec()) })
        }
    }
    spec
}

/// Runs the protocol for one placement: arrivals until their GPU requests
/// reach `until` × the cluster's GPUs, a point every `step` of that.
pub fn inflate(nodes: &[Node], pods: &[Pod], placement: Placement, until: f64, step: f64, seed: u64) -> Run {
    let policy = match placement {
        Placement::WholeGpu => PlacementStrategy::BestFit,
        Placement::Shared(s) => s,
    };
    let mut snap = Snapshot::new(Policy { placement: policy, ..Policy::by_name("fifo").expect("a preset") });
    for n in nodes {
        // Node names are unique in the list; a duplicate would be skipped.
        let _ = snap.add_node(n.clone());
    }
    let capacity: f64 = nodes.iter().map(|n| n.whole_gpus().count() as f64).sum();
    let mut run = Run { placement, points: Vec::new(), arrived_pods: 0, skipped_pods: 0 };
    if capacity == 0.0 || pods.is_empty() {
        return run;
    }
    let mut rng = Rng::new(seed);
    // GPU requests of the pods started: what their owners asked for (a
    // quarter that holds a whole GPU under `whole-gpu` counts a quarter).
    let (mut arrived, mut served, mut next_point) = (0.0, 0.0, step);
    let mut k = 0usize;
    while arrived < until * capacity {
        let pod = if k < pods.len() { &pods[k] } else { &pods[rng.range(0, pods.len() as u64) as usize] };
        k += 1;
        let now = Time::from_secs(k as i64);
        let id = JobId(k as u64);
        if snap.submit(id, spec_of(pod, placement, now)).is_err() {
            continue;
        }
        run.arrived_pods += 1;
        arrived += pod.gpu_request();
        let plan = schedule(&snap, now);
        let started = plan.starts.iter().find(|s| s.job == id).map(|s| snap.start(id, s.placement.clone(), now));
        if matches!(started, Some(Ok(()))) {
            served += pod.gpu_request();
        } else {
            run.skipped_pods += 1;
            let _ = snap.remove_pending(id, false);
        }
        while arrived >= next_point * capacity {
            run.points.push(Point {
                arrived: next_point,
                allocated: served / capacity,
                unallocated: capacity - served,
            });
            next_point += step;
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,64000,262144,2,T4\n";

    #[test]
    fn reads_the_openb_lists_and_refuses_a_share_of_several_gpus() {
        let nodes = read_nodes(NODES).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].cpus_milli, 64000);
        assert_eq!(nodes[0].label("gpool.io/gpu-model"), Some("T4"));
        let pods =
            read_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1000,1024,1,250,T4|P100\n").unwrap();
        assert_eq!(pods[0].gpu_milli, 250);
        assert_eq!(pods[0].models, ["T4", "P100"]);
        let err = read_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,2,500\n").unwrap_err();
        assert!(err.to_string().contains("a share is of one GPU"), "{err}");
    }

    /// Quarters and whole GPUs on 4 GPUs: whole-GPU placement wastes the
    /// quarters' GPUs; sharing packs four quarters on one.
    #[test]
    fn sharing_allocates_what_whole_gpus_strand() {
        let nodes = read_nodes(NODES).unwrap();
        let quarter = Pod { cpus_milli: 1000, memory_mb: 1024, gpus: 1, gpu_milli: 250, models: vec![] };
        let pods = vec![quarter.clone(), quarter.clone(), quarter.clone(), quarter];
        let whole = inflate(&nodes, &pods, Placement::WholeGpu, 1.0, 0.25, 1);
        let shared = inflate(&nodes, &pods, Placement::Shared(PlacementStrategy::BestFit), 1.0, 0.25, 1);
        // 16 quarters arrive (4 GPUs' worth); whole-GPU placement starts 4 of them.
        assert_eq!(whole.at(1.0).unwrap().allocated, 0.25);
        assert_eq!(shared.at(1.0).unwrap().allocated, 1.0);
        assert_eq!(whole.skipped_pods, 12);
        assert_eq!(shared.skipped_pods, 0);
    }
}
