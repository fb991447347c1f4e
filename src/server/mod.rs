//! The secure port (`--secure-port`, 10257): HTTPS with /healthz, /readyz, /livez and whatever
//! routes the rest of the program registers (/metrics, /configz, /debug/flags/v). A filter
//! set with [`Server::set_filter`] sees every request before routing (the delegated
//! authentication and authorization of `crate::auth`), so unknown paths are authorized before
//! they are 404. Every answer carries `Cache-Control: no-cache, private`, as the apiserver
//! library's. A route registered with [`Server::route_body`] gets the request body, read only
//! once the filter has let the request through.
//!
//! One thread runs a small smol executor: it accepts connections and serves each on its own
//! task (TLS handshake, one HTTP/1.1 request, `Connection: close`). Handlers are plain
//! synchronous functions run on smol's blocking pool, so a slow handler never stalls the
//! accept loop. What a client may send, and for how long, is bounded by [`Limits`]: the
//! handshake and request head within 10 s of connecting, 16 KiB and 256 header lines of head
//! (431), a declared body of at most 256 KiB (413), 512 connections at once, the one waiting
//! longest for its head dropped when a new one needs room.
//!
//! Serving certificate: `--tls-cert-file`/`--tls-private-key-file` if given; else a
//! self-signed CA and leaf like the apiserver library's `MaybeDefaultWithSelfSignedCerts`
//! (ECDSA P-256 instead of RSA-2048), kept in `--cert-dir` if set, else only in memory.
//! Client certificates are requested but optional; any chain is accepted at the TLS layer
//! (the handshake signature is still verified) and handed to handlers in `Request::peer_certs`
//! for authentication further up.

mod conn;
mod healthz;
pub(crate) mod http;
mod metrics;
pub mod query;
mod tls;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use async_io::Async;
use futures_rustls::TlsAcceptor;

use crate::error::{Error, Result};

pub use healthz::Health;
pub use http::{Check, Filter, Handler, Request, Response, TEXT_PLAIN};
pub use metrics::metrics_handler;
use tls::{describe_origin, load_tls, server_config};

/// What the secure port accepts from a client before it refuses or drops it. Go's server,
/// which upstream's secure port runs on, allows a 1 MiB head and 32 s for the TLS handshake
/// and again for the head, and has no connection limit (Go raises the file descriptor limit
/// to the hard limit instead). These are smaller: the port serves health checks and metrics
/// to probes and scrapers, and should cost little however it is used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The TLS handshake and the request head must arrive within this time of the
    /// connection being accepted; a slower client is dropped without an answer.
    pub head_timeout: Duration,
    /// Time allowed for writing the answer.
    pub write_timeout: Duration,
    /// Longest request head (request line and headers): 431 beyond it.
    pub max_head_bytes: usize,
    /// Most header lines: 431 beyond them.
    pub max_headers: usize,
    /// Largest request body: 413 beyond it. Routes that read a body get it whole; for the
    /// others one this small is drained after the answer, so the client reads the answer
    /// rather than a reset.
    pub max_body_bytes: u64,
    /// Connections served at once. When the table is full, the connection that has waited
    /// longest for its request head is dropped to make room for a new one.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            max_headers: 256,
            max_body_bytes: conn::LINGER_BYTES as u64,
            max_connections: 512,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    pub bind_address: IpAddr,
    /// 0 disables serving (unless the server was told to take an ephemeral port).
    pub port: u16,
    pub cert_dir: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The server

struct App {
    health: Arc<Health>,
    routes: HashMap<String, Handler>,
    /// Exact routes that read the request body.
    body_routes: HashSet<String>,
    /// Handlers of a path and everything under it (Go's `Handle(base)` plus
    /// `HandlePrefix(base + "/")`); exact routes win.
    trees: Vec<(String, Handler)>,
    filter: Option<Filter>,
}

impl App {
    fn dispatch(&self, req: &Request) -> Response {
        match self.filter(req) {
            Some(refused) => refused,
            None => self.route(req),
        }
    }

    /// The filter's answer when it refuses the request.
    fn filter(&self, req: &Request) -> Option<Response> {
        self.filter.as_ref().and_then(|f| f(req))
    }

    /// Whether the route of `path` reads the request body.
    fn reads_body(&self, path: &str) -> bool {
        self.body_routes.contains(path)
    }

    /// The answer of the route of a request the filter let through.
    fn route(&self, req: &Request) -> Response {
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
    limits: Limits,
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
                body_routes: HashSet::new(),
                trees: Vec::new(),
                filter: None,
            },
            plain_http: false,
            ephemeral_port: false,
            limits: Limits::default(),
        }
    }

    /// Serve `h` for exactly this path (checked before the built-in health paths).
    pub fn route(&mut self, path: &str, h: Handler) {
        self.app.body_routes.remove(path);
        self.app.routes.insert(path.to_string(), h);
    }

    /// [`Server::route`] for a handler that reads the request body (`Request::body`, at most
    /// `Limits::max_body_bytes`). The body is read after the filter has let the request through,
    /// so an unauthenticated client cannot make the server hold one.
    pub fn route_body(&mut self, path: &str, h: Handler) {
        self.app.body_routes.insert(path.to_string());
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

    /// Serve with other limits than the defaults (tests).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
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
        let limits = self.limits;
        let scheme = if tls.is_some() { "https" } else { "http" };
        log::info!("Serving securely on {addr} ({scheme})");
        let thread = std::thread::Builder::new()
            .name("secure-serving".into())
            .spawn(move || {
                let ex = smol::LocalExecutor::new();
                smol::block_on(ex.run(conn::accept_loop(&ex, listener, tls, app, limits, stop_rx)));
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

/// What a route answers, without a connection, for tests of routes installed elsewhere.
#[cfg(test)]
impl Server {
    pub(crate) fn dispatch(&self, req: &Request) -> Response {
        self.app.dispatch(req)
    }

    pub(crate) fn reads_body(&self, path: &str) -> bool {
        self.app.reads_body(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
