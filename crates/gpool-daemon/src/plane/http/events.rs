//! `GET /api/v1/events`: the event log as server-sent events, history
//! first (a page at a time), then live.

use std::convert::Infallible;
use std::time::Duration;

use aide::generate::GenContext;
use aide::openapi::{MediaType, Operation, Response as DocResponse, StatusCode};
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};
use gpool_api as api;

use super::extract::Q;
use super::params::EventsQuery;
use super::who::Who;
use super::{AppState, Result, call};
use crate::plane::controller::{Call, EVENTS_PAGE};

/// An event stream (`text/event-stream`): each event's `id` is its
/// sequence number, its `event` its kind, its `data` an `EventView`.
pub(super) struct EventStream<S>(Sse<S>);

impl<S> IntoResponse for EventStream<S>
where
    Sse<S>: IntoResponse,
{
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

impl<S> aide::OperationOutput for EventStream<S> {
    type Inner = api::EventView;

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<DocResponse> {
        // What each event's `data` is: OpenAPI 3.1 has no word for it, so an extension says.
        let data = ctx.schema.subschema_for::<api::EventView>();
        let media = MediaType {
            extensions: [("x-event-data".to_string(), data.to_value())].into_iter().collect(),
            ..MediaType::default()
        };
        Some(DocResponse {
            description: "server-sent events: `id` the sequence number, `event` the kind, `data` an EventView in JSON"
                .into(),
            content: [("text/event-stream".to_string(), media)].into_iter().collect(),
            ..DocResponse::default()
        })
    }

    fn inferred_responses(ctx: &mut GenContext, op: &mut Operation) -> Vec<(Option<StatusCode>, DocResponse)> {
        Self::operation_response(ctx, op).map(|r| (Some(StatusCode::Code(200)), r)).into_iter().collect()
    }
}

/// Server-sent events: history after `?after=SEQ` (optionally `&job=ID`), then live.
pub(super) async fn events(
    State(st): State<AppState>,
    who: Who,
    Q(p): Q<EventsQuery>,
) -> Result<EventStream<impl Stream<Item = std::result::Result<SseEvent, Infallible>>>> {
    let after: u64 = p.after.unwrap_or(u64::MAX);
    let job: Option<u64> = p.job;
    let me = call(&st, &who, |reply| Call::WhoAmI { reply }).await?;
    // A job the caller may not see is not found, at once, whether or not it asks for history.
    if let Some(id) = job.filter(|_| after == u64::MAX) {
        call(&st, &who, |reply| Call::Get { id, reply }).await?;
    }
    let live = st.events.subscribe();
    // History comes a page at a time, until a page is not full; then the
    // live events after the last one (the subscription above keeps those
    // that happen meanwhile).
    let first = if after == u64::MAX {
        Vec::new()
    } else {
        call(&st, &who, |reply| Call::Events { after, job, reply }).await?
    };
    let last = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(first.last().map_or(0, |e| e.seq)));
    let more = first.len() >= EVENTS_PAGE;
    let (pager_st, pager_who, seen) = (st.clone(), who.0.clone(), last.clone());
    let pages = stream::unfold(more, move |more| {
        let (st, who, seen) = (pager_st.clone(), pager_who.clone(), seen.clone());
        async move {
            if !more {
                return None;
            }
            let after = seen.load(std::sync::atomic::Ordering::SeqCst);
            let page = call(&st, &Who(who), |reply| Call::Events { after, job, reply }).await.unwrap_or_default();
            if let Some(e) = page.last() {
                seen.store(e.seq, std::sync::atomic::Ordering::SeqCst);
            }
            let more = page.len() >= EVENTS_PAGE;
            Some((stream::iter(page), more))
        }
    })
    .flatten();
    let history = stream::iter(first).chain(pages);
    // Admins and readers see every event, others their own jobs'.
    let sees_all = me.role == "admin" || me.role == "reader";
    let user = me.user;
    let visible = move |e: &api::EventView| {
        (job.is_none() || e.job == Some(job.unwrap_or(0))) && (sees_all || e.user.as_deref() == Some(user.as_str()))
    };
    let to_sse = |e: api::EventView| {
        Ok(SseEvent::default().id(e.seq.to_string()).event(e.kind.clone()).json_data(&e).unwrap_or_default())
    };
    let past = history.map(to_sse);
    let now = tokio_stream::wrappers::BroadcastStream::new(live).filter_map(move |r| {
        let last = last.load(std::sync::atomic::Ordering::SeqCst);
        let keep = r.ok().filter(|e| e.seq > last && visible(e));
        async move { keep.map(to_sse) }
    });
    Ok(EventStream(Sse::new(past.chain(now)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))))
}
