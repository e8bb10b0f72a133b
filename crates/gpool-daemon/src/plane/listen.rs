//! The HTTP server's connections, kept within bounds: at most a set number
//! at once (the rest wait in the kernel's backlog), and a connection that
//! does not finish a request's head within the header timeout (a client
//! that connects and sends nothing, half a request, or an idle keep-alive
//! connection) is closed. Long polls, event streams and log follows are
//! answers in progress, not waiting heads, so they are not cut.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// How the API's connections are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// Time a connection has to send a complete request head.
    pub header_timeout: Duration,
}

impl Limits {
    /// Limits for a process that may have `open_files` descriptors: half of
    /// them for connections (the rest for jobs' shims, logs and the store),
    /// at most 16,384.
    pub fn for_open_files(open_files: Option<u64>, header_timeout: Duration) -> Limits {
        let connections = open_files.map_or(16_384, |n| (n / 2).clamp(64, 16_384)) as usize;
        Limits { connections, header_timeout }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets the
/// connections in progress finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let permits = Arc::new(Semaphore::new(limits.connections));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept:
                    // wait a moment rather than spin, and keep serving.
                    eprintln!("gpool: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small request/response exchanges: without TCP_NODELAY, Nagle and
        // delayed ACKs add ~40 ms to a submit.
        let _ = stream.set_nodelay(true);
        // Every request knows where it came from (`ConnectInfo`), as with axum's own server.
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            },
        ));
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let acceptor = acceptor.clone();
        let handshake_timeout = limits.header_timeout;
        tokio::spawn(async move {
            // A closed or timed-out connection is the client's business.
            match acceptor {
                None => {
                    let _ = watcher.watch(builder.serve_connection(TokioIo::new(stream), service)).await;
                }
                Some(acceptor) => {
                    // A handshake is held to the same bound as a request's head.
                    if let Ok(Ok(tls)) = tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        let _ = watcher.watch(builder.serve_connection(TokioIo::new(tls), service)).await;
                    }
                }
            }
            drop(permit);
        });
    }
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_take_half_the_descriptors_within_bounds() {
        let t = Duration::from_secs(30);
        assert_eq!(Limits::for_open_files(Some(1_024), t).connections, 512);
        assert_eq!(Limits::for_open_files(Some(100), t).connections, 64);
        assert_eq!(Limits::for_open_files(Some(1_048_576), t).connections, 16_384);
        assert_eq!(Limits::for_open_files(None, t).connections, 16_384);
    }
}
