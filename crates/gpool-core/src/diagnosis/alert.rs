//! Alert rules over GPU and job telemetry: a threshold held for a duration,
//! like the `for:` clause of a Prometheus alerting rule.
//!
//! The [`Engine`] is pure: the caller passes readings and the time, and gets
//! back the transitions (an alert starts firing, or resolves). A condition
//! that cannot be evaluated (the value is absent: `[N/A]` on a MIG-enabled
//! GPU, say) counts as not met, so a missing value never raises an alert.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::model::time::{Time, human_duration};

/// What a rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    /// Percent of time a kernel ran (DCGM_FI_DEV_GPU_UTIL).
    GpuUtil,
    /// Frame-buffer memory used, percent of total.
    MemoryUsedPct,
    /// GPU temperature, °C.
    Temperature,
    /// Power draw, W.
    PowerDraw,
    /// Uncorrectable ECC errors since the driver loaded (volatile).
    EccUncorrected,
    /// The last XID error (0 = none).
    Xid,
    /// 1 while the GPU is degraded for heat (`heat.rs`), else 0.
    ThermalSlowdown,
    /// 1 while a replica of the job's gang holds the others back (`straggler.rs`), else 0.
    Straggler,
    /// Measured draw under a power budget, percent of the budget.
    PowerBudgetUse,
}

impl Metric {
    pub const ALL: [Metric; 9] = [
        Metric::GpuUtil,
        Metric::MemoryUsedPct,
        Metric::Temperature,
        Metric::PowerDraw,
        Metric::EccUncorrected,
        Metric::Xid,
        Metric::ThermalSlowdown,
        Metric::Straggler,
        Metric::PowerBudgetUse,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::GpuUtil => "gpu_util",
            Metric::MemoryUsedPct => "memory_used_pct",
            Metric::Temperature => "temperature",
            Metric::PowerDraw => "power_draw",
            Metric::EccUncorrected => "ecc_uncorrected",
            Metric::Xid => "xid",
            Metric::ThermalSlowdown => "thermal_slowdown",
            Metric::Straggler => "straggler",
            Metric::PowerBudgetUse => "power_budget_use",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s)
    }

    fn unit(self) -> &'static str {
        match self {
            Metric::GpuUtil | Metric::MemoryUsedPct | Metric::PowerBudgetUse => "%",
            Metric::Temperature => " °C",
            Metric::PowerDraw => " W",
            Metric::EccUncorrected | Metric::Xid | Metric::ThermalSlowdown | Metric::Straggler => "",
        }
    }
}

/// What a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every GPU.
    Gpu,
    /// GPUs allocated to a job (an idle GPU nobody holds is not a problem).
    AllocatedGpu,
    /// A running job: the mean over its GPUs (for utilisation) or the worst
    /// of them (for the other metrics).
    Job,
    /// A power budget (a node's, a label's, a pool's).
    PowerBudget,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Gpu => "gpu",
            Scope::AllocatedGpu => "allocated_gpu",
            Scope::Job => "job",
            Scope::PowerBudget => "power_budget",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        [Scope::Gpu, Scope::AllocatedGpu, Scope::Job, Scope::PowerBudget].into_iter().find(|x| x.as_str() == s)
    }
}

/// Above or below the threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Above,
    Below,
}

/// How urgent an alert is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Severity> {
        [Severity::Info, Severity::Warning, Severity::Critical].into_iter().find(|x| x.as_str() == s)
    }
}

/// One alerting rule: `metric comparison threshold` held for `hold`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    pub scope: Scope,
    pub metric: Metric,
    pub comparison: Comparison,
    pub threshold: f64,
    /// How long the condition must hold before the alert fires (0 = at once).
    pub hold: Duration,
    pub severity: Severity,
}

impl Rule {
    fn matches(&self, v: f64) -> bool {
        match self.comparison {
            Comparison::Above => v > self.threshold,
            Comparison::Below => v < self.threshold,
        }
    }

    /// `gpu_util < 5% for 30m`.
    pub fn condition(&self) -> String {
        let op = if self.comparison == Comparison::Above { ">" } else { "<" };
        let hold = if self.hold.is_zero() { String::new() } else { format!(" for {}", human_duration(self.hold)) };
        format!("{} {op} {}{}{hold}", self.metric.as_str(), self.threshold, self.metric.unit())
    }

    /// The rules gpool starts with (see docs/telemetry.md for the sources of
    /// the thresholds).
    pub fn defaults() -> Vec<Rule> {
        let rule = |name: &str, scope, metric, comparison, threshold, mins: u64, severity| Rule {
            name: name.into(),
            scope,
            metric,
            comparison,
            threshold,
            hold: Duration::from_secs(mins * 60),
            severity,
        };
        use Comparison::{Above, Below};
        vec![
            rule("GpuMemorySaturated", Scope::AllocatedGpu, Metric::MemoryUsedPct, Above, 95.0, 5, Severity::Warning),
            rule("AllocatedGpuIdle", Scope::AllocatedGpu, Metric::GpuUtil, Below, 5.0, 30, Severity::Warning),
            rule("JobLowGpuUtilization", Scope::Job, Metric::GpuUtil, Below, 70.0, 30, Severity::Info),
            rule("GpuTemperatureHigh", Scope::Gpu, Metric::Temperature, Above, 85.0, 10, Severity::Critical),
            rule("GpuEccUncorrectable", Scope::Gpu, Metric::EccUncorrected, Above, 0.0, 0, Severity::Critical),
            rule("GpuXidError", Scope::Gpu, Metric::Xid, Above, 0.0, 0, Severity::Critical),
            rule("GpuThermalSlowdown", Scope::Gpu, Metric::ThermalSlowdown, Above, 0.0, 0, Severity::Warning),
            rule("GangStraggler", Scope::Job, Metric::Straggler, Above, 0.0, 0, Severity::Warning),
            rule(
                "PowerBudgetExceeded",
                Scope::PowerBudget,
                Metric::PowerBudgetUse,
                Above,
                100.0,
                2,
                Severity::Critical,
            ),
        ]
    }
}

/// The values of one subject at one moment; absent values are `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub gpu_util: Option<f64>,
    pub memory_used_pct: Option<f64>,
    pub temperature: Option<f64>,
    pub power_draw: Option<f64>,
    pub ecc_uncorrected: Option<f64>,
    pub xid: Option<f64>,
    pub thermal_slowdown: Option<f64>,
    pub straggler: Option<f64>,
    pub power_budget_use: Option<f64>,
}

impl Reading {
    pub fn get(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::GpuUtil => self.gpu_util,
            Metric::MemoryUsedPct => self.memory_used_pct,
            Metric::Temperature => self.temperature,
            Metric::PowerDraw => self.power_draw,
            Metric::EccUncorrected => self.ecc_uncorrected,
            Metric::Xid => self.xid,
            Metric::ThermalSlowdown => self.thermal_slowdown,
            Metric::Straggler => self.straggler,
            Metric::PowerBudgetUse => self.power_budget_use,
        }
        .filter(|v| v.is_finite())
    }
}

/// What the subject of an observation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A GPU, allocated to a job or not.
    Gpu {
        allocated: bool,
    },
    Job,
    PowerBudget,
}

/// One subject's reading.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// A stable name: `node/gpu3` or `job/42`.
    pub subject: String,
    pub kind: Kind,
    pub reading: Reading,
    /// Labels carried into the alert (node, gpu, uuid, job, user, …); a
    /// `detail` label is said at the end of the alert's summary.
    pub labels: Vec<(String, String)>,
}

/// An alert that started firing or resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub rule: String,
    pub severity: Severity,
    pub subject: String,
    pub firing: bool,
    /// The value that made it fire (or the last value seen when it resolved).
    pub value: f64,
    /// When the condition started to hold.
    pub since: Time,
    pub labels: Vec<(String, String)>,
    /// One line for people: `AllocatedGpuIdle on n1/gpu3 (job 42): gpu_util 0% < 5% for 30m`.
    pub summary: String,
}

/// An alert firing now.
#[derive(Clone, Debug, PartialEq)]
pub struct Active {
    pub rule: String,
    pub severity: Severity,
    pub subject: String,
    pub value: f64,
    pub since: Time,
    pub labels: Vec<(String, String)>,
    pub summary: String,
}

#[derive(Clone, Debug)]
struct Pending {
    since: Time,
    firing: bool,
    value: f64,
    labels: Vec<(String, String)>,
}

/// Evaluates rules over readings, remembering how long each condition has held.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    rules: Vec<Rule>,
    /// (rule index, subject) → since when the condition holds.
    states: BTreeMap<(usize, String), Pending>,
}

impl Engine {
    pub fn new(rules: Vec<Rule>) -> Engine {
        Engine { rules, states: BTreeMap::new() }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    fn applies(rule: &Rule, kind: Kind) -> bool {
        match (rule.scope, kind) {
            (Scope::Gpu, Kind::Gpu { .. }) | (Scope::Job, Kind::Job) | (Scope::PowerBudget, Kind::PowerBudget) => true,
            (Scope::AllocatedGpu, Kind::Gpu { allocated }) => allocated,
            _ => false,
        }
    }

    fn summary(rule: &Rule, subject: &str, labels: &[(String, String)], value: f64, firing: bool) -> String {
        let job = labels.iter().find(|(k, _)| k == "job_id").map(|(_, v)| format!(" (job {v})")).unwrap_or_default();
        let unit = rule.metric.unit();
        if firing {
            let detail = labels.iter().find(|(k, _)| k == "detail").map(|(_, v)| format!(": {v}")).unwrap_or_default();
            format!(
                "{} on {subject}{job}: {} is {value:.0}{unit}, {}{detail}",
                rule.name,
                rule.metric.as_str(),
                rule.condition()
            )
        } else {
            format!("{} on {subject}{job} resolved: {} is {value:.0}{unit}", rule.name, rule.metric.as_str())
        }
    }

    /// Takes the readings of `now`. Subjects not in `obs` keep their state
    /// (call [`Engine::forget`] for subjects that are gone).
    pub fn observe(&mut self, now: Time, obs: &[Observation]) -> Vec<Transition> {
        let mut out = Vec::new();
        for o in obs {
            for (ri, rule) in self.rules.iter().enumerate() {
                let key = (ri, o.subject.clone());
                let value = o.reading.get(rule.metric);
                let holds = Engine::applies(rule, o.kind) && value.is_some_and(|v| rule.matches(v));
                match (holds, self.states.get_mut(&key)) {
                    (true, Some(st)) => {
                        st.value = value.unwrap_or(st.value);
                        st.labels.clone_from(&o.labels);
                        if !st.firing && now.since(st.since) >= rule.hold {
                            st.firing = true;
                            out.push(Engine::transition(rule, &o.subject, st, true));
                        }
                    }
                    (true, None) => {
                        let mut st = Pending {
                            since: now,
                            firing: false,
                            value: value.unwrap_or(0.0),
                            labels: o.labels.clone(),
                        };
                        if rule.hold.is_zero() {
                            st.firing = true;
                            out.push(Engine::transition(rule, &o.subject, &st, true));
                        }
                        self.states.insert(key, st);
                    }
                    (false, Some(_)) => {
                        if let Some(mut st) = self.states.remove(&key)
                            && st.firing
                        {
                            if let Some(v) = value {
                                st.value = v;
                            }
                            out.push(Engine::transition(rule, &o.subject, &st, false));
                        }
                    }
                    (false, None) => {}
                }
            }
        }
        out
    }

    fn transition(rule: &Rule, subject: &str, st: &Pending, firing: bool) -> Transition {
        Transition {
            rule: rule.name.clone(),
            severity: rule.severity,
            subject: subject.to_string(),
            firing,
            value: st.value,
            since: st.since,
            labels: st.labels.clone(),
            summary: Engine::summary(rule, subject, &st.labels, st.value, firing),
        }
    }

    /// A subject is gone (the job ended, the node left): its firing alerts resolve.
    pub fn forget(&mut self, subject: &str) -> Vec<Transition> {
        self.resolve(subject, |_| true, "the subject is gone")
    }

    /// A GPU was released: its alerts of rules about allocated GPUs resolve
    /// (the others, such as temperature, stay as they are).
    pub fn release(&mut self, subject: &str) -> Vec<Transition> {
        self.resolve(subject, |r| r.scope == Scope::AllocatedGpu, "the GPU was released")
    }

    /// Drops the states of `subject` for the rules `which` selects; the firing ones resolve, `why`.
    fn resolve(&mut self, subject: &str, which: impl Fn(&Rule) -> bool, why: &str) -> Vec<Transition> {
        let keys: Vec<(usize, String)> = self
            .states
            .keys()
            .filter(|(ri, s)| s == subject && self.rules.get(*ri).is_some_and(&which))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for key in keys {
            if let Some(st) = self.states.remove(&key)
                && st.firing
                && let Some(rule) = self.rules.get(key.0)
            {
                let mut t = Engine::transition(rule, subject, &st, false);
                t.summary = format!("{} on {subject} resolved: {why}", rule.name);
                out.push(t);
            }
        }
        out
    }

    /// Alerts firing now, most severe first.
    pub fn active(&self) -> Vec<Active> {
        let mut v: Vec<Active> = self
            .states
            .iter()
            .filter(|(_, st)| st.firing)
            .filter_map(|((ri, subject), st)| {
                let rule = self.rules.get(*ri)?;
                Some(Active {
                    rule: rule.name.clone(),
                    severity: rule.severity,
                    subject: subject.clone(),
                    value: st.value,
                    since: st.since,
                    labels: st.labels.clone(),
                    summary: Engine::summary(rule, subject, &st.labels, st.value, true),
                })
            })
            .collect();
        v.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.since.cmp(&b.since)).then(a.subject.cmp(&b.subject)));
        v
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(subject: &str, allocated: bool, util: Option<f64>) -> Observation {
        Observation {
            subject: subject.into(),
            kind: Kind::Gpu { allocated },
            reading: Reading { gpu_util: util, ..Reading::default() },
            labels: vec![("job_id".into(), "7".into())],
        }
    }

    fn idle_rule(mins: u64) -> Rule {
        Rule {
            name: "Idle".into(),
            scope: Scope::AllocatedGpu,
            metric: Metric::GpuUtil,
            comparison: Comparison::Below,
            threshold: 5.0,
            hold: Duration::from_secs(mins * 60),
            severity: Severity::Warning,
        }
    }

    fn at(mins: i64) -> Time {
        Time::from_millis(mins * 60_000)
    }

    #[test]
    fn fires_only_after_the_condition_held_for_its_duration_and_resolves_once() {
        let mut e = Engine::new(vec![idle_rule(30)]);
        // (minute, util, expected transitions as (firing) flags)
        let steps: &[(i64, Option<f64>, &[bool])] = &[
            (0, Some(1.0), &[]),
            (29, Some(0.0), &[]),
            (30, Some(2.0), &[true]),
            (31, Some(0.0), &[]),
            (40, Some(90.0), &[false]),
            (41, Some(0.0), &[]),
            (70, Some(0.0), &[]),
            (71, Some(0.0), &[true]),
        ];
        for (m, util, want) in steps {
            let got: Vec<bool> = e.observe(at(*m), &[gpu("n/gpu0", true, *util)]).iter().map(|t| t.firing).collect();
            assert_eq!(&got, want, "minute {m}");
        }
        assert_eq!(e.active().len(), 1);
        assert!(e.active()[0].summary.contains("Idle on n/gpu0 (job 7)"), "{}", e.active()[0].summary);
    }

    #[test]
    fn an_absent_value_never_fires_and_breaks_a_pending_condition() {
        let mut e = Engine::new(vec![idle_rule(10)]);
        assert!(e.observe(at(0), &[gpu("g", true, Some(0.0))]).is_empty());
        assert!(e.observe(at(5), &[gpu("g", true, None)]).is_empty());
        assert!(e.observe(at(11), &[gpu("g", true, Some(0.0))]).is_empty(), "the hold restarted at minute 11");
        assert_eq!(e.observe(at(21), &[gpu("g", true, Some(0.0))]).len(), 1);
    }

    #[test]
    fn scopes_select_their_subjects() {
        let mut e = Engine::new(vec![idle_rule(0)]);
        assert!(e.observe(at(0), &[gpu("free", false, Some(0.0))]).is_empty(), "an unallocated idle GPU is fine");
        assert_eq!(e.observe(at(0), &[gpu("held", true, Some(0.0))]).len(), 1);
        let job = Observation {
            subject: "job/1".into(),
            kind: Kind::Job,
            reading: Reading { gpu_util: Some(0.0), ..Reading::default() },
            labels: vec![],
        };
        assert!(e.observe(at(0), &[job]).is_empty(), "a GPU rule does not apply to jobs");
    }

    #[test]
    fn forgetting_a_subject_resolves_its_firing_alerts() {
        let mut e = Engine::new(vec![idle_rule(0)]);
        e.observe(at(0), &[gpu("g", true, Some(0.0))]);
        let t = e.forget("g");
        assert_eq!(t.len(), 1);
        assert!(!t[0].firing);
        assert!(e.active().is_empty());
        assert!(e.forget("g").is_empty());
    }

    #[test]
    fn releasing_a_gpu_resolves_only_allocation_alerts() {
        let hot = Rule {
            name: "Hot".into(),
            scope: Scope::Gpu,
            metric: Metric::Temperature,
            comparison: Comparison::Above,
            threshold: 80.0,
            hold: Duration::ZERO,
            severity: Severity::Critical,
        };
        let mut e = Engine::new(vec![idle_rule(0), hot]);
        let mut o = gpu("g", true, Some(0.0));
        o.reading.temperature = Some(90.0);
        assert_eq!(e.observe(at(0), &[o]).len(), 2);
        let t = e.release("g");
        assert_eq!(t.iter().map(|x| x.rule.as_str()).collect::<Vec<_>>(), ["Idle"]);
        assert_eq!(e.active().iter().map(|a| a.rule.as_str()).collect::<Vec<_>>(), ["Hot"]);
    }

    #[test]
    fn default_rules_have_unique_names_and_readable_conditions() {
        let rules = Rule::defaults();
        let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), rules.len());
        let idle = rules.iter().find(|r| r.name == "AllocatedGpuIdle").map(Rule::condition);
        assert_eq!(idle.as_deref(), Some("gpu_util < 5% for 30m"));
    }
}
