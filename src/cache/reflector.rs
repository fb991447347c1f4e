//! One reflector per kind: list, then watch from the list's resourceVersion; re-list and swap
//! atomically on 410; back off on other failures (client-go's Reflector, inventory 5a/5b).
//!
//! A reflector is a task on the watch threads (`crate::runtime::reactor`): the watch stream is read
//! there (`Client::watch_async`), its events stored and handed to the handlers there, and the
//! backoff waits are timers. A list is a blocking request and runs on a helper thread
//! (`pool::unblock`), store replacement and handlers included; at most [`LISTS`] run at once,
//! so the hundreds of informers of a cluster with many CRDs do not start as many helpers,
//! all waiting on the client's QPS limiter. Stopping an informer drops its task's future:
//! the watch connection closes and a backoff wait ends at once.

use super::store::{Delta, DeltaKind, Store};
use crate::api::client::{Client, ListOptions, WatchOptions};
use crate::api::watch::EventType;
use crate::api::Kind;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Lists that run at once, over every informer (each holds a helper thread while it runs).
const LISTS: usize = 8;

/// How many of a list's changes are decoded and handed to the handlers at a time.
const DISPATCH_CHUNK: usize = 64;

static LIST_SLOTS: smol::lock::Semaphore = smol::lock::Semaphore::new(LISTS);

pub type Handler = Arc<dyn Fn(&Delta) + Send + Sync>;

/// Backoff for list/watch failures: exponential with jitter (between d and 2d, capped),
/// reset after 2 min of good behaviour.
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    /// client-go's reflector backoff: 800 ms doubling to 30 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(800), Duration::from_secs(30))
    }
}

impl Backoff {
    const RESET: Duration = Duration::from_secs(120);

    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
            last_failure: None,
        }
    }

    /// The wait before the next attempt (jitter factor 1: between d and 2d, capped).
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        if self
            .last_failure
            .is_some_and(|t| now.saturating_duration_since(t) > Self::RESET)
        {
            self.next = self.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let jittered = base.mul_f64(1.0 + fastrand::f64());
        jittered.min(self.max)
    }

    /// True once the delays have reached their cap.
    fn at_cap(&self) -> bool {
        self.next >= self.max
    }
}

/// The wait after a failed list or watch: the server's `Retry-After`, else the next step of the
/// backoff; and whether that backoff is at its cap.
fn retry_wait(e: &Error, b: &mut Backoff) -> (Duration, bool) {
    let wait = e
        .retry_after()
        .unwrap_or_else(|| b.next_delay(Instant::now()));
    (wait, b.at_cap())
}

/// A reflector's waits after failures: its backoff, ended early when the server's readiness
/// probe finds it ready again (`ready`), at most `ready::MAX_RELEASES` times in one run of
/// failures.
struct Retry {
    backoff: Backoff,
    released: u32,
    /// Released, or waited while the server was coming back (`ready::recovering`): the next
    /// list and watch skip the client's QPS limiter, paced by the backoff alone, so that
    /// every cache is back at once (lists still run at most `LISTS` at a time) and the
    /// failures of an outage do not empty the limiter's bucket.
    unlimited: bool,
}

impl Retry {
    fn new() -> Self {
        Retry {
            backoff: Backoff::default(),
            released: 0,
            unlimited: false,
        }
    }

    /// The next wait after `e`, its length and whether the backoff is at its cap.
    fn delay(&mut self, e: &Error) -> (Duration, bool) {
        retry_wait(e, &mut self.backoff)
    }

    async fn wait(&mut self, client: &Client, e: &Error, delay: Duration) {
        self.unlimited = false;
        if self.released >= super::ready::MAX_RELEASES || e.retry_after().is_some() {
            async_io::Timer::after(delay).await;
            return;
        }
        if super::ready::wait(client, super::ready::Cause::of(e), delay).await {
            // The backoff goes on (reset after 2 minutes without failures): the probe
            // brings the cache back, and the next outage is not met with short retries.
            self.released += 1;
            self.unlimited = true;
        } else {
            self.unlimited = super::ready::recovering(client);
        }
    }

    /// A list worked: the run of failures is over.
    fn succeeded(&mut self) {
        self.released = 0;
    }
}

/// After a failed list: the list to make at once instead of backing off, when the
/// resourceVersion it asked for is gone (410) or not reached yet by the server's cache (as
/// right after an apiserver restart): a consistent list (`resourceVersion=""`), client-go's
/// `isLastSyncResourceVersionUnavailable`. A consistent list that fails backs off as any.
fn consistent_relist(e: &Error, rv: Option<&str>) -> Option<(Option<String>, bool)> {
    let unavailable = e.is_gone() || e.is_resource_version_too_large();
    (unavailable && rv != Some("")).then(|| (Some(String::new()), true))
}

/// The log of one cache's failures, without repeating itself: a line for each backoff step
/// while the delay grows or the error changes, then (same error, delay at its cap) one line a
/// minute that counts what it did not show. Each line gives the real wait before the next
/// attempt, and how long the failed attempt took when its client retried within it.
#[derive(Default)]
struct FailureLog {
    failures: u32,
    since: Option<Instant>,
    last_line: Option<(Instant, String)>,
    hidden: u32,
}

impl FailureLog {
    const REPEAT: Duration = Duration::from_secs(60);

    fn failed(
        &mut self,
        kind: &Kind,
        what: &str,
        e: &Error,
        wait: Duration,
        took: Duration,
        at_cap: bool,
    ) {
        if let Some(line) = self.line(Instant::now(), kind, what, e, wait, took, at_cap) {
            log::warn!("{line}");
        }
    }

    /// The line to log for this failure, if any.
    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        now: Instant,
        kind: &Kind,
        what: &str,
        e: &Error,
        wait: Duration,
        took: Duration,
        at_cap: bool,
    ) -> Option<String> {
        self.failures += 1;
        self.since.get_or_insert(now);
        let text = e.to_string();
        let show = match &self.last_line {
            None => true,
            Some((t, last)) => {
                *last != text || !at_cap || now.saturating_duration_since(*t) >= Self::REPEAT
            }
        };
        if !show {
            self.hidden += 1;
            return None;
        }
        let mut line = format!("cache {kind}: {what} failed: {text}");
        if took >= Duration::from_secs(1) {
            line.push_str(&format!(" (after {:.1}s)", took.as_secs_f64()));
        }
        if self.hidden > 0 {
            line.push_str(&format!(
                " ({} similar failures not shown, failing for {:.0}s)",
                self.hidden,
                self.since
                    .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64())
            ));
            self.hidden = 0;
        }
        line.push_str(&format!("; retrying in {:.1}s", wait.as_secs_f64()));
        self.last_line = Some((now, text));
        Some(line)
    }

    /// A list or watch worked again: one line if anything failed before.
    fn recovered(&mut self, kind: &Kind) {
        if self.failures > 0 {
            let secs = self.since.map_or(0.0, |s| s.elapsed().as_secs_f64());
            log::info!(
                "cache {kind}: back after {} failed attempt{} over {secs:.1}s",
                self.failures,
                if self.failures == 1 { "" } else { "s" }
            );
        }
        *self = FailureLog::default();
    }
}

/// A flag that wakes the task waiting for it (a channel would do, at 700 bytes an informer).
#[derive(Default)]
struct Halt {
    set: AtomicBool,
    waiter: Mutex<Option<std::task::Waker>>,
}

impl Halt {
    fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        let waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = waiter {
            w.wake();
        }
    }

    /// Ready once `set` was called.
    async fn wait(&self) {
        futures_lite::future::poll_fn(|cx| {
            if self.set.load(Ordering::SeqCst) {
                return std::task::Poll::Ready(());
            }
            let mut waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
            if !waiter.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waiter = Some(cx.waker().clone());
            }
            drop(waiter);
            // Set between the check and the registration: its wake found no waiter.
            if self.set.load(Ordering::SeqCst) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
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
    /// A task was made for this informer (see `Cache::start_informer`).
    spawned: AtomicBool,
    stop: Arc<AtomicBool>,
    /// Stopped alone (its resource went away), while the cache runs on.
    removed: AtomicBool,
    /// Set by `cancel`: the reflector's task ends.
    halt: Halt,
    /// Counters for tests and metrics.
    pub lists: AtomicU64,
    pub watches: AtomicU64,
    pub relists_after_gone: AtomicU64,
    /// How long each event took to process (`informer_processing_latency_seconds`).
    pub latency: super::metrics::Latency,
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
            halt: Halt::default(),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            relists_after_gone: AtomicU64::new(0),
            latency: Default::default(),
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

    /// True the first time only: the caller is the one to start its task.
    pub fn claim_task(&self) -> bool {
        !self.spawned.swap(true, Ordering::SeqCst)
    }

    /// Stop this informer alone: its task ends and its watch is closed.
    pub fn remove(&self) {
        self.removed.store(true, Ordering::SeqCst);
        self.cancel();
    }

    fn dispatch(&self, deltas: &[Delta]) {
        self.dispatch_since(deltas, None);
    }

    /// Hand `deltas` to every handler, timing each (from `began` for the first: its store
    /// update is part of processing it).
    fn dispatch_since(&self, deltas: &[Delta], began: Option<Instant>) {
        // Held while delivering, so that `add_handler_with_replay` cannot interleave.
        let hs = self.handlers.read().unwrap_or_else(|p| p.into_inner());
        let mut began = began;
        for d in deltas {
            let t = began.take().unwrap_or_else(Instant::now);
            for h in hs.iter() {
                h(d);
            }
            self.latency.observe(t.elapsed());
        }
    }

    fn selector(&self) -> Option<String> {
        Some(self.field_selector.to_string()).filter(|s| !s.is_empty())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.removed.load(Ordering::SeqCst)
    }

    /// End the reflector's task (shutdown): a watch in progress is closed, a wait ends.
    pub fn cancel(&self) {
        self.halt.set();
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

    /// List (on a helper thread), replace the store and hand the changes to the handlers.
    /// The QPS limiter is waited on here, in turn with every other request of the client
    /// (such as the watches of the informers that listed before), not on the helper.
    async fn list(
        self: &Arc<Self>,
        client: &Client,
        rv: Option<String>,
        paginate: bool,
        unlimited: bool,
    ) -> Result<()> {
        if !unlimited {
            client.pass_limiter().await;
        }
        let _slot = LIST_SLOTS.acquire().await;
        let (me, client) = (self.clone(), client.clone());
        crate::runtime::pool::unblock(move || me.list_blocking(&client, rv.as_deref(), paginate))
            .await
    }

    fn list_blocking(&self, client: &Client, rv: Option<&str>, paginate: bool) -> Result<()> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        let opts = ListOptions {
            limit: paginate.then_some(500),
            resource_version: rv.map(str::to_string),
            field_selector: self.selector(),
            metadata_only: self.metadata_only(),
            shape: Some(self.shape()),
            caller_retries: true,
            limiter_passed: true,
            ..Default::default()
        };
        // Each page is packed as it arrives and the changes are decoded a few at a time as
        // they are handed on: a list of many objects never holds them all decoded at once.
        let mut staged = crate::cache::store::Staged::default();
        let rv = client.list_pages(&self.kind, None, &opts, |items, afresh| {
            if afresh {
                staged.clear();
            }
            staged.add(items);
        })?;
        if self.stopped() {
            // Stopped while the list was on the wire: nobody waits for it.
            return Err(Error::Cancelled);
        }
        let changes = self.store.replace_staged(staged, &rv);
        // Synced once the handlers have seen the first list (as client-go's registrations).
        let mut changes = changes.into_iter();
        while changes.len() > 0 {
            let deltas: Vec<Delta> = changes
                .by_ref()
                .take(DISPATCH_CHUNK)
                .filter_map(crate::cache::store::Change::into_delta)
                .collect();
            self.dispatch(&deltas);
        }
        self.synced.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Watch once from the store's resourceVersion until the stream ends.
    async fn watch(&self, client: &Client, unlimited: bool) -> Result<()> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        let (lo, hi) = self.watch_timeout;
        // The echoes of our own writes come decoded from the store, in its shape (not for a
        // metadata-only watch, whose objects are PartialObjectMetadata).
        let echoes = (!self.metadata_only()).then(|| {
            self.store.hold_echoes();
            crate::api::echo::Echoes(self.store.clone())
        });
        let opts = WatchOptions {
            resource_version: self.store.resource_version(),
            timeout_seconds: fastrand::u64(lo..hi.max(lo + 1)),
            allow_bookmarks: true,
            field_selector: self.selector(),
            metadata_only: self.metadata_only(),
            shape: Some(self.shape()),
            echoes,
            limiter_passed: unlimited,
            ..Default::default()
        };
        // Boxed, as what opening needs is not kept for the life of the task.
        let mut stream = Box::pin(client.watch_async(&self.kind, None, &opts)).await?;
        while let Some(ev) = stream.next().await {
            let ev = ev?;
            let kind = match ev.kind {
                EventType::Bookmark => {
                    let rv = crate::obj::resource_version(&ev.object);
                    if !rv.is_empty() {
                        self.store.set_resource_version(rv);
                    }
                    continue;
                }
                EventType::Added => DeltaKind::Added,
                EventType::Modified => DeltaKind::Updated,
                EventType::Deleted => DeltaKind::Deleted,
            };
            let began = Instant::now();
            let delta = match ev.echo {
                Some(o) => self.store.apply_obj(kind, o),
                None => self.store.apply_shaped(kind, ev.object),
            };
            if let Some(d) = delta {
                self.dispatch_since(std::slice::from_ref(&d), Some(began));
            }
        }
        if let Some(e) = stream.take_read_error() {
            log::debug!("watch {}: stream ended: {e}", self.kind);
        }
        Ok(())
    }

    /// The reflector; returns when stopped (`cancel`, `remove`). Run on the watch threads.
    pub async fn run(self: Arc<Self>, client: Client) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        futures_lite::future::or(self.reflect(&client), self.halt.wait()).await;
    }

    async fn reflect(self: &Arc<Self>, client: &Client) {
        // Failures back off as client-go does; the server's readiness probe ends the waits
        // once it is ready again (`super::ready`).
        let mut retry = Retry::new();
        let mut failures = FailureLog::default();
        // First list: from the watch cache, as client-go does.
        let mut next_list: Option<(Option<String>, bool)> = Some((Some("0".into()), true));
        while !self.stopped() {
            if let Some((rv, paginate)) = next_list.take() {
                let started = Instant::now();
                if let Err(e) = self
                    .list(client, rv.clone(), paginate, retry.unlimited)
                    .await
                {
                    if self.stopped() {
                        break;
                    }
                    if let Some(fresh) = consistent_relist(&e, rv.as_deref()) {
                        // As client-go: at once, a fresh consistent list.
                        log::info!("cache {}: {e}; listing afresh", self.kind);
                        next_list = Some(fresh);
                        continue;
                    }
                    let (wait, at_cap) = retry.delay(&e);
                    failures.failed(&self.kind, "list", &e, wait, started.elapsed(), at_cap);
                    next_list = Some((rv, paginate));
                    retry.wait(client, &e, wait).await;
                    continue;
                }
                failures.recovered(&self.kind);
                retry.succeeded();
            }
            let started = Instant::now();
            match self
                .watch(client, std::mem::take(&mut retry.unlimited))
                .await
            {
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
                    let (wait, at_cap) = retry.delay(&e);
                    failures.failed(&self.kind, "watch", &e, wait, started.elapsed(), at_cap);
                    retry.wait(client, &e, wait).await;
                    // Catch up with what was missed: re-list at the last resourceVersion.
                    next_list = Some((Some(self.store.resource_version()), false));
                }
            }
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
        assert!(inf.claim_task());
        assert!(!inf.claim_task());
        assert!(!inf.stopped());
        inf.remove();
        assert!(inf.stopped());
    }

    #[test]
    fn a_removed_informer_ends_its_task_at_once() {
        use crate::sandbox::{Sandbox, SandboxOptions};
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let cfg = crate::api::kubeconfig::RestConfig {
            server: sb.url(),
            source: "test".into(),
            ..Default::default()
        };
        let client = Client::new(&cfg, 0.0, 1, "reflector-test").expect("client");
        let inf = Informer::new(CONFIGMAPS, "", Arc::new(AtomicBool::new(false)));
        let task = crate::runtime::reactor::spawn(inf.clone().run(client));
        let end = Instant::now() + Duration::from_secs(10);
        while !(inf.has_synced() && inf.watches.load(Ordering::SeqCst) > 0) {
            assert!(Instant::now() < end, "no watch");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Waiting in its watch (a server timeout of minutes).
        std::thread::sleep(Duration::from_millis(100));
        let removed = Instant::now();
        inf.remove();
        futures_lite::future::block_on(task);
        assert!(removed.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn failures_are_logged_once_per_step_then_once_a_minute() {
        let mut log = FailureLog::default();
        let t0 = Instant::now();
        let refused = Error::Transport("connection refused".into());
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(5));
        let mut lines = Vec::new();
        // Five minutes of an unreachable server, one attempt per backoff delay.
        let mut t = t0;
        let mut attempts = 0;
        while t < t0 + Duration::from_secs(300) {
            let wait = b.next_delay(t);
            let took = Duration::from_millis(3);
            lines.extend(log.line(t, &CONFIGMAPS, "list", &refused, wait, took, b.at_cap()));
            t += wait;
            attempts += 1;
        }
        assert!(attempts > 60, "{attempts}");
        // The growing steps (0.5, 1, 2, 4 s), then one line a minute.
        assert!((6..=10).contains(&lines.len()), "{lines:#?}");
        assert!(
            lines[0].starts_with("cache configmaps: list failed: "),
            "{}",
            lines[0]
        );
        assert!(lines
            .last()
            .is_some_and(|l| l.contains("similar failures not shown")));
        // Another error is shown at once.
        let forbidden = Error::api(403, "Forbidden", "configmaps is forbidden");
        let shown = log.line(
            t,
            &CONFIGMAPS,
            "list",
            &forbidden,
            Duration::from_secs(5),
            Duration::ZERO,
            true,
        );
        assert!(shown.is_some_and(|l| l.contains("forbidden") && l.ends_with("retrying in 5.0s")));
        // A slow attempt says how long it took.
        let slow = log.line(
            t,
            &CONFIGMAPS,
            "watch",
            &refused,
            Duration::from_secs(1),
            Duration::from_secs(3),
            false,
        );
        assert!(slow.is_some_and(|l| l.contains("(after 3.0s); retrying in 1.0s")));
    }

    #[test]
    fn an_unavailable_resource_version_lists_afresh_at_once() {
        let too_large = Error::api(
            504,
            "Timeout",
            "Too large resource version: 1200, current: 1100",
        );
        let gone = Error::api(410, "Expired", "too old resource version: 1 (5)");
        let fresh = Some((Some(String::new()), true));
        assert_eq!(consistent_relist(&too_large, Some("1200")), fresh);
        assert_eq!(consistent_relist(&gone, Some("0")), fresh);
        // A consistent list that fails backs off; so does any other failure.
        assert_eq!(consistent_relist(&too_large, Some("")), None);
        let timeout = Error::api(504, "Timeout", "the server was unable to return a response");
        assert_eq!(consistent_relist(&timeout, Some("1200")), None);
        assert_eq!(
            consistent_relist(&Error::Transport("reset".into()), Some("7")),
            None
        );
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
