//! Recurring jobs and pipelines (issue 17): a cron schedule in a stated
//! time zone submits a job or a pipeline run at each occurrence, as its
//! owner would. Whether an occurrence is due is the core's decision
//! (`gpool_core::recurring`); the time zone's offsets come from the system's
//! time-zone database here. The last occurrence acted on is written in the
//! same commit as the jobs it submitted (`PutMeta("schedules")`), so a
//! restart neither loses an occurrence nor runs one twice.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_api::schedule::{ScheduleSpec, ScheduleView};
use gpool_core::Time;
use gpool_core::cron::Cron;
use gpool_core::recurring::{self, Due};
use gpool_store::{Store, Write};
use serde::{Deserialize, Serialize};

use super::ApiError;
use super::docs::JobDoc;
use super::outbox::Outbox;
use super::timers::{Timer, Timers};
use crate::plane::auth::{Caller, Role};

const META_KEY: &str = "schedules";

/// A schedule as persisted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ScheduleDoc {
    pub name: String,
    pub user: String,
    pub team: String,
    pub spec: ScheduleSpec,
    /// The last occurrence acted on (ms), or when it was created or last changed.
    pub last_ms: i64,
    #[serde(default)]
    pub last_occurrence: bool,
    #[serde(default)]
    pub last_run: Option<u64>,
    #[serde(default)]
    pub runs: u64,
    #[serde(default)]
    pub skipped: u64,
    /// When to look at it again (not kept: recomputed after a restart).
    #[serde(skip)]
    pub next_ms: Option<i64>,
}

/// Every schedule, by name.
#[derive(Debug, Default)]
pub(super) struct Schedules(BTreeMap<String, ScheduleDoc>);

/// An occurrence of a schedule that is due now, as `Schedules::due` found it:
/// the router submits what it asks for (`submits`) and hands the outcome to `Schedules::settle`.
pub(super) struct Occurrence {
    pub(super) doc: ScheduleDoc,
    decision: Due,
    at: Time,
    next_ms: i64,
}

impl Occurrence {
    /// Whether this occurrence submits the schedule's job or run.
    pub(super) fn submits(&self) -> bool {
        matches!(self.decision, Due::Fire { .. }) && !self.doc.spec.suspend
    }
}

/// A schedule's cron expression and zone, checked.
fn parsed(spec: &ScheduleSpec) -> Result<(Cron, jiff::tz::TimeZone), String> {
    let cron = Cron::parse(&spec.schedule).map_err(|e| format!("schedule: {e}"))?;
    let zone = crate::zones::load(&spec.time_zone).map_err(|e| format!("timeZone: {e}"))?;
    Ok((cron, zone))
}

fn concurrency(spec: &ScheduleSpec) -> Result<bool, String> {
    match spec.concurrency.as_deref() {
        None | Some("forbid") => Ok(false),
        Some("allow") => Ok(true),
        Some(other) => Err(format!("concurrency: {other:?} is not forbid or allow")),
    }
}

impl Schedules {
    /// Checks what a schedule says of itself: its name, cron expression,
    /// time zone and concurrency. What it submits is checked by the caller.
    pub(super) fn check(name: &str, spec: &ScheduleSpec) -> Result<(), ApiError> {
        let bad = |m: String| ApiError::new(400, m);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(bad(format!("{name:?}: a schedule's name is letters, digits, '-', '_' and '.'")));
        }
        parsed(spec).map_err(bad)?;
        concurrency(spec).map_err(bad)?;
        match (&spec.job, &spec.pipeline) {
            (Some(job), None) if job.service.is_some() => {
                Err(bad("job: a service runs all the time; it is not scheduled".into()))
            }
            (Some(_), None) | (None, Some(_)) => Ok(()),
            _ => Err(bad("a schedule submits a job (job:) or a pipeline (pipeline:), one of the two".into())),
        }
    }

    /// Creates or changes a schedule (checked with `check`, and what it submits by the caller).
    pub(super) fn apply(
        &mut self,
        caller: &Caller,
        name: &str,
        spec: ScheduleSpec,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) -> Result<ScheduleView, ApiError> {
        let doc = match self.0.get(name) {
            Some(old) if old.user != caller.user && caller.role != Role::Admin => {
                return Err(ApiError::new(403, format!("schedule {name} belongs to {}; pick another name", old.user)));
            }
            // Changed: its counts stay; occurrences count from now.
            Some(old) => ScheduleDoc {
                spec,
                last_ms: old.last_ms.max(now),
                last_occurrence: false,
                next_ms: None,
                ..old.clone()
            },
            None => ScheduleDoc {
                name: name.to_string(),
                user: caller.user.clone(),
                team: caller.team.clone(),
                spec,
                last_ms: now,
                last_occurrence: false,
                last_run: None,
                runs: 0,
                skipped: 0,
                next_ms: None,
            },
        };
        self.0.insert(name.to_string(), doc);
        self.persist(out);
        let view = self.view(name).ok_or_else(|| ApiError::new(500, "internal error: schedule lost"))?;
        if let Some(next) = view.next_at.as_deref().and_then(api::time::parse_rfc3339) {
            timers.at(next, Timer::Wake);
        }
        out.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "schedule",
            format!("schedule {name} applied by {}", caller.user),
        );
        Ok(view)
    }

    pub(super) fn delete(
        &mut self,
        caller: &Caller,
        name: &str,
        out: &mut Outbox,
        now: i64,
    ) -> Result<ScheduleView, ApiError> {
        let view = self.visible(caller, name)?;
        if view.user != caller.user && caller.role != Role::Admin {
            return Err(ApiError::new(403, format!("schedule {name} belongs to {}", view.user)));
        }
        self.0.remove(name);
        self.persist(out);
        out.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "schedule",
            format!("schedule {name} deleted by {}", caller.user),
        );
        Ok(view)
    }

    pub(super) fn views(&self, caller: &Caller) -> Vec<ScheduleView> {
        let names: Vec<&String> =
            self.0.values().filter(|d| caller.sees_all() || d.user == caller.user).map(|d| &d.name).collect();
        names.into_iter().filter_map(|n| self.view(n)).collect()
    }

    fn visible(&self, caller: &Caller, name: &str) -> Result<ScheduleView, ApiError> {
        self.0
            .get(name)
            .filter(|d| caller.sees_all() || d.user == caller.user)
            .and_then(|_| self.view(name))
            .ok_or_else(|| ApiError::new(404, format!("schedule {name} not found")))
    }

    fn view(&self, name: &str) -> Option<ScheduleView> {
        let d = self.0.get(name)?;
        let next = parsed(&d.spec).ok().and_then(|(cron, zone)| {
            let last = Time::from_millis(d.last_ms);
            cron.next_after(last, &crate::zones::rules(&zone, last))
        });
        Some(ScheduleView {
            name: d.name.clone(),
            user: d.user.clone(),
            schedule: d.spec.schedule.clone(),
            time_zone: d.spec.time_zone.clone(),
            concurrency: if concurrency(&d.spec) == Ok(true) { "allow" } else { "forbid" }.into(),
            suspended: d.spec.suspend,
            kind: if d.spec.pipeline.is_some() { "pipeline" } else { "job" }.into(),
            next_at: next.map(|t| api::time::rfc3339(t.as_millis())),
            last_at: d.last_occurrence.then(|| api::time::rfc3339(d.last_ms)),
            last_run: d.last_run,
            runs: d.runs,
            skipped: d.skipped,
            spec: d.spec.clone(),
        })
    }

    /// The occurrences due by `now` (a schedule whose next is later gets a
    /// timer for it instead).
    pub(super) fn due(&mut self, jobs: &BTreeMap<u64, JobDoc>, timers: &mut Timers, now: i64) -> Vec<Occurrence> {
        let mut due = Vec::new();
        for d in self.0.values_mut() {
            if d.next_ms.is_some_and(|n| now < n) {
                continue;
            }
            let Ok((cron, zone)) = parsed(&d.spec) else { continue };
            let last = Time::from_millis(d.last_ms);
            let rules = crate::zones::rules(&zone, last);
            let running = still_running(d, jobs);
            let allow = concurrency(&d.spec) == Ok(true);
            let decision = recurring::due(&cron, &rules, last, Time::from_millis(now), running, allow);
            let Some(at) = decision.occurrence() else {
                let next = match decision {
                    Due::Wait { next: Some(t) } => t.as_millis(),
                    _ => i64::MAX,
                };
                timers.at(next, Timer::Wake);
                d.next_ms = Some(next);
                continue;
            };
            let next_ms = cron.next_after(at, &rules).map_or(i64::MAX, Time::as_millis);
            due.push(Occurrence { doc: d.clone(), decision, at, next_ms });
        }
        due
    }

    /// Records an occurrence: `submitted` is what submitting its job or run
    /// gave (`None` where it `submits` nothing); wakes at the next one.
    pub(super) fn settle(
        &mut self,
        o: Occurrence,
        submitted: Option<Result<u64, ApiError>>,
        timers: &mut Timers,
        out: &mut Outbox,
        now: i64,
    ) {
        let d = &o.doc;
        let name = d.name.clone();
        let when = api::time::rfc3339(o.at.as_millis());
        let mut doc = d.clone();
        doc.last_ms = o.at.as_millis();
        doc.last_occurrence = true;
        let (missed, said) = match (&o.decision, submitted) {
            (Due::Fire { missed, .. }, _) if d.spec.suspend => {
                (*missed + 1, format!("suspended; its run of {when} passed"))
            }
            (Due::Fire { missed, .. }, Some(Ok(id))) => {
                doc.runs += 1;
                doc.last_run = Some(id);
                let what = if d.spec.pipeline.is_some() { "pipeline run" } else { "job" };
                (*missed, format!("submitted {what} {id} for {when}"))
            }
            (Due::Fire { missed, .. }, Some(Err(e))) => {
                (*missed + 1, format!("could not submit its run of {when}: {}", e.message))
            }
            (Due::Fire { missed, .. }, None) => (*missed + 1, format!("its run of {when} was not submitted")),
            (Due::Skip { missed, .. }, _) => (
                *missed + 1,
                format!(
                    "its run of {when} passed: run {} has not ended (concurrency: forbid)",
                    d.last_run.unwrap_or(0)
                ),
            ),
            (Due::Wait { .. }, _) => (0, String::new()),
        };
        doc.skipped += u64::from(missed);
        let extra = match o.decision {
            Due::Fire { missed: m, .. } | Due::Skip { missed: m, .. } if m > 0 => {
                format!(" ({m} earlier occurrence(s) passed while it could not run)")
            }
            _ => String::new(),
        };
        out.event_of(now, doc.last_run, Some(d.user.clone()), "schedule", format!("schedule {name}: {said}{extra}"));
        timers.at(o.next_ms, Timer::Wake);
        doc.next_ms = Some(o.next_ms);
        self.0.insert(name, doc);
    }

    pub(super) fn persist(&self, out: &mut Outbox) {
        if let Ok(text) = serde_json::to_string(&self.0) {
            out.write(Write::PutMeta(META_KEY.into(), text));
        }
    }

    pub(super) fn restore(store: &mut dyn Store) -> anyhow::Result<Schedules> {
        match store.meta(META_KEY)? {
            Some(text) => Ok(Schedules(serde_json::from_str(&text)?)),
            None => Ok(Schedules::default()),
        }
    }
}

/// Whether the run a schedule last submitted is still going.
fn still_running(d: &ScheduleDoc, jobs: &BTreeMap<u64, JobDoc>) -> bool {
    let Some(first) = d.last_run else { return false };
    let n = match jobs.get(&first).and_then(|j| j.pipeline.as_ref()) {
        Some(p) if p.run == first => u64::from(p.jobs),
        _ => 1,
    };
    (first..first + n).any(|id| jobs.get(&id).is_some_and(|j| !j.state.is_terminal()))
}

/// The owner a schedule submits as.
pub(super) fn owner(d: &ScheduleDoc) -> Caller {
    Caller { user: d.user.clone(), team: d.team.clone(), role: Role::User }
}
