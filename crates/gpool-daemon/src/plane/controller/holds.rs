//! Holding a pending job back and letting it go (`gpool hold`, `gpool
//! release`, Slurm's `scontrol hold|release`): a held job keeps its place
//! in the records but no pass starts it (`not_before` = never) until its
//! owner or an admin releases it; its reason says who held it.

use std::collections::BTreeMap;

use gpool_api as api;
use gpool_core::{JobId, Snapshot, Time};

use super::ApiError;
use super::docs::JobDoc;
use super::outbox::Outbox;
use crate::plane::auth::Caller;

/// Holds (`hold`) or releases the pending job `doc` (one the caller may see); returns it as it is now.
#[allow(clippy::too_many_arguments)]
pub(super) fn hold(
    caller: &Caller,
    doc: JobDoc,
    hold: bool,
    from: &str,
    snap: &mut Snapshot,
    jobs: &mut BTreeMap<u64, JobDoc>,
    out: &mut Outbox,
    now: i64,
) -> Result<JobDoc, ApiError> {
    let id = doc.id;
    if doc.state != api::JobState::Pending {
        let what = if hold { "held" } else { "released" };
        return Err(ApiError::new(
            409,
            format!("job {id} is {}: only a pending job can be {what}", doc.state.as_str()),
        ));
    }
    if doc.held_by.is_some() == hold {
        return Ok(doc);
    }
    let not_before = if hold {
        Time::NEVER
    } else {
        // Back to what held it before: a retry back-off, a budget hold, or nothing.
        doc.not_before_ms.map_or(Time::MIN, Time::from_millis)
    };
    snap.set_not_before(JobId(id), not_before).map_err(|e| ApiError::new(500, e.to_string()))?;
    if doc.user != caller.user {
        let verb = if hold { "held" } else { "released" };
        out.audit(caller, from, &format!("{verb} job {id} of {}", doc.user), now);
    }
    let Some(d) = jobs.get_mut(&id) else { return Err(ApiError::new(404, format!("job {id} not found"))) };
    d.held_by = hold.then(|| caller.user.clone());
    let view_doc = d.clone();
    out.touch(id);
    out.reschedule();
    let (kind, said) = if hold {
        ("held", format!("job {id} held by {}", caller.user))
    } else {
        ("released", format!("job {id} released by {}", caller.user))
    };
    out.job_event(now, &view_doc, kind, said);
    Ok(view_doc)
}
