//! `GET /api/v1/jobs/{id}/logs`: a replica's log, and with `follow`, what
//! is written after, until the job has ended and the file is drained
//! (one shared inotify instance and the job's events: `log_watch.rs`).
//! Either way the file is streamed in 64 KiB reads, never held whole: a
//! few requests for a large log must not grow the daemon by its size.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use gpool_api as api;
use tokio::io::AsyncReadExt;
use tokio::sync::broadcast;

use super::extract::{P, Q};
use super::log_watch::{Follow, LogWatch, Watched};
use super::params::{JobPath, LogsQuery};
use super::{AppError, AppState, Result, Who, bad, call};
use crate::plane::auth::Credential;
use crate::plane::controller::{ApiError, Call, LogTarget};

/// `?stream=stdout|stderr&rank=0&follow=true`: the log, and with follow,
/// everything written after, until the job has ended and the file is drained.
pub(super) async fn logs(
    State(st): State<AppState>,
    who: Who,
    P(JobPath { id }): P<JobPath>,
    Q(p): Q<LogsQuery>,
) -> Result<Response> {
    let stream = p.stream.unwrap_or_else(|| "stdout".into());
    if stream != "stdout" && stream != "stderr" {
        return Err(bad(format!("stream: {stream:?} is not stdout or stderr")));
    }
    let rank: u32 = p.rank.unwrap_or(0);
    let follow = match p.follow.as_deref() {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(other) => return Err(bad(format!("follow: {other:?} is not true or false"))),
    };
    let events = st.events.subscribe();
    let target: LogTarget = call(&st, &who, |reply| Call::Logs { id, rank, stream: stream.clone(), reply }).await?;
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let follow = if follow && !target.finished {
        let caller = match &who.0 {
            Credential::Token(t) => format!("token {t}"),
            Credential::Local(u) => format!("uid {}", u.uid),
        };
        let held = st.log_watch.enter(caller).map_err(|e| AppError(ApiError::new(429, e)))?;
        Some((held, st.log_watch.clone()))
    } else {
        None
    };
    Ok((text, Body::from_stream(read_file(target, id, events, follow))).into_response())
}

struct Tail {
    path: std::path::PathBuf,
    job: u64,
    file: Option<tokio::fs::File>,
    /// Following: the caller's count, the shared watcher, and this file's watch once open.
    follow: Option<(Follow, std::sync::Arc<LogWatch>)>,
    watch: Option<Watched>,
    events: broadcast::Receiver<api::EventView>,
    ended: bool,
    done: bool,
}

/// Streams a file to its end; when following, then waits for the kernel to
/// say it changed (inotify) or for the job to end, until it has ended and
/// the file is drained.
fn read_file(
    target: LogTarget,
    job: u64,
    events: broadcast::Receiver<api::EventView>,
    follow: Option<(Follow, std::sync::Arc<LogWatch>)>,
) -> impl Stream<Item = std::io::Result<Bytes>> {
    let ended = follow.is_none();
    let tail = Tail { path: target.path, job, file: None, follow, watch: None, events, ended, done: false };
    stream::unfold(tail, |mut t| async move {
        if t.done {
            return None;
        }
        loop {
            if t.file.is_none() {
                match tokio::fs::File::open(&t.path).await {
                    Ok(f) => {
                        // Watched before the first read: no write after it is missed.
                        t.watch = t.follow.as_ref().and_then(|(_, w)| w.watch(&t.path));
                        t.file = Some(f);
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
                                let _ = w.changes.changed().await;
                            }
                            // No inotify: look again in a second.
                            None => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
                        }
                    };
                    tokio::select! {
                        () = changed => {}
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
