//! `GET /api/v1/jobs/{id}/logs`: a replica's log, and with `follow`, what
//! is written after, until the job has ended and the file is drained
//! (inotify and the job's events, no polling).

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};
use gpool_api as api;
use tokio::io::AsyncReadExt;
use tokio::sync::broadcast;

use super::{AppState, Result, Who, bad, call, job_id, number, only};
use crate::plane::controller::{Call, LogTarget};

/// `?stream=stdout|stderr&rank=0&follow=true`: the log, and with follow,
/// everything written after, until the job has ended and the file is drained.
pub(super) async fn logs(
    State(st): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Response> {
    only(&p, &["stream", "rank", "follow"])?;
    let id = job_id(&id)?;
    let stream = p.get("stream").cloned().unwrap_or_else(|| "stdout".into());
    if stream != "stdout" && stream != "stderr" {
        return Err(bad(format!("stream: {stream:?} is not stdout or stderr")));
    }
    let rank: u32 = number(&p, "rank")?.unwrap_or(0);
    let follow = match p.get("follow").map(String::as_str) {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(other) => return Err(bad(format!("follow: {other:?} is not true or false"))),
    };
    let events = st.events.subscribe();
    let target: LogTarget = call(&st, &who, |reply| Call::Logs { id, rank, stream: stream.clone(), reply }).await?;
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !follow || target.finished {
        let bytes = tokio::fs::read(&target.path).await.unwrap_or_default();
        return Ok((text, bytes).into_response());
    }
    Ok((text, Body::from_stream(follow_file(target, id, events))).into_response())
}

struct Tail {
    path: std::path::PathBuf,
    job: u64,
    file: Option<tokio::fs::File>,
    watch: Option<inotify::EventStream<Vec<u8>>>,
    events: broadcast::Receiver<api::EventView>,
    ended: bool,
    done: bool,
}

/// Streams a growing file: read to the end, then wait for the kernel to say
/// it changed (inotify) or for the job to end; never polls.
fn follow_file(
    target: LogTarget,
    job: u64,
    events: broadcast::Receiver<api::EventView>,
) -> impl Stream<Item = std::io::Result<Bytes>> {
    let tail = Tail { path: target.path, job, file: None, watch: None, events, ended: false, done: false };
    stream::unfold(tail, |mut t| async move {
        if t.done {
            return None;
        }
        loop {
            if t.file.is_none() {
                match tokio::fs::File::open(&t.path).await {
                    Ok(f) => {
                        t.file = Some(f);
                        if let Ok(ino) = inotify::Inotify::init() {
                            let ok = ino
                                .watches()
                                .add(&t.path, inotify::WatchMask::MODIFY | inotify::WatchMask::CLOSE_WRITE)
                                .is_ok();
                            t.watch = if ok { ino.into_event_stream(vec![0u8; 4096]).ok() } else { None };
                        }
                    }
                    // Not created yet (the job has not started): wait for news of the job.
                    Err(_) if !t.ended => {
                        if wait_job_news(&mut t).await {
                            continue;
                        }
                        return None;
                    }
                    Err(_) => return None,
                }
            }
            let mut buf = vec![0u8; 64 * 1024];
            let n = match t.file.as_mut() {
                Some(f) => f.read(&mut buf).await,
                None => Ok(0),
            };
            match n {
                Ok(0) if t.ended => return None,
                Ok(0) => {
                    let changed = async {
                        match t.watch.as_mut() {
                            Some(w) => {
                                let _ = w.next().await;
                            }
                            None => std::future::pending::<()>().await,
                        }
                    };
                    tokio::select! {
                        _ = changed => {}
                        alive = wait_job_news_ref(&mut t.events, t.job) => { if !alive { t.ended = true; } }
                    }
                }
                Ok(n) => {
                    buf.truncate(n);
                    return Some((Ok(Bytes::from(buf)), t));
                }
                Err(e) => {
                    t.done = true;
                    return Some((Err(e), t));
                }
            }
        }
    })
}

/// Waits for the next event of this job; false once it has ended (or the stream closed).
async fn wait_job_news_ref(events: &mut broadcast::Receiver<api::EventView>, job: u64) -> bool {
    loop {
        match events.recv().await {
            Ok(e) if e.job == Some(job) => {
                return !matches!(e.kind.as_str(), "succeeded" | "failed" | "cancelled" | "timed_out");
            }
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
}

async fn wait_job_news(t: &mut Tail) -> bool {
    let alive = wait_job_news_ref(&mut t.events, t.job).await;
    if !alive {
        t.ended = true;
    }
    // Either it started (the file exists now) or it ended (read what there is).
    true
}
