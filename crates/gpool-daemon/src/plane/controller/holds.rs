//! Holding a pending job back and letting it go (`gpool hold`, `gpool
//! release`, Slurm's `scontrol hold|release`): a held job keeps its place
//! in the records but no pass starts it (`not_before` = never) until its
//! owner or an admin releases it; its reason says who held it.

use gpool_api as api;
use gpool_core::{JobId, Time};

use super::{ApiError, Controller};
use crate::plane::auth::Caller;

impl Controller {
    pub(super) fn hold(
        &mut self,
        caller: &Caller,
        id: u64,
        hold: bool,
        from: &str,
        now: i64,
    ) -> Result<api::JobView, ApiError> {
        let doc = self.visible(caller, id)?;
        if doc.state != api::JobState::Pending {
            let what = if hold { "held" } else { "released" };
            return Err(ApiError::new(
                409,
                format!("job {id} is {}: only a pending job can be {what}", doc.state.as_str()),
            ));
        }
        if doc.held_by.is_some() == hold {
            return Ok(self.view(&doc));
        }
        let not_before = if hold {
            Time::NEVER
        } else {
            // Back to what held it before: a retry back-off, a budget hold, or nothing.
            doc.not_before_ms.map_or(Time::MIN, Time::from_millis)
        };
        self.snap.set_not_before(JobId(id), not_before).map_err(|e| ApiError::new(500, e.to_string()))?;
        if doc.user != caller.user {
            let verb = if hold { "held" } else { "released" };
            self.audit(caller, from, &format!("{verb} job {id} of {}", doc.user), now);
        }
        let Some(d) = self.jobs.get_mut(&id) else { return Err(ApiError::new(404, format!("job {id} not found"))) };
        d.held_by = hold.then(|| caller.user.clone());
        let view_doc = d.clone();
        self.out.touch(id);
        self.out.reschedule();
        let (kind, said) = if hold {
            ("held", format!("job {id} held by {}", caller.user))
        } else {
            ("released", format!("job {id} released by {}", caller.user))
        };
        self.event(now, Some(id), kind, said);
        Ok(self.view(&view_doc))
    }
}
