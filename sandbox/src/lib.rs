//! The sandbox API server: an in-repo test double of kube-apiserver speaking real HTTP/1.1 on
//! loopback, for edgekcm's integration tests, its demo and its benchmark.
//!
//! It keeps objects in memory as JSON, with one global resourceVersion counter, and serves the
//! REST paths of every kind in [`edgekcm::api::resources::ALL`] (plus kinds defined by
//! CustomResourceDefinitions): get, list (selectors, `limit`/`continue`), watch (history replay,
//! bookmarks, `timeoutSeconds`, 410 on expired versions), create (`generateName`, defaulting),
//! update with resourceVersion preconditions, merge / JSON / strategic-merge patches, delete
//! with preconditions, finalizers and propagation policies, `deletecollection`, and the
//! `status`, `scale`, `finalize`, `approval` and `token` subresources. Faults (outages, paused
//! answers, 429/500/503 answers, dropped watches, compaction) are injected through [`Faults`]
//! and [`Sandbox::stop_listening`].
//!
//! Connections are kept alive (responses carry `Content-Length`; `Connection: close` is
//! honoured); a watch answers with `Transfer-Encoding: chunked`, one JSON event and `\n` per
//! chunk. Every write is handed to the watchers of its kind under the store lock, so a watcher
//! never misses or reorders an event.
//!
//! The sandbox is not part of the product: it is its own crate in the workspace, built on the
//! `edgekcm` library, and edgekcm's tests and examples get it as a dev-dependency. Its
//! [`Kind`] is the library's (re-exported for edgekcm's unit tests, in which the library is a
//! second copy of the crate under test, so they hand it their own kinds field by field).
//!
//! # What the sandbox does not do
//!
//! Where it differs from kube-apiserver (v1.28), a client that works here may still fail there:
//!
//! - **JSON only.** No protobuf, no Table output, no gzip. `Accept:
//!   application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` (and `as=PartialObjectMetadata`)
//!   is honoured for get, list and watch; other `as=` forms are ignored.
//! - **Discovery** is the legacy unaggregated form only (`/api`, `/apis`, `/apis/<g>`,
//!   `/apis/<g>/<v>`); the aggregated `apidiscovery.k8s.io` form is not served. OpenAPI v3
//!   only for `apps/v1` and `v1`, trimmed to a few kinds, and for the custom resources' group
//!   versions (`openapi/`); `/openapi/v2` is 404.
//! - **No validation** beyond: a name (or generateName) is required, names in the body must
//!   match the URL, `expirationSeconds >= 600`, `scale` replicas `>= 0`, no new finalizers on a
//!   deleting object, a known `propagationPolicy`. Names are not checked against DNS rules and
//!   immutable spec fields (selectors, ...) may change.
//! - **Defaulting** covers only the fields controllers rely on (workload replicas and
//!   strategies, pod spec and container basics, Job completions/parallelism/backoffLimit and its
//!   generated selector and labels, CronJob policies, Service type/sessionAffinity/ports and a
//!   fake ClusterIP from 10.96.0.0/16, Secret type, PV/PVC modes and phases, HPA minReplicas). HPA
//!   `behavior` and many other defaults are not applied.
//! - **Admission**: only namespace lifecycle (404 for a missing namespace on create and update,
//!   403 for creates in a terminating namespace - for every kind, Events included, as upstream
//!   v1.28 has no exception for them - and the immortal `default`, `kube-system`,
//!   `kube-public`). No ServiceAccount admission check (pods get `serviceAccountName: default`
//!   even when it does not exist), no quota, no LimitRanger, no priority classes, no RBAC:
//!   every authenticated request is allowed; `deny_access` rules only affect
//!   SubjectAccessReview answers.
//! - **Pods**: graceful deletion as kube-apiserver does it (a pod bound to a node and not
//!   terminal gets `deletionTimestamp` and `deletionGracePeriodSeconds` from `gracePeriodSeconds`
//!   or its `terminationGracePeriodSeconds`, which may only shorten later; unscheduled and
//!   terminal pods go at once), but there is no kubelet: such a pod stays until a delete with
//!   `gracePeriodSeconds: 0` (as on a kube-apiserver without kubelets). Pods with finalizers
//!   wait for them. Other kinds ignore `gracePeriodSeconds`.
//! - **Namespaces** are not emptied by the server (that is the namespace controller's job, as
//!   upstream); `propagationPolicy` on a namespace delete is ignored.
//! - **Reads are always current**: `resourceVersion`/`resourceVersionMatch` on get and list are
//!   ignored (no "too large resource version" 504), except that a list with
//!   `resourceVersion=0` and no `continue` ignores `limit`, as upstream's watch cache does.
//!   Continue tokens are honoured as consistent snapshots while the history still covers them.
//! - **Watch**: a start version newer than the current one is accepted (events simply arrive
//!   later); `sendInitialEvents`/watch-list is not supported; the legacy `/api/v1/watch/...`
//!   paths are not served. Bookmarks are sent every `bookmark_interval` whether or not anything
//!   happened. A watch without `timeoutSeconds` runs until the client, a fault or `Drop` ends it.
//! - **Server-side apply** (`application/apply-patch+yaml`) accepts a JSON body only and is a
//!   merge patch that may create the object, in which the top-level fields the same
//!   `fieldManager` applied before and leaves out now are removed (lists are replaced whole,
//!   as atomic lists are): no managed fields, no conflicts, `force` ignored.
//!   `metadata.managedFields` is never stored.
//! - **CSR conditions** written through `status` or `approval` get `lastUpdateTime` and
//!   `lastTransitionTime` when they have none, as kube-apiserver fills them.
//! - **Strategic merge patch** knows the merge keys by field name (ownerReferences by uid,
//!   conditions by type, containers/volumes/env/... by name, ports, addresses, finalizers as a
//!   merged set) rather than from the Go types; `$setElementOrder` is ignored. CRD kinds answer
//!   415 to it, as upstream.
//! - **`dryRun`** is refused with 400.
//! - **Update of a missing object** is 404 for every kind (no create-on-update).
//! - **Status subresource writes** take the new `status` and `metadata` and keep everything
//!   else; CSR `approval` changes `status.conditions` only.
//! - **Authentication** (`require_auth`): bearer tokens only (the admin token, tokens minted by
//!   the `token` subresource, and tokens found in `kubernetes.io/service-account-token` Secrets);
//!   no client certificates. `/healthz`, `/livez`, `/readyz` and `/version` need no token, but
//!   a token that does not authenticate is answered 401 there too, as kube-apiserver does.
//!   Without `require_auth` nothing is checked: any token (or none) is accepted, and the
//!   recorded user is filled in only for tokens the sandbox knows.
//! - **`metadata.generation`** is set to 1 on create and maintained for every kind (bumped when
//!   anything outside `metadata` and `status` changes, and when a deletionTimestamp is set);
//!   upstream maintains it only for kinds whose strategy does (workloads, CRDs, ...).
//! - **Events** have no TTL; nothing is garbage-collected by the server.
//! - A CustomResourceDefinition is served as soon as it is created (no `Established` condition
//!   is written) and has no schema validation, no `status`/`scale` subresources and no
//!   conversion.

mod defaults;
mod discovery;
mod faults;
mod http;
mod kubelet;
mod meta;
mod metrics;
mod openapi;
mod patch;
mod rest;
mod selector;
mod serve;
mod store;

pub use edgekcm::api::resources::Kind;
pub use faults::Faults;
pub use kubelet::{Kubelet, KubeletOptions};
pub use metrics::Metrics;
pub use store::DeleteOpts;

use edgekcm::obj::At as _;
use serde_json::Value;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use edgekcm::api::resources::SECRETS;
use faults::FaultState;
use serve::{spawn_listener, ListenerCtl};
use store::{PatchType, State, WriteMode};

/// How to start a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How many events are kept for resuming watches and continuing lists.
    pub history_window: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Answer requests without a valid bearer token with 401.
    pub require_auth: bool,
    /// The bearer token of the all-powerful user `admin`.
    pub admin_token: String,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            port: 0,
            history_window: 10_000,
            bookmark_interval: Duration::from_secs(1),
            require_auth: false,
            admin_token: "sandbox-admin".to_string(),
        }
    }
}

/// One request as the sandbox saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub method: String,
    /// Path with the query string, as sent.
    pub path: String,
    pub user_agent: Option<String>,
    /// The bearer token, if any.
    pub token: Option<String>,
    pub content_type: Option<String>,
    /// The HTTP status answered (200 for a watch that started).
    pub status: u16,
    /// The authenticated user (`admin`, `system:serviceaccount:<ns>:<name>`), if known.
    pub user: Option<String>,
    /// When the request had been read, before any pause (the log is in the order of answers).
    pub at: Instant,
}

/// State shared by the listener, the connection threads and the handles.
pub(crate) struct Shared {
    opts: SandboxOptions,
    port: u16,
    state: Mutex<State>,
    faults: Mutex<FaultState>,
    requests: Mutex<Vec<RequestRecord>>,
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
    stopped: AtomicBool,
    metrics: Mutex<metrics::MetricsState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn port(&self) -> u16 {
        self.port
    }

    /// The user a bearer token belongs to, if it is valid now.
    fn authenticate(&self, token: &str) -> Option<String> {
        if token.is_empty() {
            return None;
        }
        if token == self.opts.admin_token {
            return Some("admin".to_string());
        }
        let st = self.lock_state();
        if let Some((user, expiry)) = st.tokens.get(token) {
            return (SystemTime::now() < *expiry).then(|| user.clone());
        }
        use base64::Engine as _;
        for s in st.iter_kind(&SECRETS, None) {
            if s.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token")
            {
                continue;
            }
            let data = s.at("/data/token").and_then(Value::as_str).unwrap_or("");
            let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(data) else {
                continue;
            };
            if !raw.is_empty() && raw == token.as_bytes() {
                let sa = s
                    .at("/metadata/annotations/kubernetes.io~1service-account.name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                return Some(format!(
                    "system:serviceaccount:{}:{sa}",
                    meta::namespace_of(s)
                ));
            }
        }
        None
    }
}

/// A running sandbox API server; dropping it stops it.
pub struct Sandbox {
    shared: Arc<Shared>,
    listener: Mutex<Option<ListenerCtl>>,
}

fn err_string(e: meta::ApiError) -> String {
    e.message
}

impl Sandbox {
    /// The metrics APIs' values (see [`metrics`]).
    pub fn metrics(&self) -> Metrics<'_> {
        Metrics(&self.shared)
    }

    /// Bind 127.0.0.1:`opts.port` and start serving.
    pub fn start(opts: SandboxOptions) -> io::Result<Sandbox> {
        let listener = TcpListener::bind(("127.0.0.1", opts.port))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(opts.history_window)),
            opts,
            port,
            faults: Mutex::new(FaultState::default()),
            requests: Mutex::new(Vec::new()),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            stopped: AtomicBool::new(false),
            metrics: Mutex::default(),
        });
        let ctl = spawn_listener(shared.clone(), listener)?;
        Ok(Sandbox {
            shared,
            listener: Mutex::new(Some(ctl)),
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.shared.port)
    }

    /// A client of this server without QPS limit, for tests (`user_agent` names the caller).
    pub fn client(&self, user_agent: &str) -> edgekcm::api::client::Client {
        let cfg = edgekcm::api::kubeconfig::RestConfig {
            server: self.url(),
            source: "test".into(),
            ..Default::default()
        };
        edgekcm::api::client::Client::new(&cfg, 0.0, 1, user_agent).expect("a sandbox client")
    }

    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// A kubeconfig pointing at this sandbox with the admin token.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n    server: {}\ncontexts:\n- name: sandbox\n  context:\n    cluster: sandbox\n    user: sandbox-admin\ncurrent-context: sandbox\nusers:\n- name: sandbox-admin\n  user:\n    token: {}\npreferences: {{}}\n",
            self.url(),
            self.shared.opts.admin_token
        )
    }

    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// The stored object, if any (`ns` is ignored for cluster-scoped kinds).
    pub fn get(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Option<Value> {
        self.shared
            .lock_state()
            .get(kind, ns.unwrap_or(""), name)
            .map(|o| (*o).clone())
    }

    /// Stored objects of a kind in (namespace, name) order; `ns = None` means all namespaces.
    pub fn list(&self, kind: &Kind, ns: Option<&str>) -> Vec<Value> {
        let ns = if kind.namespaced { ns } else { None };
        self.shared
            .lock_state()
            .iter_kind(kind, ns)
            .map(|o| (**o).clone())
            .collect()
    }

    /// Create as POST would (the namespace comes from `metadata.namespace`, "default" when
    /// unset). The error is the `Status` message.
    pub fn create(&self, kind: &Kind, obj: Value) -> Result<Value, String> {
        self.shared
            .lock_state()
            .create(kind, None, obj)
            .map(|o| (*o).clone())
            .map_err(err_string)
    }

    /// Replace as PUT would (name and namespace from the object's metadata).
    pub fn update(&self, kind: &Kind, obj: Value) -> Result<Value, String> {
        self.write(kind, obj, WriteMode::Main)
    }

    /// Replace the status as PUT on `/status` would.
    pub fn update_status(&self, kind: &Kind, obj: Value) -> Result<Value, String> {
        self.write(kind, obj, WriteMode::Status)
    }

    fn write(&self, kind: &Kind, obj: Value, mode: WriteMode) -> Result<Value, String> {
        let ns = meta::namespace_of(&obj).to_string();
        let name = meta::name_of(&obj).to_string();
        self.shared
            .lock_state()
            .update(kind, &ns, &name, obj, mode)
            .map(|o| (*o).clone())
            .map_err(err_string)
    }

    /// Patch as PATCH would; `content_type` is one of the patch media types.
    pub fn patch(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        content_type: &str,
        patch: Value,
    ) -> Result<Value, String> {
        let pt = PatchType::from_content_type(content_type)
            .ok_or_else(|| format!("unsupported patch type {content_type:?}"))?;
        self.shared
            .lock_state()
            .patch(kind, ns.unwrap_or(""), name, pt, &patch, WriteMode::Main)
            .map(|o| (*o).clone())
            .map_err(err_string)
    }

    /// Delete as DELETE without options would (finalizers and the kind's default propagation
    /// policy apply).
    pub fn delete(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<(), String> {
        self.delete_with(kind, ns, name, &DeleteOpts::default())
    }

    pub fn delete_with(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<(), String> {
        self.shared
            .lock_state()
            .delete(kind, ns.unwrap_or(""), name, opts)
            .map(|_| ())
            .map_err(err_string)
    }

    /// Set a stored object's `creationTimestamp` (RFC 3339), as no client can: for objects
    /// older than a scenario can wait for.
    pub fn backdate(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        created: &str,
    ) -> Result<Value, String> {
        self.shared
            .lock_state()
            .backdate(kind, ns.unwrap_or(""), name, created)
            .map(|o| (*o).clone())
            .map_err(err_string)
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock_state().rv
    }

    /// Make SubjectAccessReviews for `user` ("*" for anyone) deny requests whose REST path
    /// contains `path`.
    pub fn deny_access(&self, user: &str, path: &str) {
        self.shared
            .lock_state()
            .denials
            .push((user.to_string(), path.to_string()));
    }

    /// Make `/version` report this `gitVersion` (`v1.35.0`); it starts as `v1.37.2-sandbox`.
    pub fn set_version(&self, git_version: &str) {
        self.shared.lock_state().server_version = git_version.to_string();
    }

    /// Take back a `deny_access` rule (the same user and path).
    pub fn allow_access(&self, user: &str, path: &str) {
        self.shared
            .lock_state()
            .denials
            .retain(|(u, p)| !(u == user && p == path));
    }

    /// Every request answered so far, oldest first (the log keeps the newest 100,000 to
    /// 200,000 records).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// Simulate an outage: close the listener and every open connection (watches included),
    /// so clients get "connection refused" until [`Sandbox::resume_listening`].
    pub fn stop_listening(&self) {
        let ctl = lock(&self.listener).take();
        if let Some(ctl) = ctl {
            ctl.stop.store(true, Ordering::SeqCst);
            // Wake the accept call; the listener closes when its thread ends.
            let _ = TcpStream::connect_timeout(
                &SocketAddr::from(([127, 0, 0, 1], self.shared.port)),
                Duration::from_secs(1),
            );
            let _ = ctl.handle.join();
        }
        self.shared.lock_state().drop_watchers();
        self.shared.shutdown_connections();
    }

    /// Listen again on the same port after [`Sandbox::stop_listening`]; a failure to bind is
    /// logged (see [`Sandbox::try_resume_listening`]).
    pub fn resume_listening(&self) {
        if let Err(e) = self.try_resume_listening() {
            log::error!(
                "sandbox: cannot listen again on port {}: {e}",
                self.shared.port
            );
        }
    }

    /// Listen again on the same port after [`Sandbox::stop_listening`].
    pub fn try_resume_listening(&self) -> io::Result<()> {
        let mut guard = lock(&self.listener);
        if guard.is_some() {
            return Ok(());
        }
        let mut last = None;
        for _ in 0..50 {
            match TcpListener::bind(("127.0.0.1", self.shared.port)) {
                Ok(l) => {
                    *guard = Some(spawn_listener(self.shared.clone(), l)?);
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("cannot listen again")))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop_listening();
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.shutdown_connections();
    }
}
