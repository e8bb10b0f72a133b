//! The outbox: what a turn has produced so far and the shell will carry
//! out (store writes, answers, orders to the local agent, published
//! events, alert notices, provider programs), and whether the next turn
//! needs a scheduling pass. Every room may add to it; only `take` empties
//! it, once per turn.

use std::collections::BTreeSet;

use gpool_api as api;
use gpool_store::{EventRow, Write};

use super::calls::{Answer, ApiError, Reply};
use super::docs::JobDoc;
use super::{Order, ProvisionOrder, Turn};
use crate::plane::webhook::Notice;

#[derive(Default)]
pub(super) struct Outbox {
    pub(super) writes: Vec<Write>,
    /// Jobs whose documents changed this turn (written once, at its end).
    pub(super) touched: BTreeSet<u64>,
    pub(super) replies: Vec<Answer>,
    pub(super) local: Vec<Order>,
    pub(super) published: Vec<api::EventView>,
    pub(super) notices: Vec<Notice>,
    pub(super) provision: Vec<ProvisionOrder>,
    /// The sequence number of the next event.
    pub(super) next_seq: u64,
    /// Something changed that the next scheduling pass must see.
    pub(super) dirty: bool,
}

impl Outbox {
    pub(super) fn new(next_seq: u64) -> Outbox {
        Outbox { next_seq, dirty: true, ..Outbox::default() }
    }

    pub(super) fn write(&mut self, w: Write) {
        self.writes.push(w);
    }

    /// The job's document changed: it is written at the turn's end.
    pub(super) fn touch(&mut self, job: u64) {
        self.touched.insert(job);
    }

    /// The next turn runs a scheduling pass.
    pub(super) fn reschedule(&mut self) {
        self.dirty = true;
    }

    pub(super) fn reply<T: Send + 'static>(&mut self, tx: Reply<T>, v: Result<T, ApiError>) {
        self.replies.push(Answer::new(tx, v));
    }

    /// An event of a job (its owner sees it in their stream) or of the pool (`job`: `None`).
    pub(super) fn job_event(&mut self, now: i64, job: &JobDoc, kind: &str, message: String) {
        self.event_of(now, Some(job.id), Some(job.user.clone()), kind, message);
    }

    /// What an operator did, in the audit trail (an `audit` event of the pool).
    pub(super) fn audit(&mut self, caller: &crate::plane::auth::Caller, from: &str, what: &str, now: i64) {
        self.event_of(now, None, None, "audit", super::acts::audit_text(caller, from, what));
    }

    /// An event; `user` is the owner of `job`, whose stream shows it.
    pub(super) fn event_of(&mut self, now: i64, job: Option<u64>, user: Option<String>, kind: &str, message: String) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.writes.push(Write::AppendEvent(EventRow {
            seq,
            at_ms: now,
            job,
            kind: kind.into(),
            message: message.clone(),
        }));
        self.published.push(api::EventView { seq, at: api::time::rfc3339(now), job, user, kind: kind.into(), message });
    }

    /// Empties the outbox into a turn; `job_docs` are the touched jobs' writes.
    pub(super) fn take(&mut self, routes: Option<std::sync::Arc<super::Routes>>) -> Turn {
        Turn {
            writes: std::mem::take(&mut self.writes),
            answers: std::mem::take(&mut self.replies),
            local: std::mem::take(&mut self.local),
            published: std::mem::take(&mut self.published),
            notices: std::mem::take(&mut self.notices),
            provision: std::mem::take(&mut self.provision),
            routes,
        }
    }
}
