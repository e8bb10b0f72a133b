//! The controller's side of GPU health: GPUs degraded for heat go into the
//! snapshot (placement avoids them while it can), and a gang whose
//! straggler was found and that asked for it (`onStraggler: requeue`) is
//! stopped with its grace period and placed again away from the slow GPU.

use gpool_api as api;
use gpool_core::heat::HeatChange;
use gpool_core::straggler::Straggler;
use std::collections::BTreeMap;

use gpool_core::{JobId, NodeId, Snapshot};
use gpool_store::{Store, Write};

use super::acts::Acts;
use super::docs::{JobDoc, Stop};
use super::outbox::Outbox;
use crate::plane::telemetry::Telemetry;

/// Where the degraded marks are kept: a JSON list of (node, GPU, why).
const DEGRADED_KEY: &str = "degraded_gpus";

/// A node's GPUs changed heat state: say so, and mark them in the snapshot.
pub(super) fn on_heat(
    node: NodeId,
    name: &str,
    changes: &[(u32, HeatChange)],
    telemetry: &Telemetry,
    snap: &mut Snapshot,
    out: &mut Outbox,
    now: i64,
) {
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
        out.event_of(now, None, None, kind, said);
    }
    let degraded = telemetry.degraded_on(name);
    if snap.set_degraded_gpus(node, &degraded).is_ok() {
        out.reschedule();
    }
    // Kept, so that a restarted control plane (or a standby taking over)
    // does not give new gangs a hot GPU until it is hot for 10 s again.
    if let Ok(all) = serde_json::to_string(&telemetry.all_degraded()) {
        out.write(Write::PutMeta(DEGRADED_KEY.into(), all));
    }
}

/// Marks again the GPUs the last control plane left degraded, on the
/// nodes it knows (a node that comes back later starts unmarked).
pub(super) fn restore_degraded(
    store: &mut dyn Store,
    telemetry: &mut Telemetry,
    snap: &mut Snapshot,
) -> anyhow::Result<()> {
    let Some(text) = store.meta(DEGRADED_KEY)? else { return Ok(()) };
    let Ok(marks) = serde_json::from_str::<Vec<(String, u32, String)>>(&text) else {
        tracing::warn!("the kept degraded GPUs do not read; they start trusted: {text:.200}");
        return Ok(());
    };
    let mut nodes = std::collections::BTreeSet::new();
    for (node, gpu, why) in marks {
        if snap.node_id(&node).is_some() {
            telemetry.restore_degraded(&node, gpu, why);
            nodes.insert(node);
        }
    }
    for name in nodes {
        if let Some(id) = snap.node_id(&name) {
            let _ = snap.set_degraded_gpus(id, &telemetry.degraded_on(&name));
        }
    }
    Ok(())
}

/// Gangs with a straggler now: those that asked are requeued away from it.
pub(super) fn on_stragglers(found: &[(u64, Straggler)], jobs: &BTreeMap<u64, JobDoc>, snap: &mut Snapshot) -> Acts {
    let mut acts = Acts::default();
    for (id, s) in found {
        let asked = jobs.get(id).is_some_and(|d| {
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
        if let (Some(node), Some(gpu)) = (snap.node_id(&s.node), s.gpu) {
            let _ = snap.set_avoid(JobId(*id), &[(node, gpu)]);
        }
        acts.stop(*id, Stop::Straggler { device: s.device.clone() });
        acts.event(
            Some(*id),
            "straggler_requeue",
            format!("job {id}: {s}; stopping it to place it again away from {} (onStraggler: requeue)", s.device),
        );
    }
    acts
}
