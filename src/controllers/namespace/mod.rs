//! namespace-controller: empties a terminating namespace, reports how that goes in its
//! conditions, then removes the `kubernetes` finalizer so the apiserver deletes it
//! (upstream's `pkg/controller/namespace`).
//!
//! One pass over a namespace: GET it live; mark it `Terminating`; discover the preferred
//! namespaced resources that can be deleted; pods first (v1.34's ordered deletion: while a
//! pod remains nothing else is deleted, and the conditions are written from that pass alone),
//! then for each other resource, delete the collection (or list and delete one by one) with
//! `propagationPolicy: Background` and list what remains; write the
//! five `NamespaceDeletion*`/`Namespace*Remaining` conditions when they change; finalize when
//! nothing remains.
//!
//! Where it is faster than upstream, with the same outcome:
//! - Upstream waits 5 s after seeing a namespace deleting before it acts (other apiservers and
//!   etcd members catch up meanwhile). Here the content starts going at once, and only a pass
//!   that began after those 5 s may finalize, so whatever was created within them is removed.
//! - While content remains, upstream looks again after `estimate/2 + 1` seconds; here after
//!   100 ms, doubling each pass, never later than upstream would.
//! - Resources are emptied a few at a time in parallel; a resource is listed first (nothing to
//!   delete: nothing more to do), and a collection of several pages is deleted page by page in
//!   parallel (`deletecollection` with `limit` and `continue`), as the apiserver serves one
//!   `deletecollection` request with a single worker.

use super::{RunEnv, SelfDriven};
use crate::api::client::Client;
use crate::api::resources::NAMESPACES;
use crate::api::Kind;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj;
use crate::obj::At as _;
use crate::queue::{Bucket, ItemExponential, MaxOf, WorkQueue};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod conditions;
mod deleter;

pub use conditions::{
    Conditions, Failing, CONDITIONS, CONTENT_FAILURE, CONTENT_REMAINING, DISCOVERY_FAILURE,
    FINALIZERS_REMAINING, GV_PARSING_FAILURE,
};
pub use deleter::{judge_remaining, pod_estimate, Leftover, Remnant};

/// The finalizer this controller owns in `spec.finalizers`.
pub const FINALIZER: &str = "kubernetes";
/// Upstream's work-queue name (the `workqueue_*` metrics' `name` label).
const QUEUE_NAME: &str = "namespace";
/// Upstream waits this long after a namespace event before acting (HA apiservers and etcd
/// members catch up with the deletion meanwhile).
pub const DELETION_GRACE: Duration = Duration::from_secs(5);
/// The estimate used when remaining content waits for finalizers.
pub const FINALIZER_ESTIMATE_SECONDS: i64 = 15;
/// The first quick look again while content remains.
const FIRST_RECHECK: Duration = Duration::from_millis(100);

/// `spec.finalizers` without ours, sorted and de-duplicated (upstream uses a string set).
pub fn finalizers_without_ours(ns: &Value) -> Vec<String> {
    let mut set: Vec<String> = ns
        .at("/spec/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|f| *f != FINALIZER)
        .map(str::to_string)
        .collect();
    crate::sort::sort(&mut set[..]);
    set.dedup();
    set
}

/// How one sync ended when it did not finish the namespace.
#[derive(Debug)]
enum SyncError {
    /// Content remains; upstream's estimate in seconds.
    Remaining(i64),
    /// Empty, but the pass began within the grace period: look again once it is over.
    Early(Duration),
    Failed(String),
}

impl From<Error> for SyncError {
    fn from(e: Error) -> Self {
        SyncError::Failed(e.to_string())
    }
}

fn error_text(e: &Error) -> String {
    match e {
        Error::Api { message, .. } if !message.is_empty() => message.clone(),
        other => other.to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    List,
    DeleteCollection,
}

struct Inner {
    queue: Arc<WorkQueue<String>>,
    /// Operations the server answered 405/404 to (upstream's operationNotSupportedCache).
    not_supported: Mutex<HashSet<(Kind, Op)>>,
    /// Consecutive passes that left content, per namespace.
    rechecks: Mutex<HashMap<String, u32>>,
    /// When each terminating namespace was first seen deleting.
    first_seen: Mutex<HashMap<String, Instant>>,
    workers: usize,
    resync: Duration,
}

/// Its row in the controller table (`--namespace-sync-period` is its resync).
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::drives(NamespaceController::new(
        cx.workers,
        cx.cfg.namespace_controller.namespace_sync_period,
    ))))
}

pub struct NamespaceController {
    inner: Arc<Inner>,
}

impl NamespaceController {
    /// `workers`: `--concurrent-namespace-syncs`; `resync`: `--namespace-sync-period`.
    pub fn new(workers: usize, resync: Duration) -> Self {
        // Upstream's nsControllerRateLimiter: 5 ms .. 60 s per key, 10 qps / burst 100.
        let rl = MaxOf::new(vec![
            Box::new(ItemExponential::new(
                Duration::from_millis(5),
                Duration::from_secs(60),
            )),
            Box::new(Bucket::new(10.0, 100)),
        ]);
        NamespaceController {
            inner: Arc::new(Inner {
                queue: WorkQueue::with_rate_limiter(QUEUE_NAME, Box::new(rl)),
                not_supported: Mutex::new(HashSet::new()),
                rechecks: Mutex::new(HashMap::new()),
                first_seen: Mutex::new(HashMap::new()),
                workers: workers.max(1),
                resync,
            }),
        }
    }
}

impl Inner {
    /// A namespace event: a namespace seen deleting for the first time is looked at now (its
    /// content may go at once; it is finalized only after the grace period), later events
    /// after the grace period, as upstream.
    fn on_event(&self, d: &Delta) {
        let ns = d.object();
        let name = obj::name(ns).to_string();
        if d.kind == DeltaKind::Deleted {
            self.first_seen_lock().remove(&name);
            return;
        }
        if !obj::is_deleting(ns) {
            return;
        }
        let first = {
            let mut seen = self.first_seen_lock();
            match seen.entry(name.clone()) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Instant::now());
                    true
                }
            }
        };
        if first {
            self.queue.add(name);
        } else {
            self.queue.add_after(name, DELETION_GRACE);
        }
    }

    fn first_seen_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.first_seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When the grace period of a terminating namespace ends.
    fn grace_end(&self, name: &str) -> Instant {
        *self
            .first_seen_lock()
            .entry(name.to_string())
            .or_insert_with(Instant::now)
            + DELETION_GRACE
    }
}

/// How long to wait before the `n`th look (from 1) at a namespace whose content remains:
/// 100 ms doubling, never later than upstream's `estimate/2 + 1` seconds, and not past the end
/// of the grace period (`grace_left`), when the first pass that may finalize can begin.
fn recheck_wait(n: u32, estimate: i64, grace_left: Option<Duration>) -> Duration {
    let upstream = Duration::from_secs((estimate / 2 + 1).max(1) as u64);
    let quick = FIRST_RECHECK.saturating_mul(1 << n.saturating_sub(1).min(16));
    let wait = quick.min(upstream);
    grace_left.map_or(wait, |g| wait.min(g))
}

impl SelfDriven for NamespaceController {
    fn register(&self, cache: &Arc<Cache>) {
        let inner = Arc::downgrade(&self.inner);
        cache
            .informer(NAMESPACES)
            .add_handler(Arc::new(move |d: &Delta| {
                if let Some(inner) = inner.upgrade() {
                    inner.on_event(d);
                }
            }));
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        let inner = self.inner.clone();
        let client = env.client.clone();
        env.serve(
            "namespace-controller",
            self.inner.queue.clone(),
            self.inner.workers,
            move |key: &String| inner.work(&client, key),
        );
        // The informer resync: every namespace still deleting is looked at again.
        let (inner, cache) = (Arc::downgrade(&self.inner), Arc::downgrade(&env.cache));
        crate::runtime::timer::every(self.inner.resync, move || {
            let (Some(inner), Some(cache)) = (inner.upgrade(), cache.upgrade()) else {
                return false;
            };
            if inner.queue.shutting_down() {
                return false;
            }
            for ns in cache.store(NAMESPACES).list() {
                if obj::is_deleting(&ns) {
                    inner
                        .queue
                        .add_after(obj::name(&ns).to_string(), DELETION_GRACE);
                }
            }
            true
        });
        Vec::new()
    }

    fn shutdown(&self) {
        self.inner.queue.shut_down();
    }
}

impl Inner {
    /// One namespace key (the worker loop is `crate::runtime::workers`).
    fn work(&self, client: &Client, key: &String) {
        let started = Instant::now();
        match self.sync(client, key) {
            Ok(()) => {
                self.queue.forget(key);
                self.rechecks_reset(key);
            }
            Err(SyncError::Remaining(estimate)) => {
                let n = {
                    let mut r = self.rechecks.lock().unwrap_or_else(|p| p.into_inner());
                    let n = r.entry(key.clone()).or_insert(0);
                    *n += 1;
                    *n
                };
                let grace_left = self
                    .first_seen_lock()
                    .get(key)
                    .map(|t| (*t + DELETION_GRACE).saturating_duration_since(Instant::now()))
                    .filter(|d| !d.is_zero());
                let wait = recheck_wait(n, estimate, grace_left);
                log::debug!(
                    "namespace-controller: content remaining in {key} (estimate {estimate}s); looking again in {wait:?}"
                );
                self.queue.add_after(key.clone(), wait);
            }
            Err(SyncError::Early(wait)) => {
                self.rechecks_reset(key);
                log::debug!(
                    "namespace-controller: {key} is empty; finalizing after the grace period, in {wait:?}"
                );
                self.queue.add_after(key.clone(), wait);
            }
            Err(SyncError::Failed(e)) => {
                self.rechecks_reset(key);
                log::warn!("namespace-controller: deletion of namespace {key} failed: {e}");
                self.queue.add_rate_limited(key.clone());
            }
        }
        log::debug!(
            "namespace-controller: finished syncing namespace {key} in {:?}",
            started.elapsed()
        );
    }

    fn rechecks_reset(&self, key: &str) {
        self.rechecks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Upstream's `namespacedResourcesDeleter.Delete`.
    fn sync(&self, client: &Client, name: &str) -> std::result::Result<(), SyncError> {
        let began = Instant::now();
        let ns = match client.get(&NAMESPACES, None, name) {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => {
                log::info!("namespace-controller: namespace {name} has been deleted");
                self.first_seen_lock().remove(name);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if !obj::is_deleting(&ns) {
            return Ok(());
        }
        let ns = match retry_on_conflict(client, ns, |ns| mark_terminating(client, ns)) {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !obj::is_deleting(&ns) {
            return Ok(());
        }
        if ns
            .at("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            return Ok(());
        }
        let (estimate, errors, ns) = self.delete_all_content(client, ns);
        if !errors.is_empty() {
            return Err(SyncError::Failed(errors.join("; ")));
        }
        if estimate > 0 {
            return Err(SyncError::Remaining(estimate));
        }
        // Only a pass that began after the grace period may finalize: whatever was created
        // meanwhile (another apiserver not yet aware of the deletion) was seen by it.
        let grace_end = self.grace_end(name);
        if began < grace_end {
            return Err(SyncError::Early(
                grace_end.saturating_duration_since(Instant::now()),
            ));
        }
        match retry_on_conflict(client, ns, |ns| finalize(client, ns)) {
            Ok(_) => {
                log::info!("namespace-controller: finalized namespace {name}");
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Run `f` on the namespace, re-reading it after a conflict; a namespace whose UID changed
/// meanwhile is an error.
fn retry_on_conflict(
    client: &Client,
    ns: Value,
    f: impl Fn(&Value) -> Result<Value>,
) -> Result<Value> {
    let mut latest = ns;
    loop {
        match f(&latest) {
            Ok(v) => return Ok(v),
            Err(e) if e.is_conflict() => {
                let fresh = client.get(&NAMESPACES, None, obj::name(&latest))?;
                if obj::uid(&fresh) != obj::uid(&latest) {
                    return Err(Error::api(
                        409,
                        "Conflict",
                        "namespace uid has changed across retries",
                    ));
                }
                latest = fresh;
            }
            Err(e) => return Err(e),
        }
    }
}

fn mark_terminating(client: &Client, ns: &Value) -> Result<Value> {
    if !obj::is_deleting(ns)
        || ns.at("/status/phase").and_then(Value::as_str) == Some("Terminating")
    {
        return Ok(ns.clone());
    }
    let mut n = ns.clone();
    if !n.get("status").is_some_and(Value::is_object) {
        n["status"] = json!({});
    }
    n["status"]["phase"] = json!("Terminating");
    client.update_status(&NAMESPACES, &n)
}

fn finalize(client: &Client, ns: &Value) -> Result<Value> {
    let mut n = ns.clone();
    if !n.get("spec").is_some_and(Value::is_object) {
        n["spec"] = json!({});
    }
    n["spec"]["finalizers"] = json!(finalizers_without_ours(ns));
    match client.update_subresource(&NAMESPACES, &n, "finalize") {
        Err(e) if e.is_not_found() => Ok(n),
        other => other,
    }
}

#[cfg(test)]
mod tests;
