//! garbage-collector-controller: deletes objects whose owners are gone, and carries out
//! foreground and orphan deletion (upstream's `pkg/controller/garbagecollector`).
//!
//! - Every 30 s, discovery lists the resources that support list, watch and delete (core and
//!   events.k8s.io Events aside); each gets a metadata-only informer ("monitor"), added while
//!   running and stopped when its resource is no longer served. A change of that set pauses
//!   the workers until the new monitors synced, as upstream does.
//! - Informer events update the owner graph (`graph.rs`) under one lock and queue UIDs to look
//!   at: "attempt to delete" (owners maybe gone, foreground deletion progressing) and "attempt
//!   to orphan" (an owner deleting with the `orphan` finalizer).
//! - Workers read the object and its owners live (never from the cache), decide
//!   (`decide.rs`) and delete with a UID precondition, patch references away (strategic merge,
//!   JSON merge patch on 415), or remove the `foregroundDeletion`/`orphan` finalizer.
//!
//! - The owner graph is served in DOT at `/debug/controllers/garbage-collector-controller/graph`
//!   (`dump.rs`, read through a [`DebugHandle`]), behind the secure port's authentication and
//!   authorization like every other path, as upstream serves it.
//! - `garbagecollector_controller_resources_sync_error_total` counts discoveries that found
//!   nothing to monitor and monitor syncs that timed out, as upstream counts them.
//!
//! Upstream runs `--concurrent-gc-syncs` workers for each of its two queues; here one queue
//! holds both kinds of work and `--concurrent-gc-syncs` workers serve it. A UID that is no
//! longer in the graph when its turn comes is dropped without a request (its deletion was
//! observed). A reference to a kind discovery does not know yet brings the next discovery
//! forward (at most every 5 s) instead of waiting for the 30 s period.

pub mod decide;
pub mod dump;
pub mod graph;

use super::{Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, RunEnv, SelfDriven, Watch};
use crate::api::client::{Client, DeleteOptions, PatchType};
use crate::api::discovery::{Discovery, Verbs};
use crate::api::resources::NAMESPACES;
use crate::api::Kind;
use crate::cache::{Cache, Delta, DeltaKind, Informer};
use crate::error::{Error, Result};
use crate::events::Recorder;
use crate::obj::{self, OwnerRef};
use crate::queue::WorkQueue;
use decide::{Decision, OwnerState};
use graph::{Change, Effects, Graph, Identity, Seen, FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const NAME: &str = "garbage-collector-controller";
/// The Event source component.
pub const COMPONENT: &str = "garbage-collector-controller";
/// The one work queue's metric name: upstream's delete queue, which most items are (orphan
/// items, upstream's second queue, are counted here too).
const QUEUE_NAME: &str = "garbage_collector_attempt_to_delete";
/// How often discovery runs.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(30);
/// Entries of the absent-owner cache.
const ABSENT_CACHE_SIZE: usize = 500;
/// The earliest a re-discovery may be brought forward after the previous one.
const EARLY_DISCOVERY: Duration = Duration::from_secs(5);
/// Dependents orphaned at the same time.
const PARALLEL_ORPHANING: usize = 8;

/// `garbagecollector_controller_resources_sync_error_total`: discoveries that found nothing to
/// monitor and monitor syncs that timed out (one process-wide counter, as upstream's).
static RESOURCES_SYNC_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Count one resources sync error.
fn resources_sync_error() {
    RESOURCES_SYNC_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// The garbage collector's own metric families, registered when it starts (upstream registers
/// them when the controller is created, after the election is won).
pub fn metric_families() -> Vec<crate::metrics::Family> {
    let mut f = crate::metrics::Family::alpha(
        "garbagecollector_controller_resources_sync_error_total",
        "Number of garbage collector resources sync errors",
        crate::metrics::MetricType::Counter,
    );
    f.push(&[], RESOURCES_SYNC_ERRORS.load(Ordering::Relaxed) as f64);
    vec![f]
}

/// Reads the owner graph of a garbage collector for the debug endpoint
/// ([`dump::GRAPH_PATH`]). Made before the collector (the secure port starts first) and
/// filled by [`GarbageCollector::with_debug_handle`]; answers 404 until the collector runs,
/// as upstream mounts the handler only once the controller started.
#[derive(Clone, Default)]
pub struct DebugHandle {
    gc: Arc<OnceLock<Weak<Inner>>>,
}

impl DebugHandle {
    pub fn new() -> Self {
        DebugHandle::default()
    }

    /// Whether a collector runs (its handler is mounted, upstream would say).
    fn running(&self) -> bool {
        let inner = self.gc.get().and_then(Weak::upgrade);
        inner.is_some_and(|i| i.env.get().is_some())
    }

    /// The DOT dump (all of the graph, or what is reachable from `uids`); None while no
    /// collector runs. The graph is only read-locked while the vertices are copied out.
    pub fn dot(&self, uids: Option<&[String]>) -> Option<String> {
        let inner = self.gc.get()?.upgrade()?;
        inner.env.get()?;
        let (vertices, edges) = {
            let g = inner.graph.read().unwrap_or_else(|p| p.into_inner());
            dump::vertices_and_edges(&g, uids)
        };
        Some(dump::render(&vertices, &edges))
    }

    /// The handler for [`dump::BASE_PATH`] and everything under it: [`dump::GRAPH_PATH`]
    /// answers the dump (`?uid=`, repeatable, selects a subgraph); once the collector runs,
    /// any other path is a 404 with an empty message, as upstream's handler answers.
    pub fn handler(&self) -> crate::server::Handler {
        let h = self.clone();
        Arc::new(move |req: &crate::server::Request| {
            if req.path != dump::GRAPH_PATH {
                return if h.running() {
                    crate::server::Response::error(404, "")
                } else {
                    crate::server::Response::not_found()
                };
            }
            let uids = req.query_values("uid");
            let selection = (!uids.is_empty()).then_some(uids.as_slice());
            match h.dot(selection) {
                Some(body) => crate::server::Response {
                    status: 200,
                    content_type: dump::CONTENT_TYPE.to_string(),
                    body: body.into_bytes(),
                    headers: Vec::new(),
                }
                .with_nosniff(),
                None => crate::server::Response::not_found(),
            }
        })
    }
}

/// Resources never monitored (upstream's DefaultIgnoredResources).
pub fn ignored(k: &Kind) -> bool {
    k.plural == "events" && (k.group.is_empty() || k.group == "events.k8s.io")
}

/// The resources to monitor from a discovery.
pub fn monitored(d: &Discovery) -> BTreeSet<Kind> {
    d.preferred_with(Verbs::LIST | Verbs::WATCH | Verbs::DELETE)
        .into_iter()
        .map(|r| r.kind)
        .filter(|k| !ignored(k))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Item {
    Delete(String),
    Orphan(String),
}

enum Next {
    Forget,
    Requeue,
}

/// Why an attempt ended without a decision.
#[derive(Debug)]
enum Stop {
    /// The object is gone; a virtual delete was processed.
    VirtualDeleted,
    /// The object to write to was not found (it will be looked at again).
    NotFound,
    /// A cluster-scoped object refers to a namespaced owner: retrying will not help.
    ClusterScopedRefersNamespaced,
    /// The kind is not (yet) known to discovery.
    Mapping(String),
    Failed(String),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e.to_string())
    }
}

/// A small LRU set of identities known to be absent.
#[derive(Default)]
struct AbsentCache {
    tick: u64,
    entries: HashMap<Identity, u64>,
}

impl AbsentCache {
    fn add(&mut self, id: Identity) {
        self.tick += 1;
        self.entries.insert(id, self.tick);
        if self.entries.len() > ABSENT_CACHE_SIZE {
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
    }
    fn has(&mut self, id: &Identity) -> bool {
        self.tick += 1;
        match self.entries.get_mut(id) {
            Some(t) => {
                *t = self.tick;
                true
            }
            None => false,
        }
    }
}

struct Monitor {
    informer: Arc<Informer>,
    active: Arc<AtomicBool>,
    /// Created for the garbage collector (stopped with it), not shared with another reader.
    owned: bool,
}

struct Env {
    cache: Arc<Cache>,
    client: Client,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
}

struct Inner {
    workers: usize,
    graph: RwLock<Graph>,
    queue: Arc<WorkQueue<Item>>,
    absent: Mutex<AbsentCache>,
    discovery: RwLock<Arc<Discovery>>,
    monitors: Mutex<HashMap<Kind, Monitor>>,
    /// Workers hold it shared while working; a monitor resync holds it alone.
    gate: RwLock<()>,
    /// Workers wait for the first sync.
    ready: AtomicBool,
    /// Ask for an early discovery (or wake for shutdown).
    wake: Mutex<bool>,
    wake_cv: Condvar,
    last_early: Mutex<Option<Instant>>,
    env: OnceLock<Env>,
    /// The namespace controller runs in this process: garbage in a terminating namespace is
    /// left to it (see `attempt_to_delete_item`).
    namespace_controller_here: AtomicBool,
}

pub struct GarbageCollector {
    inner: Arc<Inner>,
}

impl GarbageCollector {
    /// The namespace controller runs beside this collector, so the content of a terminating
    /// namespace is deleted anyway.
    pub fn with_namespace_controller(self, here: bool) -> Self {
        self.inner
            .namespace_controller_here
            .store(here, Ordering::SeqCst);
        self
    }

    /// Let `h` read this collector's graph (for the debug endpoint).
    pub fn with_debug_handle(self, h: &DebugHandle) -> Self {
        if h.gc.set(Arc::downgrade(&self.inner)).is_err() {
            log::warn!("{NAME}: a debug handle serves one garbage collector; not attached");
        }
        self
    }

    /// `workers`: `--concurrent-gc-syncs`.
    pub fn new(workers: usize) -> Self {
        GarbageCollector {
            inner: Arc::new(Inner {
                workers: workers.max(1),
                graph: RwLock::new(Graph::new()),
                queue: WorkQueue::new(QUEUE_NAME),
                absent: Mutex::new(AbsentCache::default()),
                discovery: RwLock::new(Arc::new(Discovery::default())),
                monitors: Mutex::new(HashMap::new()),
                gate: RwLock::new(()),
                ready: AtomicBool::new(false),
                wake: Mutex::new(false),
                wake_cv: Condvar::new(),
                last_early: Mutex::new(None),
                env: OnceLock::new(),
                namespace_controller_here: AtomicBool::new(false),
            }),
        }
    }
}

impl Controller for GarbageCollector {
    fn name(&self) -> &'static str {
        NAME
    }
    fn queue_name(&self) -> &'static str {
        QUEUE_NAME
    }
    fn event_component(&self) -> &'static str {
        COMPONENT
    }
    fn watches(&self) -> Vec<Watch> {
        vec![]
    }
    fn keys_for(&self, _w: &Watch, _d: &Delta, _c: &Cache) -> Vec<String> {
        vec![]
    }
    fn reconcile(&self, _cx: &Cx, _key: &str) -> Result<Outcome> {
        Ok(Outcome::none())
    }
    fn workers(&self) -> usize {
        self.inner.workers
    }
    /// Upstream doubles the QPS of the garbage collector's client (each deletion takes two
    /// requests).
    fn client_rate(&self, qps: f32, burst: u32) -> (f32, u32) {
        (qps * 2.0, burst)
    }
    fn self_driven(&self) -> Option<&dyn SelfDriven> {
        Some(self)
    }
}

impl SelfDriven for GarbageCollector {
    fn start(&self, env: RunEnv) -> Vec<JoinHandle<()>> {
        let _ = self.inner.env.set(Env {
            cache: env.cache,
            client: env.client,
            recorder: env.recorder,
            stop: env.stop,
        });
        crate::metrics::register_collector("garbagecollector", Arc::new(metric_families));
        let mut out = Vec::new();
        let inner = self.inner.clone();
        match std::thread::Builder::new()
            .name("gc-discovery".into())
            .stack_size(512 * 1024)
            .spawn(move || inner.sync_loop())
        {
            Ok(t) => out.push(t),
            Err(e) => log::error!("{NAME}: cannot start its discovery thread: {e}"),
        }
        for i in 0..self.inner.workers {
            let inner = self.inner.clone();
            match std::thread::Builder::new()
                .name(format!("gc-{i}"))
                .stack_size(512 * 1024)
                .spawn(move || inner.worker())
            {
                Ok(t) => out.push(t),
                Err(e) => log::error!("{NAME}: cannot start a worker: {e}"),
            }
        }
        out
    }

    fn shutdown(&self) {
        self.inner.queue.shut_down();
        *self.inner.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.wake_cv.notify_all();
    }
}

fn seen(kind: &Kind, o: &Value) -> Seen {
    Seen {
        identity: Identity {
            api_version: kind.api_version(),
            kind: kind.kind.to_string(),
            name: obj::name(o).to_string(),
            uid: obj::uid(o).to_string(),
            namespace: obj::namespace(o).to_string(),
        },
        owners: obj::owner_refs(o),
        deleting: obj::is_deleting(o),
        finalizers: decide::finalizers(o),
    }
}

/// A node as a worker needs it, copied out of the graph.
#[derive(Clone)]
struct Snapshot {
    identity: Identity,
    owners: Vec<OwnerRef>,
    virtual_: bool,
    being_deleted: bool,
    deleting_dependents: bool,
}

impl Inner {
    /// Is `ns` terminating, with the namespace controller running here to empty it?
    fn namespace_terminating(&self, ns: &str) -> bool {
        if ns.is_empty() || !self.namespace_controller_here.load(Ordering::SeqCst) {
            return false;
        }
        let cache = &self.env().cache;
        cache.has_informer(NAMESPACES)
            && cache
                .store(NAMESPACES)
                .get(ns)
                .is_some_and(|n| obj::is_deleting(&n))
    }

    fn env(&self) -> &Env {
        // Set in `start`, before any thread of ours runs.
        self.env.get().expect("garbage collector started")
    }

    fn stopped(&self) -> bool {
        self.env.get().is_none_or(|e| e.stop.load(Ordering::SeqCst))
    }

    // ---- monitors and discovery ----

    fn sync_loop(self: Arc<Self>) {
        let mut current: BTreeSet<Kind> = BTreeSet::new();
        while !self.stopped() {
            self.resync_once(&mut current);
            self.wait_for_wake(RESYNC_PERIOD);
        }
    }

    fn discover(&self) -> Option<BTreeSet<Kind>> {
        let env = self.env();
        match Discovery::fetch(&env.client) {
            Ok(d) => {
                if let Some(f) = d.failure() {
                    log::info!("{NAME}: failed to discover some groups: {f}");
                }
                let set = monitored(&d);
                *self.discovery.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
                if set.is_empty() {
                    log::info!("{NAME}: no resources reported by discovery, skipping sync");
                    resources_sync_error();
                    return None;
                }
                Some(set)
            }
            Err(e) => {
                log::info!("{NAME}: failed to discover preferred resources: {e}");
                resources_sync_error();
                None
            }
        }
    }

    fn resync_once(self: &Arc<Self>, current: &mut BTreeSet<Kind>) {
        let Some(mut wanted) = self.discover() else {
            return;
        };
        if wanted == *current {
            return;
        }
        // Workers wait until the monitors of the new set have synced.
        let _paused = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let mut attempt = 0;
        loop {
            attempt += 1;
            if attempt > 1 {
                match self.discover() {
                    Some(w) => wanted = w,
                    None => {
                        if !self.wait_for_wake(Duration::from_millis(100)) {
                            return;
                        }
                        continue;
                    }
                }
            }
            let added: Vec<String> = wanted.difference(current).map(|k| k.to_string()).collect();
            let removed: Vec<String> = current.difference(&wanted).map(|k| k.to_string()).collect();
            log::info!(
                "{NAME}: syncing monitors with discovery (attempt {attempt}): added {added:?}, removed {removed:?}"
            );
            self.sync_monitors(&wanted);
            if self.wait_monitors_synced(RESYNC_PERIOD) {
                break;
            }
            if self.stopped() {
                return;
            }
            resources_sync_error();
            log::warn!(
                "{NAME}: timed out waiting for the monitors to sync (attempt {attempt}); retrying"
            );
        }
        *current = wanted;
        if !self.ready.swap(true, Ordering::SeqCst) {
            log::info!("{NAME}: all resource monitors have synced; proceeding to collect garbage");
        } else {
            log::info!("{NAME}: synced with discovery");
        }
    }

    fn sync_monitors(self: &Arc<Self>, wanted: &BTreeSet<Kind>) {
        let env = self.env();
        let mut monitors = self.monitors.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<Kind> = monitors
            .keys()
            .filter(|k| !wanted.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(m) = monitors.remove(&k) {
                m.active.store(false, Ordering::SeqCst);
                if m.owned {
                    env.cache.remove_informer(k);
                }
            }
        }
        for k in wanted {
            if monitors.contains_key(k) {
                continue;
            }
            let owned = !env.cache.has_informer(*k);
            let informer = env.cache.metadata_informer(*k);
            let active = Arc::new(AtomicBool::new(true));
            let (weak, flag, kind): (Weak<Inner>, _, Kind) =
                (Arc::downgrade(self), active.clone(), *k);
            informer.add_handler_with_replay(Arc::new(move |d: &Delta| {
                if !flag.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(gc) = weak.upgrade() {
                    gc.observe(&kind, d);
                }
            }));
            env.cache.start_informer(&informer);
            monitors.insert(
                *k,
                Monitor {
                    informer,
                    active,
                    owned,
                },
            );
        }
    }

    fn monitors_synced(&self) -> bool {
        let m = self.monitors.lock().unwrap_or_else(|p| p.into_inner());
        !m.is_empty() && m.values().all(|m| m.informer.has_synced())
    }

    fn wait_monitors_synced(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end && !self.stopped() {
            if self.monitors_synced() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.monitors_synced()
    }

    /// Sleep up to `d`, or until woken. False when stopping.
    fn wait_for_wake(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut woken = self.wake.lock().unwrap_or_else(|p| p.into_inner());
        while !*woken && !self.stopped() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            woken = self
                .wake_cv
                .wait_timeout(woken, (end - now).min(Duration::from_millis(500)))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *woken = false;
        !self.stopped()
    }

    /// A kind was not found: bring the next discovery forward.
    fn request_discovery(&self) {
        let mut last = self.last_early.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < EARLY_DISCOVERY) {
            return;
        }
        *last = Some(Instant::now());
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake_cv.notify_all();
    }

    // ---- the graph ----

    fn observe(&self, kind: &Kind, d: &Delta) {
        let change = match d.kind {
            DeltaKind::Added | DeltaKind::Updated => {
                let Some(new) = d.new.as_deref() else { return };
                Change::Upsert {
                    old: d.old.as_deref().map(|o| seen(kind, o)),
                    new: seen(kind, new),
                }
            }
            DeltaKind::Deleted => Change::Deleted(seen(kind, d.object())),
        };
        self.change(change);
    }

    fn change(&self, change: Change) {
        let mut fx = Effects::default();
        self.graph
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .process(change, &mut fx);
        self.apply(fx);
    }

    fn apply(&self, fx: Effects) {
        if !fx.absent.is_empty() {
            let mut a = self.absent.lock().unwrap_or_else(|p| p.into_inner());
            for id in fx.absent {
                a.add(id);
            }
        }
        for uid in fx.attempt_to_delete {
            self.queue.add(Item::Delete(uid));
        }
        for uid in fx.attempt_to_delete_later {
            self.queue.add_rate_limited(Item::Delete(uid));
        }
        for uid in fx.attempt_to_orphan {
            self.queue.add(Item::Orphan(uid));
        }
        if fx.invalid_refs.is_empty() {
            return;
        }
        let Some(env) = self.env.get() else { return };
        for r in fx.invalid_refs {
            log::info!(
                "{NAME}: item {} references an owner but does not match namespaces: {}",
                r.dependent,
                r.owner
            );
            env.recorder.record(
                &env.client,
                COMPONENT,
                EventSpec {
                    involved: ObjectRef {
                        kind: r.dependent.kind.clone(),
                        api_version: r.dependent.api_version.clone(),
                        namespace: r.dependent.namespace.clone(),
                        name: r.dependent.name.clone(),
                        uid: r.dependent.uid.clone(),
                        resource_version: String::new(),
                    },
                    event_type: EventType::Warning,
                    reason: graph::InvalidNamespaceRef::REASON.to_string(),
                    message: r.message(),
                },
            );
        }
    }

    fn snapshot(&self, uid: &str) -> Option<Snapshot> {
        let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
        g.get(uid).map(|n| Snapshot {
            identity: n.identity.clone(),
            owners: n.owners.clone(),
            virtual_: n.virtual_,
            being_deleted: n.being_deleted,
            deleting_dependents: n.deleting_dependents,
        })
    }

    // ---- workers ----

    fn worker(&self) {
        while !self.ready.load(Ordering::SeqCst) {
            if self.stopped() || self.queue.shutting_down() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        while let Some(item) = self.queue.get() {
            let next = {
                let _running = self.gate.read().unwrap_or_else(|p| p.into_inner());
                match &item {
                    Item::Delete(uid) => self.attempt_to_delete(uid),
                    Item::Orphan(uid) => self.attempt_to_orphan(uid),
                }
            };
            match next {
                Next::Forget => self.queue.forget(&item),
                Next::Requeue => self.queue.add_rate_limited(item.clone()),
            }
            self.queue.done(&item);
        }
    }

    fn mapping(&self, api_version: &str, kind: &str) -> std::result::Result<Kind, Stop> {
        let d = self
            .discovery
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match d.kind_for(api_version, kind) {
            Some(k) => Ok(k),
            None => {
                self.request_discovery();
                Err(Stop::Mapping(format!(
                    "unable to get REST mapping for {api_version}/{kind}"
                )))
            }
        }
    }

    /// The kind and the namespace to use for an identity.
    fn locate(&self, id: &Identity) -> std::result::Result<(Kind, Option<String>), Stop> {
        let k = self.mapping(&id.api_version, &id.kind)?;
        if !k.namespaced {
            return Ok((k, None));
        }
        if id.namespace.is_empty() {
            return Err(Stop::ClusterScopedRefersNamespaced);
        }
        Ok((k, Some(id.namespace.clone())))
    }

    /// The object's live metadata; None when it does not exist.
    fn get_object(&self, id: &Identity) -> std::result::Result<Option<Value>, Stop> {
        let (k, ns) = self.locate(id)?;
        match self.env().client.get_metadata(&k, ns.as_deref(), &id.name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn virtual_delete(&self, id: &Identity) {
        log::debug!("{NAME}: {id} not found; removing it from the graph");
        self.change(Change::VirtualDelete(id.clone()));
    }

    fn attempt_to_delete(&self, uid: &str) -> Next {
        let Some(node) = self.snapshot(uid) else {
            return Next::Forget;
        };
        match self.attempt_to_delete_item(&node) {
            Ok(()) => {
                let still_virtual = self.snapshot(uid).is_some_and(|n| n.virtual_);
                if still_virtual {
                    Next::Requeue
                } else {
                    Next::Forget
                }
            }
            Err(Stop::VirtualDeleted) => Next::Forget,
            // Gone between the read and the write: the next look finds it absent.
            Err(Stop::NotFound) => Next::Requeue,
            Err(Stop::ClusterScopedRefersNamespaced) => {
                log::info!(
                    "{NAME}: {}: cluster-scoped objects cannot refer to namespaced owners",
                    node.identity
                );
                Next::Forget
            }
            Err(Stop::Mapping(e)) => {
                log::debug!("{NAME}: error syncing item {}: {e}", node.identity);
                Next::Requeue
            }
            Err(Stop::Failed(e)) => {
                log::warn!("{NAME}: error syncing item {}: {e}", node.identity);
                Next::Requeue
            }
        }
    }

    fn attempt_to_delete_item(&self, item: &Snapshot) -> std::result::Result<(), Stop> {
        log::debug!(
            "{NAME}: processing item {} (virtual: {})",
            item.identity,
            item.virtual_
        );
        if item.being_deleted && !item.deleting_dependents {
            return Ok(());
        }
        // Garbage in a namespace being deleted: the namespace controller deletes all of it
        // (with background propagation, as this would), so the live reads and deletes are
        // saved. Foreground deletions still get their dependents processed here.
        if !item.deleting_dependents && self.namespace_terminating(&item.identity.namespace) {
            log::debug!(
                "{NAME}: item {}: its namespace is terminating; left to the namespace controller",
                item.identity
            );
            return Ok(());
        }
        let latest = match self.get_object(&item.identity)? {
            Some(v) if obj::uid(&v) == item.identity.uid => v,
            // Gone, or another object by that name: drop the node.
            _ => {
                self.virtual_delete(&item.identity);
                return Err(Stop::VirtualDeleted);
            }
        };
        if item.deleting_dependents {
            return self.process_deleting_dependents(item);
        }
        let refs = obj::owner_refs(&latest);
        if refs.is_empty() {
            return Ok(());
        }
        let mut classified = Vec::with_capacity(refs.len());
        for r in refs {
            let st = self.owner_state(&r, &item.identity)?;
            classified.push((r, st));
        }
        let (has_deps, dep_deleting) = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            match g.get(&item.identity.uid) {
                Some(n) => (
                    !n.dependents.is_empty(),
                    n.dependents
                        .iter()
                        .filter_map(|d| g.get(d))
                        .any(|d| d.deleting_dependents),
                ),
                None => (false, false),
            }
        };
        let decision = decide::decide(
            &classified,
            has_deps,
            dep_deleting,
            &decide::finalizers(&latest),
        );
        log::debug!("{NAME}: item {}: {decision:?}", item.identity);
        match decision {
            Decision::Keep => Ok(()),
            Decision::RemoveRefs(uids) => {
                log::info!(
                    "{NAME}: removing references to absent or deleting owners {uids:?} from {}",
                    item.identity
                );
                let smp = decide::delete_refs_smp(&item.identity.uid, &uids);
                self.patch(&item.identity, &smp, |cur| {
                    Ok(decide::delete_refs_merge(cur, &uids))
                })
            }
            Decision::DeleteForeground { unblock_first } => {
                if unblock_first {
                    log::info!(
                        "{NAME}: {}: an owner and a dependent both delete in the foreground; making its references non-blocking first",
                        item.identity
                    );
                    let smp = decide::unblock_smp(&item.identity.uid, &item.owners);
                    self.patch(&item.identity, &smp, |cur| {
                        Ok(decide::unblock_merge(
                            obj::resource_version(cur),
                            &item.owners,
                        ))
                    })?;
                }
                log::info!(
                    "{NAME}: deleting {} in the foreground: an owner waits for its dependents",
                    item.identity
                );
                self.delete(&item.identity, "Foreground")
            }
            Decision::Delete(policy) => {
                log::info!(
                    "{NAME}: deleting {} (propagation {policy}): its owners are gone",
                    item.identity
                );
                self.delete(&item.identity, policy)
            }
        }
    }

    /// Upstream's isDangling + classification of one reference.
    fn owner_state(&self, r: &OwnerRef, item: &Identity) -> std::result::Result<OwnerState, Stop> {
        let cluster_key = Identity::of_ref(r, "");
        let ns_key = Identity::of_ref(r, &item.namespace);
        {
            let mut a = self.absent.lock().unwrap_or_else(|p| p.into_inner());
            if a.has(&cluster_key) || a.has(&ns_key) {
                return Ok(OwnerState::Dangling);
            }
        }
        let k = self.mapping(&r.api_version, &r.kind)?;
        if item.namespace.is_empty() && k.namespaced {
            return Err(Stop::ClusterScopedRefersNamespaced);
        }
        let (ns, key) = if k.namespaced {
            (Some(item.namespace.as_str()), ns_key)
        } else {
            (None, cluster_key)
        };
        match self.env().client.get_metadata(&k, ns, &r.name) {
            Err(e) if e.is_not_found() => {
                self.absent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(key);
                Ok(OwnerState::Dangling)
            }
            Err(e) => Err(e.into()),
            Ok(owner) if obj::uid(&owner) != r.uid => {
                self.absent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(key);
                Ok(OwnerState::Dangling)
            }
            Ok(owner) => Ok(OwnerState::of_owner(&owner)),
        }
    }

    fn process_deleting_dependents(&self, item: &Snapshot) -> std::result::Result<(), Stop> {
        let blocking: Vec<(String, bool)> = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            g.blocking_dependents(&item.identity.uid)
                .iter()
                .map(|d| (d.identity.uid.clone(), d.deleting_dependents))
                .collect()
        };
        if blocking.is_empty() {
            log::info!(
                "{NAME}: no blocking dependents left; removing the {FINALIZER_FOREGROUND} finalizer from {}",
                item.identity
            );
            return self.remove_finalizer(&item.identity, FINALIZER_FOREGROUND);
        }
        for (uid, deleting) in blocking {
            if !deleting {
                self.queue.add(Item::Delete(uid));
            }
        }
        Ok(())
    }

    fn attempt_to_orphan(&self, uid: &str) -> Next {
        let (owner, dependents) = {
            let g = self.graph.read().unwrap_or_else(|p| p.into_inner());
            let Some(n) = g.get(uid) else {
                return Next::Forget;
            };
            let deps: Vec<Identity> = n
                .dependents
                .iter()
                .filter_map(|d| g.get(d))
                .map(|d| d.identity.clone())
                .collect();
            (n.identity.clone(), deps)
        };
        if let Err(e) = self.orphan_dependents(&owner, &dependents) {
            log::warn!("{NAME}: orphanDependents for {owner} failed with {e}");
            return Next::Requeue;
        }
        match self.remove_finalizer(&owner, FINALIZER_ORPHAN) {
            Ok(()) | Err(Stop::VirtualDeleted | Stop::NotFound) => Next::Forget,
            Err(Stop::ClusterScopedRefersNamespaced) => Next::Forget,
            Err(Stop::Mapping(e) | Stop::Failed(e)) => {
                log::warn!("{NAME}: removeOrphanFinalizer for {owner} failed with {e}");
                Next::Requeue
            }
        }
    }

    /// Remove the owner's reference from every dependent, a few at a time.
    fn orphan_dependents(
        &self,
        owner: &Identity,
        deps: &[Identity],
    ) -> std::result::Result<(), String> {
        let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let uids = [owner.uid.clone()];
        crate::pool::for_each_parallel(deps.len(), PARALLEL_ORPHANING, |i| {
            let dep = &deps[i];
            let smp = decide::delete_refs_smp(&dep.uid, &uids);
            match self.patch(dep, &smp, |cur| Ok(decide::delete_refs_merge(cur, &uids))) {
                Ok(()) | Err(Stop::VirtualDeleted | Stop::NotFound) => {}
                Err(Stop::ClusterScopedRefersNamespaced) => {}
                Err(Stop::Mapping(e) | Stop::Failed(e)) => errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!("orphaning {dep} failed, {e}")),
            }
            true
        });
        let errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            log::debug!("{NAME}: successfully updated all dependents of {owner}");
            Ok(())
        } else {
            Err(format!(
                "failed to orphan dependents of owner {owner}, got errors: {}",
                errors.join(", ")
            ))
        }
    }

    /// Strategic merge patch, or the JSON merge patch `merge(current)` when the resource does
    /// not support it (415). A dependent that is gone is fine.
    fn patch(
        &self,
        id: &Identity,
        smp: &Value,
        merge: impl Fn(&Value) -> Result<Value>,
    ) -> std::result::Result<(), Stop> {
        let (k, ns) = self.locate(id)?;
        let client = &self.env().client;
        match client.patch(&k, ns.as_deref(), &id.name, PatchType::Strategic, smp, None) {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Err(Stop::NotFound),
            Err(e) if e.code() == Some(415) => {
                let cur = match client.get_metadata(&k, ns.as_deref(), &id.name) {
                    Ok(v) => v,
                    Err(e) if e.is_not_found() => return Err(Stop::NotFound),
                    Err(e) => return Err(e.into()),
                };
                let jmp = merge(&cur)?;
                match client.patch(&k, ns.as_deref(), &id.name, PatchType::Merge, &jmp, None) {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_not_found() => Err(Stop::NotFound),
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    fn delete(&self, id: &Identity, policy: &'static str) -> std::result::Result<(), Stop> {
        let (k, ns) = self.locate(id)?;
        let opts = DeleteOptions {
            propagation_policy: Some(policy),
            precondition_uid: Some(id.uid.clone()),
            ..Default::default()
        };
        match self.env().client.delete(&k, ns.as_deref(), &id.name, &opts) {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove `finalizer` from the object with a JSON merge patch guarded by its
    /// resourceVersion, retrying conflicts (client-go's DefaultBackoff: 4 tries).
    fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> std::result::Result<(), Stop> {
        const TRIES: u32 = 4;
        let (k, ns) = self.locate(id)?;
        let client = &self.env().client;
        let mut wait = Duration::from_millis(10);
        for attempt in 1..=TRIES {
            let cur = match client.get_metadata(&k, ns.as_deref(), &id.name) {
                Ok(v) => v,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => {
                    return Err(Stop::Failed(format!(
                        "cannot finalize owner {id}, because cannot get it: {e}. The garbage collector will retry later"
                    )))
                }
            };
            let Some(patch) = decide::remove_finalizer_patch(&cur, finalizer) else {
                log::debug!("{NAME}: finalizer {finalizer} already removed from {id}");
                return Ok(());
            };
            match client.patch(&k, ns.as_deref(), &id.name, PatchType::Merge, &patch, None) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if e.is_conflict() && attempt < TRIES => {
                    std::thread::sleep(wait.mul_f64(1.0 + 0.1 * fastrand::f64()));
                    wait *= 5;
                }
                Err(e) if e.is_conflict() => break,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Stop::Failed(format!(
            "updateMaxRetries({TRIES}) has reached. The garbage collector will retry later for owner {id}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{discovered, CONFIGMAPS, EVENTS};

    #[test]
    fn events_are_never_monitored() {
        assert!(ignored(&EVENTS));
        assert!(ignored(&discovered(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true
        )));
        assert!(!ignored(&CONFIGMAPS));
        assert!(!ignored(&discovered(
            "example.com",
            "v1",
            "Event",
            "events",
            true
        )));
    }

    #[test]
    fn debug_handle_answers_404_until_a_collector_runs() {
        let h = DebugHandle::new();
        let req = crate::server::Request {
            method: "GET".into(),
            path: dump::GRAPH_PATH.into(),
            ..Default::default()
        };
        assert_eq!(h.handler()(&req).status, 404);
        assert!(h.dot(None).is_none());
        // Built but not started (a standby, or before the election is won).
        let gc = GarbageCollector::new(1).with_debug_handle(&h);
        assert_eq!(h.handler()(&req).status, 404);
        drop(gc);
        assert!(h.dot(None).is_none());
    }

    #[test]
    fn resources_sync_error_counter_family() {
        let before = RESOURCES_SYNC_ERRORS.load(Ordering::Relaxed) as f64;
        resources_sync_error();
        let f = metric_families();
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].name,
            "garbagecollector_controller_resources_sync_error_total"
        );
        assert_eq!(
            f[0].help,
            "[ALPHA] Number of garbage collector resources sync errors"
        );
        assert_eq!(f[0].kind, crate::metrics::MetricType::Counter);
        assert!(f[0].samples[0].labels.is_empty());
        // Other tests in this process may count too.
        assert!(matches!(f[0].samples[0].value,
            crate::metrics::SampleValue::Scalar(v) if v >= before + 1.0));
    }

    #[test]
    fn absent_cache_is_bounded_and_recent_entries_stay() {
        let mut a = AbsentCache::default();
        let id = |i: usize| Identity {
            uid: i.to_string(),
            ..Default::default()
        };
        a.add(id(0));
        for i in 1..=ABSENT_CACHE_SIZE {
            assert!(a.has(&id(0)));
            a.add(id(i));
        }
        assert_eq!(a.entries.len(), ABSENT_CACHE_SIZE);
        assert!(a.has(&id(0)));
        assert!(!a.has(&id(1)));
    }
}
