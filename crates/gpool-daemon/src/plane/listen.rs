//! The HTTP server's connections, kept within bounds: at most a set number
//! at once (the rest wait in the kernel's backlog), and a connection that
//! does not finish a request's head within the header timeout (a client
//! that connects and sends nothing, half a request, or an idle keep-alive
//! connection) is closed. Long polls, event streams and log follows are
//! answers in progress, not waiting heads, so they are not cut.
//!
//! Beside TCP, the server may listen on a Unix socket: there the kernel
//! tells who connected (`SO_PEERCRED`), and each request carries it as a
//! [`LocalPeer`] (`http/who.rs` makes it the caller when no token comes).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, UnixListener};
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

    /// The service proxy's share beside the API's: a quarter of the API's
    /// connections (each proxied request also holds one to its replica), so
    /// that neither listener can take the other's descriptors.
    pub fn for_proxy(self) -> Limits {
        Limits { connections: (self.connections / 4).max(32), header_timeout: self.header_timeout }
    }
}

/// Who is at the other end of a Unix-socket connection, as the kernel says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPeer {
    pub uid: u32,
    pub pid: Option<i32>,
}

/// A connection accepted on either listener.
enum Accepted {
    Tcp(tokio::net::TcpStream, std::net::SocketAddr),
    Unix(tokio::net::UnixStream),
}

/// The next connection on the Unix socket, if there is one (else never).
async fn accept_local(local: Option<&UnixListener>) -> std::io::Result<tokio::net::UnixStream> {
    match local {
        Some(l) => l.accept().await.map(|(s, _)| s),
        None => std::future::pending().await,
    }
}

/// Serves `app` on `listener` (and on the Unix socket `local`, if given)
/// until `shutdown` resolves, then lets the connections in progress finish.
pub async fn serve(
    listener: TcpListener,
    local: Option<UnixListener>,
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
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted.map(|(s, a)| Accepted::Tcp(s, a)),
            accepted = accept_local(local.as_ref()) => accepted.map(Accepted::Unix),
        };
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or a connection reset before accept:
                // wait a moment rather than spin, and keep serving.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let (stream, peer) = match accepted {
            Accepted::Tcp(stream, peer) => (stream, peer),
            Accepted::Unix(stream) => {
                // A connection whose peer the kernel cannot name is refused.
                let Ok(cred) = stream.peer_cred() else { continue };
                let who = LocalPeer { uid: cred.uid(), pid: cred.pid() };
                let service = TowerToHyperService::new(app.clone().map_request(
                    move |mut req: axum::http::Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(who);
                        req
                    },
                ));
                tokio::spawn(async move {
                    let _ = watcher.watch(builder.serve_connection(TokioIo::new(stream), service)).await;
                    drop(permit);
                });
                continue;
            }
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
        assert_eq!(Limits::for_open_files(Some(20_000), t).for_proxy().connections, 2_500);
        assert_eq!(Limits::for_open_files(Some(100), t).for_proxy().connections, 32);
    }
}
