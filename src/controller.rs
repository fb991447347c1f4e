//! What a controller is, as the manager sees it: the `Controller` trait for controllers that
//! reconcile keys, `SelfDriven` for those that run their own queues, `Runnable` for either, what a reconcile reads (`Cx`) and returns
//! (`Outcome`, `Action`), and how writes are reported back (`Applied`, `OnError`). The traits
//! are behaviour only; what is fixed about a controller (its name, work queue, Event source,
//! workers, retries, client rates) is data: its row of the controller table, handed to the
//! manager as `Settings`. How a controller is built (`BuildCx`, `Build`) is here too. The
//! kernel (api, cache, queue, events, manager) knows this module and no controller; the
//! controllers in `crate::controllers` implement it.

use crate::api::client::{Client, DeleteOptions, PatchType};
use crate::api::kubeconfig::RestConfig;
use crate::api::Kind;
pub use crate::cache::Watch;
use crate::cache::{Cache, Delta};
use crate::error::Result;
pub use crate::events::{EventSpec, EventType, ObjectRef};
use crate::queue::WorkQueue;
use crate::runtime::workers::Workers;
use serde_json::Value;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// What a reconcile reads: the shared cache, the time, and a live client for the few reads
/// that must not come from the cache.
pub struct Cx<'a> {
    pub cache: &'a Cache,
    pub now: SystemTime,
    pub client: &'a Client,
}

/// One write a reconcile asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create {
        kind: Kind,
        namespace: String,
        object: Value,
    },
    /// PUT the whole object (carries its resourceVersion: a stale write is a 409).
    Update {
        kind: Kind,
        object: Value,
    },
    /// PUT `<object>/<subresource>` (status, finalize, approval).
    UpdateSubresource {
        kind: Kind,
        object: Value,
        subresource: &'static str,
    },
    Patch {
        kind: Kind,
        namespace: String,
        name: String,
        patch_type: PatchType,
        patch: Value,
        subresource: Option<&'static str>,
    },
    Delete {
        kind: Kind,
        namespace: String,
        name: String,
        options: DeleteOptions,
    },
    /// Server-side apply (`application/apply-patch+yaml`) of `object` as `field_manager`,
    /// forcing conflicts as controllers do; when the server answers 415 (no server-side apply),
    /// `fallback` is applied instead (upstream's "update if apply is unsupported"). With a
    /// `subresource` (`status`), the apply goes to it (client-go's `ApplyStatus`).
    Apply {
        kind: Kind,
        namespace: String,
        name: String,
        field_manager: &'static str,
        object: Value,
        fallback: Option<Box<Action>>,
        subresource: Option<&'static str>,
    },
    Event(EventSpec),
    /// The wrapped write (a create or a delete), with an Event about `report.about` once it is
    /// done: on success `Normal <success_reason>` with message `<success_prefix><name>` (the
    /// name the server answered with, so a `generateName` object has its real name), on failure
    /// `Warning <failure_reason>` with `<failure_prefix><error message>` (an empty
    /// `success_reason`: no Event on success). A delete that finds
    /// the object gone records nothing; nor does a create refused because the namespace is
    /// terminating.
    Reported {
        action: Box<Action>,
        report: Report,
    },
    /// Upstream's slow start: batches of 1, 2, 4, ... actions, each batch in parallel; after a
    /// batch with a failure the remaining actions are skipped (and reported as skipped).
    SlowStart(Vec<Action>),
    /// Every action in parallel (a bounded number of requests at a time).
    Parallel(Vec<Action>),
}

/// The Events to record about a write's outcome (see [`Action::Reported`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub about: ObjectRef,
    pub success_reason: &'static str,
    pub success_prefix: &'static str,
    pub failure_reason: &'static str,
    pub failure_prefix: std::borrow::Cow<'static, str>,
}

/// How one write of a reconcile went, as told to [`Controller::applied`].
#[derive(Debug, Clone, Copy)]
pub enum Applied<'a> {
    /// Done; the server's answer when the write returns the object (not for deletes). A delete
    /// that found the object already gone is `Done(None)` as well.
    Done(Option<&'a Value>),
    Failed(&'a crate::Error),
    /// Not tried: an earlier slow-start batch failed.
    Skipped,
}

/// How a sync ended, once its writes were applied, as told to [`Controller::synced`].
#[derive(Debug, Clone, Copy)]
pub enum SyncEnd<'a> {
    /// Every write went well (or the failure was one the controller ignores).
    Done,
    /// Retried later without a failed write ([`Outcome::retry_quietly`], with its reason).
    RetryQuietly(&'a str),
    /// The reconcile, or a write the controller does not ignore, failed (the first failure).
    Failed(&'a crate::Error),
}

impl<'a> SyncEnd<'a> {
    /// How a sync with `outcome` ended, given the first of its failures that counts.
    pub fn of(failure: Option<&'a crate::Error>, outcome: &'a Outcome) -> Self {
        match (failure, outcome.retry_quietly.as_deref()) {
            (Some(e), _) => SyncEnd::Failed(e),
            (None, Some(why)) => SyncEnd::RetryQuietly(why),
            (None, None) => SyncEnd::Done,
        }
    }
}

impl PartialEq for DeleteOptions {
    fn eq(&self, o: &Self) -> bool {
        self.propagation_policy == o.propagation_policy
            && self.precondition_uid == o.precondition_uid
            && self.precondition_resource_version == o.precondition_resource_version
            && self.grace_period_seconds == o.grace_period_seconds
    }
}

/// The result of one reconcile.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    pub actions: Vec<Action>,
    /// Look at this key again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// Once `actions` are applied, call [`Controller::status_after_writes`] for the same key:
    /// the status is then computed from what the writes left in the cache (the pods just
    /// created or deleted) instead of from what the cache held before them. One status write
    /// instead of two (a stale one now, the real one a sync later, behind the whole queue).
    pub status_after_writes: bool,
    /// Look at this key again later through the rate limiter, without a failed write:
    /// upstream's "ignorable" sync errors (retried with backoff, logged at `-v 4` only). The
    /// text says why.
    pub retry_quietly: Option<String>,
}

impl Outcome {
    pub fn none() -> Self {
        Outcome::default()
    }
    pub fn with(actions: Vec<Action>) -> Self {
        Outcome {
            actions,
            ..Outcome::default()
        }
    }
}

/// The earlier of two optional requeue delays.
pub fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How an applied action that failed should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Requeue with the rate limiter (the default).
    Retry,
    /// Nothing more to do (e.g. AlreadyExists for an idempotent create).
    Ignore,
}

/// What a self-driven controller gets to run its own loops.
#[derive(Clone)]
pub struct RunEnv {
    pub cache: Arc<Cache>,
    /// The controller's own identity (with its row's client rates, `Settings::client_rate`).
    pub client: Client,
    pub recorder: Arc<crate::events::Recorder>,
    /// Set at shutdown; its threads return soon after.
    pub stop: Arc<AtomicBool>,
    /// Worker pools started with `serve`, waited for at shutdown.
    pub(crate) served: Arc<std::sync::Mutex<Vec<Arc<dyn Served>>>>,
}

/// Workers the manager stops and waits for at shutdown.
pub(crate) trait Served: Send + Sync {
    fn stop(&self);
    fn wait(&self, until: Instant) -> bool;
}

impl<K: Clone + Eq + std::hash::Hash + Send + 'static> Served for Workers<K> {
    fn stop(&self) {
        Workers::stop(self)
    }
    fn wait(&self, until: Instant) -> bool {
        Workers::wait(self, until)
    }
}

impl RunEnv {
    /// Serve `queue` with the shared worker loop (`crate::runtime::workers`): at most `limit` keys at
    /// once, each handed to `handle` and then marked done; the manager waits for them at
    /// shutdown. The queue itself is the controller's to shut down (`SelfDriven::shutdown`).
    pub fn serve<K: Clone + Eq + std::hash::Hash + Send + 'static>(
        &self,
        name: &str,
        queue: Arc<WorkQueue<K>>,
        limit: usize,
        handle: impl Fn(&K) + Send + Sync + 'static,
    ) -> Arc<Workers<K>> {
        let w = Workers::start(name, queue, limit, handle);
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(w.clone());
        w
    }
}

/// A controller that drives itself (several kinds of work in one queue, informers for
/// resources found by discovery after the start) instead of reconciling keys of watched
/// objects through the manager. Its queues are served with `RunEnv::serve`.
pub trait SelfDriven: Send + Sync {
    /// Before the cache starts: the informers to sync first, and their handlers.
    fn register(&self, _cache: &Arc<Cache>) {}
    /// Once the caches synced: start its work; threads it starts itself are returned and
    /// return after `env.stop` is set.
    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>>;
    /// Shutdown begins: stop handing out work (its workers are waited for after).
    fn shutdown(&self) {}
}

/// What the manager runs: a reconciling controller or a self-driven one, as its `build`
/// made it.
#[derive(Clone)]
pub enum Runnable {
    Reconciles {
        ctrl: Arc<dyn Controller>,
        /// Every this often, every object of the primary (first) watch is handed to
        /// `keys_for` again as an unchanged update, as a client-go informer's resync does: for
        /// controllers whose decisions depend on time as well as on objects. A value of the
        /// configuration (a `--*-sync-period` flag), so `build` gives it; None: never.
        resync: Option<Duration>,
    },
    Drives(Arc<dyn SelfDriven>),
}

impl Runnable {
    /// A reconciling controller without a resync.
    pub fn reconciles(c: impl Controller + 'static) -> Self {
        Runnable::Reconciles {
            ctrl: Arc::new(c),
            resync: None,
        }
    }
    pub fn drives(c: impl SelfDriven + 'static) -> Self {
        Runnable::Drives(Arc::new(c))
    }
}

/// What the manager knows about a controller besides its behaviour: the facts of its row of
/// the controller table, with the worker count its flag gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Upstream's canonical name, e.g. "serviceaccount-controller" (log lines, `/healthz`).
    pub name: &'static str,
    /// Upstream's work-queue name: the `name` label of the `workqueue_*` metrics (e.g.
    /// "replicaset" for replicaset-controller), which dashboards and alerts select on. Empty
    /// for a controller upstream runs without a work queue (no series), and for a self-driven
    /// one (it names its own queues).
    pub queue: &'static str,
    /// The Event source component (upstream's recorder name).
    pub event_component: &'static str,
    /// Parallel workers (a `--concurrent-*-syncs` value, or upstream's fixed count).
    pub workers: usize,
    /// After this many retries of a failing key it is dropped (logged at `-v 4`) until
    /// something queues it again, as upstream controllers with a `maxRetries` do. None:
    /// retried for as long as it fails.
    pub max_retries: Option<u32>,
    /// Factors on `--kube-api-qps` and `--kube-api-burst` for its client (upstream raises
    /// them for a few controllers); 1 and 1 for most.
    pub qps_factor: f32,
    pub burst_factor: u32,
}

impl Settings {
    /// A controller named `name` with every other setting at its default: no work queue
    /// name, Events from `name`, one worker, retries without end, the manager's client rates.
    pub const fn named(name: &'static str) -> Self {
        Settings {
            name,
            queue: "",
            event_component: name,
            workers: 1,
            max_retries: None,
            qps_factor: 1.0,
            burst_factor: 1,
        }
    }

    /// Its client's rate limits from `--kube-api-qps`/`--kube-api-burst`.
    pub fn client_rate(&self, qps: f32, burst: u32) -> (f32, u32) {
        (
            qps * self.qps_factor,
            burst.saturating_mul(self.burst_factor),
        )
    }
}

/// What a controller is built from: the manager's configuration (`Cfg`, the command line's
/// `Config`: this interface does not depend on its shape), the connection (for the CA bundle),
/// and its worker count (its row's `--concurrent-*` flag, else the row's fixed count).
pub struct BuildCx<'a, Cfg> {
    pub cfg: &'a Cfg,
    pub rest: &'a RestConfig,
    pub workers: usize,
}

/// Builds an enabled controller; `Ok(None)` when its options turn it off after all (as
/// `--enable-garbage-collector=false`), an error when it cannot start (upstream: the process
/// exits). A controller module's `build`, named by its row of the controller table.
pub type Build<Cfg> = fn(&BuildCx<'_, Cfg>) -> Result<Option<Runnable>>;

/// A controller that reconciles keys: what it reads, which keys a change queues, what a
/// reconcile of a key asks for, and what it is told about its writes. Behaviour only: its
/// name, queue, workers and the like are its row's (`Settings`).
pub trait Controller: Send + Sync {
    /// What it reads; the primary kind first.
    fn watches(&self) -> Vec<Watch>;
    /// Keys of primary objects to reconcile after a change of a watched object. Runs on the
    /// watch path, for every change of every watched object, while the watch waits: keep it
    /// to lookups (an index, the object's own fields), never a scan or a request.
    fn keys_for(&self, watch: &Watch, delta: &Delta, cache: &Cache) -> Vec<String>;
    /// How long the keys `keys_for` gives for a change of `watch` wait before they are
    /// queued (upstream's `AddAfter` with a batch period, e.g. `--endpoint-updates-batch-period`
    /// for pod changes); zero queues them at once.
    fn key_delay(&self, _watch: &Watch) -> Duration {
        Duration::ZERO
    }
    /// The keys for a change, each with how long it waits before it is queued: `keys_for`
    /// with `key_delay` unless the controller delays some changes only (upstream's handlers
    /// that `AddAfter` some updates, e.g. a CronJob whose schedule changed waits for its
    /// next start time). The manager calls this, once per change.
    fn delayed_keys_for(
        &self,
        watch: &Watch,
        delta: &Delta,
        cache: &Cache,
    ) -> Vec<(String, Duration)> {
        let d = self.key_delay(watch);
        self.keys_for(watch, delta, cache)
            .into_iter()
            .map(|k| (k, d))
            .collect()
    }
    /// Keys queued once when the caches have synced, before any change: for a controller
    /// with work to do even when it watches nothing yet (upstream's `queue.Add` in `Run`).
    fn initial_keys(&self) -> Vec<String> {
        Vec::new()
    }
    /// Read the cache, decide, return the actions. No I/O besides `cx.client` reads.
    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome>;
    /// Asked right after the actions of an outcome with `status_after_writes` were applied: the
    /// status writes only (no new creates or deletes), from the cache as the writes left it.
    fn status_after_writes(&self, _cx: &Cx, _key: &str) -> Result<Outcome> {
        Ok(Outcome::none())
    }
    /// Told how each write (create, update, patch, delete; not Events) of a reconcile of `key`
    /// went, for controllers that track their own writes. Called from the manager's threads,
    /// possibly in parallel.
    fn applied(&self, _key: &str, _action: &Action, _result: Applied<'_>) {}
    /// Told when a sync of `key` ended, its writes applied, with when it began (before
    /// `reconcile`): for metrics counted per sync, as upstream's deferred recorders count them.
    fn synced(&self, _key: &str, _began: std::time::Instant, _end: SyncEnd<'_>) {}
    /// Its work queue's rate limiter, when upstream gives the controller another than
    /// client-go's `DefaultControllerRateLimiter`.
    fn rate_limiter(&self) -> Option<Box<dyn crate::queue::RateLimiter<String>>> {
        None
    }
    /// Classify a failed action (per controller quirks such as ignoring AlreadyExists).
    fn on_error(&self, _action: &Action, err: &crate::Error) -> OnError {
        if err.is_already_exists() {
            OnError::Ignore
        } else {
            OnError::Retry
        }
    }
}
