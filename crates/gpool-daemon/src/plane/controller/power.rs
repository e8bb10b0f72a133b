//! Power budgets in the daemon (issue 24): the budgets the core keeps
//! (`gpool_core::power`), from the configuration (`--power-budget`) and
//! from `gpool power set`, which overrides them live and is kept in the
//! store (`PutMeta("power")`); each node's GPU draw (idle, and at its power
//! limit) learned from its first telemetry with power readings; and what
//! `gpool power` shows: each budget, what the scheduler counts against it
//! and what the GPUs under it measured last.

use gpool_api as api;
use gpool_core::Snapshot;
use gpool_core::alert::Transition;
use gpool_core::power::{NodePower, PowerBudget, PowerScope};
use gpool_gpu::GpuSample;
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::ApiError;
use super::outbox::Outbox;
use crate::plane::auth::{Caller, Role};
use crate::plane::telemetry::Telemetry;

const META_KEY: &str = "power";

/// A budget set live, as kept in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LiveBudget {
    /// `node`, `label` or `pool`.
    scope: String,
    /// The node or pool name, or `key=value`.
    target: String,
    watts: u32,
}

fn scope_of(kind: &str, target: &str) -> Result<PowerScope, String> {
    match kind {
        "node" => Ok(PowerScope::Node(target.into())),
        "pool" => Ok(PowerScope::Pool(target.into())),
        "label" => match target.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok(PowerScope::Label(k.into(), v.into())),
            _ => Err(format!("label: {target:?} is not KEY=VALUE (rack=r12)")),
        },
        other => Err(format!("scope {other:?} is not node, label or pool")),
    }
}

/// Learns a node's GPU draw from a report with power readings: the
/// highest power limit, and the lowest draw of a GPU no job holds (a
/// tenth of the limit until one is seen).
pub(super) fn learn_node_power(node: &str, gpus: &[GpuSample], busy: &[u32], snap: &mut Snapshot, out: &mut Outbox) {
    let Some(id) = snap.node_id(node) else { return };
    let Some(limit) =
        gpus.iter().filter_map(|g| g.power_limit_w).fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    else {
        return;
    };
    let idle =
        gpus.iter().filter(|g| !busy.contains(&g.index)).filter_map(|g| g.power_draw_w).fold(limit / 10.0, f64::min);
    let learned = NodePower { idle_watts: idle.round() as u32, max_watts: limit.round() as u32 };
    let Some(known) = snap.node(id).map(|n| n.power) else { return };
    // Once, and again only when a lower idle draw or another limit is seen.
    if known.is_some_and(|p| p.max_watts == learned.max_watts && p.idle_watts <= learned.idle_watts) {
        return;
    }
    if snap.set_node_power(id, Some(learned)).is_ok() {
        out.reschedule();
    }
}

/// Budgets from the configuration, and those set live (`gpool power set`, kept in the store).
#[derive(Debug, Default)]
pub(super) struct Power {
    configured: Vec<PowerBudget>,
    live: Vec<LiveBudget>,
}

impl Power {
    pub(super) fn new(configured: Vec<PowerBudget>) -> Power {
        Power { configured, live: Vec::new() }
    }

    /// A node's own budget, as its agent declares it when it registers
    /// (`gpool agent --power-budget`): it takes the place of the
    /// configuration's budget of that node, and goes with the flag; a budget
    /// set live for the node (`gpool power set --node`) still wins.
    pub(super) fn set_agent_budget(&mut self, node: &str, watts: Option<u32>, snap: &mut Snapshot, out: &mut Outbox) {
        let scope = PowerScope::Node(node.into());
        let before = self.configured.iter().find(|b| b.scope == scope).map(|b| b.watts);
        if before == watts {
            return;
        }
        self.configured.retain(|b| b.scope != scope);
        if let Some(watts) = watts {
            self.configured.push(PowerBudget { scope, watts });
        }
        snap.set_power_budgets(self.in_force());
        out.reschedule();
    }

    /// The budgets in force: the configuration's, with those set live in their place.
    fn in_force(&self) -> Vec<PowerBudget> {
        let mut out: Vec<PowerBudget> = self.configured.clone();
        for live in &self.live {
            let Ok(scope) = scope_of(&live.scope, &live.target) else { continue };
            out.retain(|b| b.scope != scope);
            out.push(PowerBudget { scope, watts: live.watts });
        }
        out
    }

    /// `gpool power set`: admins only.
    pub(super) fn set(
        &mut self,
        caller: &Caller,
        req: api::PowerSet,
        from: &str,
        snap: &mut Snapshot,
        out: &mut Outbox,
        now: i64,
    ) -> Result<(), ApiError> {
        if caller.role != Role::Admin {
            return Err(ApiError::new(403, "only admins set power budgets"));
        }
        let scope = scope_of(&req.scope, &req.target).map_err(|e| ApiError::new(400, e))?;
        if let PowerScope::Node(n) = &scope
            && snap.node_id(n).is_none()
        {
            return Err(ApiError::new(404, format!("node {n} not found")));
        }
        self.live.retain(|l| scope_of(&l.scope, &l.target).ok().as_ref() != Some(&scope));
        self.live.push(LiveBudget { scope: req.scope.clone(), target: req.target.clone(), watts: req.watts });
        snap.set_power_budgets(self.in_force());
        if let Ok(text) = serde_json::to_string(&self.live) {
            out.write(Write::PutMeta(META_KEY.into(), text));
        }
        out.reschedule();
        out.audit(caller, from, &format!("set the power budget of {scope} to {} W", req.watts), now);
        Ok(())
    }

    /// Each budget: its watts, what the scheduler counts against it, what
    /// its GPUs measured last, and how many jobs it holds back (from the
    /// last pass's reasons: `waiting` indexes `reason_texts`).
    pub(super) fn views(
        snap: &Snapshot,
        telemetry: &Telemetry,
        reason_texts: &[String],
        waiting: &[(u64, u32)],
    ) -> Vec<api::PowerView> {
        gpool_core::power::budget_use(snap)
            .into_iter()
            .map(|(b, counted)| {
                let nodes: Vec<String> =
                    snap.nodes().filter(|(_, n)| b.scope.covers(n)).map(|(_, n)| n.name.to_string()).collect();
                let measured = nodes.iter().filter_map(|n| telemetry.power_draw(n)).reduce(|a, b| a + b);
                let held_back = reason_texts
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.starts_with(&format!("power budget of {}:", b.scope)))
                    .map(|(i, _)| waiting.iter().filter(|(_, r)| *r as usize == i).count() as u64)
                    .sum();
                api::PowerView {
                    scope: b.scope.to_string(),
                    watts: b.watts,
                    counted_watts: counted,
                    measured_watts: measured.map(|m| m.round() as u64),
                    nodes,
                    held_back,
                }
            })
            .collect()
    }

    /// The budgets over `node` against what their GPUs measured last, for
    /// the alert rules about budgets (`PowerBudgetExceeded`: measured draw
    /// over a budget for longer than the rule's hold).
    pub(super) fn watch(node: &str, at_ms: i64, snap: &Snapshot, telemetry: &mut Telemetry) -> Vec<Transition> {
        use gpool_core::alert::{Kind, Observation, Reading};
        let mut obs = Vec::new();
        for b in snap.power_budgets().iter().filter(|b| b.watts > 0) {
            let nodes: Vec<String> =
                snap.nodes().filter(|(_, n)| b.scope.covers(n)).map(|(_, n)| n.name.to_string()).collect();
            if !nodes.iter().any(|n| n == node) {
                continue;
            }
            let Some(measured) = nodes.iter().filter_map(|n| telemetry.power_draw(n)).reduce(|a, b| a + b) else {
                continue;
            };
            obs.push(Observation {
                subject: format!("power/{}", b.scope),
                kind: Kind::PowerBudget,
                reading: Reading {
                    power_budget_use: Some(measured / f64::from(b.watts) * 100.0),
                    ..Reading::default()
                },
                labels: vec![
                    ("budget".into(), b.scope.to_string()),
                    ("detail".into(), format!("{measured:.0} W measured against a budget of {} W", b.watts)),
                ],
            });
        }
        if obs.is_empty() {
            return Vec::new();
        }
        telemetry.observe(gpool_core::Time::from_millis(at_ms), &obs)
    }

    pub(super) fn restore(&mut self, store: &mut dyn Store, snap: &mut Snapshot) -> anyhow::Result<()> {
        if let Some(text) = store.meta(META_KEY)? {
            self.live = serde_json::from_str(&text)?;
        }
        snap.set_power_budgets(self.in_force());
        Ok(())
    }
}
