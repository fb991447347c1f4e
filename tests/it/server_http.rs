//! The secure port over real sockets: HTTPS with the generated certificate, client
//! certificates, --cert-dir persistence, explicit certificate files and malformed requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use edgekcm::server::{Health, Request, Response, RunningServer, ServeConfig, Server};
use edgekcm::Error;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

fn cfg() -> ServeConfig {
    ServeConfig {
        bind_address: "127.0.0.1".parse().unwrap(),
        port: 0,
        cert_dir: None,
        tls_cert_file: None,
        tls_private_key_file: None,
    }
}

fn start(cfg: ServeConfig, health: Arc<Health>) -> RunningServer {
    let mut s = Server::new(cfg, health);
    s.set_ephemeral_port(true);
    s.start().unwrap()
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "edgekcm-{tag}-{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn agent(ca_pem: &str, client: Option<(&str, &str)>) -> ureq::Agent {
    let mut tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[Certificate::from_pem(
            ca_pem.as_bytes(),
        )
        .unwrap()]))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
    if let Some((cert, key)) = client {
        tls = tls.client_cert(Some(ClientCert::new_with_certs(
            &[Certificate::from_pem(cert.as_bytes()).unwrap()],
            PrivateKey::from_pem(key.as_bytes()).unwrap(),
        )));
    }
    ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .new_agent()
}

fn get(agent: &ureq::Agent, url: &str) -> (u16, String) {
    let mut r = agent.get(url).call().unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap())
}

#[test]
fn https_round_trip_with_self_signed_ca() {
    let health = Health::new();
    health.add_check("leaderElection", Arc::new(|| Ok(())));
    health.add_check("bad-controller", Arc::new(|| Err("broken".into())));
    let srv = start(cfg(), health.clone());
    let port = srv.addr().port();
    let ca = srv.ca_pem().expect("self-signed CA");
    let a = agent(&ca, None);
    let base = format!("https://127.0.0.1:{port}");

    let (status, body) = get(&a, &format!("{base}/healthz"));
    assert_eq!(status, 500);
    assert_eq!(
        body,
        "[+]leaderElection ok\n[-]bad-controller failed: reason withheld\nhealthz check failed\n"
    );
    let (status, body) = get(&a, &format!("{base}/healthz?exclude=bad-controller"));
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, body) = get(
        &a,
        &format!("{base}/healthz?verbose&exclude=bad-controller"),
    );
    assert_eq!(status, 200);
    assert_eq!(
        body,
        "[+]leaderElection ok\n[+]bad-controller excluded: ok\nhealthz check passed\n"
    );
    // The DNS SAN works too.
    let (status, _) = get(&a, &format!("https://localhost:{port}/livez"));
    assert_eq!(status, 200);

    let (status, body) = get(&a, &format!("{base}/readyz"));
    assert_eq!((status, body.as_str()), (200, "ok"));
    health.set_ready_check(Arc::new(|| Err("not yet".into())));
    let (status, _) = get(&a, &format!("{base}/readyz"));
    assert_eq!(status, 500);

    let (status, body) = get(&a, &format!("{base}/healthz/leaderElection"));
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));

    srv.stop();
    assert!(TcpStream::connect(srv.addr()).is_err());
}

#[test]
fn routes_filter_and_client_certificates() {
    let mut s = Server::new(cfg(), Health::new());
    s.set_ephemeral_port(true);
    s.route(
        "/whoami",
        Arc::new(|r: &Request| Response::text(200, format!("certs={}", r.peer_certs.len()))),
    );
    s.set_filter(Arc::new(|r: &Request| {
        (r.path == "/metrics" && r.header("authorization").is_none())
            .then(|| Response::error(401, "Unauthorized"))
    }));
    s.route(
        "/metrics",
        Arc::new(|_: &Request| Response::text(200, "# metrics\n")),
    );
    let srv = s.start().unwrap();
    let ca = srv.ca_pem().unwrap();
    let base = format!("https://127.0.0.1:{}", srv.addr().port());

    let anon = agent(&ca, None);
    assert_eq!(
        get(&anon, &format!("{base}/whoami")),
        (200, "certs=0".into())
    );
    assert_eq!(
        get(&anon, &format!("{base}/metrics")),
        (401, "Unauthorized\n".into())
    );
    let mut r = anon
        .get(&format!("{base}/metrics"))
        .header("Authorization", "Bearer x")
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.body_mut().read_to_string().unwrap(), "# metrics\n");

    // Any client certificate is accepted at the TLS layer and handed to the handler.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.self_signed(&key).unwrap();
    let mtls = agent(&ca, Some((&cert.pem(), &key.serialize_pem())));
    assert_eq!(
        get(&mtls, &format!("{base}/whoami")),
        (200, "certs=1".into())
    );
}

#[cfg(unix)]
fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn cert_dir_is_created_then_reused() {
    let tmp = TempDir::new("certdir");
    let dir = tmp.0.join("nested/pki");
    let crt = dir.join("kube-controller-manager.crt");
    let key = dir.join("kube-controller-manager.key");
    let c = ServeConfig {
        cert_dir: Some(dir.clone()),
        ..cfg()
    };

    let first = start(c.clone(), Health::new());
    let ca1 = first.ca_pem().unwrap();
    let crt1 = std::fs::read_to_string(&crt).unwrap();
    assert_eq!(crt1.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(crt1.ends_with(&ca1));
    assert!(std::fs::read_to_string(&key)
        .unwrap()
        .contains("PRIVATE KEY"));
    #[cfg(unix)]
    {
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&dir), 0o700);
    }
    first.stop();

    let second = start(c, Health::new());
    assert_eq!(second.ca_pem().unwrap(), ca1);
    assert_eq!(std::fs::read_to_string(&crt).unwrap(), crt1);
    let a = agent(&ca1, None);
    let url = format!("https://127.0.0.1:{}/healthz", second.addr().port());
    assert_eq!(get(&a, &url), (200, "ok".into()));
}

#[test]
fn explicit_tls_files() {
    // Produce a pair via --cert-dir, then serve it as --tls-cert-file/--tls-private-key-file.
    let tmp = TempDir::new("tlsfiles");
    let gen = start(
        ServeConfig {
            cert_dir: Some(tmp.0.clone()),
            ..cfg()
        },
        Health::new(),
    );
    let ca = gen.ca_pem().unwrap();
    gen.stop();
    let crt = tmp.0.join("kube-controller-manager.crt");
    let key = tmp.0.join("kube-controller-manager.key");

    let srv = start(
        ServeConfig {
            tls_cert_file: Some(crt.clone()),
            tls_private_key_file: Some(key.clone()),
            ..cfg()
        },
        Health::new(),
    );
    assert_eq!(srv.ca_pem(), None);
    let url = format!("https://127.0.0.1:{}/livez", srv.addr().port());
    assert_eq!(get(&agent(&ca, None), &url), (200, "ok".into()));
}

fn start_err(c: ServeConfig) -> Error {
    let mut s = Server::new(c, Health::new());
    s.set_ephemeral_port(true);
    match s.start() {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn bad_tls_files_are_config_errors_naming_the_file() {
    let tmp = TempDir::new("badtls");
    std::fs::create_dir_all(&tmp.0).unwrap();
    let garbage = tmp.0.join("garbage.pem");
    std::fs::write(&garbage, "this is not PEM\n").unwrap();
    let missing = tmp.0.join("missing.pem");

    // A valid pair to mix with.
    let good = start(
        ServeConfig {
            cert_dir: Some(tmp.0.join("good")),
            ..cfg()
        },
        Health::new(),
    );
    good.stop();
    let good_crt = tmp.0.join("good/kube-controller-manager.crt");
    let good_key = tmp.0.join("good/kube-controller-manager.key");

    let cases = [
        (garbage.clone(), good_key.clone(), garbage.clone()),
        (good_crt.clone(), garbage.clone(), garbage.clone()),
        (missing.clone(), good_key.clone(), missing.clone()),
        (good_crt.clone(), missing.clone(), missing.clone()),
    ];
    for (crt, key, named) in cases {
        let err = start_err(ServeConfig {
            tls_cert_file: Some(crt),
            tls_private_key_file: Some(key),
            ..cfg()
        });
        match &err {
            Error::Config(msg) => assert!(
                msg.contains(&named.display().to_string()),
                "{msg} should name {}",
                named.display()
            ),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    // A key that does not belong to the certificate.
    let other = start(
        ServeConfig {
            cert_dir: Some(tmp.0.join("other")),
            ..cfg()
        },
        Health::new(),
    );
    other.stop();
    let err = start_err(ServeConfig {
        tls_cert_file: Some(good_crt.clone()),
        tls_private_key_file: Some(tmp.0.join("other/kube-controller-manager.key")),
        ..cfg()
    });
    assert!(matches!(err, Error::Config(_)), "{err:?}");

    // Only one of the pair.
    let err = start_err(ServeConfig {
        tls_cert_file: Some(good_crt),
        ..cfg()
    });
    assert!(matches!(err, Error::Config(_)));
}

fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    // The server may answer and close before it has read everything we send.
    let _ = s.write_all(request);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn plain_http_limits_and_malformed_requests() {
    let mut s = Server::new(cfg(), Health::new());
    s.set_ephemeral_port(true);
    s.set_plain_http(true);
    let srv = s.start().unwrap();
    assert_eq!(srv.ca_pem(), None);
    let addr = srv.addr();

    let ok = raw_exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(ok.contains("Content-Type: text/plain; charset=utf-8\r\n"));
    assert!(ok.contains("Connection: close\r\n"));
    assert!(ok.ends_with("\r\n\r\nok"));

    let head = raw_exchange(addr, b"HEAD /healthz HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"));

    let bad = raw_exchange(addr, b"NONSENSE\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");

    let mut huge = b"GET /healthz HTTP/1.1\r\n".to_vec();
    for i in 0..2000 {
        huge.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(8)).as_bytes());
    }
    huge.extend_from_slice(b"\r\n");
    let big = raw_exchange(addr, &huge);
    assert!(big.starts_with("HTTP/1.1 431 "), "{big}");

    // A client that connects and closes without a request is simply dropped.
    drop(TcpStream::connect(addr).unwrap());
    let again = raw_exchange(addr, b"GET /nope HTTP/1.1\r\n\r\n");
    assert!(again.starts_with("HTTP/1.1 404 Not Found\r\n"));
}

#[test]
fn a_kubeconfig_tls_server_name_is_what_the_certificate_is_verified_against() {
    // The generated serving certificate names localhost and 127.0.0.1.
    let tmp = TempDir::new("servername");
    let srv = start(
        ServeConfig {
            cert_dir: Some(tmp.0.clone()),
            ..cfg()
        },
        Health::new(),
    );
    let ca = srv.ca_pem().unwrap();
    let try_client = |name: Option<&str>| {
        let rest = edgekcm::api::kubeconfig::RestConfig {
            server: format!("https://127.0.0.1:{}", srv.addr().port()),
            ca_pem: Some(ca.clone().into_bytes()),
            tls_server_name: name.map(str::to_string),
            source: "kubeconfig test".into(),
            ..Default::default()
        };
        edgekcm::api::client::Client::new(&rest, 0.0, 1, "test")
    };
    let client = |name: Option<&str>| try_client(name).unwrap();
    assert_eq!(client(None).get_raw("/healthz").unwrap(), "ok");
    // A server URL with a path prefix keeps it with a tls-server-name too: `/pre/healthz` is
    // not served.
    for name in [None, Some("localhost")] {
        let rest = edgekcm::api::kubeconfig::RestConfig {
            server: format!("https://127.0.0.1:{}/pre/", srv.addr().port()),
            ca_pem: Some(ca.clone().into_bytes()),
            tls_server_name: name.map(str::to_string),
            source: "kubeconfig test".into(),
            ..Default::default()
        };
        let c = edgekcm::api::client::Client::new(&rest, 0.0, 1, "test").unwrap();
        let err = c.get_raw("/healthz").unwrap_err();
        assert!(
            matches!(err, Error::Api { code: 404, .. }),
            "{name:?}: {err}"
        );
    }
    // Dialled by a name the certificate holds, at the kubeconfig's address.
    assert_eq!(client(Some("localhost")).get_raw("/healthz").unwrap(), "ok");
    // A name it does not hold fails verification, though the address is in the certificate.
    let err = client(Some("api.example.test"))
        .get_raw("/healthz")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("127.0.0.1") && err.contains("not valid for name \"api.example.test\""),
        "{err}"
    );
    // The informers' async watch goes the same way: verified against the name (the secure
    // port serves no API, so a verified connection is answered 404).
    let watch = |name: Option<&str>| {
        let c = client(name);
        let opts = edgekcm::api::client::WatchOptions::default();
        futures_lite::future::block_on(c.watch_async(
            &edgekcm::api::resources::CONFIGMAPS,
            None,
            &opts,
        ))
        .err()
        .unwrap()
    };
    for name in [None, Some("localhost")] {
        let err = watch(name);
        assert!(
            matches!(err, Error::Api { code: 404, .. }),
            "{name:?}: {err}"
        );
    }
    let err = watch(Some("api.example.test")).to_string();
    assert!(
        err.contains("not valid for name \"api.example.test\""),
        "{err}"
    );
    // Not a name at all: refused when the client is built, naming the setting.
    let err = try_client(Some("not a name")).err().unwrap().to_string();
    assert!(
        err.starts_with("kubeconfig test: tls-server-name:"),
        "{err}"
    );
}

#[test]
fn request_bodies_reach_body_routes_after_the_filter() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut s = Server::new(cfg(), Health::new());
    s.set_ephemeral_port(true);
    s.set_plain_http(true);
    s.set_limits(edgekcm::server::Limits {
        max_body_bytes: 32,
        ..Default::default()
    });
    let handled = Arc::new(AtomicUsize::new(0));
    s.set_filter(Arc::new(|r: &Request| {
        r.header("x-deny")
            .map(|_| Response::error(403, "forbidden"))
    }));
    let h = handled.clone();
    s.route_body(
        "/echo",
        Arc::new(move |r: &Request| {
            h.fetch_add(1, Ordering::SeqCst);
            Response::text(
                200,
                format!("{} {}", r.method, String::from_utf8_lossy(&r.body)),
            )
        }),
    );
    s.route(
        "/plain",
        Arc::new(|r: &Request| Response::text(200, format!("{} bytes", r.body.len()))),
    );
    let srv = s.start().unwrap();
    let addr = srv.addr();
    let body_of = |answer: &str| answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string());

    let a = raw_exchange(
        addr,
        b"PUT /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
    assert_eq!(body_of(&a).as_deref(), Some("PUT hello"));

    // The body after the head, in a later packet.
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"PUT /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\n")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    c.write_all(b"abc").unwrap();
    let mut a = String::new();
    c.read_to_string(&mut a).unwrap();
    assert_eq!(body_of(&a).as_deref(), Some("PUT abc"), "{a}");

    let a = raw_exchange(
        addr,
        b"PUT /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n",
    );
    assert_eq!(body_of(&a).as_deref(), Some("PUT hello world"), "{a}");

    let a = raw_exchange(
        addr,
        b"PUT /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    );
    assert!(a.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{a}");
    assert_eq!(
        body_of(&a).as_deref(),
        Some("400 Bad Request: malformed chunked encoding\n")
    );

    // Larger than the limit: declared (refused before anything else), or in chunks.
    let a = raw_exchange(addr, b"PUT /echo HTTP/1.1\r\nContent-Length: 33\r\n\r\n");
    assert!(a.starts_with("HTTP/1.1 413 "), "{a}");
    let a = raw_exchange(
        addr,
        format!(
            "PUT /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{0}\r\n11\r\n{0}x\r\n0\r\n\r\n",
            "y".repeat(16)
        )
        .as_bytes(),
    );
    assert!(a.starts_with("HTTP/1.1 413 "), "{a}");

    // curl's `Expect: 100-continue` is answered before the body is read.
    let a = raw_exchange(
        addr,
        b"PUT /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    );
    assert!(
        a.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{a}"
    );

    // Refused by the filter: the body is never waited for, the route never runs.
    let before = handled.load(Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    let a = raw_exchange(
        addr,
        b"PUT /echo HTTP/1.1\r\nX-Deny: 1\r\nContent-Length: 20\r\n\r\n",
    );
    assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{a}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(handled.load(Ordering::SeqCst), before);

    // Other routes never see a body.
    let a = raw_exchange(
        addr,
        b"PUT /plain HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(body_of(&a).as_deref(), Some("0 bytes"), "{a}");
}
