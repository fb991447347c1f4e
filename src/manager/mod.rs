//! The manager: wires controllers to the shared cache, waits for it to sync, runs each
//! controller's workers, applies the actions they return, and retries failures through the
//! workqueue's rate limiter. The worker loop exists once, here.

use crate::api::client::Client;
use crate::cache::Cache;
use crate::controller::{sooner, Controller, Cx, RunEnv};
use crate::events::Recorder;
use crate::queue::WorkQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

mod apply;

pub use apply::{apply, slow_start_sizes, MAX_PARALLEL};

use apply::Run;

struct Entry {
    ctrl: Arc<dyn Controller>,
    /// The identity this controller writes with.
    client: Client,
    /// None for a self-driven controller (it keeps its own queues).
    queue: Option<Arc<WorkQueue<String>>>,
}

pub struct Manager {
    cache: Arc<Cache>,
    recorder: Arc<Recorder>,
    entries: Vec<Entry>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Tells self-driven controllers to stop.
    stop: Arc<AtomicBool>,
}

fn worker(
    cache: Arc<Cache>,
    recorder: Arc<Recorder>,
    ctrl: Arc<dyn Controller>,
    client: Client,
    queue: Arc<WorkQueue<String>>,
) {
    while let Some(key) = queue.get() {
        let cx = Cx {
            cache: &cache,
            now: SystemTime::now(),
            client: &client,
        };
        match ctrl.reconcile(&cx, &key) {
            Ok(mut outcome) => {
                let run = Run {
                    cache: &cache,
                    client: &client,
                    recorder: &recorder,
                    ctrl: ctrl.as_ref(),
                    key: &key,
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
                    match ctrl.status_after_writes(&cx, &key) {
                        Ok(report) => {
                            for a in &report.actions {
                                run.one(a);
                            }
                            outcome.requeue_after =
                                sooner(outcome.requeue_after, report.requeue_after);
                        }
                        Err(e) => run
                            .failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(e),
                    }
                }
                let failures = run.failures.into_inner().unwrap_or_else(|p| p.into_inner());
                let conflict = failures.iter().any(|e| e.is_conflict());
                match failures.into_iter().next() {
                    // A stale read: look again at once, the watch brings the newer object.
                    Some(e) if conflict => {
                        log::debug!("{}: {key}: {e}; requeued", ctrl.name());
                        queue.add_after(key.clone(), Duration::from_millis(10));
                    }
                    // Shutting down: writes are refused; the queue takes nothing more.
                    Some(crate::Error::Cancelled) => {
                        log::debug!("{}: {key}: writes stopped for shutdown", ctrl.name());
                    }
                    Some(e) => {
                        log::warn!("{}: syncing {key} failed: {e}", ctrl.name());
                        queue.add_rate_limited(key.clone());
                    }
                    None => {
                        queue.forget(&key);
                        if let Some(d) = outcome.requeue_after {
                            queue.add_after(key.clone(), d);
                        }
                    }
                }
            }
            Err(e) => {
                log::warn!("{}: syncing {key} failed: {e}", ctrl.name());
                queue.add_rate_limited(key.clone());
            }
        }
        queue.done(&key);
    }
}

impl Manager {
    pub fn new(cache: Arc<Cache>, recorder: Arc<Recorder>) -> Self {
        Manager {
            cache,
            recorder,
            entries: Vec::new(),
            workers: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Register a controller: its informers and event handlers (nothing runs yet).
    pub fn add(&mut self, ctrl: Arc<dyn Controller>, client: Client) {
        if let Some(sd) = ctrl.self_driven() {
            sd.register(&self.cache);
            self.entries.push(Entry {
                ctrl,
                client,
                queue: None,
            });
            return;
        }
        let queue = WorkQueue::new(ctrl.queue_name());
        for w in ctrl.watches() {
            let inf = self.cache.informer_for(&w);
            let (c, q, cache) = (ctrl.clone(), queue.clone(), Arc::downgrade(&self.cache));
            inf.add_handler(Arc::new(move |d| {
                if let Some(cache) = cache.upgrade() {
                    for k in c.keys_for(&w, d, &cache) {
                        q.add(k);
                    }
                }
            }));
        }
        self.entries.push(Entry {
            ctrl,
            client,
            queue: Some(queue),
        });
    }

    pub fn controller_names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.ctrl.name()).collect()
    }

    /// Start the cache, wait for it to sync (or `stop`), then start every controller's workers.
    /// Returns false if stopped before the cache synced.
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
            if let Some(sd) = e.ctrl.self_driven() {
                log::info!("starting {}", e.ctrl.name());
                self.workers.extend(sd.start(RunEnv {
                    cache: self.cache.clone(),
                    client: e.client.clone(),
                    recorder: self.recorder.clone(),
                    stop: self.stop.clone(),
                }));
                continue;
            }
            let Some(queue) = &e.queue else { continue };
            let n = e.ctrl.workers().max(1);
            log::info!(
                "starting {} ({} worker{})",
                e.ctrl.name(),
                n,
                if n == 1 { "" } else { "s" }
            );
            for i in 0..n {
                let (cache, rec, ctrl, client, queue) = (
                    self.cache.clone(),
                    self.recorder.clone(),
                    e.ctrl.clone(),
                    e.client.clone(),
                    queue.clone(),
                );
                let t = std::thread::Builder::new()
                    .name(format!("{}-{i}", e.ctrl.name()))
                    .stack_size(512 * 1024)
                    .spawn(move || worker(cache, rec, ctrl, client, queue));
                match t {
                    Ok(t) => self.workers.push(t),
                    Err(err) => log::error!("cannot start a worker for {}: {err}", e.ctrl.name()),
                }
            }
        }
        true
    }

    /// Shutdown begins: no new reconciles (the queues shut down, self-driven controllers are
    /// told to stop, and `start` starts nothing any more); the keys in hand go on.
    pub fn stop_work(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for e in &self.entries {
            if let Some(q) = &e.queue {
                q.shut_down();
            }
            if let Some(sd) = e.ctrl.self_driven() {
                sd.shutdown();
            }
        }
    }

    /// Wait until every worker has finished the key in hand and returned, or `until`; true if
    /// all did. Workers still busy then are left to the end of the process.
    pub fn wait_workers(&mut self, until: Instant) -> bool {
        loop {
            let (done, busy): (Vec<_>, Vec<_>) =
                self.workers.drain(..).partition(|t| t.is_finished());
            for t in done {
                let _ = t.join();
            }
            self.workers = busy;
            if self.workers.is_empty() {
                return true;
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
