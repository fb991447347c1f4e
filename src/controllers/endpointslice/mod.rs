//! endpointslice-controller: for every Service with a selector, EndpointSlices listing the
//! endpoints of the pods it selects, as upstream v1.28's `pkg/controller/endpointslice` with
//! the `k8s.io/endpointslice` reconciler writes them:
//! - a set of slices per address family of the Service (`ipFamilies`; without them the
//!   cluster IP's family, or both for a headless Service) and per set of ports its pods give
//!   (named target ports resolved per pod), each of at most `--max-endpoints-per-slice`
//!   endpoints, packed and reused as upstream's reconciler does (`reconciler`): the fewest
//!   writes that bring the slices to what the pods say; a Service with no endpoints keeps one
//!   empty placeholder slice;
//! - an endpoint per pod with an IP of the family, not finished (terminating pods are kept):
//!   `ready` (serving and not terminating, or `publishNotReadyAddresses`), `serving`,
//!   `terminating`, `nodeName`, `zone` from the node's `topology.kubernetes.io/zone`, the
//!   hostname when the pod's subdomain is the Service, and a reference to the pod; pods on
//!   nodes not known are left out (unless `publishNotReadyAddresses`), and the sync reports it;
//! - slices named `<service>-<random>`, owned by the Service, labelled with the Service's
//!   labels, `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by:
//!   endpointslice-controller.k8s.io` and, headless, `service.kubernetes.io/headless`, and
//!   annotated with `endpoints.kubernetes.io/last-change-trigger-time`;
//! - topology-aware hints for `service.kubernetes.io/topology-mode: Auto` (`topology`), with
//!   `TopologyAwareHintsEnabled` / `TopologyAwareHintsDisabled` Events; without the
//!   annotation, hints from `spec.trafficDistribution` (`trafficdist`: `PreferClose`,
//!   `PreferSameZone`, `PreferSameNode`, v1.30-v1.35);
//! - a failed sync records `FailedToUpdateEndpointSlices` (component
//!   `endpoint-slice-controller`) and is retried; pod changes reach their Services after
//!   `--endpointslice-updates-batch-period`, at least `kit::servicepods::POD_CHANGE_WINDOW`
//!   (upstream: at once by default), slice changes after at least a second;
//! - upstream's `endpoint_slice_controller_*` metrics (`metrics`).
//!
//! Pod events find their Services through the selector index (`kit::servicepods`); a sync
//! finds its slices through an index of the slices by Service. The slices it wrote are tracked
//! by generation (`kit::slicetracker`): a sync waits while the cache is behind its own
//! writes, and the watch's echoes of its own writes queue nothing.

pub mod metrics;
pub mod model;
pub mod reconciler;
pub mod topology;
pub mod trafficdist;

use super::kit::servicepods::{pod_change_delay, selector, ServicePods};
use super::kit::slicetracker::{SliceIndex, SliceTracker, UpdateReads};
use super::kit::trigger;
use super::{
    Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, OnError, Outcome, Report,
    SyncEnd, Watch,
};
use crate::api::client::DeleteOptions;
use crate::api::resources::{ENDPOINTSLICES, NODES, SERVICES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj::{self, At as _};
use model::Slice;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// The stale-cache error of a sync (upstream's `StaleInformerCache`).
const STALE_CACHE: &str = "EndpointSlice informer cache is out of date";
/// upstream's `endpointSliceChangeMinSyncDelay`.
const SLICE_CHANGE_MIN_DELAY: Duration = Duration::from_secs(1);

/// Nodes are read for their labels (zone, roles), readiness and allocatable CPU.
pub const NODE_WATCH: Watch = Watch::fields(NODES, &["/status/conditions", "/status/allocatable"]);

/// The endpointslice-controller's row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let o = &cx.cfg.endpoint_slice;
    let (max, batch) = (
        o.max_endpoints_per_slice.max(1),
        pod_change_delay(o.endpoint_updates_batch_period),
    );
    let ctrl = EndpointSliceController::new(max as usize, batch);
    let m = ctrl.metrics.clone();
    crate::metrics::register_collector("endpointslice", Arc::new(move || m.families()));
    Ok(Some(super::Runnable::reconciles(ctrl)))
}

pub struct EndpointSliceController {
    max: usize,
    batch: Duration,
    index: ServicePods,
    slices: SliceIndex,
    tracker: SliceTracker,
    triggers: trigger::Tracker,
    topology: topology::TopologyCache,
    /// Node name -> (ready, zone), to tell the node changes that matter.
    nodes: Mutex<BTreeMap<String, (bool, Option<String>)>>,
    pub metrics: Arc<metrics::Metrics>,
}

impl EndpointSliceController {
    pub fn new(max: usize, batch: Duration) -> Self {
        EndpointSliceController {
            max,
            batch,
            index: ServicePods::default(),
            slices: SliceIndex::new(CONTROLLER_NAME),
            tracker: SliceTracker::default(),
            triggers: trigger::Tracker::default(),
            topology: topology::TopologyCache::default(),
            nodes: Mutex::new(BTreeMap::new()),
            metrics: Arc::new(metrics::Metrics::new(max)),
        }
    }

    /// `addNode/updateNode/deleteNode`: recompute the zones' shares when a node came, went, or
    /// changed readiness or zone; the Services whose hints no longer fit are synced.
    fn node_keys(&self, d: &Delta, cache: &Cache) -> Vec<String> {
        let n = d.object();
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let now = topology::node_fingerprint(n);
        let changed = match d.kind {
            DeltaKind::Deleted => {
                nodes.remove(obj::name(n));
                true
            }
            _ => {
                nodes.insert(obj::name(n).to_string(), now.clone()).as_ref() != Some(&now)
                    || d.kind == DeltaKind::Added
            }
        };
        drop(nodes);
        if !changed {
            return vec![];
        }
        self.topology.set_nodes(&cache.store(NODES).list());
        self.topology.overloaded_services()
    }
}

/// Upstream's queue rate limiter: per key 1 s doubling up to `max`, and 10 retries a second
/// overall (burst 100).
pub fn sync_rate_limiter(max: Duration) -> Box<dyn crate::queue::RateLimiter<String>> {
    use crate::queue::{Bucket, ItemExponential, MaxOf};
    Box::new(MaxOf::new(vec![
        Box::new(ItemExponential::new(Duration::from_secs(1), max)),
        Box::new(Bucket::new(10.0, 100)),
    ]))
}

fn service_ref(svc: &Value) -> ObjectRef {
    ObjectRef::of(&SERVICES, svc)
}

impl Controller for EndpointSliceController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            crate::controllers::endpoints::SERVICE_WATCH,
            crate::controllers::endpoints::POD_WATCH,
            Watch::full(ENDPOINTSLICES),
            NODE_WATCH,
        ]
    }

    fn key_delay(&self, w: &Watch) -> Duration {
        match w.kind {
            k if k == crate::api::resources::PODS => self.batch,
            k if k == ENDPOINTSLICES => self.batch.max(SLICE_CHANGE_MIN_DELAY),
            _ => Duration::ZERO,
        }
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        match w.kind {
            k if k == SERVICES => {
                self.index.observe_service(d);
                vec![obj::key(d.object())]
            }
            k if k == ENDPOINTSLICES => self.slices.keys_for(&self.tracker, d, UpdateReads::New),
            k if k == NODES => self.node_keys(d, cache),
            _ => self.index.pod_keys(d),
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key)
    }

    fn synced(&self, key: &str, _began: std::time::Instant, end: SyncEnd<'_>) {
        self.metrics.sync(
            key,
            match end {
                SyncEnd::Done => "success",
                SyncEnd::RetryQuietly(m) if m == STALE_CACHE => "stale",
                SyncEnd::RetryQuietly(_) | SyncEnd::Failed(_) => "error",
            },
        );
    }

    fn applied(&self, _key: &str, action: &Action, result: Applied<'_>) {
        if let Applied::Done(_) = result {
            match action {
                Action::Create { kind, .. } if *kind == ENDPOINTSLICES => {
                    self.metrics.change("create")
                }
                Action::Update { kind, .. } if *kind == ENDPOINTSLICES => {
                    self.metrics.change("update")
                }
                Action::Delete { kind, .. } if *kind == ENDPOINTSLICES => {
                    self.metrics.change("delete")
                }
                _ => {}
            }
        }
        self.tracker.applied(action, result)
    }

    fn rate_limiter(&self) -> Option<Box<dyn crate::queue::RateLimiter<String>>> {
        Some(sync_rate_limiter(Duration::from_secs(1000)))
    }

    fn on_error(&self, action: &Action, err: &crate::Error) -> OnError {
        match action {
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

impl EndpointSliceController {
    /// `syncService`.
    fn sync(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let (ns, _) = obj::split_key(key);
        let Some(svc) = cx.cache.store(SERVICES).get(key) else {
            self.triggers.forget(key);
            self.tracker.delete_service(key);
            self.topology.delete_service(key);
            self.metrics.delete_service(key);
            return Ok(Outcome::none());
        };
        if svc.at("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
            return Ok(Outcome::none());
        }
        let Some(sel) = selector(&svc) else {
            return Ok(Outcome::none());
        };
        // The cache behind our own slice writes: retried before the pods are decoded.
        let slices = self.slices.slices(cx.cache, key, false);
        if self.tracker.stale(key, &slices) {
            return Ok(Outcome {
                retry_quietly: Some(STALE_CACHE.into()),
                ..Outcome::none()
            });
        }
        let pods = self.index.selected(cx.cache, ns, sel);
        let trigger = self.triggers.compute(key, &svc, &pods).map(trigger::format);
        // Each get decodes the stored node: once per node and sync, not once per pod.
        let nodes = cx.cache.store(NODES);
        let seen_nodes: std::cell::RefCell<HashMap<String, Option<obj::Obj>>> = Default::default();
        let node = |name: &str| {
            if let Some(n) = seen_nodes.borrow().get(name) {
                return n.clone();
            }
            let n = nodes.get(name);
            seen_nodes.borrow_mut().insert(name.to_string(), n.clone());
            n
        };
        let input = reconciler::Input {
            svc: &svc,
            pods: &pods,
            node: &node,
            existing: slices.iter().map(Slice::from_cached).collect(),
            max: self.max,
            controller: CONTROLLER_NAME,
            trigger,
        };
        let plan = reconciler::reconcile(&input, &self.topology);
        for m in &plan.metrics {
            self.metrics.observe(key, m);
        }
        Ok(self.outcome(&svc, plan))
    }

    /// The plan as actions: each write reports a failure as upstream's sync error Event.
    fn outcome(&self, svc: &Value, plan: reconciler::Plan) -> Outcome {
        let key = obj::key(svc);
        let ns = obj::namespace(svc);
        let generate = format!("{}-", obj::name(svc));
        let report = |what: String| Report {
            about: service_ref(svc),
            success_reason: "",
            success_prefix: "",
            failure_reason: "FailedToUpdateEndpointSlices",
            failure_prefix: format!("Error updating Endpoint Slices for Service {key}: {what}: ")
                .into(),
        };
        let mut actions = Vec::new();
        for s in &plan.create {
            actions.push(Action::Reported {
                action: Box::new(Action::Create {
                    kind: ENDPOINTSLICES,
                    namespace: ns.to_string(),
                    object: s.to_object(ns, &generate),
                }),
                report: report(format!("failed to create EndpointSlice for Service {key}")),
            });
        }
        for s in &plan.update {
            actions.push(Action::Reported {
                action: Box::new(Action::Update {
                    kind: ENDPOINTSLICES,
                    object: s.to_object(ns, &generate),
                }),
                report: report(format!(
                    "failed to update {} EndpointSlice for Service {key}",
                    s.name
                )),
            });
        }
        for s in &plan.delete {
            let uid = s.from.as_deref().map(obj::uid).unwrap_or("");
            self.tracker.deleting(&key, ns, &s.name, uid);
            actions.push(Action::Reported {
                action: Box::new(Action::Delete {
                    kind: ENDPOINTSLICES,
                    namespace: ns.to_string(),
                    name: s.name.clone(),
                    options: DeleteOptions::default(),
                }),
                report: report(format!(
                    "failed to delete {} EndpointSlice for Service {key}",
                    s.name
                )),
            });
        }
        for (event_type, reason, message) in plan.events {
            actions.push(Action::Event(EventSpec {
                involved: service_ref(svc),
                event_type,
                reason: reason.to_string(),
                message,
            }));
        }
        let mut out = Outcome::with(actions);
        if !plan.errors.is_empty() {
            let msg = if plan.errors.len() == 1 {
                plan.errors[0].clone()
            } else {
                format!("[{}]", plan.errors.join(", "))
            };
            out.actions.push(Action::Event(EventSpec {
                involved: service_ref(svc),
                event_type: EventType::Warning,
                reason: "FailedToUpdateEndpointSlices".into(),
                message: format!("Error updating Endpoint Slices for Service {key}: {msg}"),
            }));
            out.retry_quietly = Some(msg);
        }
        if !out.actions.is_empty() {
            log::debug!(
                "endpointslice-controller: {key}: {} to create, {} to update, {} to delete",
                plan.create.len(),
                plan.update.len(),
                plan.delete.len()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_metrics;
