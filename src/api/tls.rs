//! TLS for API server connections: the rustls configuration a `RestConfig` asks for, and the
//! ureq connector that uses it.
//!
//! ureq would build its rustls configuration with `with_client_auth_cert`, which checks that
//! the client key belongs to the certificate by parsing the certificate with webpki; webpki
//! reads X.509 v3 only, while `openssl x509 -req` without an extensions file makes v1
//! certificates, which kube-apiserver and client-go accept as client certificates. A client
//! never needs to parse its own certificate (it only sends it), so the configuration is built
//! here: the certificate chain goes out as it is, and the key check compares the
//! certificate's SubjectPublicKeyInfo with the key's public key, read with `pki::spki`.

use std::fmt;
use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::sign::{CertifiedKey, SigningKey, SingleCertAndKey};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use ureq::unversioned::transport::time::{Duration, Instant};
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector as UreqConnector, LazyBuffers,
    NextTimeout, TcpConnector, Transport, TransportAdapter,
};

use crate::api::kubeconfig::RestConfig;
use crate::error::{Error, Result};
use crate::pki::der;
use crate::pki::spki::PublicKey;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What `RestConfig::validate` checks of the TLS settings: every certificate of the CA bundle
/// is usable as a root, and the client certificate and key parse and belong together.
pub(crate) fn check(cfg: &RestConfig) -> Result<()> {
    let src = &cfg.source;
    if let Some(ca) = &cfg.ca_pem {
        let certs = parse_certs(ca)
            .map_err(|e| Error::Config(format!("{src}: certificate authority: {e}")))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs {
            roots
                .add(c)
                .map_err(|e| Error::Config(format!("{src}: certificate authority: {e}")))?;
        }
    }
    client_identity(cfg, &provider())?;
    Ok(())
}

/// The rustls configuration for `cfg`'s TLS settings (an `https://` server).
pub(crate) fn client_config(cfg: &RestConfig) -> Result<Arc<ClientConfig>> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| Error::Config(format!("{}: TLS setup: {e}", cfg.source)))?;
    let builder = if cfg.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider.clone())))
    } else if let Some(ca) = &cfg.ca_pem {
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(
            CertificateDer::pem_slice_iter(ca).filter_map(std::result::Result::ok),
        );
        if added == 0 {
            return Err(Error::Config(format!(
                "{}: the certificate authority holds no usable certificate",
                cfg.source
            )));
        }
        builder.with_root_certificates(roots)
    } else {
        return Err(Error::Config(format!(
            "{}: no certificate authority to verify {} against (set certificate-authority(-data), or insecure-skip-tls-verify)",
            cfg.source, cfg.server
        )));
    };
    let config = match client_identity(cfg, &provider)? {
        Some(key) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key))),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The client certificate chain with its key, once the key is known to be the certificate's.
fn client_identity(cfg: &RestConfig, provider: &CryptoProvider) -> Result<Option<CertifiedKey>> {
    let (Some(cert), Some(key)) = (&cfg.client_cert_pem, &cfg.client_key_pem) else {
        return Ok(None);
    };
    let src = &cfg.source;
    let chain =
        parse_certs(cert).map_err(|e| Error::Config(format!("{src}: client certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        Error::Config(format!(
            "{src}: client key: no usable PEM private key ({e})"
        ))
    })?;
    let together = |e: &dyn fmt::Display| {
        Error::Config(format!(
            "{src}: client certificate and key cannot be used together: {e}"
        ))
    };
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| together(&e))?;
    key_matches(&chain[0], key.as_ref()).map_err(|e| together(&e))?;
    Ok(Some(CertifiedKey::new(chain, key)))
}

/// Whether `key` is the private key of `cert`'s public key: the algorithm (and curve) and the
/// public key bits of the certificate's SubjectPublicKeyInfo are the key's (`pki::spki`).
/// Any X.509 version.
fn key_matches(cert: &CertificateDer<'_>, key: &dyn SigningKey) -> std::result::Result<(), String> {
    let info = der::parse_cert(cert)
        .ok_or("the client certificate is not a well-formed X.509 certificate")?;
    let cert_key =
        PublicKey::read(info.spki).ok_or("the client certificate's public key cannot be read")?;
    let key_spki = key
        .public_key()
        .ok_or("the public key of the client key cannot be determined")?;
    let key_key = PublicKey::read(key_spki.as_ref())
        .ok_or("the public key of the client key cannot be read")?;
    if !cert_key.same_key(&key_key) {
        return Err(
            "the client certificate and key do not match (the certificate is for another key)"
                .into(),
        );
    }
    Ok(())
}

fn parse_certs(pem: &[u8]) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let mut out = Vec::new();
    for c in CertificateDer::pem_slice_iter(pem) {
        out.push(c.map_err(|e| format!("bad PEM: {e}"))?);
    }
    if out.is_empty() {
        return Err("no PEM certificates found".to_string());
    }
    Ok(out)
}

/// `insecure-skip-tls-verify`: the server's certificate and signatures are not checked.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// ureq's connector chain (HTTP CONNECT proxy, TCP) followed by TLS with our configuration,
/// which `Connector::set_config` gives once (connections made before fail). Used behind a
/// proxy only: requests go over `api::client::direct` connections otherwise.
#[derive(Debug)]
pub(crate) struct Connector {
    chain: Box<dyn UreqConnector<(), Out = Box<dyn Transport>>>,
    config: Arc<OnceLock<Arc<ClientConfig>>>,
}

impl Default for Connector {
    fn default() -> Self {
        let config = Arc::new(OnceLock::new());
        let chain =
            ().chain(ConnectProxyConnector::default())
                .chain(TcpConnector::default())
                .chain(TlsConnector(config.clone()));
        Connector {
            chain: Box::new(chain),
            config,
        }
    }
}

impl Connector {
    /// Whether this connector has its TLS configuration.
    pub(crate) fn has_config(&self) -> bool {
        self.config.get().is_some()
    }

    /// The TLS configuration, once given (the async watches use it too: `client::stream`).
    pub(crate) fn client_config(&self) -> Option<Arc<ClientConfig>> {
        self.config.get().cloned()
    }

    /// Give the TLS configuration; the first one given stays.
    pub(crate) fn set_config(&self, config: Arc<ClientConfig>) {
        let _ = self.config.set(config);
    }
}

impl UreqConnector<()> for Connector {
    type Out = Box<dyn Transport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        self.chain.connect(details, chained)
    }
}

/// Wraps the connection in TLS for `https` URLs (the part of ureq's `RustlsConnector` that
/// does not build a configuration).
struct TlsConnector(Arc<OnceLock<Arc<ClientConfig>>>);

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector").finish()
    }
}

impl<In: Transport> UreqConnector<In> for TlsConnector {
    type Out = Box<dyn Transport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(transport.boxed()));
        }
        let config = self
            .0
            .get()
            .ok_or(ureq::Error::Tls("no TLS configuration for an https URL"))?
            .clone();
        let host = details
            .uri
            .authority()
            .ok_or(ureq::Error::Tls("https URL without a host"))?
            .host();
        // IPv6 literals come bracketed.
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare)
            .map_err(|_| ureq::Error::Tls("invalid server name for TLS"))?
            .to_owned();
        let mut conn = ClientConnection::new(config, name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        // The connect timeout counts from the start of the connection, TCP included.
        let mut timeout = details.timeout;
        if let (Duration::Exact(after), Instant::Exact(now), Instant::Exact(start)) =
            (timeout.after, (details.current_time)(), details.now)
        {
            timeout.after =
                Duration::Exact(after.saturating_sub(now.saturating_duration_since(start)));
        }
        sock.set_timeout(timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Box::new(TlsTransport {
            buffers,
            stream: StreamOwned { conn, sock },
        })))
    }
}

struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport")
            .field("chained", &self.stream.sock.inner())
            .finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // X.509 v1 client certificates made by `openssl x509 -req` without extensions
    // (tests/fixtures/test-only-v1-certs.sh), with their test-only keys.
    const V1_RSA_CRT: &str = include_str!("../../tests/fixtures/test-only-v1-client-rsa.crt");
    const V1_RSA_KEY: &str = include_str!("../../tests/fixtures/test-only-v1-client-rsa.key");
    const V1_EC_CRT: &str = include_str!("../../tests/fixtures/test-only-v1-client-ec.crt");
    const V1_EC_KEY: &str = include_str!("../../tests/fixtures/test-only-v1-client-ec.key");
    const V1_CA_CRT: &str = include_str!("../../tests/fixtures/test-only-v1-ca.crt");
    const OTHER_RSA_KEY: &str = include_str!("../../tests/fixtures/rsa-pkcs1.key");

    fn cfg(cert: &str, key: &str) -> RestConfig {
        RestConfig {
            server: "https://127.0.0.1:6443".into(),
            ca_pem: Some(V1_CA_CRT.as_bytes().to_vec()),
            client_cert_pem: Some(cert.as_bytes().to_vec()),
            client_key_pem: Some(key.as_bytes().to_vec()),
            source: "kubeconfig /etc/kcm.conf".into(),
            ..RestConfig::default()
        }
    }

    /// The fixtures are what they claim to be: version 1, no extensions.
    #[test]
    fn fixtures_are_v1() {
        for crt in [V1_RSA_CRT, V1_EC_CRT] {
            let der = CertificateDer::from_pem_slice(crt.as_bytes()).unwrap();
            let cert = der::read_exact(&der, der::SEQUENCE).unwrap();
            let tbs = der::children(cert.content).unwrap().remove(0);
            let fields = der::children(tbs.content).unwrap();
            assert_eq!(fields[0].tag, der::INTEGER, "no [0] version: v1");
            assert!(fields.iter().all(|f| f.tag != 0xa3), "no extensions");
        }
        // What rustls' own check (`with_client_auth_cert`) says of them.
        let key = PrivateKeyDer::from_pem_slice(V1_RSA_KEY.as_bytes()).unwrap();
        let chain = parse_certs(V1_RSA_CRT.as_bytes()).unwrap();
        let err = CertifiedKey::from_der(chain, key, &provider()).unwrap_err();
        assert!(
            format!("{err:?}").contains("UnsupportedCertVersion"),
            "{err:?}"
        );
    }

    #[test]
    fn v1_certificate_with_its_key_is_accepted() {
        check(&cfg(V1_RSA_CRT, V1_RSA_KEY)).unwrap();
        check(&cfg(V1_EC_CRT, V1_EC_KEY)).unwrap();
        client_config(&cfg(V1_RSA_CRT, V1_RSA_KEY)).unwrap();
        let c = client_config(&cfg(V1_EC_CRT, V1_EC_KEY)).unwrap();
        assert!(c.client_auth_cert_resolver.has_certs());

        // The other key forms: RSA as PKCS#8, EC as SEC1.
        let pkcs1 = match PrivateKeyDer::from_pem_slice(V1_RSA_KEY.as_bytes()).unwrap() {
            PrivateKeyDer::Pkcs1(k) => k.secret_pkcs1_der().to_vec(),
            other => panic!("fixture is not PKCS#1: {other:?}"),
        };
        let pkcs8 = crate::certs::pem_encode("PRIVATE KEY", &der::pkcs1_to_pkcs8(&pkcs1));
        check(&cfg(V1_RSA_CRT, &pkcs8)).unwrap();
        let pkcs8 = match PrivateKeyDer::from_pem_slice(V1_EC_KEY.as_bytes()).unwrap() {
            PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
            other => panic!("fixture is not PKCS#8: {other:?}"),
        };
        // PKCS#8 = SEQ{INT 0, SEQ{alg}, OCTET STRING{ECPrivateKey}}; SEC1 is the last part.
        let outer = der::read_exact(&pkcs8, der::SEQUENCE).unwrap();
        let inner = der::children(outer.content).unwrap().pop().unwrap();
        assert_eq!(inner.tag, der::OCTET_STRING);
        let sec1 = crate::certs::pem_encode("EC PRIVATE KEY", inner.content);
        check(&cfg(V1_EC_CRT, &sec1)).unwrap();
    }

    #[test]
    fn v1_certificate_with_another_key_is_refused() {
        let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        for (cert, key) in [
            (V1_RSA_CRT, OTHER_RSA_KEY.to_string()),
            (V1_RSA_CRT, V1_EC_KEY.to_string()),
            (V1_EC_CRT, V1_RSA_KEY.to_string()),
            (V1_EC_CRT, p256.serialize_pem()),
            (V1_EC_CRT, p384.serialize_pem()),
        ] {
            let want = "kubeconfig /etc/kcm.conf: client certificate and key cannot be used together: the client certificate and key do not match";
            let err = check(&cfg(cert, &key)).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
            let err = client_config(&cfg(cert, &key)).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn v3_certificates_still_work() {
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
        ] {
            let key = rcgen::KeyPair::generate_for(alg).unwrap();
            let cert = rcgen::CertificateParams::new(vec!["client".into()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let c = cfg(&cert.pem(), &key.serialize_pem());
            check(&c).unwrap();
            client_config(&c).unwrap();
            // rustls' own check agrees.
            CertifiedKey::from_der(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
                &provider(),
            )
            .unwrap();
            let other = rcgen::KeyPair::generate_for(alg).unwrap();
            let err = check(&cfg(&cert.pem(), &other.serialize_pem()))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("the client certificate and key do not match"),
                "{err}"
            );
        }
    }

    #[test]
    fn other_failures_keep_their_wording() {
        let err = check(&cfg("not a certificate", V1_RSA_KEY))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "kubeconfig /etc/kcm.conf: client certificate: no PEM certificates found"
        );
        let err = check(&cfg(V1_RSA_CRT, "no key")).unwrap_err().to_string();
        assert!(
            err.starts_with("kubeconfig /etc/kcm.conf: client key: no usable PEM private key"),
            "{err}"
        );
        // A PEM certificate whose contents are not X.509.
        let junk = crate::certs::pem_encode("CERTIFICATE", &der::write(der::SEQUENCE, &[]));
        let err = check(&cfg(&junk, V1_RSA_KEY)).unwrap_err().to_string();
        assert!(
            err.starts_with("kubeconfig /etc/kcm.conf: client certificate and key cannot be used together: the client certificate is not a well-formed X.509 certificate"),
            "{err}"
        );
        let mut no_ca = cfg(V1_RSA_CRT, V1_RSA_KEY);
        no_ca.ca_pem = None;
        let err = client_config(&no_ca).unwrap_err().to_string();
        assert!(err.contains("no certificate authority to verify"), "{err}");
        no_ca.insecure_skip_tls_verify = true;
        client_config(&no_ca).unwrap();
    }
}
