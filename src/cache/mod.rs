//! The shared watch cache: one reflector per kind, shared by every controller that reads it.
//! Reflectors are tasks on the watch threads (`crate::runtime::reactor`), not a thread each.

mod echo;
mod memo;
mod metrics;
pub mod monitors;
pub mod ready;
pub mod reflector;
pub mod store;
mod watch;

pub use metrics::register_metrics;
pub use reflector::{Handler, Informer};
pub use store::{Delta, DeltaKind, Store};
pub use watch::Watch;

use crate::api::client::Client;
use crate::api::Kind;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Cache {
    client: Client,
    informers: Mutex<BTreeMap<(Kind, &'static str), Arc<Informer>>>,
    /// The reflectors' tasks (dropping one cancels it).
    tasks: Mutex<Vec<smol::Task<()>>>,
    stop: Arc<AtomicBool>,
    /// Namespaces a create was refused in because they are terminating.
    terminating: TerminatingNamespaces,
}

/// How long a namespace seen terminating is assumed to still be (a terminating namespace
/// never comes back; it can only be deleted and made anew, so this only bounds that case).
pub const TERMINATING_MEMORY: Duration = Duration::from_secs(5);

/// Namespaces the apiserver refused a create in because they are terminating, each
/// remembered for `TERMINATING_MEMORY`.
#[derive(Default)]
pub struct TerminatingNamespaces(Mutex<HashMap<String, Instant>>);

impl TerminatingNamespaces {
    /// The apiserver refused a create in `ns` because it is terminating.
    pub fn saw(&self, ns: &str) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|_, at| at.elapsed() < TERMINATING_MEMORY);
        t.insert(ns.to_string(), Instant::now());
    }

    /// Was a create in `ns` refused as terminating within `TERMINATING_MEMORY`?
    pub fn contains(&self, ns: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ns)
            .is_some_and(|at| at.elapsed() < TERMINATING_MEMORY)
    }
}

impl Cache {
    /// `client` is the identity the informers use (always the root one, as upstream).
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Cache {
            client,
            informers: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            terminating: TerminatingNamespaces::default(),
        })
    }

    /// The apiserver refused a create in `ns` because it is terminating.
    pub fn saw_namespace_terminating(&self, ns: &str) {
        self.terminating.saw(ns);
    }

    /// Was a create in `ns` refused as terminating within `TERMINATING_MEMORY`?
    pub fn namespace_terminating(&self, ns: &str) -> bool {
        self.terminating.contains(ns)
    }

    fn informer_entry(&self, kind: Kind, field_selector: &'static str) -> Arc<Informer> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((kind, field_selector))
            .or_insert_with(|| Informer::new(kind, field_selector, self.stop.clone()))
            .clone()
    }

    /// The informer serving a controller's `Watch`.
    pub fn informer_for(&self, w: &Watch) -> Arc<Informer> {
        let i = self.informer_entry(w.kind, w.field_selector);
        match (w.metadata_only, w.fields) {
            (true, _) => {}
            (false, Some(f)) => i.need_fields(f),
            (false, None) => i.need_full_objects(),
        }
        i
    }

    /// The store of a selector-scoped informer.
    pub fn store_for(&self, w: &Watch) -> Arc<Store> {
        self.informer_entry(w.kind, w.field_selector).store.clone()
    }

    /// The informer for `kind` with whole objects (created on first use, shared after).
    pub fn informer(&self, kind: Kind) -> Arc<Informer> {
        let i = self.informer_entry(kind, "");
        i.need_full_objects();
        i
    }

    /// The informer for `kind`, metadata only unless someone else needs whole objects.
    pub fn metadata_informer(&self, kind: Kind) -> Arc<Informer> {
        self.informer_entry(kind, "")
    }

    pub fn store(&self, kind: Kind) -> Arc<Store> {
        self.informer_entry(kind, "").store.clone()
    }

    pub fn kinds(&self) -> Vec<Kind> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .map(|(k, _)| *k)
            .collect()
    }

    /// A snapshot of every informer (the lock is not held while they are used).
    fn all_informers(&self) -> Vec<Arc<Informer>> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Start a reflector for every informer not started yet.
    pub fn start(&self) {
        for inf in self.all_informers() {
            self.start_informer(&inf);
        }
    }

    /// Start the reflector of one informer (once; later calls do nothing). Informers
    /// created after `start` (resources found by discovery) are started this way.
    pub fn start_informer(&self, inf: &Arc<Informer>) {
        if self.stop.load(Ordering::SeqCst) || !inf.claim_task() {
            return;
        }
        let task = crate::runtime::reactor::spawn(inf.clone().run(self.client.clone()));
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Whether an informer for `kind` (all objects) exists.
    pub fn has_informer(&self, kind: Kind) -> bool {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(kind, ""))
    }

    /// Stop and forget the informer for `kind` (all objects), e.g. when its resource is no
    /// longer served. Its store is dropped with it.
    pub fn remove_informer(&self, kind: Kind) {
        let inf = self
            .informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(kind, ""));
        if let Some(inf) = inf {
            log::info!("cache {kind}: stopped (no longer served)");
            inf.remove();
        }
    }

    pub fn has_synced(&self) -> bool {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .all(|i| i.has_synced())
    }

    /// Wait until every informer has listed once, or until `timeout`/stop.
    pub fn wait_for_sync(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.has_synced() {
                return true;
            }
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.has_synced()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let infs = self.all_informers();
        for i in infs {
            i.cancel();
        }
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        if crate::runtime::reactor::on_executor() {
            // A handler stopping the cache: its own task cannot be waited for here. Dropped,
            // the tasks are cancelled.
            return;
        }
        for t in tasks {
            // Ends the task where it waits (a delivery to handlers in progress finishes).
            futures_lite::future::block_on(t.cancel());
        }
    }

    /// Informers of `kind` whose selector admits an object named `name`.
    fn stores_admitting(&self, kind: Kind, name: &str) -> Vec<Arc<Store>> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((k, sel), _)| {
                *k == kind
                    && (sel.is_empty()
                        || sel
                            .strip_prefix("metadata.name=")
                            .is_some_and(|n| n == name))
            })
            .map(|(_, i)| i.store.clone())
            .collect()
    }

    /// The parts of a `kind` object the cache keeps beyond metadata, to decode the answer to
    /// a write in: None (whole) when some store keeps whole objects or none holds the kind.
    pub fn write_shape(&self, kind: Kind) -> Option<Arc<[&'static str]>> {
        let informers = self.informers.lock().unwrap_or_else(|p| p.into_inner());
        let mut union: Option<Vec<&'static str>> = None;
        for ((k, _), i) in informers.iter() {
            if *k != kind {
                continue;
            }
            let keep = i.store.projection()?;
            let u = union.get_or_insert_with(Vec::new);
            for f in keep.iter() {
                if !u.contains(f) {
                    u.push(f);
                }
            }
        }
        union.map(Arc::from)
    }

    /// Record the answer to our own write, so the next reconcile sees it at once. `o` is the
    /// answer as decoded with `write_shape(kind)`: when one store holds the kind that is its
    /// own shape, and the answer is packed without a copy.
    pub fn observe_write(&self, kind: Kind, o: &serde_json::Value) {
        self.observe(kind, o, None)
    }

    /// As `observe_write`, for an answer shared as an `Obj`: it is also held for the watch
    /// event that will echo it, whose object then is not decoded again (`api::echo`).
    pub fn observe_write_shared(&self, kind: Kind, o: &crate::obj::Obj) {
        self.observe(kind, o, Some(o))
    }

    fn observe(&self, kind: Kind, o: &serde_json::Value, shared: Option<&crate::obj::Obj>) {
        match &self.stores_admitting(kind, crate::obj::name(o))[..] {
            [only] => match shared {
                Some(shared) => only.observe_write_held(shared),
                None => only.observe_write_shaped(o),
            },
            several => {
                for s in several {
                    s.observe_write(o.clone());
                }
            }
        }
    }

    /// Forget an object we deleted.
    pub fn observe_delete(&self, kind: Kind, ns: &str, name: &str) {
        for s in self.stores_admitting(kind, name) {
            s.observe_delete(&crate::obj::make_key(ns, name));
        }
    }

    /// (kind, objects, approximate bytes) per informer, for gauges and logs.
    pub fn sizes(&self) -> Vec<(Kind, usize, usize)> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|i| (i.kind, i.store.len(), i.store.approximate_bytes()))
            .collect()
    }

    /// Each informer's kind, the resource version its store is at, and its processing latency.
    pub fn informer_stats(&self) -> Vec<metrics::InformerStats> {
        self.informers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|i| {
                let mut latency = metrics::latency_histogram();
                i.latency.add_to(&mut latency);
                (i.kind, i.store.resource_version(), latency)
            })
            .collect()
    }
}
