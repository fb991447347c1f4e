//! endpoints-controller: for every Service with a selector, an Endpoints object of the same
//! name listing the addresses of the pods it selects, as upstream v1.28's
//! `pkg/controller/endpoint` writes it:
//! - an address per pod with an IP of the Service's family (its first `ipFamilies` entry; for
//!   Services without families, that of the cluster IP, or for headless ones of the pod's
//!   `podIP`), with `nodeName`, a `targetRef` to the pod and, when the pod's `subdomain` is the
//!   Service's name, its `hostname`; ready pods under `addresses`, others under
//!   `notReadyAddresses`, all of them ready with `publishNotReadyAddresses` (which also keeps
//!   terminating pods). Pods that have finished (`Succeeded`, `Failed`) or have no IP are left
//!   out, and so are terminating pods otherwise. v1.28 reads neither the
//!   `service.alpha.kubernetes.io/tolerate-unready-endpoints` annotation nor
//!   `pod.beta.kubernetes.io/hostname`, and neither does this;
//! - a port per Service port, a named target port resolved in each pod's containers (a pod
//!   without it is left out of that port); a headless Service without ports lists its pods
//!   without ports;
//! - subsets in upstream's canonical order (`repack`), at most 1000 addresses with
//!   `endpoints.kubernetes.io/over-capacity: truncated`, `endpoints.kubernetes.io/managed-by:
//!   endpoint-controller` (v1.33; an Endpoints without it is written again), the Service's labels plus
//!   `service.kubernetes.io/headless` for headless Services, and upstream's
//!   `endpoints.kubernetes.io/last-change-trigger-time` (`trigger`);
//! - nothing is written when the subsets (pod resourceVersions aside), the labels and the
//!   capacity annotation are already right; ExternalName and selector-less Services are left
//!   alone; the Endpoints of a deleted Service are deleted, and at start every Endpoints
//!   object without its Service (leader-election records aside);
//! - a failed write records `FailedToCreateEndpoint` / `FailedToUpdateEndpoint` (component
//!   `endpoint-controller`), as upstream, and is retried;
//! - pod changes reach their Services after `--endpoint-updates-batch-period`.
//!
//! Pod events find their Services through an index of the Services' selectors, and a sync
//! finds its pods through an index of the pods' labels, so neither decodes a namespace's
//! objects. Upstream deletes the Endpoints of a Service it no longer finds whether or not its
//! cache holds them; here the delete is sent only when the cache holds them.

pub(crate) mod gohash;
pub(crate) mod repack;
pub(crate) mod subsets;
mod sync;

pub use repack::MAX_CAPACITY;
pub use sync::{HEADLESS_LABEL, OVER_CAPACITY, TRIGGER_TIME};

use super::kit::servicepods::{pod_change_delay, selector, ServicePods, SYNC_FIELDS};
use super::kit::trigger;
use super::{Action, Controller, Cx, ObjectRef, OnError, Outcome, Report, Watch};
use crate::api::client::DeleteOptions;
use crate::api::resources::{ENDPOINTS, PODS, SERVICES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::time::Duration;

/// What is read of a pod beyond its metadata, by the pod handlers and the syncs alike: where
/// it runs, its hostname and subdomain, its containers' ports (named target ports), its phase,
/// IPs and conditions.
pub const POD_WATCH: Watch = Watch::fields(PODS, SYNC_FIELDS);

/// Services are read for their labels, creation time and spec.
pub const SERVICE_WATCH: Watch = Watch::fields(SERVICES, &["/spec"]);

/// The endpoints-controller's row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(EndpointsController::new(
        pod_change_delay(cx.cfg.endpoint_controller.endpoint_updates_batch_period),
    ))))
}

pub struct EndpointsController {
    batch: Duration,
    index: ServicePods,
    tracker: trigger::Tracker,
}

impl EndpointsController {
    pub fn new(batch: Duration) -> Self {
        EndpointsController {
            batch,
            index: ServicePods::default(),
            tracker: trigger::Tracker::default(),
        }
    }
}

impl Controller for EndpointsController {
    fn watches(&self) -> Vec<Watch> {
        vec![SERVICE_WATCH, POD_WATCH, Watch::full(ENDPOINTS)]
    }

    fn key_delay(&self, w: &Watch) -> Duration {
        if w.kind == PODS {
            self.batch
        } else {
            Duration::ZERO
        }
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == SERVICES {
            self.index.observe_service(d);
            return vec![obj::key(d.object())];
        }
        if w.kind == PODS {
            return self.index.pod_keys(d);
        }
        // Endpoints: a deleted one is looked at again (its Service may want it back); at
        // start every one (upstream's `checkLeftoverEndpoints`), to delete those whose
        // Service is gone, leader-election records aside.
        let o = d.object();
        let first_list = d.kind == DeltaKind::Added && !cache.informer(ENDPOINTS).has_synced();
        let leader = obj::annotation(o, sync::LEADER_ANNOTATION).is_some();
        if d.kind == DeltaKind::Deleted || (first_list && !leader) {
            return vec![obj::key(o)];
        }
        vec![]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let (ns, name) = obj::split_key(key);
        let Some(svc) = cx.cache.store(SERVICES).get(key) else {
            self.tracker.forget(key);
            if cx.cache.store(ENDPOINTS).get(key).is_none() {
                return Ok(Outcome::none());
            }
            return Ok(Outcome::with(vec![Action::Delete {
                kind: ENDPOINTS,
                namespace: ns.to_string(),
                name: name.to_string(),
                options: DeleteOptions::default(),
            }]));
        };
        if svc.at("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
            return Ok(Outcome::none());
        }
        let Some(sel) = selector(&svc) else {
            return Ok(Outcome::none());
        };
        let pods = self.index.selected(cx.cache, ns, sel);
        let trigger = self.tracker.compute(key, &svc, &pods);
        let (subsets, ready, not_ready) = sync::desired_subsets(&svc, &pods);
        let current = cx.cache.store(ENDPOINTS).get(key);
        let Some(object) = sync::endpoints_to_write(
            &svc,
            current.as_deref(),
            subsets,
            trigger.map(trigger::format),
        ) else {
            return Ok(Outcome::none());
        };
        log::debug!(
            "endpoints-controller: {key}: {} endpoints ({ready} ready, {not_ready} not ready)",
            if current.is_some() {
                "updating"
            } else {
                "creating"
            }
        );
        let (action, report) = match current {
            None => (
                Action::Create {
                    kind: ENDPOINTS,
                    namespace: ns.to_string(),
                    object: object.clone(),
                },
                Report {
                    // Upstream's reference to the object it failed to create has no
                    // namespace (so the Event goes to `default`).
                    about: ObjectRef {
                        kind: ENDPOINTS.kind.to_string(),
                        api_version: ENDPOINTS.api_version(),
                        namespace: String::new(),
                        name: name.to_string(),
                        uid: String::new(),
                        resource_version: String::new(),
                    },
                    success_reason: "",
                    success_prefix: "",
                    failure_reason: "FailedToCreateEndpoint",
                    failure_prefix: format!("Failed to create endpoint for service {key}: ").into(),
                },
            ),
            Some(_) => (
                Action::Update {
                    kind: ENDPOINTS,
                    object: object.clone(),
                },
                Report {
                    about: ObjectRef::of(&ENDPOINTS, &object),
                    success_reason: "",
                    success_prefix: "",
                    failure_reason: "FailedToUpdateEndpoint",
                    failure_prefix: format!("Failed to update endpoint {key}: ").into(),
                },
            ),
        };
        Ok(Outcome::with(vec![Action::Reported {
            action: Box::new(action),
            report,
        }]))
    }

    fn on_error(&self, action: &Action, err: &crate::Error) -> OnError {
        match action {
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

#[cfg(test)]
mod tests;
