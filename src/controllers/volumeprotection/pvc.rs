//! persistentvolumeclaim-protection-controller: the `kubernetes.io/pvc-protection`
//! finalizer, released once no pod uses the claim; and on bound claims v1.37's `Unused`
//! condition (PersistentVolumeClaimUnusedSinceTime, beta and on by default), which says since
//! when no pod references the claim.

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
            !shut_down(pod) && ephemeral_claim_of(pod, v, pvc)
        })
}

/// The condition type a bound claim carries (v1.37).
pub const UNUSED: &str = "Unused";

/// Whether `vol` of `pod` is the generic ephemeral volume whose claim `pvc` is (upstream's
/// `VolumeClaimName` and `VolumeIsForPod`).
fn ephemeral_claim_of(pod: &Value, vol: &Value, pvc: &Value) -> bool {
    vol.get("ephemeral").is_some_and(|e| !e.is_null())
        && format!("{}-{}", obj::name(pod), vol["name"].as_str().unwrap_or("")) == obj::name(pvc)
        && obj::controller_ref(pvc).is_some_and(|r| r.uid == obj::uid(pod))
}

/// Upstream's `podUsesPVCForUnusedSince`: a pod not terminated, scheduled or not, with a
/// volume naming the claim or the ephemeral volume whose claim it is.
pub fn pod_references_claim(pod: &Value, pvc: &Value) -> bool {
    if pod_terminated(pod) {
        return false;
    }
    let claim = obj::name(pvc);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| {
            v["persistentVolumeClaim"]["claimName"].as_str() == Some(claim)
                || ephemeral_claim_of(pod, v, pvc)
        })
}

/// The claim with its `Unused` condition brought to `used` (upstream's
/// `updateUnusedCondition`), or None when it already says so. A change of status sets
/// `lastTransitionTime` to `now`.
pub fn with_unused_condition(pvc: &Value, used: bool, now: &str) -> Option<Value> {
    let conds = pvc["status"]["conditions"].as_array();
    let existing = conds.and_then(|c| c.iter().find(|c| c["type"] == UNUSED));
    let is_true = existing.is_some_and(|c| c["status"] == "True");
    let (status, reason, message) = match (used, existing) {
        (true, None) => (
            "False",
            "PodUsingPVC",
            "A pod is currently referencing this PVC",
        ),
        (true, Some(_)) if is_true => (
            "False",
            "PodUsingPVC",
            "A pod is currently referencing this PVC",
        ),
        (false, _) if !is_true => (
            "True",
            "NoPodsUsingPVC",
            "No pods are currently referencing this PVC",
        ),
        _ => return None,
    };
    let c = serde_json::json!({"type": UNUSED, "status": status, "lastTransitionTime": now,
        "reason": reason, "message": message});
    let mut next = pvc.clone();
    if !next["status"]["conditions"].is_array() {
        next["status"]["conditions"] = serde_json::json!([]);
    }
    let list = next["status"]["conditions"]
        .as_array_mut()
        .expect("an array");
    match list.iter_mut().find(|x| x["type"] == UNUSED) {
        Some(x) => *x = c,
        None => list.push(c),
    }
    Some(next)
}

/// Whether the `Unused` condition is kept: its gate (beta and on in v1.37, alpha and off in
/// v1.36, absent before) at the emulated version.
fn unused_condition_gate() -> bool {
    crate::config::gates::enabled("PersistentVolumeClaimUnusedSinceTime")
}

/// Whether a claim is queued for its `Unused` condition: upstream queues a claim without one.
fn lacks_unused_condition(pvc: &Value) -> bool {
    unused_condition_gate()
        && !pvc["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == UNUSED))
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
                    if lacks_unused_condition(c)
                        || need_to_add_finalizer(c, PVC_PROTECTION_FINALIZER)
                        || is_deletion_candidate(c, PVC_PROTECTION_FINALIZER) =>
                {
                    vec![obj::key(c)]
                }
                _ => vec![],
            };
        }
        // Pods: every change may use or free its claims (the `Unused` condition follows
        // them all); a pod that replaced another of the same name frees the old one's.
        let pod = d.object();
        let mut keys = claim_keys(pod);
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
        if unused_condition_gate() && !obj::is_deleting(&pvc) && pvc["status"]["phase"] == "Bound" {
            let used = self.in_use_by(cx, &pvc, pod_references_claim)?;
            let now = crate::compat::timefmt::rfc3339(cx.now);
            if let Some(next) = with_unused_condition(&pvc, used, &now) {
                // The finalizer, if it is missing, comes with the next pass (the claim
                // changed under it).
                return Ok(Outcome::with(vec![Action::UpdateSubresource {
                    kind: PERSISTENTVOLUMECLAIMS,
                    object: next,
                    subresource: "status",
                }]));
            }
        }
        if is_deletion_candidate(&pvc, PVC_PROTECTION_FINALIZER)
            && !self.in_use_by(cx, &pvc, pod_uses_claim)?
        {
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
    /// Upstream's `isBeingUsedWith`: the cache first, then a live list of the namespace's
    /// pods, each asked with `uses`.
    fn in_use_by(&self, cx: &Cx, pvc: &Value, uses: fn(&Value, &Value) -> bool) -> Result<bool> {
        let ns = obj::namespace(pvc);
        let cached = cx.cache.store_for(&POD_VOLUMES_WATCH).list_namespace(ns);
        if cached.iter().any(|p| uses(p, pvc)) {
            return Ok(true);
        }
        let live = cx.client.list(&PODS, Some(ns), &ListOptions::default())?;
        Ok(live.items.iter().any(|p| uses(p, pvc)))
    }
}
