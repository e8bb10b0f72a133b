//! The process around a control plane: its async runtime, its stop signal
//! (SIGINT or SIGTERM, whenever they come), the API's socket held for its
//! whole life, and what it answers there while it does not lead.

use std::time::Duration;

use anyhow::Context;

/// A process's async runtime and its stop signal, made once: SIGINT or
/// SIGTERM, whenever they come (while serving, or while waiting for the
/// database), stop it.
pub struct Process {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    /// The API's socket, bound once for the process's whole life when it
    /// may wait as a standby (`gpool serve`): nobody else can take the port
    /// while it waits, and it answers there `503 standby` until it leads.
    held: std::sync::Mutex<Option<std::net::TcpListener>>,
}

/// Why a control plane that led is not leading now (it lost its database),
/// shared with the answering of its held socket; `None` for a plain standby.
pub type Away = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// What a standby answers on its held socket.
const STANDBY: &str = "standby: another control plane leads; try the next address\n";

impl Process {
    pub fn new() -> anyhow::Result<Process> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (tx, stop) = tokio::sync::watch::channel(false);
        rt.spawn(async move {
            shutdown_signal().await;
            let _ = tx.send(true);
        });
        Ok(Process { rt, stop, held: std::sync::Mutex::new(None) })
    }

    /// Binds the API's address now and keeps it for the process's life.
    pub fn hold(&self, addr: std::net::SocketAddr) -> anyhow::Result<std::net::SocketAddr> {
        let l = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        l.set_nonblocking(true)?;
        let bound = l.local_addr()?;
        *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(l);
        Ok(bound)
    }

    /// A copy of the held socket, if one is held.
    pub(crate) fn held(&self) -> anyhow::Result<Option<std::net::TcpListener>> {
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(match held.as_ref() {
            Some(l) => Some(l.try_clone()?),
            None => None,
        })
    }

    /// Answers `503 standby` to every connection on the held socket until
    /// the returned guard is ended ([`Standby::end`]), before leading. A
    /// control plane that led and lost its database says so instead
    /// (`away`, with `X-Gpool-Store-Away`): clients still move on to the
    /// next address, and show that message if none leads. With `tls` (the
    /// control plane serves HTTPS), the answer is in TLS too, so a client
    /// (`gpool ping`, a health check) can tell a standby from a dead port.
    pub fn answer_as_standby(
        &self,
        away: Away,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> anyhow::Result<Option<Standby>> {
        let Some(l) = self.held()? else { return Ok(None) };
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = self.rt.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(l) else { return };
            loop {
                let Ok((c, _)) = listener.accept().await else { continue };
                let (text, extra): (String, &'static str) =
                    match away.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_deref() {
                        Some(why) => (format!("{why}\n"), "X-Gpool-Store-Away: 1\r\n"),
                        None => (STANDBY.into(), ""),
                    };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let answer = format!(
                        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n\
                         X-Gpool-Standby: 1\r\n{extra}Connection: close\r\nContent-Length: {}\r\n\r\n{text}",
                        text.len()
                    );
                    match acceptor {
                        Some(a) => {
                            let handshake = tokio::time::timeout(Duration::from_secs(2), a.accept(c)).await;
                            if let Ok(Ok(tls)) = handshake {
                                answer_standby(tls, answer).await;
                            }
                        }
                        None => answer_standby(c, answer).await,
                    }
                });
            }
        });
        Ok(Some(Standby(task)))
    }

    /// Whether SIGINT or SIGTERM came.
    pub fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Waits `d`, or less if a stop signal comes; whether it came.
    pub fn sleep(&self, d: Duration) -> bool {
        let mut stop = self.stop.clone();
        self.rt.block_on(async move {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
        self.stopped()
    }

    /// Runs blocking work (connecting, waiting for leadership) on a thread of
    /// its own; `None` if a stop signal came first (the work is abandoned).
    pub fn interruptible<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new().name("blocking".into()).spawn(move || {
            let _ = tx.send(work());
        });
        if spawned.is_err() {
            return None;
        }
        let mut stop = self.stop.clone();
        self.rt.block_on(async move {
            tokio::select! {
                done = rx => done.ok(),
                _ = stop.wait_for(|s| *s) => None,
            }
        })
    }
}

/// Reads one HTTP/1.1 request's head and its `Content-Length` body (4 MiB at most).
/// Reads the request (head and body, bounded) first, so a client still
/// writing its body is not cut off mid-write: it reads the answer and tries
/// its next address.
async fn answer_standby<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut c: S, answer: String) {
    use tokio::io::AsyncWriteExt as _;
    let _ = tokio::time::timeout(Duration::from_secs(2), drain_request(&mut c)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), c.write_all(answer.as_bytes())).await;
    let _ = c.shutdown().await;
}

async fn drain_request<S: tokio::io::AsyncRead + Unpin>(c: &mut S) {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let body_start = loop {
        let Ok(n) = c.read(&mut buf).await else { return };
        if n == 0 || head.len() > 64 * 1024 {
            return;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..body_start]).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
        .min(4 << 20);
    let mut left = length.saturating_sub(head.len() - body_start);
    while left > 0 {
        match c.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// A standby's answering of its held socket; ended before the process leads.
pub struct Standby(tokio::task::JoinHandle<()>);

impl Standby {
    /// Stops answering, and waits until the socket is no longer accepted on.
    pub fn end(self, process: &Process) {
        self.0.abort();
        let _ = process.rt.block_on(self.0);
    }
}

/// What a control plane that lost its database answers until it leads again.
pub fn away_message(store: &str, why: &str) -> String {
    format!(
        "the control plane cannot reach its database ({store}: {why}); running jobs keep running, nothing new is \
         taken or started until it is back; try again in a moment"
    )
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    println!("gpool: stopping; running jobs keep running and are re-adopted when a control plane is back");
    crate::notify::stopping();
}
