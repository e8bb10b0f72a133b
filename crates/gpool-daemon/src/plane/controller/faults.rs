//! The controller's side of GPU faults (issue 38): each report's readings go
//! through the core's fault tracker (`gpool_core::fault`), and what it
//! decides is carried out here.
//!
//! - A GPU with a fault fatal to it is quarantined: the snapshot places
//!   nothing new on it (whole, shared or MIG), every job on it is stopped
//!   with its grace period and requeued as an infrastructure failure (a
//!   gang whole), an event and an alert notice say so once.
//! - An XID of the application's own ends the job on that GPU (failed, or a
//!   retry if it has retries), and the GPU stays in service.
//! - A quarantined GPU nobody uses is checked when the tracker says a check
//!   is due: the node runs its health-check program, or says it has none and
//!   the built-in check decides. An operator may restore it at any time.
//!
//! Quarantines are kept in the store's meta table, so a restarted control
//! plane or a standby taking over keeps every GPU out that was out.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_core::fault::{Fault, FaultChange, FaultReading, Faults, Quarantine, Returned};
use gpool_core::time::Time;
use gpool_core::{NodeId, Snapshot};
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::Order;
use super::acts::Acts;
use super::calls::ApiError;
use super::docs::Stop;
use super::outbox::Outbox;
use crate::plane::auth::{Caller, Role};
use crate::plane::telemetry::Telemetry;
use crate::plane::webhook::Notice;
use crate::protocol::NodeReport;

/// Where quarantines are kept: a JSON list of [`Kept`].
const QUARANTINE_KEY: &str = "quarantined_gpus";

fn yes() -> bool {
    true
}

/// A GPU: its node's name and its index.
type Key = (String, u32);

/// Which GPUs are out of service, and what was done about each.
pub(super) struct GpuFaults {
    faults: Faults<Key>,
    /// What was done when each GPU was taken out (the jobs requeued).
    actions: BTreeMap<Key, String>,
}

/// A quarantine as kept in the store.
#[derive(Serialize, Deserialize)]
struct Kept {
    node: String,
    gpu: u32,
    /// `false`: a GPU in service kept for its recent faults (a repeat within a day stays out).
    #[serde(default = "yes")]
    out: bool,
    fault: String,
    since_ms: i64,
    operator_only: bool,
    #[serde(default)]
    last_check: Option<(i64, String)>,
    #[serde(default)]
    faults_ms: Vec<i64>,
    #[serde(default)]
    action: String,
}

impl GpuFaults {
    pub(super) fn new(timing: gpool_core::fault::CheckTiming) -> GpuFaults {
        GpuFaults { faults: Faults::new(timing), actions: BTreeMap::new() }
    }

    /// The fault readings of a node's GPUs (`devices`, by index) in one
    /// report. A report that could not read the GPUs says nothing (a GPU is
    /// missing only from a report that read others).
    fn readings(devices: &[(u32, String)], r: &NodeReport) -> Vec<(u32, FaultReading)> {
        if r.error.is_some() || r.gpus.is_empty() {
            return Vec::new();
        }
        devices
            .iter()
            .map(|(i, uuid)| {
                // By UUID: a driver renumbers its GPUs when one drops out.
                let sample =
                    r.gpus.iter().find(|s| s.uuid == *uuid).or_else(|| {
                        r.gpus.iter().find(|s| s.index == *i && !devices.iter().any(|(_, u)| *u == s.uuid))
                    });
                let reading = match sample {
                    None => FaultReading { missing: true, ..FaultReading::default() },
                    Some(s) => FaultReading {
                        missing: false,
                        xid_count: s.xid_count,
                        xids_recent: s.xids_recent.clone(),
                        ecc_uncorrected: s.ecc_uncorrected_volatile,
                        remap_pending: s.remap_pending,
                        remap_failed: s.remap_failed,
                        retired_pages_pending: s.retired_pages_pending,
                        health_fault: s.health_fault.clone(),
                    },
                };
                (*i, reading)
            })
            .collect()
    }

    /// The quarantined GPUs of node `node`.
    fn on_node(&self, node: &str) -> Vec<u32> {
        let node = node.to_string();
        self.faults.quarantined_in((node.clone(), 0)..=(node, u32::MAX)).map(|((_, g), _)| *g).collect()
    }

    fn view((node, gpu): &Key, q: &Quarantine, action: &str, now: i64) -> api::QuarantineView {
        api::QuarantineView {
            node: node.clone(),
            gpu: *gpu,
            fault: q.fault.clone(),
            since: api::time::rfc3339(q.since.as_millis()),
            action: action.to_string(),
            operator_only: q.operator_only,
            last_check: q.last_check.as_ref().map(|(at, said)| (api::time::rfc3339(at.as_millis()), said.clone())),
            lost_gpu_hours: (now - q.since.as_millis()).max(0) as f64 / 3_600_000.0,
        }
    }

    /// GPU `gpu` of `node`'s quarantine, if it is out.
    pub(super) fn view_of(&self, node: &str, gpu: u32, now: i64) -> Option<api::QuarantineView> {
        let key = (node.to_string(), gpu);
        let q = self.faults.quarantine(&key)?;
        Some(GpuFaults::view(&key, q, self.actions.get(&key).map_or("", String::as_str), now))
    }

    /// Every GPU out of service, by node and index.
    pub(super) fn views(&self, now: i64) -> Vec<api::QuarantineView> {
        let action = |k: &Key| self.actions.get(k).map_or("", String::as_str).to_string();
        self.faults.quarantined().map(|(k, q)| GpuFaults::view(k, q, &action(k), now)).collect()
    }

    /// What the store keeps: the quarantines, and the recent faults of GPUs back in service.
    fn kept(&self, now: i64) -> String {
        let mut all: Vec<Kept> = self
            .faults
            .quarantined()
            .map(|(k, q)| Kept {
                node: k.0.clone(),
                gpu: k.1,
                out: true,
                fault: q.fault.clone(),
                since_ms: q.since.as_millis(),
                operator_only: q.operator_only,
                last_check: q.last_check.as_ref().map(|(t, s)| (t.as_millis(), s.clone())),
                faults_ms: self.faults.fault_times(k).iter().map(|t| t.as_millis()).collect(),
                action: self.actions.get(k).cloned().unwrap_or_default(),
            })
            .collect();
        all.extend(self.faults.recent_history(Time::from_millis(now)).map(|(k, times)| Kept {
            node: k.0.clone(),
            gpu: k.1,
            out: false,
            fault: String::new(),
            since_ms: 0,
            operator_only: false,
            last_check: None,
            faults_ms: times.iter().map(|t| t.as_millis()).collect(),
            action: String::new(),
        }));
        serde_json::to_string(&all).unwrap_or_else(|_| "[]".into())
    }
}

impl GpuFaults {
    /// Acts on what one report says of its node's GPUs' faults and checks.
    pub(super) fn on_report(
        &mut self,
        node: NodeId,
        r: &NodeReport,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Acts {
        let mut acts = Acts::default();
        let acts_ = &mut acts;
        let name = r.node.clone();
        let devices: Vec<(u32, String)> = snap
            .node(node)
            .map(|n| n.devices.iter().map(|d| (d.index, d.uuid.to_string())).collect())
            .unwrap_or_default();
        let mut changed = false;
        for (gpu, reading) in GpuFaults::readings(&devices, r) {
            let key = (name.clone(), gpu);
            for change in self.faults.observe(&key, Time::from_millis(now), &reading) {
                changed = true;
                match change {
                    FaultChange::Quarantined(fault) => self.quarantine(node, &key, &fault, snap, out, acts_, now),
                    FaultChange::JobFatal(xid) => self.end_jobs_for_xid(node, &key, xid, snap, acts_),
                    FaultChange::Noted(fault) => {
                        let gone =
                            if self.faults.quarantine(&key).is_some() { " (already out of service)" } else { "" };
                        acts_.event(None, "gpu_fault", format!("GPU {gpu} of node {name}: {fault}{gone}"));
                    }
                }
            }
        }
        for v in &r.health {
            let key = (name.clone(), v.gpu);
            if !self.faults.checking(&key) {
                // An answer nobody waits for: the GPU came back meanwhile, or the check timed out.
                tracing::debug!("node {name}: a health verdict on GPU {} no check waits for", v.gpu);
                continue;
            }
            changed = true;
            let program = v.program.then(|| (v.passed, v.output.clone()));
            match self.faults.check_done(&key, Time::from_millis(now), program) {
                Some(how) => self.back_in_service(node, &key, &how_said(&how), snap, out, acts_, now),
                None => {
                    let said = self.faults.quarantine(&key).and_then(|q| q.last_check.clone()).map(|(_, s)| s);
                    let said = said.unwrap_or_else(|| v.output.clone());
                    acts_.event(None, "gpu_check", format!("GPU {} of node {name} stays out: {said}", v.gpu));
                }
            }
        }
        self.order_due_checks(node, &name, snap, acts_, now);
        if changed {
            self.keep(out, now);
        }
        acts
    }

    /// Takes a GPU out: snapshot, jobs, event, alert.
    #[allow(clippy::too_many_arguments)]
    fn quarantine(
        &mut self,
        node: NodeId,
        key: &Key,
        fault: &Fault,
        snap: &mut Snapshot,
        out: &mut Outbox,
        acts: &mut Acts,
        now: i64,
    ) {
        let (name, gpu) = (key.0.clone(), key.1);
        self.apply_quarantine(node, snap, out);
        let jobs = jobs_on_gpu(snap, node, gpu);
        for &job in &jobs {
            let stop = Stop::GpuFault { node: name.clone(), gpu, fault: fault.to_string() };
            acts.stop(job, stop);
        }
        let action = match jobs.as_slice() {
            [] => "no job ran on it".to_string(),
            j => format!("job {} requeued", j.iter().map(u64::to_string).collect::<Vec<_>>().join(", job ")),
        };
        let repeat = self.faults.quarantine(key).is_some_and(|q| q.operator_only);
        let back = if repeat {
            format!("it faulted twice within a day: only `gpool nodes restore {name} --gpu {gpu}` brings it back")
        } else {
            format!("it comes back when a health check passes or by `gpool nodes restore {name} --gpu {gpu}`")
        };
        let said = format!("GPU {gpu} of node {name} quarantined: {fault}; {action}; {back}");
        acts.event(None, "gpu_quarantined", said.clone());
        self.actions.insert(key.clone(), action);
        self.gpu_notice(key, true, said, out, now);
    }

    /// An XID of the application's own: the jobs on the GPU end (or retry).
    fn end_jobs_for_xid(&self, node: NodeId, key: &Key, xid: u64, snap: &Snapshot, acts: &mut Acts) {
        let what = gpool_core::xid::xid(xid).to_string();
        let jobs = jobs_on_gpu(snap, node, key.1);
        if jobs.len() > 1 {
            // Several jobs share the GPU (shares, MIG slices) and an XID names none of them:
            // ending all would fail the innocent ones.
            let list = jobs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
            let said = format!("GPU {} of node {}: {what} while jobs {list} share it; none is ended", key.1, key.0);
            acts.event(None, "gpu_xid", said);
            return;
        }
        for job in jobs {
            acts.stop(job, Stop::GpuXid { node: key.0.clone(), gpu: key.1, xid: what.clone() });
            let said = format!("job {job}: GPU {} of node {} raised {what}; the GPU stays in service", key.1, key.0);
            acts.event(Some(job), "gpu_xid", said);
        }
    }

    /// A GPU came back: placement may use it again.
    #[allow(clippy::too_many_arguments)]
    fn back_in_service(
        &mut self,
        node: NodeId,
        key: &Key,
        how: &str,
        snap: &mut Snapshot,
        out: &mut Outbox,
        acts: &mut Acts,
        now: i64,
    ) {
        self.actions.remove(key);
        self.apply_quarantine(node, snap, out);
        let said = format!("GPU {} of node {} is back in service: {how}", key.1, key.0);
        acts.event(None, "gpu_restored", said.clone());
        self.gpu_notice(key, false, said, out, now);
    }

    /// Orders the checks that are due on this node's idle quarantined GPUs.
    fn order_due_checks(&mut self, node: NodeId, name: &str, snap: &Snapshot, acts: &mut Acts, now: i64) {
        for gpu in self.on_node(name) {
            let key = (name.to_string(), gpu);
            if !self.faults.check_due(&key, Time::from_millis(now)) || !jobs_on_gpu(snap, node, gpu).is_empty() {
                continue;
            }
            let Some(uuid) =
                snap.node(node).and_then(|n| n.devices.iter().find(|d| d.index == gpu)).map(|d| d.uuid.to_string())
            else {
                continue;
            };
            self.faults.check_started(&key, Time::from_millis(now));
            acts.order(node, Order::CheckHealth { gpu, uuid });
        }
    }

    /// The snapshot's quarantine marks of `node`, from the tracker.
    pub(super) fn apply_quarantine(&self, node: NodeId, snap: &mut Snapshot, out: &mut Outbox) {
        let Some(name) = snap.node(node).map(|n| n.name.to_string()) else { return };
        if snap.set_quarantined_gpus(node, &self.on_node(&name)).is_ok() {
            out.reschedule();
        }
    }

    /// A webhook notice, fired once when a GPU goes out and resolved when it comes back.
    fn gpu_notice(&self, (node, gpu): &Key, firing: bool, summary: String, out: &mut Outbox, now: i64) {
        let since = self.faults.quarantine(&(node.clone(), *gpu)).map_or(now, |q| q.since.as_millis());
        let labels = [("alertname", "GpuQuarantined"), ("severity", "critical"), ("node", node.as_str())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("gpu".to_string(), gpu.to_string()), ("subject".to_string(), format!("{node}/{gpu}"))])
            .collect();
        out.notices.push(Notice {
            status: if firing { "firing" } else { "resolved" }.into(),
            labels,
            annotations: [("summary".to_string(), summary)].into_iter().collect(),
            starts_at: api::time::rfc3339(since),
            ends_at: if firing { "0001-01-01T00:00:00Z".into() } else { api::time::rfc3339(now) },
        });
    }

    fn keep(&self, out: &mut Outbox, now: i64) {
        out.write(Write::PutMeta(QUARANTINE_KEY.into(), self.kept(now)));
    }

    /// Quarantines the last control plane kept, on the nodes it knows.
    pub(super) fn restore(
        &mut self,
        store: &mut dyn Store,
        snap: &mut Snapshot,
        out: &mut Outbox,
    ) -> anyhow::Result<()> {
        let Some(text) = store.meta(QUARANTINE_KEY)? else { return Ok(()) };
        let kept: Vec<Kept> = match serde_json::from_str(&text) {
            Ok(k) => k,
            Err(e) => {
                // Not trusted blindly either way: said loudly, and the GPUs'
                // next faults quarantine them again.
                tracing::error!("the kept GPU quarantines do not read ({e}); GPUs start in service: {text:.200}");
                return Ok(());
            }
        };
        for k in kept {
            let Some(node) = snap.node_id(&k.node) else { continue };
            let times: Vec<Time> = k.faults_ms.iter().copied().map(Time::from_millis).collect();
            if !k.out {
                self.faults.restore_history((k.node, k.gpu), times);
                continue;
            }
            let q = Quarantine {
                fault: k.fault,
                since: Time::from_millis(k.since_ms),
                operator_only: k.operator_only,
                last_check: k.last_check.map(|(t, s)| (Time::from_millis(t), s)),
            };
            let key = (k.node, k.gpu);
            self.faults.restore(key.clone(), q, times);
            self.actions.insert(key, k.action);
            self.apply_quarantine(node, snap, out);
        }
        Ok(())
    }

    /// Every GPU's health state, for `/metrics`.
    pub(super) fn gpu_health(&self, snap: &Snapshot, telemetry: &Telemetry) -> Vec<(String, u32, &'static str)> {
        let mut out = Vec::new();
        for (_, n) in snap.nodes() {
            for d in &n.devices {
                let key = (n.name.to_string(), d.index);
                let state = if self.faults.quarantine(&key).is_some() {
                    "quarantined"
                } else if telemetry.degraded(&n.name, d.index).is_some() {
                    "degraded"
                } else {
                    "ok"
                };
                out.push((key.0, key.1, state));
            }
        }
        out
    }

    /// `gpool nodes inject`: shows a fault on a simulated GPU.
    /// `source`: where the node reads its devices (`NodeDoc::source`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn inject(
        caller: &Caller,
        name: &str,
        gpu: u32,
        fault: gpool_gpu::InjectedFault,
        source: &str,
        from: &str,
        snap: &Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Result<Acts, ApiError> {
        let mut acts = Acts::default();
        let node = admin_gpu(caller, name, gpu, "inject faults", snap)?;
        if source != "simulated" {
            return Err(ApiError::new(
                400,
                format!(
                    "node {name} reads real devices ({source}); faults can be injected only into simulated GPUs \
                     (gpool up --simulate-gpus, gpool agent --simulate-gpus)"
                ),
            ));
        }
        let what = match &fault {
            gpool_gpu::InjectedFault::Xid(x) => gpool_core::xid::xid(*x).to_string(),
            gpool_gpu::InjectedFault::EccUncorrected => "an uncorrectable ECC error".into(),
            gpool_gpu::InjectedFault::Gone => "the GPU gone from the bus".into(),
        };
        acts.order(node, Order::InjectFault { gpu, fault: Some(fault) });
        out.audit(caller, from, &format!("injected {what} into GPU {gpu} of node {name}"), now);
        Ok(acts)
    }

    /// `gpool nodes restore`: an operator brings a quarantined GPU back.
    /// `simulated`: whether the node's GPUs are simulated (they forget their injected faults).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn restore_gpu(
        &mut self,
        caller: &Caller,
        name: &str,
        gpu: u32,
        simulated: bool,
        from: &str,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Result<Acts, ApiError> {
        let mut acts = Acts::default();
        let node = admin_gpu(caller, name, gpu, "restore GPUs", snap)?;
        let key = (name.to_string(), gpu);
        if !self.faults.restore_by_operator(&key, Time::from_millis(now)) {
            return Err(ApiError::new(409, format!("GPU {gpu} of node {name} is in service: nothing to restore")));
        }
        if simulated {
            // As a reset would: the simulated GPU forgets what it was told to show.
            acts.order(node, Order::InjectFault { gpu, fault: None });
        }
        self.back_in_service(node, &key, &format!("restored by {}", caller.user), snap, out, &mut acts, now);
        out.audit(caller, from, &format!("restored GPU {gpu} of node {name}"), now);
        self.keep(out, now);
        Ok(acts)
    }
}

/// Jobs running on any part of GPU `gpu` of `node` (whole, shared or MIG).
fn jobs_on_gpu(snap: &Snapshot, node: NodeId, gpu: u32) -> Vec<u64> {
    snap.jobs_on_gpu(node, gpu).into_iter().map(|j| j.0).collect()
}

/// The node of an admin's GPU call, once the caller, node and GPU check out.
fn admin_gpu(caller: &Caller, name: &str, gpu: u32, what: &str, snap: &Snapshot) -> Result<NodeId, ApiError> {
    if caller.role != Role::Admin {
        return Err(ApiError::new(403, format!("only admins {what}")));
    }
    let node = snap.node_id(name).ok_or_else(|| ApiError::new(404, format!("node {name} not found")))?;
    let gpus: Vec<u32> = snap.node(node).map(|n| n.devices.iter().map(|d| d.index).collect()).unwrap_or_default();
    if !gpus.contains(&gpu) {
        return Err(ApiError::new(
            404,
            format!("node {name} has no GPU {gpu} (its GPUs: {gpus:?}; see gpool nodes {name})"),
        ));
    }
    Ok(node)
}

fn how_said(how: &Returned) -> String {
    match how {
        Returned::Operator => "restored by an operator".into(),
        Returned::BuiltIn => "the built-in check passed (it answers and shows no new fault)".into(),
        Returned::Program(out) => {
            let out = out.trim();
            if out.is_empty() {
                "the node's health check passed".into()
            } else {
                format!("the node's health check passed: {out:.200}")
            }
        }
    }
}
