//! What the volume controllers read of PersistentVolumes, claims and StorageClasses, as
//! upstream's `component-helpers/storage/volume` and `pkg/volume/util` read them: the
//! storage class of a claim or volume (the beta annotation first), the requested and
//! offered sizes as byte counts, access and volume modes, the CSI driver of a volume, and
//! the annotations and finalizers they share.

use crate::api::resources::PODS;
use crate::cache::Watch;
use crate::compat::quantity::Quantity;
use serde_json::Value;

/// Pods as the volume controllers read them: which claims their volumes use, their node,
/// phase and container states (whether they still run).
pub const POD_VOLUMES_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/nodeName",
        "/spec/volumes/*/name",
        "/spec/volumes/*/persistentVolumeClaim",
        "/spec/volumes/*/ephemeral",
        "/status/phase",
        "/status/containerStatuses/*/state",
    ],
);

/// Set on a claim once the binder has finished binding it.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume the binder bound (not pre-bound by a user).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node the scheduler chose for a WaitForFirstConsumer claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner that created a volume.
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// The CSI driver an in-tree volume was migrated to.
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// The provisioner asked to provision a claim.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The same, under its beta name (still written).
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The storage class, under its beta annotation (read before `storageClassName`).
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The same annotation, under the name the attach/detach side uses.
pub const BETA_STORAGE_CLASS: &str = ANN_BETA_STORAGE_CLASS;
/// The claim size before a resize started (the expander writes it on a volume).
pub const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
/// A StorageClass marked as the default.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The same, under its beta name.
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while a claim is bound to it.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// A claim's storage class: the beta annotation if present, else `spec.storageClassName`,
/// else "" (upstream's `GetPersistentVolumeClaimClass`).
pub fn claim_class(pvc: &Value) -> &str {
    if let Some(c) = crate::obj::annotation(pvc, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    pvc["spec"]["storageClassName"].as_str().unwrap_or("")
}

/// A volume's storage class (upstream's `GetPersistentVolumeClass`).
pub fn volume_class(pv: &Value) -> &str {
    if let Some(c) = crate::obj::annotation(pv, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    pv["spec"]["storageClassName"].as_str().unwrap_or("")
}

/// The storage a claim requests, in bytes (0 when it asks for none or the quantity does
/// not parse).
pub fn requested_bytes(pvc: &Value) -> i128 {
    pvc["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(quantity_value)
        .unwrap_or(0)
}

/// The storage a volume offers, in bytes (0 when missing or malformed).
pub fn capacity_bytes(pv: &Value) -> i128 {
    pv["spec"]["capacity"]["storage"]
        .as_str()
        .and_then(quantity_value)
        .unwrap_or(0)
}

/// `spec.volumeMode`, "Filesystem" when unset.
pub fn volume_mode(o: &Value) -> &str {
    o["spec"]["volumeMode"].as_str().unwrap_or("Filesystem")
}

/// `spec.volumeAttributesClassName` of a volume or a claim ("" for none).
pub fn attributes_class(o: &Value) -> &str {
    o["spec"]["volumeAttributesClassName"]
        .as_str()
        .unwrap_or("")
}

/// `spec.accessModes` as strings.
pub fn access_modes(o: &Value) -> Vec<&str> {
    o["spec"]["accessModes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The CSI driver of a volume (`spec.csi.driver`), if it is a CSI volume.
pub fn csi_driver(pv: &Value) -> Option<&str> {
    pv["spec"]["csi"]["driver"].as_str()
}

/// The default StorageClass among `classes`: of those annotated as default (either
/// annotation "true"), the newest, then the first by name (upstream's `GetDefaultClass`).
pub fn default_class(classes: &[std::sync::Arc<Value>]) -> Option<&Value> {
    classes
        .iter()
        .map(|c| c.as_ref())
        .filter(|c| {
            crate::obj::annotation(c, ANN_DEFAULT_CLASS) == Some("true")
                || crate::obj::annotation(c, ANN_BETA_DEFAULT_CLASS) == Some("true")
        })
        .min_by(|a, b| {
            // RFC 3339 UTC timestamps of one format sort as text; newest first.
            crate::obj::creation_timestamp(b)
                .cmp(crate::obj::creation_timestamp(a))
                .then_with(|| crate::obj::name(a).cmp(crate::obj::name(b)))
        })
}

/// The names of the claims a pod's volumes use: `persistentVolumeClaim.claimName`, and
/// `<pod>-<volume>` for a generic ephemeral volume.
pub fn pod_claim_names(pod: &Value) -> Vec<String> {
    let pod_name = crate::obj::name(pod);
    let mut out = Vec::new();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if let Some(c) = v["persistentVolumeClaim"]["claimName"].as_str() {
            out.push(c.to_string());
        } else if v.get("ephemeral").is_some_and(|e| !e.is_null()) {
            if let Some(n) = v["name"].as_str() {
                out.push(format!("{pod_name}-{n}"));
            }
        }
    }
    out
}

/// Upstream's `IsPodTerminated`: phase Failed or Succeeded, or being deleted with no
/// container running.
pub fn pod_terminated(p: &Value) -> bool {
    let st = &p["status"];
    matches!(st["phase"].as_str(), Some("Failed" | "Succeeded"))
        || (crate::obj::is_deleting(p)
            && !st["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["state"]["running"].is_object()))
}

/// A resource quantity's value rounded up to a whole number (upstream's
/// `Quantity.Value()`): decimal SI (`k`, `M`, ... `E`, `m`, `u`, `n`), binary SI (`Ki` ...
/// `Ei`) and decimal exponents (`1e3`). None for text that is not a quantity.
pub fn quantity_value(s: &str) -> Option<i128> {
    Quantity::parse(s.trim()).map(|q| q.value())
}

/// A PersistentVolume's CSI driver and volume handle, when it is a CSI volume.
pub fn csi_source(pv: &Value) -> Option<(&str, &str)> {
    let csi = pv["spec"]["csi"].as_object()?;
    Some((
        csi.get("driver")?.as_str()?,
        csi.get("volumeHandle")?.as_str()?,
    ))
}

/// The unique volume name of a CSI volume, as nodes report it in `status.volumesAttached`
/// and `status.volumesInUse`: `kubernetes.io/csi/<driver>^<handle>`.
pub fn csi_unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// The VolumeAttachment name the CSI attacher gives a volume on a node:
/// `csi-` and the hex SHA-256 of handle, driver and node name, concatenated.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [handle, driver, node] {
        ctx.update(part.as_bytes());
    }
    let mut s = String::with_capacity(4 + 64);
    s.push_str("csi-");
    for b in ctx.finish().as_ref() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A resource quantity as a number (`1Gi`, `500M`, `1.5e3`); None when unreadable. Precise
/// enough to compare storage sizes.
pub fn quantity(s: &str) -> Option<f64> {
    Quantity::parse(s.trim()).map(|q| q.as_f64())
}

/// The `storage` quantity at `ptr` (e.g. `/spec/resources/requests/storage`); 0 when absent
/// or unreadable, as a missing map entry is the zero quantity upstream.
pub fn storage_at(o: &Value, ptr: &str) -> f64 {
    use crate::obj::At;
    o.at(ptr)
        .and_then(Value::as_str)
        .and_then(quantity)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_as_upstream_values() {
        assert_eq!(quantity_value("1Gi"), Some(1 << 30));
        assert_eq!(quantity_value("500Mi"), Some(500 << 20));
        assert_eq!(quantity_value("1G"), Some(1_000_000_000));
        assert_eq!(quantity_value("1.5Gi"), Some(3 << 29));
        assert_eq!(quantity_value("100m"), Some(1));
        assert_eq!(quantity_value("1e3"), Some(1000));
        assert_eq!(quantity_value("10"), Some(10));
        assert_eq!(quantity_value("abc"), None);
        assert_eq!(quantity_value("1Qi"), None);
    }

    #[test]
    fn the_beta_class_annotation_comes_first() {
        let c = json!({"metadata": {"annotations": {ANN_BETA_STORAGE_CLASS: "old"}},
                       "spec": {"storageClassName": "new"}});
        assert_eq!(claim_class(&c), "old");
        assert_eq!(
            volume_class(&json!({"spec": {"storageClassName": "x"}})),
            "x"
        );
        assert_eq!(claim_class(&json!({"spec": {}})), "");
    }

    #[test]
    fn the_newest_default_class_wins_then_the_first_name() {
        let sc = |n: &str, t: &str, d: bool| {
            std::sync::Arc::new(json!({"metadata": {"name": n, "creationTimestamp": t,
                "annotations": {ANN_DEFAULT_CLASS: if d {"true"} else {"false"}}}}))
        };
        let classes = vec![
            sc("a", "2024-01-01T00:00:00Z", true),
            sc("b", "2024-01-02T00:00:00Z", true),
            sc("c", "2024-01-02T00:00:00Z", true),
            sc("d", "2024-01-03T00:00:00Z", false),
        ];
        assert_eq!(crate::obj::name(default_class(&classes).unwrap()), "b");
        assert!(default_class(&classes[3..]).is_none());
    }

    #[test]
    fn pods_use_claims_and_ephemeral_volumes() {
        let p = json!({"metadata": {"name": "p"}, "spec": {"volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "c1"}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
            {"name": "t", "projected": {}}]}});
        assert_eq!(pod_claim_names(&p), ["c1", "p-e"]);
    }
}

#[cfg(test)]
mod attach_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attachment_names_are_the_csi_attachers() {
        // sha256 of "vol-1" "csi.example.com" "node-a", concatenated.
        assert_eq!(
            attachment_name("vol-1", "csi.example.com", "node-a"),
            "csi-664f93e6befe920d56b73708bbb3eb1888cad5fb3e7203b1b501f466d0bea90f"
        );
        assert_eq!(
            attachment_name("h", "d", "n"),
            "csi-9072ed11cc1acb5fa433a877ff339b6311d013f33bddd1d0092711a8ace5b16d"
        );
    }

    #[test]
    fn quantities_compare() {
        assert_eq!(quantity("1Gi"), Some(1073741824.0));
        assert_eq!(quantity("1G"), Some(1e9));
        assert!(quantity("2Gi") > quantity("2000Mi"));
        assert_eq!(quantity("1.5Ki"), Some(1536.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("x"), None);
        let c = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
        assert_eq!(
            storage_at(&c, "/spec/resources/requests/storage"),
            2147483648.0
        );
        assert_eq!(storage_at(&c, "/status/capacity/storage"), 0.0);
    }

    #[test]
    fn csi_names_and_classes() {
        let pv = json!({"spec": {"csi": {"driver": "d.example.com", "volumeHandle": "h1"}}});
        assert_eq!(csi_source(&pv), Some(("d.example.com", "h1")));
        assert_eq!(
            csi_source(&json!({"spec": {"hostPath": {"path": "/x"}}})),
            None
        );
        assert_eq!(csi_unique_name("d", "h"), "kubernetes.io/csi/d^h");
        let c = json!({"metadata": {"annotations": {BETA_STORAGE_CLASS: "old"}},
                       "spec": {"storageClassName": "new"}});
        assert_eq!(claim_class(&c), "old");
        assert_eq!(
            claim_class(&json!({"spec": {"storageClassName": "new"}})),
            "new"
        );
        assert_eq!(claim_class(&json!({"spec": {}})), "");
    }
}
