//! endpointslice-mirroring-controller: the Endpoints of Services without a selector (written
//! by someone else) mirrored into EndpointSlices, as upstream v1.28's
//! `pkg/controller/endpointslicemirroring` does:
//! - mirrored when the Endpoints and its Service exist, the Service has no selector, the
//!   Endpoints is not labelled `endpointslice.kubernetes.io/skip-mirror: "true"` and is not a
//!   leader-election record; otherwise its mirrored slices are deleted;
//! - slices named `<name>-<random>`, owned by the Endpoints, with its labels plus
//!   `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//!   endpointslicemirroring-controller.k8s.io`, and its annotations but the trigger time and
//!   kubectl's last-applied configuration (`reconciler`);
//! - at most `--mirroring-max-endpoints-per-subset` addresses per subset, with
//!   `TooManyAddressesToMirror` and `InvalidIPAddress` Events (component
//!   `endpoint-slice-mirroring-controller`) about the Endpoints;
//! - slice changes reach their Endpoints after `--mirroring-endpointslice-updates-batch-period`.
//!
//! Like the endpointslice controller it tracks the generations it wrote
//! (`kit::slicetracker`). Upstream's slice update handler reads the old and the new slice the
//! wrong way round (the generation check is made on the old one); this does the same, so an
//! edit of a mirrored slice by someone else is put right at the next change of its Endpoints,
//! as upstream.

pub mod metrics;
pub mod reconciler;

use super::endpointslice::model::Slice;
use super::endpointslice::sync_rate_limiter;
use super::kit::slicetracker::{SliceIndex, SliceTracker, UpdateReads};
use super::{
    Action, Applied, Controller, Cx, EventSpec, ObjectRef, OnError, Outcome, SyncEnd, Watch,
};
use crate::api::client::DeleteOptions;
use crate::api::resources::{ENDPOINTS, ENDPOINTSLICES, SERVICES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj::{self, At as _};
use reconciler::CONTROLLER_NAME;
use serde_json::Value;
use std::time::Duration;

const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The endpointslice-mirroring-controller's row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let o = &cx.cfg.endpoint_slice;
    let max = o.mirroring_max_endpoints_per_subset.max(1);
    let batch = o.mirroring_endpoint_updates_batch_period;
    let ctrl = MirroringController::new(max as usize, batch);
    let m = ctrl.metrics.clone();
    crate::metrics::register_collector(
        "endpointslicemirroring",
        std::sync::Arc::new(move || m.families()),
    );
    Ok(Some(super::Runnable::reconciles(ctrl)))
}

/// `shouldMirror`.
fn should_mirror(ep: &Value) -> bool {
    obj::label(ep, SKIP_MIRROR) != Some("true") && obj::annotation(ep, LEADER_ANNOTATION).is_none()
}

/// The Service has no selector (Go's nil map: absent, or never stored when empty).
fn selectorless(svc: &Value) -> bool {
    svc.at("/spec/selector")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty())
}

pub struct MirroringController {
    max: usize,
    batch: Duration,
    slices: SliceIndex,
    tracker: SliceTracker,
    pub metrics: std::sync::Arc<metrics::Metrics>,
}

impl MirroringController {
    pub fn new(max: usize, batch: Duration) -> Self {
        MirroringController {
            max,
            batch,
            slices: SliceIndex::new(CONTROLLER_NAME),
            tracker: SliceTracker::default(),
            metrics: std::sync::Arc::new(metrics::Metrics::new(max)),
        }
    }

    /// Delete every mirrored slice of `key` (upstream's `deleteMirroredSlices`).
    fn delete_all(&self, cx: &Cx, key: &str) -> Outcome {
        self.tracker.delete_service(key);
        self.metrics.delete(key);
        let (ns, _) = obj::split_key(key);
        let actions = self
            .slices
            .slices(cx.cache, key, true)
            .iter()
            .map(|s| Action::Delete {
                kind: ENDPOINTSLICES,
                namespace: ns.to_string(),
                name: obj::name(s).to_string(),
                options: DeleteOptions::default(),
            })
            .collect();
        Outcome::with(actions)
    }
}

impl Controller for MirroringController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            Watch::full(ENDPOINTS),
            crate::controllers::endpoints::SERVICE_WATCH,
            Watch::full(ENDPOINTSLICES),
        ]
    }

    fn key_delay(&self, w: &Watch) -> Duration {
        if w.kind == ENDPOINTSLICES {
            self.batch
        } else {
            Duration::ZERO
        }
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        match w.kind {
            k if k == ENDPOINTS => {
                let any = d.new.as_deref().is_some_and(should_mirror)
                    || d.old.as_deref().is_some_and(should_mirror);
                if any {
                    vec![obj::key(o)]
                } else {
                    vec![]
                }
            }
            k if k == SERVICES => {
                let queue = match (d.kind, &d.old, &d.new) {
                    (DeltaKind::Updated, Some(old), Some(new)) => {
                        selectorless(old) != selectorless(new)
                    }
                    _ => selectorless(o),
                };
                if queue {
                    vec![obj::key(o)]
                } else {
                    vec![]
                }
            }
            _ => self.slices.keys_for(&self.tracker, d, UpdateReads::Old),
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key)
    }

    fn synced(&self, _key: &str, began: std::time::Instant, _end: SyncEnd<'_>) {
        self.metrics.sync_duration(began.elapsed());
    }

    fn applied(&self, _key: &str, action: &Action, result: Applied<'_>) {
        if let (Applied::Done(_), Some(op)) = (&result, slice_write(action)) {
            self.metrics.change(op);
        }
        self.tracker.applied(action, result)
    }

    fn rate_limiter(&self) -> Option<Box<dyn crate::queue::RateLimiter<String>>> {
        Some(sync_rate_limiter(Duration::from_secs(100)))
    }

    fn on_error(&self, action: &Action, err: &crate::Error) -> OnError {
        match action {
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

/// `create`, `update` or `delete` for a write of an EndpointSlice.
fn slice_write(action: &Action) -> Option<&'static str> {
    match action {
        Action::Create { kind, .. } if *kind == ENDPOINTSLICES => Some("create"),
        Action::Update { kind, .. } if *kind == ENDPOINTSLICES => Some("update"),
        Action::Delete { kind, .. } if *kind == ENDPOINTSLICES => Some("delete"),
        _ => None,
    }
}

impl MirroringController {
    /// `syncEndpoints`.
    fn sync(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(ep) = cx.cache.store(ENDPOINTS).get(key) else {
            return Ok(self.delete_all(cx, key));
        };
        if !should_mirror(&ep) {
            return Ok(self.delete_all(cx, key));
        }
        match cx.cache.store(SERVICES).get(key) {
            Some(svc) if selectorless(&svc) => {}
            _ => return Ok(self.delete_all(cx, key)),
        }
        let slices = self.slices.slices(cx.cache, key, true);
        if self.tracker.stale(key, &slices) {
            return Ok(Outcome {
                retry_quietly: Some("EndpointSlice informer cache is out of date".into()),
                ..Outcome::none()
            });
        }
        let existing = slices.iter().map(Slice::from_cached).collect();
        let plan = reconciler::reconcile(&ep, existing, self.max);
        self.metrics.observe(key, &plan.metrics);
        let ns = obj::namespace(&ep);
        let generate = format!("{}-", obj::name(&ep));
        let mut actions = Vec::new();
        for s in &plan.create {
            actions.push(Action::Create {
                kind: ENDPOINTSLICES,
                namespace: ns.to_string(),
                object: s.to_object(ns, &generate),
            });
        }
        for s in &plan.update {
            actions.push(Action::Update {
                kind: ENDPOINTSLICES,
                object: s.to_object(ns, &generate),
            });
        }
        for s in &plan.delete {
            let uid = s.from.as_deref().map(obj::uid).unwrap_or("");
            self.tracker.deleting(key, ns, &s.name, uid);
            actions.push(Action::Delete {
                kind: ENDPOINTSLICES,
                namespace: ns.to_string(),
                name: s.name.clone(),
                options: DeleteOptions::default(),
            });
        }
        for (event_type, reason, message) in plan.events {
            actions.push(Action::Event(EventSpec {
                involved: ObjectRef::of(&ENDPOINTS, &ep),
                event_type,
                reason: reason.to_string(),
                message,
            }));
        }
        Ok(Outcome::with(actions))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_metrics;
