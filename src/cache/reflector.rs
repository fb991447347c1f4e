//! One reflector per kind: list, then watch from the list's resourceVersion; re-list and swap
//! atomically on 410; back off on other failures (client-go's Reflector, inventory 5a/5b).

use super::store::{Delta, DeltaKind, Store};
use crate::api::client::{Client, ListOptions, WatchCanceller, WatchOptions};
use crate::api::watch::EventType;
use crate::api::Kind;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

pub type Handler = Arc<dyn Fn(&Delta) + Send + Sync>;

/// Backoff for list/watch failures: 800 ms doubling to 30 s, with jitter, reset after 2 min
/// of good behaviour.
pub struct Backoff {
    next: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: Self::INITIAL,
            last_failure: None,
        }
    }
}

impl Backoff {
    const INITIAL: Duration = Duration::from_millis(800);
    const MAX: Duration = Duration::from_secs(30);
    const RESET: Duration = Duration::from_secs(120);

    /// The wait before the next attempt (jitter factor 1: between d and 2d, capped).
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        if self
            .last_failure
            .is_some_and(|t| now.saturating_duration_since(t) > Self::RESET)
        {
            self.next = Self::INITIAL;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        let jittered = base.mul_f64(1.0 + fastrand::f64());
        jittered.min(Self::MAX)
    }
}

/// What an informer's readers need of its objects beyond metadata.
#[derive(Default)]
struct Shape {
    full: bool,
    fields: std::collections::BTreeSet<&'static str>,
}

pub struct Informer {
    pub kind: Kind,
    /// Field selector scoping this informer ("" = every object of the kind).
    pub field_selector: &'static str,
    pub store: Arc<Store>,
    handlers: RwLock<Vec<Handler>>,
    /// What readers need beyond metadata (see `need_fields`); nothing: metadata-only.
    shape: Mutex<Shape>,
    synced: AtomicBool,
    started: AtomicBool,
    /// A thread was handed this informer (see `Cache::start_informer`).
    spawned: AtomicBool,
    stop: Arc<AtomicBool>,
    /// Stopped alone (its resource went away), while the cache runs on.
    removed: AtomicBool,
    canceller: Mutex<Option<WatchCanceller>>,
    /// Counters for tests and metrics.
    pub lists: AtomicU64,
    pub watches: AtomicU64,
    pub relists_after_gone: AtomicU64,
    /// Bookmark interval hint for tests: server-side timeoutSeconds range.
    watch_timeout: (u64, u64),
}

impl Informer {
    pub fn new(kind: Kind, field_selector: &'static str, stop: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Informer {
            kind,
            field_selector,
            store: Arc::new(Store::new()),
            handlers: RwLock::new(Vec::new()),
            shape: Mutex::new(Shape::default()),
            synced: AtomicBool::new(false),
            started: AtomicBool::new(false),
            spawned: AtomicBool::new(false),
            stop,
            removed: AtomicBool::new(false),
            canceller: Mutex::new(None),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            relists_after_gone: AtomicU64::new(0),
            watch_timeout: (300, 600),
        })
    }

    /// Some reader needs whole objects: watch them in full (before start).
    pub fn need_full_objects(&self) {
        let mut s = self.shape.lock().unwrap_or_else(|p| p.into_inner());
        s.full = true;
        self.store.set_projection(None);
    }

    /// Some reader needs these parts (JSON pointers) beyond metadata (before start). Unless
    /// another reader needs whole objects, the store keeps only metadata and the union of
    /// the parts asked for.
    pub fn need_fields(&self, fields: &[&'static str]) {
        let mut s = self.shape.lock().unwrap_or_else(|p| p.into_inner());
        s.fields.extend(fields.iter().copied());
        if !s.full {
            self.store
                .set_projection(Some(s.fields.iter().copied().collect()));
        }
    }

    pub fn add_handler(&self, h: Handler) {
        self.handlers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(h);
    }

    /// Add a handler that first gets every object already in the store as `Added` (what a
    /// handler added to a running shared informer gets in client-go). Deliveries to handlers
    /// wait meanwhile, so the new handler never sees an older copy after a newer one.
    pub fn add_handler_with_replay(&self, h: Handler) {
        let mut hs = self.handlers.write().unwrap_or_else(|p| p.into_inner());
        for o in self.store.list() {
            h(&Delta {
                kind: DeltaKind::Added,
                old: None,
                new: Some(o),
            });
        }
        hs.push(h);
    }

    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// True the first time only: the caller is the one to start its thread.
    pub fn claim_thread(&self) -> bool {
        !self.spawned.swap(true, Ordering::SeqCst)
    }

    /// Stop this informer alone: its loop ends and its watch is closed.
    pub fn remove(&self) {
        self.removed.store(true, Ordering::SeqCst);
        self.cancel();
    }

    fn dispatch(&self, deltas: &[Delta]) {
        // Held while delivering, so that `add_handler_with_replay` cannot interleave.
        let hs = self.handlers.read().unwrap_or_else(|p| p.into_inner());
        for d in deltas {
            for h in hs.iter() {
                h(d);
            }
        }
    }

    fn selector(&self) -> Option<String> {
        Some(self.field_selector.to_string()).filter(|s| !s.is_empty())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.removed.load(Ordering::SeqCst)
    }

    /// End a watch in progress (shutdown).
    pub fn cancel(&self) {
        if let Some(c) = self
            .canceller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            c.cancel();
        }
    }

    /// No reader needs more than metadata: watch `PartialObjectMetadata`.
    fn metadata_only(&self) -> bool {
        let s = self.shape.lock().unwrap_or_else(|p| p.into_inner());
        !s.full && s.fields.is_empty()
    }

    /// Objects are decoded already shaped as the store keeps them.
    fn shape(&self) -> crate::api::trim::Shape {
        crate::api::trim::Shape {
            fields: self.store.projection(),
        }
    }

    fn list(&self, client: &Client, rv: Option<&str>, paginate: bool) -> Result<()> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        let opts = ListOptions {
            limit: paginate.then_some(500),
            resource_version: rv.map(str::to_string),
            field_selector: self.selector(),
            metadata_only: self.metadata_only(),
            shape: Some(self.shape()),
            ..Default::default()
        };
        let list = client.list_all(&self.kind, None, &opts)?;
        let deltas = self
            .store
            .replace_shaped(list.items, &list.resource_version);
        // Synced once the handlers have seen the first list (as client-go's registrations).
        self.dispatch(&deltas);
        self.synced.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Watch once from the store's resourceVersion until the stream ends.
    fn watch(&self, client: &Client) -> Result<()> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        let (lo, hi) = self.watch_timeout;
        let opts = WatchOptions {
            resource_version: self.store.resource_version(),
            timeout_seconds: fastrand::u64(lo..hi.max(lo + 1)),
            allow_bookmarks: true,
            field_selector: self.selector(),
            metadata_only: self.metadata_only(),
            shape: Some(self.shape()),
            ..Default::default()
        };
        let mut stream = client.watch(&self.kind, None, &opts)?;
        *self.canceller.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.canceller());
        if self.stopped() {
            stream.canceller().cancel();
            return Err(Error::Cancelled);
        }
        for ev in stream.events.by_ref() {
            let ev = ev?;
            let delta = match ev.kind {
                EventType::Bookmark => {
                    let rv = crate::obj::resource_version(&ev.object);
                    if !rv.is_empty() {
                        self.store.set_resource_version(rv);
                    }
                    None
                }
                EventType::Added => self.store.apply_shaped(DeltaKind::Added, ev.object),
                EventType::Modified => self.store.apply_shaped(DeltaKind::Updated, ev.object),
                EventType::Deleted => self.store.apply_shaped(DeltaKind::Deleted, ev.object),
            };
            if let Some(d) = delta {
                self.dispatch(std::slice::from_ref(&d));
            }
        }
        if let Some(e) = stream.events.read_error.take() {
            if !self.stopped() {
                log::debug!("watch {}: stream ended: {e}", self.kind);
            }
        }
        Ok(())
    }

    /// The reflector loop; returns when stopped.
    pub fn run(self: &Arc<Self>, client: &Client) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut backoff = Backoff::default();
        // First list: from the watch cache, as client-go does.
        let mut next_list: Option<(Option<String>, bool)> = Some((Some("0".into()), true));
        while !self.stopped() {
            if let Some((rv, paginate)) = next_list.take() {
                if let Err(e) = self.list(client, rv.as_deref(), paginate) {
                    if self.stopped() {
                        break;
                    }
                    let wait = if matches!(e, Error::Transport(_)) {
                        Duration::from_millis(500 + fastrand::u64(0..500))
                    } else {
                        backoff.next_delay(Instant::now())
                    };
                    log::warn!(
                        "cache {}: list failed: {e}; retrying in {:.1}s",
                        self.kind,
                        wait.as_secs_f64()
                    );
                    // After a 410 the next list must be a fresh consistent one.
                    let again = if e.is_gone() {
                        (Some(String::new()), true)
                    } else {
                        (rv, paginate)
                    };
                    next_list = Some(again);
                    self.sleep(wait);
                    continue;
                }
            }
            match self.watch(client) {
                Ok(()) => {} // normal end (timeout): watch again from the last resourceVersion
                Err(Error::Cancelled) => break,
                Err(e) if e.is_gone() => {
                    self.relists_after_gone.fetch_add(1, Ordering::Relaxed);
                    log::info!("cache {}: {e}; re-listing", self.kind);
                    next_list = Some((Some(String::new()), true));
                }
                Err(e) => {
                    if self.stopped() {
                        break;
                    }
                    let wait = match e.retry_after() {
                        Some(ra) => ra,
                        // The server is unreachable: trying again costs nothing, and an edge
                        // device wants to be back within a second of the apiserver.
                        None if matches!(e, Error::Transport(_)) => {
                            Duration::from_millis(500 + fastrand::u64(0..500))
                        }
                        None => backoff.next_delay(Instant::now()),
                    };
                    log::warn!(
                        "cache {}: watch failed: {e}; retrying in {:.1}s",
                        self.kind,
                        wait.as_secs_f64()
                    );
                    self.sleep(wait);
                    // Catch up with what was missed: re-list at the last resourceVersion.
                    next_list = Some((Some(self.store.resource_version()), false));
                }
            }
        }
    }

    fn sleep(&self, d: Duration) {
        let end = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(100)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::CONFIGMAPS;
    use serde_json::json;

    #[test]
    fn late_handlers_get_the_store_first_and_removal_stops() {
        let inf = Informer::new(CONFIGMAPS, "", Arc::new(AtomicBool::new(false)));
        for n in ["a", "b"] {
            inf.store.apply(
                DeltaKind::Added,
                json!({"metadata": {"name": n, "namespace": "ns", "resourceVersion": "1"}}),
            );
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        inf.add_handler_with_replay(Arc::new(move |d: &Delta| {
            s2.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((d.kind, crate::obj::name(d.object()).to_string()));
        }));
        // Later changes follow the replay.
        if let Some(d) = inf.store.apply(
            DeltaKind::Deleted,
            json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "2"}}),
        ) {
            inf.dispatch(&[d]);
        }
        let got = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(
            got,
            vec![
                (DeltaKind::Added, "a".to_string()),
                (DeltaKind::Added, "b".to_string()),
                (DeltaKind::Deleted, "a".to_string())
            ]
        );
        assert!(inf.claim_thread());
        assert!(!inf.claim_thread());
        assert!(!inf.stopped());
        inf.remove();
        assert!(inf.stopped());
    }

    #[test]
    fn backoff_grows_and_caps() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let d1 = b.next_delay(t);
        assert!(d1 >= Duration::from_millis(800) && d1 <= Duration::from_millis(1600));
        let mut last = Duration::ZERO;
        for i in 0..10 {
            last = b.next_delay(t + Duration::from_secs(i));
        }
        assert!(last <= Duration::from_secs(30));
        assert!(last >= Duration::from_secs(15));
        // after a quiet period it starts small again
        let d = b.next_delay(t + Duration::from_secs(1000));
        assert!(d <= Duration::from_millis(1600));
    }
}
