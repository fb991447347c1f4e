//! Volumes: upstream's `syncVolume`, `unbindVolume` and `reclaimVolume` without in-tree
//! volume plugins (no deleter, no recycler).

use super::claim::pod_terminated;
use super::{
    claim_event, claim_ref_key, update, volume_event, volume_phase, PvBinder, CLAIM_WATCH,
    POD_WATCH,
};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES};
use crate::controllers::kit::volume as kv;
use crate::controllers::{Action, Cx, EventType, Outcome};
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::sync::Arc;

/// Outcome of writes where the next depends on the answer of the first: the key is looked
/// at again at once.
fn step(actions: Vec<Action>) -> Outcome {
    let again = actions.iter().any(|a| !matches!(a, Action::Event(_)));
    Outcome {
        actions,
        requeue_after: again.then_some(std::time::Duration::ZERO),
        ..Outcome::default()
    }
}

impl PvBinder {
    /// The claim a volume points to: from the cache, else (unless the volume is already
    /// released) from the apiserver; a claim with another UID is read again live.
    fn volume_claim(&self, cx: &Cx, pv: &Value) -> Result<Option<Arc<Value>>> {
        let cr = &pv["spec"]["claimRef"];
        let (ns, name) = (
            cr["namespace"].as_str().unwrap_or(""),
            cr["name"].as_str().unwrap_or(""),
        );
        let uid = cr["uid"].as_str().unwrap_or("");
        let released = matches!(pv["status"]["phase"].as_str(), Some("Released" | "Failed"));
        let live = || -> Result<Option<Arc<Value>>> {
            match cx.client.get(&PERSISTENTVOLUMECLAIMS, Some(ns), name) {
                Ok(v) => Ok(Some(Arc::new(v))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            }
        };
        let mut claim = cx.cache.store_for(&CLAIM_WATCH).get_in(ns, name);
        if claim.is_none() && !released {
            claim = live()?;
        }
        if claim.as_ref().is_some_and(|c| obj::uid(c) != uid) {
            claim = live()?.filter(|c| obj::uid(c) == uid);
        }
        Ok(claim)
    }

    pub(super) fn sync_volume(&self, cx: &Cx, pv: &Value) -> Result<Outcome> {
        let cr = &pv["spec"]["claimRef"];
        if cr.is_null() || cr["uid"].as_str().unwrap_or("").is_empty() {
            return Ok(Outcome::with(
                volume_phase(pv, "Available", "").into_iter().collect(),
            ));
        }
        let claim = self.volume_claim(cx, pv)?;
        let Some(pvc) = claim else {
            // The claim is gone: released (unless already released or failed), then
            // reclaimed.
            if let Some(a) = released_phase(pv) {
                return Ok(step(vec![a]));
            }
            return self.reclaim(cx, pv);
        };
        let vol_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
        if vol_name.is_empty() {
            if kv::volume_mode(&pvc) != kv::volume_mode(pv) {
                return Ok(Outcome::with(vec![
                    volume_event(
                        pv,
                        EventType::Warning,
                        "VolumeMismatch",
                        format!(
                            "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                            obj::name(&pvc)
                        ),
                    ),
                    claim_event(
                        &pvc,
                        EventType::Warning,
                        "VolumeMismatch",
                        format!(
                            "Cannot bind PersistentVolume {:?} to requested PersistentVolumeClaim due to incompatible volumeMode.",
                            obj::name(pv)
                        ),
                    ),
                ]));
            }
            // The claim finishes the binding (its key is queued with this volume's change).
            return Ok(Outcome::none());
        }
        if vol_name == obj::name(pv) {
            return Ok(Outcome::with(
                volume_phase(pv, "Bound", "").into_iter().collect(),
            ));
        }
        // The claim is bound to another volume.
        let dynamic_delete = obj::annotation(pv, kv::ANN_DYNAMICALLY_PROVISIONED).is_some()
            && pv["spec"]["persistentVolumeReclaimPolicy"].as_str() == Some("Delete");
        if dynamic_delete {
            if let Some(a) = released_phase(pv) {
                return Ok(step(vec![a]));
            }
            return self.reclaim(cx, pv);
        }
        Ok(step(vec![unbind(pv)]))
    }

    /// Upstream's `reclaimVolume` with no in-tree plugin.
    fn reclaim(&self, cx: &Cx, pv: &Value) -> Result<Outcome> {
        if obj::annotation(pv, kv::ANN_MIGRATED_TO).is_some_and(|m| !m.is_empty()) {
            return Ok(Outcome::none());
        }
        match pv["spec"]["persistentVolumeReclaimPolicy"].as_str() {
            Some("Retain") => Ok(Outcome::none()),
            Some("Recycle") => self.recycle(cx, pv),
            Some("Delete") => self.delete(cx, pv),
            _ => Ok(Outcome::with(failed(
                pv,
                "VolumeUnknownReclaimPolicy",
                "Volume has unrecognized PersistentVolumeReclaimPolicy",
            ))),
        }
    }

    /// Upstream's `isVolumeReleased`.
    fn released(&self, cx: &Cx, pv: &Value) -> bool {
        let cr = &pv["spec"]["claimRef"];
        let uid = cr["uid"].as_str().unwrap_or("");
        if cr.is_null() || uid.is_empty() {
            return false;
        }
        let Some(key) = claim_ref_key(pv) else {
            return true;
        };
        match cx.cache.store_for(&CLAIM_WATCH).get(&key) {
            Some(c) if obj::uid(&c) == uid => {
                let v = c["spec"]["volumeName"].as_str().unwrap_or("");
                !v.is_empty() && v != obj::name(pv)
            }
            _ => true,
        }
    }

    /// The volume read again from the apiserver, if it still needs reclaiming.
    fn fresh_released(&self, cx: &Cx, pv: &Value) -> Result<Option<Value>> {
        let fresh = match cx.client.get(&PERSISTENTVOLUMES, None, obj::name(pv)) {
            Ok(v) => v,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                log::info!(
                    "persistentvolume-binder-controller: cannot read volume {}: {e}",
                    obj::name(pv)
                );
                return Ok(None);
            }
        };
        Ok(self.released(cx, &fresh).then_some(fresh))
    }

    /// Delete reclaim: an externally provisioned, migrated or CSI volume is the external
    /// provisioner's to delete; anything else has no deleter here.
    fn delete(&self, cx: &Cx, pv: &Value) -> Result<Outcome> {
        // Upstream's `getProvisionerNameFromVolume`: an external provisioner's volume is
        // counted under its class's provisioner, a host path volume under the in-tree
        // plugin upstream's controller has for it, anything else under `N/A`.
        const HOST_PATH: &str = "kubernetes.io/host-path";
        let provisioned = obj::annotation(pv, kv::ANN_DYNAMICALLY_PROVISIONED);
        // Upstream's `findDeletablePlugin`: a volume of an external provisioner, one migrated
        // to CSI (the annotation present, whatever its value) or a CSI volume (since v1.34 at
        // the latest) has no deleter here and is left to the external provisioner.
        let external = match provisioned {
            Some(p) if !p.is_empty() => !p.starts_with("kubernetes.io/"),
            _ => {
                pv["metadata"]["annotations"][kv::ANN_MIGRATED_TO].is_string()
                    || pv["spec"]["csi"].is_object()
            }
        };
        let plugin = match provisioned {
            _ if external => Self::class(cx, kv::volume_class(pv))
                .and_then(|c| c["provisioner"].as_str().map(str::to_string))
                .unwrap_or_default(),
            Some(HOST_PATH) => HOST_PATH.to_string(),
            Some(p) if !p.is_empty() => String::new(),
            _ if pv["spec"]["hostPath"].is_object() => HOST_PATH.to_string(),
            _ => String::new(),
        };
        self.stats
            .op_started(obj::name(pv), &plugin, super::metrics::DELETE);
        let Some(fresh) = self.fresh_released(cx, pv)? else {
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&fresh) {
            return Ok(Outcome::none());
        }
        if external {
            // The external provisioner deletes it.
            return Ok(Outcome::none());
        }
        let err = match provisioned {
            Some(p) if !p.is_empty() => format!("no volume plugin matched name: {p}"),
            _ => format!(
                "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
                obj::name(pv)
            ),
        };
        self.stats.op_failed(obj::name(pv));
        Ok(Outcome::with(failed(pv, "VolumeFailedDelete", &err)))
    }

    /// Recycle reclaim: no recycler without in-tree plugins.
    fn recycle(&self, cx: &Cx, pv: &Value) -> Result<Outcome> {
        let Some(fresh) = self.fresh_released(cx, pv)? else {
            return Ok(Outcome::none());
        };
        let key = claim_ref_key(pv).unwrap_or_default();
        let (ns, name) = obj::split_key(&key);
        let mut users: Vec<String> = cx
            .cache
            .store_for(&POD_WATCH)
            .list_namespace(ns)
            .into_iter()
            .filter(|p| !pod_terminated(p) && kv::pod_claim_names(p).iter().any(|c| c == name))
            .map(|p| obj::key(&p))
            .collect();
        crate::sort::sort(&mut users[..]);
        let cached = cx.cache.store_for(&CLAIM_WATCH).get(&key).is_some();
        if !users.is_empty() && !cached {
            return Ok(Outcome::with(vec![volume_event(
                pv,
                EventType::Normal,
                "VolumeFailedRecycle",
                format!("Volume is used by pods: {}", users.join(",")),
            )]));
        }
        Ok(Outcome::with(failed(
            &fresh,
            "VolumeFailedRecycle",
            "No recycler plugin found for the volume!",
        )))
    }
}

/// Phase Released, unless the volume is Released or Failed already.
fn released_phase(pv: &Value) -> Option<Action> {
    match pv["status"]["phase"].as_str() {
        Some("Released" | "Failed") => None,
        _ => volume_phase(pv, "Released", ""),
    }
}

/// Phase Failed with `message`, and a Warning Event (upstream's
/// `updateVolumePhaseWithEvent`); nothing when the volume is already Failed.
fn failed(pv: &Value, reason: &str, message: &str) -> Vec<Action> {
    match volume_phase(pv, "Failed", message) {
        None => vec![],
        Some(a) => vec![a, volume_event(pv, EventType::Warning, reason, message)],
    }
}

/// Upstream's `unbindVolume`: a volume the controller bound loses its claimRef and the
/// bound-by-controller annotation; a pre-bound one keeps its claimRef without the UID. The
/// phase is set to Available by the next sync.
fn unbind(pv: &Value) -> Action {
    let mut next = pv.clone();
    if obj::annotation(pv, kv::ANN_BOUND_BY_CONTROLLER).is_some() {
        if let Some(spec) = next["spec"].as_object_mut() {
            spec.remove("claimRef");
        }
        if let Some(a) = next["metadata"]["annotations"].as_object_mut() {
            a.remove(kv::ANN_BOUND_BY_CONTROLLER);
            if a.is_empty() {
                next["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("annotations"));
            }
        }
    } else {
        if let Some(cr) = next["spec"]["claimRef"].as_object_mut() {
            cr.remove("uid");
        }
    }
    update(PERSISTENTVOLUMES, next)
}
