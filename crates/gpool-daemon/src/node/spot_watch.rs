//! Watches a cloud provider's metadata service for the notice that this
//! (spot) machine is being taken back, and hands it to the control plane
//! (`POST /api/v1/nodes/{name}/notice`), which checkpoints and requeues the
//! jobs here. `gpool agent --spot-notice aws|gcp` (or `aws=URL`, `gcp=URL`
//! for a stand-in):
//! - AWS: IMDSv2, `PUT /latest/api/token`, then
//!   `GET /latest/meta-data/spot/instance-action` every 5 s (AWS's advice):
//!   404 while there is none, then `{"action": "terminate", "time": "…Z"}`,
//!   about two minutes ahead.
//! - GCP: `GET /computeMetadata/v1/instance/preempted` (`Metadata-Flavor:
//!   Google`) every 5 s: `TRUE` once preemption began; 30 s are left.
//!
//! The metadata service can only be asked; this thread is the one place of
//! the node that polls, at the provider's pace.

use std::time::Duration;

/// How often the metadata service is asked.
pub const EVERY: Duration = Duration::from_secs(5);

/// GCP's notice: the machine stops 30 s after preemption begins.
const GCP_NOTICE: Duration = Duration::from_secs(30);

/// Which provider's notice to watch, at which base URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpotSource {
    Aws(String),
    Gcp(String),
}

impl std::str::FromStr for SpotSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, url) = match s.split_once('=') {
            Some((k, u)) => (k.trim(), Some(u.trim().trim_end_matches('/').to_string())),
            None => (s.trim(), None),
        };
        match kind.to_ascii_lowercase().as_str() {
            "aws" => Ok(SpotSource::Aws(url.unwrap_or_else(|| "http://169.254.169.254".into()))),
            "gcp" | "gce" => Ok(SpotSource::Gcp(url.unwrap_or_else(|| "http://metadata.google.internal".into()))),
            other => Err(format!("--spot-notice {other:?}: expected aws or gcp (or aws=URL, gcp=URL)")),
        }
    }
}

/// Asks the metadata service once: the time left if a notice is out.
pub fn check(src: &SpotSource, http: &ureq::Agent, now_ms: i64) -> Result<Option<Duration>, String> {
    match src {
        SpotSource::Aws(base) => {
            let mut r = http
                .put(format!("{base}/latest/api/token"))
                .header("X-aws-ec2-metadata-token-ttl-seconds", "300")
                .send_empty()
                .map_err(|e| format!("{base}: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("{base}/latest/api/token: HTTP {}", r.status().as_u16()));
            }
            let token = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
            let mut r = http
                .get(format!("{base}/latest/meta-data/spot/instance-action"))
                .header("X-aws-ec2-metadata-token", token.trim())
                .call()
                .map_err(|e| format!("{base}: {e}"))?;
            match r.status().as_u16() {
                404 => Ok(None),
                200 => {
                    let v: serde_json::Value =
                        r.body_mut().read_json().map_err(|e| format!("instance-action is not JSON: {e}"))?;
                    let at = v["time"]
                        .as_str()
                        .and_then(gpool_api::time::parse_rfc3339)
                        .ok_or_else(|| format!("instance-action has no time: {v}"))?;
                    Ok(Some(Duration::from_millis(u64::try_from(at - now_ms).unwrap_or(0))))
                }
                s => Err(format!("{base}/latest/meta-data/spot/instance-action: HTTP {s}")),
            }
        }
        SpotSource::Gcp(base) => {
            let mut r = http
                .get(format!("{base}/computeMetadata/v1/instance/preempted"))
                .header("Metadata-Flavor", "Google")
                .call()
                .map_err(|e| format!("{base}: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("{base}/computeMetadata/v1/instance/preempted: HTTP {}", r.status().as_u16()));
            }
            let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
            Ok((body.trim().eq_ignore_ascii_case("true")).then_some(GCP_NOTICE))
        }
    }
}

/// Watches `src` on a thread of its own; `deliver(time left)` passes a
/// notice on and says whether it reached the control plane (else it is
/// tried again at the next look). Stops after the first delivered notice.
pub fn spawn(src: SpotSource, deliver: impl Fn(Duration) -> bool + Send + 'static) -> std::io::Result<()> {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    std::thread::Builder::new().name("spot-notice".into()).spawn(move || {
        let mut complained = false;
        loop {
            let now_ms = crate::node::clock::wall_ms();
            match check(&src, &http, now_ms) {
                Ok(Some(left)) => {
                    tracing::info!("spot notice: this machine is taken back in {} s", left.as_secs());
                    if deliver(left) {
                        return;
                    }
                }
                Ok(None) => complained = false,
                Err(e) if !complained => {
                    tracing::warn!("cannot read the spot notice ({e}); trying again every 5 s");
                    complained = true;
                }
                Err(_) => {}
            }
            std::thread::sleep(EVERY);
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    use super::*;

    /// A stand-in metadata service on loopback: answers each request with
    /// what `answer(method, path, headers)` gives.
    fn stand_in(answer: impl Fn(&str, &str, &str) -> (u16, String) + Send + 'static) -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut r = BufReader::new(s.try_clone().expect("clone"));
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                let mut headers = String::new();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    headers.push_str(&h.to_ascii_lowercase());
                }
                let mut parts = first.split_whitespace();
                let (m, p) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let (code, body) = answer(m, p, &headers);
                let mut s = s;
                let _ =
                    write!(s, "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            }
        });
        format!("http://{addr}")
    }

    fn http() -> ureq::Agent {
        ureq::Agent::config_builder().http_status_as_error(false).build().into()
    }

    #[test]
    fn aws_notices_are_read_with_an_imdsv2_token() {
        let notice = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = notice.clone();
        let base = stand_in(move |m, p, h| match (m, p) {
            ("PUT", "/latest/api/token") if h.contains("x-aws-ec2-metadata-token-ttl-seconds") => (200, "tok".into()),
            ("GET", "/latest/meta-data/spot/instance-action") if h.contains("x-aws-ec2-metadata-token: tok") => {
                if n.load(std::sync::atomic::Ordering::SeqCst) {
                    (200, r#"{"action": "terminate", "time": "2026-11-25T08:02:00Z"}"#.into())
                } else {
                    (404, String::new())
                }
            }
            _ => (401, String::new()),
        });
        let src: SpotSource = format!("aws={base}").parse().expect("source");
        let now = gpool_api::time::parse_rfc3339("2026-11-25T08:00:00Z").expect("time");
        assert_eq!(check(&src, &http(), now), Ok(None));
        notice.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(check(&src, &http(), now), Ok(Some(Duration::from_secs(120))));
    }

    #[test]
    fn gcp_notices_give_thirty_seconds_and_bad_sources_are_named() {
        let base = stand_in(|_, p, h| {
            if p == "/computeMetadata/v1/instance/preempted" && h.contains("metadata-flavor: google") {
                (200, "TRUE".into())
            } else {
                (403, String::new())
            }
        });
        let src: SpotSource = format!("gcp={base}").parse().expect("source");
        assert_eq!(check(&src, &http(), 0), Ok(Some(Duration::from_secs(30))));
        assert!("azure".parse::<SpotSource>().is_err_and(|e| e.contains("aws or gcp")));
        assert_eq!("aws".parse::<SpotSource>(), Ok(SpotSource::Aws("http://169.254.169.254".into())));
        let down = SpotSource::Aws("http://127.0.0.1:1".into());
        assert!(check(&down, &http(), 0).is_err());
    }
}
