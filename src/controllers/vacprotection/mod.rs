//! volumeattributesclass-protection-controller (upstream's `volume/vacprotection`; beta in
//! 1.31, GA in 1.34 with `storage.k8s.io/v1`, gate VolumeAttributesClass locked on in 1.36):
//! the `kubernetes.io/vac-protection` finalizer on every VolumeAttributesClass, removed from
//! one being deleted once no PersistentVolume names it in `spec.volumeAttributesClassName` and
//! no PersistentVolumeClaim names it in `spec.volumeAttributesClassName`,
//! `status.currentVolumeAttributesClassName` or
//! `status.modifyVolumeStatus.targetVolumeAttributesClassName`.
//!
//! - Queue `vacprotection`, one worker; writes are PUTs of the class (its bootstrap role has
//!   `update`, not `patch`), as `volumeattributesclass-protection-controller`; no Events.
//! - A class is queued when it lacks the finalizer or is being deleted with it, and when a
//!   claim or volume that named it stops naming it or is deleted (upstream's handlers; a
//!   claim or volume added or starting to name a class queues nothing).
//! - Which claims and volumes name which class is kept by the watch handlers (upstream's
//!   informer indexes), since an update's previous version carries metadata only here.

use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, VOLUMEATTRIBUTESCLASSES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

pub const FINALIZER: &str = "kubernetes.io/vac-protection";

/// Classes, whole (they are written back).
pub const CLASS_WATCH: Watch = Watch::full(VOLUMEATTRIBUTESCLASSES);
/// Claims: the three places that name a class.
pub const CLAIM_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMECLAIMS,
    &[
        "/spec/volumeAttributesClassName",
        "/status/currentVolumeAttributesClassName",
        "/status/modifyVolumeStatus",
    ],
);
/// Volumes: the class they name.
pub const VOLUME_WATCH: Watch =
    Watch::fields(PERSISTENTVOLUMES, &["/spec/volumeAttributesClassName"]);

/// Its row in the controller table. Off, with one line, when the API server does not serve
/// `storage.k8s.io/v1` VolumeAttributesClasses (kube-apiserver before 1.34): its informer
/// would never sync, and the shared cache waits for every informer before any controller
/// starts (upstream's informer fails on its own and only this controller waits).
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    if served(cx.rest) == Some(false) {
        log::info!(
            "{NAME}: the API server does not serve storage.k8s.io/v1 volumeattributesclasses; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controllers::Runnable::reconciles(
        VacProtection::default(),
    )))
}

pub const NAME: &str = "volumeattributesclass-protection-controller";

/// Whether the API server lists `volumeattributesclasses` in `storage.k8s.io/v1`; None when
/// it cannot be asked (then the controller starts).
fn served(rest: &crate::api::kubeconfig::RestConfig) -> Option<bool> {
    let ua = crate::api::client::user_agent_base();
    let client = crate::api::client::Client::new(rest, 0.0, 0, &ua).ok()?;
    match client.get_path("/apis/storage.k8s.io/v1") {
        Ok(list) => Some(resource_listed(&list)),
        Err(e) if e.is_not_found() => Some(false),
        Err(_) => None,
    }
}

/// Whether an APIResourceList names `volumeattributesclasses`.
pub fn resource_listed(list: &Value) -> bool {
    list.get("resources")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|x| x["name"] == "volumeattributesclasses"))
}

fn str_at<'a>(o: &'a Value, p: &str) -> &'a str {
    o.at(p).and_then(Value::as_str).unwrap_or("")
}

/// `getPVCReferencedVACNames`.
pub fn claim_classes(pvc: &Value) -> BTreeSet<String> {
    [
        "/spec/volumeAttributesClassName",
        "/status/currentVolumeAttributesClassName",
        "/status/modifyVolumeStatus/targetVolumeAttributesClassName",
    ]
    .iter()
    .map(|p| str_at(pvc, p))
    .filter(|n| !n.is_empty())
    .map(str::to_string)
    .collect()
}

/// `getPVReferencedVACNames`.
pub fn volume_classes(pv: &Value) -> BTreeSet<String> {
    let n = str_at(pv, "/spec/volumeAttributesClassName");
    (!n.is_empty()).then(|| n.to_string()).into_iter().collect()
}

fn has_finalizer(o: &Value) -> bool {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// `NeedToAddFinalizer` or `IsDeletionCandidate`.
pub fn wants_look(vac: &Value) -> bool {
    obj::is_deleting(vac) == has_finalizer(vac)
}

/// Who names which class: object key -> classes, and class -> object keys.
#[derive(Default)]
struct Users {
    of: HashMap<String, BTreeSet<String>>,
    by_class: HashMap<String, BTreeSet<String>>,
}

impl Users {
    /// Records `key`'s classes now; returns those it named before and no longer does (all of
    /// them when it is gone).
    fn set(&mut self, key: &str, now: BTreeSet<String>) -> Vec<String> {
        let before = if now.is_empty() {
            self.of.remove(key).unwrap_or_default()
        } else {
            self.of
                .insert(key.to_string(), now.clone())
                .unwrap_or_default()
        };
        let dropped: Vec<String> = before.difference(&now).cloned().collect();
        for c in &dropped {
            if let Some(s) = self.by_class.get_mut(c) {
                s.remove(key);
                if s.is_empty() {
                    self.by_class.remove(c);
                }
            }
        }
        for c in now.difference(&before) {
            self.by_class
                .entry(c.clone())
                .or_default()
                .insert(key.to_string());
        }
        dropped
    }

    fn used(&self, class: &str) -> bool {
        self.by_class.contains_key(class)
    }
}

#[derive(Default)]
pub struct VacProtection {
    claims: Mutex<Users>,
    volumes: Mutex<Users>,
}

fn lock(m: &Mutex<Users>) -> std::sync::MutexGuard<'_, Users> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl VacProtection {
    /// `isBeingUsed`: volumes first, then claims.
    pub fn in_use(&self, class: &str) -> bool {
        lock(&self.volumes).used(class) || lock(&self.claims).used(class)
    }
}

impl Controller for VacProtection {
    fn watches(&self) -> Vec<Watch> {
        vec![CLASS_WATCH, CLAIM_WATCH, VOLUME_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        let o = d.object();
        let gone = d.kind == DeltaKind::Deleted;
        if w.kind == VOLUMEATTRIBUTESCLASSES {
            return match (gone, &d.new) {
                (false, Some(vac)) if wants_look(vac) => vec![obj::name(vac).to_string()],
                _ => vec![],
            };
        }
        let (users, now) = if w.kind == PERSISTENTVOLUMECLAIMS {
            (&self.claims, claim_classes(o))
        } else {
            (&self.volumes, volume_classes(o))
        };
        let now = if gone { BTreeSet::new() } else { now };
        let dropped = lock(users).set(&obj::key(o), now);
        // An added object queues nothing (upstream has no add handler for them).
        if d.kind == DeltaKind::Added {
            return vec![];
        }
        dropped
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(vac) = cx.cache.store_for(&CLASS_WATCH).get(key) else {
            log::debug!("VAC not found, ignoring VAC=\"{key}\"");
            return Ok(Outcome::none());
        };
        if obj::is_deleting(&vac) && has_finalizer(&vac) {
            if !self.in_use(key) {
                let mut next = (*vac).clone();
                if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
                    f.retain(|x| x != FINALIZER);
                }
                return Ok(Outcome::with(vec![Action::Update {
                    kind: VOLUMEATTRIBUTESCLASSES,
                    object: next,
                }]));
            }
            log::debug!("Keeping VAC because it is being used VAC=\"{key}\"");
        }
        if !obj::is_deleting(&vac) && !has_finalizer(&vac) {
            let mut next = (*vac).clone();
            match next["metadata"]["finalizers"].as_array_mut() {
                Some(f) => f.push(FINALIZER.into()),
                None => next["metadata"]["finalizers"] = serde_json::json!([FINALIZER]),
            }
            return Ok(Outcome::with(vec![Action::Update {
                kind: VOLUMEATTRIBUTESCLASSES,
                object: next,
            }]));
        }
        Ok(Outcome::none())
    }
}

#[cfg(test)]
mod tests;
