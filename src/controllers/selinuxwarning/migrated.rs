//! In-tree volume sources whose plugins moved to CSI, translated to the CSI driver and
//! volume handle upstream's `csi-translation-lib` gives them (kube-controller-manager
//! translates every such volume: their migration is complete in v1.37), so that they are
//! cached under the same unique name as the CSI volume they are.

use serde_json::Value;

/// A translated source: `{"driver": ..., "volumeHandle": ...}`.
pub type Csi = Value;

fn csi(driver: &str, handle: String) -> Csi {
    serde_json::json!({"driver": driver, "volumeHandle": handle})
}

/// The EBS volume ID of `aws://<zone>/vol-...` or a bare ID.
fn ebs_volume_id(id: &str) -> Result<String, String> {
    let Some(rest) = id.strip_prefix("aws://") else {
        return Ok(id.to_string());
    };
    let path = rest.split_once('/').map_or("", |(_, p)| p);
    let path = path.split(['?', '#']).next().unwrap_or("");
    let vol = path.trim_matches('/');
    if vol.starts_with("vol-") && !vol.contains('/') {
        Ok(vol.to_string())
    } else {
        Err(format!("Invalid format for AWS volume ({id})"))
    }
}

/// The account in an Azure File secret name (`azure-storage-account-<account>-secret`), as
/// the unanchored, greedy pattern finds it.
fn azure_account(secret: &str) -> Option<&str> {
    const PREFIX: &str = "azure-storage-account-";
    let mut from = 0;
    while let Some(i) = secret[from..].find(PREFIX) {
        let start = from + i + PREFIX.len();
        if let Some(end) = secret[start..].rfind("-secret").filter(|e| *e > 0) {
            return Some(&secret[start..start + end]);
        }
        from = from + i + 1;
    }
    None
}

/// The region of GCE zones (`<locale>-<region>-<zone>`), all in one region.
fn gce_region(zones: &[&str]) -> Result<String, String> {
    let mut region: Option<String> = None;
    for z in zones {
        let parts: Vec<&str> = z.split('-').collect();
        if parts.len() != 3 {
            return Err(format!(
                "zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {z}"
            ));
        }
        let r = parts[..2].join("-");
        if region.as_ref().is_some_and(|x| *x != r) {
            return Err("multiple or no regions gotten from zones".into());
        }
        region = Some(r);
    }
    region.ok_or_else(|| "no zones specified".into())
}

fn gce_handle(pv: Option<&Value>, pd: &str) -> Result<String, String> {
    let label = |k: &str| pv.and_then(|p| crate::obj::label(p, k)).unwrap_or("");
    let mut zones = label("failure-domain.beta.kubernetes.io/zone");
    if zones.is_empty() {
        zones = label("topology.kubernetes.io/zone");
    }
    let zones: Vec<&str> = zones.split("__").collect();
    Ok(match zones.as_slice() {
        [z] if !z.is_empty() => format!("projects/UNSPECIFIED/zones/{z}/disks/{pd}"),
        [_, _, ..] => format!(
            "projects/UNSPECIFIED/regions/{}/disks/{pd}",
            gce_region(&zones)?
        ),
        _ => format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{pd}"),
    })
}

fn azure_file_handle(
    src: &Value,
    pv: Option<&Value>,
    pod_ns: &str,
    vol: &str,
) -> Result<String, String> {
    let secret = src["secretName"].as_str().unwrap_or("");
    let account = azure_account(secret).unwrap_or(secret);
    let share = src["shareName"].as_str().unwrap_or("");
    let Some(pv) = pv else {
        let ns = if pod_ns.is_empty() { "default" } else { pod_ns };
        return Ok(format!("#{account}#{share}#{vol}#{ns}"));
    };
    let group = crate::obj::annotation(pv, "kubernetes.io/azure-file-resource-group").unwrap_or("");
    let ns = src["secretNamespace"]
        .as_str()
        .or_else(|| pv["spec"]["claimRef"]["namespace"].as_str())
        .unwrap_or("");
    if ns.is_empty() {
        return Err(
            "could not find a secret namespace in PersistentVolumeSource or ClaimRef".into(),
        );
    }
    let name = crate::obj::name(pv);
    Ok(format!("{group}#{account}#{share}#{name}#{ns}"))
}

/// The CSI source of `src` (a pod's inline volume, or the spec of `pv`) when its plugin
/// was migrated; None for any other source. `pod_ns` and `vol` name an inline volume.
pub fn translate(
    src: &Value,
    pv: Option<&Value>,
    pod_ns: &str,
    vol: &str,
) -> Option<Result<Csi, String>> {
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    let get = |k: &str| src.get(k).filter(|v| v.is_object());
    if let Some(e) = get("awsElasticBlockStore") {
        return Some(ebs_volume_id(&s(e, "volumeID")).map(|h| csi("ebs.csi.aws.com", h)));
    }
    if let Some(g) = get("gcePersistentDisk") {
        let pd = s(g, "pdName");
        let handle = if pv.is_some() {
            gce_handle(pv, &pd)
        } else {
            Ok(format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{pd}"))
        };
        return Some(handle.map(|h| csi("pd.csi.storage.gke.io", h)));
    }
    if let Some(a) = get("azureDisk") {
        let kind = a["kind"].as_str();
        if kind.is_some_and(|k| !k.eq_ignore_ascii_case("Managed")) {
            return Some(Err(format!(
                "kind({}) is not supported in csi migration",
                kind.unwrap_or("")
            )));
        }
        return Some(Ok(csi("disk.csi.azure.com", s(a, "diskURI"))));
    }
    if let Some(f) = get("azureFile") {
        return Some(azure_file_handle(f, pv, pod_ns, vol).map(|h| csi("file.csi.azure.com", h)));
    }
    if let Some(c) = get("cinder") {
        return Some(Ok(csi("cinder.csi.openstack.org", s(c, "volumeID"))));
    }
    if let Some(v) = get("vsphereVolume") {
        return Some(Ok(csi("csi.vsphere.vmware.com", s(v, "volumePath"))));
    }
    if let Some(p) = get("portworxVolume") {
        return Some(Ok(csi("pxd.portworx.com", s(p, "volumeID"))));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn handle(src: Value, pv: Option<&Value>) -> Result<(String, String), String> {
        translate(&src, pv, "ns", "v").expect("migrated").map(|c| {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (s("driver"), s("volumeHandle"))
        })
    }

    #[test]
    fn each_migrated_source_gets_its_driver_and_handle() {
        let h = |d: &str, v: &str| Ok((d.to_string(), v.to_string()));
        assert_eq!(
            handle(json!({"awsElasticBlockStore": {"volumeID": "vol-1"}}), None),
            h("ebs.csi.aws.com", "vol-1")
        );
        assert_eq!(
            handle(
                json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-2"}}),
                None
            ),
            h("ebs.csi.aws.com", "vol-2")
        );
        assert!(handle(
            json!({"awsElasticBlockStore": {"volumeID": "aws://z/x/vol-2"}}),
            None
        )
        .is_err());
        let gce = json!({"gcePersistentDisk": {"pdName": "pd"}});
        assert_eq!(
            handle(gce.clone(), None),
            h(
                "pd.csi.storage.gke.io",
                "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd"
            )
        );
        let pv = json!({"metadata": {"name": "p", "labels": {"topology.kubernetes.io/zone": "us-central1-a"}}});
        assert_eq!(
            handle(gce.clone(), Some(&pv)),
            h(
                "pd.csi.storage.gke.io",
                "projects/UNSPECIFIED/zones/us-central1-a/disks/pd"
            )
        );
        let pv = json!({"metadata": {"name": "p", "labels": {"failure-domain.beta.kubernetes.io/zone": "us-central1-a__us-central1-b"}}});
        assert_eq!(
            handle(gce.clone(), Some(&pv)),
            h(
                "pd.csi.storage.gke.io",
                "projects/UNSPECIFIED/regions/us-central1/disks/pd"
            )
        );
        let pv = json!({"metadata": {"name": "p", "labels": {"topology.kubernetes.io/zone": "a-b-c__d-e-f"}}});
        assert!(handle(gce, Some(&pv)).is_err(), "two regions");
        assert_eq!(
            handle(
                json!({"azureDisk": {"diskURI": "/d", "kind": "managed"}}),
                None
            ),
            h("disk.csi.azure.com", "/d")
        );
        assert!(handle(
            json!({"azureDisk": {"diskURI": "/d", "kind": "Shared"}}),
            None
        )
        .is_err());
        let af = json!({"azureFile": {"secretName": "azure-storage-account-acct-secret", "shareName": "s"}});
        assert_eq!(
            handle(af.clone(), None),
            h("file.csi.azure.com", "#acct#s#v#ns")
        );
        let pv = json!({"metadata": {"name": "p", "annotations": {"kubernetes.io/azure-file-resource-group": "rg"}},
            "spec": {"claimRef": {"namespace": "cns"}}});
        assert_eq!(
            handle(af.clone(), Some(&pv)),
            h("file.csi.azure.com", "rg#acct#s#p#cns")
        );
        assert!(
            handle(af, Some(&json!({"metadata": {"name": "p"}}))).is_err(),
            "no namespace"
        );
        assert_eq!(azure_account("plain"), None);
        assert_eq!(
            handle(json!({"cinder": {"volumeID": "c"}}), None),
            h("cinder.csi.openstack.org", "c")
        );
        assert_eq!(
            handle(json!({"vsphereVolume": {"volumePath": "[ds] x"}}), None),
            h("csi.vsphere.vmware.com", "[ds] x")
        );
        assert_eq!(
            handle(json!({"portworxVolume": {"volumeID": "p"}}), None),
            h("pxd.portworx.com", "p")
        );
        assert!(translate(&json!({"nfs": {}}), None, "ns", "v").is_none());
    }
}
