//! Volume helpers the storage controllers share (upstream's `pkg/volume/util`,
//! `component-helpers/storage/volume` and the CSI plugin's naming).

use serde_json::Value;

/// The beta annotation that named a claim's class before `spec.storageClassName`.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// A claim's StorageClass name (upstream's `GetPersistentVolumeClaimClass`): the beta
/// annotation first, then `spec.storageClassName`; "" for none.
pub fn claim_class(pvc: &Value) -> &str {
    crate::obj::annotation(pvc, BETA_STORAGE_CLASS)
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .unwrap_or("")
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
pub fn quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| v * factor)
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
