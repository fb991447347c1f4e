//! persistentvolumeclaim-protection-controller: the `kubernetes.io/pvc-protection`
//! finalizer, released once no pod uses the claim.

use super::{is_deletion_candidate, need_to_add_finalizer, with_finalizer, without_finalizer};
use crate::api::client::ListOptions;
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::kit::volume::{
    pod_terminated, POD_VOLUMES_WATCH, PVC_PROTECTION_FINALIZER,
};
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::Value;

/// Claims, whole (they are written back).
pub const CLAIM_WATCH: Watch = Watch::full(PERSISTENTVOLUMECLAIMS);

/// Its row in the controller table.
pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    Ok(Some(crate::controllers::Runnable::reconciles(
        PvcProtection,
    )))
}

pub struct PvcProtection;

/// Upstream's `podIsShutDown`: deleted with a grace period of 0.
fn shut_down(pod: &Value) -> bool {
    obj::is_deleting(pod) && pod["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
}

/// Upstream's `podUsesPVC`: a scheduled pod with a volume naming the claim, or a generic
/// ephemeral volume whose claim this is (owned by the pod) while the pod is not shut down.
pub fn pod_uses_claim(pod: &Value, pvc: &Value) -> bool {
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return false;
    }
    let claim = obj::name(pvc);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| {
            if v["persistentVolumeClaim"]["claimName"].as_str() == Some(claim) {
                return true;
            }
            let ephemeral = v.get("ephemeral").is_some_and(|e| !e.is_null());
            ephemeral
                && !shut_down(pod)
                && format!("{}-{}", obj::name(pod), v["name"].as_str().unwrap_or("")) == claim
                && obj::controller_ref(pvc).is_some_and(|r| r.uid == obj::uid(pod))
        })
}

/// The claims a pod's volumes name (`namespace/name`).
fn claim_keys(pod: &Value) -> Vec<String> {
    let ns = obj::namespace(pod);
    crate::controllers::kit::volume::pod_claim_names(pod)
        .into_iter()
        .map(|c| obj::make_key(ns, &c))
        .collect()
}

impl Controller for PvcProtection {
    fn watches(&self) -> Vec<Watch> {
        vec![CLAIM_WATCH, POD_VOLUMES_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if w.kind == PERSISTENTVOLUMECLAIMS {
            return match (d.kind, &d.new) {
                (DeltaKind::Added | DeltaKind::Updated, Some(c))
                    if need_to_add_finalizer(c, PVC_PROTECTION_FINALIZER)
                        || is_deletion_candidate(c, PVC_PROTECTION_FINALIZER) =>
                {
                    vec![obj::key(c)]
                }
                _ => vec![],
            };
        }
        // Pods: a deleted, terminated or unscheduled pod may free its claims; a pod that
        // replaced another of the same name frees the old one's.
        let pod = d.object();
        let mut keys = Vec::new();
        let deleted = d.kind == DeltaKind::Deleted;
        if deleted
            || pod_terminated(pod)
            || pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
        {
            keys.extend(claim_keys(pod));
        }
        if let (DeltaKind::Updated, Some(old)) = (d.kind, &d.old) {
            if obj::uid(old) != obj::uid(pod) {
                keys.extend(claim_keys(old));
            }
        }
        keys
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pvc) = cx.cache.store_for(&CLAIM_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        if is_deletion_candidate(&pvc, PVC_PROTECTION_FINALIZER) && !self.in_use(cx, &pvc)? {
            return Ok(Outcome::with(vec![Action::Update {
                kind: PERSISTENTVOLUMECLAIMS,
                object: without_finalizer(&pvc, PVC_PROTECTION_FINALIZER),
            }]));
        }
        if need_to_add_finalizer(&pvc, PVC_PROTECTION_FINALIZER) {
            return Ok(Outcome::with(vec![Action::Update {
                kind: PERSISTENTVOLUMECLAIMS,
                object: with_finalizer(&pvc, PVC_PROTECTION_FINALIZER),
            }]));
        }
        Ok(Outcome::none())
    }
}

impl PvcProtection {
    /// Upstream's `isBeingUsed`: the cache first, then a live list of the namespace's pods.
    fn in_use(&self, cx: &Cx, pvc: &Value) -> Result<bool> {
        let ns = obj::namespace(pvc);
        let cached = cx.cache.store_for(&POD_VOLUMES_WATCH).list_namespace(ns);
        if cached.iter().any(|p| pod_uses_claim(p, pvc)) {
            return Ok(true);
        }
        let live = cx.client.list(&PODS, Some(ns), &ListOptions::default())?;
        Ok(live.items.iter().any(|p| pod_uses_claim(p, pvc)))
    }
}
