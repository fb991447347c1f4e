//! selinux-warning-controller (upstream's `pkg/controller/volume/selinuxwarning`, v1.32;
//! gate SELinuxChangePolicy, GA and locked on in 1.36; off unless `--controllers` names
//! it): Events and a metric when two pods use the same volume with SELinux labels or
//! change policies that cannot both be honoured on one node. It writes nothing else.
//!
//! - Every pod that has not ended is synced: each volume its containers mount is resolved
//!   (through a Bound claim to the PersistentVolume whose `claimRef` has the claim's UID, or
//!   inline) to the plugins kube-controller-manager probes: CSI, FC, iSCSI, host path, NFS;
//!   in-tree sources of plugins migrated to CSI count as their CSI driver's volumes.
//!   The volume is cached under its plugin's unique name with the pod's label and policy
//!   (`volume::label_and_policy`); a pod that ends or goes leaves the cache.
//! - A pod that comes to a volume with another policy, or a label whose level differs (or
//!   whose user, role or type differs where both are given), gets a `Normal`
//!   `SELinuxChangePolicyConflict` or `SELinuxLabelConflict` Event, and so does the pod it
//!   conflicts with. A volume two containers of one pod mount with different labels is a
//!   `Warning MultipleSELinuxLabels` on the pod.
//! - `selinux_warning_controller_selinux_volume_conflict{property, pod1_*, pod2_*}` is 1 for
//!   each standing conflict, each side once.
//! - Queue `selinux_warning`, one worker, Events from `selinux_warning`, identity
//!   `selinux-warning-controller`. A pod is queued when it is added, deleted or reaches
//!   Succeeded or Failed; the pods of a claim when the claim is bound (its `volumeName`
//!   changes) or a volume is bound to it (the volume's `claimRef` UID changes); the pods
//!   using a CSI driver's volumes when its CSIDriver comes, goes with `seLinuxMount: true`,
//!   or changes `seLinuxMount`.

mod cache;
mod metrics;
mod migrated;
#[cfg(test)]
mod tests;
pub mod volume;

use crate::api::resources::{CSIDRIVERS, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, Watch};
use crate::error::Result;
use crate::obj;
pub use cache::{labels_conflict, parse_label, Conflict, PodName, VolumeCache};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

pub const NAME: &str = "selinux-warning-controller";

/// Pods: their volumes, the containers' mounts and SELinux options, the pod's options and
/// change policy, and the phase.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/volumes",
        "/spec/securityContext/seLinuxOptions",
        "/spec/securityContext/seLinuxChangePolicy",
        "/spec/initContainers/*/volumeMounts/*/name",
        "/spec/initContainers/*/securityContext/seLinuxOptions",
        "/spec/containers/*/volumeMounts/*/name",
        "/spec/containers/*/securityContext/seLinuxOptions",
        "/spec/ephemeralContainers/*/volumeMounts/*/name",
        "/spec/ephemeralContainers/*/securityContext/seLinuxOptions",
        "/status/phase",
    ],
);
pub const PVC_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMECLAIMS,
    &["/spec/volumeName", "/status/phase"],
);
pub const PV_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMES,
    &[
        "/spec/claimRef",
        "/spec/csi",
        "/spec/fc",
        "/spec/iscsi",
        "/spec/hostPath",
        "/spec/nfs",
        "/spec/awsElasticBlockStore",
        "/spec/gcePersistentDisk",
        "/spec/azureDisk",
        "/spec/azureFile",
        "/spec/cinder",
        "/spec/vsphereVolume",
        "/spec/portworxVolume",
    ],
);
pub const DRIVER_WATCH: Watch = Watch::fields(CSIDRIVERS, &["/spec/seLinuxMount"]);

/// Its row in the controller table.
pub fn build(
    _cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    let c = SELinuxWarning::new(crate::config::gates::enabled(
        "SELinuxMountReadWriteOncePod",
    ));
    let labels = c.labels.clone();
    crate::metrics::register_collector(
        "selinux_warning",
        Arc::new(move || metrics::families(&lock(&labels))),
    );
    Ok(Some(crate::controllers::Runnable::reconciles(c)))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Succeeded or Failed: the kubelet unmounts its volumes.
fn ended(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// The claim keys a pod's volumes name (upstream's pod-to-PVC index: `<pod>-<volume>` for
/// a generic ephemeral volume).
fn claim_keys(pod: &Value) -> Vec<String> {
    let ns = obj::namespace(pod);
    let mut out = Vec::new();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if let Some(c) = v["persistentVolumeClaim"]["claimName"].as_str() {
            out.push(obj::make_key(ns, c));
        } else if v["ephemeral"].is_object() {
            let name = format!("{}-{}", obj::name(pod), v["name"].as_str().unwrap_or(""));
            out.push(obj::make_key(ns, &name));
        }
    }
    out
}

/// What the watch handlers keep to tell which changes matter (an update's previous version
/// carries metadata only here).
#[derive(Default)]
struct Handlers {
    claims_of_pod: HashMap<String, Vec<String>>,
    pods_of_claim: HashMap<String, BTreeSet<String>>,
    /// Pods seen Succeeded or Failed.
    ended: HashSet<String>,
    /// Claim key -> `spec.volumeName`, for bound claims.
    claim_volume: HashMap<String, String>,
    /// Volume name -> its `claimRef` UID, where it has one.
    volume_claim_uid: HashMap<String, String>,
    /// CSIDriver name -> `spec.seLinuxMount`.
    driver_mount: HashMap<String, bool>,
}

impl Handlers {
    fn set_pod_claims(&mut self, key: &str, claims: Vec<String>) {
        for c in self.claims_of_pod.remove(key).unwrap_or_default() {
            if let Some(s) = self.pods_of_claim.get_mut(&c) {
                s.remove(key);
                if s.is_empty() {
                    self.pods_of_claim.remove(&c);
                }
            }
        }
        if claims.is_empty() {
            return;
        }
        for c in &claims {
            self.pods_of_claim
                .entry(c.clone())
                .or_default()
                .insert(key.to_string());
        }
        self.claims_of_pod.insert(key.to_string(), claims);
    }

    fn pods_of(&self, claim: &str) -> Vec<String> {
        self.pods_of_claim
            .get(claim)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

pub struct SELinuxWarning {
    /// SELinuxMountReadWriteOncePod: off, nothing is mounted with a context.
    rwop_gate: bool,
    labels: Arc<Mutex<VolumeCache>>,
    handlers: Mutex<Handlers>,
}

impl SELinuxWarning {
    pub fn new(rwop_gate: bool) -> Self {
        SELinuxWarning {
            rwop_gate,
            labels: Arc::default(),
            handlers: Mutex::default(),
        }
    }

    /// The conflicts standing now (what the metric reports).
    pub fn conflicts(&self) -> Vec<Conflict> {
        lock(&self.labels).conflicts()
    }

    fn pod_keys(&self, d: &Delta) -> Vec<String> {
        let pod = d.object();
        let key = obj::key(pod);
        let mut h = lock(&self.handlers);
        if d.kind == DeltaKind::Deleted {
            h.set_pod_claims(&key, Vec::new());
            h.ended.remove(&key);
            return vec![key];
        }
        h.set_pod_claims(&key, claim_keys(pod));
        let now_ended = ended(pod);
        let newly_ended = if now_ended {
            h.ended.insert(key.clone())
        } else {
            h.ended.remove(&key);
            false
        };
        // An update matters only when the pod ends: what else it reads is immutable.
        if d.kind == DeltaKind::Added || newly_ended {
            vec![key]
        } else {
            vec![]
        }
    }

    fn claim_keys_for(&self, d: &Delta) -> Vec<String> {
        let pvc = d.object();
        let key = obj::key(pvc);
        let mut h = lock(&self.handlers);
        if d.kind == DeltaKind::Deleted {
            h.claim_volume.remove(&key);
            return vec![];
        }
        let now = pvc["spec"]["volumeName"].as_str().unwrap_or("").to_string();
        let before = if now.is_empty() {
            h.claim_volume.remove(&key)
        } else {
            h.claim_volume.insert(key.clone(), now.clone())
        };
        let changed = match d.kind {
            DeltaKind::Added => !now.is_empty(),
            _ => before.unwrap_or_default() != now,
        };
        if changed {
            h.pods_of(&key)
        } else {
            vec![]
        }
    }

    fn volume_keys_for(&self, d: &Delta) -> Vec<String> {
        let pv = d.object();
        let name = obj::name(pv).to_string();
        let mut h = lock(&self.handlers);
        if d.kind == DeltaKind::Deleted {
            h.volume_claim_uid.remove(&name);
            return vec![];
        }
        let claim_ref = &pv["spec"]["claimRef"];
        let uid = claim_ref["uid"].as_str().unwrap_or("").to_string();
        let before = if uid.is_empty() {
            h.volume_claim_uid.remove(&name)
        } else {
            h.volume_claim_uid.insert(name, uid.clone())
        };
        // Unbound volumes and incomplete bindings are ignored.
        if uid.is_empty() || before.as_deref() == Some(uid.as_str()) {
            return vec![];
        }
        let claim = obj::make_key(
            claim_ref["namespace"].as_str().unwrap_or(""),
            claim_ref["name"].as_str().unwrap_or(""),
        );
        h.pods_of(&claim)
    }

    fn driver_keys_for(&self, d: &Delta) -> Vec<String> {
        let drv = d.object();
        let name = obj::name(drv).to_string();
        let now = drv["spec"]["seLinuxMount"] == true;
        let before = {
            let mut h = lock(&self.handlers);
            if d.kind == DeltaKind::Deleted {
                h.driver_mount.remove(&name)
            } else {
                h.driver_mount.insert(name.clone(), now)
            }
        };
        let requeue = match d.kind {
            DeltaKind::Added => true,
            DeltaKind::Deleted => before.unwrap_or(now),
            _ => before.unwrap_or(false) != now,
        };
        if !requeue {
            return vec![];
        }
        let pods = lock(&self.labels).pods_for_driver(&name);
        pods
    }

    /// One pod that has not ended: each mounted volume cached, the conflicts it causes and
    /// the volumes mounted with two labels as Events; the volumes that do not resolve yet as
    /// errors (the pod is retried).
    fn sync_pod(&self, cx: &Cx, pod: &Value) -> (Vec<Action>, Vec<String>) {
        let claims = cx.cache.store_for(&PVC_WATCH);
        let pvs = cx.cache.store_for(&PV_WATCH);
        let drivers = cx.cache.store_for(&DRIVER_WATCH);
        let pods = cx.cache.store_for(&POD_WATCH);
        let driver_mounts = |d: &str| {
            drivers
                .get(d)
                .is_some_and(|o| o["spec"]["seLinuxMount"] == true)
        };
        let mut errors = Vec::new();
        let mut sources = HashMap::new();
        for vol in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            match volume::resolve(pod, vol, &claims, &pvs) {
                Ok(Some(src)) => {
                    sources.insert(vol["name"].as_str().unwrap_or("").to_string(), src);
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        let me = obj::key(pod);
        let mut actions = Vec::new();
        for (mount, labels) in volume::mount_labels(pod) {
            let Some((src, is_pv)) = sources.get(&mount) else {
                continue;
            };
            let plugin = volume::plugin_of(src, *is_pv, driver_mounts);
            if self.rwop_gate && labels.len() > 1 {
                actions.push(event(
                    pod,
                    EventType::Warning,
                    "MultipleSELinuxLabels",
                    format!(
                        "Volume {} is mounted twice with different SELinux labels inside this pod",
                        crate::compat::quote::go_quote(&mount)
                    ),
                ));
                let l: Vec<&str> = labels.iter().map(String::as_str).collect();
                errors.push(format!("multiple SELinux labels found: {}", l.join(",")));
                continue;
            }
            // Volumes of plugins the controller does not probe are not tracked.
            let Some(plugin) = plugin else { continue };
            let label = labels.iter().next().map(String::as_str);
            let (label, policy) =
                volume::label_and_policy(pod, label, plugin.supports_mount, self.rwop_gate);
            let unique = match &plugin.unique {
                Ok(u) => u,
                Err(e) => {
                    errors.push(format!(
                        "failed to get unique volume name for volume {mount:?}: {e}"
                    ));
                    continue;
                }
            };
            let found =
                lock(&self.labels).add_volume(unique, &me, &label, &policy, &plugin.csi_driver);
            for c in found {
                // A conflict with a pod already gone is not worth telling (upstream stops
                // at the first such).
                let Some(p) = pods.get(&c.pod) else {
                    log::debug!("{NAME}: pod {} for an event is gone", c.pod);
                    break;
                };
                actions.push(event(&p, EventType::Normal, c.reason, c.message()));
            }
        }
        (actions, errors)
    }
}

fn event(pod: &Value, t: EventType, reason: &str, message: String) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(&PODS, pod),
        event_type: t,
        reason: reason.to_string(),
        message,
    })
}

impl Controller for SELinuxWarning {
    fn watches(&self) -> Vec<Watch> {
        vec![POD_WATCH, PVC_WATCH, PV_WATCH, DRIVER_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if w.kind == PODS {
            self.pod_keys(d)
        } else if w.kind == PERSISTENTVOLUMECLAIMS {
            self.claim_keys_for(d)
        } else if w.kind == PERSISTENTVOLUMES {
            self.volume_keys_for(d)
        } else {
            self.driver_keys_for(d)
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let pod = cx.cache.store_for(&POD_WATCH).get(key);
        let Some(pod) = pod.filter(|p| !ended(p)) else {
            log::trace!("{NAME}: pod {key} is gone or ended: its volumes leave the cache");
            lock(&self.labels).delete_pod(key);
            return Ok(Outcome::none());
        };
        let (actions, errors) = self.sync_pod(cx, &pod);
        let mut out = Outcome::with(actions);
        if !errors.is_empty() {
            let text = match errors.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            };
            log::error!("{NAME}: {key} failed with: {text}");
            out.retry_quietly = Some(text);
        }
        Ok(out)
    }
}
