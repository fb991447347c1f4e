//! The manager: wires controllers to the shared cache, waits for it to sync, runs each
//! controller's workers, applies the actions they return, and retries failures through the
//! workqueue's rate limiter. The worker loop exists once, here.

use crate::api::client::Client;
use crate::cache::Cache;
use crate::controllers::{Action, Controller, Cx, OnError, RunEnv};
use crate::events::Recorder;
use crate::queue::WorkQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

struct Entry {
    ctrl: Arc<dyn Controller>,
    /// The identity this controller writes with.
    client: Client,
    queue: Arc<WorkQueue<String>>,
}

pub struct Manager {
    cache: Arc<Cache>,
    recorder: Arc<Recorder>,
    entries: Vec<Entry>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Tells self-driven controllers to stop.
    stop: Arc<AtomicBool>,
}

/// Apply one action with `client`; keep the cache in step with our own writes.
pub fn apply(
    cache: &Cache,
    client: &Client,
    recorder: &Recorder,
    ctrl: &dyn Controller,
    action: &Action,
) -> crate::Result<()> {
    let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    match action {
        Action::Create {
            kind,
            namespace,
            object,
        } => {
            let ns = opt(namespace);
            let created = client.create(kind, ns.as_deref(), object)?;
            log::debug!(
                "{}: created {} {}",
                ctrl.name(),
                kind,
                crate::obj::key(&created)
            );
            cache.observe_write(*kind, &created);
        }
        Action::Update { kind, object } => {
            let v = client.update(kind, object)?;
            log::debug!("{}: updated {} {}", ctrl.name(), kind, crate::obj::key(&v));
            cache.observe_write(*kind, &v);
        }
        Action::UpdateSubresource {
            kind,
            object,
            subresource,
        } => {
            let v = client.update_subresource(kind, object, subresource)?;
            log::debug!(
                "{}: updated {} {} {}",
                ctrl.name(),
                kind,
                crate::obj::key(&v),
                subresource
            );
            cache.observe_write(*kind, &v);
        }
        Action::Patch {
            kind,
            namespace,
            name,
            patch_type,
            patch,
            subresource,
        } => {
            let ns = opt(namespace);
            let v = client.patch(kind, ns.as_deref(), name, *patch_type, patch, *subresource)?;
            log::debug!(
                "{}: patched {} {}",
                ctrl.name(),
                kind,
                crate::obj::make_key(namespace, name)
            );
            cache.observe_write(*kind, &v);
        }
        Action::Delete {
            kind,
            namespace,
            name,
            options,
        } => {
            let ns = opt(namespace);
            match client.delete(kind, ns.as_deref(), name, options) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            log::debug!(
                "{}: deleted {} {}",
                ctrl.name(),
                kind,
                crate::obj::make_key(namespace, name)
            );
            cache.observe_delete(*kind, namespace, name);
        }
        Action::Event(spec) => recorder.record(client, ctrl.event_component(), spec.clone()),
    }
    Ok(())
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
            Ok(outcome) => {
                let mut failed: Option<crate::Error> = None;
                let mut conflict = false;
                for a in &outcome.actions {
                    if let Err(e) = apply(&cache, &client, &recorder, ctrl.as_ref(), a) {
                        match ctrl.on_error(a, &e) {
                            OnError::Ignore => {
                                log::debug!("{}: {key}: ignoring: {e}", ctrl.name());
                            }
                            OnError::Retry => {
                                conflict |= e.is_conflict();
                                if failed.is_none() {
                                    failed = Some(e);
                                }
                            }
                        }
                    }
                }
                match failed {
                    // A stale read: look again at once, the watch brings the newer object.
                    Some(e) if conflict => {
                        log::debug!("{}: {key}: {e}; requeued", ctrl.name());
                        queue.add_after(key.clone(), Duration::from_millis(10));
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
        let queue = WorkQueue::new(ctrl.name());
        if let Some(sd) = ctrl.self_driven() {
            sd.register(&self.cache);
        }
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
            queue,
        });
    }

    pub fn controller_names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.ctrl.name()).collect()
    }

    /// Start the cache, wait for it to sync (or `stop`), then start every controller's workers.
    /// Returns false if stopped before the cache synced.
    pub fn start(&mut self, stop: &AtomicBool) -> bool {
        self.cache.start();
        while !self.cache.wait_for_sync(Duration::from_millis(200)) {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
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
                    e.queue.clone(),
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

    /// Stop: no new work, let workers finish the key in hand, stop the cache.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for e in &self.entries {
            e.queue.shut_down();
            if let Some(sd) = e.ctrl.self_driven() {
                sd.shutdown();
            }
        }
        for t in self.workers.drain(..) {
            let _ = t.join();
        }
        self.cache.stop();
        self.recorder.shutdown(Duration::from_secs(2));
    }
}
