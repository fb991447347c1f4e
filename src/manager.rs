//! The manager: wires controllers to the shared cache, waits for it to sync, runs each
//! controller's workers, applies the actions they return, and retries failures through the
//! workqueue's rate limiter. The worker loop exists once, here.

use crate::api::client::Client;
use crate::cache::Cache;
use crate::controller::{
    sooner, Action, Applied, Controller, Cx, EventSpec, EventType, OnError, Report, RunEnv,
};
use crate::events::Recorder;
use crate::queue::WorkQueue;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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

/// Requests one reconcile runs at the same time (slow-start batches and parallel deletes).
pub const MAX_PARALLEL: usize = 16;

/// Upstream's slow-start batch sizes for `count` actions: 1, 2, 4, ... and what remains.
pub fn slow_start_sizes(count: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let (mut left, mut batch) = (count, 1usize);
    while left > 0 {
        let n = batch.min(left);
        sizes.push(n);
        left -= n;
        batch = batch.saturating_mul(2);
    }
    sizes
}

/// Apply one write or Event with `client`; keep the cache in step with our own writes. A
/// delete of something already gone is Ok. Composite actions (`Reported`, `SlowStart`,
/// `Parallel`) are run as the worker runs them, failing with the first failure.
pub fn apply(
    cache: &Cache,
    client: &Client,
    recorder: &Recorder,
    ctrl: &dyn Controller,
    action: &Action,
) -> crate::Result<()> {
    match action {
        Action::Reported { .. } | Action::SlowStart(_) | Action::Parallel(_) => {
            let run = Run {
                cache,
                client,
                recorder,
                ctrl,
                key: "",
                failures: Mutex::new(Vec::new()),
            };
            run.one(action);
            match run
                .failures
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .into_iter()
                .next()
            {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        _ => match apply_leaf(cache, client, recorder, ctrl, action) {
            Err(e) if e.is_not_found() && matches!(action, Action::Delete { .. }) => Ok(()),
            other => other.map(|_| ()),
        },
    }
}

/// One write; returns the server's answer where there is one. A delete that finds nothing is
/// the NotFound error (the cache forgets the object all the same).
fn apply_leaf(
    cache: &Cache,
    client: &Client,
    recorder: &Recorder,
    ctrl: &dyn Controller,
    action: &Action,
) -> crate::Result<Option<Value>> {
    let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    match action {
        Action::Create {
            kind,
            namespace,
            object,
        } => {
            let ns = opt(namespace);
            // Creating in a namespace being deleted is refused: once the apiserver said so,
            // the same answer is given here for a while without asking again (a replica
            // controller would otherwise send every missing pod, every sync, until the
            // namespace is gone).
            if cache.namespace_terminating(namespace) {
                return Err(crate::Error::api(
                    403,
                    "Forbidden",
                    format!(
                        "{kind} is forbidden: unable to create new content in namespace \
                         {namespace} because it is being terminated (recently refused; not sent)"
                    ),
                ));
            }
            let shape = cache.write_shape(*kind);
            let created = match client.create_shaped(kind, ns.as_deref(), object, shape.as_deref())
            {
                Err(e) if e.is_namespace_terminating() => {
                    cache.saw_namespace_terminating(namespace);
                    return Err(e);
                }
                r => r?,
            };
            log::debug!(
                "{}: created {} {}",
                ctrl.name(),
                kind,
                crate::obj::key(&created)
            );
            cache.observe_write(*kind, &created);
            Ok(Some(created))
        }
        Action::Update { kind, object } => {
            let shape = cache.write_shape(*kind);
            let v = client.update_shaped(kind, object, None, shape.as_deref())?;
            log::debug!("{}: updated {} {}", ctrl.name(), kind, crate::obj::key(&v));
            cache.observe_write(*kind, &v);
            Ok(Some(v))
        }
        Action::UpdateSubresource {
            kind,
            object,
            subresource,
        } => {
            let shape = cache.write_shape(*kind);
            let v = client.update_shaped(kind, object, Some(subresource), shape.as_deref())?;
            log::debug!(
                "{}: updated {} {} {}",
                ctrl.name(),
                kind,
                crate::obj::key(&v),
                subresource
            );
            cache.observe_write(*kind, &v);
            Ok(Some(v))
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
            let shape = cache.write_shape(*kind);
            let v = client.patch_shaped(
                kind,
                ns.as_deref(),
                name,
                *patch_type,
                patch,
                *subresource,
                shape.as_deref(),
            )?;
            log::debug!(
                "{}: patched {} {}",
                ctrl.name(),
                kind,
                crate::obj::make_key(namespace, name)
            );
            cache.observe_write(*kind, &v);
            Ok(Some(v))
        }
        Action::Delete {
            kind,
            namespace,
            name,
            options,
        } => {
            let ns = opt(namespace);
            let res = client.delete(kind, ns.as_deref(), name, options);
            if let Err(e) = &res {
                if !e.is_not_found() {
                    return Err(e.clone());
                }
            }
            log::debug!(
                "{}: deleted {} {}",
                ctrl.name(),
                kind,
                crate::obj::make_key(namespace, name)
            );
            cache.observe_delete(*kind, namespace, name);
            res.map(|_| None)
        }
        Action::Event(spec) => {
            recorder.record(client, ctrl.event_component(), spec.clone());
            Ok(None)
        }
        Action::Reported { action, .. } => apply_leaf(cache, client, recorder, ctrl, action),
        Action::SlowStart(list) | Action::Parallel(list) => {
            for a in list {
                apply_leaf(cache, client, recorder, ctrl, a)?;
            }
            Ok(None)
        }
    }
}

/// The actions of one reconcile being applied: failures the controller wants retried are
/// gathered; every write is told to the controller.
struct Run<'a> {
    cache: &'a Cache,
    client: &'a Client,
    recorder: &'a Recorder,
    ctrl: &'a dyn Controller,
    key: &'a str,
    failures: Mutex<Vec<crate::Error>>,
}

impl Run<'_> {
    /// Apply one action (composites included). False when it failed and the failure counts.
    fn one(&self, action: &Action) -> bool {
        match action {
            Action::SlowStart(list) => self.slow_start(list),
            Action::Parallel(list) => self.parallel(list) == 0,
            Action::Event(_) => {
                let _ = apply_leaf(self.cache, self.client, self.recorder, self.ctrl, action);
                true
            }
            Action::Reported {
                action: inner,
                report,
            } => {
                let res = apply_leaf(self.cache, self.client, self.recorder, self.ctrl, inner);
                let gone = matches!(&res, Err(e) if e.is_not_found())
                    && matches!(**inner, Action::Delete { .. });
                match &res {
                    _ if gone => {}
                    Ok(answer) => {
                        let name = match (answer, &**inner) {
                            (_, Action::Delete { name, .. }) => name.as_str(),
                            (Some(v), _) => crate::obj::name(v),
                            (None, _) => "",
                        };
                        self.event(
                            report,
                            EventType::Normal,
                            report.success_reason,
                            format!("{}{name}", report.success_prefix),
                        );
                    }
                    Err(e) if e.is_namespace_terminating() => {}
                    Err(e) => self.event(
                        report,
                        EventType::Warning,
                        report.failure_reason,
                        format!("{}{}", report.failure_prefix, e.message()),
                    ),
                }
                self.settle(inner, if gone { Ok(None) } else { res })
            }
            _ => {
                let res = apply_leaf(self.cache, self.client, self.recorder, self.ctrl, action);
                let gone = matches!(&res, Err(e) if e.is_not_found())
                    && matches!(action, Action::Delete { .. });
                self.settle(action, if gone { Ok(None) } else { res })
            }
        }
    }

    fn event(&self, report: &Report, event_type: EventType, reason: &str, message: String) {
        self.recorder.record(
            self.client,
            self.ctrl.event_component(),
            EventSpec {
                involved: report.about.clone(),
                event_type,
                reason: reason.to_string(),
                message,
            },
        );
    }

    /// Tell the controller, classify a failure. False when the failure counts.
    fn settle(&self, action: &Action, res: crate::Result<Option<Value>>) -> bool {
        match res {
            Ok(v) => {
                self.ctrl
                    .applied(self.key, action, Applied::Done(v.as_ref()));
                true
            }
            Err(e) => {
                self.ctrl.applied(self.key, action, Applied::Failed(&e));
                match self.ctrl.on_error(action, &e) {
                    OnError::Ignore => {
                        log::debug!("{}: {}: ignoring: {e}", self.ctrl.name(), self.key);
                        true
                    }
                    OnError::Retry => {
                        self.failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(e);
                        false
                    }
                }
            }
        }
    }

    /// Tell the controller about writes that were not tried.
    fn skip(&self, list: &[Action]) {
        for a in list {
            match a {
                Action::SlowStart(l) | Action::Parallel(l) => self.skip(l),
                Action::Reported { action, .. } => {
                    self.ctrl.applied(self.key, action, Applied::Skipped)
                }
                Action::Event(_) => {}
                _ => self.ctrl.applied(self.key, a, Applied::Skipped),
            }
        }
    }

    /// Batches of 1, 2, 4, ...; stop after the first batch with a failure. True if all went well.
    fn slow_start(&self, list: &[Action]) -> bool {
        let mut done = 0;
        for n in slow_start_sizes(list.len()) {
            let failed = self.parallel(&list[done..done + n]);
            done += n;
            if failed > 0 {
                if done < list.len() {
                    log::debug!(
                        "{}: {}: slow-start failure, skipping {} of {}",
                        self.ctrl.name(),
                        self.key,
                        list.len() - done,
                        list.len()
                    );
                }
                self.skip(&list[done..]);
                return false;
            }
        }
        true
    }

    /// Apply every action, up to MAX_PARALLEL at a time; returns how many failed.
    fn parallel(&self, list: &[Action]) -> usize {
        if list.len() <= 1 {
            return list.iter().filter(|a| !self.one(a)).count();
        }
        let next = AtomicUsize::new(0);
        let failed = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(a) = list.get(i) else { break };
            if !self.one(a) {
                failed.fetch_add(1, Ordering::SeqCst);
            }
        };
        // This thread takes its share too (and all of it if no helper could start).
        crate::pool::run_on_helpers(list.len().min(MAX_PARALLEL) - 1, &work);
        failed.into_inner()
    }
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
mod tests {
    use super::*;
    use crate::api::kubeconfig::RestConfig;
    use crate::api::resources::{EVENTS, PODS};
    use crate::cache::Delta;
    use crate::controller::{ObjectRef, Outcome, Watch};
    use crate::sandbox::{Sandbox, SandboxOptions};
    use serde_json::json;

    #[test]
    fn slow_start_batch_sizes() {
        assert_eq!(slow_start_sizes(0), Vec::<usize>::new());
        assert_eq!(slow_start_sizes(1), vec![1]);
        assert_eq!(slow_start_sizes(5), vec![1, 2, 2]);
        assert_eq!(slow_start_sizes(10), vec![1, 2, 4, 3]);
        assert_eq!(
            slow_start_sizes(500),
            vec![1, 2, 4, 8, 16, 32, 64, 128, 245]
        );
    }

    /// Records what the manager tells it.
    #[derive(Default)]
    struct Probe {
        seen: Mutex<Vec<(String, &'static str)>>,
    }

    impl Controller for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn queue_name(&self) -> &'static str {
            "probe"
        }
        fn watches(&self) -> Vec<Watch> {
            vec![]
        }
        fn keys_for(&self, _: &Watch, _: &Delta, _: &Cache) -> Vec<String> {
            vec![]
        }
        fn reconcile(&self, _: &Cx, _: &str) -> crate::Result<Outcome> {
            Ok(Outcome::none())
        }
        fn applied(&self, _key: &str, _a: &Action, r: Applied<'_>) {
            let entry = match r {
                Applied::Done(v) => (
                    v.map(|v| crate::obj::name(v).to_string())
                        .unwrap_or_default(),
                    "done",
                ),
                Applied::Failed(_) => (String::new(), "failed"),
                Applied::Skipped => (String::new(), "skipped"),
            };
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(entry);
        }
    }

    fn create_in(ns: &str) -> Action {
        Action::Reported {
            action: Box::new(Action::Create {
                kind: PODS,
                namespace: ns.to_string(),
                object: json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"generateName": "web-"}, "spec": {}}),
            }),
            report: Report {
                about: ObjectRef {
                    kind: "ReplicaSet".into(),
                    api_version: "apps/v1".into(),
                    namespace: "default".into(),
                    name: "web".into(),
                    uid: "u1".into(),
                    resource_version: "1".into(),
                },
                success_reason: "SuccessfulCreate",
                success_prefix: "Created pod: ",
                failure_reason: "FailedCreate",
                failure_prefix: "Error creating: ",
            },
        }
    }

    /// A sandbox API server, a client for it, an empty cache and a recorder.
    fn against_sandbox() -> (Sandbox, Client, Arc<Cache>, Recorder) {
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let cfg = RestConfig {
            server: sb.url(),
            source: "test".into(),
            ..Default::default()
        };
        let client = Client::new(&cfg, 0.0, 1, "test").expect("client");
        let cache = Cache::new(client.clone());
        (sb, client, cache, Recorder::start())
    }

    #[test]
    fn slow_start_stops_after_a_failed_batch_and_reports() {
        let (sb, client, cache, recorder) = against_sandbox();
        let pods = cache.store(PODS);
        let probe = Probe::default();
        // Batches 1, 2, 4, 2: the third batch goes to a namespace that does not exist.
        let mut list: Vec<Action> = (0..3).map(|_| create_in("default")).collect();
        list.extend((0..6).map(|_| create_in("missing")));
        let run = Run {
            cache: &cache,
            client: &client,
            recorder: &recorder,
            ctrl: &probe,
            key: "default/web",
            failures: Mutex::new(Vec::new()),
        };
        assert!(!run.one(&Action::SlowStart(list)));
        assert_eq!(run.failures.lock().map(|f| f.len()).unwrap_or(0), 4);
        let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let count = |what: &str| seen.iter().filter(|(_, w)| *w == what).count();
        assert_eq!(
            (count("done"), count("failed"), count("skipped")),
            (3, 4, 2)
        );
        let created: Vec<String> = seen
            .iter()
            .filter(|(_, w)| *w == "done")
            .map(|(n, _)| n.clone())
            .collect();
        assert!(created.iter().all(|n| n.starts_with("web-") && n.len() > 4));
        // Written into the cache at once.
        assert_eq!(pods.list_namespace("default").len(), 3);
        recorder.shutdown(Duration::from_secs(5));
        let events = sb.list(&EVENTS, Some("default"));
        let mut msgs: Vec<String> = events
            .iter()
            .filter(|e| e["reason"] == "SuccessfulCreate")
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect();
        msgs.sort();
        let mut want: Vec<String> = created
            .iter()
            .map(|n| format!("Created pod: {n}"))
            .collect();
        want.sort();
        assert_eq!(msgs, want);
        let failed: Vec<&Value> = events
            .iter()
            .filter(|e| e["reason"] == "FailedCreate")
            .collect();
        assert!(!failed.is_empty());
        assert!(failed.iter().all(|e| e["type"] == "Warning"
            && e["message"].as_str().is_some_and(
                |m| m.starts_with("Error creating: ") && !m.contains("server answered")
            )));
    }

    #[test]
    fn creates_in_a_namespace_seen_terminating_are_not_sent_again() {
        let (sb, client, cache, recorder) = against_sandbox();
        let probe = Probe::default();
        sb.create(
            &crate::api::resources::NAMESPACES,
            json!({"metadata": {"name": "doomed"}, "spec": {"finalizers": ["kubernetes"]}}),
        )
        .expect("namespace");
        sb.delete(&crate::api::resources::NAMESPACES, None, "doomed")
            .expect("terminating");
        let run = Run {
            cache: &cache,
            client: &client,
            recorder: &recorder,
            ctrl: &probe,
            key: "doomed/web",
            failures: Mutex::new(Vec::new()),
        };
        sb.clear_requests();
        let posts = || {
            sb.requests()
                .iter()
                .filter(|r| r.method == "POST" && r.path.contains("/namespaces/doomed/pods"))
                .count()
        };
        let batch = || Action::SlowStart((0..5).map(|_| create_in("doomed")).collect());
        // The first create is refused as terminating; the slow start stops there.
        run.one(&batch());
        assert_eq!(posts(), 1);
        assert!(cache.namespace_terminating("doomed"));
        assert!(!cache.namespace_terminating("default"));
        // The next sync's creates get the same answer without a request.
        run.one(&batch());
        assert_eq!(posts(), 1);
        let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen.iter().filter(|(_, w)| *w == "failed").count(), 2);
        let failures = run.failures.lock().map(|f| f.len()).unwrap_or(0);
        assert!(run
            .failures
            .lock()
            .map(|f| f.iter().all(crate::Error::is_namespace_terminating))
            .unwrap_or(false));
        assert_eq!(failures, 2);
        recorder.shutdown(Duration::from_secs(5));
    }

    #[test]
    fn reported_delete_of_a_missing_object_is_quiet() {
        let (sb, client, cache, recorder) = against_sandbox();
        let probe = Probe::default();
        let Action::Reported { report, .. } = create_in("default") else {
            panic!()
        };
        let del = Action::Reported {
            action: Box::new(Action::Delete {
                kind: PODS,
                namespace: "default".into(),
                name: "ghost".into(),
                options: Default::default(),
            }),
            report,
        };
        let run = Run {
            cache: &cache,
            client: &client,
            recorder: &recorder,
            ctrl: &probe,
            key: "default/web",
            failures: Mutex::new(Vec::new()),
        };
        assert!(run.one(&Action::Parallel(vec![del.clone(), del])));
        recorder.shutdown(Duration::from_secs(5));
        assert!(sb.list(&EVENTS, Some("default")).is_empty());
        let seen = probe.seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen.len(), 2);
        assert!(seen.iter().all(|(_, w)| *w == "done"));
    }
}
