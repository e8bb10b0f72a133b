//! Which control plane an agent trusts, over HTTPS (plane/tls.rs says how
//! a control plane gets its certificate):
//! - `--ca-file`: the CA's certificate, copied to the node;
//! - `--ca-fingerprint sha256:…`: the CA's fingerprint, printed by the
//!   control plane at start. The agent fetches the CA's certificate once
//!   from `/tls/ca.pem` of the first control plane that answers, refuses it
//!   unless its SHA-256 is the pinned one, and then verifies every
//!   connection against it;
//! - neither: the public roots (a control plane behind a certificate of a
//!   public CA), or plain HTTP.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use ureq::tls::{Certificate, RootCerts, TlsConfig};

/// How an agent knows its control plane.
#[derive(Clone, Debug, Default)]
pub enum Trust {
    #[default]
    Public,
    CaFile(PathBuf),
    Fingerprint(String),
}

fn config_for(cert: Certificate<'static>) -> TlsConfig {
    TlsConfig::builder().root_certs(RootCerts::Specific(Arc::new(vec![cert]))).build()
}

fn fingerprint(der: &[u8]) -> String {
    format!("sha256:{}", Sha256::digest(der).iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Refuses a downgrade before the agent sends anything: with a CA (file or
/// fingerprint) every server must be `https://` (an impostor could serve the
/// public CA over plain HTTP and take the node token), and plain HTTP beyond
/// loopback needs `--insecure-http`. `Ok(Some(line))`: what to say at start.
pub fn check_schemes(trust: &Trust, servers: &[String], insecure_http: bool) -> anyhow::Result<Option<String>> {
    let plain: Vec<&String> =
        servers.iter().filter(|s| !s.trim().to_ascii_lowercase().starts_with("https://")).collect();
    let Some(first) = plain.first() else { return Ok(None) };
    if !matches!(trust, Trust::Public) {
        bail!(
            "--server {first}: a CA is given (--ca-file or --ca-fingerprint), so every server must be https://; \
             plain HTTP would send the node token to whoever answers"
        );
    }
    let off_loopback: Vec<&&String> = plain.iter().filter(|s| !is_loopback_url(s)).collect();
    match (off_loopback.first(), insecure_http) {
        (None, _) => Ok(None),
        (Some(s), false) => bail!(
            "--server {s}: plain HTTP beyond loopback sends the node token and every job's environment in the \
             clear; start the control plane with --tls and give --ca-fingerprint, or pass --insecure-http"
        ),
        (Some(s), true) => Ok(Some(format!(
            "--insecure-http: talking to {s} in plain HTTP; the node token and jobs' environments cross the network \
             in the clear"
        ))),
    }
}

/// Whether `url`'s host is a loopback address or `localhost`.
fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The TLS settings every request of the agent uses; `None`: ureq's defaults.
/// With a fingerprint, waits for a control plane to answer (as registering does).
pub fn resolve(trust: &Trust, servers: &[String]) -> anyhow::Result<Option<TlsConfig>> {
    match trust {
        Trust::Public => Ok(None),
        Trust::CaFile(path) => {
            let pem = std::fs::read(path).with_context(|| format!("--ca-file {}", path.display()))?;
            let cert = Certificate::from_pem(&pem)
                .map_err(|e| anyhow::anyhow!("--ca-file {}: not a PEM certificate: {e}", path.display()))?;
            Ok(Some(config_for(cert)))
        }
        Trust::Fingerprint(pin) => {
            let pin = pin.trim().to_ascii_lowercase();
            if !pin.starts_with("sha256:") || pin.len() != 71 {
                bail!("--ca-fingerprint {pin:?}: expected sha256: and 64 hex digits, as the control plane prints");
            }
            // Only to read the CA's certificate, which is then checked against the pin.
            let probe: ureq::Agent = ureq::Agent::config_builder()
                .tls_config(TlsConfig::builder().disable_verification(true).build())
                .timeout_global(Some(Duration::from_secs(5)))
                .build()
                .into();
            loop {
                for s in servers {
                    let url = format!("{}/tls/ca.pem", s.trim_end_matches('/'));
                    let Ok(mut r) = probe.get(&url).call() else { continue };
                    let Ok(pem) = r.body_mut().read_to_vec() else { continue };
                    let cert = Certificate::from_pem(&pem)
                        .map_err(|e| anyhow::anyhow!("{url}: not a PEM certificate: {e}"))?;
                    let got = fingerprint(cert.der());
                    if got != pin {
                        bail!(
                            "{s} presents a CA whose fingerprint is {got}, not the pinned {pin}: refusing to \
                             talk to it (a different cluster, or someone in between)"
                        );
                    }
                    return Ok(Some(config_for(cert)));
                }
                tracing::warn!("no control plane answers for its CA yet; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_ca_refuses_plain_http_and_plain_http_stays_on_loopback() {
        let pin = Trust::Fingerprint("sha256:00".into());
        let s = |u: &str| vec![u.to_string()];
        let e = check_schemes(&pin, &s("http://10.0.0.1:7878"), true).expect_err("downgrade");
        assert!(e.to_string().contains("must be https://"), "{e}");
        assert!(check_schemes(&pin, &s("http://127.0.0.1:7878"), false).is_err(), "even on loopback, with a CA");
        assert!(check_schemes(&pin, &s("https://cp:7878"), false).is_ok_and(|s| s.is_none()));
        assert!(check_schemes(&Trust::Public, &s("http://127.0.0.1:7878"), false).is_ok_and(|s| s.is_none()));
        assert!(check_schemes(&Trust::Public, &s("http://[::1]:7878"), false).is_ok());
        assert!(check_schemes(&Trust::Public, &s("http://localhost:7878"), false).is_ok());
        let e = check_schemes(&Trust::Public, &s("http://cp.example:7878"), false).expect_err("clear text");
        assert!(e.to_string().contains("--insecure-http"), "{e}");
        assert!(check_schemes(&Trust::Public, &s("http://cp.example:7878"), true).is_ok_and(|s| s.is_some()));
    }
}
