//! The controller's side of GPU health: GPUs degraded for heat go into the
//! snapshot (placement avoids them while it can), and a gang whose
//! straggler was found and that asked for it (`onStraggler: requeue`) is
//! stopped with its grace period and placed again away from the slow GPU.

use gpool_api as api;
use gpool_core::heat::HeatChange;
use gpool_core::straggler::Straggler;
use gpool_core::{JobId, NodeId};
use gpool_store::Write;

use super::Controller;
use super::docs::Stop;

/// Where the degraded marks are kept: a JSON list of (node, GPU, why).
const DEGRADED_KEY: &str = "degraded_gpus";

impl Controller {
    /// A node's GPUs changed heat state: say so, and mark them in the snapshot.
    pub(super) fn on_heat(&mut self, node: NodeId, name: &str, changes: &[(u32, HeatChange)], now: i64) {
        if changes.is_empty() {
            return;
        }
        for (gpu, change) in changes {
            let (kind, said) = match change {
                HeatChange::Degraded(why) => (
                    "gpu_degraded",
                    format!("GPU {gpu} of node {name} is degraded: {why}; new gangs avoid it while another fit exists"),
                ),
                HeatChange::Recovered => {
                    ("gpu_recovered", format!("GPU {gpu} of node {name} stayed cool: new work may use it again"))
                }
            };
            self.event(now, None, kind, said);
        }
        let degraded = self.telemetry.degraded_on(name);
        if self.snap.set_degraded_gpus(node, &degraded).is_ok() {
            self.dirty = true;
        }
        // Kept, so that a restarted control plane (or a standby taking over)
        // does not give new gangs a hot GPU until it is hot for 10 s again.
        if let Ok(all) = serde_json::to_string(&self.telemetry.all_degraded()) {
            self.writes.push(Write::PutMeta(DEGRADED_KEY.into(), all));
        }
    }

    /// Marks again the GPUs the last control plane left degraded, on the
    /// nodes it knows (a node that comes back later starts unmarked).
    pub(super) fn restore_degraded(&mut self) -> anyhow::Result<()> {
        let Some(text) = self.store.meta(DEGRADED_KEY)? else { return Ok(()) };
        let Ok(marks) = serde_json::from_str::<Vec<(String, u32, String)>>(&text) else {
            tracing::warn!("the kept degraded GPUs do not read; they start trusted: {text:.200}");
            return Ok(());
        };
        let mut nodes = std::collections::BTreeSet::new();
        for (node, gpu, why) in marks {
            if self.snap.node_id(&node).is_some() {
                self.telemetry.restore_degraded(&node, gpu, why);
                nodes.insert(node);
            }
        }
        for name in nodes {
            if let Some(id) = self.snap.node_id(&name) {
                let _ = self.snap.set_degraded_gpus(id, &self.telemetry.degraded_on(&name));
            }
        }
        Ok(())
    }

    /// Gangs with a straggler now: those that asked are requeued away from it.
    pub(super) fn on_stragglers(&mut self, found: &[(u64, Straggler)], now: i64) {
        for (id, s) in found {
            let asked = self.jobs.get(id).is_some_and(|d| {
                d.state == api::JobState::Running
                    && d.spec.on_straggler == Some(api::spec::OnStraggler::Requeue)
                    && d.run.as_ref().is_some_and(|r| r.stop.is_none())
            });
            if !asked {
                continue;
            }
            // What the next placement avoids: the straggler's GPU (it holds
            // until the job starts again; the GPU's own degraded mark, if it
            // has one, holds longer and for every job).
            if let (Some(node), Some(gpu)) = (self.snap.node_id(&s.node), s.gpu) {
                let _ = self.snap.set_avoid(JobId(*id), &[(node, gpu)]);
            }
            self.stop_run(*id, Stop::Straggler { device: s.device.clone() }, now);
            self.event(
                now,
                Some(*id),
                "straggler_requeue",
                format!("job {id}: {s}; stopping it to place it again away from {} (onStraggler: requeue)", s.device),
            );
        }
    }
}
