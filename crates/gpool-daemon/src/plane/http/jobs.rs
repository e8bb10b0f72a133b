//! `/api/v1/jobs`: submit, list, read, cancel; a job's usage and advice.

use axum::Json;
use axum::extract::State;
use gpool_api as api;

use super::extract::{Created, P, Q, Specs};
use super::params::{AdviceQuery, CostQuery, JobListQuery, JobPath};
use super::who::{Peer, Who};
use super::{AppState, Result, bad, call};
use crate::plane::controller::{Call, ListQuery};

pub(super) async fn submit(
    State(st): State<AppState>,
    who: Who,
    Specs(specs): Specs,
) -> Result<Created<api::Submitted>> {
    Ok(Created(call(&st, &who, |reply| Call::Submit { specs, reply }).await?))
}

pub(super) async fn list(State(st): State<AppState>, who: Who, Q(p): Q<JobListQuery>) -> Result<Json<api::JobList>> {
    // `gpool acct`: jobs that ended in [since, until), RFC 3339.
    let time = |key: &str, v: &Option<String>| {
        v.as_deref()
            .map(|v| api::time::parse_rfc3339(v).ok_or_else(|| bad(format!("{key}: {v:?} is not an RFC 3339 time"))))
            .transpose()
    };
    let mut states = Vec::new();
    for s in p.state.as_deref().map(|s| s.split(',').filter(|x| !x.is_empty()).collect::<Vec<_>>()).unwrap_or_default()
    {
        let st = match s {
            "active" => {
                states.extend([api::JobState::Pending, api::JobState::Starting, api::JobState::Running, api::JobState::Stopping]);
                continue;
            }
            other => api::JobState::parse(other).ok_or_else(|| {
                bad(format!("state: {other:?} is not one of pending, starting, running, stopping, succeeded, failed, cancelled, timed_out, active"))
            })?,
        };
        states.push(st);
    }
    let query = ListQuery {
        states,
        ended_from: time("ended_since", &p.ended_since)?,
        ended_before: time("ended_until", &p.ended_until)?,
        user: p.user,
        team: p.team,
        queue: p.queue,
        after: p.after,
        limit: match p.limit {
            Some(l) if !(1..=1000).contains(&l) => return Err(bad(format!("limit: {l} is not between 1 and 1000"))),
            l => l.unwrap_or(100),
        },
    };
    Ok(Json(call(&st, &who, |reply| Call::List { query, reply }).await?))
}

pub(super) async fn get_job(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Json<api::JobView>> {
    Ok(Json(call(&st, &who, |reply| Call::Get { id, reply }).await?))
}

pub(super) async fn cancel(
    State(st): State<AppState>,
    from: Peer,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Json<api::JobView>> {
    let from = from.0;
    Ok(Json(call(&st, &who, |reply| Call::Cancel { id, from, reply }).await?))
}

/// `?by=team|user|queue|pool|job&since=30d`.
pub(super) async fn cost(State(st): State<AppState>, who: Who, Q(p): Q<CostQuery>) -> Result<Json<api::CostReport>> {
    let by = p.by.unwrap_or_else(|| "team".into());
    let since = match p.since {
        None => std::time::Duration::from_secs(30 * 86_400),
        Some(s) => api::quantity::parse_duration(&s).map_err(|e| bad(format!("since: {e} (e.g. 30d, 12h)")))?,
    };
    Ok(Json(call(&st, &who, |reply| Call::Cost { by, since, reply }).await?))
}

pub(super) async fn usage(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
) -> Result<Json<api::JobUsageView>> {
    Ok(Json(call(&st, &who, |reply| Call::Usage { id, reply }).await?))
}

/// `?minSpan=2m`: judge on less telemetry than the advisor's default 5 minutes.
pub(super) async fn advice(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
    Q(p): Q<AdviceQuery>,
) -> Result<Json<api::AdviceView>> {
    let min_span =
        p.min_span.map(|v| api::quantity::parse_duration(&v).map_err(|e| bad(format!("minSpan: {e}")))).transpose()?;
    Ok(Json(call(&st, &who, |reply| Call::Advice { id, min_span, reply }).await?))
}
