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
