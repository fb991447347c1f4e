//! device-taint-eviction-controller (upstream's `pkg/controller/devicetainteviction`; gates
//! DRADeviceTaints and DRADeviceTaintRules, GA and on by default in 1.37): pods using
//! ResourceClaims allocated with devices that carry NoExecute taints their allocation does
//! not tolerate, or tolerates for a while, are deleted, whether the taint is in the
//! device's ResourceSlice or comes from a DeviceTaintRule; each DeviceTaintRule's
//! `EvictionInProgress` condition tells how its eviction goes.
//!
//! - The decisions are made as the watches report changes (`state.rs`, upstream's event
//!   handlers); one queue, named `device-taint-eviction-controller`, holds the pods to delete
//!   when due and the rules whose status to write (`work.rs`), served by
//!   `--concurrent-device-taint-eviction-syncs` workers (8).
//! - Events from `device-taint-eviction-controller`: `DeviceTaintManagerEviction`, "Marking
//!   for deletion" and "Cancelling deletion"; the pod's `DisruptionTarget` condition
//!   (`DeletionByDeviceTaintManager`) before its deletion with its UID as precondition.
//! - Metrics `device_taint_eviction_controller_pod_deletions_total` and
//!   `device_taint_eviction_controller_pod_deletion_duration_seconds`.
//! - With DRADeviceTaintRules off, rules are neither watched nor acted on. Off, with one
//!   line, when the API server does not serve `resource.k8s.io/v1` resourceslices (or
//!   devicetaintrules while rules are on).
//!
//! Not here: PodGroup reservations (DRAWorkloadResourceClaims, off by default in 1.37).

mod state;
#[cfg(test)]
mod tests;
mod work;

use crate::api::resources::{DEVICETAINTRULES, PODS, RESOURCECLAIMS, RESOURCESLICES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{EventSpec, EventType, ObjectRef, RunEnv, SelfDriven, Watch};
use crate::controllers::kit::deletions::PodDeletions;
use crate::queue::WorkQueue;
use state::{parse_work, Out, State};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::SystemTime;

pub const NAME: &str = "device-taint-eviction-controller";
pub const REASON: &str = "DeviceTaintManagerEviction";

/// Pods: their node, claims and the claim names recorded in their status.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/nodeName",
        "/spec/resourceClaims",
        "/status/resourceClaimStatuses",
        "/status/extendedResourceClaimStatus",
    ],
);
pub const CLAIM_WATCH: Watch = Watch::full(RESOURCECLAIMS);
pub const SLICE_WATCH: Watch = Watch::fields(
    RESOURCESLICES,
    &["/spec/driver", "/spec/pool", "/spec/devices"],
);
pub const RULE_WATCH: Watch = Watch::full(DEVICETAINTRULES);

static METRICS: PodDeletions = PodDeletions::new(
    (
        "device_taint_eviction_controller_pod_deletions_total",
        "Total number of Pods deleted by DeviceTaintEvictionController since its start.",
    ),
    (
        "device_taint_eviction_controller_pod_deletion_duration_seconds",
        "Latency, in seconds, between the time when a device taint effect has been activated and a Pod's deletion via DeviceTaintEvictionController.",
    ),
);

/// Its row in the controller table.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<crate::controllers::Runnable>> {
    let rules = crate::config::gates::enabled("DRADeviceTaintRules");
    let served = |r| super::kit::served::served(cx.rest, "/apis/resource.k8s.io/v1", r);
    let missing = if served("resourceslices") == Some(false) {
        Some("resourceslices")
    } else if rules && served("devicetaintrules") == Some(false) {
        Some("devicetaintrules")
    } else {
        None
    };
    if let Some(r) = missing {
        log::info!("{NAME}: the API server does not serve resource.k8s.io/v1 {r}; not starting it");
        return Ok(None);
    }
    Ok(Some(crate::controllers::Runnable::drives(
        DeviceTaintEviction::new(rules, cx.workers),
    )))
}

pub struct DeviceTaintEviction {
    inner: Arc<Inner>,
}

struct Inner {
    rules: bool,
    workers: usize,
    state: Mutex<State>,
    /// Work items (`state::pod_work`, `state::rule_work`).
    queue: Arc<WorkQueue<String>>,
    /// Set at the start; cancelled deletions seen before it wait in `early`.
    env: OnceLock<RunEnv>,
    early: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DeviceTaintEviction {
    pub fn new(rules: bool, workers: usize) -> Self {
        DeviceTaintEviction {
            inner: Arc::new(Inner {
                rules,
                workers: workers.max(1),
                state: Mutex::default(),
                queue: WorkQueue::new(NAME),
                env: OnceLock::new(),
                early: Mutex::default(),
            }),
        }
    }
}

/// An Event about the pod of a work item, as upstream's recorder gets it.
fn pod_event(env: &RunEnv, work: &str, message: &str) {
    let (_, uid, key) = parse_work(work);
    let (ns, name) = crate::obj::split_key(key);
    let involved = ObjectRef {
        kind: "Pod".into(),
        api_version: "v1".into(),
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
        resource_version: String::new(),
    };
    let spec = EventSpec {
        involved,
        event_type: EventType::Normal,
        reason: REASON.into(),
        message: message.into(),
    };
    env.recorder.record(&env.client, NAME, spec);
}

const CANCELLING: &str = "Cancelling deletion";

impl Inner {
    /// Carry out what a change asked for.
    fn apply(&self, out: Vec<Out>) {
        for o in out {
            match o {
                Out::Add(w, d) if d.is_zero() => self.queue.add(w),
                Out::Add(w, d) => self.queue.add_after(w, d),
                Out::Cancelled(p) => {
                    log::debug!("{NAME}: canceled pod eviction of {}", parse_work(&p).2);
                    match self.env.get() {
                        Some(env) => pod_event(env, &p, CANCELLING),
                        None => lock(&self.early).push(p),
                    }
                }
            }
        }
    }

    fn changed(&self, cache: &Cache, w: &Watch, d: &Delta) {
        let o = d.object();
        let deleted = d.kind == DeltaKind::Deleted;
        let now = SystemTime::now();
        let mut out = Vec::new();
        if w.kind == PODS {
            lock(&self.state).pod_changed(o, deleted, now, &mut out);
        } else {
            let store = cache.store_for(&POD_WATCH);
            let pods = |ns: &str, n: &str| store.get_in(ns, n);
            let mut st = lock(&self.state);
            match w.kind {
                k if k == RESOURCECLAIMS => st.claim_changed(o, deleted, &pods, now, &mut out),
                k if k == RESOURCESLICES => st.slice_changed(o, deleted, &pods, now, &mut out),
                _ => st.rule_changed(o, deleted, &pods, now, &mut out),
            }
        }
        self.apply(out);
    }
}

impl SelfDriven for DeviceTaintEviction {
    fn register(&self, cache: &Arc<Cache>) {
        let mut watches = vec![POD_WATCH, CLAIM_WATCH, SLICE_WATCH];
        if self.inner.rules {
            watches.push(RULE_WATCH);
        }
        for w in watches {
            let (inner, c) = (Arc::downgrade(&self.inner), Arc::downgrade(cache));
            cache
                .informer_for(&w)
                .add_handler(Arc::new(move |d: &Delta| {
                    if let (Some(i), Some(c)) = (inner.upgrade(), c.upgrade()) {
                        i.changed(&c, &w, d);
                    }
                }));
        }
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        crate::metrics::register_collector("devicetainteviction", Arc::new(|| METRICS.families()));
        log::info!(controller:% = NAME, numWorkers:% = self.inner.workers; "Starting");
        let _ = self.inner.env.set(env.clone());
        for p in std::mem::take(&mut *lock(&self.inner.early)) {
            pod_event(env, &p, CANCELLING);
        }
        let (inner, e) = (self.inner.clone(), env.clone());
        let q = self.inner.queue.clone();
        env.serve(NAME, q, self.inner.workers, move |w| inner.handle(&e, w));
        Vec::new()
    }

    fn shutdown(&self) {
        self.inner.queue.shut_down();
    }
}
