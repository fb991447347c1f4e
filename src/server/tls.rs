//! Serving certificates (given files, a kept `--cert-dir` pair, or a generated self-signed
//! CA and leaf) and the rustls configuration that asks for, but does not require, a client
//! certificate.

use crate::pki::spki;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use super::ServeConfig;
use crate::certs::CERT_DIR_PAIR_NAME;
use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------------
// Serving certificates

pub(super) struct TlsMaterial {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    pub(super) ca_pem: Option<String>,
}

fn parse_chain(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::config(format!(
                "failed to parse certificates from {}: {e}",
                path.display()
            ))
        })?;
    if chain.is_empty() {
        return Err(Error::config(format!(
            "no certificate found in {}",
            path.display()
        )));
    }
    Ok(chain)
}

fn parse_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        Error::config(format!(
            "failed to parse private key from {}: {e}",
            path.display()
        ))
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::config(format!("failed to read {}: {e}", path.display())))
}

fn load_pair(cert: &Path, key: &Path) -> Result<TlsMaterial> {
    let chain = parse_chain(&read_file(cert)?, cert)?;
    let key = parse_key(&read_file(key)?, key)?;
    Ok(TlsMaterial {
        chain,
        key,
        ca_pem: None,
    })
}

fn rcgen_err(e: rcgen::Error) -> Error {
    Error::config(format!("generating self-signed serving certificate: {e}"))
}

/// PEM (leaf followed by CA), PEM key of the leaf, PEM of the CA.
fn generate_self_signed(bind: IpAddr, now: SystemTime) -> Result<(String, String, String)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let stamp = since_epoch.as_secs();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let valid_from = epoch + since_epoch.saturating_sub(Duration::from_secs(3600));
    let valid_to = valid_from + Duration::from_secs(365 * 24 * 3600);

    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rcgen_err)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, format!("localhost-ca@{stamp}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    ca.not_before = valid_from;
    ca.not_after = valid_to;
    let ca_cert = ca.self_signed(&ca_key).map_err(rcgen_err)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !bind.is_unspecified() && !bind.is_loopback() {
        sans.push(bind.to_string());
    }
    let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rcgen_err)?;
    let mut leaf = CertificateParams::new(sans).map_err(rcgen_err)?;
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("localhost@{stamp}"));
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = valid_from;
    leaf.not_after = valid_to;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(rcgen_err)?;

    let ca_pem = ca_cert.pem();
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_pem),
        leaf_key.serialize_pem(),
        ca_pem,
    ))
}

fn material_from_pem(cert_pem: &str, key_pem: &str, ca_pem: String) -> Result<TlsMaterial> {
    let origin = Path::new("generated certificate");
    Ok(TlsMaterial {
        chain: parse_chain(cert_pem.as_bytes(), origin)?,
        key: parse_key(key_pem.as_bytes(), origin)?,
        ca_pem: Some(ca_pem),
    })
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

fn write_key_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        // The file may have existed with looser permissions.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(data)?;
    f.sync_all()
}

pub(super) fn load_tls(cfg: &ServeConfig) -> Result<TlsMaterial> {
    match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(cert), Some(key)) => return load_pair(cert, key),
        (Some(_), None) | (None, Some(_)) => {
            return Err(Error::config(
                "--tls-cert-file and --tls-private-key-file must be specified together",
            ))
        }
        (None, None) => {}
    }
    let Some(dir) = &cfg.cert_dir else {
        let (cert, key, ca) = generate_self_signed(cfg.bind_address, SystemTime::now())?;
        log::info!("Generated self-signed cert in-memory");
        return material_from_pem(&cert, &key, ca);
    };
    let cert_path = dir.join(format!("{CERT_DIR_PAIR_NAME}.crt"));
    let key_path = dir.join(format!("{CERT_DIR_PAIR_NAME}.key"));
    if cert_path.exists() && key_path.exists() {
        let mut m = load_pair(&cert_path, &key_path)?;
        if m.chain.len() > 1 {
            m.ca_pem = m
                .chain
                .last()
                .map(|c| crate::certs::pem_encode("CERTIFICATE", c));
        }
        return Ok(m);
    }
    let (cert, key, ca) = generate_self_signed(cfg.bind_address, SystemTime::now())?;
    let io_err = |p: &Path, e: std::io::Error| {
        Error::config(format!("unable to write {}: {e}", p.display()))
    };
    create_private_dir(dir).map_err(|e| io_err(dir, e))?;
    std::fs::write(&cert_path, cert.as_bytes()).map_err(|e| io_err(&cert_path, e))?;
    write_key_file(&key_path, key.as_bytes()).map_err(|e| io_err(&key_path, e))?;
    log::info!(
        "Generated self-signed cert ({}, {})",
        cert_path.display(),
        key_path.display()
    );
    material_from_pem(&cert, &key, ca)
}

/// Requests a client certificate, accepts any chain (authentication happens above the TLS
/// layer), but still checks that the client owns the key of the certificate it sent. That
/// check parses the certificate with webpki, which reads only X.509 v3; for a v1 certificate
/// (which Go servers accept) the signature is checked with its SubjectPublicKeyInfo instead.
#[derive(Debug)]
struct AnyClientCert {
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        match spki::v1_spki(cert) {
            Some(key) => spki::verify_tls12_signature_with_spki(message, key, dss, &self.algs),
            None => rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs),
        }
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        match spki::v1_spki(cert) {
            Some(key) => spki::verify_tls13_signature_with_spki(message, key, dss, &self.algs),
            None => rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs),
        }
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

pub(super) fn server_config(m: TlsMaterial, origin: &str) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyClientCert {
        algs: provider.signature_verification_algorithms,
    });
    let mut sc = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("TLS setup: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(m.chain, m.key)
        .map_err(|e| Error::config(format!("invalid serving certificate/key {origin}: {e}")))?;
    sc.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(sc))
}

pub(super) fn describe_origin(cfg: &ServeConfig) -> String {
    match (&cfg.tls_cert_file, &cfg.tls_private_key_file, &cfg.cert_dir) {
        (Some(c), Some(k), _) => format!("({}, {})", c.display(), k.display()),
        (_, _, Some(d)) => format!("in {}", d.display()),
        _ => "(self-signed)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_shape() {
        let (chain, key, ca) =
            generate_self_signed("10.1.2.3".parse().unwrap(), SystemTime::now()).unwrap();
        let certs = parse_chain(chain.as_bytes(), Path::new("x")).unwrap();
        assert_eq!(certs.len(), 2);
        assert!(chain.ends_with(&ca));
        assert!(parse_key(key.as_bytes(), Path::new("k")).is_ok());
        // The leaf verifies against the CA for every SAN, and is not itself a CA.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certs[1].clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        for name in ["localhost", "127.0.0.1", "10.1.2.3"] {
            let sn = rustls_pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&certs[0], &[], &sn, &[], UnixTime::now())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let sn = rustls_pki_types::ServerName::try_from("example.com").unwrap();
        assert!(verifier
            .verify_server_cert(&certs[0], &[], &sn, &[], UnixTime::now())
            .is_err());
    }
}
