//! persistentvolume-expander-controller: hands the growth of a claim to the external (CSI)
//! resizer, as upstream's `pkg/controller/volume/expand` does in a build without in-tree
//! cloud plugins.
//!
//! As upstream:
//! - A claim is queued when it shows up, when its `spec.resources.requests.storage` or its
//!   `status.capacity.storage` grows, and when it is deleted.
//! - A sync reads the claim's PersistentVolume (`spec.volumeName`); one that is missing or
//!   whose `claimRef` names another claim (namespace or UID) is an error, tried again with
//!   backoff. Nothing happens unless the request is larger than the capacity (or the volume
//!   has `volume.alpha.kubernetes.io/pre-resize-capacity`).
//! - A volume of an in-tree plugin migrated to CSI (AWS EBS, GCE PD, Azure Disk and File,
//!   vSphere, Cinder) gets `Normal ExternalExpanding` "CSI migration enabled for <plugin>;
//!   waiting for external resizer to expand the pvc" and the claim the annotation
//!   `volume.kubernetes.io/storage-resizer: <CSI driver>`, by a strategic merge patch of
//!   `persistentvolumeclaims/<name>/status` with the claim's resourceVersion.
//! - Any other volume (CSI among them) is the external resizer's: `Normal
//!   ExternalExpanding` "waiting for an external controller to expand this PVC" (Warning
//!   in v1.28; in v1.34-v1.37 a volume no plugin matches is no error).
//! - Queue `volume_expand`, one worker, Events from `volume_expand`, identity
//!   `expand-controller`.
//!
//! Not yet: the in-tree expansion of Fibre Channel and FlexVolume volumes (the `Resizing`
//! and `FileSystemResizePending` conditions upstream's own expansion writes); such claims
//! are logged and left alone.

use super::kit::volume::storage_at;
use super::{Action, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome};
use crate::api::client::PatchType;
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES};
use crate::cache::{Cache, Delta, DeltaKind, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;

pub const STORAGE_RESIZER: &str = "volume.kubernetes.io/storage-resizer";
pub const PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
const REQUEST: &str = "/spec/resources/requests/storage";
const CAPACITY: &str = "/status/capacity/storage";

pub const PVC_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMECLAIMS,
    &[REQUEST, "/spec/volumeName", CAPACITY],
);
/// Volumes: the claim reference and the sources that tell the plugin.
pub const PV_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMES,
    &[
        "/spec/claimRef",
        "/spec/csi/driver",
        "/spec/awsElasticBlockStore",
        "/spec/gcePersistentDisk",
        "/spec/azureDisk",
        "/spec/azureFile",
        "/spec/vsphereVolume",
        "/spec/cinder",
        "/spec/fc",
        "/spec/flexVolume",
    ],
);

/// In-tree plugins whose volumes 1.28 hands to a CSI driver (migration on by default), with
/// the source field, the plugin name and the driver.
const MIGRATED: &[(&str, &str, &str)] = &[
    (
        "awsElasticBlockStore",
        "kubernetes.io/aws-ebs",
        "ebs.csi.aws.com",
    ),
    (
        "gcePersistentDisk",
        "kubernetes.io/gce-pd",
        "pd.csi.storage.gke.io",
    ),
    (
        "azureDisk",
        "kubernetes.io/azure-disk",
        "disk.csi.azure.com",
    ),
    (
        "azureFile",
        "kubernetes.io/azure-file",
        "file.csi.azure.com",
    ),
    (
        "vsphereVolume",
        "kubernetes.io/vsphere-volume",
        "csi.vsphere.vmware.com",
    ),
    ("cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org"),
];

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(Expander::default())))
}

#[derive(Default)]
pub struct Expander {
    /// Each claim's requested and reported sizes, to see what grew (an update's previous
    /// version carries metadata only).
    sizes: Mutex<HashMap<String, (f64, f64)>>,
}

/// What a sync decides for a claim whose request is above its capacity.
#[derive(Debug, PartialEq)]
pub enum Handoff {
    /// A migrated in-tree volume: (plugin, CSI driver).
    Migrated(&'static str, &'static str),
    /// An in-tree plugin of the controller's own (not here yet).
    InTree(&'static str),
    /// The external resizer's (CSI and everything else).
    External,
}

/// Who expands the volume.
pub fn handoff(pv: &Value) -> Handoff {
    let spec = &pv["spec"];
    if let Some((_, plugin, driver)) = MIGRATED.iter().find(|(f, _, _)| spec[*f].is_object()) {
        return Handoff::Migrated(plugin, driver);
    }
    if spec["fc"].is_object() {
        return Handoff::InTree("kubernetes.io/fc");
    }
    if spec["flexVolume"].is_object() {
        return Handoff::InTree("flexVolume");
    }
    Handoff::External
}

fn event(pvc: &Value, t: EventType, message: String) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(&PERSISTENTVOLUMECLAIMS, pvc),
        event_type: t,
        reason: "ExternalExpanding".into(),
        message,
    })
}

impl Expander {
    fn sizes(&self) -> std::sync::MutexGuard<'_, HashMap<String, (f64, f64)>> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Controller for Expander {
    fn watches(&self) -> Vec<Watch> {
        vec![PVC_WATCH, PV_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if w.kind != PERSISTENTVOLUMECLAIMS {
            return vec![];
        }
        let o = d.object();
        let key = obj::key(o);
        match d.kind {
            DeltaKind::Deleted => {
                self.sizes().remove(&key);
                vec![key]
            }
            DeltaKind::Added => {
                self.sizes().insert(
                    key.clone(),
                    (storage_at(o, REQUEST), storage_at(o, CAPACITY)),
                );
                vec![key]
            }
            DeltaKind::Updated => {
                let now = (storage_at(o, REQUEST), storage_at(o, CAPACITY));
                let before = self.sizes().insert(key.clone(), now);
                match before {
                    // Not seen before (a re-list): looked at as an addition.
                    None => vec![key],
                    Some((req, cap)) if now.0 > req || now.1 > cap => vec![key],
                    Some(_) => vec![],
                }
            }
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pvc) = cx.cache.store_for(&PVC_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        let retry = |why: String| {
            Ok(Outcome {
                retry_quietly: Some(why),
                ..Outcome::default()
            })
        };
        let volume = pvc["spec"]["volumeName"].as_str().unwrap_or("");
        let Some(pv) = cx.cache.store_for(&PV_WATCH).get(volume) else {
            return retry(format!("failed to get PV {volume:?}: not found"));
        };
        let r = &pv["spec"]["claimRef"];
        if !r.is_object() || r["namespace"] != obj::namespace(&pvc) || r["uid"] != obj::uid(&pvc) {
            return retry(format!(
                "persistent Volume is not bound to PVC being updated : {key}"
            ));
        }
        if storage_at(&pvc, REQUEST) <= storage_at(&pvc, CAPACITY)
            && obj::annotation(&pv, PRE_RESIZE_CAPACITY).is_none()
        {
            return Ok(Outcome::none());
        }
        Ok(match handoff(&pv) {
            Handoff::Migrated(plugin, driver) => {
                let mut meta = json!({"resourceVersion": obj::resource_version(&pvc)});
                if obj::annotation(&pvc, STORAGE_RESIZER) != Some(driver) {
                    meta["annotations"] = json!({STORAGE_RESIZER: driver});
                }
                let (ns, name) = obj::split_key(key);
                Outcome::with(vec![
                    event(
                        &pvc,
                        EventType::Normal,
                        format!(
                            "CSI migration enabled for {plugin}; waiting for external resizer \
                             to expand the pvc"
                        ),
                    ),
                    Action::Patch {
                        kind: PERSISTENTVOLUMECLAIMS,
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        patch_type: PatchType::Strategic,
                        patch: json!({"metadata": meta}),
                        subresource: Some("status"),
                    },
                ])
            }
            Handoff::InTree(plugin) => {
                log::info!(
                    "persistentvolume-expander-controller: claim {key}: expansion by the \
                     in-tree {plugin} plugin is not supported here"
                );
                Outcome::none()
            }
            Handoff::External => Outcome::with(vec![event(
                &pvc,
                EventType::Normal,
                "waiting for an external controller to expand this PVC".into(),
            )]),
        })
    }
}

#[cfg(test)]
mod tests;
