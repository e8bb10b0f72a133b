//! The HTTP client of the CLI: finds the daemon and its token, speaks gpool-api types.
//!
//! Its errors carry a [`ClientError`] with an [`ErrorKind`] (not found,
//! denied, unreachable), which `main` turns into the exit code.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::daemons::{SOCKET_FILE, SYSTEM_DATA_DIR, TOKEN_FILE, URL_FILE, default_data_dir};

/// The base URL of requests over the local daemon's Unix socket (its host is
/// never looked up: `unix_socket.rs`).
const SOCKET_BASE: &str = "http://localhost";
/// The header of a standby's `503` (a `gpool serve` waiting to lead, `plane/server.rs`).
const STANDBY_HEADER: &str = "x-gpool-standby";
/// The header of a control plane that led and lost its database (`gpool serve`).
const STORE_AWAY_HEADER: &str = "x-gpool-store-away";

/// What kind of failure an error of the client is; each has its exit code (main.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// HTTP 404: no such job, node or endpoint (other users' jobs are not found either).
    NotFound,
    /// HTTP 401 or 403, or no token to send.
    Denied,
    /// No daemon to talk to: connection refused, unknown host, timeout, or no local daemon found.
    Unreachable,
    /// Any other refusal of the daemon (400, 409, 413, 5xx) or an answer it should not have given.
    Failed,
}

/// An error talking to the daemon; `anyhow` carries it (also under added context) to `main`.
#[derive(Debug)]
pub(crate) struct ClientError {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

impl ClientError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> ClientError {
        ClientError { kind, message: message.into() }
    }

    /// The kind of `e`: that of the `ClientError` it carries, else `Failed`.
    pub(crate) fn kind_of(e: &anyhow::Error) -> ErrorKind {
        e.downcast_ref::<ClientError>().map_or(ErrorKind::Failed, |c| c.kind)
    }

    fn from_status(status: u16, message: String) -> ClientError {
        let kind = match status {
            404 => ErrorKind::NotFound,
            401 | 403 => ErrorKind::Denied,
            _ => ErrorKind::Failed,
        };
        ClientError::new(kind, format!("{message} (HTTP {status})"))
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClientError {}

/// Where the daemon is and who we are.
///
/// With no `--server`, the CLI talks to a daemon on this machine over its
/// Unix socket (`--socket`, else DATA_DIR/gpool.sock, else the system
/// daemon's /var/lib/gpool/gpool.sock), where the daemon learns who we are
/// from the kernel: no token is needed (one given is used instead). A
/// daemon too old to have a socket is reached at the URL it wrote, with its
/// admin token.
#[derive(Args, Debug, Clone)]
pub(crate) struct Connect {
    /// Daemon URL, or several (leader and standbys, comma-separated: the first that answers is used); default: $GPOOL_SERVER, else the local daemon (its Unix socket).
    #[arg(long, global = true, env = "GPOOL_SERVER")]
    server: Option<String>,
    /// The local daemon's Unix socket; default: DATA_DIR/gpool.sock, else /var/lib/gpool/gpool.sock.
    #[arg(long, global = true, env = "GPOOL_SOCKET")]
    socket: Option<PathBuf>,
    /// API token; default: $GPOOL_TOKEN; none over the local socket, else the local daemon's admin token.
    #[arg(long, global = true, env = "GPOOL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Data directory of the local daemon.
    #[arg(long, global = true, env = "GPOOL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The CA certificate an https daemon's certificate must chain to; default: the local daemon's (DATA_DIR/tls/ca.pem) when there is one, else the public roots.
    #[arg(long, global = true, env = "GPOOL_CA_FILE")]
    ca_file: Option<PathBuf>,
}

/// What one control plane answered a probe ([`Client::probe_each`]).
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) status: u16,
    /// It stands by: another control plane leads (or none yet).
    pub(crate) standby: bool,
    /// It led and lost its database.
    pub(crate) store_away: bool,
    /// The body (at most 4 KiB).
    pub(crate) said: String,
}

pub(crate) struct Client {
    /// What request URLs start with: one per control plane given, tried in
    /// turn while they refuse connections (a standby does not listen).
    bases: Vec<String>,
    /// The one that answered last.
    current: std::sync::atomic::AtomicUsize,
    /// Where the daemon is, for messages: its URL or its socket.
    place: String,
    /// Sent as a bearer token; `None` over the Unix socket with no token given.
    token: Option<String>,
    agent: ureq::Agent,
}

impl Connect {
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// The local daemon's socket, if one is there: `--socket` (which must
    /// be), else in the data directory, else the system daemon's.
    fn local_socket(&self) -> anyhow::Result<Option<PathBuf>> {
        if let Some(s) = &self.socket {
            anyhow::ensure!(
                s.exists(),
                ClientError::new(ErrorKind::Unreachable, format!("--socket {}: no such socket", s.display()))
            );
            return Ok(Some(s.clone()));
        }
        let mut candidates = vec![self.data_dir().join(SOCKET_FILE)];
        if self.data_dir.is_none() {
            candidates.push(PathBuf::from(SYSTEM_DATA_DIR).join(SOCKET_FILE));
        }
        Ok(candidates.into_iter().find(|p| p.exists()))
    }

    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        self.with_file()?.connect(true)
    }

    /// A client for the routes anyone may call (`/healthz`, with
    /// [`Client::probe_each`]): no token is needed.
    pub(crate) fn anonymous_client(&self) -> anyhow::Result<Client> {
        self.with_file()?.connect(false)
    }

    /// Flags and environment variables first, then the configuration file.
    fn with_file(&self) -> anyhow::Result<Connect> {
        let file = crate::config_file::ConfigFile::load()?;
        Ok(Connect {
            server: self.server.clone().or(file.server),
            socket: self.socket.clone().or(file.socket),
            token: self.token.clone().or(file.token),
            data_dir: self.data_dir.clone(),
            ca_file: self.ca_file.clone().or(file.ca_file),
        })
    }

    fn connect(&self, need_token: bool) -> anyhow::Result<Client> {
        let dir = self.data_dir();
        let mut config =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_connect(Some(Duration::from_secs(5)));
        if self.server.is_none()
            && let Some(socket) = self.local_socket()?
        {
            let agent = crate::unix_socket::agent(socket.clone(), config.build());
            let bases = vec![SOCKET_BASE.to_string()];
            let place = format!("the local daemon's socket {}", socket.display());
            return Ok(Client { bases, current: 0.into(), place, token: self.token.clone(), agent });
        }
        let bases = match &self.server {
            Some(s) => {
                s.split(',').filter(|u| !u.trim().is_empty()).map(server_url).collect::<anyhow::Result<Vec<_>>>()?
            }
            None => std::fs::read_to_string(dir.join(URL_FILE))
                .map(|s| s.trim().to_string())
                .with_context(|| {
                    ClientError::new(
                        ErrorKind::Unreachable,
                        format!(
                            "no gpool daemon found in {}: start one with `gpool up`, or pass --server URL",
                            dir.display()
                        ),
                    )
                })
                .map(|u| vec![u])?,
        };
        anyhow::ensure!(
            !bases.is_empty(),
            ClientError::new(ErrorKind::Unreachable, "--server is empty: give a daemon's URL")
        );
        let token = match &self.token {
            Some(t) => Some(t.clone()),
            None if !need_token => None,
            None => Some(std::fs::read_to_string(dir.join(TOKEN_FILE)).map(|s| s.trim().to_string()).with_context(
                || {
                    ClientError::new(
                        ErrorKind::Denied,
                        format!(
                            "no token: pass --token or set GPOOL_TOKEN (the local admin token is {})",
                            dir.join(TOKEN_FILE).display()
                        ),
                    )
                },
            )?),
        };
        let ca = self.ca_file.clone().or_else(|| Some(dir.join("tls").join("ca.pem")).filter(|p| p.exists()));
        if let Some(ca) = ca {
            let pem = std::fs::read(&ca).with_context(|| format!("--ca-file {}", ca.display()))?;
            let cert = ureq::tls::Certificate::from_pem(&pem)
                .map_err(|e| anyhow::anyhow!("--ca-file {}: not a PEM certificate: {e}", ca.display()))?;
            let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![cert]));
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let agent: ureq::Agent = config.build().into();
        Ok(Client { place: bases.join(", "), bases, current: 0.into(), token, agent })
    }
}

/// Whether a request failed before any control plane could have taken it:
/// the connection was refused, or the host is unknown.
fn never_reached(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound | std::io::ErrorKind::AddrNotAvailable
        ),
        _ => false,
    }
}

/// A `--server` value as a base URL, or what is wrong with it.
fn server_url(s: &str) -> anyhow::Result<String> {
    let url = s.trim().trim_end_matches('/');
    let host = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match host {
        Some(h) if !h.is_empty() && !h.contains(['/', ' ', '?', '#']) => Ok(url.to_string()),
        _ => Err(ClientError::new(
            ErrorKind::Unreachable,
            format!(
                "--server {s:?} is not a daemon's address: give http://HOST:PORT or https://HOST:PORT \
                 (e.g. http://127.0.0.1:7878), without a path"
            ),
        )
        .into()),
    }
}

fn check(mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<ureq::http::Response<ureq::Body>> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let msg = serde_json::from_str::<gpool_api::ErrorBody>(&text).map(|e| e.error).unwrap_or(text);
    Err(ClientError::from_status(status.as_u16(), msg).into())
}

impl Client {
    /// Where the daemon is: its URL, or its socket.
    pub(crate) fn place(&self) -> &str {
        &self.place
    }

    /// Sends a request to the current control plane; while one refuses the
    /// connection (or cannot be found), to the next. A request that reached
    /// a control plane is never sent again elsewhere (a submission would be
    /// taken twice).
    fn send(
        &self,
        path: &str,
        request: impl Fn(String) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<ureq::http::Response<ureq::Body>> {
        let n = self.bases.len();
        let first = self.current.load(std::sync::atomic::Ordering::Relaxed);
        let (mut last, mut away, mut stale) = (None, None, None);
        for i in 0..n {
            let at = (first + i) % n;
            match request(format!("{}/api/v1{path}", self.bases[at])) {
                // Read from the memory of one whose database is away: kept in
                // case no other leads.
                Ok(resp) if resp.status().is_success() && resp.headers().contains_key(STORE_AWAY_HEADER) => {
                    stale = stale.or(Some((at, resp)));
                }
                // A standby holds its port and takes nothing: the request goes on to the next.
                // One that lost its database says so: that message wins over "a standby".
                Ok(mut resp) if n > 1 && resp.headers().contains_key(STORE_AWAY_HEADER) => {
                    let said = resp.body_mut().with_config().limit(4096).read_to_string().unwrap_or_default();
                    let said = serde_json::from_str::<gpool_api::ErrorBody>(&said).map_or(said, |e| e.error);
                    away = Some(self.unreachable_because(format!("{}: {}", self.bases[at], said.trim())));
                }
                Ok(resp) if n > 1 && resp.headers().contains_key(STANDBY_HEADER) => {
                    last = Some(self.unreachable_because(format!("{} is a standby", self.bases[at])));
                }
                Ok(resp) => {
                    self.current.store(at, std::sync::atomic::Ordering::Relaxed);
                    return Ok(resp);
                }
                Err(e) if n > 1 && never_reached(&e) => last = Some(self.unreachable(e)),
                Err(e) => return Err(self.unreachable(e)),
            }
        }
        if let Some((at, resp)) = stale {
            eprintln!(
                "gpool: warning: {} cannot reach its database: this is its last state in memory, which may be out of date",
                self.bases[at]
            );
            return Ok(resp);
        }
        Err(away.or(last).unwrap_or_else(|| self.unreachable(ureq::Error::ConnectionFailed)))
    }

    /// Asks each control plane in turn for `path` (outside `/api/v1`, a
    /// route that needs no token: none is sent), with no fail-over: what each answered (status, whether as a standby or
    /// without its database, the body's first line), or why it did not.
    pub(crate) fn probe_each(&self, path: &str, within: Duration) -> Vec<(String, Result<Probe, String>)> {
        let base_of = |b: &String| if b == SOCKET_BASE { self.place.clone() } else { b.clone() };
        self.bases
            .iter()
            .map(|b| {
                // No token: the probed route needs none, and a health check
                // that runs every few seconds should not carry an admin's.
                let answer = self.agent.get(format!("{b}{path}")).config().timeout_global(Some(within)).build().call();
                let probe = answer.map_err(|e| e.to_string()).map(|mut resp| Probe {
                    status: resp.status().as_u16(),
                    standby: resp.headers().contains_key(STANDBY_HEADER),
                    store_away: resp.headers().contains_key(STORE_AWAY_HEADER),
                    said: resp.body_mut().with_config().limit(4096).read_to_string().unwrap_or_default(),
                });
                (base_of(b), probe)
            })
            .collect()
    }

    /// A request with the bearer token, if there is one.
    fn authorized<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    /// A request that got no HTTP answer (refused, unknown host, timeout, not HTTP).
    fn unreachable(&self, e: ureq::Error) -> anyhow::Error {
        self.unreachable_because(e.to_string())
    }

    fn unreachable_because(&self, why: String) -> anyhow::Error {
        ClientError::new(ErrorKind::Unreachable, format!("cannot reach the gpool daemon at {}: {why}", self.place))
            .into()
    }

    pub(crate) fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self.send(path, |u| self.authorized(self.agent.get(u)).call())?;
        let mut resp = check(resp)?;
        resp.body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_json::<T>()
            .context("unexpected answer from the daemon")
    }

    pub(crate) fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> anyhow::Result<T> {
        let resp = self.send(path, |u| self.authorized(self.agent.post(u)).send_json(body))?;
        let mut resp = check(resp)?;
        resp.body_mut().read_json::<T>().context("unexpected answer from the daemon")
    }

    /// A POST with no body, for actions that take none (cancel, drain). The
    /// daemon answers those without reading a body, and may close the
    /// connection while a body is still being written: the answer would be
    /// lost to a broken pipe.
    pub(crate) fn post_empty<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self.send(path, |u| self.authorized(self.agent.post(u)).send_empty())?;
        let mut resp = check(resp)?;
        resp.body_mut().read_json::<T>().context("unexpected answer from the daemon")
    }

    pub(crate) fn put<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> anyhow::Result<T> {
        let resp = self.send(path, |u| self.authorized(self.agent.put(u)).send_json(body))?;
        let mut resp = check(resp)?;
        resp.body_mut().read_json::<T>().context("unexpected answer from the daemon")
    }

    pub(crate) fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let resp = self.send(path, |u| self.authorized(self.agent.delete(u)).call())?;
        let mut resp = check(resp)?;
        resp.body_mut().read_json::<T>().context("unexpected answer from the daemon")
    }

    /// A streamed body to read as it comes (an interactive session's output).
    pub(crate) fn reader(&self, path: &str) -> anyhow::Result<impl std::io::Read + use<>> {
        let resp = self.send(path, |u| self.authorized(self.agent.get(u)).call())?;
        Ok(check(resp)?.into_body().into_reader())
    }

    /// A POST whose body is what `body` yields until it ends, sent as it
    /// comes (an interactive session's keystrokes); returns once it ended.
    pub(crate) fn post_reader(&self, path: &str, body: impl std::io::Read) -> anyhow::Result<()> {
        let body = std::sync::Mutex::new(body);
        let resp = self.send(path, |u| {
            let mut body = body.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.authorized(self.agent.post(u))
                .header("Content-Type", "application/octet-stream")
                .send(ureq::SendBody::from_reader(&mut *body))
        })?;
        check(resp).map(drop)
    }

    /// Streams a plain-text body into `out`.
    pub(crate) fn stream(&self, path: &str, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        let resp = self.send(path, |u| self.authorized(self.agent.get(u)).call())?;
        let resp = check(resp)?;
        let mut reader = resp.into_body().into_reader();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = reader.read(&mut buf).context("the stream broke")?;
            if n == 0 {
                return Ok(());
            }
            // A reader that went away (`gpool logs 7 | head`) is not an error.
            match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                r => r?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_checked_before_any_request() {
        assert_eq!(server_url("http://cp1:7878/").expect("fine"), "http://cp1:7878");
        assert_eq!(server_url(" https://10.0.0.1:7878 ").expect("fine"), "https://10.0.0.1:7878");
        for bad in ["foo", "cp1:7878", "http://", "ftp://x", "http://x/api/v1"] {
            let e = server_url(bad).expect_err(bad).to_string();
            assert!(e.contains("--server") && e.contains("http://HOST:PORT"), "{bad}: {e}");
        }
    }

    /// A one-shot HTTP server answering `{"ok": true}`; its port.
    fn answering_once() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut c, &mut buf);
                let body = r#"{"ok":true}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = std::io::Write::write_all(&mut c, format!("{head}{body}").as_bytes());
            }
        });
        port
    }

    #[test]
    fn with_several_servers_a_request_goes_to_the_first_that_takes_the_connection() {
        // A port nothing listens on (a standby does not listen), then one that answers.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let open = answering_once();
        let c = Connect {
            server: Some(format!("http://127.0.0.1:{closed},http://127.0.0.1:{open}")),
            socket: None,
            token: Some("t".into()),
            data_dir: Some(std::env::temp_dir()),
            ca_file: None,
        };
        let client = c.connect(true).expect("a client");
        let v: serde_json::Value = client.get("/whoami").expect("the second answers");
        assert_eq!(v["ok"], true);
        assert_eq!(client.current.load(std::sync::atomic::Ordering::Relaxed), 1, "and is used next");
        let only_closed = Connect { server: Some(format!("http://127.0.0.1:{closed}")), ..c };
        let e =
            only_closed.connect(true).expect("a client").get::<serde_json::Value>("/whoami").expect_err("none answers");
        assert!(e.to_string().contains("cannot reach"), "{e}");
    }

    #[test]
    fn a_probe_needs_no_token_and_asks_every_control_plane() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let open = answering_once();
        let empty = std::env::temp_dir().join(format!("gpool-probe-{}", std::process::id()));
        std::fs::create_dir_all(&empty).expect("a folder with no token");
        let c = Connect {
            server: Some(format!("http://127.0.0.1:{closed},http://127.0.0.1:{open}")),
            socket: None,
            token: None,
            data_dir: Some(empty.clone()),
            ca_file: None,
        };
        assert!(c.connect(true).is_err(), "the API needs a token");
        let probed = c.connect(false).expect("no token needed").probe_each("/healthz", Duration::from_secs(5));
        assert_eq!(probed.len(), 2);
        assert_eq!(probed[0].0, format!("http://127.0.0.1:{closed}"));
        assert!(probed[0].1.is_err(), "{:?}", probed[0]);
        assert_eq!(probed[1].1.as_ref().map(|p| p.status).ok(), Some(200), "{:?}", probed[1]);
        let _ = std::fs::remove_dir_all(empty);
    }
}
