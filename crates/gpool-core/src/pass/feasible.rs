//! Whether a job could ever run on this cluster, ignoring what runs now:
//! the daemon rejects a submission that no node could ever satisfy, with
//! the reason, instead of letting it wait forever.

use std::fmt;
use std::sync::Arc;

use crate::model::job::{Job, JobId, JobSpec, JobState, Service};
use crate::model::node::{NodeId, NodeState};
use crate::model::resources::GpuMilli;
use crate::model::time::Time;
use crate::pass::capacity::fit_on;
use crate::pass::plan::Need;
use crate::pass::snapshot::{NodeFree, Snapshot};

/// Why a job can never run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Infeasible {
    /// No node (that is not down) matches the job's selector, affinity and request.
    NoNode { need: Need, largest: String },
    /// Some nodes could hold a replica, but not enough for the whole gang.
    TooFewNodes { need: Need, replicas_that_fit: u32 },
    /// The request is larger than its queue's maximum.
    OverQueueMax { queue: Arc<str>, max: GpuMilli, units: GpuMilli },
    /// A GPU share was asked for, and no node shares its GPUs.
    NoSharing,
    /// Nodes could hold it, but no power budget over them could, even with
    /// every other GPU idle: (the budget, its watts, what it counts with the
    /// job's replicas placed so far and the rest idle, what one more adds).
    OverPowerBudget { budget: String, watts: u32, idle: u64, replica: u64 },
    /// Nonsense requests.
    Invalid(&'static str),
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Infeasible::NoNode { need, largest } => {
                write!(f, "no node could ever run it: it needs {need} per replica on one node; {largest}")
            }
            Infeasible::TooFewNodes { need, replicas_that_fit } => write!(
                f,
                "no set of nodes could ever run it: it needs {need}, and the whole cluster, empty, holds {replicas_that_fit} such replicas"
            ),
            Infeasible::OverQueueMax { queue, max, units } => write!(
                f,
                "it needs {:.2} GPUs but queue {queue} has a maximum of {:.2}",
                *units as f64 / 1000.0,
                *max as f64 / 1000.0
            ),
            Infeasible::NoSharing => f.write_str(
                "it asks for a share of a GPU, and no node shares its GPUs: start the nodes' agents with \
                 --gpu-sharing time-slicing (or mps), or ask for whole GPUs",
            ),
            Infeasible::OverPowerBudget { budget, watts, idle, replica } => write!(
                f,
                "no power budget could ever hold it: the power budget of {budget} is {watts} W, {idle} W of it \
                 counted with every other GPU idle, and a replica adds {replica} W at the GPUs' power limit; \
                 ask for fewer GPUs, or for an admin to raise the budget (gpool power set)"
            ),
            Infeasible::Invalid(why) => f.write_str(why),
        }
    }
}

impl Snapshot {
    /// Whether managed MIG GPUs could be laid out for this MIG request:
    /// on one node, as many instances of its profile as it asks for.
    fn managed_mig_could_host(&self, spec: &JobSpec) -> bool {
        let crate::model::job::GpuRequest::Mig { profile, count } = &spec.replica.gpu else { return false };
        self.nodes.iter().any(|e| {
            if e.mig_managed == 0 || e.node.state == NodeState::Down || !spec.node_matches(&e.node) {
                return false;
            }
            let mut room = 0u32;
            for (di, d) in e.node.devices.iter().enumerate() {
                let managed = e.mig_range(di).is_some_and(|r| e.mig_managed & r != 0);
                let model_ok = spec.kind_allows(d.kind)
                    && spec.replica.gpu_model.as_deref().is_none_or(|m| d.model.eq_ignore_ascii_case(m));
                let Some(geo) = crate::model::mig_geometry::geometry(&d.model).filter(|_| managed && model_ok) else {
                    continue;
                };
                // The most instances of the profile one GPU of this model holds.
                room += (1..=7u32)
                    .take_while(|k| geo.fit(&vec![profile.clone(); *k as usize]).is_ok_and(|f| f.is_some()))
                    .last()
                    .unwrap_or(0);
            }
            room >= *count
        })
    }

    /// Checks that the job could run if the cluster were empty.
    pub fn check_feasible(&self, spec: &JobSpec) -> Result<(), Infeasible> {
        if spec.replicas == 0 {
            return Err(Infeasible::Invalid("a job needs at least one replica"));
        }
        if let crate::model::job::GpuRequest::Share { milli, memory_mb } = &spec.replica.gpu {
            if milli.is_none() && memory_mb.is_none() {
                return Err(Infeasible::Invalid("a GPU share needs a fraction, a memory size or both"));
            }
            if milli.is_some_and(|m| m == 0 || m > 1000) {
                return Err(Infeasible::Invalid("a GPU fraction must be above 0 and at most 1"));
            }
            if !self
                .nodes
                .iter()
                .any(|e| e.node.sharing != crate::model::node::GpuSharing::Off && !e.gpu_slots.is_empty())
            {
                return Err(Infeasible::NoSharing);
            }
        }
        let need = Need {
            replicas: spec.replicas,
            gpu: spec.replica.gpu.clone(),
            model: spec.replica.gpu_model.clone(),
            kind: spec.replica.gpu_kind,
        };
        let units = spec.gpu_units();
        if let Some(q) = self.queues.get(&spec.queue)
            && let Some(max) = q.max
            && units > max
        {
            return Err(Infeasible::OverQueueMax { queue: spec.queue.clone(), max, units });
        }
        let job = Job {
            id: JobId(u64::MAX),
            spec: Arc::new(spec.clone()),
            state: JobState::Pending,
            service: Service::default(),
            not_before: Time::MIN,
        };
        let mut fit = 0u32;
        // Budgets as if every GPU idled: what a replica adds must fit in what is left.
        let mut power = crate::pass::power::PowerState::idle(self);
        let mut over_power = None;
        for (n, e) in self.nodes.iter().enumerate() {
            if e.node.state == NodeState::Down || !spec.node_matches(&e.node) {
                continue;
            }
            let mut f: NodeFree = e.full();
            while fit < spec.replicas {
                let Some(x) = fit_on(self, e, &f, &job) else { break };
                let placed = x.replica(NodeId(n as u32), &spec.replica);
                if let (Some(ps), Some(p)) = (power.as_mut(), e.node.power) {
                    let watts =
                        crate::pass::power::replica_watts(&job, &p, placed.gpu_units() + e.mig_units(placed.mig));
                    if let Some((b, used)) = ps.blocking(n as u32, watts) {
                        over_power = Some(Infeasible::OverPowerBudget {
                            budget: b.scope.to_string(),
                            watts: b.watts,
                            idle: used,
                            replica: watts,
                        });
                        break;
                    }
                    ps.add(n as u32, watts);
                }
                f.take(&placed);
                fit += 1;
                if x.gpus == 0 && x.mig == 0 && spec.replica.cpus_milli == 0 && spec.replica.memory_mb == 0 {
                    fit = spec.replicas;
                }
            }
            if fit >= spec.replicas {
                return Ok(());
            }
        }
        if self.managed_mig_could_host(spec) {
            return Ok(());
        }
        if let Some(e) = over_power {
            return Err(e);
        }
        if fit == 0 {
            let largest = self
                .nodes
                .iter()
                .rev() // so that max_by_key, which keeps the last maximum, names the first node
                .filter(|e| e.node.state != NodeState::Down)
                .max_by_key(|e| e.gpu_slots.len())
                .map(|e| {
                    let model = e
                        .gpu_slots
                        .first()
                        .map(|&d| e.node.devices[d].model.to_string())
                        .unwrap_or_else(|| "GPU".into());
                    format!(
                        "the largest node, {}, has {}×{model}, {} MIG instances, {} CPUs",
                        e.node.name,
                        e.gpu_slots.len(),
                        e.mig_exists.count_ones(),
                        e.node.cpus_milli / 1000
                    )
                })
                .unwrap_or_else(|| "the cluster has no nodes".into());
            return Err(Infeasible::NoNode { need, largest });
        }
        Err(Infeasible::TooFewNodes { need, replicas_that_fit: fit })
    }
}
