//! Volume controller scenarios (ephemeral-volume, attach/detach, expander), against the
//! sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`).

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{
    EVENTS, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS, STORAGECLASSES,
};
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn events_about(admin: &Client, ns: &str, name: &str) -> Vec<(String, String, String, String)> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .expect("list events")
        .items
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["message"]),
                s(&e["source"]["component"]),
            )
        })
        .collect()
}

fn wait_event(
    admin: &Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> (String, String, String, String) {
    eventually(LIMIT, &format!("{reason} Event about {name}"), || {
        events_about(admin, ns, name)
            .into_iter()
            .find(|e| e.1 == reason)
    })
}

fn eph(name: &str) -> Value {
    json!({"name": name, "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"from": "template"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "e2e-none",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }}})
}

fn pod_with(name: &str, node: Option<&str>, volumes: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
                 "volumes": volumes}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = n.into();
    }
    p
}

fn pvc(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "e2e-none",
                    "resources": {"requests": {"storage": "1Gi"}}}})
}

/// Delete a claim and let it go even if the apiserver's admission gave it the protection
/// finalizer (the protection controller is not running here).
fn delete_claim(admin: &Client, ns: &str, name: &str) {
    let _ = admin.delete(&PERSISTENTVOLUMECLAIMS, Some(ns), name, &Default::default());
    let _ = admin.patch(
        &PERSISTENTVOLUMECLAIMS,
        Some(ns),
        name,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
        None,
    );
}

fn wait_claim(admin: &Client, ns: &str, name: &str, not_uid: &str) -> Value {
    eventually(LIMIT, &format!("claim {ns}/{name}"), || {
        admin
            .get(&PERSISTENTVOLUMECLAIMS, Some(ns), name)
            .ok()
            .filter(|c| {
                c["metadata"]["uid"] != not_uid && c["metadata"]["deletionTimestamp"].is_null()
            })
    })
}

/// A claim per generic ephemeral volume, owned by its pod; a claim of that name that the pod
/// does not own is reported; a deleted claim comes back.
fn scenario_ephemeral_claims(t: &Target) {
    let ns = Ns::with_cleanup(t, "eph", &[PODS, PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    admin
        .create(&PERSISTENTVOLUMECLAIMS, Some(n), &pvc("q-data"))
        .expect("foreign claim");
    let _kcm = start_with(t, "ephemeral", "--controllers=ephemeral-volume-controller");
    let p = admin
        .create(
            &PODS,
            Some(n),
            &pod_with(
                "p",
                None,
                json!([{"name": "scratch", "emptyDir": {}}, eph("data"), eph("log")]),
            ),
        )
        .expect("pod p");
    for v in ["data", "log"] {
        let c = wait_claim(admin, n, &format!("p-{v}"), "");
        assert_eq!(
            c["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "p",
                    "uid": p["metadata"]["uid"], "controller": true,
                    "blockOwnerDeletion": true}])
        );
        assert_eq!(c["metadata"]["labels"], json!({"from": "template"}));
        assert_eq!(c["spec"]["storageClassName"], "e2e-none");
    }
    assert!(admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(n), "p-scratch")
        .is_err());

    admin
        .create(&PODS, Some(n), &pod_with("q", None, json!([eph("data")])))
        .expect("pod q");
    let e = wait_event(admin, n, "q", "FailedBinding");
    assert_eq!(
        e,
        (
            "Warning".to_string(),
            "FailedBinding".to_string(),
            format!(
                "ephemeral volume data: PVC {n}/q-data was not created for pod {n}/q (pod is not owner)"
            ),
            "ephemeral_volume".to_string()
        )
    );

    let old = admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(n), "p-data")
        .expect("claim");
    delete_claim(admin, n, "p-data");
    let again = wait_claim(admin, n, "p-data", old["metadata"]["uid"].as_str().unwrap());
    assert_eq!(
        again["metadata"]["ownerReferences"][0]["uid"],
        p["metadata"]["uid"]
    );
    assert!(events_about(admin, n, "p").is_empty());
}

/// Cluster objects made by a test (PersistentVolumes, a StorageClass), deleted on drop.
struct Cluster {
    admin: Client,
    objects: Vec<(edgekcm::api::Kind, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (k, n) in &self.objects {
            let _ = self.admin.delete(k, None, n, &Default::default());
            let _ = self.admin.patch(
                k,
                None,
                n,
                PatchType::Merge,
                &json!({"metadata": {"finalizers": null}}),
                None,
            );
        }
    }
}

/// A claim of class `class` bound to a new volume with this source, 1Gi each.
fn bound(admin: &Client, ns: &str, claim: &str, class: &str, source: Value, made: &mut Cluster) {
    let c = admin
        .create(
            &PERSISTENTVOLUMECLAIMS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                         "volumeName": format!("{ns}-{claim}"),
                         "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .expect("claim");
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
        "storageClassName": class,
        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": ns,
                     "name": claim, "uid": c["metadata"]["uid"]}});
    let (k, v) = source
        .as_object()
        .expect("source")
        .iter()
        .next()
        .expect("one");
    spec[k] = v.clone();
    let pv = format!("{ns}-{claim}");
    admin
        .create(
            &PERSISTENTVOLUMES,
            None,
            &json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                    "spec": spec}),
        )
        .expect("volume");
    made.objects.push((PERSISTENTVOLUMES, pv));
    let mut c = admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(ns), claim)
        .expect("claim");
    c["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                         "capacity": {"storage": "1Gi"}});
    admin
        .update_status(&PERSISTENTVOLUMECLAIMS, &c)
        .expect("claim status");
}

fn grow(admin: &Client, ns: &str, claim: &str, to: &str) {
    admin
        .patch(
            &PERSISTENTVOLUMECLAIMS,
            Some(ns),
            claim,
            PatchType::Merge,
            &json!({"spec": {"resources": {"requests": {"storage": to}}}}),
            None,
        )
        .expect("grow claim");
}

/// A CSI claim that grows is left to the external resizer (a Normal Event, as upstream v1.34-v1.37); a claim of a migrated
/// in-tree volume gets the CSI driver as its resizer.
fn scenario_expansion_handoff(t: &Target) {
    let ns = Ns::with_cleanup(t, "expand", &[PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut made = Cluster {
        admin: admin.clone(),
        objects: Vec::new(),
    };
    let class = unique("e2e-expand");
    admin
        .create(
            &STORAGECLASSES,
            None,
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": class}, "provisioner": "csi.e2e.example.com",
                    "allowVolumeExpansion": true}),
        )
        .expect("class");
    made.objects.push((STORAGECLASSES, class.clone()));
    bound(
        admin,
        n,
        "csi",
        &class,
        json!({"csi": {"driver": "csi.e2e.example.com", "volumeHandle": "h1"}}),
        &mut made,
    );
    bound(
        admin,
        n,
        "ebs",
        &class,
        json!({"awsElasticBlockStore": {"volumeID": "vol-0123"}}),
        &mut made,
    );
    let _kcm = start_with(
        t,
        "expand",
        "--controllers=persistentvolume-expander-controller",
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        events_about(admin, n, "csi").is_empty(),
        "nothing to expand yet"
    );
    grow(admin, n, "csi", "2Gi");
    let e = wait_event(admin, n, "csi", "ExternalExpanding");
    assert_eq!(
        e,
        (
            "Normal".to_string(),
            "ExternalExpanding".to_string(),
            "waiting for an external controller to expand this PVC".to_string(),
            "volume_expand".to_string()
        )
    );
    grow(admin, n, "ebs", "3Gi");
    let e = wait_event(admin, n, "ebs", "ExternalExpanding");
    assert_eq!(e.0, "Normal");
    assert_eq!(
        e.2,
        "CSI migration enabled for kubernetes.io/aws-ebs; waiting for external resizer to \
         expand the pvc"
    );
    let c = eventually(LIMIT, "resizer annotation", || {
        let c = admin
            .get(&PERSISTENTVOLUMECLAIMS, Some(n), "ebs")
            .expect("claim");
        (c["metadata"]["annotations"]["volume.kubernetes.io/storage-resizer"] == "ebs.csi.aws.com")
            .then_some(c)
    });
    assert!(c["status"]["conditions"].is_null());
    assert!(admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(n), "csi")
        .expect("claim")["metadata"]["annotations"]["volume.kubernetes.io/storage-resizer"]
        .is_null());
}

scenarios! {
    ephemeral_claims => scenario_ephemeral_claims,
    expansion_handoff => scenario_expansion_handoff,
}
