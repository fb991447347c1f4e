//! What the controller decides per pod volume, as upstream's `pkg/volume/util` and the
//! volume plugins kube-controller-manager probes decide it: the SELinux label each
//! container would use on a volume, the volume behind a pod volume (through its claim and
//! PersistentVolume), its plugin's unique name for it, and whether the plugin can mount
//! with `-o context`. In-tree sources whose plugins moved to CSI are translated to it first
//! (`migrated.rs`).

use super::cache::{MOUNT_OPTION, RECURSIVE};
use crate::cache::Store;
use crate::obj;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A label as the controller's translator makes it: `user:role:type:level` from the given
/// parts, nothing defaulted; empty options are no label.
pub fn file_label(opts: &Value) -> String {
    let part = |k: &str| opts[k].as_str().unwrap_or("");
    let label = [part("user"), part("role"), part("type"), part("level")].join(":");
    if label == ":::" {
        String::new()
    } else {
        label
    }
}

/// Each mounted volume's name with the labels of the containers (init, regular, ephemeral)
/// that mount it and have SELinux options: the container's own, else the pod's
/// (upstream's `GetPodVolumeNames` with the effective security context). A volume mounted
/// only by containers without options has no labels.
pub fn mount_labels(pod: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let pod_opts = &pod["spec"]["securityContext"]["seLinuxOptions"];
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            let own = &c["securityContext"]["seLinuxOptions"];
            let opts = if own.is_object() {
                Some(own)
            } else if pod_opts.is_object() {
                Some(pod_opts)
            } else {
                None
            };
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                let Some(name) = m["name"].as_str() else {
                    continue;
                };
                let labels = out.entry(name.to_string()).or_default();
                if let Some(o) = opts {
                    labels.insert(file_label(o));
                }
            }
        }
    }
    out
}

/// The plugin behind a volume source, as the probed plugins recognise it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plugin {
    /// `kubernetes.io/csi/<driver>^<handle>` and the like; Err: the plugin cannot name it
    /// (a CSI volume inline in the pod, an FC volume without WWNs and WWIDs).
    pub unique: Result<String, String>,
    /// The plugin mounts with `-o context`: FC and iSCSI always, CSI when its CSIDriver says
    /// `seLinuxMount: true`, host paths and NFS never.
    pub supports_mount: bool,
    /// The CSI driver, "" for another plugin.
    pub csi_driver: String,
}

fn go_list(v: &Value) -> String {
    let items: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!("[{}]", items.join(" "))
}

/// The plugin for a volume source (a pod's inline volume or a PersistentVolume's spec);
/// None when no probed plugin takes it (emptyDir, configMap, ...). `driver_mounts` says
/// whether a CSI driver's CSIDriver has `seLinuxMount: true`; `pv` whether `src` is a
/// PersistentVolume's spec.
pub fn plugin_of(src: &Value, pv: bool, driver_mounts: impl Fn(&str) -> bool) -> Option<Plugin> {
    let simple = |prefix: &str, name: String, supports: bool| Plugin {
        unique: Ok(format!("{prefix}/{name}")),
        supports_mount: supports,
        csi_driver: String::new(),
    };
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    if let Some(h) = src.get("hostPath").filter(|v| v.is_object()) {
        return Some(simple("kubernetes.io/host-path", s(h, "path"), false));
    }
    if let Some(n) = src.get("nfs").filter(|v| v.is_object()) {
        let name = format!("{}/{}", s(n, "server"), s(n, "path"));
        return Some(simple("kubernetes.io/nfs", name, false));
    }
    if let Some(fc) = src.get("fc").filter(|v| v.is_object()) {
        let wwns = fc["targetWWNs"].as_array().is_some_and(|a| !a.is_empty());
        let wwids = fc["wwids"].as_array().is_some_and(|a| !a.is_empty());
        let name = match (&fc["lun"], wwns, wwids) {
            (l, true, _) if l.is_number() => format!("{}:{l}", go_list(&fc["targetWWNs"])),
            (_, _, true) => go_list(&fc["wwids"]),
            _ => String::new(),
        };
        let mut p = simple("kubernetes.io/fc", name.clone(), true);
        if name.is_empty() {
            p.unique = Err("FC volume without WWNs and LUN or WWIDs".into());
        }
        return Some(p);
    }
    if let Some(i) = src.get("iscsi").filter(|v| v.is_object()) {
        let lun = i["lun"].as_i64().unwrap_or(0);
        let name = format!("{}:{}:{lun}", s(i, "targetPortal"), s(i, "iqn"));
        return Some(simple("kubernetes.io/iscsi", name, true));
    }
    if let Some(c) = src.get("csi").filter(|v| v.is_object()) {
        let driver = s(c, "driver");
        let unique = if pv {
            Ok(format!(
                "kubernetes.io/csi/{driver}^{}",
                s(c, "volumeHandle")
            ))
        } else {
            Err("an inline CSI volume has no volume handle".into())
        };
        return Some(Plugin {
            unique,
            supports_mount: driver_mounts(&driver),
            csi_driver: driver,
        });
    }
    None
}

/// What a pod volume resolves to: its source (the pod's volume itself or the bound
/// PersistentVolume's spec, with which of the two), or why it does not resolve yet (upstream's
/// `CreateVolumeSpec`: a claim missing, not Bound, its volume missing or bound elsewhere).
pub fn resolve(
    pod: &Value,
    vol: &Value,
    claims: &Store,
    pvs: &Store,
) -> Result<Option<(Value, bool)>, String> {
    let ns = obj::namespace(pod);
    let ephemeral = vol["ephemeral"].is_object();
    let claim = if let Some(c) = vol["persistentVolumeClaim"]["claimName"].as_str() {
        c.to_string()
    } else if ephemeral {
        format!("{}-{}", obj::name(pod), vol["name"].as_str().unwrap_or(""))
    } else {
        return translated(vol.clone(), None, ns, vol, "");
    };
    let err = |why: String| Err(format!("error processing PVC {ns:?}/{claim:?}: {why}"));
    let Some(pvc) = claims.get_in(ns, &claim) else {
        return err(format!(
            "failed to find PVC {ns}/{claim} in PVCInformer cache"
        ));
    };
    if ephemeral {
        let owned = obj::controller_ref(&pvc).is_some_and(|r| r.uid == obj::uid(pod));
        if !owned {
            return Err(format!(
                "PVC {ns}/{claim} was not created for pod {ns}/{} (pod is not owner)",
                obj::name(pod)
            ));
        }
    }
    let pv_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
    let phase = pvc["status"]["phase"].as_str().unwrap_or("");
    if phase != "Bound" || pv_name.is_empty() {
        return err(format!(
            "PVC {ns}/{claim} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({pv_name:?})"
        ));
    }
    let Some(pv) = pvs.get(pv_name) else {
        return err(format!("failed to find PV {pv_name:?} in PVInformer cache"));
    };
    let claim_ref = &pv["spec"]["claimRef"];
    if !claim_ref.is_object() {
        return err(format!(
            "found PV object {pv_name:?} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    }
    let ref_uid = claim_ref["uid"].as_str().unwrap_or("");
    if ref_uid != obj::uid(&pvc) {
        return err(format!(
            "found PV object {pv_name:?} but its pv.Spec.ClaimRef.UID ({ref_uid:?}) does not point to claim.UID ({:?})",
            obj::uid(&pvc)
        ));
    }
    translated(pv["spec"].clone(), Some(&pv), ns, vol, &claim)
}

/// `src` as a CSI volume's spec when its plugin was migrated to CSI (a PersistentVolume's
/// spec either way); with whether it is one.
fn translated(
    src: Value,
    pv: Option<&Value>,
    ns: &str,
    vol: &Value,
    claim: &str,
) -> Result<Option<(Value, bool)>, String> {
    let name = vol["name"].as_str().unwrap_or("");
    match super::migrated::translate(&src, pv, ns, name) {
        None => Ok(Some((src, pv.is_some()))),
        Some(Ok(csi)) => Ok(Some((serde_json::json!({ "csi": csi }), true))),
        Some(Err(e)) => Err(format!(
            "error performing CSI migration checks and translation for PVC {ns:?}/{claim:?}: {e}"
        )),
    }
}

/// The label and policy a pod's volume is cached with (upstream's `GetMountSELinuxLabel`
/// and `syncVolume`): the mount label is the containers' one label, none when the pod chose
/// `Recursive` or the plugin cannot mount with a context; the policy is the pod's
/// `seLinuxChangePolicy` (`MountOption` when unset), `Recursive` when the plugin cannot
/// mount with a context or there is no label. `rwop_gate` is SELinuxMountReadWriteOncePod:
/// off, no volume is mounted with a context.
pub fn label_and_policy(
    pod: &Value,
    label: Option<&str>,
    supports_mount: bool,
    rwop_gate: bool,
) -> (String, String) {
    let chosen = pod["spec"]["securityContext"]["seLinuxChangePolicy"].as_str();
    let supports = supports_mount && rwop_gate;
    let mut mount_label = match label {
        Some(l) if rwop_gate => l.to_string(),
        _ => String::new(),
    };
    if chosen == Some(RECURSIVE) || !supports {
        mount_label.clear();
    }
    let mut policy = chosen.unwrap_or(MOUNT_OPTION).to_string();
    if (!supports || mount_label.is_empty()) && policy != RECURSIVE {
        policy = RECURSIVE.to_string();
    }
    (mount_label, policy)
}
