//! Launch: from a placement the pass chose to the replicas' start orders:
//! devices to `CUDA_VISIBLE_DEVICES`, the job's environment, torchrun's
//! variables (`WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT`, …) and the
//! rendezvous port of a gang.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpool_api as api;
use gpool_core::{DeviceKind, NodeId, Placement, Snapshot};

use super::Order;
use super::docs::{JobDoc, ReplicaDoc, RunDoc};
use super::links::NodeLink;
use crate::protocol::{Launch, ReplicaKey};

/// The ports jobs are given: `MASTER_PORT`s of gangs and `PORT`s of service
/// replicas, reserved per node until the run ends.
pub(super) struct Ports {
    /// The range remote nodes' ports come from (`Config::master_ports`).
    range: std::ops::Range<u16>,
    /// A free port of this host (`Config::local_port`).
    local: fn() -> Option<u16>,
    /// Ports in use: (node, port) → job.
    used: BTreeMap<(NodeId, u16), u64>,
}

impl Ports {
    pub(super) fn new(range: std::ops::Range<u16>, local: fn() -> Option<u16>) -> Ports {
        Ports { range, local, used: BTreeMap::new() }
    }

    /// A port from the range that no other job uses on `node`, reserved for job `id` until its run ends.
    fn reserve_remote(&mut self, node: NodeId, id: u64) -> Option<u16> {
        let port = self.range.clone().find(|p| !self.used.contains_key(&(node, *p)))?;
        self.used.insert((node, port), id);
        Some(port)
    }

    /// A port on `node` for job `id`: any free one on this host's node (`local`), else one from the range.
    fn reserve(&mut self, node: NodeId, local: bool, id: u64) -> Option<u16> {
        if local { (self.local)() } else { self.reserve_remote(node, id) }
    }

    /// A restarted control plane takes back the ports its runs hold.
    pub(super) fn restored(&mut self, node: NodeId, port: u16, id: u64) {
        self.used.insert((node, port), id);
    }

    /// Job `id`'s run ended: its ports are free.
    pub(super) fn release(&mut self, id: u64) {
        self.used.retain(|_, j| *j != id);
    }
}

/// What a start reads besides the job: the snapshot (devices, sharing
/// modes), the nodes' links (addresses) and the owner's account on them.
pub(super) struct Ground<'a> {
    pub(super) snap: &'a Snapshot,
    pub(super) links: &'a BTreeMap<NodeId, NodeLink>,
    pub(super) identities: &'a crate::plane::identity::Identities,
    /// The owner's login to the image's registry, for this start order only.
    pub(super) registry_auth: Option<crate::protocol::Secret>,
}

/// A run about to start: its record and each replica's start order.
pub(super) struct Started {
    pub(super) run: RunDoc,
    pub(super) starts: Vec<(NodeId, Order)>,
}

/// The replicas' start orders and the run's record for `doc`'s next attempt
/// (already counted in `doc.attempt`) on `placement`.
pub(super) fn plan(doc: &JobDoc, placement: &Placement, ground: &Ground<'_>, ports: &mut Ports, now: i64) -> Started {
    let (snap, links, id, attempt) = (ground.snap, ground.links, doc.id, doc.attempt);
    let names: Vec<String> =
        placement.iter().map(|r| snap.node(r.node).map_or_else(String::new, |n| n.name.to_string())).collect();
    // torchrun's rendezvous: rank 0's node, and a port on it.
    let world = placement.len() as u32;
    let master = placement.first().map(|r| r.node);
    let spread = placement.iter().any(|r| Some(r.node) != master);
    let is_local = |n: NodeId| links.get(&n).is_some_and(NodeLink::is_local);
    let master_addr = master.and_then(|m| links.get(&m)).map_or_else(
        || "127.0.0.1".to_string(),
        |l| if l.is_local() { "127.0.0.1".into() } else { l.doc.addr.clone() },
    );
    // An elastic job gets torchrun's variables at every size, one included (it may grow).
    let elastic = doc.spec.replicas.is_elastic();
    let master_port = match (world > 1 || elastic, spread, master) {
        (false, _, _) | (_, _, None) => None,
        // All replicas here: any free port of this host.
        (true, false, Some(m)) if is_local(m) => (ports.local)(),
        // Across nodes (or on a remote node): one from the range not used by another gang on that node.
        (true, _, Some(m)) => ports.reserve_remote(m, id),
    };
    // A service replica listens on `PORT`: any free one here, else one from the range on its node.
    let service_port = match (super::services::is_service_replica(&doc.spec), master) {
        (true, Some(m)) => ports.reserve(m, is_local(m), id),
        _ => None,
    };
    let node_rank: BTreeMap<NodeId, usize> = {
        let mut seen: Vec<NodeId> = Vec::new();
        for r in placement {
            if !seen.contains(&r.node) {
                seen.push(r.node);
            }
        }
        seen.into_iter().enumerate().map(|(i, n)| (n, i)).collect()
    };
    // Each host's address, in node-rank order (a multi-host TPU slice's workers).
    let mut hosts: Vec<(usize, String)> = node_rank
        .iter()
        .map(|(n, i)| {
            let addr = links.get(n).map(|l| if l.is_local() { "127.0.0.1".into() } else { l.doc.addr.clone() });
            (*i, addr.unwrap_or_default())
        })
        .collect();
    hosts.sort();
    let hosts: Vec<String> = hosts.into_iter().map(|(_, a)| a).collect();
    // The run's nodes by name, in node-rank order (Slurm's node list, unabridged).
    let mut by_rank: Vec<(usize, String)> =
        node_rank.iter().map(|(n, i)| (*i, snap.node(*n).map_or_else(String::new, |x| x.name.to_string()))).collect();
    by_rank.sort();
    let node_list = by_rank.into_iter().map(|(_, n)| n).collect::<Vec<_>>().join(",");
    let mut replicas = Vec::new();
    let mut starts = Vec::new();
    let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
    // The agent fills in what only the node knows (its PATH, HOME, checkpoint directory, …).
    let cwd = doc.spec.workdir.clone().map_or_else(PathBuf::new, PathBuf::from);
    for (rank, r) in placement.iter().enumerate() {
        let (gpus, mig) = snap.replica_devices(r);
        let gpu_idx: Vec<u32> = gpus.iter().map(|d| d.index).collect();
        let mig_uuids: Vec<String> = mig.iter().map(|(_, m)| m.uuid.to_string()).collect();
        let device_uuids: Vec<String> =
            gpus.iter().map(|d| d.uuid.to_string()).chain(mig_uuids.iter().cloned()).collect();
        let of_kind =
            |k: DeviceKind| gpus.iter().filter(|d| d.kind == k).map(|d| d.index.to_string()).collect::<Vec<_>>();
        let visible = if mig_uuids.is_empty() { of_kind(DeviceKind::NvidiaGpu).join(",") } else { mig_uuids.join(",") };
        let (amd, tpu) = (of_kind(DeviceKind::AmdGpu), of_kind(DeviceKind::Tpu));
        let local_rank = {
            let c = per_node.entry(r.node).or_default();
            *c += 1;
            *c - 1
        };
        let mut env: BTreeMap<String, String> = doc.spec.env.clone();
        // Which run's directory a node gives the job: the control plane's word only.
        env.remove(crate::protocol::PIPELINE_RUN_ENV);
        if let Some(p) = &doc.pipeline {
            env.insert(crate::protocol::PIPELINE_RUN_ENV.into(), p.run.to_string());
        }
        let mut set = |k: &str, v: String| {
            env.insert(k.to_string(), v);
        };
        set("NVIDIA_VISIBLE_DEVICES", if visible.is_empty() { "void".into() } else { visible.clone() });
        if amd.is_empty() {
            set("CUDA_VISIBLE_DEVICES", visible.clone());
        } else {
            // ROCr sees the job's GPUs by driver index; HIP (which also reads
            // CUDA_VISIBLE_DEVICES) numbers what ROCr shows it from 0.
            let local: Vec<String> = (0..amd.len()).map(|i| i.to_string()).collect();
            set("ROCR_VISIBLE_DEVICES", amd.join(","));
            set("HIP_VISIBLE_DEVICES", local.join(","));
            set("CUDA_VISIBLE_DEVICES", local.join(","));
        }
        for (k, v) in tpu_env(&tpu) {
            set(k, v);
        }
        if !tpu.is_empty() && node_rank.len() > 1 {
            // A multi-host slice: libtpu finds its peers by these (one worker per host).
            set("TPU_WORKER_ID", node_rank.get(&r.node).copied().unwrap_or(0).to_string());
            set("TPU_WORKER_HOSTNAMES", hosts.join(","));
        }
        // What Slurm would set, so that scripts written for sbatch read what they expect (docs/slurm.md).
        for (k, v) in [
            ("SLURM_JOB_ID", id.to_string()),
            ("SLURM_JOB_NAME", doc.name.clone()),
            ("SLURM_JOB_USER", doc.user.clone()),
            ("SLURM_JOB_PARTITION", doc.queue.clone()),
            ("SLURM_NTASKS", world.to_string()),
            ("SLURM_NPROCS", world.to_string()),
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_LOCALID", local_rank.to_string()),
            ("SLURM_NODEID", node_rank.get(&r.node).copied().unwrap_or(0).to_string()),
            ("SLURM_NNODES", node_rank.len().to_string()),
            ("SLURM_JOB_NUM_NODES", node_rank.len().to_string()),
            ("SLURM_JOB_NODELIST", node_list.clone()),
            ("SLURM_GPUS_ON_NODE", (gpu_idx.len() + mig_uuids.len()).to_string()),
            ("SLURM_RESTART_COUNT", doc.restarts.to_string()),
        ] {
            set(k, v);
        }
        if r.cpus_milli > 0 {
            set("SLURM_CPUS_PER_TASK", r.cpus_milli.div_ceil(1000).to_string());
        }
        if let Some(dir) = &doc.spec.workdir {
            set("SLURM_SUBMIT_DIR", dir.clone());
        }
        if let Some(a) = &doc.array {
            let (min, max) = (a.min_index, a.max_index);
            for (k, v) in [
                ("GPOOL_ARRAY_JOB_ID", a.job.to_string()),
                ("GPOOL_ARRAY_TASK_ID", a.index.to_string()),
                ("SLURM_ARRAY_JOB_ID", a.job.to_string()),
                ("SLURM_ARRAY_TASK_ID", a.index.to_string()),
                ("SLURM_ARRAY_TASK_COUNT", a.tasks.to_string()),
                ("SLURM_ARRAY_TASK_MIN", min.to_string()),
                ("SLURM_ARRAY_TASK_MAX", max.to_string()),
            ] {
                set(k, v);
            }
        }
        set("GPOOL_JOB_ID", id.to_string());
        set("GPOOL_JOB_NAME", doc.name.clone());
        set("GPOOL_ATTEMPT", attempt.to_string());
        set("GPOOL_RESTART_COUNT", doc.restarts.to_string());
        set("GPOOL_USER", doc.user.clone());
        if let Some(p) = service_port {
            set("PORT", p.to_string());
        }
        if let Some(share) = r.share {
            let mode = snap.node(r.node).map_or(gpool_core::GpuSharing::TimeSlicing, |n| n.sharing);
            let view = api::GpuShareView { milli: share.milli, memory_mb: share.memory_mb };
            for (k, v) in super::gpu_shares::share_env(&view, mode) {
                set(k, v);
            }
        }
        if elastic {
            // torchrun reads its flags from PET_* (`--nnodes=MIN:MAX`, a c10d
            // rendezvous with an id that outlives resizes): one agent per replica.
            let gpus_here = gpu_idx.len() + mig_uuids.len();
            set("PET_NNODES", format!("{}:{}", doc.spec.replicas.min, doc.spec.replicas.max));
            set("PET_NPROC_PER_NODE", gpus_here.max(1).to_string());
            set("PET_RDZV_BACKEND", "c10d".into());
            set("PET_RDZV_ID", format!("gpool-{id}"));
            // Each incarnation starts all its replicas at once: the rendezvous
            // need not wait torchrun's default 30 s for more once MIN joined.
            set("PET_RDZV_CONF", "last_call_timeout=5".into());
            if let Some(p) = master_port {
                set("PET_RDZV_ENDPOINT", format!("{master_addr}:{p}"));
            }
            set("GPOOL_REPLICAS_MIN", doc.spec.replicas.min.to_string());
            set("GPOOL_REPLICAS_MAX", doc.spec.replicas.max.to_string());
        }
        if world > 1 || elastic {
            set("WORLD_SIZE", world.to_string());
            set("RANK", rank.to_string());
            set("LOCAL_RANK", local_rank.to_string());
            set("LOCAL_WORLD_SIZE", placement.iter().filter(|p| p.node == r.node).count().to_string());
            set("NODE_RANK", node_rank.get(&r.node).copied().unwrap_or(0).to_string());
            set("NNODES", node_rank.len().to_string());
            set("MASTER_ADDR", master_addr.clone());
            if let Some(p) = master_port {
                set("MASTER_PORT", p.to_string());
            }
        }
        replicas.push(ReplicaDoc {
            rank: rank as u32,
            node: names[rank].clone(),
            gpus: gpu_idx,
            mig: mig_uuids,
            cpus_milli: r.cpus_milli,
            memory_mb: r.memory_mb,
            cuda_visible_devices: visible,
            gpu_share: r.share.map(|s| api::GpuShareView { milli: s.milli, memory_mb: s.memory_mb }),
            exit: None,
            lost: false,
            seen: false,
        });
        let launch = Launch {
            argv: doc.spec.command.argv(),
            env: env.into_iter().collect(),
            cwd: cwd.clone(),
            stdout: PathBuf::new(),
            stderr: PathBuf::new(),
            lease: None,
            log_limit: None,
            user: Some(ground.identities.account_of(&doc.user).to_string()),
            // The node resolves the account itself.
            run_as: None,
            cpus_milli: r.cpus_milli,
            memory_mb: r.memory_mb,
            confine: None,
            image: doc.spec.image.clone(),
            registry_auth: ground.registry_auth.clone(),
            pull: None,
            // Checked at submission.
            tty_grace_ms: crate::plane::convert::detach_grace(&doc.spec).ok().flatten().map(|g| g.as_millis() as u64),
        };
        let key = ReplicaKey { job: id, attempt, rank: rank as u32 };
        starts.push((r.node, Order::Start { key, launch: Box::new(launch), devices: device_uuids }));
    }
    let spread_port = master_port.filter(|_| master.is_some_and(|m| !is_local(m) || spread));
    let run = RunDoc {
        attempt,
        started_ms: now,
        replicas,
        stop: None,
        kill_at_ms: None,
        master_port: spread_port,
        port: service_port,
    };
    Started { run, starts }
}

/// A TCP port free right now, for `MASTER_PORT`.
pub fn free_local_port() -> Option<u16> {
    std::net::TcpListener::bind(("127.0.0.1", 0)).ok().and_then(|l| l.local_addr().ok()).map(|a| a.port())
}

/// What pins one process to some of a TPU VM's chips (libtpu's variables):
/// the chips, the process as a single-host slice of them, and its bounds
/// (`1,1,1` one chip, `1,2,1` two, `2,2,1` four, `2,2,2` eight). Nothing for
/// a replica without TPU chips.
pub(crate) fn tpu_env(chips: &[String]) -> Vec<(&'static str, String)> {
    if chips.is_empty() {
        return Vec::new();
    }
    let bounds = match chips.len() {
        1 => "1,1,1",
        2 => "1,2,1",
        4 => "2,2,1",
        8 => "2,2,2",
        _ => "",
    };
    let mut env = vec![("TPU_VISIBLE_CHIPS", chips.join(",")), ("TPU_PROCESS_BOUNDS", "1,1,1".to_string())];
    if !bounds.is_empty() {
        env.push(("TPU_CHIPS_PER_PROCESS_BOUNDS", bounds.to_string()));
    }
    env
}
