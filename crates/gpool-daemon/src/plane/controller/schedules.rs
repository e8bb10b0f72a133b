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
use gpool_store::Write;
use serde::{Deserialize, Serialize};

use super::timers::Timer;
use super::{ApiError, Controller};
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
pub(super) type Schedules = BTreeMap<String, ScheduleDoc>;

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

impl Controller {
    pub(super) fn apply_schedule(
        &mut self,
        caller: &Caller,
        name: &str,
        spec: ScheduleSpec,
        now: i64,
    ) -> Result<ScheduleView, ApiError> {
        let bad = |m: String| ApiError::new(400, m);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(bad(format!("{name:?}: a schedule's name is letters, digits, '-', '_' and '.'")));
        }
        parsed(&spec).map_err(bad)?;
        concurrency(&spec).map_err(bad)?;
        // What it submits must be what this caller could submit now.
        match (&spec.job, &spec.pipeline) {
            (Some(job), None) => {
                if job.service.is_some() {
                    return Err(bad("job: a service runs all the time; it is not scheduled".into()));
                }
                self.checked(caller, std::slice::from_ref(job), now).map_err(|e| at("job", e))?;
            }
            (None, Some(p)) => {
                self.prepare_pipeline(caller, p, now).map_err(|e| at("pipeline", e))?;
            }
            _ => return Err(bad("a schedule submits a job (job:) or a pipeline (pipeline:), one of the two".into())),
        }
        let doc = match self.schedules.get(name) {
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
        self.schedules.insert(name.to_string(), doc);
        self.persist_schedules();
        let view = self.schedule_view(name).ok_or_else(|| ApiError::new(500, "internal error: schedule lost"))?;
        if let Some(next) = view.next_at.as_deref().and_then(api::time::parse_rfc3339) {
            self.timers.at(next, Timer::Wake);
        }
        self.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "schedule",
            format!("schedule {name} applied by {}", caller.user),
        );
        Ok(view)
    }

    pub(super) fn delete_schedule(&mut self, caller: &Caller, name: &str, now: i64) -> Result<ScheduleView, ApiError> {
        let view = self.visible_schedule(caller, name)?;
        if view.user != caller.user && caller.role != Role::Admin {
            return Err(ApiError::new(403, format!("schedule {name} belongs to {}", view.user)));
        }
        self.schedules.remove(name);
        self.persist_schedules();
        self.event_of(
            now,
            None,
            Some(caller.user.clone()),
            "schedule",
            format!("schedule {name} deleted by {}", caller.user),
        );
        Ok(view)
    }

    pub(super) fn schedule_views(&self, caller: &Caller) -> Vec<ScheduleView> {
        let names: Vec<&String> =
            self.schedules.values().filter(|d| caller.sees_all() || d.user == caller.user).map(|d| &d.name).collect();
        names.into_iter().filter_map(|n| self.schedule_view(n)).collect()
    }

    fn visible_schedule(&self, caller: &Caller, name: &str) -> Result<ScheduleView, ApiError> {
        self.schedules
            .get(name)
            .filter(|d| caller.sees_all() || d.user == caller.user)
            .and_then(|_| self.schedule_view(name))
            .ok_or_else(|| ApiError::new(404, format!("schedule {name} not found")))
    }

    fn schedule_view(&self, name: &str) -> Option<ScheduleView> {
        let d = self.schedules.get(name)?;
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

    /// Whether the run a schedule last submitted is still going.
    fn still_running(&mut self, d: &ScheduleDoc) -> bool {
        let Some(first) = d.last_run else { return false };
        let jobs = match self.jobs.get(&first).and_then(|j| j.pipeline.as_ref()) {
            Some(p) if p.run == first => u64::from(p.jobs),
            _ => 1,
        };
        (first..first + jobs).any(|id| self.jobs.get(&id).is_some_and(|j| !j.state.is_terminal()))
    }

    /// Acts on every schedule whose occurrence is due: submits its job or
    /// run as its owner, or passes the occurrence over; wakes at the next.
    pub(super) fn fire_schedules(&mut self, now: i64) {
        let names: Vec<String> = self.schedules.keys().cloned().collect();
        let mut changed = false;
        for name in names {
            let Some(d) = self.schedules.get(&name).cloned() else { continue };
            if d.next_ms.is_some_and(|n| now < n) {
                continue;
            }
            let Ok((cron, zone)) = parsed(&d.spec) else { continue };
            let last = Time::from_millis(d.last_ms);
            let rules = crate::zones::rules(&zone, last);
            let running = self.still_running(&d);
            let allow = concurrency(&d.spec) == Ok(true);
            let decision = recurring::due(&cron, &rules, last, Time::from_millis(now), running, allow);
            let Some(occurrence) = decision.occurrence() else {
                let next = match decision {
                    Due::Wait { next: Some(t) } => t.as_millis(),
                    _ => i64::MAX,
                };
                self.timers.at(next, Timer::Wake);
                if let Some(doc) = self.schedules.get_mut(&name) {
                    doc.next_ms = Some(next);
                }
                continue;
            };
            let when = api::time::rfc3339(occurrence.as_millis());
            let mut doc = d.clone();
            doc.last_ms = occurrence.as_millis();
            doc.last_occurrence = true;
            let (missed, said) = match decision {
                Due::Fire { missed, .. } if d.spec.suspend => {
                    (missed + 1, format!("suspended; its run of {when} passed"))
                }
                Due::Fire { missed, .. } => match self.submit_scheduled(&d, now) {
                    Ok(id) => {
                        doc.runs += 1;
                        doc.last_run = Some(id);
                        (
                            missed,
                            format!(
                                "submitted {} {id} for {when}",
                                if d.spec.pipeline.is_some() { "pipeline run" } else { "job" }
                            ),
                        )
                    }
                    Err(e) => (missed + 1, format!("could not submit its run of {when}: {}", e.message)),
                },
                Due::Skip { missed, .. } => (
                    missed + 1,
                    format!(
                        "its run of {when} passed: run {} has not ended (concurrency: forbid)",
                        d.last_run.unwrap_or(0)
                    ),
                ),
                Due::Wait { .. } => (0, String::new()),
            };
            doc.skipped += u64::from(missed);
            let extra = match decision {
                Due::Fire { missed: m, .. } | Due::Skip { missed: m, .. } if m > 0 => {
                    format!(" ({m} earlier occurrence(s) passed while it could not run)")
                }
                _ => String::new(),
            };
            self.event_of(
                now,
                doc.last_run,
                Some(d.user.clone()),
                "schedule",
                format!("schedule {name}: {said}{extra}"),
            );
            let next = cron.next_after(occurrence, &rules).map_or(i64::MAX, Time::as_millis);
            self.timers.at(next, Timer::Wake);
            doc.next_ms = Some(next);
            self.schedules.insert(name.clone(), doc);
            changed = true;
        }
        if changed {
            self.persist_schedules();
        }
    }

    fn submit_scheduled(&mut self, d: &ScheduleDoc, now: i64) -> Result<u64, ApiError> {
        let owner = Caller { user: d.user.clone(), team: d.team.clone(), role: Role::User };
        match (&d.spec.job, &d.spec.pipeline) {
            (Some(job), _) => {
                let mut job = job.clone();
                job.labels.insert("gpool.io/schedule".into(), d.name.clone());
                self.submit(&owner, vec![job], now)?.ids.first().copied().ok_or_else(|| ApiError::new(500, "no job"))
            }
            (None, Some(p)) => Ok(self.submit_pipeline(&owner, p.clone(), now)?.run),
            (None, None) => Err(ApiError::new(400, "it names neither a job nor a pipeline")),
        }
    }

    fn persist_schedules(&mut self) {
        if let Ok(text) = serde_json::to_string(&self.schedules) {
            self.out.write(Write::PutMeta(META_KEY.into(), text));
        }
    }

    pub(super) fn restore_schedules(&mut self) -> anyhow::Result<()> {
        if let Some(text) = self.store.meta(META_KEY)? {
            self.schedules = serde_json::from_str(&text)?;
        }
        Ok(())
    }
}

fn at(what: &str, e: ApiError) -> ApiError {
    ApiError::new(e.status, format!("{what}: {}", e.message))
}
