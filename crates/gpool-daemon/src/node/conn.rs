//! The agent's HTTP side of a session with a control plane: requests with
//! the node's token, answers sorted into what ends a session (`End`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The session currently open (numbered), for the shipper and the spot watcher.
pub(crate) type Current = Arc<Mutex<Option<(u64, Conn)>>>;

/// Why a session ended.
#[derive(Debug)]
pub(crate) enum End {
    /// 409: register again.
    Stale,
    /// The control plane cannot be reached.
    Unreachable(String),
}

/// How long a registration or report may take: a quarter of the lease
/// (the heartbeat interval), within 2 to 10 s. A control plane that does not
/// answer in that time (stopped, hung, cut off) is left for the next one
/// while the lease still has most of its time, so that the shims do not
/// fence their jobs while a standby takes over.
pub(crate) fn request_timeout(lease_ms: u64) -> Duration {
    Duration::from_millis(lease_ms / 4).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// The HTTP side of a session.
#[derive(Clone)]
pub(crate) struct Conn {
    pub base: String,
    pub token: String,
    pub http: ureq::Agent,
    pub tls: Option<ureq::tls::TlsConfig>,
}

impl Conn {
    pub(crate) fn new(base: &str, token: &str, timeout: Duration, tls: Option<ureq::tls::TlsConfig>) -> Conn {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(3)))
            .timeout_global(Some(timeout));
        if let Some(t) = &tls {
            config = config.tls_config(t.clone());
        }
        let http: ureq::Agent = config.build().into();
        Conn { base: base.trim_end_matches('/').to_string(), token: token.to_string(), http, tls }
    }

    pub(crate) fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    pub(crate) fn check(
        &self,
        what: &str,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<ureq::http::Response<ureq::Body>, End> {
        match r {
            Err(e) => Err(End::Unreachable(format!("{}: {e}", self.base))),
            Ok(r) if r.status().as_u16() == 409 => Err(End::Stale),
            Ok(mut r) if !r.status().is_success() => {
                let text = r.body_mut().read_to_string().unwrap_or_default();
                Err(End::Unreachable(format!("{} {what}: HTTP {}: {text}", self.base, r.status().as_u16())))
            }
            Ok(r) => Ok(r),
        }
    }

    pub(crate) fn post<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, End> {
        let r = self.http.post(format!("{}{path}", self.base)).header("Authorization", self.auth()).send_json(body);
        let mut r = self.check(path, r)?;
        r.body_mut().read_json::<T>().map_err(|e| End::Unreachable(format!("{}{path}: bad answer: {e}", self.base)))
    }
}
