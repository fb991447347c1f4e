//! The manager: wires controllers to the shared cache, waits for it to sync, serves each
//! reconciling controller's queue with the shared worker loop (`crate::runtime::workers`), applies the
//! actions the reconciles return, retries failures through the workqueue's rate limiter, and
//! runs the periodic resyncs.

use crate::api::client::Client;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{sooner, Controller, Cx, RunEnv, Runnable, Served, Settings, SyncEnd};
use crate::events::Recorder;
use crate::queue::WorkQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

mod apply;

pub use apply::{apply, slow_start_sizes, MAX_PARALLEL};

use apply::Run;
#[cfg(test)]
use apply::{generated_name, NAME_ALPHABET};

struct Entry {
    ctrl: Runnable,
    /// Its row's facts: name, queue name, Event source, workers, retries.
    settings: Settings,
    /// The identity this controller writes with.
    client: Client,
    /// A reconciling controller's queue (a self-driven one keeps its own).
    queue: Option<Arc<WorkQueue<String>>>,
}

pub struct Manager {
    cache: Arc<Cache>,
    recorder: Arc<Recorder>,
    entries: Vec<Entry>,
    /// Every worker pool (the reconcilers' and those self-driven controllers serve).
    served: Arc<Mutex<Vec<Arc<dyn Served>>>>,
    /// Threads self-driven controllers started themselves.
    threads: Vec<JoinHandle<()>>,
    /// Tells self-driven controllers to stop.
    stop: Arc<AtomicBool>,
}

/// One key of a reconciling controller: reconcile, apply the actions, decide about a retry.
fn sync_key(
    cache: &Cache,
    recorder: &Recorder,
    ctrl: &dyn Controller,
    settings: &Settings,
    client: &Client,
    queue: &WorkQueue<String>,
    key: &String,
) {
    let cx = Cx {
        cache,
        now: SystemTime::now(),
        client,
    };
    let began = std::time::Instant::now();
    let mut outcome = match ctrl.reconcile(&cx, key) {
        Ok(o) => o,
        Err(e) => {
            ctrl.synced(key, began, SyncEnd::Failed(&e));
            log::warn!("{}: syncing {key} failed: {e}", settings.name);
            retry_or_forget(settings, queue, key);
            return;
        }
    };
    let run = Run {
        cache,
        client,
        recorder,
        ctrl,
        settings,
        key,
        failures: Mutex::new(Vec::new()),
    };
    for a in &outcome.actions {
        run.one(a);
    }
    if outcome.status_after_writes {
        let cx = Cx {
            now: SystemTime::now(),
            ..cx
        };
        match ctrl.status_after_writes(&cx, key) {
            Ok(report) => {
                for a in &report.actions {
                    run.one(a);
                }
                outcome.requeue_after = sooner(outcome.requeue_after, report.requeue_after);
            }
            Err(e) => run
                .failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e),
        }
    }
    let failures = run.failures.into_inner().unwrap_or_else(|p| p.into_inner());
    ctrl.synced(key, began, SyncEnd::of(failures.first(), &outcome));
    let conflict = failures.iter().any(|e| e.is_conflict());
    match failures.into_iter().next() {
        // A stale read: look again at once, the watch brings the newer object.
        Some(e) if conflict => {
            log::debug!("{}: {key}: {e}; requeued", settings.name);
            queue.add_after(key.clone(), Duration::from_millis(10));
        }
        // Shutting down: writes are refused; the queue takes nothing more.
        Some(crate::Error::Cancelled) => {
            log::debug!("{}: {key}: writes stopped for shutdown", settings.name);
        }
        Some(e) => {
            log::warn!("{}: syncing {key} failed: {e}", settings.name);
            retry_or_forget(settings, queue, key);
        }
        None if outcome.retry_quietly.is_some() => {
            let why = outcome.retry_quietly.as_deref().unwrap_or("");
            log::trace!("{}: {key}: {why}; retried later", settings.name);
            queue.add_rate_limited(key.clone());
        }
        None => {
            queue.forget(key);
            if let Some(d) = outcome.requeue_after {
                queue.add_after(key.clone(), d);
            }
        }
    }
}

/// A failed key back through the rate limiter, unless the controller's `max_retries` are
/// used up (then it is forgotten until something queues it again).
fn retry_or_forget(settings: &Settings, queue: &WorkQueue<String>, key: &String) {
    if settings
        .max_retries
        .is_some_and(|m| queue.num_requeues(key) >= m)
    {
        log::debug!("{}: {key}: retried several times, dropped", settings.name);
        queue.forget(key);
        return;
    }
    queue.add_rate_limited(key.clone());
}

/// A resync: every object of the primary watch through `keys_for` as an unchanged update.
fn resync(cache: &Cache, ctrl: &dyn Controller, queue: &WorkQueue<String>) {
    let Some(w) = ctrl.watches().into_iter().next() else {
        return;
    };
    for o in cache.store_for(&w).list() {
        let d = Delta {
            kind: DeltaKind::Updated,
            old: Some(o.clone()),
            new: Some(o),
        };
        for k in ctrl.keys_for(&w, &d, cache) {
            queue.add(k);
        }
    }
}

impl Manager {
    pub fn new(cache: Arc<Cache>, recorder: Arc<Recorder>) -> Self {
        Manager {
            cache,
            recorder,
            entries: Vec::new(),
            served: Arc::new(Mutex::new(Vec::new())),
            threads: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Register a controller, with the settings of its row: its informers and event handlers
    /// (nothing runs yet).
    pub fn add(&mut self, ctrl: Runnable, settings: Settings, client: Client) {
        let c = match &ctrl {
            Runnable::Drives(sd) => {
                sd.register(&self.cache);
                self.entries.push(Entry {
                    ctrl,
                    settings,
                    client,
                    queue: None,
                });
                return;
            }
            Runnable::Reconciles { ctrl: c, .. } => c.clone(),
        };
        let queue = match c.rate_limiter() {
            Some(rl) => WorkQueue::with_rate_limiter(settings.queue, rl),
            None => WorkQueue::new(settings.queue),
        };
        for w in c.watches() {
            let inf = self.cache.informer_for(&w);
            let (c, q, cache) = (c.clone(), queue.clone(), Arc::downgrade(&self.cache));
            inf.add_handler(Arc::new(move |d| {
                if let Some(cache) = cache.upgrade() {
                    for (k, delay) in c.delayed_keys_for(&w, d, &cache) {
                        if delay.is_zero() {
                            q.add(k);
                        } else {
                            q.add_after(k, delay);
                        }
                    }
                }
            }));
        }
        self.entries.push(Entry {
            ctrl,
            settings,
            client,
            queue: Some(queue),
        });
    }

    pub fn controller_names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.settings.name).collect()
    }

    /// Start the cache, wait for it to sync (or `stop`), then start every controller: its
    /// workers take keys as they come (no thread waits on an empty queue). Returns false if
    /// stopped before the cache synced.
    pub fn start(&mut self, stop: &AtomicBool) -> bool {
        // Shutdown may have begun before this thread got the manager.
        let stopped = |own: &AtomicBool| stop.load(Ordering::SeqCst) || own.load(Ordering::SeqCst);
        if stopped(&self.stop) {
            return false;
        }
        self.cache.start();
        while !self.cache.wait_for_sync(Duration::from_millis(200)) {
            if stopped(&self.stop) {
                return false;
            }
        }
        if stopped(&self.stop) {
            return false;
        }
        log::info!("caches synced for {} kinds", self.cache.kinds().len());
        for e in &self.entries {
            let env = RunEnv {
                cache: self.cache.clone(),
                client: e.client.clone(),
                recorder: self.recorder.clone(),
                stop: self.stop.clone(),
                served: self.served.clone(),
            };
            match (&e.ctrl, &e.queue) {
                (Runnable::Drives(sd), _) => {
                    log::info!("starting {}", e.settings.name);
                    self.threads.extend(sd.start(&env));
                }
                (
                    Runnable::Reconciles {
                        ctrl: c,
                        resync: every,
                    },
                    Some(queue),
                ) => {
                    let s = e.settings;
                    let n = s.workers.max(1);
                    log::info!(
                        "starting {} ({} worker{})",
                        s.name,
                        n,
                        if n == 1 { "" } else { "s" }
                    );
                    let (cache, rec, ctrl, client, q) = (
                        self.cache.clone(),
                        self.recorder.clone(),
                        c.clone(),
                        e.client.clone(),
                        queue.clone(),
                    );
                    env.serve(s.name, queue.clone(), n, move |key: &String| {
                        sync_key(&cache, &rec, ctrl.as_ref(), &s, &client, &q, key)
                    });
                    for k in c.initial_keys() {
                        queue.add(k);
                    }
                    if let Some(period) = *every {
                        let (cache, ctrl, q) = (
                            Arc::downgrade(&self.cache),
                            c.clone(),
                            Arc::downgrade(queue),
                        );
                        crate::runtime::timer::every(period, move || {
                            let (Some(cache), Some(q)) = (cache.upgrade(), q.upgrade()) else {
                                return false;
                            };
                            if q.shutting_down() {
                                return false;
                            }
                            let ctrl = ctrl.clone();
                            crate::runtime::pool::spawn(move || resync(&cache, ctrl.as_ref(), &q));
                            true
                        });
                    }
                }
                (Runnable::Reconciles { .. }, None) => {}
            }
        }
        true
    }

    /// Shutdown begins: no new reconciles (the queues shut down, self-driven controllers are
    /// told to stop, and `start` starts nothing any more); the keys in hand go on.
    pub fn stop_work(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.served.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            w.stop();
        }
        for e in &self.entries {
            if let Some(q) = &e.queue {
                q.shut_down();
            }
            if let Runnable::Drives(sd) = &e.ctrl {
                sd.shutdown();
            }
        }
    }

    /// Wait until every worker has finished the key in hand, and every thread of a
    /// self-driven controller returned, or `until`; true if all did. Work still going on then
    /// is left to the end of the process.
    pub fn wait_workers(&mut self, until: Instant) -> bool {
        let served: Vec<_> = self
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut all = true;
        for w in served {
            all &= w.wait(until);
        }
        loop {
            let (done, busy): (Vec<_>, Vec<_>) =
                self.threads.drain(..).partition(|t| t.is_finished());
            for t in done {
                let _ = t.join();
            }
            self.threads = busy;
            if self.threads.is_empty() {
                return all;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests;
