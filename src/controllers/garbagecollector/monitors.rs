//! The monitors: discovery every 30 s (or sooner when a kind is missing), one metadata-only
//! informer per deletable resource, added and stopped as the served set changes, with the
//! workers paused until a new set has synced.

use crate::api::discovery::{Discovery, Verbs};
use crate::api::Kind;
use crate::cache::Delta;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{resources_sync_error, Inner, Item, Monitor, NAME, RESYNC_PERIOD};

/// The earliest a re-discovery may be brought forward after the previous one.
const EARLY_DISCOVERY: Duration = Duration::from_secs(5);

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

impl Inner {
    pub(super) fn sync_loop(self: Arc<Self>) {
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
            // The whole lists only at -v 4: the first sync adds every resource, over a
            // thousand characters on one line (upstream logs that diff at -v 2).
            log::info!(
                "{NAME}: syncing monitors with discovery (attempt {attempt}): added {}, removed {}",
                crate::logging::few(&added, 6),
                crate::logging::few(&removed, 6)
            );
            log::trace!("{NAME}: monitors added {added:?}, removed {removed:?}");
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
            let inner = self.clone();
            self.env().run.serve(
                NAME,
                self.queue.clone(),
                self.workers,
                move |item: &Item| inner.work(item),
            );
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
    pub(super) fn request_discovery(&self) {
        let mut last = self.last_early.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < EARLY_DISCOVERY) {
            return;
        }
        *last = Some(Instant::now());
        *self.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake_cv.notify_all();
    }
}
