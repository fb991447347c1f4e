//! persistentvolume-binder-controller: binds PersistentVolumeClaims to PersistentVolumes,
//! keeps both phases, hands dynamic provisioning to external (CSI) provisioners and reclaims
//! released volumes, as upstream's `pkg/controller/volume/persistentvolume` does in a build
//! without in-tree volume plugins.
//!
//! As upstream:
//! - Claims are synced as `syncClaim` (unbound: find the smallest fitting Available volume,
//!   or the one named in `spec.volumeName`, or the volume pre-bound to it through its
//!   `claimRef`; bound: check the binding still holds, else `Lost`), volumes as `syncVolume`
//!   (Available, Bound, Released, reclaim). A bind is the same four writes in the same order:
//!   the volume's `claimRef` (with `pv.kubernetes.io/bound-by-controller` when the controller
//!   chose it), the volume's phase `Bound`, the claim's `volumeName` with
//!   `pv.kubernetes.io/bind-completed` (and bound-by-controller), the claim's status.
//! - VolumeAttributesClass (GA in v1.34): a claim matches only volumes with the same
//!   `spec.volumeAttributesClassName` (both without one, or equal), and a claim turning Bound
//!   gets `status.currentVolumeAttributesClassName` from its volume.
//! - WaitForFirstConsumer classes: no binding until `volume.kubernetes.io/selected-node`;
//!   `WaitForFirstConsumer` / `WaitForPodScheduled` Events meanwhile.
//! - A claim with a class and no volume is handed to the class's provisioner: the claim gets
//!   `volume.kubernetes.io/storage-provisioner` and the beta annotation, and an
//!   `ExternalProvisioning` Event; a missing class or an in-tree (`kubernetes.io/`)
//!   provisioner is a `ProvisioningFailed` Event. A claim without a class gets the default
//!   StorageClass (retroactive default class assignment).
//! - Reclaim: `Retain` keeps the volume `Released`; `Delete` of a volume provisioned by an
//!   external provisioner is left to it (its finalizer and `pv.kubernetes.io/provisioned-by`),
//!   and so is a CSI or migrated volume (v1.37, as v1.34); any other is `Failed` with
//!   `VolumeFailedDelete`; `Recycle` finds no recycler
//!   (`VolumeFailedRecycle`, or a Normal one while pods still use the claim).
//! - Every claim is looked at again each `--pvclaimbinder-sync-period` (15s);
//!   `--enable-dynamic-provisioning=false` stops the hand-off.
//!
//! Differences: one queue (`volumes`) carries both volume keys (`name`) and claim keys
//! (`namespace/name`), served by one worker, where upstream has a `volumes` and a `claims`
//! queue with one worker each; a bind is the same four writes, each from its own sync of
//! the key (the key is queued again at once after each), so each write is computed from
//! the cache as the previous one left it. The periodic resync walks the claims (and the
//! volumes bound to them), not volumes without a claim.

mod claim;
mod index;
#[cfg(test)]
mod index_tests;
pub mod metrics;
#[cfg(test)]
mod tests;
mod volume;

use super::{Action, Applied, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, Watch};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, STORAGECLASSES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use index::VolumeIndex;
use serde_json::Value;
use std::time::Duration;

/// Claims, whole (they are written back).
pub const CLAIM_WATCH: Watch = Watch::full(PERSISTENTVOLUMECLAIMS);
/// Volumes, whole.
pub const VOLUME_WATCH: Watch = Watch::full(PERSISTENTVOLUMES);
/// StorageClasses, whole (they are small and few).
pub const CLASS_WATCH: Watch = Watch::full(STORAGECLASSES);
/// Pods: which claims they use, their node and phase.
pub const POD_WATCH: Watch = crate::controllers::kit::volume::POD_VOLUMES_WATCH;

/// Its row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let given = |n: &str| cx.cfg.given.get(n).map(String::as_str);
    let sync_period = match given("pvclaimbinder-sync-period") {
        Some(v) => crate::compat::parse::parse_go_duration(v).map_err(|e| {
            crate::Error::config(format!("invalid --pvclaimbinder-sync-period {v:?}: {e}"))
        })?,
        None => Duration::from_secs(15),
    };
    let dynamic = match given("enable-dynamic-provisioning") {
        Some(v) => crate::compat::parse::parse_go_bool(v).map_err(|e| {
            crate::Error::config(format!("invalid --enable-dynamic-provisioning {v:?}: {e}"))
        })?,
        None => true,
    };
    let binder = PvBinder::new(dynamic);
    let stats = binder.stats.clone();
    crate::metrics::register_collector(
        "persistentvolume-binder",
        std::sync::Arc::new(move || stats.families()),
    );
    // Every claim and volume again each `--pvclaimbinder-sync-period`.
    Ok(Some(super::Runnable::Reconciles {
        ctrl: std::sync::Arc::new(binder),
        resync: Some(sync_period),
    }))
}

pub struct PvBinder {
    dynamic_provisioning: bool,
    volumes: VolumeIndex,
    /// What the `pv_collector_*` gauges count.
    stats: std::sync::Arc<metrics::Stats>,
    /// Claims whose default class assignment is being written (for the retroactive
    /// StorageClass counters).
    assigning: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl PvBinder {
    /// A claim seen Bound ends its provisioning, if one is under way (upstream records it
    /// when its bind completes).
    fn provisioned_claim_bound(&self, pvc: &Value) {
        if pvc["status"]["phase"] == "Bound" {
            let key = crate::obj::key(pvc);
            if self.stats.op_pending(&key, metrics::PROVISION) {
                self.stats.op_done(&key);
            }
        }
    }

    pub fn new(dynamic_provisioning: bool) -> Self {
        PvBinder {
            dynamic_provisioning,
            volumes: VolumeIndex::default(),
            stats: Default::default(),
            assigning: Default::default(),
        }
    }
}

/// A claim's key, `namespace/name` (a volume's key is its name: no `/`).
fn is_claim_key(key: &str) -> bool {
    key.contains('/')
}

/// `claimRef` as a claim key.
fn claim_ref_key(pv: &Value) -> Option<String> {
    let cr = &pv["spec"]["claimRef"];
    let name = cr["name"].as_str()?;
    Some(crate::obj::make_key(
        cr["namespace"].as_str().unwrap_or(""),
        name,
    ))
}

fn event(kind: &crate::api::Kind, o: &Value, t: EventType, reason: &str, msg: String) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(kind, o),
        event_type: t,
        reason: reason.to_string(),
        message: msg,
    })
}

fn claim_event(pvc: &Value, t: EventType, reason: &str, msg: impl Into<String>) -> Action {
    event(&PERSISTENTVOLUMECLAIMS, pvc, t, reason, msg.into())
}

fn volume_event(pv: &Value, t: EventType, reason: &str, msg: impl Into<String>) -> Action {
    event(&PERSISTENTVOLUMES, pv, t, reason, msg.into())
}

fn update(kind: crate::api::Kind, object: Value) -> Action {
    Action::Update { kind, object }
}

fn update_status(kind: crate::api::Kind, object: Value) -> Action {
    Action::UpdateSubresource {
        kind,
        object,
        subresource: "status",
    }
}

/// The volume's phase set to `phase` (upstream's `updateVolumePhase`); None when it is
/// already there.
fn volume_phase(pv: &Value, phase: &str, message: &str) -> Option<Action> {
    if pv["status"]["phase"].as_str() == Some(phase) {
        return None;
    }
    let mut v = pv.clone();
    if !v["status"].is_object() {
        v["status"] = serde_json::json!({});
    }
    v["status"]["phase"] = phase.into();
    match v["status"].as_object_mut() {
        Some(st) if message.is_empty() => {
            st.remove("message");
        }
        _ => v["status"]["message"] = message.into(),
    }
    Some(update_status(PERSISTENTVOLUMES, v))
}

impl Controller for PvBinder {
    fn watches(&self) -> Vec<Watch> {
        vec![CLAIM_WATCH, VOLUME_WATCH, CLASS_WATCH, POD_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        let o = d.object();
        match w.kind {
            k if k == PERSISTENTVOLUMECLAIMS => {
                let vol = o["spec"]["volumeName"].as_str().filter(|v| !v.is_empty());
                if d.kind == DeltaKind::Deleted {
                    self.stats.claim_gone(&crate::obj::key(o));
                    self.stats.op_forget(&crate::obj::key(o));
                } else {
                    self.stats.claim(o);
                    self.provisioned_claim_bound(o);
                }
                match d.kind {
                    // Upstream's deleteClaim: the volume is synced (it may be released).
                    DeltaKind::Deleted => vol.map(str::to_string).into_iter().collect(),
                    // A resync (same version) looks at the bound volume too.
                    _ if d.old.as_ref().is_some_and(|old| {
                        crate::obj::resource_version(old) == crate::obj::resource_version(o)
                    }) =>
                    {
                        let mut keys = vec![crate::obj::key(o)];
                        keys.extend(vol.map(str::to_string));
                        keys
                    }
                    _ => vec![crate::obj::key(o)],
                }
            }
            k if k == PERSISTENTVOLUMES => {
                if d.kind == DeltaKind::Deleted {
                    self.volumes.remove(crate::obj::name(o));
                    self.stats.volume_gone(crate::obj::name(o));
                    self.stats.op_done(crate::obj::name(o));
                    // Upstream's deleteVolume: the claim is synced (it may be lost).
                    return claim_ref_key(o).into_iter().collect();
                }
                self.volumes.set(o);
                self.stats.volume(o);
                // The volume, and the claim it points to (upstream's syncVolume queues the
                // claim when the volume was bound to it first).
                let mut keys = vec![crate::obj::name(o).to_string()];
                if o["spec"]["claimRef"]["uid"]
                    .as_str()
                    .is_some_and(|u| !u.is_empty())
                {
                    keys.extend(claim_ref_key(o));
                }
                keys
            }
            _ => vec![],
        }
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let (Action::Update { kind, .. } | Action::UpdateSubresource { kind, .. }) = action else {
            return;
        };
        // A failed write of a claim's hand-off or bind is a failed provisioning attempt.
        if matches!(result, Applied::Failed(_)) && is_claim_key(key) {
            self.stats.op_failed(key);
        }
        if matches!(action, Action::Update { .. }) && *kind == PERSISTENTVOLUMECLAIMS {
            let assigned = self
                .assigning
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            if assigned && !matches!(result, Applied::Skipped) {
                self.stats.retroactive(matches!(result, Applied::Done(_)));
            }
        }
        // Keep the match index as current as the cache: the watch's echo may come later.
        if let Applied::Done(Some(v)) = result {
            if *kind == PERSISTENTVOLUMES {
                self.volumes.set(v);
                self.stats.volume(v);
            } else if *kind == PERSISTENTVOLUMECLAIMS {
                self.stats.claim(v);
                self.provisioned_claim_bound(v);
            }
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        if is_claim_key(key) {
            let Some(pvc) = cx.cache.store_for(&CLAIM_WATCH).get(key) else {
                return Ok(Outcome::none());
            };
            self.sync_claim(cx, &pvc)
        } else {
            let Some(pv) = cx.cache.store_for(&VOLUME_WATCH).get(key) else {
                self.volumes.remove(key);
                return Ok(Outcome::none());
            };
            self.sync_volume(cx, &pv)
        }
    }
}
