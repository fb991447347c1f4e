//! persistentvolume-binder-controller and the PVC / PV protection controllers, against the
//! sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). Volumes
//! are cluster-scoped: each scenario names its volumes after its namespace and deletes them
//! at the end. There is no external provisioner: the scenarios create the volume one would.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions, PatchType};
use edgekcm::api::resources::{
    EVENTS, PERSISTENTVOLUMECLAIMS as PVCS, PERSISTENTVOLUMES as PVS, PODS, STORAGECLASSES,
};
use serde_json::{json, Value};
use std::time::Duration;

const BINDER: &str = "--controllers=persistentvolume-binder-controller";
const LIMIT: Duration = Duration::from_secs(60);

/// Deletes the scenario's volumes and classes (finalizers first) even when it fails.
struct Gone {
    admin: Client,
    /// The scenario's namespace: its claims are let go (protection finalizers removed).
    ns: String,
    pvs: Vec<String>,
    classes: Vec<String>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        if let Ok(l) = self
            .admin
            .list(&PVCS, Some(&self.ns), &ListOptions::default())
        {
            for c in l.items {
                delete_claim(
                    &self.admin,
                    &self.ns,
                    c["metadata"]["name"].as_str().unwrap_or(""),
                );
            }
        }
        for n in &self.pvs {
            let _ = self.admin.patch(
                &PVS,
                None,
                n,
                PatchType::Merge,
                &json!({"metadata": {"finalizers": null}}),
                None,
            );
            let _ = self.admin.delete(&PVS, None, n, &Default::default());
        }
        for n in &self.classes {
            let _ = self
                .admin
                .delete(&STORAGECLASSES, None, n, &Default::default());
        }
    }
}

fn pv(name: &str, size: &str, class: &str, policy: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
           "metadata": {"name": name},
           "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class, "persistentVolumeReclaimPolicy": policy,
                    "csi": {"driver": "csi.example.com", "volumeHandle": name}}})
}

fn pvc(name: &str, size: &str, class: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name},
           "spec": {"resources": {"requests": {"storage": size}},
                    "accessModes": ["ReadWriteOnce"]}});
    if let Some(cl) = class {
        c["spec"]["storageClassName"] = cl.into();
    }
    c
}

fn class(name: &str, provisioner: &str, mode: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
           "metadata": {"name": name}, "provisioner": provisioner,
           "reclaimPolicy": "Delete", "volumeBindingMode": mode})
}

fn get(admin: &Client, kind: &edgekcm::api::Kind, ns: Option<&str>, name: &str) -> Value {
    admin.get(kind, ns, name).expect("get")
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

fn ann<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][k].as_str()
}

/// Events about `name` in `ns`: (reason, type, message, source component).
fn events(admin: &Client, ns: &str, name: &str) -> Vec<(String, String, String, String)> {
    admin
        .list(&EVENTS, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["reason"]),
                s(&e["type"]),
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
    eventually(LIMIT, &format!("a {reason} Event about {name}"), || {
        events(admin, ns, name).into_iter().find(|e| e.0 == reason)
    })
}

fn wait_phase(
    admin: &Client,
    kind: &edgekcm::api::Kind,
    ns: Option<&str>,
    name: &str,
    want: &str,
) -> Value {
    eventually(LIMIT, &format!("{name} {want}"), || {
        let v = admin.get(kind, ns, name).ok()?;
        (phase(&v) == want).then_some(v)
    })
}

/// Delete a claim and let it go even if nothing removes its protection finalizer.
fn delete_claim(admin: &Client, ns: &str, name: &str) {
    let _ = admin.delete(&PVCS, Some(ns), name, &Default::default());
    let _ = admin.patch(
        &PVCS,
        Some(ns),
        name,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
        None,
    );
}

/// The smallest fitting volume of the claim's class is bound, with upstream's annotations
/// and phases on both sides; a claim naming a volume that is too small gets VolumeMismatch.
fn scenario_static_binding(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-static", &[PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let names: Vec<String> = ["big", "small", "other", "tiny"]
        .iter()
        .map(|s| format!("{n}-{s}"))
        .collect();
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: names.clone(),
        classes: vec![],
    };
    let cls = format!("{n}-gold");
    admin
        .create(&PVS, None, &pv(&names[0], "10Gi", &cls, "Retain"))
        .expect("pv");
    admin
        .create(&PVS, None, &pv(&names[1], "2Gi", &cls, "Retain"))
        .expect("pv");
    admin
        .create(&PVS, None, &pv(&names[2], "2Gi", "silver", "Retain"))
        .expect("pv");
    admin
        .create(&PVS, None, &pv(&names[3], "1Gi", &cls, "Retain"))
        .expect("pv");
    let _kcm = Kcm::start(t, "pv-static", &[BINDER]);
    // The claims come once every volume is Available: a volume still Pending is passed over
    // (as upstream does), so a claim synced first could take a bigger one.
    for name in &names {
        wait_phase(admin, &PVS, None, name, "Available");
    }
    admin
        .create(&PVCS, Some(n), &pvc("data", "1500Mi", Some(&cls)))
        .expect("pvc");
    let mut mismatch = pvc("named", "5Gi", Some(&cls));
    mismatch["spec"]["volumeName"] = names[3].clone().into();
    admin.create(&PVCS, Some(n), &mismatch).expect("pvc");

    let c = wait_phase(admin, &PVCS, Some(n), "data", "Bound");
    assert_eq!(c["spec"]["volumeName"], names[1].as_str());
    assert_eq!(ann(&c, "pv.kubernetes.io/bind-completed"), Some("yes"));
    assert_eq!(ann(&c, "pv.kubernetes.io/bound-by-controller"), Some("yes"));
    assert_eq!(c["status"]["capacity"]["storage"], "2Gi");
    assert_eq!(c["status"]["accessModes"], json!(["ReadWriteOnce"]));
    let v = wait_phase(admin, &PVS, None, &names[1], "Bound");
    assert_eq!(v["spec"]["claimRef"]["name"], "data");
    assert_eq!(v["spec"]["claimRef"]["namespace"], n);
    assert_eq!(v["spec"]["claimRef"]["uid"], c["metadata"]["uid"]);
    assert_eq!(v["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
    assert_eq!(ann(&v, "pv.kubernetes.io/bound-by-controller"), Some("yes"));
    for other in [&names[0], &names[2], &names[3]] {
        wait_phase(admin, &PVS, None, other, "Available");
    }
    let e = wait_event(admin, n, "named", "VolumeMismatch");
    assert_eq!(e.1, "Warning");
    assert_eq!(
        e.2,
        format!(
            "Cannot bind to requested volume {:?}: requested PV is too small",
            names[3]
        )
    );
    assert_eq!(e.3, "persistentvolume-controller");
    assert_eq!(phase(&get(admin, &PVCS, Some(n), "named")), "Pending");

    // Released and kept (Retain) once the claim is gone.
    delete_claim(admin, n, "data");
    let v = wait_phase(admin, &PVS, None, &names[1], "Released");
    assert_eq!(v["spec"]["claimRef"]["name"], "data");
}

/// A claim of a class with an external provisioner is handed to it; the volume it creates
/// (pre-bound through claimRef) is bound. Deleting the claim leaves the volume to its
/// provisioner, and so is a static CSI volume (v1.34+); a static Delete volume of another
/// source without a deleter (NFS) fails with VolumeFailedDelete.
fn scenario_provisioning_handoff(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-prov", &[PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let cls = format!("{n}-fast");
    let (dynamic, fixed) = (format!("{n}-dyn"), format!("{n}-static"));
    let static_csi = format!("{n}-static-csi");
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: vec![dynamic.clone(), fixed.clone(), static_csi.clone()],
        classes: vec![cls.clone()],
    };
    admin
        .create(
            &STORAGECLASSES,
            None,
            &class(&cls, "csi.example.com", "Immediate"),
        )
        .expect("class");
    admin
        .create(&PVCS, Some(n), &pvc("want", "1Gi", Some(&cls)))
        .expect("pvc");
    admin
        .create(&PVCS, Some(n), &pvc("noclass", "1Gi", Some("")))
        .expect("pvc");
    let _kcm = Kcm::start(t, "pv-prov", &[BINDER]);

    let c = eventually(LIMIT, "the provisioner annotations", || {
        let c = admin.get(&PVCS, Some(n), "want").ok()?;
        ann(&c, "volume.kubernetes.io/storage-provisioner").map(|_| c.clone())
    });
    assert_eq!(
        ann(&c, "volume.kubernetes.io/storage-provisioner"),
        Some("csi.example.com")
    );
    assert_eq!(
        ann(&c, "volume.beta.kubernetes.io/storage-provisioner"),
        Some("csi.example.com")
    );
    let e = wait_event(admin, n, "want", "ExternalProvisioning");
    assert_eq!(e.1, "Normal");
    assert_eq!(
        e.2,
        "Waiting for a volume to be created either by the external provisioner 'csi.example.com' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    );
    let e = wait_event(admin, n, "noclass", "FailedBinding");
    assert_eq!(
        e.2,
        "no persistent volumes available for this claim and no storage class is set"
    );

    // What the external provisioner would create.
    let mut v = pv(&dynamic, "1Gi", &cls, "Delete");
    v["metadata"]["annotations"] = json!({"pv.kubernetes.io/provisioned-by": "csi.example.com"});
    v["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": n, "name": "want", "uid": c["metadata"]["uid"]});
    admin.create(&PVS, None, &v).expect("pv");
    let c = wait_phase(admin, &PVCS, Some(n), "want", "Bound");
    assert_eq!(c["spec"]["volumeName"], dynamic.as_str());
    assert_eq!(ann(&c, "pv.kubernetes.io/bind-completed"), Some("yes"));
    assert_eq!(ann(&c, "pv.kubernetes.io/bound-by-controller"), Some("yes"));
    let v = wait_phase(admin, &PVS, None, &dynamic, "Bound");
    assert_eq!(ann(&v, "pv.kubernetes.io/bound-by-controller"), None);

    // The provisioner deletes its own volumes: Released, left alone.
    delete_claim(admin, n, "want");
    wait_phase(admin, &PVS, None, &dynamic, "Released");

    // A static CSI Delete volume is the external provisioner's: Released, left alone.
    let gone_claim =
        json!({"namespace": n, "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"});
    let mut s = pv(&static_csi, "1Gi", "", "Delete");
    s["spec"]["claimRef"] = gone_claim.clone();
    admin.create(&PVS, None, &s).expect("pv");
    wait_phase(admin, &PVS, None, &static_csi, "Released");
    // A static NFS Delete volume has no deleter: Failed.
    let mut s = pv(&fixed, "1Gi", "", "Delete");
    s["spec"].as_object_mut().expect("spec").remove("csi");
    s["spec"]["nfs"] = json!({"server": "198.51.100.1", "path": "/export"});
    s["spec"]["claimRef"] = gone_claim;
    admin.create(&PVS, None, &s).expect("pv");
    let v = wait_phase(admin, &PVS, None, &fixed, "Failed");
    let msg = format!(
        "error getting deleter volume plugin for volume {fixed:?}: no deletable volume plugin matched"
    );
    assert_eq!(v["status"]["message"], msg.as_str());
    let e = wait_event(admin, "default", &fixed, "VolumeFailedDelete");
    assert_eq!((e.1.as_str(), e.2.as_str()), ("Warning", msg.as_str()));
    // Failed stays Failed: no more writes.
    std::thread::sleep(Duration::from_secs(2));
    let again = get(admin, &PVS, None, &fixed);
    assert_eq!(phase(&again), "Failed");
    assert_eq!(
        again["metadata"]["resourceVersion"],
        get(admin, &PVS, None, &fixed)["metadata"]["resourceVersion"]
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        again["metadata"]["resourceVersion"],
        get(admin, &PVS, None, &fixed)["metadata"]["resourceVersion"]
    );
    assert_eq!(phase(&get(admin, &PVS, None, &dynamic)), "Released");
    assert_eq!(phase(&get(admin, &PVS, None, &static_csi)), "Released");
}

/// WaitForFirstConsumer: no binding and a WaitForFirstConsumer Event, then
/// WaitForPodScheduled once a pod uses the claim.
fn scenario_wait_for_first_consumer(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-wffc", &[PODS, PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let cls = format!("{n}-local");
    let vol = format!("{n}-v");
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: vec![vol.clone()],
        classes: vec![cls.clone()],
    };
    admin
        .create(
            &STORAGECLASSES,
            None,
            &class(&cls, "kubernetes.io/no-provisioner", "WaitForFirstConsumer"),
        )
        .expect("class");
    admin
        .create(&PVS, None, &pv(&vol, "1Gi", &cls, "Retain"))
        .expect("pv");
    admin
        .create(&PVCS, Some(n), &pvc("c", "1Gi", Some(&cls)))
        .expect("pvc");
    let _kcm = Kcm::start(t, "pv-wffc", &[BINDER]);
    let e = wait_event(admin, n, "c", "WaitForFirstConsumer");
    assert_eq!(
        e.2,
        "waiting for first consumer to be created before binding"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}});
    admin.create(&PODS, Some(n), &pod).expect("pod");
    // Claims are looked at again every --pvclaimbinder-sync-period (15 s).
    let e = wait_event(admin, n, "c", "WaitForPodScheduled");
    assert_eq!(e.2, "waiting for pod user to be scheduled");
    assert_eq!(phase(&get(admin, &PVCS, Some(n), "c")), "Pending");
    assert_eq!(phase(&get(admin, &PVS, None, &vol)), "Available");
}

/// Claims and volumes made while the apiserver restarts: every claim ends Bound to its
/// own volume, no volume is bound twice, none is left bound to nothing.
fn scenario_binding_across_restart(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-restart", &[PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let count = 30;
    let cls = format!("{n}-r");
    let vols: Vec<String> = (0..count).map(|i| format!("{n}-{i}")).collect();
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: vols.iter().cloned().chain([format!("{n}-first")]).collect(),
        classes: vec![],
    };
    let mut kcm = Kcm::start(t, "pv-restart", &[BINDER]);
    // The controller is up once a first volume is Available.
    let first = format!("{n}-first");
    admin
        .create(&PVS, None, &pv(&first, "1Gi", "none", "Retain"))
        .expect("pv");
    wait_phase(admin, &PVS, None, &first, "Available");
    let _ = admin.delete(&PVS, None, &first, &Default::default());
    for (i, v) in vols.iter().enumerate() {
        admin
            .create(&PVS, None, &pv(v, "1Gi", &cls, "Retain"))
            .expect("pv");
        admin
            .create(&PVCS, Some(n), &pvc(&format!("c{i}"), "1Gi", Some(&cls)))
            .expect("pvc");
        if i == count / 2 {
            match t.sandbox() {
                Some(sb) => {
                    let f = sb.faults();
                    f.lose_answers(2, "PUT", None);
                    std::thread::sleep(Duration::from_millis(300));
                    sb.stop_listening();
                    std::thread::sleep(Duration::from_millis(500));
                    f.expire_history();
                    sb.resume_listening();
                }
                None => {
                    let restart = std::env::var("KCM_E2E_APISERVER_RESTART")
                        .expect("the restart scenario needs KCM_E2E_APISERVER_RESTART");
                    let st = std::process::Command::new("sh")
                        .args(["-c", &restart])
                        .status()
                        .expect("restart command");
                    assert!(st.success(), "restart command failed: {st}");
                }
            }
        }
    }
    let admin = t.admin();
    eventually(Duration::from_secs(120), "every claim Bound", || {
        let l = admin.list(&PVCS, Some(n), &ListOptions::default()).ok()?;
        (l.items.len() == count && l.items.iter().all(|c| phase(c) == "Bound")).then_some(())
    });
    let claims = admin
        .list(&PVCS, Some(n), &ListOptions::default())
        .expect("claims")
        .items;
    let mut used: Vec<&str> = claims
        .iter()
        .map(|c| c["spec"]["volumeName"].as_str().unwrap_or(""))
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(used.len(), count, "each claim has its own volume");
    eventually(LIMIT, "every volume Bound to the claim naming it", || {
        claims
            .iter()
            .all(|c| {
                let v = admin
                    .get(&PVS, None, c["spec"]["volumeName"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                phase(&v) == "Bound" && v["spec"]["claimRef"]["uid"] == c["metadata"]["uid"]
            })
            .then_some(())
    });
    assert!(kcm.exited().is_none(), "edgekcm exited");
}

const ALL: &str = "--controllers=persistentvolume-binder-controller,\
persistentvolumeclaim-protection-controller,persistentvolume-protection-controller";

fn finalizers(v: &Value) -> Vec<&str> {
    v["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A claim a scheduled pod uses stays (Terminating) until the pod is gone; a bound volume
/// stays until its claim is gone and it is released. Both get their finalizers.
fn scenario_protection(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-prot", &[PODS, PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let vol = format!("{n}-v");
    let cls = format!("{n}-p");
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: vec![vol.clone()],
        classes: vec![],
    };
    let _kcm = Kcm::start(t, "pv-prot", &[ALL]);
    admin
        .create(&PVS, None, &pv(&vol, "1Gi", &cls, "Retain"))
        .expect("pv");
    admin
        .create(&PVCS, Some(n), &pvc("c", "1Gi", Some(&cls)))
        .expect("pvc");
    let c = wait_phase(admin, &PVCS, Some(n), "c", "Bound");
    assert_eq!(finalizers(&c), ["kubernetes.io/pvc-protection"]);
    let v = wait_phase(admin, &PVS, None, &vol, "Bound");
    assert_eq!(finalizers(&v), ["kubernetes.io/pv-protection"]);
    // v1.37: a bound claim says whether a pod references it (condition `Unused`).
    let unused = |status: &str, reason: &str| {
        eventually(LIMIT, &format!("Unused {status} ({reason})"), || {
            let c = admin.get(&PVCS, Some(n), "c").ok()?;
            let cond = c["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|x| x["type"] == "Unused")?
                .clone();
            (cond["status"] == status && cond["reason"] == reason).then_some(cond)
        })
    };
    // kube-apiserver v1.34-v1.36: emulated there, the gate is off and no condition is kept.
    let minor: u32 = admin
        .get_path("/version")
        .ok()
        .and_then(|v| {
            let m = v["minor"].as_str()?.trim_end_matches('+').parse().ok()?;
            Some(m)
        })
        .unwrap_or(37);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"nodeName": "somewhere", "containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}});
    if minor >= 37 {
        let cond = unused("True", "NoPodsUsingPVC");
        assert_eq!(
            cond["message"],
            "No pods are currently referencing this PVC"
        );
        assert!(cond["lastTransitionTime"].is_string());
        admin.create(&PODS, Some(n), &pod).expect("pod");
        let cond = unused("False", "PodUsingPVC");
        assert_eq!(cond["message"], "A pod is currently referencing this PVC");
    } else {
        admin.create(&PODS, Some(n), &pod).expect("pod");
        std::thread::sleep(Duration::from_secs(2));
        let c = get(admin, &PVCS, Some(n), "c");
        let conds = c["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(conds.iter().all(|x| x["type"] != "Unused"), "{conds:?}");
    }

    // The volume is bound: deleting it waits.
    admin
        .delete(&PVS, None, &vol, &Default::default())
        .expect("delete pv");
    // The claim is used: deleting it waits.
    admin
        .delete(&PVCS, Some(n), "c", &Default::default())
        .expect("delete pvc");
    std::thread::sleep(Duration::from_secs(3));
    let c = get(admin, &PVCS, Some(n), "c");
    assert!(c["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(finalizers(&c), ["kubernetes.io/pvc-protection"]);
    let v = get(admin, &PVS, None, &vol);
    assert_eq!(finalizers(&v), ["kubernetes.io/pv-protection"]);

    // The pod goes: the claim goes, the volume is released and goes.
    delete_pod_now(admin, n, "user").expect("delete pod");
    eventually(LIMIT, "the claim gone", || {
        admin.get(&PVCS, Some(n), "c").is_err().then_some(())
    });
    eventually(LIMIT, "the volume gone", || {
        admin.get(&PVS, None, &vol).is_err().then_some(())
    });
}

/// VolumeAttributesClass (GA in v1.34): a claim takes only a volume of its class (a larger one
/// over a smaller one without), the bound claim reports the class, and a claim without one
/// takes only a volume without one. kube-apiserver v1.31 and later stamp every phase change
/// of a volume in `status.lastPhaseTransitionTime`; the binder's writes keep it.
fn scenario_attributes_class(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-pv-vac", &[PVCS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let (plain, fast) = (format!("{n}-plain"), format!("{n}-fast"));
    let _gone = Gone {
        admin: admin.clone(),
        ns: n.to_string(),
        pvs: vec![plain.clone(), fast.clone()],
        classes: vec![],
    };
    let cls = format!("{n}-gold");
    admin
        .create(&PVS, None, &pv(&plain, "1Gi", &cls, "Retain"))
        .expect("pv");
    let mut f = pv(&fast, "5Gi", &cls, "Retain");
    f["spec"]["volumeAttributesClassName"] = "fast-io".into();
    admin.create(&PVS, None, &f).expect("pv");
    let _kcm = Kcm::start(t, "pv-vac", &[BINDER]);
    let available = wait_phase(admin, &PVS, None, &fast, "Available");
    wait_phase(admin, &PVS, None, &plain, "Available");
    let mut c = pvc("fast", "1Gi", Some(&cls));
    c["spec"]["volumeAttributesClassName"] = "fast-io".into();
    admin.create(&PVCS, Some(n), &c).expect("pvc");
    let c = wait_phase(admin, &PVCS, Some(n), "fast", "Bound");
    assert_eq!(c["spec"]["volumeName"], fast.as_str());
    assert_eq!(c["status"]["currentVolumeAttributesClassName"], "fast-io");
    admin
        .create(&PVCS, Some(n), &pvc("plain", "1Gi", Some(&cls)))
        .expect("pvc");
    let p = wait_phase(admin, &PVCS, Some(n), "plain", "Bound");
    assert_eq!(p["spec"]["volumeName"], plain.as_str());
    assert!(p["status"]
        .get("currentVolumeAttributesClassName")
        .is_none());
    let bound = wait_phase(admin, &PVS, None, &fast, "Bound");
    if t.is_real() {
        let at = |v: &Value| {
            v["status"]["lastPhaseTransitionTime"]
                .as_str()
                .map(str::to_string)
        };
        assert!(at(&available).is_some(), "{available}");
        assert!(at(&bound).is_some(), "{bound}");
        assert!(at(&bound) >= at(&available), "{available} {bound}");
    }
}

scenarios! {
    attributes_class => scenario_attributes_class,
    protection => scenario_protection,
    static_binding => scenario_static_binding,
    provisioning_handoff => scenario_provisioning_handoff,
    wait_for_first_consumer => scenario_wait_for_first_consumer,
    binding_across_restart => scenario_binding_across_restart,
}
