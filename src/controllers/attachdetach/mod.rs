//! persistentvolume-attach-detach-controller: VolumeAttachments for the CSI volumes of the
//! pods on each node, and the node's `status.volumesAttached`, as upstream's
//! `pkg/controller/volume/attachdetach` does for CSI volumes (the providerless build has no
//! in-tree attachable plugins).
//!
//! As upstream:
//! - Only nodes with the `volumes.kubernetes.io/controller-managed-attach-detach`
//!   annotation (any value) are managed; on the others the kubelet attaches.
//! - A volume is wanted on a node while a pod scheduled there uses it and is not terminated
//!   (phase Succeeded or Failed, or being deleted with no container running), unless the node
//!   has `volumes.kubernetes.io/keep-terminated-pod-volumes: "true"`. A pod's volume counts
//!   when its claim (`persistentVolumeClaim`, or `<pod>-<volume>` owned by the pod for a
//!   generic ephemeral volume) is Bound to a PersistentVolume whose `claimRef` has the
//!   claim's UID, the volume is CSI, and its CSIDriver does not say `attachRequired: false`.
//! - A wanted volume gets a VolumeAttachment `csi-<sha256(handle, driver, node)>` (attacher
//!   the driver, source the PersistentVolume's name). Once the external attacher sets
//!   `status.attached`, the volume is reported in the node's `status.volumesAttached`
//!   (`kubernetes.io/csi/<driver>^<handle>`, empty `devicePath`), written as upstream's
//!   strategic merge patch of `nodes/<name>/status`, and each pod using it gets `Normal
//!   SuccessfulAttachVolume` "AttachVolume.Attach succeeded for volume "<pv>" ". An
//!   `attachError` is `Warning FailedAttachVolume` "AttachVolume.Attach failed for volume
//!   "<pv>" : <message>" on the pods (once per message).
//! - A volume that cannot be attached to more than one node (access modes without
//!   ReadWriteMany or ReadOnlyMany) and is attached elsewhere is not attached; its pods get
//!   `Warning FailedAttachVolume` "Waiting for detach for volume "<pv>" Volume is already
//!   used by pod(s) <names>" (or "... exclusively attached to one node, waiting on detach
//!   before it can be attached to another node"), once while they wait. (v1.37 reworded
//!   upstream's "Multi-Attach error" and backported it to v1.33-v1.36's patch releases.)
//! - A volume no longer wanted is detached once the node no longer lists it in
//!   `status.volumesInUse`, or, while it does, after 6 minutes if the node is not Ready (not
//!   with `--disable-force-detach-on-timeout`, v1.30), or at
//!   once with the `node.kubernetes.io/out-of-service` NoExecute taint: first the node's
//!   `volumesAttached` loses it, then the VolumeAttachment is deleted.
//! - Every `--attach-detach-reconcile-sync-period` (1m) every node is looked at again,
//!   unless `--disable-attach-detach-reconcile-sync`.
//!
//! Differences: the work is driven by changes, not by upstream's 100 ms reconciler loop: a
//! VolumeAttachment deleted or detached out of band is noticed at once (upstream: at the next
//! reconcile sync, never with the sync disabled). Only VolumeAttachments named as the CSI
//! attacher names them are detached. A deleted node's attachments are deleted at once.
//! The work queue carries node names under upstream's queue name `pvcs`.

mod index;
pub mod metrics;
mod reconciler;

use super::kit::volume::{attachment_name, csi_source, csi_unique_name};
use super::{Action, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome};
use crate::api::resources::{
    CSIDRIVERS, NODES, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS, VOLUMEATTACHMENTS,
};
use crate::cache::{Cache, Delta, DeltaKind, Watch};
use crate::error::Result;
use crate::obj;
use index::Index;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

pub const MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";
pub const KEEP_TERMINATED: &str = "volumes.kubernetes.io/keep-terminated-pod-volumes";
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// Upstream's `ReconcilerMaxWaitForUnmountDuration`.
pub const MAX_WAIT_FOR_UNMOUNT: Duration = Duration::from_secs(6 * 60);
/// How long the CSI attacher waits for `status.attached` before it reports a timeout.
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(2 * 60);

pub const NODE_WATCH: Watch = Watch::fields(
    NODES,
    &[
        "/spec/taints",
        "/status/conditions",
        "/status/volumesAttached",
        "/status/volumesInUse",
    ],
);
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/nodeName",
        "/spec/volumes/*/name",
        "/spec/volumes/*/persistentVolumeClaim",
        "/spec/volumes/*/ephemeral",
        "/spec/volumes/*/csi/driver",
        "/spec/volumes/*/fc",
        "/spec/volumes/*/iscsi",
        "/status/phase",
        "/status/initContainerStatuses/*/state",
        "/status/containerStatuses/*/state",
        "/status/ephemeralContainerStatuses/*/state",
    ],
);
pub const PVC_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMECLAIMS,
    &["/spec/volumeName", "/status/phase"],
);
pub const PV_WATCH: Watch = Watch::fields(
    PERSISTENTVOLUMES,
    &[
        "/spec/csi",
        "/spec/fc",
        "/spec/iscsi",
        "/spec/accessModes",
        "/spec/claimRef",
    ],
);
pub const VA_WATCH: Watch = Watch::full(VOLUMEATTACHMENTS);
pub const DRIVER_WATCH: Watch = Watch::fields(CSIDRIVERS, &["/spec/attachRequired"]);

/// Its row in the controller table.
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let given = |f: &str| cx.cfg.given.get(f).map(String::as_str);
    let disabled = match given("disable-attach-detach-reconcile-sync") {
        Some(v) => crate::compat::parse::parse_go_bool(v).map_err(crate::Error::Config)?,
        None => false,
    };
    let period = match given("attach-detach-reconcile-sync-period") {
        Some(v) => crate::compat::parse::parse_go_duration(v).map_err(crate::Error::Config)?,
        None => Duration::from_secs(60),
    };
    if period < Duration::from_secs(1) {
        return Err(crate::Error::Config(
            "failed to start attach/detach controller: duration time must be greater than one \
             second as set via command line option reconcile-sync-loop-period"
                .into(),
        ));
    }
    // v1.30: no force detach when the unmount wait expires (only an out-of-service taint).
    let no_force_on_timeout = match given("disable-force-detach-on-timeout") {
        Some(v) => crate::compat::parse::parse_go_bool(v).map_err(crate::Error::Config)?,
        None => false,
    };
    let mut adc = AttachDetach::new();
    adc.force_on_timeout = !no_force_on_timeout;
    let stats = adc.stats.clone();
    crate::metrics::register_collector(
        "attachdetach",
        std::sync::Arc::new(move || stats.families()),
    );
    // The reconciler's pass over every attachment, unless disabled.
    Ok(Some(super::Runnable::Reconciles {
        ctrl: std::sync::Arc::new(adc),
        resync: (!disabled).then_some(period),
    }))
}

#[derive(Default)]
struct Memo {
    /// When each unwanted attachment was first found unwanted.
    detach_requested: HashMap<String, SystemTime>,
    /// The attach error last reported for each attachment.
    attach_errors: HashMap<String, String>,
    /// Since when each attachment has been waited for without an answer.
    waiting: HashMap<String, SystemTime>,
    /// (node, PersistentVolume) whose Multi-Attach error was reported.
    multi_attach: HashSet<(String, String)>,
}

pub struct AttachDetach {
    index: Mutex<Index>,
    memo: Mutex<Memo>,
    stats: std::sync::Arc<metrics::Stats>,
    /// Force a detach once the unmount wait expires on an unhealthy node (false with
    /// `--disable-force-detach-on-timeout`).
    force_on_timeout: bool,
}

/// One volume wanted on the node.
struct Want {
    pv: String,
    unique: String,
    driver: String,
    handle: String,
    multi: bool,
    pods: Vec<ObjectRef>,
}

/// Whether the pod is terminated (upstream's `IsPodTerminated`).
pub fn pod_terminated(pod: &Value) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return true;
    }
    let running = |list: &Value| {
        list.as_array().into_iter().flatten().any(|s| {
            let st = &s["state"];
            st["terminated"].is_null() && st["waiting"].is_null()
        })
    };
    obj::is_deleting(pod)
        && !running(&pod["status"]["initContainerStatuses"])
        && !running(&pod["status"]["containerStatuses"])
        && !running(&pod["status"]["ephemeralContainerStatuses"])
}

/// Whether the volume may be attached to several nodes (upstream's `IsMultiAttachAllowed`).
fn multi_attach_allowed(pv: &Value) -> bool {
    let modes = pv["spec"]["accessModes"].as_array();
    match modes {
        None => true,
        Some(m) if m.is_empty() => true,
        Some(m) => m
            .iter()
            .any(|a| a == "ReadWriteMany" || a == "ReadOnlyMany"),
    }
}

/// An attach message as upstream's `VolumeToAttach.GenerateMsg` makes it (the suffix of an
/// error starts with ": ").
fn volume_msg(prefix: &str, pv: &str, suffix: &str) -> String {
    format!("{prefix} for volume {pv:?} {suffix}")
}

fn event(about: &ObjectRef, t: EventType, reason: &str, message: &str) -> Action {
    Action::Event(EventSpec {
        involved: about.clone(),
        event_type: t,
        reason: reason.into(),
        message: message.into(),
    })
}

impl Default for AttachDetach {
    fn default() -> Self {
        Self::new()
    }
}

impl AttachDetach {
    pub fn new() -> Self {
        AttachDetach {
            index: Mutex::default(),
            memo: Mutex::default(),
            stats: Default::default(),
            force_on_timeout: true,
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The volumes wanted on `node`, by attachment name.
    fn wanted(&self, cx: &Cx, node: &str, keep_terminated: bool) -> BTreeMap<String, Want> {
        let pods = cx.cache.store_for(&POD_WATCH);
        let claims = cx.cache.store_for(&PVC_WATCH);
        let pvs = cx.cache.store_for(&PV_WATCH);
        let drivers = cx.cache.store_for(&DRIVER_WATCH);
        let mut out: BTreeMap<String, Want> = BTreeMap::new();
        for key in self.index().pods_on(node) {
            let Some(pod) = pods.get(&key) else { continue };
            if pod["spec"]["nodeName"] != node || (pod_terminated(&pod) && !keep_terminated) {
                continue;
            }
            let ns = obj::namespace(&pod);
            for vol in pod["spec"]["volumes"].as_array().into_iter().flatten() {
                let ephemeral = vol["ephemeral"].is_object();
                let claim = match vol["persistentVolumeClaim"]["claimName"].as_str() {
                    Some(c) => c.to_string(),
                    None if ephemeral => super::ephemeral::claim_name(
                        obj::name(&pod),
                        vol["name"].as_str().unwrap_or(""),
                    ),
                    None => continue,
                };
                let Some(pvc) = claims.get_in(ns, &claim) else {
                    log::debug!("attachdetach: pod {key}: claim {ns}/{claim} not found");
                    continue;
                };
                if ephemeral && !super::ephemeral::is_for_pod(&pod, &pvc) {
                    continue;
                }
                let pv_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
                if pvc["status"]["phase"] != "Bound" || pv_name.is_empty() {
                    log::debug!("attachdetach: pod {key}: claim {ns}/{claim} is not bound");
                    continue;
                }
                let Some(pv) = pvs.get(pv_name) else { continue };
                if pv["spec"]["claimRef"]["uid"] != obj::uid(&pvc) {
                    continue;
                }
                let Some((driver, handle)) = csi_source(&pv) else {
                    continue;
                };
                let attach_required = drivers
                    .get(driver)
                    .is_none_or(|d| d["spec"]["attachRequired"] != false);
                if !attach_required {
                    continue;
                }
                let w = out
                    .entry(attachment_name(handle, driver, node))
                    .or_insert_with(|| Want {
                        pv: pv_name.to_string(),
                        unique: csi_unique_name(driver, handle),
                        driver: driver.to_string(),
                        handle: handle.to_string(),
                        multi: multi_attach_allowed(&pv),
                        pods: Vec::new(),
                    });
                if !w.pods.iter().any(|p| p.uid == obj::uid(&pod)) {
                    w.pods.push(ObjectRef::of(&PODS, &pod));
                }
            }
        }
        out
    }

    /// The Multi-Attach error message for a pod of `want` (upstream's
    /// `reportMultiAttachError`), from the pods on the other nodes that want the volume.
    fn multi_attach_message(
        &self,
        cx: &Cx,
        want: &Want,
        pod: &ObjectRef,
        others: &[String],
    ) -> String {
        let pods = cx.cache.store_for(&POD_WATCH);
        let claims = cx.cache.store_for(&PVC_WATCH);
        let mut local = Vec::new();
        let mut elsewhere = 0;
        let index = self.index();
        for node in others {
            for key in index.pods_on(node) {
                let Some(p) = pods.get(&key) else { continue };
                if pod_terminated(&p) {
                    continue;
                }
                let uses = index::pod_claims(&p).iter().any(|c| {
                    let (ns, n) = obj::split_key(c);
                    claims
                        .get_in(ns, n)
                        .is_some_and(|pvc| pvc["spec"]["volumeName"] == want.pv.as_str())
                });
                if !uses {
                    continue;
                }
                if obj::namespace(&p) == pod.namespace {
                    local.push(obj::name(&p).to_string());
                } else {
                    elsewhere += 1;
                }
            }
        }
        let detail = if local.is_empty() && elsewhere == 0 {
            "Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node"
                .to_string()
        } else if local.is_empty() {
            format!("Volume is already used by {elsewhere} pod(s) in different namespaces")
        } else if elsewhere > 0 {
            format!(
                "Volume is already used by pod(s) {} and {elsewhere} pod(s) in different namespaces",
                local.join(", ")
            )
        } else {
            format!("Volume is already used by pod(s) {}", local.join(", "))
        };
        volume_msg("Waiting for detach", &want.pv, &detail)
    }

    /// The node's volumes for `attachdetach_controller_total_volumes`: wanted, and attached
    /// (our attachments there with `status.attached`).
    fn count(&self, cx: &Cx, node: &str, wanted: &BTreeMap<String, Want>) {
        let mut desired = metrics::PerPlugin::new();
        for w in wanted.values() {
            *desired.entry(metrics::plugin_name(&w.driver)).or_default() += 1;
        }
        let vas = cx.cache.store_for(&VA_WATCH);
        let mut actual = metrics::PerPlugin::new();
        for name in self.index().attachments_on(node) {
            let Some(va) = vas.get(&name) else { continue };
            if va["status"]["attached"] == true && self.ours(cx, &va, node) {
                let driver = va["spec"]["attacher"].as_str().unwrap_or("");
                *actual.entry(metrics::plugin_name(driver)).or_default() += 1;
            }
        }
        self.stats.node(node, desired, actual);
    }

    fn gone_node(&self, cx: &Cx, node: &str) -> Outcome {
        self.stats.node_gone(node);
        let vas = cx.cache.store_for(&VA_WATCH);
        let actions = self
            .index()
            .attachments_on(node)
            .into_iter()
            .filter_map(|name| {
                let va = vas.get(&name)?;
                (!obj::is_deleting(&va) && self.ours(cx, &va, node))
                    .then(|| reconciler::delete_va(&name))
            })
            .collect();
        Outcome::with(actions)
    }
}

impl Controller for AttachDetach {
    fn watches(&self) -> Vec<Watch> {
        vec![
            NODE_WATCH,
            POD_WATCH,
            PVC_WATCH,
            PV_WATCH,
            VA_WATCH,
            DRIVER_WATCH,
        ]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        self.stats.attach_cache(cache);
        let o = d.object();
        match w.kind {
            k if k == NODES => {
                let name = obj::name(o);
                let managed = |v: &Option<crate::obj::Obj>| {
                    v.as_ref()
                        .is_some_and(|v| obj::annotation(v, MANAGED).is_some())
                };
                if managed(&d.new) || managed(&d.old) || self.index().has_attachments(name) {
                    vec![name.to_string()]
                } else {
                    vec![]
                }
            }
            k if k == PODS => {
                let now = (d.kind != DeltaKind::Deleted).then_some(&**o);
                self.index().pod(&obj::key(o), now)
            }
            k if k == PERSISTENTVOLUMECLAIMS => self.index().claim_nodes(&obj::key(o)),
            k if k == PERSISTENTVOLUMES => {
                let r = &o["spec"]["claimRef"];
                let claim = obj::make_key(
                    r["namespace"].as_str().unwrap_or(""),
                    r["name"].as_str().unwrap_or(""),
                );
                let index = self.index();
                let mut nodes = index.claim_nodes(&claim);
                nodes.extend(
                    index
                        .attachments_of(obj::name(o))
                        .into_iter()
                        .map(|(_, n)| n),
                );
                crate::sort::sort(&mut nodes[..]);
                nodes.dedup();
                nodes
            }
            k if k == VOLUMEATTACHMENTS => {
                let now = (d.kind != DeltaKind::Deleted).then_some(&**o);
                let mut nodes = self.index().attachment(obj::name(o), now);
                // Nodes waiting for this volume (a Multi-Attach) look again.
                if let Some(pv) = o["spec"]["source"]["persistentVolumeName"].as_str() {
                    if let Some(pv) = cache.store_for(&PV_WATCH).get(pv) {
                        let r = &pv["spec"]["claimRef"];
                        let claim = obj::make_key(
                            r["namespace"].as_str().unwrap_or(""),
                            r["name"].as_str().unwrap_or(""),
                        );
                        nodes.extend(self.index().claim_nodes(&claim));
                    }
                }
                crate::sort::sort(&mut nodes[..]);
                nodes.dedup();
                nodes
            }
            _ => self.index().nodes_with_pods(),
        }
    }

    fn applied(&self, _key: &str, action: &Action, result: super::Applied<'_>) {
        // An attachment created is known at once: a sync of another node that runs before
        // the watch brings it must not attach a single-node volume there too.
        if let (Action::Create { kind, .. }, super::Applied::Done(Some(va))) = (action, result) {
            if *kind == VOLUMEATTACHMENTS {
                self.index().attachment(obj::name(va), Some(va));
            }
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.stats.attach_cache(cx.cache);
        match cx.cache.store_for(&NODE_WATCH).get(key) {
            Some(node) => Ok(self.sync_node(cx, &node)),
            None => Ok(self.gone_node(cx, key)),
        }
    }
}

#[cfg(test)]
mod tests;
