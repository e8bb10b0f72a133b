//! Builders for scenario and property tests of the scheduling core.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpool_core::job::{LabelExpr, LabelOp};
use gpool_core::node::Labels;
use gpool_core::{
    Device, DeviceKind, GpuRequest, JobId, JobSpec, MigInstance, MigProfile, Node, NodeId, Plan, Policy, QueueConfig,
    Snapshot, StopOutcome, Time,
};

pub const GIB: u64 = 1024;

/// A cluster under test: a snapshot plus name lookups.
pub struct Cluster {
    pub snap: Snapshot,
    next_id: u64,
}

impl Cluster {
    pub fn new(policy: &str) -> Cluster {
        Cluster { snap: Snapshot::new(Policy::by_name(policy).expect("preset")), next_id: 1 }
    }

    pub fn with_policy(policy: Policy) -> Cluster {
        Cluster { snap: Snapshot::new(policy), next_id: 1 }
    }

    /// `count` GPUs of `model` (e.g. "H100-80GB"), one NVLink island.
    pub fn node(mut self, name: &str, count: u32, model: &str) -> Cluster {
        let mem = model_memory(model);
        self.snap.add_node(Node::with_gpus(name, count, model, mem)).expect("node");
        self
    }

    pub fn node_with(mut self, node: Node) -> Cluster {
        self.snap.add_node(node).expect("node");
        self
    }

    /// A node whose GPUs are split into NVLink islands of `island` GPUs each.
    pub fn islands(mut self, name: &str, count: u32, island: u32, model: &str) -> Cluster {
        let mut n = Node::with_gpus(name, count, model, model_memory(model));
        for d in &mut n.devices {
            d.nvlink_group = Some(d.index / island);
            d.numa_node = Some(d.index / island);
        }
        self.snap.add_node(n).expect("node");
        self
    }

    pub fn labels(mut self, name: &str, labels: &[(&str, &str)]) -> Cluster {
        let id = self.id(name);
        let mut n = self.snap.node(id).expect("node").clone();
        for (k, v) in labels {
            n.labels.insert(k.to_string(), v.to_string());
        }
        self.snap.replace_node(id, n).expect("relabel");
        self
    }

    /// One H100 with MIG on, partitioned into the given profiles.
    pub fn mig_node(mut self, name: &str, profiles: &[&str]) -> Cluster {
        let mut n = Node::new(name, 32, 256 * GIB);
        let instances = profiles
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let profile: MigProfile = p.parse().expect("profile");
                MigInstance {
                    memory_mb: u64::from(profile.memory_gb) * 1000 - 200,
                    profile,
                    uuid: Arc::from(format!("MIG-{name}-{i}")),
                    gi_id: Some(i as u32 + 1),
                }
            })
            .collect();
        n.devices.push(Device {
            index: 0,
            uuid: Arc::from(format!("GPU-{name}-0")),
            kind: DeviceKind::NvidiaGpu,
            model: Arc::from("H100-80GB"),
            memory_mb: 80 * GIB,
            nvlink_group: None,
            numa_node: None,
            mig: Some(instances),
        });
        self.snap.add_node(n).expect("node");
        self
    }

    pub fn queue(mut self, name: &str, cohort: Option<&str>, guarantee_gpus: u64, max_gpus: Option<u64>) -> Cluster {
        self.snap.set_queue(QueueConfig {
            name: Arc::from(name),
            cohort: cohort.map(Arc::from),
            guarantee: guarantee_gpus * 1000,
            max: max_gpus.map(|m| m * 1000),
            kind_max: Default::default(),
            spot: None,
            idle_stop: false,
            min_runtime: std::time::Duration::ZERO,
            windows: None,
        });
        self
    }

    /// A queue that starts jobs only in these windows.
    pub fn windowed_queue(mut self, name: &str, windows: gpool_core::windows::QueueWindows) -> Cluster {
        let mut q = QueueConfig::new(name);
        q.windows = Some(Arc::new(windows));
        self.snap.set_queue(q);
        self
    }

    /// A queue with a maximum per accelerator kind (GPUs or chips).
    pub fn kind_queue(mut self, name: &str, max_gpus: Option<u64>, kinds: &[(DeviceKind, u64)]) -> Cluster {
        let mut q = QueueConfig::new(name);
        q.max = max_gpus.map(|m| m * 1000);
        q.kind_max = kinds.iter().map(|(k, n)| (*k, n * 1000)).collect();
        self.snap.set_queue(q);
        self
    }

    pub fn id(&self, node: &str) -> NodeId {
        self.snap.node_id(node).expect("node name")
    }

    pub fn submit(&mut self, job: J) -> JobId {
        let id = JobId(self.next_id);
        self.next_id += 1;
        self.snap.submit(id, job.spec).expect("submit");
        id
    }

    /// Submits and starts a job where the scheduler would put it now.
    pub fn run(&mut self, job: J, now: Time) -> JobId {
        let id = self.submit(job);
        let plan = gpool_core::schedule(&self.snap, now);
        let start =
            plan.starts.iter().find(|s| s.job == id).unwrap_or_else(|| panic!("job {id} did not start: {plan:#?}"));
        self.snap.start(id, start.placement.clone(), now).expect("start");
        id
    }

    pub fn plan(&self, now: Time) -> Plan {
        gpool_core::schedule(&self.snap, now)
    }

    /// Applies a plan the way the simulator does: starts, and preemptions as immediate stops.
    pub fn apply(&mut self, plan: &Plan) {
        for p in &plan.preemptions {
            self.snap.stop(p.victim, plan.now, StopOutcome::Requeue { not_before: Time::MIN }).expect("preempt");
        }
        // A resize restarts the job: it stops now and starts again on its nomination.
        for r in &plan.resizes {
            self.snap.stop(r.job, plan.now, StopOutcome::Requeue { not_before: Time::MIN }).expect("resize");
        }
        for s in &plan.starts {
            self.snap.start(s.job, s.placement.clone(), plan.now).expect("start");
        }
        self.snap.carry_over(plan);
    }

    pub fn finish(&mut self, id: JobId, now: Time) {
        self.snap.stop(id, now, StopOutcome::Finished { success: true }).expect("finish");
    }

    /// Node names a started job landed on, in rank order.
    pub fn nodes_of(&self, plan: &Plan, id: JobId) -> Vec<String> {
        let s = plan.starts.iter().find(|s| s.job == id).unwrap_or_else(|| panic!("job {id} not started: {plan:#?}"));
        s.placement.iter().map(|r| self.snap.node(r.node).map(|n| n.name.to_string()).unwrap_or_default()).collect()
    }

    /// Device indices (or MIG UUIDs) of a started job's first replica.
    pub fn devices_of(&self, plan: &Plan, id: JobId) -> Vec<String> {
        let s = plan.starts.iter().find(|s| s.job == id).unwrap_or_else(|| panic!("job {id} not started"));
        let (gpus, mig) = self.snap.replica_devices(&s.placement[0]);
        gpus.iter().map(|d| d.index.to_string()).chain(mig.iter().map(|(_, m)| format!("{}", m.profile))).collect()
    }

    pub fn reason(&self, plan: &Plan, id: JobId) -> String {
        plan.reasons()
            .get(&id)
            .map(|r| r.to_string())
            .or_else(|| plan.others.as_ref().map(|r| r.to_string()))
            .unwrap_or_else(|| "started or unknown".into())
    }
}

fn model_memory(model: &str) -> u64 {
    let digits: String = model.split('-').nth(1).unwrap_or("").chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse::<u64>().map(|g| g * GIB).unwrap_or(24 * GIB)
}

/// A job under construction.
#[derive(Clone)]
pub struct J {
    pub spec: JobSpec,
}

pub fn job(user: &str) -> J {
    J { spec: JobSpec::new(user, Time::from_secs(0)) }
}

impl J {
    pub fn gpus(mut self, n: u32) -> J {
        self.spec.replica.gpu = GpuRequest::Gpus { count: n };
        self
    }
    pub fn mig(mut self, profile: &str) -> J {
        self.spec.replica.gpu = GpuRequest::Mig { profile: profile.parse().expect("profile"), count: 1 };
        self
    }
    pub fn gpu_memory_gb(mut self, gb: u64) -> J {
        self.spec.replica.gpu = GpuRequest::Memory { min_mb: gb * 1000, count: 1 };
        self
    }
    /// A share of one GPU: `milli` thousandths and/or `memory_gb` of its memory.
    pub fn share(mut self, milli: Option<u16>, memory_gb: Option<u64>) -> J {
        self.spec.replica.gpu = GpuRequest::Share { milli, memory_mb: memory_gb.map(|g| g * 1000) };
        self
    }
    pub fn model(mut self, m: &str) -> J {
        self.spec.replica.gpu_model = Some(Arc::from(m));
        self
    }
    pub fn cpus(mut self, c: u64) -> J {
        self.spec.replica.cpus_milli = c * 1000;
        self
    }
    pub fn memory_gb(mut self, g: u64) -> J {
        self.spec.replica.memory_mb = g * GIB;
        self
    }
    pub fn replicas(mut self, r: u32) -> J {
        self.spec.replicas = r;
        self
    }
    /// An elastic job of `min` to `max` replicas.
    pub fn elastic(mut self, min: u32, max: u32) -> J {
        self.spec.replicas = min;
        self.spec.max_replicas = Some(max);
        self
    }
    pub fn priority(mut self, p: i32) -> J {
        self.spec.priority = p;
        self
    }
    pub fn preemptible(mut self) -> J {
        self.spec.preemptible = true;
        self
    }
    pub fn queue(mut self, q: &str) -> J {
        self.spec.queue = Arc::from(q);
        self
    }
    pub fn team(mut self, t: &str) -> J {
        self.spec.team = Arc::from(t);
        self
    }
    pub fn at(mut self, secs: i64) -> J {
        self.spec.submit_time = Time::from_secs(secs);
        self
    }
    pub fn begin(mut self, at: Time) -> J {
        self.spec.begin = Some(at);
        self
    }
    pub fn estimate(mut self, secs: u64) -> J {
        self.spec.estimate = Some(Duration::from_secs(secs));
        self
    }
    /// Run times (seconds) of the jobs like it, as a shell learns them.
    pub fn similar(mut self, secs: &[u64]) -> J {
        self.spec.similar_runs = Some(secs.iter().map(|s| s * 1000).collect());
        self
    }
    pub fn limit(mut self, secs: u64) -> J {
        self.spec.time_limit = Some(Duration::from_secs(secs));
        self
    }
    /// A task of array `of` that runs at most `limit` tasks at once.
    pub fn array(mut self, of: JobId, limit: u32) -> J {
        self.spec.array = Some(gpool_core::ArrayLimit { of, limit });
        self
    }

    pub fn after(mut self, dep: JobId) -> J {
        self.spec.dependencies.push(dep);
        self
    }
    pub fn after_any(mut self, dep: JobId) -> J {
        self.spec.after_any.push(dep);
        self
    }
    pub fn after_not_ok(mut self, dep: JobId) -> J {
        self.spec.after_not_ok.push(dep);
        self
    }
    pub fn selector(mut self, k: &str, v: &str) -> J {
        self.spec.node_selector.insert(k.into(), v.into());
        self
    }
    pub fn spot(mut self, spot: gpool_core::SpotPolicy) -> J {
        self.spec.spot = spot;
        self
    }
    pub fn prefer(mut self, weight: u32, k: &str, v: &str) -> J {
        self.spec.affinity.preferred.push((weight, LabelExpr { key: k.into(), op: LabelOp::In(vec![v.into()]) }));
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> J {
        self.spec.labels.insert(k.into(), v.into());
        self
    }
    pub fn avoid(mut self, k: &str, v: &str) -> J {
        let mut sel = Labels::new();
        sel.insert(k.into(), v.into());
        self.spec.anti_affinity.push(sel);
        self
    }
}

pub fn t(secs: i64) -> Time {
    Time::from_secs(secs)
}

/// Counts of something per key, for assertions.
pub fn count<K: Ord>(items: impl IntoIterator<Item = K>) -> BTreeMap<K, usize> {
    let mut m = BTreeMap::new();
    for k in items {
        *m.entry(k).or_default() += 1;
    }
    m
}

impl Cluster {
    /// `count` accelerators of `kind` and `model` on one node.
    pub fn node_of_kind(mut self, name: &str, count: u32, model: &str, kind: DeviceKind) -> Cluster {
        let mut n = Node::with_gpus(name, count, model, model_memory(model));
        for d in &mut n.devices {
            d.kind = kind;
        }
        self.snap.add_node(n).expect("node");
        self
    }
}

impl J {
    /// Only accelerators of this kind (`amd.com/gpu` is `DeviceKind::AmdGpu`).
    pub fn kind(mut self, k: DeviceKind) -> J {
        self.spec.replica.gpu_kind = Some(k);
        self
    }
}

impl J {
    /// A soft deadline.
    pub fn deadline(mut self, at: Time) -> J {
        self.spec.deadline = Some(at);
        self
    }
}

impl Cluster {
    /// A node whose GPUs idle at `idle` W and draw up to `max` W each.
    pub fn powered(mut self, name: &str, count: u32, idle: u32, max: u32) -> Cluster {
        let mut n = Node::with_gpus(name, count, "H100-80GB", 80 * GIB);
        n.power = Some(gpool_core::power::NodePower { idle_watts: idle, max_watts: max });
        self.snap.add_node(n).expect("node");
        self
    }
}

impl J {
    /// What each of its GPUs is expected to draw.
    pub fn watts(mut self, w: u32) -> J {
        self.spec.watts_per_gpu = Some(w);
        self
    }
}
