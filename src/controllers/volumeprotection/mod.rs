//! persistentvolumeclaim-protection-controller and persistentvolume-protection-controller,
//! as upstream's `pkg/controller/volume/pvcprotection` and `pvprotection`.
//!
//! As upstream:
//! - A claim or volume that is not being deleted gets the `kubernetes.io/pvc-protection` /
//!   `kubernetes.io/pv-protection` finalizer (an update of the object; the apiserver's
//!   admission plugin adds them at creation, the controllers add what is missing).
//! - A claim being deleted loses the finalizer once no scheduled pod uses it (a
//!   `persistentVolumeClaim` volume naming it, or a generic ephemeral volume of a pod that
//!   owns it and is not shut down): the cached pods are asked first, then the apiserver (a
//!   live list of the namespace's pods), as upstream, so a pod the cache has not seen yet
//!   still holds the claim.
//! - A bound claim not being deleted carries v1.37's `Unused` condition: `True` /
//!   `NoPodsUsingPVC` while no pod that is not finished references it (scheduled or not),
//!   `False` / `PodUsingPVC` while one does, with the time of the last change (a status write).
//! - A volume being deleted loses the finalizer once it is no longer `Bound`.
//! - Claims are queued when they need a finalizer added or removed or have no `Unused`
//!   condition; pods at every change (their claims' condition follows them). Queues
//!   `pvcprotection` and `pvprotection`, one worker each; no Events.

pub mod pv;
pub mod pvc;
#[cfg(test)]
mod tests;

use serde_json::Value;

/// Whether the object lists `finalizer`.
fn has_finalizer(o: &Value, finalizer: &str) -> bool {
    o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Upstream's `IsDeletionCandidate`: being deleted and holding the finalizer.
pub fn is_deletion_candidate(o: &Value, finalizer: &str) -> bool {
    crate::obj::is_deleting(o) && has_finalizer(o, finalizer)
}

/// Upstream's `NeedToAddFinalizer`: not being deleted and without the finalizer.
pub fn need_to_add_finalizer(o: &Value, finalizer: &str) -> bool {
    !crate::obj::is_deleting(o) && !has_finalizer(o, finalizer)
}

/// The object with `finalizer` appended.
fn with_finalizer(o: &Value, finalizer: &str) -> Value {
    let mut next = o.clone();
    match next["metadata"]["finalizers"].as_array_mut() {
        Some(f) => f.push(finalizer.into()),
        None => next["metadata"]["finalizers"] = serde_json::json!([finalizer]),
    }
    next
}

/// The object without `finalizer`.
fn without_finalizer(o: &Value, finalizer: &str) -> Value {
    let mut next = o.clone();
    if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
        f.retain(|x| x != finalizer);
    }
    next
}
