//! MIG layouts that follow the queue: after each pass the controller runs
//! the same planner the simulator does (`gpool_core::mig_planner`) over the
//! GPUs the nodes let it manage (`gpool agent --mig-managed`).
//!
//! - A drain holds a busy GPU: nothing new lands on it, so it empties.
//! - A repartition holds an idle GPU and orders its agent to lay it out. The
//!   agent applies the layout (`nvidia-smi mig`, or the simulated backend) and
//!   reads its GPUs again. Its next report carries the outcome and the GPUs
//!   as they really are, which the snapshot then takes for that GPU; a
//!   failure is an event, and the GPU keeps what the node reports.
//!
//! One change per GPU is in flight at a time: a GPU waiting for its
//! outcome is not planned again. A GPU whose change failed is left alone
//! for a back-off (30 s, doubling to 10 minutes, reset by a success), and
//! the event says until when: a node that cannot change layouts is not
//! asked again at every pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpool_api as api;
use gpool_core::{MigInstance, NodeId, Snapshot};

use super::Order;
use super::acts::Acts;
use super::links::NodeLink;
use super::outbox::Outbox;
use super::timers::{Timer, Timers};

/// The first back-off after a failed layout change; it doubles with each failure.
const FIRST_BACKOFF_MS: i64 = 30_000;
/// The longest back-off.
const MAX_BACKOFF_MS: i64 = 600_000;

/// The MIG GPUs being changed, and those left alone after a failure.
#[derive(Default)]
pub(super) struct MigChanges {
    /// Waiting for the agent's outcome: (node, GPU).
    changing: BTreeSet<(String, u32)>,
    /// After a failure: until when, and the back-off that gave it.
    backoff: BTreeMap<(String, u32), (i64, i64)>,
}

impl MigChanges {
    /// Whether the planner may change this GPU now.
    fn may_change(&self, node: &str, gpu: u32, now: i64) -> bool {
        let key = (node.to_string(), gpu);
        !self.changing.contains(&key) && self.backoff.get(&key).is_none_or(|(until, _)| *until <= now)
    }

    /// A change failed: the GPU is left alone until the returned time.
    fn failed(&mut self, node: &str, gpu: u32, now: i64) -> i64 {
        let key = (node.to_string(), gpu);
        let delay = self.backoff.get(&key).map_or(FIRST_BACKOFF_MS, |(_, d)| (d * 2).min(MAX_BACKOFF_MS));
        self.backoff.insert(key, (now + delay, delay));
        now + delay
    }
}

/// Lets the planner change the layout of these MIG GPUs of a node.
pub(super) fn apply_mig_managed(snap: &mut Snapshot, node: NodeId, managed: &[u32]) {
    for &gpu in managed {
        // A GPU not in MIG mode cannot be managed; the node's own list says which are.
        let _ = snap.set_mig_managed(node, gpu, true);
    }
}

impl MigChanges {
    /// Drains, undrains and repartitions for the pending MIG demand.
    pub(super) fn plan(
        &mut self,
        snap: &mut Snapshot,
        links: &BTreeMap<NodeId, NodeLink>,
        out: &mut Outbox,
        now: i64,
    ) -> Acts {
        let mut acts = Acts::default();
        if !links.values().any(|l| !l.doc.mig_managed.is_empty()) {
            return acts;
        }
        let plan = gpool_core::mig_planner::plan_for(snap, |node, d| self.may_change(&node.name, d.index, now));
        let name = |snap: &Snapshot, id: NodeId| snap.node(id).map_or_else(String::new, |n| n.name.to_string());
        for (node, gpu) in plan.drain {
            if !snap.mig_gpu_held(node, gpu) && snap.hold_mig_gpu(node, gpu, true).is_ok() {
                let n = name(snap, node);
                out.event_of(
                    now,
                    None,
                    None,
                    "mig_drain",
                    format!("node {n} GPU {gpu}: draining to lay it out for waiting MIG jobs"),
                );
            }
        }
        for (node, gpu) in plan.undrain {
            let _ = snap.hold_mig_gpu(node, gpu, false);
        }
        for (node, gpu, r) in plan.repartitions {
            let Some(geo) = gpool_core::mig_geometry::geometry(&r.model) else { continue };
            let layout: Vec<gpool_gpu::MigSlot> = r
                .layout
                .iter()
                .filter_map(|i| {
                    let shape = geo.shapes.get(usize::from(i.shape))?;
                    Some(gpool_gpu::MigSlot { profile: shape.name.to_string(), start: u32::from(i.start) })
                })
                .collect();
            if snap.hold_mig_gpu(node, gpu, true).is_err() {
                continue;
            }
            let n = name(snap, node);
            self.changing.insert((n.clone(), gpu));
            let profiles: Vec<String> = r.profiles.iter().map(ToString::to_string).collect();
            out.event_of(
                now,
                None,
                None,
                "mig_repartition",
                format!(
                    "node {n} GPU {gpu} ({}): laying it out as {} for waiting MIG jobs",
                    r.model,
                    profiles.join(" + ")
                ),
            );
            acts.order(node, Order::MigLayout { gpu, layout });
        }
        acts
    }

    /// A node (re)registered: its inventory is what it says now, so layouts
    /// ordered before are no longer awaited (an agent that restarted midway
    /// will never report them), and their GPUs are no longer held.
    pub(super) fn forget(&mut self, snap: &mut Snapshot, node: NodeId, name: &str) {
        let gpus: Vec<u32> = self.changing.iter().filter(|(n, _)| n == name).map(|(_, g)| *g).collect();
        for gpu in gpus {
            self.changing.remove(&(name.to_string(), gpu));
            let _ = snap.hold_mig_gpu(node, gpu, false);
        }
    }

    /// A node's agent says how a layout went and what its GPUs now are.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_outcome(
        &mut self,
        node: NodeId,
        o: api::agent::MigOutcome,
        snap: &mut Snapshot,
        links: &mut BTreeMap<NodeId, NodeLink>,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        let Some(n) = snap.node(node).map(|x| x.name.to_string()) else { return };
        self.changing.remove(&(n.clone(), o.gpu));
        let reported = o.gpus.as_ref().and_then(|g| g.iter().find(|g| g.index == o.gpu)).and_then(|g| g.mig.clone());
        let taken = reported.map(|list| {
            let instances: Vec<MigInstance> = list
                .iter()
                .filter_map(|m| {
                    Some(MigInstance {
                        profile: m.profile.parse().ok()?,
                        uuid: Arc::from(m.uuid.as_str()),
                        gi_id: m.gi_id,
                        memory_mb: m.memory_mb,
                    })
                })
                .collect();
            let shown: Vec<String> = instances.iter().map(|i| i.profile.to_string()).collect();
            (snap.repartition(node, o.gpu, instances), shown.join(" + "))
        });
        // What the node now reports is what it has, also after a failure.
        if let (Some(gpus), Some(link)) = (o.gpus, links.get_mut(&node)) {
            link.doc.gpus = gpus;
            out.write(super::node_doc::node_row(&link.doc, now));
        }
        let _ = snap.hold_mig_gpu(node, o.gpu, false);
        out.reschedule();
        let why = match (o.error, taken) {
            (None, Some((Ok(()), shown))) => {
                self.backoff.remove(&(n.clone(), o.gpu));
                out.event_of(now, None, None, "mig_repartitioned", format!("node {n} GPU {}: now {shown}", o.gpu));
                return;
            }
            (Some(e), taken) => {
                let now_has = taken.map_or_else(|| "unknown".to_string(), |(_, s)| s);
                format!("{e}; it now has {now_has}")
            }
            (None, Some((Err(e), _))) => e.to_string(),
            (None, None) => "the node did not report the GPU's instances".to_string(),
        };
        let until = self.failed(&n, o.gpu, now);
        timers.at(until, Timer::Wake);
        out.event_of(
            now,
            None,
            None,
            "mig_repartition_failed",
            format!("node {n} GPU {}: {why}; its layout is left alone for {} s", o.gpu, (until - now) / 1000),
        );
    }
}
