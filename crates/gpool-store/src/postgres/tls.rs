//! TLS to PostgreSQL, as libpq's URL parameters ask for it.
//!
//! - `sslmode=disable` (or none): plain TCP, as before.
//! - `sslmode=prefer` or `require`: TLS (with `prefer`, plain TCP when the
//!   server offers no TLS). gpool never encrypts without authenticating:
//!   the server's certificate is verified, against `sslrootcert=FILE`
//!   (a PEM CA, as libpq's `verify-full` does) or else the public roots,
//!   and must name the host connected to.
//!
//! `sslrootcert` is libpq's; the driver does not know it, so it is taken out
//! of the URL before the driver parses it.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The URL without the parameters the driver does not know, and the CA file.
pub(super) fn split_url(url: &str) -> (String, Option<PathBuf>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_string(), None) };
    let mut root = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.split_once('=') {
            Some(("sslrootcert", v)) => {
                root = Some(PathBuf::from(v));
                false
            }
            _ => true,
        })
        .collect();
    let url = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    (url, root)
}

/// The connector for `sslmode=prefer|require`: trusts `root` or the public roots.
pub(super) fn connector(root: Option<&std::path::Path>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let mut roots = rustls::RootCertStore::empty();
    match root {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("sslrootcert {}: {e:?}", path.display()))?;
                roots.add(cert).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("sslrootcert {}: no certificate in it", path.display()));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslrootcert_is_taken_out_of_the_url() {
        assert_eq!(split_url("postgres://u@h/db"), ("postgres://u@h/db".into(), None));
        assert_eq!(
            split_url("postgres://u@h/db?sslmode=require&sslrootcert=/etc/ca.pem"),
            ("postgres://u@h/db?sslmode=require".into(), Some(PathBuf::from("/etc/ca.pem")))
        );
        assert_eq!(
            split_url("postgres://u@h/db?sslrootcert=/ca.pem"),
            ("postgres://u@h/db".into(), Some(PathBuf::from("/ca.pem")))
        );
    }
}
