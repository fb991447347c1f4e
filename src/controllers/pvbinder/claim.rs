//! Claims: upstream's `syncClaim`, `syncUnboundClaim`, `syncBoundClaim`, the bind steps,
//! the claim status, the provisioning hand-off and the default class.

use super::index::Wanted;
use super::{
    claim_event, update, update_status, volume_phase, PvBinder, CLASS_WATCH, POD_WATCH,
    VOLUME_WATCH,
};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES};
use crate::controllers::kit::volume as kv;
use crate::controllers::{Action, Cx, EventType, Outcome};
use crate::error::Result;
use crate::obj;
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) use crate::controllers::kit::volume::pod_terminated;

fn has_annotation(o: &Value, k: &str) -> bool {
    obj::annotation(o, k).is_some()
}

fn set_annotation(o: &mut Value, k: &str, v: &str) {
    if !o["metadata"]["annotations"].is_object() {
        o["metadata"]["annotations"] = json!({});
    }
    o["metadata"]["annotations"][k] = v.into();
}

/// Writes and Events, and whether the key is to be looked at again at once (a bind that has
/// more steps to go).
fn outcome(actions: Vec<Action>, again: bool) -> Outcome {
    Outcome {
        actions,
        requeue_after: again.then_some(Duration::ZERO),
        ..Outcome::default()
    }
}

/// The claim's status for `phase` (upstream's `updateClaimStatus`); None when nothing changes.
pub(super) fn claim_status(pvc: &Value, phase: &str, pv: Option<&Value>) -> Result<Option<Action>> {
    let st = &pvc["status"];
    let mut next = pvc.clone();
    let mut dirty = false;
    let phase_changes = st["phase"].as_str() != Some(phase);
    if phase_changes {
        next["status"]["phase"] = phase.into();
        dirty = true;
    }
    let status = next["status"].as_object_mut();
    let Some(status) = status else {
        return Ok(None);
    };
    match pv {
        None => {
            for f in [
                "accessModes",
                "capacity",
                "currentVolumeAttributesClassName",
            ] {
                if status.get(f).is_some_and(|v| !v.is_null()) {
                    status.remove(f);
                    dirty = true;
                }
            }
        }
        Some(pv) => {
            let modes = &pv["spec"]["accessModes"];
            if status.get("accessModes").unwrap_or(&Value::Null) != modes {
                if modes.is_null() {
                    status.remove("accessModes");
                } else {
                    status.insert("accessModes".into(), modes.clone());
                }
                dirty = true;
            }
            // VolumeAttributesClass: set once, on binding; later the resizer keeps it.
            let vac = &pv["spec"]["volumeAttributesClassName"];
            let current = status
                .get("currentVolumeAttributesClassName")
                .unwrap_or(&Value::Null);
            if st["phase"] == "Pending" && phase == "Bound" && current != vac {
                if vac.is_null() {
                    status.remove("currentVolumeAttributesClassName");
                } else {
                    status.insert("currentVolumeAttributesClassName".into(), vac.clone());
                }
                dirty = true;
            }
            if phase_changes {
                let Some(cap) = pv["spec"]["capacity"]["storage"].as_str() else {
                    return Err(crate::Error::config(format!(
                        "PersistentVolume {:?} is without a storage capacity",
                        obj::name(pv)
                    )));
                };
                if let Some(pre) = obj::annotation(pv, kv::ANN_PRE_RESIZE_CAPACITY) {
                    let pre = if kv::quantity_value(pre).is_some() {
                        pre
                    } else {
                        cap
                    };
                    if !status.get("capacity").is_some_and(Value::is_object) {
                        status.insert("capacity".into(), json!({}));
                    }
                    status["capacity"]["storage"] = pre.into();
                    dirty = true;
                } else {
                    let have = status
                        .get("capacity")
                        .and_then(|c| c["storage"].as_str())
                        .and_then(kv::quantity_value);
                    if have.is_none() || have != kv::quantity_value(cap) {
                        status.insert("capacity".into(), pv["spec"]["capacity"].clone());
                        dirty = true;
                    }
                }
            }
        }
    }
    Ok(dirty.then(|| update_status(PERSISTENTVOLUMECLAIMS, next)))
}

/// The claim as a `claimRef` (upstream's `reference.GetReference`).
fn claim_ref(pvc: &Value) -> Value {
    json!({
        "kind": "PersistentVolumeClaim",
        "namespace": obj::namespace(pvc),
        "name": obj::name(pvc),
        "uid": obj::uid(pvc),
        "apiVersion": "v1",
        "resourceVersion": obj::resource_version(pvc),
    })
}

/// Whether `pv`'s claimRef is this claim (upstream's `IsVolumeBoundToClaim`).
pub(super) fn bound_to_claim(pv: &Value, pvc: &Value) -> bool {
    let cr = &pv["spec"]["claimRef"];
    if !cr.is_object() {
        return false;
    }
    if cr["name"].as_str() != Some(obj::name(pvc))
        || cr["namespace"].as_str() != Some(obj::namespace(pvc))
    {
        return false;
    }
    let uid = cr["uid"].as_str().unwrap_or("");
    uid.is_empty() || uid == obj::uid(pvc)
}

/// The next write of upstream's `bind` (volume claimRef, volume phase, claim volumeName and
/// annotations, claim status), or None when the binding is complete.
pub(super) fn bind_step(pv: &Value, pvc: &Value) -> Result<Option<Action>> {
    // bindVolumeToClaim
    let cr = &pv["spec"]["claimRef"];
    let by_controller = !bound_to_claim(pv, pvc);
    let mut next = pv.clone();
    let mut dirty = false;
    if !cr.is_object()
        || cr["name"].as_str() != Some(obj::name(pvc))
        || cr["namespace"].as_str() != Some(obj::namespace(pvc))
        || cr["uid"].as_str() != Some(obj::uid(pvc))
    {
        next["spec"]["claimRef"] = claim_ref(pvc);
        dirty = true;
    }
    if by_controller && !has_annotation(&next, kv::ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut next, kv::ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    if dirty {
        return Ok(Some(update(PERSISTENTVOLUMES, next)));
    }
    if let Some(a) = volume_phase(pv, "Bound", "") {
        return Ok(Some(a));
    }
    // bindClaimToVolume
    let mut next = pvc.clone();
    let mut dirty = false;
    if pvc["spec"]["volumeName"].as_str() != Some(obj::name(pv)) {
        next["spec"]["volumeName"] = obj::name(pv).into();
        if !has_annotation(&next, kv::ANN_BOUND_BY_CONTROLLER) {
            set_annotation(&mut next, kv::ANN_BOUND_BY_CONTROLLER, "yes");
        }
        dirty = true;
    }
    if !has_annotation(&next, kv::ANN_BIND_COMPLETED) {
        set_annotation(&mut next, kv::ANN_BIND_COMPLETED, "yes");
        dirty = true;
    }
    if dirty {
        return Ok(Some(update(PERSISTENTVOLUMECLAIMS, next)));
    }
    claim_status(pvc, "Bound", Some(pv))
}

/// Why a volume named by a claim cannot be bound to it (upstream's `checkVolumeSatisfyClaim`).
pub(super) fn volume_unsatisfying(pv: &Value, pvc: &Value) -> Option<String> {
    if obj::is_deleting(pv) {
        return Some(format!(
            "the volume is marked for deletion {:?}",
            obj::name(pv)
        ));
    }
    if kv::capacity_bytes(pv) < kv::requested_bytes(pvc) {
        return Some("requested PV is too small".into());
    }
    if kv::volume_class(pv) != kv::claim_class(pvc) {
        return Some("storageClassName does not match".into());
    }
    if kv::attributes_class(pv) != kv::attributes_class(pvc) {
        return Some("volumeAttributesClassName does not match".into());
    }
    if kv::volume_mode(pv) != kv::volume_mode(pvc) {
        return Some("incompatible volumeMode".into());
    }
    let offered = kv::access_modes(pv);
    if !kv::access_modes(pvc).iter().all(|m| offered.contains(m)) {
        return Some("incompatible accessMode".into());
    }
    None
}

impl PvBinder {
    pub(super) fn sync_claim(&self, cx: &Cx, pvc: &Value) -> Result<Outcome> {
        if has_annotation(pvc, kv::ANN_BIND_COMPLETED) {
            self.sync_bound_claim(cx, pvc)
        } else {
            self.sync_unbound_claim(cx, pvc)
        }
    }

    /// A bind step: the write, queued again at once while steps remain.
    fn bind(&self, pv: &Value, pvc: &Value, mut actions: Vec<Action>) -> Result<Outcome> {
        match bind_step(pv, pvc)? {
            Some(a) => {
                actions.push(a);
                Ok(outcome(actions, true))
            }
            None => Ok(outcome(actions, false)),
        }
    }

    fn pending(pvc: &Value, mut actions: Vec<Action>) -> Result<Outcome> {
        actions.extend(claim_status(pvc, "Pending", None)?);
        Ok(outcome(actions, false))
    }

    pub(super) fn class(cx: &Cx, name: &str) -> Option<std::sync::Arc<Value>> {
        cx.cache.store_for(&CLASS_WATCH).get(name)
    }

    /// Upstream's `IsDelayBindingMode`: the claim's class binds at the first consumer.
    fn delay_binding(cx: &Cx, pvc: &Value) -> Result<bool> {
        let name = kv::claim_class(pvc);
        if name.is_empty() {
            return Ok(false);
        }
        let Some(class) = Self::class(cx, name) else {
            return Ok(false);
        };
        match class["volumeBindingMode"].as_str() {
            None => Err(crate::Error::config(format!(
                "VolumeBindingMode not set for StorageClass {name:?}"
            ))),
            Some(m) => Ok(m == "WaitForFirstConsumer"),
        }
    }

    fn sync_unbound_claim(&self, cx: &Cx, pvc: &Value) -> Result<Outcome> {
        let volumes = cx.cache.store_for(&VOLUME_WATCH);
        let volume_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
        if volume_name.is_empty() {
            let delay = Self::delay_binding(cx, pvc)?;
            self.volumes.catch_up(&volumes);
            let found = self.volumes.best_match(&Wanted::of(pvc), delay);
            if let Some(name) = found {
                match volumes.get(&name) {
                    // The summary may be behind the cache: check again before binding.
                    Some(pv) if pv["spec"]["claimRef"].is_null() || bound_to_claim(&pv, pvc) => {
                        return self.bind(&pv, pvc, vec![]);
                    }
                    Some(pv) => {
                        self.volumes.set(&pv);
                        return Ok(outcome(vec![], true));
                    }
                    None => {
                        self.volumes.remove(&name);
                        return Ok(outcome(vec![], true));
                    }
                }
            }
            // No volume: the default class, provisioning, or wait.
            if kv::claim_class(pvc).is_empty() {
                let classes = cx.cache.store_for(&CLASS_WATCH).list();
                if let Some(class) = kv::default_class(&classes) {
                    let mut next = pvc.clone();
                    next["spec"]["storageClassName"] = obj::name(class).into();
                    self.assigning
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(obj::key(pvc));
                    return Ok(Outcome::with(vec![update(PERSISTENTVOLUMECLAIMS, next)]));
                }
            }
            let mut actions = Vec::new();
            if delay && !has_annotation(pvc, kv::ANN_SELECTED_NODE) {
                actions.push(self.delay_event(cx, pvc));
            } else if !kv::claim_class(pvc).is_empty() {
                return Ok(Outcome::with(self.provision(cx, pvc)));
            } else {
                actions.push(claim_event(
                    pvc,
                    EventType::Normal,
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set",
                ));
            }
            return Self::pending(pvc, actions);
        }
        // The claim names its volume.
        let Some(pv) = volumes.get(volume_name) else {
            return Self::pending(pvc, vec![]);
        };
        if pv["spec"]["claimRef"].is_null() {
            return match volume_unsatisfying(&pv, pvc) {
                Some(why) => Self::pending(
                    pvc,
                    vec![claim_event(
                        pvc,
                        EventType::Warning,
                        "VolumeMismatch",
                        format!("Cannot bind to requested volume {volume_name:?}: {why}"),
                    )],
                ),
                None => self.bind(&pv, pvc, vec![]),
            };
        }
        if bound_to_claim(&pv, pvc) {
            return self.bind(&pv, pvc, vec![]);
        }
        let ev = claim_event(
            pvc,
            EventType::Warning,
            "FailedBinding",
            format!("volume {volume_name:?} already bound to a different claim."),
        );
        if !has_annotation(pvc, kv::ANN_BOUND_BY_CONTROLLER) {
            return Self::pending(pvc, vec![ev]);
        }
        // Bound by the controller to a volume that is now someone else's: an error (retried).
        Ok(Outcome {
            actions: vec![ev],
            retry_quietly: Some(format!(
                "invalid binding of claim {:?} to volume {volume_name:?}: volume already claimed by {:?}",
                obj::key(pvc),
                super::claim_ref_key(&pv).unwrap_or_default()
            )),
            ..Outcome::default()
        })
    }

    /// Upstream's `emitEventForUnboundDelayBindingClaim`.
    fn delay_event(&self, cx: &Cx, pvc: &Value) -> Action {
        let name = obj::name(pvc);
        let unscheduled: Vec<String> = cx
            .cache
            .store_for(&POD_WATCH)
            .list_namespace(obj::namespace(pvc))
            .into_iter()
            .filter(|p| {
                !pod_terminated(p)
                    && p["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
                    && kv::pod_claim_names(p).iter().any(|c| c == name)
            })
            .map(|p| obj::name(&p).to_string())
            .collect();
        match unscheduled.len() {
            0 => claim_event(
                pvc,
                EventType::Normal,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            ),
            1 => claim_event(
                pvc,
                EventType::Normal,
                "WaitForPodScheduled",
                format!("waiting for pod {} to be scheduled", unscheduled[0]),
            ),
            _ => claim_event(
                pvc,
                EventType::Normal,
                "WaitForPodScheduled",
                format!("waiting for pods {} to be scheduled", unscheduled.join(",")),
            ),
        }
    }

    /// Upstream's `provisionClaim` with no in-tree plugins: the external hand-off.
    fn provision(&self, cx: &Cx, pvc: &Value) -> Vec<Action> {
        if !self.dynamic_provisioning {
            return vec![];
        }
        let class_name = kv::claim_class(pvc);
        let failed = |msg: String| claim_event(pvc, EventType::Warning, "ProvisioningFailed", msg);
        let Some(class) = Self::class(cx, class_name) else {
            return vec![failed(format!(
                "storageclass.storage.k8s.io {class_name:?} not found"
            ))];
        };
        let provisioner = class["provisioner"].as_str().unwrap_or("");
        if provisioner.starts_with("kubernetes.io/") {
            return vec![failed(format!(
                "no volume plugin matched name: {provisioner}"
            ))];
        }
        self.stats
            .op_started(&obj::key(pvc), provisioner, super::metrics::PROVISION);
        let mut actions = Vec::new();
        if obj::annotation(pvc, kv::ANN_STORAGE_PROVISIONER) != Some(provisioner) {
            let mut next = pvc.clone();
            set_annotation(&mut next, kv::ANN_BETA_STORAGE_PROVISIONER, provisioner);
            set_annotation(&mut next, kv::ANN_STORAGE_PROVISIONER, provisioner);
            actions.push(Action::Reported {
                action: Box::new(update(PERSISTENTVOLUMECLAIMS, next)),
                report: crate::controllers::Report {
                    about: crate::controllers::ObjectRef::of(&PERSISTENTVOLUMECLAIMS, pvc),
                    success_reason: "",
                    success_prefix: "",
                    failure_reason: "ProvisioningFailed",
                    failure_prefix: "Error saving claim: ".into(),
                },
            });
        }
        actions.push(claim_event(
            pvc,
            EventType::Normal,
            "ExternalProvisioning",
            format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
                 or manually by the system administrator. If volume creation is delayed, please verify \
                 that the provisioner is running and correctly registered."
            ),
        ));
        actions
    }

    fn sync_bound_claim(&self, cx: &Cx, pvc: &Value) -> Result<Outcome> {
        let lost = |reason: &str, msg: &str| -> Result<Outcome> {
            if pvc["status"]["phase"].as_str() == Some("Lost") {
                return Ok(Outcome::none());
            }
            let mut actions: Vec<Action> = claim_status(pvc, "Lost", None)?.into_iter().collect();
            actions.push(claim_event(pvc, EventType::Warning, reason, msg));
            Ok(outcome(actions, false))
        };
        let volume_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
        if volume_name.is_empty() {
            return lost(
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            );
        }
        let Some(pv) = cx.cache.store_for(&VOLUME_WATCH).get(volume_name) else {
            return lost(
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            );
        };
        let cr = &pv["spec"]["claimRef"];
        if cr.is_null() || cr["uid"].as_str() == Some(obj::uid(pvc)) {
            return self.bind(&pv, pvc, vec![]);
        }
        lost(
            "ClaimMisbound",
            "Two claims are bound to the same volume, this one is bound incorrectly",
        )
    }
}
