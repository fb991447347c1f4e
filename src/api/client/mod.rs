//! The API client: ureq over rustls (ring), JSON, a client-side QPS/burst limiter, retries for
//! 429/5xx, and watches that can be cancelled from another thread.

use crate::api::fence::WriteFence;
use crate::api::kubeconfig::RestConfig;
use crate::api::watch::status_error;
use crate::error::{Error, Result};
use crate::queue::TokenBucket;
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

mod connect;
mod direct;
mod exchange;
mod http1;
mod query;
mod ready;
mod stream;
mod verbs;
mod watch;

pub use query::{percent_encode, DeleteOptions, ListOptions, PatchType, WatchOptions};
pub use stream::AsyncWatch;
pub use verbs::ObjectList;
pub use watch::{WatchCanceller, WatchStream};

use connect::{agent_config, new_agent, Dial, SharedConnector};

/// Supplies bearer tokens that may change over time (service-account credentials).
pub trait TokenSource: Send + Sync {
    fn token(&self) -> Result<String>;
    /// The server rejected the last token (401): fetch a new one next time.
    fn invalidate(&self) {}
}

/// A token read from a file and re-read when the file changes (projected in-cluster tokens).
struct FileToken {
    path: PathBuf,
    cached: Mutex<Option<(String, Option<SystemTime>, Instant)>>,
}

impl TokenSource for FileToken {
    fn token(&self) -> Result<String> {
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let mut c = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tok, seen, at)) = c.as_ref() {
            if *seen == mtime && at.elapsed() < Duration::from_secs(60) {
                return Ok(tok.clone());
            }
        }
        let tok = std::fs::read_to_string(&self.path)
            .map_err(|e| {
                Error::Config(format!(
                    "cannot read token file {}: {e}",
                    self.path.display()
                ))
            })?
            .trim()
            .to_string();
        *c = Some((tok.clone(), mtime, Instant::now()));
        Ok(tok)
    }
    fn invalidate(&self) {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[derive(Clone)]
enum Auth {
    None,
    Bearer(String),
    Source(Arc<dyn TokenSource>),
}

/// Default timeout for every request but watches.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times a 429 / Retry-After answer is retried (client-go's default).
const MAX_RETRY_AFTER: u32 = 10;
/// Retries of idempotent reads after transport errors or 5xx without Retry-After.
const MAX_READ_RETRIES: u32 = 3;

struct Inner {
    base: String,
    /// Where requests go when the kubeconfig names a `tls-server-name`: `base` with that name
    /// as the host, so that the certificate is verified against it (and sent as SNI); our
    /// resolver connects it to the server's own address (`dial_overrides`). None otherwise.
    dial: Option<Dial>,
    agent: ureq::Agent,
    /// Makes the connections of `agent` and of every watch agent.
    connector: SharedConnector,
    auth: Auth,
    limiter: Mutex<TokenBucket>,
    user_agent: String,
    /// Set once at start-up (`Client::set_fence`): writes pass it.
    fence: OnceLock<Arc<WriteFence>>,
    /// An HTTP(S) proxy from the environment applies to the server: async watches
    /// (`stream.rs`) then use ureq, which goes through it.
    proxied: bool,
    /// Requests without ureq (`exchange.rs`); None behind a proxy (ureq goes through it).
    endpoint: Option<Arc<exchange::Endpoint>>,
    /// Each request's timeout.
    timeout: Duration,
}

/// How a request takes its token of the client's QPS limiter.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Limit {
    /// In turn with every other request (waiting if the bucket is empty).
    Normal,
    /// The caller took it already (`Client::pass_limiter`).
    Passed,
    /// Only when no other request is waiting for one (Events): they go first.
    Low,
}

/// A client for one identity. Cheap to clone; clones share the connection pool and limiter.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// `edgekcm/<version> (<os>/<arch>)`, the user-agent prefix.
pub fn user_agent_base() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => other,
    };
    format!(
        "edgekcm/v{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        arch
    )
}

/// Install ring as rustls' process-wide provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Client {
    /// Build a client for `cfg`. `qps <= 0` disables the client-side limiter.
    pub fn new(cfg: &RestConfig, qps: f32, burst: u32, user_agent: &str) -> Result<Client> {
        Client::new_with_timeout(cfg, qps, burst, user_agent, REQUEST_TIMEOUT)
    }

    /// As `new`, with another timeout for each request (leader election uses
    /// renewDeadline/2, as client-go does).
    pub fn new_with_timeout(
        cfg: &RestConfig,
        qps: f32,
        burst: u32,
        user_agent: &str,
        timeout: Duration,
    ) -> Result<Client> {
        install_crypto_provider();
        let https = cfg.server.starts_with("https://");
        if !https && !cfg.server.starts_with("http://") {
            return Err(Error::Config(format!(
                "{}: server {:?} is not an http(s) URL",
                cfg.source, cfg.server
            )));
        }
        let config = agent_config(user_agent, None, timeout);
        let connector = SharedConnector::for_identity(cfg);
        if https && !connector.0.has_config() {
            connector.0.set_config(super::tls::client_config(cfg)?);
        }
        let base = cfg.server.trim_end_matches('/').to_string();
        let dial = match &cfg.tls_server_name {
            Some(name) if https => Dial::new(&base, name)
                .map_err(|e| Error::Config(format!("{}: tls-server-name: {e}", cfg.source)))?,
            _ => None,
        };
        let proxied = proxy_applies(dial.as_ref().map_or(base.as_str(), |d| d.base.as_str()));
        let endpoint = match proxied {
            true => None,
            false => Some(Arc::new(
                exchange::Endpoint::new(
                    &base,
                    dial.as_ref().map(|d| (d.base.as_str(), d.host.as_str())),
                )
                .map_err(|e| Error::Config(format!("{}: server {base:?}: {e}", cfg.source)))?,
            )),
        };
        let auth = if let Some(t) = &cfg.token {
            Auth::Bearer(t.clone())
        } else if let Some(p) = &cfg.token_file {
            Auth::Source(Arc::new(FileToken {
                path: p.clone(),
                cached: Mutex::new(None),
            }))
        } else {
            Auth::None
        };
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                dial,
                agent: new_agent(config, &connector),
                connector,
                auth,
                limiter: Mutex::new(TokenBucket::new(f64::from(qps), burst.max(1))),
                user_agent: user_agent.to_string(),
                fence: OnceLock::new(),
                proxied,
                endpoint,
                timeout,
            }),
        })
    }

    /// A client with the same server and TLS settings but another identity: `source` supplies
    /// its bearer token. The caller builds `cfg` without the client certificate.
    pub fn with_token_source(
        cfg: &RestConfig,
        qps: f32,
        burst: u32,
        user_agent: &str,
        source: Arc<dyn TokenSource>,
    ) -> Result<Client> {
        let c = Client::new(cfg, qps, burst, user_agent)?;
        // Just made: nothing else holds it.
        let Ok(made) = Arc::try_unwrap(c.inner) else {
            return Err(Error::Config("a new client is shared".into()));
        };
        Ok(Client {
            inner: Arc::new(Inner {
                auth: Auth::Source(source),
                ..made
            }),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.inner.base
    }
    pub fn user_agent(&self) -> &str {
        &self.inner.user_agent
    }

    /// Make every request of this client and its clones but GETs pass `fence`: once it is
    /// closed they fail with `Error::Cancelled` unsent. Only the first fence set counts.
    pub fn set_fence(&self, fence: Arc<WriteFence>) {
        let _ = self.inner.fence.set(fence);
    }

    fn wait_for_limiter(&self) {
        let wait = self.limiter_delay();
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Wait, without blocking the thread, for a token of the QPS limiter for one request
    /// the caller sends next (with `ListOptions::limiter_passed`). Callers waiting here are
    /// served in order with every other request of the client.
    pub async fn pass_limiter(&self) {
        let wait = self.limiter_delay();
        if !wait.is_zero() {
            async_io::Timer::after(wait).await;
        }
    }

    /// Take a token of the QPS limiter: how long to wait before sending.
    fn limiter_delay(&self) -> Duration {
        self.inner
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve_at(Instant::now())
    }

    /// Take a token of the QPS limiter at low priority: only when no other request of this
    /// client (or its clones) is waiting for one; until then, wait and look again.
    fn wait_for_idle_limiter(&self) {
        loop {
            let res = self
                .inner
                .limiter
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take_idle_at(Instant::now());
            match res {
                Ok(()) => return,
                // At least a millisecond, so rounding never spins.
                Err(wait) => std::thread::sleep(wait.max(Duration::from_millis(1))),
            }
        }
    }

    fn take_limiter(&self, limit: Limit) {
        match limit {
            Limit::Normal => self.wait_for_limiter(),
            Limit::Passed => {}
            Limit::Low => self.wait_for_idle_limiter(),
        }
    }

    fn authorization(&self) -> Result<Option<String>> {
        Ok(match &self.inner.auth {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Source(s) => Some(format!("Bearer {}", s.token()?)),
        })
    }

    fn invalidate_token(&self) {
        if let Auth::Source(s) = &self.inner.auth {
            s.invalidate();
        }
    }

    fn send_once(
        &self,
        agent: &ureq::Agent,
        method: &str,
        url: &str,
        accept: &str,
        body: Option<(&str, &str)>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let auth = self.authorization()?;
        // `url` starts with `base`; with a tls-server-name it is sent to the dial host, with
        // the server's own host in the Host header (as client-go does).
        let (target, host) = match &self.inner.dial {
            Some(d) => (
                std::borrow::Cow::Owned(format!(
                    "{}{}",
                    d.base,
                    url.strip_prefix(self.inner.base.as_str()).unwrap_or(url)
                )),
                Some(d.host.as_str()),
            ),
            None => (std::borrow::Cow::Borrowed(url), None),
        };
        let target = target.as_ref();
        macro_rules! finish {
            ($rb:expr) => {{
                let mut rb = $rb.header("Accept", accept);
                if let Some(a) = &auth {
                    rb = rb.header("Authorization", a);
                }
                if let Some(h) = host {
                    rb = rb.header("Host", h);
                }
                rb
            }};
        }
        let res = match (method, default_body(method, body)) {
            ("GET", _) => finish!(agent.get(target)).call(),
            ("DELETE", None) => finish!(agent.delete(target)).call(),
            ("DELETE", Some((ct, b))) => finish!(agent.delete(target))
                .force_send_body()
                .content_type(ct)
                .send(b),
            ("POST", Some((ct, b))) => finish!(agent.post(target)).content_type(ct).send(b),
            ("PUT", Some((ct, b))) => finish!(agent.put(target)).content_type(ct).send(b),
            ("PATCH", Some((ct, b))) => finish!(agent.patch(target)).content_type(ct).send(b),
            (m, _) => return Err(Error::Transport(format!("unsupported method {m}"))),
        };
        let status = res.as_ref().ok().map(|r| r.status().as_u16());
        crate::metrics::rest_request_result(&self.inner.base, method, status);
        res.map_err(|e| Error::Transport(format!("{method} {url}: {e}")))
    }

    /// One attempt of a request: the answer's status, Retry-After and body. Over our own
    /// connections (`exchange.rs`), or ureq's behind a proxy.
    fn attempt(
        &self,
        method: &str,
        url: &str,
        path_and_query: &str,
        accept: &str,
        body: Option<(&str, &str)>,
    ) -> Result<(u16, Option<Duration>, Vec<u8>)> {
        let Some(endpoint) = &self.inner.endpoint else {
            let resp = self.send_once(&self.inner.agent, method, url, accept, body)?;
            let status = resp.status().as_u16();
            let retry_after = retry_after(&resp);
            return Ok((status, retry_after, read_body(resp, method, url)?));
        };
        let body = default_body(method, body);
        let authorization = self.authorization()?;
        let req = exchange::Request {
            method,
            path: path_and_query,
            user_agent: &self.inner.user_agent,
            accept,
            authorization: authorization.as_deref(),
            body,
        };
        let res = endpoint.exchange(
            self.inner.connector.0.client_config(),
            &req,
            self.inner.timeout,
        );
        crate::metrics::rest_request_result(
            &self.inner.base,
            method,
            res.as_ref().ok().map(|a| a.status),
        );
        let a = res.map_err(|e| Error::Transport(format!("{method} {url}: {e}")))?;
        Ok((a.status, a.retry_after, a.body))
    }

    /// One API call with the limiter, retries and error decoding. Returns the decoded body.
    pub fn request(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &str)>,
        accept: &str,
    ) -> Result<Value> {
        Ok(parse_body(&self.request_bytes(
            method,
            path_and_query,
            body,
            accept,
        )?))
    }

    /// As `request`, returning the successful answer's bytes undecoded, so a caller can
    /// decode only the fields it needs.
    pub fn request_bytes(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &str)>,
        accept: &str,
    ) -> Result<Vec<u8>> {
        self.request_bytes_limited(method, path_and_query, body, accept, Limit::Normal)
    }

    /// As `request_bytes`, taking the limiter's tokens as `limit` says.
    fn request_bytes_limited(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &str)>,
        accept: &str,
        limit: Limit,
    ) -> Result<Vec<u8>> {
        let started = Instant::now();
        let res = self.request_with_retries(
            method,
            path_and_query,
            body,
            accept,
            MAX_READ_RETRIES,
            limit,
        );
        crate::metrics::rest_request_latency(&self.inner.base, method, started.elapsed());
        res
    }

    fn request_with_retries(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<(&str, &str)>,
        accept: &str,
        max_read_retries: u32,
        limit: Limit,
    ) -> Result<Vec<u8>> {
        let url = format!("{}{}", self.inner.base, path_and_query);
        let idempotent = method == "GET";
        let mut retry_after_tries = 0;
        let mut read_tries = 0;
        let mut refreshed_token = false;
        // The first attempt's token may have been taken by the caller; retries take their own
        // (low-priority requests at low priority again).
        let mut limit = limit;
        loop {
            self.take_limiter(limit);
            if limit == Limit::Passed {
                limit = Limit::Normal;
            }
            // Held until the answer is read, so the fence knows the write is still on the wire.
            let pass = match self.inner.fence.get() {
                Some(f) if !idempotent => Some(f.enter().ok_or(Error::Cancelled)?),
                _ => None,
            };
            let res = self.attempt(method, &url, path_and_query, accept, body);
            let (status, retry_after, bytes) = match res {
                Ok(r) => r,
                Err(e) if idempotent && read_tries < max_read_retries => {
                    read_tries += 1;
                    log::debug!("{e}; retrying");
                    std::thread::sleep(Duration::from_millis(200 << read_tries));
                    continue;
                }
                Err(e) => return Err(e),
            };
            drop(pass);
            if (200..300).contains(&status) {
                return Ok(bytes);
            }
            let mut err = status_error(&parse_body(&bytes), status);
            if let Error::Api {
                code,
                retry_after: ra,
                message,
                ..
            } = &mut err
            {
                *code = status;
                *ra = retry_after;
                if message.is_empty() {
                    *message = format!("{method} {path_and_query}");
                }
            }
            if status == 401 && !refreshed_token && matches!(self.inner.auth, Auth::Source(_)) {
                refreshed_token = true;
                self.invalidate_token();
                continue;
            }
            if let Some(wait) = retry_after {
                if (status == 429 || status >= 500) && retry_after_tries < MAX_RETRY_AFTER {
                    retry_after_tries += 1;
                    std::thread::sleep(wait.min(Duration::from_secs(30)));
                    continue;
                }
            }
            if idempotent && status >= 500 && read_tries < max_read_retries {
                read_tries += 1;
                std::thread::sleep(Duration::from_millis(200 << read_tries));
                continue;
            }
            return Err(err);
        }
    }

    fn json(&self, method: &str, path: &str, body: Option<(&str, &str)>) -> Result<Value> {
        self.json_shaped(method, path, body, None)
    }

    /// A JSON answer decoded without `metadata.managedFields` (nothing here reads it, and an
    /// update that leaves it out keeps the server's), and with `fields` only `apiVersion`,
    /// `kind`, `metadata` and those parts (`api::trim`).
    fn json_shaped(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &str)>,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let bytes = self.request_bytes(method, path, body, "application/json")?;
        match crate::api::trim::from_slice(&bytes, fields) {
            Ok(v) => Ok(v),
            Err(_) => Ok(parse_body(&bytes)),
        }
    }
}

/// Whether ureq would send requests to `base` through a proxy named by the environment
/// (`HTTPS_PROXY` and the others, less `NO_PROXY`), as every agent's configuration asks.
fn proxy_applies(base: &str) -> bool {
    ureq::Proxy::try_from_env().is_some_and(|p| {
        base.parse::<ureq::http::Uri>()
            .map_or(true, |u| !p.is_no_proxy(&u))
    })
}

/// A request body's JSON text, by serde_json's writer rather than `Value`'s `Display`, which
/// goes through the formatting machinery for every piece.
fn json_text(v: &Value) -> String {
    // A `Value` always serialises (its map keys are strings).
    serde_json::to_string(v).unwrap_or_default()
}

/// The body a request is sent with: `body`, or for a POST, PUT or PATCH without one an empty
/// JSON object (a merge patch for PATCH).
fn default_body<'a>(method: &str, body: Option<(&'a str, &'a str)>) -> Option<(&'a str, &'a str)> {
    match (method, body) {
        ("POST" | "PUT", None) => Some(("application/json", "{}")),
        ("PATCH", None) => Some(("application/merge-patch+json", "{}")),
        (_, b) => b,
    }
}

/// The seconds of a `Retry-After` header.
fn retry_after(resp: &ureq::http::Response<ureq::Body>) -> Option<Duration> {
    resp.headers()
        .get("Retry-After")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

fn read_body(resp: ureq::http::Response<ureq::Body>, method: &str, url: &str) -> Result<Vec<u8>> {
    // Sized from Content-Length when the server gives one (up to a bound: the header is not
    // trusted with memory), instead of growing by doubling through the read.
    let expected = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut reader = resp.into_body().into_reader();
    let mut buf = Vec::with_capacity(expected);
    reader
        .read_to_end(&mut buf)
        .map_err(|e| Error::Transport(format!("{method} {url}: reading the answer: {e}")))?;
    Ok(buf)
}

/// An answer's body as JSON: Null when empty, the text itself when it is not JSON.
fn parse_body(buf: &[u8]) -> Value {
    if buf.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    match serde_json::from_slice(buf) {
        Ok(v) => v,
        Err(_) => Value::String(String::from_utf8_lossy(buf).into_owned()),
    }
}

#[cfg(test)]
mod tests;
