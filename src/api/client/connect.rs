//! Connections: ureq agents and their configuration, connectors shared by every agent with
//! the same TLS settings, and the resolver (addresses as they are, names reused for 30 s,
//! a kubeconfig's `tls-server-name` dialled at the server's address).

use crate::api::kubeconfig::RestConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// An agent with our resolver and `connector`.
pub(super) fn new_agent(config: ureq::config::Config, connector: &SharedConnector) -> ureq::Agent {
    ureq::Agent::with_parts(config, connector.clone(), Resolver)
}

/// The TLS settings a connection is made with (what `tls_config` reads of a `RestConfig`), as
/// a SHA-256 digest: the registry of connectors keeps no copy of a client key.
fn tls_identity(cfg: &RestConfig) -> [u8; 32] {
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    d.update(&[u8::from(cfg.insecure_skip_tls_verify)]);
    for part in [&cfg.ca_pem, &cfg.client_cert_pem, &cfg.client_key_pem] {
        match part {
            // Length-prefixed, so that no two settings run together into the same bytes.
            Some(b) => {
                d.update(&[1]);
                d.update(&(b.len() as u64).to_le_bytes());
                d.update(b);
            }
            None => d.update(&[0]),
        }
    }
    let mut out = [0; 32];
    out.copy_from_slice(d.finish().as_ref());
    out
}

/// The connector (TCP, then TLS; `api::tls`), shared by every agent with the same TLS
/// settings. The first client of those settings gives it the rustls configuration, and that
/// configuration holds the session cache: connections after the first resume a session
/// instead of a full handshake, which with a client certificate costs an RSA signature on
/// each side. Every informer watch has its own agent (and re-watches make new ones), so
/// with a connector each, a start made about fifty full handshakes and as many parses of
/// the client key.
#[derive(Debug, Clone)]
pub(super) struct SharedConnector(pub(super) Arc<crate::api::tls::Connector>);

impl SharedConnector {
    pub(super) fn for_identity(cfg: &RestConfig) -> SharedConnector {
        type Shared = HashMap<[u8; 32], std::sync::Weak<crate::api::tls::Connector>>;
        static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
        let id = tls_identity(cfg);
        let mut shared = SHARED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(c) = shared.get(&id).and_then(std::sync::Weak::upgrade) {
            return SharedConnector(c);
        }
        shared.retain(|_, c| c.strong_count() > 0);
        let c = Arc::new(crate::api::tls::Connector::default());
        shared.insert(id, Arc::downgrade(&c));
        SharedConnector(c)
    }
}

impl ureq::unversioned::transport::Connector<()> for SharedConnector {
    type Out = Box<dyn ureq::unversioned::transport::Transport>;

    fn connect(
        &self,
        details: &ureq::unversioned::transport::ConnectionDetails,
        chained: Option<()>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        self.0.connect(details, chained)
    }
}

/// A kubeconfig's `tls-server-name` applied: requests go to `https://<name>:<port>` (so that
/// rustls sends that name and verifies the certificate against it), and our resolver connects
/// that authority to the server's own host and port.
#[derive(Clone, Debug)]
pub(super) struct Dial {
    /// `https://<tls-server-name>:<port>` and the server URL's path.
    pub(super) base: String,
    /// The server's own `host[:port]`, for the Host header.
    pub(super) host: String,
}

impl Dial {
    /// None when the name is the server's host already.
    pub(super) fn new(base: &str, name: &str) -> std::result::Result<Option<Dial>, String> {
        let uri: ureq::http::Uri = base.parse().map_err(|e| format!("server {base:?}: {e}"))?;
        let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
            return Err(format!("server {base:?} has no host"));
        };
        let port = uri.port_u16().unwrap_or(443);
        let name = name.trim();
        let bare_name = name.trim_start_matches('[').trim_end_matches(']');
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        if bare_name.eq_ignore_ascii_case(bare_host) {
            return Ok(None);
        }
        if rustls_pki_types::ServerName::try_from(bare_name).is_err() {
            return Err(format!("{name:?} is not a DNS name or an IP address"));
        }
        let dial_host = if bare_name.parse::<std::net::Ipv6Addr>().is_ok() {
            format!("[{bare_name}]")
        } else {
            bare_name.to_string()
        };
        let dial_authority = format!("{dial_host}:{port}");
        let dial_base = format!("https://{dial_authority}");
        dial_base
            .parse::<ureq::http::Uri>()
            .map_err(|e| format!("{name:?}: {e}"))?;
        // `host` keeps an IPv6 address's brackets, so this parses as the server's own URI.
        let real: ureq::http::Uri = format!("https://{host}:{port}")
            .parse()
            .map_err(|e| format!("server {base:?}: {e}"))?;
        dial_overrides()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dial_authority.to_ascii_lowercase(), real);
        DIAL_OVERRIDDEN.store(true, std::sync::atomic::Ordering::Release);
        // A server URL's path (an API server behind a path prefix) stays in front of every
        // request path.
        let path = uri.path().trim_end_matches('/');
        Ok(Some(Dial {
            base: format!("{dial_base}{path}"),
            host: authority.as_str().to_string(),
        }))
    }
}

/// Set once a tls-server-name is in use: until then resolving skips the lookup below.
static DIAL_OVERRIDDEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `<tls-server-name>:<port>` -> `https://<server's host>:<port>`.
fn dial_overrides() -> &'static Mutex<HashMap<String, ureq::http::Uri>> {
    static OVERRIDES: OnceLock<Mutex<HashMap<String, ureq::http::Uri>>> = OnceLock::new();
    OVERRIDES.get_or_init(Default::default)
}

/// How long a resolved host name is reused.
const RESOLVED_TTL: Duration = Duration::from_secs(30);

/// Name resolution that does not cost a thread per request. ureq resolves the server's host
/// before it looks in its connection pool, on every request, and under a timeout its default
/// resolver does that on a new thread: a benchmark run started 5,000 threads for it. An IP
/// address (the usual kubeconfig server) needs no resolving; a host name is resolved by
/// ureq's resolver (on its thread, within the timeout) and reused for `RESOLVED_TTL`.
#[derive(Debug)]
pub(super) struct Resolver;

type Resolved = ureq::unversioned::resolver::ResolvedSocketAddrs;

pub(super) fn resolved_cache() -> &'static Mutex<HashMap<String, (Instant, Resolved)>> {
    static CACHE: OnceLock<Mutex<HashMap<String, (Instant, Resolved)>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A URI's host, scheme and port (the scheme's default when none is given).
fn host_scheme_port(uri: &ureq::http::Uri) -> Option<(&str, &str, u16)> {
    let (host, scheme) = (uri.host()?, uri.scheme()?);
    let port = uri.port_u16().unwrap_or(match scheme.as_str() {
        "http" => 80,
        _ => 443,
    });
    Some((host, scheme.as_str(), port))
}

impl ureq::unversioned::resolver::Resolver for Resolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> std::result::Result<Resolved, ureq::Error> {
        // A tls-server-name: connect to the server the kubeconfig names (looked up once: an
        // override never leads to another).
        let overridden = DIAL_OVERRIDDEN.load(std::sync::atomic::Ordering::Acquire);
        let target = host_scheme_port(uri)
            .filter(|_| overridden)
            .and_then(|(host, _, port)| {
                dial_overrides()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&format!("{host}:{port}").to_ascii_lowercase())
                    .cloned()
            });
        self.resolve_direct(target.as_ref().unwrap_or(uri), config, timeout)
    }
}

impl Resolver {
    /// An IP address as it is; a host name through ureq's resolver, reused for `RESOLVED_TTL`.
    fn resolve_direct(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> std::result::Result<Resolved, ureq::Error> {
        use ureq::unversioned::resolver::Resolver as _;
        let Some((host, scheme, port)) = host_scheme_port(uri) else {
            return ureq::unversioned::resolver::DefaultResolver::default()
                .resolve(uri, config, timeout);
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
            let mut out = self.empty();
            out.push(std::net::SocketAddr::new(ip, port));
            return Ok(out);
        }
        let key = format!("{scheme}://{host}:{port}");
        let now = Instant::now();
        if let Some((at, addrs)) = resolved_cache()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            if now.duration_since(*at) < RESOLVED_TTL {
                return Ok(addrs.clone());
            }
        }
        let addrs = ureq::unversioned::resolver::DefaultResolver::default()
            .resolve(uri, config, timeout)?;
        let mut cache = resolved_cache().lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|_, (at, _)| now.duration_since(*at) < RESOLVED_TTL);
        cache.insert(key, (now, addrs.clone()));
        Ok(addrs)
    }
}

/// The agent configuration: ordinary requests get a global timeout; a watch agent (own pool,
/// so that it can be shut down alone) gets only a per-read timeout.
pub(super) fn agent_config(
    user_agent: &str,
    watch_per_read: Option<Duration>,
    timeout: Duration,
) -> ureq::config::Config {
    let b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(ureq::Proxy::try_from_env())
        .timeout_connect(Some(Duration::from_secs(10)))
        .user_agent(user_agent)
        // Every connection keeps these buffers for as long as it lives: a watch for as long as
        // it runs (about fifty with the garbage collector on), a pooled one while idle, and a
        // namespace deletion has a hundred in flight. The input buffer caps the response
        // header (the apiserver's are well under 2 KiB); ureq makes it at least 10 KiB
        // whenever a request has a body. Bodies stream through either in chunks.
        .input_buffer_size(if watch_per_read.is_some() { 4 } else { 10 } * 1024)
        .output_buffer_size(4 * 1024);
    match watch_per_read {
        Some(per_read) => b
            .timeout_global(None)
            .timeout_per_read(Some(per_read))
            .max_idle_connections(0),
        None => b
            .timeout_global(Some(timeout))
            .max_idle_connections(16)
            .max_idle_connections_per_host(16),
    }
    .build()
}
