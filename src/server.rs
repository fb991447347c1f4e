//! The secure port (`--secure-port`, 10257): HTTPS with /healthz, /readyz, /livez and whatever
//! routes the rest of the program registers (/metrics, /configz). A filter set with
//! [`Server::set_filter`] sees every request before routing (the delegated authentication and
//! authorization of `crate::auth`), so unknown paths are authorized before they are 404.
//! Every answer carries `Cache-Control: no-cache, private`, as the apiserver library's.
//!
//! One thread runs a small smol executor: it accepts connections and serves each on its own
//! task (TLS handshake, one HTTP/1.1 request, `Connection: close`). Handlers are plain
//! synchronous functions run on smol's blocking pool, so a slow handler never stalls the
//! accept loop. The handshake plus request head must arrive within 10 s and fit in 16 KiB.
//!
//! Serving certificate: `--tls-cert-file`/`--tls-private-key-file` if given; else a
//! self-signed CA and leaf like the apiserver library's `MaybeDefaultWithSelfSignedCerts`
//! (ECDSA P-256 instead of RSA-2048), kept in `--cert-dir` if set, else only in memory.
//! Client certificates are requested but optional; any chain is accepted at the TLS layer
//! (the handshake signature is still verified) and handed to handlers in `Request::peer_certs`
//! for authentication further up.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_io::{Async, Timer};
use futures_lite::{future, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsAcceptor;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use crate::certs::spki;
use crate::error::{Error, Result};

/// Longest request head (request line + headers) accepted.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Time allowed for the TLS handshake plus the request head, and again for writing the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// After answering, how long and how much unread client input is drained before closing.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 256 * 1024;

/// File names inside `--cert-dir`, as upstream (`<PairName>.crt/.key`).
pub const CERT_DIR_PAIR_NAME: &str = "kube-controller-manager";

#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    pub bind_address: IpAddr,
    /// 0 disables serving (unless the server was told to take an ephemeral port).
    pub port: u16,
    pub cert_dir: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// Requests and responses

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub method: String,
    /// The path without the query string, as sent.
    pub path: String,
    /// The raw query string without `?`.
    pub query: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// DER client certificates (leaf first), empty if the client sent none.
    pub peer_certs: Vec<Vec<u8>>,
}

impl Request {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a query parameter, percent-decoded, in order.
    pub fn query_values(&self, key: &str) -> Vec<String> {
        query_pairs(&self.query)
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    /// Whether the query names `key` at all (`?verbose`, `?verbose=0` both count, as in Go).
    pub fn has_query(&self, key: &str) -> bool {
        query_pairs(&self.query).iter().any(|(k, _)| k == key)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    /// Further headers (`Content-Type`, `Content-Length`, `Cache-Control` and `Connection`
    /// are always written).
    pub headers: Vec<(String, String)>,
}

pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

fn nosniff() -> Vec<(String, String)> {
    vec![("X-Content-Type-Options".to_string(), "nosniff".to_string())]
}

impl Response {
    /// A text answer (with `X-Content-Type-Options: nosniff`, as Go's handlers write it).
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: TEXT_PLAIN.to_string(),
            body: body.into().into_bytes(),
            headers: nosniff(),
        }
    }

    /// A JSON answer without further headers.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: "application/json".to_string(),
            body: body.into().into_bytes(),
            headers: Vec::new(),
        }
    }

    /// Add `X-Content-Type-Options: nosniff`.
    pub fn with_nosniff(mut self) -> Self {
        if !self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-content-type-options"))
        {
            self.headers.extend(nosniff());
        }
        self
    }

    /// The value of a further header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Go's `http.Error`: the message plus a newline.
    pub fn error(status: u16, msg: &str) -> Self {
        Response::text(status, format!("{msg}\n"))
    }

    /// Go's `http.NotFound`.
    pub fn not_found() -> Self {
        Response::error(404, "404 page not found")
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;
pub type Filter = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;
pub type Check = Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>;

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a=1&b&c=x%20y` -> [(a,1),(b,""),(c,"x y")]; `;` is not a separator (Go >= 1.17).
fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Health checks

/// The registry of named health checks behind /healthz, and the readiness check for /readyz.
#[derive(Default)]
pub struct Health {
    checks: Mutex<Vec<(String, Check)>>,
    ready: Mutex<Option<Check>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Health::default())
    }

    /// Add a named check (shown as `[+]name ok`); a check with the same name is replaced.
    pub fn add_check(&self, name: &str, check: Check) {
        let mut checks = lock(&self.checks);
        match checks.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = check,
            None => checks.push((name.to_string(), check)),
        }
    }

    pub fn set_ready_check(&self, check: Check) {
        *lock(&self.ready) = Some(check);
    }

    pub fn check_names(&self) -> Vec<String> {
        lock(&self.checks).iter().map(|(n, _)| n.clone()).collect()
    }

    /// The /healthz answer for this request.
    pub fn healthz(&self, req: &Request) -> Response {
        let checks = lock(&self.checks).clone();
        render_checks("healthz", &checks, req)
    }

    /// The /readyz answer: the ready check (named `ready`), or `ping` if none is set.
    pub fn readyz(&self, req: &Request) -> Response {
        let checks: Vec<(String, Check)> = lock(&self.ready)
            .clone()
            .map(|c| vec![("ready".to_string(), c)])
            .unwrap_or_default();
        render_checks("readyz", &checks, req)
    }

    /// The /livez answer: `ping` only (we are alive if we answer).
    pub fn livez(&self, req: &Request) -> Response {
        render_checks("livez", &[], req)
    }
}

/// The apiserver healthz handler's output format.
fn render_checks(name: &str, checks: &[(String, Check)], req: &Request) -> Response {
    let ping: Check = Arc::new(|| Ok(()));
    let default = [("ping".to_string(), ping)];
    let checks = if checks.is_empty() {
        &default[..]
    } else {
        checks
    };
    let mut excluded: BTreeSet<String> = req.query_values("exclude").into_iter().collect();
    let mut out = String::new();
    let mut failed: Vec<&str> = Vec::new();
    for (check_name, check) in checks {
        if excluded.remove(check_name) {
            let _ = writeln!(out, "[+]{check_name} excluded: ok");
            continue;
        }
        match check() {
            Ok(()) => {
                let _ = writeln!(out, "[+]{check_name} ok");
            }
            Err(reason) => {
                let _ = writeln!(out, "[-]{check_name} failed: reason withheld");
                log::debug!("{name} check {check_name} failed: {reason}");
                failed.push(check_name);
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        let _ = writeln!(
            out,
            "warn: some health checks cannot be excluded: no matches for {}",
            quoted.join(",")
        );
    }
    if !failed.is_empty() {
        log::info!("{} check failed: {name}", failed.join(","));
        return Response::error(500, &format!("{out}{name} check failed"));
    }
    if !req.has_query("verbose") {
        return Response::text(200, "ok");
    }
    Response::text(200, format!("{out}{name} check passed\n"))
}

// ---------------------------------------------------------------------------------------------
// Serving certificates

struct TlsMaterial {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    ca_pem: Option<String>,
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(line));
        s.push('\n');
    }
    let _ = writeln!(s, "-----END {label}-----");
    s
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

fn load_tls(cfg: &ServeConfig) -> Result<TlsMaterial> {
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
            m.ca_pem = m.chain.last().map(|c| pem_encode("CERTIFICATE", c));
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

fn server_config(m: TlsMaterial, origin: &str) -> Result<Arc<rustls::ServerConfig>> {
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

fn describe_origin(cfg: &ServeConfig) -> String {
    match (&cfg.tls_cert_file, &cfg.tls_private_key_file, &cfg.cert_dir) {
        (Some(c), Some(k), _) => format!("({}, {})", c.display(), k.display()),
        (_, _, Some(d)) => format!("in {}", d.display()),
        _ => "(self-signed)".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The server

struct App {
    health: Arc<Health>,
    routes: HashMap<String, Handler>,
    /// Handlers of a path and everything under it (Go's `Handle(base)` plus
    /// `HandlePrefix(base + "/")`); exact routes win.
    trees: Vec<(String, Handler)>,
    filter: Option<Filter>,
}

impl App {
    fn dispatch(&self, req: &Request) -> Response {
        if let Some(f) = &self.filter {
            if let Some(resp) = f(req) {
                return resp;
            }
        }
        if let Some(h) = self.routes.get(&req.path) {
            return h(req);
        }
        let under = |base: &str| {
            req.path
                .strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        if let Some((_, h)) = self.trees.iter().find(|(base, _)| under(base)) {
            return h(req);
        }
        match req.path.as_str() {
            "/healthz" => self.health.healthz(req),
            "/readyz" => self.health.readyz(req),
            "/livez" => self.health.livez(req),
            _ => Response::not_found(),
        }
    }
}

pub struct Server {
    cfg: ServeConfig,
    app: App,
    plain_http: bool,
    ephemeral_port: bool,
}

/// A started server; dropping it stops it too.
pub struct RunningServer {
    addr: SocketAddr,
    stop_tx: smol::channel::Sender<()>,
    thread: Mutex<Option<JoinHandle<()>>>,
    ca_pem: Option<String>,
}

impl Server {
    pub fn new(cfg: ServeConfig, health: Arc<Health>) -> Self {
        Server {
            cfg,
            app: App {
                health,
                routes: HashMap::new(),
                trees: Vec::new(),
                filter: None,
            },
            plain_http: false,
            ephemeral_port: false,
        }
    }

    /// Serve `h` for exactly this path (checked before the built-in health paths).
    pub fn route(&mut self, path: &str, h: Handler) {
        self.app.routes.insert(path.to_string(), h);
    }

    /// Serve `h` for `base` and every path under `base/` (after exact routes).
    pub fn route_tree(&mut self, base: &str, h: Handler) {
        self.app
            .trees
            .push((base.trim_end_matches('/').to_string(), h));
    }

    /// Run `f` before routing; `Some(response)` answers the request (e.g. 401/403).
    pub fn set_filter(&mut self, f: Filter) {
        self.app.filter = Some(f);
    }

    /// Serve plain HTTP instead of HTTPS (tests).
    pub fn set_plain_http(&mut self, on: bool) {
        self.plain_http = on;
    }

    /// Treat port 0 as "any free port" instead of "disabled" (tests).
    pub fn set_ephemeral_port(&mut self, on: bool) {
        self.ephemeral_port = on;
    }

    /// Bind, prepare TLS and start serving on a background thread.
    pub fn start(self) -> Result<RunningServer> {
        if self.cfg.port == 0 && !self.ephemeral_port {
            return Err(Error::config("serving is disabled (--secure-port=0)"));
        }
        let (tls, ca_pem) = if self.plain_http {
            (None, None)
        } else {
            let m = load_tls(&self.cfg)?;
            let ca_pem = m.ca_pem.clone();
            let sc = server_config(m, &describe_origin(&self.cfg))?;
            (Some(TlsAcceptor::from(sc)), ca_pem)
        };
        let bind = SocketAddr::new(self.cfg.bind_address, self.cfg.port);
        let listener = TcpListener::bind(bind)
            .map_err(|e| Error::Io(format!("failed to listen on {bind}: {e}")))?;
        let addr = listener.local_addr()?;
        let listener = Async::new(listener)?;
        let (stop_tx, stop_rx) = smol::channel::bounded::<()>(1);
        let app = Arc::new(self.app);
        let scheme = if tls.is_some() { "https" } else { "http" };
        log::info!("Serving securely on {addr} ({scheme})");
        let thread = std::thread::Builder::new()
            .name("secure-serving".into())
            .spawn(move || {
                let ex = smol::LocalExecutor::new();
                smol::block_on(ex.run(accept_loop(&ex, listener, tls, app, stop_rx)));
            })?;
        Ok(RunningServer {
            addr,
            stop_tx,
            thread: Mutex::new(Some(thread)),
            ca_pem,
        })
    }
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, drop open connections and wait for the serving thread to end.
    pub fn stop(&self) {
        self.stop_tx.close();
        if let Some(t) = lock(&self.thread).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// The self-signed CA (PEM) when the serving certificate was generated, for clients that
    /// want to trust it.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_pem.clone()
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(
    ex: &smol::LocalExecutor<'_>,
    listener: Async<TcpListener>,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    stop_rx: smol::channel::Receiver<()>,
) {
    loop {
        let next = future::or(async { Some(listener.accept().await) }, async {
            let _ = stop_rx.recv().await;
            None
        })
        .await;
        match next {
            None => return,
            Some(Ok((stream, peer))) => {
                let (tls, app) = (tls.clone(), app.clone());
                ex.spawn(async move {
                    if let Err(e) = serve_connection(stream, tls, app).await {
                        log::debug!("connection from {peer}: {e}");
                    }
                })
                .detach();
            }
            Some(Err(e)) => {
                // E.g. out of file descriptors: back off instead of spinning.
                log::warn!("accept failed: {e}");
                Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn with_timeout<T>(
    what: &str,
    fut: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    let what = what.to_string();
    future::or(fut, async move {
        Timer::after(IO_TIMEOUT).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} timed out"),
        ))
    })
    .await
}

async fn serve_connection(
    stream: Async<TcpStream>,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
) -> std::io::Result<()> {
    match tls {
        None => {
            let mut stream = stream;
            exchange(&mut stream, Vec::new(), app).await?;
            linger(stream).await;
        }
        Some(acceptor) => {
            let mut stream = with_timeout("TLS handshake", acceptor.accept(stream)).await?;
            let peer_certs = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|certs| certs.iter().map(|c| c.to_vec()).collect())
                .unwrap_or_default();
            exchange(&mut stream, peer_certs, app).await?;
            linger(stream.into_inner().0).await;
        }
    }
    Ok(())
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Closed,
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf[scan_from..].windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(scan_from + pos);
            if buf.len() > MAX_HEAD_BYTES {
                return Ok(Head::TooLarge);
            }
            return Ok(Head::Complete(buf));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(Head::TooLarge);
        }
    }
}

/// Parse a request head (without the final blank line).
fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || method.is_empty() || !version.starts_with("HTTP/1.") {
        return None;
    }
    if !target.starts_with('/') {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line.split_once(':')?;
        if k.is_empty() || k.contains(' ') {
            return None;
        }
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        peer_certs: Vec::new(),
    })
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Header values must not break the head: CR and LF are dropped.
fn header_safe(v: &str) -> String {
    v.chars().filter(|c| *c != '\r' && *c != '\n').collect()
}

fn encode_response(resp: &Response, head_only: bool) -> Vec<u8> {
    // Every answer is marked private and not cacheable, as the apiserver library's
    // WithCacheControl filter does.
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nCache-Control: no-cache, private\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        resp.status,
        reason_phrase(resp.status),
        header_safe(&resp.content_type),
        resp.body.len()
    );
    for (k, v) in &resp.headers {
        let _ = write!(head, "{}: {}\r\n", header_safe(k), header_safe(v));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    out
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    peer_certs: Vec<Vec<u8>>,
    app: Arc<App>,
) -> std::io::Result<()> {
    let head = with_timeout("reading request", read_head(&mut s)).await?;
    let (resp, head_only) = match head {
        Head::Closed => return Ok(()),
        Head::TooLarge => (
            Response::error(431, "431 Request Header Fields Too Large"),
            false,
        ),
        Head::Complete(raw) => match parse_head(&raw) {
            None => (Response::error(400, "400 Bad Request"), false),
            Some(mut req) => {
                req.peer_certs = peer_certs;
                let head_only = req.method == "HEAD";
                let resp = smol::unblock(move || app.dispatch(&req)).await;
                (resp, head_only)
            }
        },
    };
    let bytes = encode_response(&resp, head_only);
    with_timeout("writing response", async {
        s.write_all(&bytes).await?;
        s.flush().await?;
        s.close().await
    })
    .await
}

/// Half-close, then read and discard what the client still sends (an ignored body, the rest
/// of an oversized head) until it closes: closing with unread input makes the kernel answer
/// with a reset, which can destroy the response before the client has read it.
async fn linger(tcp: Async<TcpStream>) {
    let _ = tcp.get_ref().shutdown(std::net::Shutdown::Write);
    let mut tcp = tcp;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    future::or(drain, async {
        Timer::after(LINGER_TIME).await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path_and_query: &str) -> Request {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Request {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            ..Default::default()
        }
    }

    fn body(r: &Response) -> &str {
        std::str::from_utf8(&r.body).unwrap()
    }

    fn health_with_failing() -> Arc<Health> {
        let h = Health::new();
        h.add_check("leaderElection", Arc::new(|| Ok(())));
        h.add_check("deployment-controller", Arc::new(|| Err("boom".into())));
        h.add_check("replicaset-controller", Arc::new(|| Ok(())));
        h
    }

    #[test]
    fn healthz_ping_when_empty() {
        let h = Health::new();
        let r = h.healthz(&req("/healthz"));
        assert_eq!((r.status, body(&r)), (200, "ok"));
        assert_eq!(r.content_type, TEXT_PLAIN);
        let r = h.healthz(&req("/healthz?verbose"));
        assert_eq!(body(&r), "[+]ping ok\nhealthz check passed\n");
    }

    #[test]
    fn healthz_failure_is_always_verbose() {
        let h = health_with_failing();
        for q in ["/healthz", "/healthz?verbose"] {
            let r = h.healthz(&req(q));
            assert_eq!(r.status, 500);
            assert_eq!(
                body(&r),
                "[+]leaderElection ok\n[-]deployment-controller failed: reason withheld\n\
                 [+]replicaset-controller ok\nhealthz check failed\n"
            );
        }
    }

    #[test]
    fn healthz_exclude() {
        let h = health_with_failing();
        let r = h.healthz(&req("/healthz?exclude=deployment-controller"));
        assert_eq!((r.status, body(&r)), (200, "ok"));
        let r = h.healthz(&req(
            "/healthz?verbose=false&exclude=deployment-controller&exclude=nope&exclude=also%2Dnope",
        ));
        assert_eq!(r.status, 200);
        assert_eq!(
            body(&r),
            "[+]leaderElection ok\n[+]deployment-controller excluded: ok\n\
             [+]replicaset-controller ok\n\
             warn: some health checks cannot be excluded: no matches for \"also-nope\",\"nope\"\n\
             healthz check passed\n"
        );
    }

    #[test]
    fn add_check_replaces_same_name() {
        let h = health_with_failing();
        h.add_check("deployment-controller", Arc::new(|| Ok(())));
        assert_eq!(h.healthz(&req("/healthz")).status, 200);
        assert_eq!(h.check_names().len(), 3);
    }

    #[test]
    fn readyz_and_livez() {
        let h = Health::new();
        assert_eq!(body(&h.readyz(&req("/readyz"))), "ok");
        h.set_ready_check(Arc::new(|| Err("caches not synced".into())));
        let r = h.readyz(&req("/readyz"));
        assert_eq!(r.status, 500);
        assert_eq!(
            body(&r),
            "[-]ready failed: reason withheld\nreadyz check failed\n"
        );
        let r = h.livez(&req("/livez?verbose"));
        assert_eq!(
            (r.status, body(&r)),
            (200, "[+]ping ok\nlivez check passed\n")
        );
    }

    #[test]
    fn query_parsing() {
        let r = req("/x?a=1&b&c=x%20y+z&a=2&bad=%zz&tail=%4");
        assert_eq!(r.query_values("a"), vec!["1", "2"]);
        assert!(r.has_query("b"));
        assert!(!r.has_query("d"));
        assert_eq!(r.query_values("c"), vec!["x y z"]);
        assert_eq!(r.query_values("bad"), vec!["%zz"]);
        assert_eq!(r.query_values("tail"), vec!["%4"]);
    }

    #[test]
    fn head_parsing() {
        let r = parse_head(b"GET /healthz?verbose HTTP/1.1\r\nHost: x\r\nX-Remote-User:  bob ")
            .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/healthz");
        assert_eq!(r.query, "verbose");
        assert_eq!(r.header("x-remote-user"), Some("bob"));
        assert_eq!(r.header("HOST"), Some("x"));
        for bad in [
            &b"GET /healthz"[..],
            b"GET /healthz HTTP/2",
            b"GET healthz HTTP/1.1",
            b"GET / HTTP/1.1 extra",
            b"GET / HTTP/1.1\r\nno colon",
            b"GET / HTTP/1.1\r\nBad Name: x",
            b"\xff / HTTP/1.1",
        ] {
            assert!(
                parse_head(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn response_encoding() {
        let r = Response::not_found();
        let wire = String::from_utf8(encode_response(&r, false)).unwrap();
        assert!(wire.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(wire.contains("Content-Length: 19\r\n"));
        assert!(wire.ends_with("\r\n\r\n404 page not found\n"));
        let head = String::from_utf8(encode_response(&r, true)).unwrap();
        assert!(head.ends_with("Connection: close\r\n\r\n"));
    }

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

    /// Loopback, port 0, no certificate files.
    fn disabled_port() -> ServeConfig {
        ServeConfig {
            bind_address: "127.0.0.1".parse().unwrap(),
            port: 0,
            cert_dir: None,
            tls_cert_file: None,
            tls_private_key_file: None,
        }
    }

    #[test]
    fn port_zero_is_disabled() {
        let cfg = disabled_port();
        let err = Server::new(cfg, Health::new()).start().err().unwrap();
        assert!(matches!(err, Error::Config(_)));
    }

    #[test]
    fn exact_routes_then_trees_then_health() {
        let cfg = disabled_port();
        let mut s = Server::new(cfg, Health::new());
        let answer = |tag: &'static str| -> Handler { Arc::new(move |_| Response::text(200, tag)) };
        s.route("/debug/x/graph", answer("exact"));
        s.route_tree("/debug/x/", answer("tree"));
        let at = |path: &str| {
            let req = Request {
                method: "GET".into(),
                path: path.into(),
                ..Default::default()
            };
            let r = s.app.dispatch(&req);
            (r.status, String::from_utf8(r.body).unwrap())
        };
        assert_eq!(at("/debug/x/graph"), (200, "exact".into()));
        for p in ["/debug/x", "/debug/x/", "/debug/x/graph/", "/debug/x/a/b"] {
            assert_eq!(at(p), (200, "tree".into()), "{p}");
        }
        assert_eq!(at("/debug/xy").0, 404);
        assert_eq!(at("/healthz").0, 200);
    }
}
