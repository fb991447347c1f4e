//! garbage-collector-controller: deletes objects whose owners are gone, and carries out
//! foreground and orphan deletion (upstream's `pkg/controller/garbagecollector`).
//!
//! - Every 30 s, discovery lists the resources that support list, watch and delete (core and
//!   events.k8s.io Events aside); each gets a metadata-only informer ("monitor"), added while
//!   running and stopped when its resource is no longer served. A change of that set pauses
//!   the workers until the new monitors synced, as upstream does (`monitors.rs`, on the
//!   kernel's `cache::monitors`).
//! - Informer events update the owner graph (`graph/`) under one lock and queue UIDs to look
//!   at: "attempt to delete" (owners maybe gone, foreground deletion progressing) and "attempt
//!   to orphan" (an owner deleting with the `orphan` finalizer).
//! - Workers read the object and its owners live (never from the cache), decide
//!   (`decide.rs`) and delete with a UID precondition, patch references away (strategic merge,
//!   JSON merge patch on 415), or remove the `foregroundDeletion`/`orphan` finalizer
//!   (`workers.rs`; orphaning in `orphan.rs`).
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
mod monitors;
mod orphan;
mod workers;

use super::{EventSpec, EventType, ObjectRef, RunEnv, SelfDriven};
use crate::api::client::Client;
use crate::api::resources::NAMESPACES;
use crate::api::Kind;
use crate::cache::monitors::Monitors;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Error;
use crate::events::Recorder;
use crate::obj::{self, OwnerRef};
use crate::queue::WorkQueue;
use graph::{Change, Effects, Graph, Identity, Seen};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

pub use monitors::{ignored, monitored, shared as shared_monitors};

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

/// Its row in the controller table: off with `--enable-garbage-collector=false`.
pub fn build(
    cx: &super::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<super::Runnable>> {
    if !cx.cfg.garbage_collector.enable_garbage_collector {
        log::warn!("{NAME} is disabled (--enable-garbage-collector=false)");
        return Ok(None);
    }
    let gc = GarbageCollector::new(cx.workers)
        .with_namespace_controller(cx.cfg.controllers.is_enabled("namespace-controller"))
        .with_debug_handle(DebugHandle::process());
    Ok(Some(super::Runnable::drives(gc)))
}

/// The owner graph's debug paths, served by the process's collector.
pub fn debug_route() -> (&'static str, crate::server::Handler) {
    (dump::BASE_PATH, DebugHandle::process().handler())
}

/// Reads the owner graph of a garbage collector for the debug endpoint
/// ([`dump::GRAPH_PATH`]). Made before the collector (the secure port starts first) and
/// filled by [`GarbageCollector::with_debug_handle`]; answers 404 until the collector runs,
/// as upstream mounts the handler only once the controller started.
#[derive(Clone, Default)]
pub struct DebugHandle {
    gc: Arc<Mutex<Weak<Inner>>>,
}

impl DebugHandle {
    pub fn new() -> Self {
        DebugHandle::default()
    }

    /// The process's handle: the one the secure port serves and the built collector fills.
    pub fn process() -> &'static DebugHandle {
        static PROCESS: OnceLock<DebugHandle> = OnceLock::new();
        PROCESS.get_or_init(DebugHandle::new)
    }

    fn collector(&self) -> Option<Arc<Inner>> {
        self.gc.lock().unwrap_or_else(|p| p.into_inner()).upgrade()
    }

    /// Whether a collector runs (its handler is mounted, upstream would say).
    fn running(&self) -> bool {
        let inner = self.collector();
        inner.is_some_and(|i| i.env.get().is_some())
    }

    /// The DOT dump (all of the graph, or what is reachable from `uids`); None while no
    /// collector runs. The graph is only read-locked while the vertices are copied out.
    pub fn dot(&self, uids: Option<&[String]>) -> Option<String> {
        let inner = self.collector()?;
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

struct Env {
    cache: Arc<Cache>,
    client: Client,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    /// Starts the workers once the monitors synced.
    run: RunEnv,
}

struct Inner {
    workers: usize,
    graph: RwLock<Graph>,
    queue: Arc<WorkQueue<Item>>,
    absent: Mutex<AbsentCache>,
    /// The monitors of every resource (set in `start`).
    monitors: OnceLock<Arc<Monitors>>,
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

    /// Let `h` read this collector's graph (for the debug endpoint), instead of the one it
    /// read before.
    pub fn with_debug_handle(self, h: &DebugHandle) -> Self {
        *h.gc.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&self.inner);
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
                monitors: OnceLock::new(),
                env: OnceLock::new(),
                namespace_controller_here: AtomicBool::new(false),
            }),
        }
    }
}

impl SelfDriven for GarbageCollector {
    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        let _ = self.inner.env.set(Env {
            cache: env.cache.clone(),
            client: env.client.clone(),
            recorder: env.recorder.clone(),
            stop: env.stop.clone(),
            run: env.clone(),
        });
        crate::metrics::register_collector("garbagecollector", Arc::new(metric_families));
        self.inner.start_monitors().into_iter().collect()
    }

    fn shutdown(&self) {
        self.inner.queue.shut_down();
        if let Some(m) = self.inner.monitors.get() {
            m.wake();
        }
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

    fn monitors(&self) -> &Monitors {
        // Set in `start`, before any worker runs.
        self.monitors.get().expect("garbage collector started")
    }

    fn env(&self) -> &Env {
        // Set in `start`, before any thread of ours runs.
        self.env.get().expect("garbage collector started")
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
}

#[cfg(test)]
mod tests;
