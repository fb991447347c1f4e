//! The API client over a real socket with an X.509 v1 client certificate (the kind
//! `openssl x509 -req` makes without an extensions file): an in-process TLS server that
//! requires a client certificate signed by the fixture CA sees the v1 certificate, checks the
//! handshake signature against its public key, and answers.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig::RestConfig;
use edgekcm::pki::der;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};

// Test-only fixtures: tests/fixtures/test-only-v1-certs.sh.
const CA_CRT: &str = include_str!("../fixtures/test-only-v1-ca.crt");
const RSA_CRT: &str = include_str!("../fixtures/test-only-v1-client-rsa.crt");
const RSA_KEY: &str = include_str!("../fixtures/test-only-v1-client-rsa.key");
const EC_CRT: &str = include_str!("../fixtures/test-only-v1-client-ec.crt");
const EC_KEY: &str = include_str!("../fixtures/test-only-v1-client-ec.key");
const OTHER_RSA_KEY: &str = include_str!("../fixtures/rsa-pkcs1.key");

fn der_of(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// The certificate's SubjectPublicKeyInfo, read without webpki (which refuses v1).
fn spki(cert: &[u8]) -> Vec<u8> {
    der::parse_cert(cert).unwrap().spki.to_vec()
}

/// Requires a client certificate issued by the fixture CA (issuer name and signature checked
/// directly against the CA's RSA key), and checks the TLS 1.3 handshake signature with the
/// certificate's public key. Records every certificate it accepted.
#[derive(Debug)]
struct FixtureCaClients {
    ca: CertificateDer<'static>,
    hints: Vec<DistinguishedName>,
    algs: WebPkiSupportedAlgorithms,
    seen: Mutex<Vec<Vec<u8>>>,
}

impl FixtureCaClients {
    fn new() -> Self {
        let ca = der_of(CA_CRT);
        let subject = der::parse_cert(&ca).unwrap().subject.to_vec();
        FixtureCaClients {
            ca,
            hints: vec![DistinguishedName::from(subject)],
            algs: rustls::crypto::ring::default_provider().signature_verification_algorithms,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn issued_by_ca(&self, leaf: &[u8]) -> Result<(), String> {
        let ca = der::parse_cert(&self.ca).ok_or("CA")?;
        let info = der::parse_cert(leaf).ok_or("client certificate does not parse")?;
        if info.issuer != ca.subject {
            return Err("not issued by the fixture CA".into());
        }
        let cert = der::read_exact(leaf, der::SEQUENCE).ok_or("cert")?;
        let parts = der::children(cert.content).ok_or("cert")?;
        let [tbs, _alg, sig] = <[der::Tlv<'_>; 3]>::try_from(parts).map_err(|_| "cert")?;
        let sig = sig.content.strip_prefix(&[0u8]).ok_or("signature")?;
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            ca.public_key,
        )
        .verify(tbs.raw, sig)
        .map_err(|_| "bad signature from the fixture CA".to_string())
    }
}

impl ClientCertVerifier for FixtureCaClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.issued_by_ca(end_entity)
            .map_err(rustls::Error::General)?;
        self.seen.lock().unwrap().push(end_entity.to_vec());
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let key = SubjectPublicKeyInfoDer::from(spki(cert));
        rustls::crypto::verify_tls13_signature_with_raw_key(message, &key, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

struct TestServer {
    url: String,
    ca_pem: String,
    verifier: Arc<FixtureCaClients>,
}

/// A TLS 1.3 server on 127.0.0.1 answering every request with a small JSON object.
fn serve() -> TestServer {
    let verifier = Arc::new(FixtureCaClients::new());
    let (config, ca_pem) = crate::common::loopback_tls_server(Some(verifier.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { return };
            let config = config.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = BufReader::new(rustls::StreamOwned::new(conn, sock));
                loop {
                    let mut line = String::new();
                    match tls.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => {}
                        Ok(_) => continue,
                    }
                    let body = r#"{"kind":"Status","status":"Success"}"#;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tls.get_mut().write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    TestServer {
        url,
        ca_pem,
        verifier,
    }
}

fn rest(srv: &TestServer, cert: &str, key: &str) -> RestConfig {
    RestConfig {
        server: srv.url.clone(),
        ca_pem: Some(srv.ca_pem.as_bytes().to_vec()),
        client_cert_pem: Some(cert.as_bytes().to_vec()),
        client_key_pem: Some(key.as_bytes().to_vec()),
        source: "kubeconfig /test/v1.kubeconfig".into(),
        ..RestConfig::default()
    }
}

#[test]
fn v1_client_certificate_is_presented_and_accepted() {
    let srv = serve();
    for (crt, key) in [(RSA_CRT, RSA_KEY), (EC_CRT, EC_KEY)] {
        let cfg = rest(&srv, crt, key);
        cfg.validate().unwrap();
        let client = Client::new(&cfg, 0.0, 1, "edgekcm-test").unwrap();
        let v = client.get_path("/version").unwrap();
        assert_eq!(v["status"], "Success");
        let seen = srv.verifier.seen.lock().unwrap().clone();
        assert_eq!(seen.last().map(Vec::as_slice), Some(der_of(crt).as_ref()));
    }
    assert_eq!(srv.verifier.seen.lock().unwrap().len(), 2);
}

#[test]
fn v1_client_certificate_with_another_key_fails_before_connecting() {
    let srv = serve();
    let cfg = rest(&srv, RSA_CRT, OTHER_RSA_KEY);
    let want = "kubeconfig /test/v1.kubeconfig: client certificate and key cannot be used together: the client certificate and key do not match";
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.starts_with(want), "{err}");
    let err = Client::new(&cfg, 0.0, 1, "edgekcm-test")
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with(want), "{err}");
    assert!(srv.verifier.seen.lock().unwrap().is_empty());
}

/// The test server does refuse what the fixture CA did not sign (so the test above shows
/// a real check passing): a v3 certificate from another CA.
#[test]
fn certificate_from_another_ca_is_refused_by_the_test_server() {
    let srv = serve();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["client".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cfg = rest(&srv, &cert.pem(), &key.serialize_pem());
    cfg.validate().unwrap();
    let client = Client::new(&cfg, 0.0, 1, "edgekcm-test").unwrap();
    let err = client.get_path("/version").unwrap_err().to_string();
    assert!(err.contains("HandshakeFailure"), "{err}");
    assert!(srv.verifier.seen.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// The secure port: a client presenting a v1 certificate (Prometheus with an openssl-made
// certificate, say) gets through the TLS handshake, and still has to prove it holds the key.

fn secure_port() -> edgekcm::server::RunningServer {
    crate::common::loopback_server().start().unwrap()
}

/// GET /healthz with a bare rustls client limited to one TLS version, sending `cert` with
/// `key` whether or not they belong together.
fn healthz_with(
    srv: &edgekcm::server::RunningServer,
    version: &'static rustls::SupportedProtocolVersion,
    cert: &str,
    key: &str,
) -> std::io::Result<String> {
    use std::io::Read;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der_of(&srv.ca_pem().unwrap())).unwrap();
    let key = provider
        .key_provider
        .load_private_key(rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap())
        .unwrap();
    let certified = rustls::sign::CertifiedKey::new(vec![der_of(cert)], key);
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
    let conn = rustls::ClientConnection::new(
        Arc::new(config),
        rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap(),
    )
    .unwrap();
    let sock = std::net::TcpStream::connect(srv.addr())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    tls.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn secure_port_takes_v1_client_certificates_with_their_keys() {
    let srv = secure_port();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        for (crt, key) in [(RSA_CRT, RSA_KEY), (EC_CRT, EC_KEY)] {
            let answer = healthz_with(&srv, version, crt, key).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{version:?}: {answer}");
            assert!(answer.ends_with("\r\n\r\nok"), "{version:?}: {answer}");
        }
    }
    // edgekcm's own client too.
    let cfg = RestConfig {
        server: format!("https://127.0.0.1:{}", srv.addr().port()),
        ca_pem: srv.ca_pem().map(String::into_bytes),
        client_cert_pem: Some(RSA_CRT.as_bytes().to_vec()),
        client_key_pem: Some(RSA_KEY.as_bytes().to_vec()),
        ..RestConfig::default()
    };
    let client = Client::new(&cfg, 0.0, 1, "edgekcm-test").unwrap();
    assert_eq!(client.get_raw("/healthz").unwrap(), "ok");
}

#[test]
fn secure_port_refuses_a_v1_client_certificate_sent_without_its_key() {
    let srv = secure_port();
    let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        for (crt, key) in [
            (RSA_CRT, OTHER_RSA_KEY.to_string()),
            (EC_CRT, p256.serialize_pem()),
        ] {
            let err = healthz_with(&srv, version, crt, &key).unwrap_err();
            assert!(
                err.to_string().contains("DecryptError")
                    || err.to_string().contains("BadSignature"),
                "{version:?}: {err}"
            );
        }
    }
    // v3 certificates are checked as before.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["client".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let ok = healthz_with(
        &srv,
        &rustls::version::TLS13,
        &cert.pem(),
        &key.serialize_pem(),
    );
    assert!(ok.unwrap().starts_with("HTTP/1.1 200"));
    let bad = healthz_with(
        &srv,
        &rustls::version::TLS13,
        &cert.pem(),
        &p256.serialize_pem(),
    );
    assert!(bad.is_err());
}
