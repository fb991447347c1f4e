//! The monitors: the kernel's discovery-driven monitors (`cache::monitors`) of every resource
//! with list, watch and delete, Events aside, feeding the owner graph; the workers start once
//! the first set synced, or after 30 s without it, as upstream v1.37's do; later changes of
//! the set never pause them.

use crate::api::discovery::{Discovery, Verbs};
use crate::api::Kind;
use crate::cache::monitors::{served_with, KeepFailed, Monitors, MonitorsConfig};
use crate::cache::Delta;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{resources_sync_error, Inner, Item, NAME, RESYNC_PERIOD};

const VERBS: Verbs = Verbs::LIST.union(Verbs::WATCH).union(Verbs::DELETE);

/// Resources never monitored (upstream's DefaultIgnoredResources).
pub fn ignored(k: &Kind) -> bool {
    k.plural == "events" && (k.group.is_empty() || k.group == "events.k8s.io")
}

/// The resources to monitor from a discovery.
pub fn monitored(d: &Discovery) -> BTreeSet<Kind> {
    served_with(d, VERBS, ignored)
}

impl Inner {
    /// Start the monitors; the workers start once their first set synced.
    pub(super) fn start_monitors(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        let env = self.env();
        let (observe, synced) = (Arc::downgrade(self), Arc::downgrade(self));
        let cfg = MonitorsConfig {
            name: NAME,
            verbs: VERBS,
            ignore: ignored,
            period: RESYNC_PERIOD,
            pause_workers: false,
            keep_failed_groups: KeepFailed::Synced,
            on_delta: Arc::new(move |kind: &Kind, d: &Delta| {
                if let Some(gc) = observe.upgrade() {
                    gc.observe(kind, d);
                }
            }),
            on_synced: Arc::new(move |first, all| {
                let Some(gc) = synced.upgrade() else { return };
                if !first {
                    if all {
                        log::info!("{NAME}: synced with discovery");
                    }
                    return;
                }
                if all {
                    log::info!("{NAME}: all resource monitors have synced");
                } else {
                    log::info!(
                        "{NAME}: not all resource monitors could be synced, proceeding anyways"
                    );
                }
                log::info!("{NAME}: proceeding to collect garbage");
                let inner = gc.clone();
                gc.env()
                    .run
                    .serve(NAME, gc.queue.clone(), gc.workers, move |item: &Item| {
                        inner.work(item)
                    });
            }),
            on_sync_error: Arc::new(resources_sync_error),
        };
        let (m, thread) =
            Monitors::start(cfg, env.cache.clone(), env.client.clone(), env.stop.clone());
        *SHARED.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&m);
        let _ = self.monitors.set(m);
        thread
    }
}

/// The running garbage collector's monitors, for the storage version migrator (upstream's
/// `GraphBuilder.GetMonitor`).
static SHARED: std::sync::Mutex<std::sync::Weak<Monitors>> =
    std::sync::Mutex::new(std::sync::Weak::new());

/// The garbage collector's monitors, while it runs.
pub fn shared() -> Option<Arc<Monitors>> {
    SHARED.lock().unwrap_or_else(|p| p.into_inner()).upgrade()
}
