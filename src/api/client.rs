//! The API client: ureq over rustls (ring), JSON, a client-side QPS/burst limiter, retries for
//! 429/5xx, and watches that can be cancelled from another thread.

use crate::api::fence::WriteFence;
use crate::api::kubeconfig::RestConfig;
use crate::api::resources::Kind;
use crate::api::watch::{status_error, EventReader};
use crate::error::{Error, Result};
use crate::queue::TokenBucket;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    /// Ask for `PartialObjectMetadataList` (metadata only).
    pub metadata_only: bool,
    /// Decode items trimmed to what the cache keeps (`list_all`/`list` only).
    pub shape: Option<super::trim::Shape>,
    /// The caller retries with its own backoff (a reflector): a transport error or 5xx is
    /// returned at once instead of being retried here.
    pub caller_retries: bool,
}

#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: String,
    pub timeout_seconds: u64,
    pub allow_bookmarks: bool,
    pub metadata_only: bool,
    /// Decode objects trimmed to what the cache keeps.
    pub shape: Option<super::trim::Shape>,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation_policy: Option<&'static str>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

impl DeleteOptions {
    fn body(&self) -> Option<String> {
        let mut m = serde_json::Map::new();
        if let Some(p) = self.propagation_policy {
            m.insert("propagationPolicy".into(), p.into());
        }
        if let Some(g) = self.grace_period_seconds {
            m.insert("gracePeriodSeconds".into(), g.into());
        }
        let mut pre = serde_json::Map::new();
        if let Some(u) = &self.precondition_uid {
            pre.insert("uid".into(), u.clone().into());
        }
        if let Some(rv) = &self.precondition_resource_version {
            pre.insert("resourceVersion".into(), rv.clone().into());
        }
        if !pre.is_empty() {
            m.insert("preconditions".into(), Value::Object(pre));
        }
        if m.is_empty() {
            return None;
        }
        m.insert("kind".into(), "DeleteOptions".into());
        m.insert("apiVersion".into(), "v1".into());
        Some(json_text(&Value::Object(m)))
    }
}

#[derive(Debug, Clone, Default)]
pub struct ObjectList<T = Value> {
    pub items: Vec<T>,
    pub resource_version: String,
    pub continue_token: Option<String>,
}

/// A list answer as it arrives; only what `ObjectList` keeps is decoded.
#[derive(serde::Deserialize)]
struct ListDoc<T> {
    #[serde(default)]
    metadata: ListMetaDoc,
    #[serde(default = "Option::default")]
    items: Option<Vec<T>>,
}

#[derive(serde::Deserialize, Default)]
struct ListMetaDoc {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

const METADATA_LIST_ACCEPT: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const METADATA_ACCEPT: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
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
        let inner = Inner {
            base: c.inner.base.clone(),
            dial: c.inner.dial.clone(),
            agent: c.inner.agent.clone(),
            connector: c.inner.connector.clone(),
            auth: Auth::Source(source),
            limiter: Mutex::new(TokenBucket::new(f64::from(qps), burst.max(1))),
            user_agent: user_agent.to_string(),
            fence: OnceLock::new(),
        };
        Ok(Client {
            inner: Arc::new(inner),
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
        let wait = self
            .inner
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve_at(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
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
        let res = match (method, body) {
            ("GET", _) => finish!(agent.get(target)).call(),
            ("DELETE", None) => finish!(agent.delete(target)).call(),
            ("DELETE", Some((ct, b))) => finish!(agent.delete(target))
                .force_send_body()
                .content_type(ct)
                .send(b),
            ("POST", b) => {
                let (ct, b) = b.unwrap_or(("application/json", "{}"));
                finish!(agent.post(target)).content_type(ct).send(b)
            }
            ("PUT", b) => {
                let (ct, b) = b.unwrap_or(("application/json", "{}"));
                finish!(agent.put(target)).content_type(ct).send(b)
            }
            ("PATCH", b) => {
                let (ct, b) = b.unwrap_or(("application/merge-patch+json", "{}"));
                finish!(agent.patch(target)).content_type(ct).send(b)
            }
            (m, _) => return Err(Error::Transport(format!("unsupported method {m}"))),
        };
        let status = res.as_ref().ok().map(|r| r.status().as_u16());
        crate::metrics::rest_request_result(&self.inner.base, method, status);
        res.map_err(|e| Error::Transport(format!("{method} {url}: {e}")))
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
        let started = Instant::now();
        let res = self.request_with_retries(method, path_and_query, body, accept, MAX_READ_RETRIES);
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
    ) -> Result<Vec<u8>> {
        let url = format!("{}{}", self.inner.base, path_and_query);
        let idempotent = method == "GET";
        let mut retry_after_tries = 0;
        let mut read_tries = 0;
        let mut refreshed_token = false;
        loop {
            self.wait_for_limiter();
            // Held until the answer is read, so the fence knows the write is still on the wire.
            let pass = match self.inner.fence.get() {
                Some(f) if !idempotent => Some(f.enter().ok_or(Error::Cancelled)?),
                _ => None,
            };
            let res = self.send_once(&self.inner.agent, method, &url, accept, body);
            let resp = match res {
                Ok(r) => r,
                Err(e) if idempotent && read_tries < max_read_retries => {
                    read_tries += 1;
                    log::debug!("{e}; retrying");
                    std::thread::sleep(Duration::from_millis(200 << read_tries));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let status = resp.status().as_u16();
            let retry_after = retry_after(&resp);
            let bytes = read_body(resp, method, &url)?;
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

    pub fn get(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<Value> {
        self.json("GET", &kind.object_path(ns, name), None)
    }

    pub fn get_metadata(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<Value> {
        self.request("GET", &kind.object_path(ns, name), None, METADATA_ACCEPT)
    }

    /// One page (or the whole list when no limit is given).
    pub fn list(&self, kind: &Kind, ns: Option<&str>, opts: &ListOptions) -> Result<ObjectList> {
        let Some(shape) = &opts.shape else {
            return self.list_as(kind, ns, opts);
        };
        let raw: ObjectList<Box<serde_json::value::RawValue>> = self.list_as(kind, ns, opts)?;
        let mut items = Vec::with_capacity(raw.items.len());
        for r in raw.items {
            match super::trim::from_slice(r.get().as_bytes(), shape.trim().fields) {
                Ok(v) => items.push(v),
                Err(e) => log::warn!("list {kind}: skipping an item that does not decode: {e}"),
            }
        }
        Ok(ObjectList {
            items,
            resource_version: raw.resource_version,
            continue_token: raw.continue_token,
        })
    }

    /// As `list`, decoding each item as `T`: a caller that needs a few fields of many
    /// objects never holds them whole.
    pub fn list_as<T: serde::de::DeserializeOwned>(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList<T>> {
        let mut q = Query::default();
        q.opt("labelSelector", opts.label_selector.as_deref());
        q.opt("fieldSelector", opts.field_selector.as_deref());
        q.opt("limit", opts.limit.map(|l| l.to_string()).as_deref());
        q.opt("continue", opts.continue_token.as_deref());
        q.opt("resourceVersion", opts.resource_version.as_deref());
        let path = format!("{}{}", kind.collection_path(ns), q.finish());
        let accept = if opts.metadata_only {
            METADATA_LIST_ACCEPT
        } else {
            "application/json"
        };
        let started = Instant::now();
        let retries = if opts.caller_retries {
            0
        } else {
            MAX_READ_RETRIES
        };
        let res = self.request_with_retries("GET", &path, None, accept, retries);
        crate::metrics::rest_request_latency(&self.inner.base, "GET", started.elapsed());
        let bytes = res?;
        let doc: ListDoc<T> = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Transport(format!("GET {path}: the answer is not a list: {e}")))?;
        let nonempty = |s: String| (!s.is_empty()).then_some(s);
        Ok(ObjectList {
            items: doc.items.unwrap_or_default(),
            resource_version: doc.metadata.resource_version.unwrap_or_default(),
            continue_token: doc.metadata.continue_token.and_then(nonempty),
        })
    }

    /// List every page (client-go pager semantics: pages of `limit`, and on an expired
    /// continue token one un-paginated list instead).
    pub fn list_all(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList> {
        let mut first = opts.clone();
        first.continue_token = None;
        let mut page = self.list(kind, ns, &first)?;
        let mut all = std::mem::take(&mut page.items);
        let rv = page.resource_version.clone();
        let mut next = page.continue_token.take();
        while let Some(token) = next {
            let o = ListOptions {
                continue_token: Some(token),
                resource_version: None,
                ..opts.clone()
            };
            match self.list(kind, ns, &o) {
                Ok(mut p) => {
                    all.append(&mut p.items);
                    next = p.continue_token;
                }
                Err(e) if e.is_gone() => {
                    let full = ListOptions {
                        limit: None,
                        continue_token: None,
                        ..opts.clone()
                    };
                    return self.list(kind, ns, &full);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(ObjectList {
            items: all,
            resource_version: rv,
            continue_token: None,
        })
    }

    /// Open a watch. The returned stream blocks in `next()`; `WatchStream::canceller` gives a
    /// handle that ends the read from another thread.
    pub fn watch(&self, kind: &Kind, ns: Option<&str>, opts: &WatchOptions) -> Result<WatchStream> {
        let mut q = Query::default();
        q.push("watch", "true");
        q.opt("labelSelector", opts.label_selector.as_deref());
        q.opt("fieldSelector", opts.field_selector.as_deref());
        q.opt(
            "resourceVersion",
            Some(opts.resource_version.as_str()).filter(|s| !s.is_empty()),
        );
        if opts.allow_bookmarks {
            q.push("allowWatchBookmarks", "true");
        }
        if opts.timeout_seconds > 0 {
            q.push("timeoutSeconds", &opts.timeout_seconds.to_string());
        }
        let path = format!("{}{}", kind.collection_path(ns), q.finish());
        let url = format!("{}{}", self.inner.base, path);
        // Reads may be idle up to timeoutSeconds (bookmarks come about once a minute on a real
        // server); a little more than that detects a half-open connection.
        let per_read = Duration::from_secs(opts.timeout_seconds.max(60) + 30);
        let agent = new_agent(
            agent_config(&self.inner.user_agent, Some(per_read), REQUEST_TIMEOUT),
            &self.inner.connector,
        );
        let accept = if opts.metadata_only {
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
        } else {
            "application/json"
        };
        let mut refreshed = false;
        loop {
            self.wait_for_limiter();
            let resp = self.send_once(&agent, "GET", &url, accept, None)?;
            let status = resp.status().as_u16();
            if status == 200 {
                let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
                let label = format!("{kind}");
                return Ok(WatchStream {
                    events: {
                        let mut r =
                            EventReader::new(BufReader::with_capacity(8 * 1024, reader), label);
                        r.shape = opts.shape.clone();
                        r
                    },
                    canceller: WatchCanceller {
                        agent: Arc::new(Mutex::new(Some(agent))),
                    },
                });
            }
            let retry_after = retry_after(&resp);
            let v = read_body(resp, "GET", &url)
                .map(|b| parse_body(&b))
                .unwrap_or(Value::Null);
            if status == 401 && !refreshed && matches!(self.inner.auth, Auth::Source(_)) {
                refreshed = true;
                self.invalidate_token();
                continue;
            }
            let mut err = status_error(&v, status);
            if let Error::Api {
                code,
                retry_after: ra,
                ..
            } = &mut err
            {
                *code = status;
                *ra = retry_after;
            }
            return Err(err);
        }
    }

    pub fn create(&self, kind: &Kind, ns: Option<&str>, obj: &Value) -> Result<Value> {
        self.create_shaped(kind, ns, obj, None)
    }

    /// As `create`, the answer decoded to `fields` (see `json_shaped`).
    pub fn create_shaped(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        obj: &Value,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let body = json_text(obj);
        self.json_shaped(
            "POST",
            &kind.collection_path(ns),
            Some(("application/json", &body)),
            fields,
        )
    }

    /// As `create`, for a writer that does not read the answer (Events): the created object
    /// is read off the connection but not decoded.
    pub fn create_unanswered(&self, kind: &Kind, ns: Option<&str>, obj: &Value) -> Result<()> {
        self.write_unanswered("POST", &kind.collection_path(ns), "application/json", obj)
    }

    /// Send `body` and read the answer off the connection without decoding it.
    fn write_unanswered(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> Result<()> {
        let body = json_text(body);
        self.request_bytes(
            method,
            path,
            Some((content_type, &body)),
            "application/json",
        )
        .map(|_| ())
    }

    /// PUT the whole object (optimistic concurrency through its resourceVersion).
    pub fn update(&self, kind: &Kind, obj: &Value) -> Result<Value> {
        self.update_shaped(kind, obj, None, None)
    }

    /// PUT the object, or its `subresource`; the answer decoded to `fields`.
    pub fn update_shaped(
        &self,
        kind: &Kind,
        obj: &Value,
        subresource: Option<&str>,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let ns = Some(crate::obj::namespace(obj)).filter(|s| !s.is_empty());
        let body = json_text(obj);
        let mut path = kind.object_path(ns, crate::obj::name(obj));
        if let Some(sub) = subresource {
            path.push('/');
            path.push_str(sub);
        }
        self.json_shaped("PUT", &path, Some(("application/json", &body)), fields)
    }

    /// PUT `<object>/<subresource>` (status, finalize, approval, scale).
    pub fn update_subresource(&self, kind: &Kind, obj: &Value, subresource: &str) -> Result<Value> {
        self.update_shaped(kind, obj, Some(subresource), None)
    }

    pub fn update_status(&self, kind: &Kind, obj: &Value) -> Result<Value> {
        self.update_subresource(kind, obj, "status")
    }

    pub fn patch(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value> {
        self.patch_shaped(kind, ns, name, pt, patch, subresource, None)
    }

    /// As `patch`, the answer decoded to `fields`.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shaped(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
        subresource: Option<&str>,
        fields: Option<&[&str]>,
    ) -> Result<Value> {
        let path = patch_path(kind, ns, name, pt, subresource);
        let body = json_text(patch);
        self.json_shaped("PATCH", &path, Some((pt.content_type(), &body)), fields)
    }

    /// As `patch`, for a writer that does not read the answer (see `create_unanswered`).
    pub fn patch_unanswered(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        patch: &Value,
    ) -> Result<()> {
        let path = patch_path(kind, ns, name, pt, None);
        self.write_unanswered("PATCH", &path, pt.content_type(), patch)
    }

    pub fn delete(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<()> {
        let body = opts.body();
        let b = body.as_deref().map(|b| ("application/json", b));
        // The answer (the object, or a Status) is not needed: not decoded either.
        self.request_bytes("DELETE", &kind.object_path(ns, name), b, "application/json")
            .map(|_| ())
    }

    /// POST to a subresource (`serviceaccounts/<n>/token`, ...).
    pub fn create_subresource(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value> {
        let path = format!("{}/{}", kind.object_path(ns, name), subresource);
        let b = json_text(body);
        self.json("POST", &path, Some(("application/json", &b)))
    }

    /// GET an arbitrary path (discovery, /healthz).
    pub fn get_path(&self, path: &str) -> Result<Value> {
        self.json("GET", path, None)
    }

    /// GET a path whose answer is not JSON (`/healthz` answers `ok`): Ok when 2xx.
    pub fn get_raw(&self, path: &str) -> Result<String> {
        let url = format!("{}{}", self.inner.base, path);
        let resp = self.send_once(&self.inner.agent, "GET", &url, "*/*", None)?;
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .read_to_string()
            .map_err(|e| Error::Transport(format!("GET {url}: {e}")))?;
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            Err(Error::api(status, "", text))
        }
    }
}

/// Where a patch goes: the object or its subresource, and for a server-side apply our field
/// manager, forcing conflicts as a controller does.
fn patch_path(
    kind: &Kind,
    ns: Option<&str>,
    name: &str,
    pt: PatchType,
    subresource: Option<&str>,
) -> String {
    let mut path = kind.object_path(ns, name);
    if let Some(s) = subresource {
        path.push('/');
        path.push_str(s);
    }
    if pt == PatchType::Apply {
        path.push_str("?fieldManager=edgekcm&force=true");
    }
    path
}

/// An agent with our resolver and `connector`.
fn new_agent(config: ureq::config::Config, connector: &SharedConnector) -> ureq::Agent {
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
struct SharedConnector(Arc<super::tls::Connector>);

impl SharedConnector {
    fn for_identity(cfg: &RestConfig) -> SharedConnector {
        type Shared = HashMap<[u8; 32], std::sync::Weak<super::tls::Connector>>;
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
        let c = Arc::new(super::tls::Connector::default());
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
struct Dial {
    /// `https://<tls-server-name>:<port>`.
    base: String,
    /// The server's own `host[:port]`, for the Host header.
    host: String,
}

impl Dial {
    /// None when the name is the server's host already.
    fn new(base: &str, name: &str) -> std::result::Result<Option<Dial>, String> {
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
        Ok(Some(Dial {
            base: dial_base,
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
struct Resolver;

type Resolved = ureq::unversioned::resolver::ResolvedSocketAddrs;

fn resolved_cache() -> &'static Mutex<HashMap<String, (Instant, Resolved)>> {
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
fn agent_config(
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

/// A request body's JSON text, by serde_json's writer rather than `Value`'s `Display`, which
/// goes through the formatting machinery for every piece.
fn json_text(v: &Value) -> String {
    // A `Value` always serialises (its map keys are strings).
    serde_json::to_string(v).unwrap_or_default()
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

/// Ends a watch's blocking read from another thread.
#[derive(Clone)]
pub struct WatchCanceller {
    agent: Arc<Mutex<Option<ureq::Agent>>>,
}

impl WatchCanceller {
    pub fn cancel(&self) {
        if let Some(a) = self.agent.lock().unwrap_or_else(|p| p.into_inner()).take() {
            a.shutdown();
        }
    }
}

pub struct WatchStream {
    pub events: EventReader<BufReader<Box<dyn Read + Send>>>,
    canceller: WatchCanceller,
}

impl WatchStream {
    pub fn canceller(&self) -> WatchCanceller {
        self.canceller.clone()
    }
}

/// A query string builder with percent-encoding.
#[derive(Default)]
struct Query(String);

impl Query {
    fn push(&mut self, k: &str, v: &str) {
        self.0.push(if self.0.is_empty() { '?' } else { '&' });
        self.0.push_str(k);
        self.0.push('=');
        self.0.push_str(&percent_encode(v));
    }
    fn opt(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.push(k, v);
        }
    }
    fn finish(self) -> String {
        self.0
    }
}

pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_without_lookup_and_names_are_reused() {
        use ureq::unversioned::resolver::Resolver as _;
        let cfg = ureq::config::Config::default();
        let resolve = |u: &str| {
            let uri: ureq::http::Uri = u.parse().unwrap();
            let t = ureq::unversioned::transport::NextTimeout {
                after: ureq::unversioned::transport::time::Duration::from_secs(5),
                reason: ureq::Timeout::Resolve,
                ..Default::default()
            };
            Resolver.resolve(&uri, &cfg, t).map(|a| a.to_vec())
        };
        assert_eq!(
            resolve("https://127.0.0.1:6443/api").unwrap(),
            vec!["127.0.0.1:6443".parse().unwrap()]
        );
        assert_eq!(
            resolve("https://[::1]/api").unwrap(),
            vec!["[::1]:443".parse().unwrap()]
        );
        let first = resolve("http://localhost:8080/").unwrap();
        assert!(!first.is_empty());
        assert!(resolved_cache()
            .lock()
            .unwrap()
            .contains_key("http://localhost:8080"));
        assert_eq!(resolve("http://localhost:8080/").unwrap(), first);
    }

    #[test]
    fn agents_with_the_same_tls_settings_share_one_connector() {
        let cfg = |ca: &str, key: Option<&str>| RestConfig {
            server: "https://127.0.0.1:1".into(),
            ca_pem: Some(ca.as_bytes().to_vec()),
            client_cert_pem: key.map(|_| b"cert".to_vec()),
            client_key_pem: key.map(|k| k.as_bytes().to_vec()),
            ..RestConfig::default()
        };
        let same = |a: &SharedConnector, b: &SharedConnector| Arc::ptr_eq(&a.0, &b.0);
        let a = SharedConnector::for_identity(&cfg("ca-1", Some("key-1")));
        let tokens = SharedConnector::for_identity(&cfg("ca-1", None));
        assert!(same(
            &a,
            &SharedConnector::for_identity(&cfg("ca-1", Some("key-1")))
        ));
        assert!(same(
            &tokens,
            &SharedConnector::for_identity(&cfg("ca-1", None))
        ));
        // Another client key, another CA or no certificate: never the same TLS configuration.
        assert!(!same(&a, &tokens));
        assert!(!same(
            &a,
            &SharedConnector::for_identity(&cfg("ca-1", Some("key-2")))
        ));
        assert!(!same(
            &a,
            &SharedConnector::for_identity(&cfg("ca-2", Some("key-1")))
        ));
        let mut insecure = cfg("ca-1", Some("key-1"));
        insecure.insecure_skip_tls_verify = true;
        assert!(!same(&a, &SharedConnector::for_identity(&insecure)));
        // Once nobody holds it, a connector is not kept.
        let weak = Arc::downgrade(&a.0);
        drop(a);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn query_encoding() {
        let mut q = Query::default();
        q.push("labelSelector", "app in (a,b),x!=y");
        q.opt("limit", Some("500"));
        q.opt("continue", None);
        assert_eq!(
            q.finish(),
            "?labelSelector=app%20in%20%28a%2Cb%29%2Cx%21%3Dy&limit=500"
        );
    }

    #[test]
    fn delete_options_body() {
        assert_eq!(DeleteOptions::default().body(), None);
        let b = DeleteOptions {
            propagation_policy: Some("Foreground"),
            precondition_uid: Some("u".into()),
            ..Default::default()
        }
        .body()
        .unwrap_or_default();
        let v: Value = serde_json::from_str(&b).unwrap_or(Value::Null);
        assert_eq!(v["propagationPolicy"], "Foreground");
        assert_eq!(v["preconditions"]["uid"], "u");
    }

    #[test]
    fn user_agent_shape() {
        let ua = user_agent_base();
        assert!(ua.starts_with("edgekcm/v"));
        assert!(ua.contains("(linux/"));
    }
}
