//! TLS for the API and the agent protocol.
//!
//! `--tls` makes a control plane speak HTTPS with a certificate of its own
//! CA, which it creates on first start in its TLS directory (`ca.pem`,
//! `ca.key` of mode 0600; `--tls-dir` shares one CA between a leader and its
//! standbys). Each start issues a fresh server certificate for `localhost`,
//! the loopback addresses, the listen address, the host name and every
//! `--tls-san`, and serves it with the CA's certificate in the chain.
//!
//! A site with a PKI of its own gives the server's certificate chain and
//! key instead (`--tls-cert FILE --tls-key FILE`, PEM); the chain should
//! end with the CA clients are to trust, which `/tls/ca.pem` then serves
//! and whose fingerprint agents may pin.
//!
//! Clients trust the CA, not the server: the CLI by `--ca-file` (or, for
//! the local daemon, its data directory's), an agent by `--ca-file` or by
//! the CA's fingerprint (`--ca-fingerprint sha256:…`, printed at start):
//! the agent fetches `GET /tls/ca.pem` once, refuses a CA whose SHA-256 is
//! not the pinned one, and from then on verifies every connection against
//! it, as kubeadm's `--discovery-token-ca-cert-hash` does.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

/// A control plane's TLS: the server configuration and what clients need to trust it.
pub struct ServerTls {
    pub config: Arc<rustls::ServerConfig>,
    /// `sha256:` and the hex SHA-256 of the CA certificate (DER).
    pub fingerprint: String,
    /// The CA certificate, served at `/tls/ca.pem`.
    pub ca_pem: String,
}

/// The CA's fixed parameters: re-made from them and its key, it signs as the original did.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "gpool cluster CA");
    dn.push(DnType::OrganizationName, "gpool");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    // Ten years: the CA outlives every server certificate it signs.
    p.not_before = rcgen::date_time_ymd(2024, 1, 1);
    p.not_after = rcgen::date_time_ymd(2036, 1, 1);
    p
}

/// The `sha256:HEX` fingerprint of a certificate's DER.
pub fn fingerprint(der: &[u8]) -> String {
    format!("sha256:{}", Sha256::digest(der).iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The first certificate of a PEM text, as DER.
pub fn first_cert_der(pem: &str) -> anyhow::Result<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| anyhow::anyhow!("not a PEM certificate: {e:?}"))
}

/// Loads the CA in `dir`, making it first if there is none, and issues this
/// start's server certificate for `names` (and the usual local names).
pub fn load_or_create(dir: &Path, names: &[String]) -> anyhow::Result<ServerTls> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    // The key's directory is the daemon's alone (0700) and the key is 0600
    // from its creation: never readable, not even for a moment.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("create {}", dir.display()))?;
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    if !cert_path.exists() {
        let key = KeyPair::generate().context("make the CA's key")?;
        let cert = ca_params().self_signed(&key).context("make the CA's certificate")?;
        let _ = std::fs::remove_file(&key_path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_path)
            .and_then(|mut f| f.write_all(key.serialize_pem().as_bytes()))
            .with_context(|| format!("write {}", key_path.display()))?;
        std::fs::write(&cert_path, cert.pem()).with_context(|| format!("write {}", cert_path.display()))?;
    }
    let ca_pem = std::fs::read_to_string(&cert_path).with_context(|| format!("read {}", cert_path.display()))?;
    let key_pem = std::fs::read_to_string(&key_path).with_context(|| format!("read {}", key_path.display()))?;
    let ca_key = KeyPair::from_pem(&key_pem).with_context(|| format!("{}: not a private key", key_path.display()))?;
    let issuer = ca_params().self_signed(&ca_key).context("the CA as an issuer")?;
    let ca_der = first_cert_der(&ca_pem).with_context(|| cert_path.display().to_string())?;
    let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if let Some(h) = crate::wiring::host_name() {
        sans.push(h);
    }
    sans.extend(names.iter().cloned());
    sans.sort();
    sans.dedup();
    let mut params = CertificateParams::new(sans).context("the server certificate's names")?;
    params.distinguished_name.push(DnType::CommonName, "gpool control plane");
    let key = KeyPair::generate().context("make the server's key")?;
    let cert = params.signed_by(&key, &issuer, &ca_key).context("sign the server certificate")?;
    let chain = vec![cert.der().clone(), ca_der.clone()];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .context("the server certificate")?;
    Ok(ServerTls { config: Arc::new(config), fingerprint: fingerprint(&ca_der), ca_pem })
}

/// The server's certificate chain and key from PEM files (a site's own
/// PKI); the last certificate of the chain is the one clients trust.
pub fn from_files(cert: &Path, key: &Path) -> anyhow::Result<ServerTls> {
    use rustls::pki_types::pem::PemObject;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: not PEM certificates: {e:?}", cert.display()))?;
    let Some(trusted) = chain.last().cloned() else {
        anyhow::bail!("--tls-cert {}: no certificate in it", cert.display());
    };
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("--tls-key {}: not a PEM private key: {e:?}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .with_context(|| format!("--tls-cert {} with --tls-key {}", cert.display(), key.display()))?;
    // The last certificate's own PEM block, as the file has it.
    let text = std::fs::read_to_string(cert).with_context(|| format!("--tls-cert {}", cert.display()))?;
    let begin = "-----BEGIN CERTIFICATE-----";
    let ca_pem = text.rfind(begin).map_or_else(String::new, |at| text[at..].trim().to_string() + "\n");
    Ok(ServerTls { config: Arc::new(config), fingerprint: fingerprint(&trusted), ca_pem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_is_made_once_and_signs_every_start_s_certificate() {
        let dir = std::env::temp_dir().join(format!("gpool-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = load_or_create(&dir, &["cp1.internal".into()]).expect("first start");
        let b = load_or_create(&dir, &[]).expect("second start");
        assert_eq!(a.fingerprint, b.fingerprint, "the same CA across starts");
        assert!(a.fingerprint.starts_with("sha256:") && a.fingerprint.len() == 71);
        let mode =
            std::fs::metadata(dir.join("ca.key")).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()));
        assert_eq!(mode.ok().map(|m| m & 0o777), Some(0o600));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sites_own_certificate_and_key_are_served_and_its_ca_pinned() {
        let dir = std::env::temp_dir().join(format!("gpool-tls-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        // The site's CA and a server certificate it issued.
        let ca_key = KeyPair::generate().expect("key");
        let ca = ca_params().self_signed(&ca_key).expect("ca");
        let key = KeyPair::generate().expect("key");
        let server = CertificateParams::new(vec!["cp.example".into()])
            .expect("names")
            .signed_by(&key, &ca_params().self_signed(&ca_key).expect("issuer"), &ca_key)
            .expect("signed");
        std::fs::write(dir.join("chain.pem"), format!("{}{}", server.pem(), ca.pem())).expect("chain");
        std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("key");
        let tls = from_files(&dir.join("chain.pem"), &dir.join("server.key")).expect("loaded");
        assert_eq!(tls.fingerprint, fingerprint(ca.der()), "agents pin the site's CA");
        assert_eq!(first_cert_der(&tls.ca_pem).expect("pem"), *ca.der(), "/tls/ca.pem serves it");
        // A client that trusts the site's CA completes a handshake with it.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).expect("root");
        let client_cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("cp.example").expect("name");
        let mut client = rustls::ClientConnection::new(Arc::new(client_cfg), name).expect("client");
        let mut server = rustls::ServerConnection::new(tls.config).expect("server");
        for _ in 0..10 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).expect("client writes");
            server.read_tls(&mut buf.as_slice()).expect("server reads");
            server.process_new_packets().expect("the server accepts");
            let mut buf = Vec::new();
            server.write_tls(&mut buf).expect("server writes");
            client.read_tls(&mut buf.as_slice()).expect("client reads");
            client.process_new_packets().expect("the client verifies the chain");
        }
        assert!(!client.is_handshaking() && !server.is_handshaking(), "handshake done");
        // Files that are not what they should be are named.
        std::fs::write(dir.join("junk"), "hello").expect("junk");
        let e = from_files(&dir.join("junk"), &dir.join("server.key")).err().expect("no certificate");
        assert!(format!("{e:#}").contains("--tls-cert"), "{e:#}");
        let e = from_files(&dir.join("chain.pem"), &dir.join("junk")).err().expect("no key");
        assert!(format!("{e:#}").contains("--tls-key"), "{e:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
