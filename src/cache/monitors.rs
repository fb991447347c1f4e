//! Discovery-driven monitors: a metadata-only informer for every served resource with the
//! verbs a controller needs, for the controllers that watch "everything" (the garbage
//! collector; resource quota counts every resource too). Discovery runs every `period`, or
//! sooner when asked (a reference to a kind discovery does not know yet, at most every 5 s);
//! informers are added and stopped as the served set changes. After a change, the new set is
//! given one `period` to sync; a set that does not is counted as a sync error and kept (its
//! informers go on trying), never retried in a loop, as upstream v1.37's `GarbageCollector.Sync`
//! and resource quota's `Sync` do. Resource quota's workers are paused (`working`) during
//! that wait; the garbage collector's are not (`pause_workers`). A group whose discovery
//! failed keeps the monitors it had (`keep_failed_groups`).

use crate::api::client::Client;
use crate::api::discovery::{Discovery, Verbs};
use crate::api::Kind;
use crate::cache::{Cache, Delta, Informer};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The earliest a re-discovery may be brought forward after the previous one.
const EARLY_DISCOVERY: Duration = Duration::from_secs(5);

/// Called with every change of a monitored object and its kind.
pub type DeltaHandler = Arc<dyn Fn(&Kind, &Delta) + Send + Sync>;

/// What a set of monitors is for.
pub struct MonitorsConfig {
    /// The owner's name, for logs (e.g. `garbage-collector-controller`).
    pub name: &'static str,
    /// The verbs a resource must support to be monitored.
    pub verbs: Verbs,
    /// Resources never monitored.
    pub ignore: fn(&Kind) -> bool,
    pub period: Duration,
    /// Hold the workers (`working`) while a changed set syncs (resource quota), or let them
    /// run (the garbage collector in v1.37).
    pub pause_workers: bool,
    /// What a group whose discovery failed keeps of its monitors.
    pub keep_failed_groups: KeepFailed,
    /// Every change of a monitored object (runs on the watch path).
    pub on_delta: DeltaHandler,
    /// A new set was given its time to sync: (the first set, whether it synced).
    pub on_synced: Arc<dyn Fn(bool, bool) + Send + Sync>,
    /// A discovery found nothing to monitor, or a set did not sync in time.
    pub on_sync_error: Arc<dyn Fn() + Send + Sync>,
}

/// The monitors kept for a group version whose discovery failed (upstream's "partial
/// discovery" handling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepFailed {
    /// Those that had synced (the garbage collector).
    Synced,
    /// All of them (resource quota).
    All,
}

struct Monitor {
    informer: Arc<Informer>,
    active: Arc<AtomicBool>,
    /// Created for these monitors (stopped with them), not shared with another reader.
    owned: bool,
}

/// The resources to monitor from a discovery.
pub fn served_with(d: &Discovery, verbs: Verbs, ignore: fn(&Kind) -> bool) -> BTreeSet<Kind> {
    d.preferred_with(verbs)
        .into_iter()
        .map(|r| r.kind)
        .filter(|k| !ignore(k))
        .collect()
}

/// Monitors of every served resource (see the module docs).
pub struct Monitors {
    cfg: MonitorsConfig,
    cache: Arc<Cache>,
    client: Client,
    stop: Arc<AtomicBool>,
    discovery: RwLock<Arc<Discovery>>,
    monitors: Mutex<HashMap<Kind, Monitor>>,
    /// Workers hold it shared while working; a change of the monitored set holds it alone.
    gate: RwLock<()>,
    synced_once: AtomicBool,
    /// Ask for an early discovery (or wake for shutdown).
    wake: Mutex<bool>,
    wake_cv: Condvar,
    last_early: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Monitors {
    /// Start discovering on a thread of their own (named `monitors`), which returns after
    /// `stop` is set and `wake` is called.
    pub fn start(
        cfg: MonitorsConfig,
        cache: Arc<Cache>,
        client: Client,
        stop: Arc<AtomicBool>,
    ) -> (Arc<Self>, Option<JoinHandle<()>>) {
        let m = Arc::new(Monitors {
            cfg,
            cache,
            client,
            stop,
            discovery: RwLock::new(Arc::new(Discovery::default())),
            monitors: Mutex::new(HashMap::new()),
            gate: RwLock::new(()),
            synced_once: AtomicBool::new(false),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            last_early: Mutex::new(None),
        });
        let m2 = m.clone();
        let t = std::thread::Builder::new()
            .name("monitors".into())
            .stack_size(512 * 1024)
            .spawn(move || m2.sync_loop());
        match t {
            Ok(t) => (m, Some(t)),
            Err(e) => {
                log::error!("{}: cannot start its discovery thread: {e}", m.cfg.name);
                (m, None)
            }
        }
    }

    /// The informer monitoring `group`/`plural`, if one is active, and whether it synced.
    pub fn informer_of(&self, group: &str, plural: &str) -> Option<(Arc<Informer>, bool)> {
        lock(&self.monitors)
            .iter()
            .find(|(k, m)| {
                k.group == group && k.plural == plural && m.active.load(Ordering::SeqCst)
            })
            .map(|(_, m)| (m.informer.clone(), m.informer.has_synced()))
    }

    /// The last discovery.
    pub fn discovery(&self) -> Arc<Discovery> {
        self.discovery
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Held by a worker while it works: a change of the monitored set waits for it, and
    /// workers wait while one is synced.
    pub fn working(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A kind was not found: bring the next discovery forward (at most every 5 s).
    pub fn request_discovery(&self) {
        let mut last = lock(&self.last_early);
        if last.is_some_and(|t| t.elapsed() < EARLY_DISCOVERY) {
            return;
        }
        *last = Some(Instant::now());
        self.wake();
    }

    /// Wake the discovery thread (for an early discovery, or to see `stop`).
    pub fn wake(&self) {
        *lock(&self.wake) = true;
        self.wake_cv.notify_all();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn sync_loop(self: Arc<Self>) {
        let mut current: BTreeSet<Kind> = BTreeSet::new();
        while !self.stopped() {
            self.resync_once(&mut current);
            self.wait_for_wake(self.cfg.period);
        }
    }

    /// The resources to monitor, or None when discovery failed or found nothing. Resources of
    /// `current` in a group version whose discovery failed are kept (see [`KeepFailed`]).
    fn discover(&self, current: &BTreeSet<Kind>) -> Option<BTreeSet<Kind>> {
        let name = self.cfg.name;
        match Discovery::fetch(&self.client) {
            Ok(d) => {
                if let Some(f) = d.failure() {
                    log::info!("{name}: failed to discover some groups: {f}");
                }
                let mut set = served_with(&d, self.cfg.verbs, self.cfg.ignore);
                if set.is_empty() {
                    *self.discovery.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
                    log::info!("{name}: no resources reported by discovery, skipping sync");
                    (self.cfg.on_sync_error)();
                    return None;
                }
                for k in current {
                    if d.failed.contains_key(&k.api_version()) && self.keeps(k) {
                        set.insert(*k);
                    }
                }
                *self.discovery.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(d);
                Some(set)
            }
            Err(e) => {
                log::info!("{name}: failed to discover preferred resources: {e}");
                (self.cfg.on_sync_error)();
                None
            }
        }
    }

    /// Whether the monitor of `k`, in a group version whose discovery failed, is kept.
    fn keeps(&self, k: &Kind) -> bool {
        match self.cfg.keep_failed_groups {
            KeepFailed::All => true,
            KeepFailed::Synced => lock(&self.monitors)
                .get(k)
                .is_some_and(|m| m.informer.has_synced()),
        }
    }

    fn resync_once(self: &Arc<Self>, current: &mut BTreeSet<Kind>) {
        let name = self.cfg.name;
        let Some(wanted) = self.discover(current) else {
            return;
        };
        if wanted == *current {
            return;
        }
        let paused = self
            .cfg
            .pause_workers
            .then(|| self.gate.write().unwrap_or_else(|p| p.into_inner()));
        let added: Vec<String> = wanted.difference(current).map(|k| k.to_string()).collect();
        let removed: Vec<String> = current.difference(&wanted).map(|k| k.to_string()).collect();
        // The whole lists only at -v 4: the first sync adds every resource, over a thousand
        // characters on one line (upstream logs that diff at -v 2).
        log::info!(
            "{name}: syncing monitors with discovery: added {}, removed {}",
            crate::runtime::logging::few(&added, 6),
            crate::runtime::logging::few(&removed, 6)
        );
        log::trace!("{name}: monitors added {added:?}, removed {removed:?}");
        self.sync_monitors(&wanted);
        // Kept even when it does not sync in time: its informers go on trying, and the next
        // discovery stops those whose resources went away.
        *current = wanted;
        let synced = self.wait_monitors_synced(self.cfg.period);
        if self.stopped() {
            return;
        }
        if !synced {
            (self.cfg.on_sync_error)();
            log::warn!(
                "{name}: timed out waiting for the monitors to sync: {}",
                crate::runtime::logging::few(&self.unsynced(), 6)
            );
        }
        drop(paused);
        let first = !self.synced_once.swap(true, Ordering::SeqCst);
        (self.cfg.on_synced)(first, synced);
    }

    /// The monitored resources whose informers have not synced.
    fn unsynced(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.monitors)
            .iter()
            .filter(|(_, m)| !m.informer.has_synced())
            .map(|(k, _)| k.to_string())
            .collect();
        crate::sort::sort(&mut v);
        v
    }

    fn sync_monitors(self: &Arc<Self>, wanted: &BTreeSet<Kind>) {
        let mut monitors = lock(&self.monitors);
        let gone: Vec<Kind> = monitors
            .keys()
            .filter(|k| !wanted.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(m) = monitors.remove(&k) {
                m.active.store(false, Ordering::SeqCst);
                if m.owned {
                    self.cache.remove_informer(k);
                }
            }
        }
        for k in wanted {
            if monitors.contains_key(k) {
                continue;
            }
            let owned = !self.cache.has_informer(*k);
            let informer = self.cache.metadata_informer(*k);
            let active = Arc::new(AtomicBool::new(true));
            let (weak, flag, kind): (Weak<Monitors>, _, Kind) =
                (Arc::downgrade(self), active.clone(), *k);
            informer.add_handler_with_replay(Arc::new(move |d: &Delta| {
                if !flag.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(m) = weak.upgrade() {
                    (m.cfg.on_delta)(&kind, d);
                }
            }));
            self.cache.start_informer(&informer);
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
        let m = lock(&self.monitors);
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
        let mut woken = lock(&self.wake);
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
}
