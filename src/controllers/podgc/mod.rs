//! pod-garbage-collector-controller: deletes pods nothing else will (upstream's
//! `pkg/controller/podgc`).
//!
//! Every 20 s (measured from the end of the previous pass, as `wait.Until`), from the cache:
//! - with `--terminated-pod-gc-threshold` > 0, terminated pods (neither pending, running nor
//!   unknown) beyond the threshold, evicted ones first, then oldest first, then by name;
//! - terminating pods on a node that is not ready and has the `node.kubernetes.io/out-of-service`
//!   taint (any effect);
//! - pods bound to a node that is gone: a node missing from the cache waits 40 s in the
//!   `orphaned_pods_nodes` queue, then is read live; a 404 makes its pods orphans, which get
//!   the `DisruptionTarget` condition (`DeletionByPodGC`, "PodGC: node no longer exists",
//!   `observedGeneration` the pod's generation as v1.34 and later write it);
//! - terminating pods that were never scheduled.
//!
//! Each pod is deleted with `gracePeriodSeconds: 0`; one that has not succeeded or failed is
//! first patched to phase `Failed` through `pods/status` (strategic merge, UID precondition),
//! as 1.28 does with its default gates (`decide::fail_patch`); a failed patch leaves the pod
//! for the next pass. `pod_gc_collector_force_delete_pods_total` and
//! `pod_gc_collector_force_delete_pod_errors_total{namespace,reason}` count the attempts and
//! the failures. No Events.
//!
//! A pass reads a few facts of each pod (decoding one cached pod at a time) and reads a pod
//! whole again from the cache only when it acts on it: with 2,000 terminated pods the pass no
//! longer holds every decoded pod for the minute their deletions take at 20 QPS.
//!
//! Unlike upstream: the deletions of every part run up to 16 at a time (upstream: all the
//! terminated and out-of-service ones at once, orphans and unscheduled ones one by one); a pod
//! deleted by one part of a pass is not deleted again by a later part of the same pass, and a
//! pod that left the cache since the pass began is sent nothing (upstream sends the request
//! and counts its 404 in `pod_gc_collector_force_delete_pod_errors_total`); the status patch is
//! computed from the pod as the cache holds it when its turn comes, not as the pass began.

pub mod decide;

use super::{RunEnv, SelfDriven, Watch};
use crate::api::client::{Client, DeleteOptions, PatchType};
use crate::api::resources::{NODES, PODS};
use crate::cache::Cache;
use crate::obj::{self, Obj};
use crate::queue::WorkQueue;
use decide::{PodCondition, Reason};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

pub const NAME: &str = "pod-garbage-collector-controller";
/// How often a pass runs (`gcCheckPeriod`).
pub const GC_CHECK_PERIOD: Duration = Duration::from_secs(20);
/// How long a node missing from the cache waits before it is read live (`quarantineTime`).
pub const QUARANTINE: Duration = Duration::from_secs(40);
/// Upstream's delaying queue of missing nodes (the `workqueue_*` metrics' `name`).
const NODE_QUEUE: &str = "orphaned_pods_nodes";
/// Requests in flight at once while deleting.
const PARALLEL: usize = 16;

/// Pods as this controller reads them.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/nodeName",
        "/status/phase",
        "/status/reason",
        "/status/conditions",
    ],
);
/// Nodes as this controller reads them.
pub const NODE_WATCH: Watch = Watch::fields(NODES, &["/spec/taints", "/status/conditions"]);

/// Its row in the controller table.
pub fn build(
    cx: &super::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::drives(PodGc::new(
        cx.cfg.pod_gc.terminated_pod_gc_threshold,
    ))))
}

/// (namespace, reason) -> attempts, and failures.
#[derive(Default)]
struct Counts {
    deleting: BTreeMap<(String, Reason), u64>,
    errors: BTreeMap<(String, Reason), u64>,
}

fn counts() -> std::sync::MutexGuard<'static, Counts> {
    static COUNTS: OnceLock<Mutex<Counts>> = OnceLock::new();
    COUNTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The collector's metric families (a family appears with its first series, as upstream's).
pub fn metric_families() -> Vec<crate::metrics::Family> {
    use crate::metrics::{Family, MetricType::Counter};
    let c = counts();
    let mut total = Family::alpha(
        "pod_gc_collector_force_delete_pods_total",
        "Number of pods that are being forcefully deleted since the Pod GC Controller started.",
        Counter,
    );
    let mut errors = Family::alpha(
        "pod_gc_collector_force_delete_pod_errors_total",
        "Number of errors encountered when forcefully deleting the pods since the Pod GC Controller started.",
        Counter,
    );
    for (f, m) in [(&mut total, &c.deleting), (&mut errors, &c.errors)] {
        for ((ns, reason), n) in m {
            f.push(&[("namespace", ns), ("reason", reason.label())], *n as f64);
        }
    }
    [total, errors]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

fn count(ns: &str, reason: Reason, failed: bool) {
    let mut c = counts();
    *c.deleting.entry((ns.to_string(), reason)).or_default() += 1;
    if failed {
        *c.errors.entry((ns.to_string(), reason)).or_default() += 1;
    }
}

struct Inner {
    threshold: i32,
    /// One key: the next pass (no name: upstream runs its passes without a queue).
    passes: Arc<WorkQueue<()>>,
    /// Nodes missing from the cache, each due once its quarantine is over.
    missing: Arc<WorkQueue<String>>,
}

pub struct PodGc {
    inner: Arc<Inner>,
}

impl PodGc {
    /// `threshold`: `--terminated-pod-gc-threshold`.
    pub fn new(threshold: i32) -> Self {
        PodGc {
            inner: Arc::new(Inner {
                threshold,
                passes: WorkQueue::new(""),
                missing: WorkQueue::new(NODE_QUEUE),
            }),
        }
    }
}

impl SelfDriven for PodGc {
    fn register(&self, cache: &Arc<Cache>) {
        cache.informer_for(&POD_WATCH);
        cache.informer_for(&NODE_WATCH);
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        crate::metrics::register_collector("podgc", Arc::new(metric_families));
        let inner = self.inner.clone();
        let (cache, client, stop) = (env.cache.clone(), env.client.clone(), env.stop.clone());
        env.serve(NAME, self.inner.passes.clone(), 1, move |_: &()| {
            inner.pass(&cache, &client, &stop);
            inner.passes.add_after((), GC_CHECK_PERIOD);
        });
        self.inner.passes.add(());
        Vec::new()
    }

    fn shutdown(&self) {
        self.inner.passes.shut_down();
        self.inner.missing.shut_down();
    }
}

impl Inner {
    /// One pass over every pod (upstream's `gc`).
    fn pass(&self, cache: &Cache, client: &Client, stop: &AtomicBool) {
        let pods = cache.store_for(&POD_WATCH);
        let facts = pods.scan(|p| Some(decide::PodFacts::of(p)));
        let nodes: decide::Nodes = cache
            .store_for(&NODE_WATCH)
            .scan(|n| Some((obj::name(n).to_string(), decide::out_of_service(n))))
            .into_iter()
            .collect();
        let done = Mutex::new(HashSet::new());
        let run =
            |list: Vec<&decide::PodFacts>, reason: Reason, condition: Option<&PodCondition>| {
                force_delete_all(cache, client, stop, &done, list, reason, condition)
            };

        let terminated = decide::terminated_beyond(&facts, self.threshold);
        if !terminated.is_empty() {
            log::info!("{NAME}: garbage collecting {} pods", terminated.len());
            run(terminated, Reason::Terminated, None);
        }

        log::trace!("{NAME}: GC'ing terminating pods that are on out-of-service nodes");
        let out_of_service = decide::terminating_out_of_service(&facts, &nodes);
        if !out_of_service.is_empty() {
            log::trace!(
                "{NAME}: garbage collecting {} pods that are terminating on nodes tainted with {}",
                out_of_service.len(),
                decide::OUT_OF_SERVICE_TAINT
            );
            run(out_of_service, Reason::OutOfService, None);
        }

        log::trace!("{NAME}: GC'ing orphaned");
        let gone = self.gone_nodes(client, &decide::unknown_nodes(&facts, &nodes), &nodes);
        let orphans = decide::orphaned(&facts, &gone);
        for p in &orphans {
            log::debug!(
                "{NAME}: found orphaned pod {} assigned to the node {}, deleting",
                p.key(),
                p.node
            );
        }
        run(orphans, Reason::Orphaned, Some(&decide::NODE_GONE));

        log::trace!("{NAME}: GC'ing unscheduled pods which are terminating");
        let unscheduled = decide::unscheduled_terminating(&facts);
        for p in &unscheduled {
            log::debug!(
                "{NAME}: found unscheduled terminating pod {} not assigned to any node, deleting",
                p.key()
            );
        }
        run(unscheduled, Reason::Unscheduled, None);
    }

    /// Quarantine the nodes pods name that the cache does not hold; of those whose quarantine
    /// is over, the ones a live read does not find (upstream's `discoverDeletedNodes`).
    fn gone_nodes(
        &self,
        client: &Client,
        unknown: &std::collections::BTreeSet<String>,
        nodes: &decide::Nodes,
    ) -> HashSet<String> {
        for n in unknown {
            self.missing.add_after(n.clone(), QUARANTINE);
        }
        let mut gone = HashSet::new();
        while let Some(n) = self.missing.try_get() {
            if !nodes.contains_key(&n) {
                match client.get_metadata(&NODES, None, &n) {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {
                        gone.insert(n.clone());
                    }
                    // Looked at again after another quarantine if pods still name it.
                    Err(e) => log::warn!("{NAME}: error while getting node {n}: {e}"),
                }
            }
            self.missing.done(&n);
        }
        gone
    }
}

/// Fail (when not terminal) and delete every pod of `list`, `PARALLEL` at a time, as the cache
/// holds it now; pods handled earlier in this pass, or gone from the cache since it began, are
/// left. Stops starting new ones once `stop` is set.
fn force_delete_all(
    cache: &Cache,
    client: &Client,
    stop: &AtomicBool,
    done: &Mutex<HashSet<String>>,
    list: Vec<&decide::PodFacts>,
    reason: Reason,
    condition: Option<&PodCondition>,
) {
    let list: Vec<&decide::PodFacts> = {
        let mut d = done.lock().unwrap_or_else(|p| p.into_inner());
        list.into_iter().filter(|p| d.insert(p.key())).collect()
    };
    let pods = cache.store_for(&POD_WATCH);
    crate::runtime::pool::for_each_parallel(list.len(), PARALLEL, |i| {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let facts = list[i];
        let Some(pod) = pods.get_in(&facts.namespace, &facts.name) else {
            return true;
        };
        let res = force_delete(cache, client, &pod, condition);
        match &res {
            Ok(()) if matches!(reason, Reason::Orphaned | Reason::Unscheduled) => {
                let what = if reason == Reason::Orphaned {
                    "orphaned"
                } else {
                    "unscheduled terminating"
                };
                log::info!(
                    "{NAME}: forced deletion of {what} pod {} succeeded",
                    facts.key()
                );
            }
            Ok(()) => {}
            Err(crate::Error::Cancelled) => return false,
            Err(_) => {}
        }
        count(&facts.namespace, reason, res.is_err());
        true
    });
}

/// Upstream's `markFailedAndDeletePodWithCondition`.
fn force_delete(
    cache: &Cache,
    client: &Client,
    pod: &Obj,
    condition: Option<&PodCondition>,
) -> crate::Result<()> {
    let (ns, name) = (obj::namespace(pod), obj::name(pod));
    log::info!("{NAME}: force deleting pod {ns}/{name}");
    if let Some(patch) = decide::fail_patch(pod, condition, SystemTime::now()) {
        let shape = cache.write_shape(PODS);
        let patched = client.patch_shaped(
            &PODS,
            Some(ns),
            name,
            PatchType::Strategic,
            &patch,
            Some("status"),
            shape.as_deref(),
        );
        match patched {
            Ok(v) => cache.observe_write(PODS, &v),
            Err(e) => {
                if !matches!(e, crate::Error::Cancelled) {
                    log::warn!("{NAME}: failed to patch status {patch} for pod {ns}/{name}: {e}");
                }
                return Err(e);
            }
        }
    }
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    let res = client.delete(&PODS, Some(ns), name, &opts);
    match &res {
        Ok(()) => cache.observe_delete(PODS, ns, name),
        // Gone already: upstream counts it as a failure too.
        Err(e) if e.is_not_found() => {
            log::debug!("{NAME}: deleting pod {ns}/{name}: {e}");
            cache.observe_delete(PODS, ns, name);
        }
        Err(crate::Error::Cancelled) => {}
        Err(e) => log::warn!("{NAME}: deleting pod {ns}/{name}: {e}"),
    }
    res
}

#[cfg(test)]
mod tests;
