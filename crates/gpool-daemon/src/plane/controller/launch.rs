//! Launch: from a placement the pass chose to the replicas' start orders:
//! devices to `CUDA_VISIBLE_DEVICES`, the job's environment, torchrun's
//! variables (`WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT`, …) and the
//! rendezvous port of a gang.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpool_api as api;
use gpool_core::{DeviceKind, JobId, NodeId, Placement, Time};

use super::docs::{ReplicaDoc, RunDoc};
use super::nodes::NodeLink;
use super::timers::Timer;
use super::{Controller, Order};
use crate::protocol::{Launch, ReplicaKey};

impl Controller {
    pub(super) fn start(&mut self, id: u64, placement: Placement, now: i64) {
        if let Err(e) = self.snap.start(JobId(id), placement.clone(), Time::from_millis(now)) {
            tracing::error!("internal error: the plan's start of job {id} was refused: {e}");
            return;
        }
        let names: Vec<String> =
            placement.iter().map(|r| self.snap.node(r.node).map_or_else(String::new, |n| n.name.to_string())).collect();
        // torchrun's rendezvous: rank 0's node, and a port on it.
        let world = placement.len() as u32;
        let master = placement.first().map(|r| r.node);
        let spread = placement.iter().any(|r| Some(r.node) != master);
        let master_addr = master.and_then(|m| self.links.get(&m)).map_or_else(
            || "127.0.0.1".to_string(),
            |l| if l.is_local() { "127.0.0.1".into() } else { l.doc.addr.clone() },
        );
        let master_port = match (world > 1, spread, master) {
            (false, _, _) | (_, _, None) => None,
            // All replicas here: any free port of this host.
            (true, false, Some(m)) if self.links.get(&m).is_some_and(NodeLink::is_local) => (self.cfg.local_port)(),
            // Across nodes (or on a remote node): one from the range not used by another gang on that node.
            (true, _, Some(m)) => self.reserve_remote_port(m, id),
        };
        // A service replica listens on `PORT`: any free one here, else one from the range on its node.
        let service = self.jobs.get(&id).is_some_and(|d| super::services::is_service_replica(&d.spec));
        let service_port = match (service, master) {
            (true, Some(m)) => self.reserve_port(m, id),
            _ => None,
        };
        let node_rank: BTreeMap<NodeId, usize> = {
            let mut seen: Vec<NodeId> = Vec::new();
            for r in &placement {
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
                let addr =
                    self.links.get(n).map(|l| if l.is_local() { "127.0.0.1".into() } else { l.doc.addr.clone() });
                (*i, addr.unwrap_or_default())
            })
            .collect();
        hosts.sort();
        let hosts: Vec<String> = hosts.into_iter().map(|(_, a)| a).collect();
        // The owner's login to the image's registry, for this start order only.
        let registry_auth = self
            .jobs
            .get(&id)
            .and_then(|d| d.spec.image.as_deref().and_then(|i| self.registries.auth(&d.user, i)))
            .map(crate::protocol::Secret);
        let Some(doc) = self.jobs.get_mut(&id) else { return };
        self.allocations += 1;
        self.wait.observe((now - doc.queued_ms.unwrap_or(doc.submitted_ms)).max(0) as f64 / 1000.0);
        doc.attempt += 1;
        doc.state = api::JobState::Running;
        doc.started_ms.get_or_insert(now);
        doc.not_before_ms = None;
        let attempt = doc.attempt;
        let mut replicas = Vec::new();
        let mut starts = Vec::new();
        let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
        // The agent fills in what only the node knows (its PATH, HOME, checkpoint directory, …).
        let cwd = doc.spec.workdir.clone().map_or_else(PathBuf::new, PathBuf::from);
        for (rank, r) in placement.iter().enumerate() {
            let (gpus, mig) = self.snap.replica_devices(r);
            let gpu_idx: Vec<u32> = gpus.iter().map(|d| d.index).collect();
            let mig_uuids: Vec<String> = mig.iter().map(|(_, m)| m.uuid.to_string()).collect();
            let device_uuids: Vec<String> =
                gpus.iter().map(|d| d.uuid.to_string()).chain(mig_uuids.iter().cloned()).collect();
            let of_kind =
                |k: DeviceKind| gpus.iter().filter(|d| d.kind == k).map(|d| d.index.to_string()).collect::<Vec<_>>();
            let visible =
                if mig_uuids.is_empty() { of_kind(DeviceKind::NvidiaGpu).join(",") } else { mig_uuids.join(",") };
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
            set("GPOOL_JOB_ID", id.to_string());
            set("GPOOL_JOB_NAME", doc.name.clone());
            set("GPOOL_ATTEMPT", attempt.to_string());
            set("GPOOL_RESTART_COUNT", doc.restarts.to_string());
            set("GPOOL_USER", doc.user.clone());
            if let Some(p) = service_port {
                set("PORT", p.to_string());
            }
            if let Some(share) = r.share {
                let mode = self.snap.node(r.node).map_or(gpool_core::GpuSharing::TimeSlicing, |n| n.sharing);
                let view = api::GpuShareView { milli: share.milli, memory_mb: share.memory_mb };
                for (k, v) in super::gpu_shares::share_env(&view, mode) {
                    set(k, v);
                }
            }
            if world > 1 {
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
                user: Some(self.cfg.identities.account_of(&doc.user).to_string()),
                // The node resolves the account itself.
                run_as: None,
                cpus_milli: r.cpus_milli,
                memory_mb: r.memory_mb,
                confine: None,
                image: doc.spec.image.clone(),
                registry_auth: registry_auth.clone(),
                pull: None,
            };
            let key = ReplicaKey { job: id, attempt, rank: rank as u32 };
            starts.push((r.node, Order::Start { key, launch: Box::new(launch), devices: device_uuids }));
        }
        let spread_port = master_port
            .filter(|_| master.is_some_and(|m| !self.links.get(&m).is_some_and(NodeLink::is_local) || spread));
        // The nodes of the run it replaces: their output may still be on its way.
        if let Some(old) = &doc.run {
            for r in &old.replicas {
                if !doc.earlier_nodes.contains(&r.node) {
                    doc.earlier_nodes.push(r.node.clone());
                }
            }
            let over = doc.earlier_nodes.len().saturating_sub(super::docs::EARLIER_NODES);
            doc.earlier_nodes.drain(..over);
        }
        doc.run = Some(RunDoc {
            attempt,
            started_ms: now,
            replicas,
            stop: None,
            kill_at_ms: None,
            master_port: spread_port,
            port: service_port,
        });
        if let Some(limit) = self.snap.job(JobId(id)).and_then(|j| j.spec.time_limit) {
            self.timers.at(now + limit.as_millis() as i64, Timer::TimeLimit { job: id, attempt });
        }
        self.out.touch(id);
        let devices = doc
            .run
            .as_ref()
            .map(|r| {
                r.replicas
                    .iter()
                    .map(|x| format!("{}:{}", x.node, x.cuda_visible_devices))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let remote = starts.iter().any(|(n, _)| self.links.get(n).is_some_and(|l| !l.is_local()));
        for (node, order) in starts {
            super::orders::order(&mut self.links, &mut self.out, node, order);
        }
        if remote {
            self.timers.at(now + self.start_bound_ms(), Timer::Unseen { job: id, attempt });
        }
        self.event(
            now,
            Some(id),
            "started",
            format!("job {id} attempt {attempt} started on {devices} (node:CUDA_VISIBLE_DEVICES)"),
        );
    }
}

impl Controller {
    /// A port from the range that no other job uses on `node`, reserved for job `id` until its run ends.
    fn reserve_remote_port(&mut self, node: NodeId, id: u64) -> Option<u16> {
        let port = self.cfg.master_ports.clone().find(|p| !self.master_ports.contains_key(&(node, *p)))?;
        self.master_ports.insert((node, port), id);
        Some(port)
    }

    /// A port for a service replica on `node`: any free one on this host's node, else one from the range.
    fn reserve_port(&mut self, node: NodeId, id: u64) -> Option<u16> {
        if self.links.get(&node).is_some_and(NodeLink::is_local) {
            (self.cfg.local_port)()
        } else {
            self.reserve_remote_port(node, id)
        }
    }
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
