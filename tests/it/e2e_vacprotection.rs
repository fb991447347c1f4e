//! volumeattributesclass-protection-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with
//! `--use-service-account-credentials`, writing as
//! `volumeattributesclass-protection-controller`). The claim and volume protection
//! controllers run beside it, so that claims and volumes (which kube-apiserver's admission
//! gives their own finalizers) can go.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, VOLUMEATTRIBUTESCLASSES};
use serde_json::{json, Value};
use std::time::Duration;

const FINALIZER: &str = "kubernetes.io/vac-protection";

fn class(admin: &Client, name: &str) {
    let c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": name}, "driverName": "csi.example.com",
        "parameters": {"iops": "3000"}});
    admin
        .create(&VOLUMEATTRIBUTESCLASSES, None, &c)
        .expect("create VolumeAttributesClass");
}

fn get_class(admin: &Client, name: &str) -> Option<Value> {
    admin.get(&VOLUMEATTRIBUTESCLASSES, None, name).ok()
}

fn finalizers(o: &Value) -> Vec<String> {
    o["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

fn claim(admin: &Client, ns: &str, name: &str, class: Option<&str>) {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(v) = class {
        c["spec"]["volumeAttributesClassName"] = json!(v);
    }
    admin
        .create(&PERSISTENTVOLUMECLAIMS, Some(ns), &c)
        .expect("create claim");
}

fn volume(admin: &Client, name: &str, class: &str) {
    let v = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "volumeAttributesClassName": class,
            "csi": {"driver": "csi.example.com", "volumeHandle": name}}});
    admin
        .create(&PERSISTENTVOLUMES, None, &v)
        .expect("create volume");
}

/// Deleted objects in the tests' way are removed even when a step fails.
struct Gone {
    admin: Client,
    classes: Vec<String>,
    volumes: Vec<String>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        for v in &self.volumes {
            let _ = self
                .admin
                .delete(&PERSISTENTVOLUMES, None, v, &Default::default());
        }
        for c in &self.classes {
            if let Some(mut o) = get_class(&self.admin, c) {
                o["metadata"]["finalizers"] = json!([]);
                let _ = self.admin.update(&VOLUMEATTRIBUTESCLASSES, &o);
            }
            let _ = self
                .admin
                .delete(&VOLUMEATTRIBUTESCLASSES, None, c, &Default::default());
        }
    }
}

/// A class gets the finalizer; deleted while a volume and a claim name it, it stays until
/// the last of them is gone, then goes.
fn scenario_class_kept_while_used(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-vac", &[PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let (gold, pv) = (unique("gold"), unique("vac-pv"));
    let _gone = Gone {
        admin: admin.clone(),
        classes: vec![gold.clone()],
        volumes: vec![pv.clone()],
    };
    let _kcm = Kcm::start(
        t,
        "vac",
        &["--controllers=volumeattributesclass-protection-controller,pvc-protection,pv-protection"],
    );
    class(admin, &gold);
    eventually(Duration::from_secs(15), "finalizer added", || {
        finalizers(&get_class(admin, &gold)?)
            .contains(&FINALIZER.to_string())
            .then_some(())
    });
    volume(admin, &pv, &gold);
    claim(admin, n, "spec", Some(&gold));
    admin
        .delete(&VOLUMEATTRIBUTESCLASSES, None, &gold, &Default::default())
        .expect("delete class");
    std::thread::sleep(Duration::from_secs(3));
    let c = get_class(admin, &gold).expect("kept while used");
    assert!(c["metadata"]["deletionTimestamp"].is_string(), "{c}");
    assert_eq!(finalizers(&c), [FINALIZER]);
    admin
        .delete(&PERSISTENTVOLUMES, None, &pv, &Default::default())
        .expect("delete volume");
    eventually(Duration::from_secs(15), "volume gone", || {
        admin
            .get(&PERSISTENTVOLUMES, None, &pv)
            .is_err()
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        get_class(admin, &gold).is_some(),
        "the claim still names it"
    );
    admin
        .delete(
            &PERSISTENTVOLUMECLAIMS,
            Some(n),
            "spec",
            &Default::default(),
        )
        .expect("delete claim");
    eventually(Duration::from_secs(15), "class gone", || {
        get_class(admin, &gold).is_none().then_some(())
    });
}

/// A claim that moves to another class frees the first one, which then goes; a class no one
/// names is deleted at once.
fn scenario_class_freed_by_a_move(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-vac-move", &[PERSISTENTVOLUMECLAIMS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let (old, new, idle) = (unique("old"), unique("new"), unique("idle"));
    let _gone = Gone {
        admin: admin.clone(),
        classes: vec![old.clone(), new.clone(), idle.clone()],
        volumes: vec![],
    };
    let _kcm = Kcm::start(
        t,
        "vac-move",
        &["--controllers=volumeattributesclass-protection-controller,pvc-protection"],
    );
    for c in [&old, &new, &idle] {
        class(admin, c);
    }
    for c in [&old, &new, &idle] {
        eventually(Duration::from_secs(15), "finalizers", || {
            finalizers(&get_class(admin, c)?)
                .contains(&FINALIZER.to_string())
                .then_some(())
        });
    }
    claim(admin, n, "mover", Some(&old));
    admin
        .delete(&VOLUMEATTRIBUTESCLASSES, None, &idle, &Default::default())
        .expect("delete idle");
    eventually(Duration::from_secs(15), "idle gone", || {
        get_class(admin, &idle).is_none().then_some(())
    });
    admin
        .delete(&VOLUMEATTRIBUTESCLASSES, None, &old, &Default::default())
        .expect("delete old");
    std::thread::sleep(Duration::from_secs(2));
    assert!(get_class(admin, &old).is_some(), "named by the claim");
    // Only a bound claim may change its class: the status a binder would write.
    let mut c = admin
        .get(&PERSISTENTVOLUMECLAIMS, Some(n), "mover")
        .expect("claim");
    c["status"]["phase"] = json!("Bound");
    let mut c = admin
        .update_subresource(&PERSISTENTVOLUMECLAIMS, &c, "status")
        .expect("claim bound");
    c["spec"]["volumeAttributesClassName"] = json!(new);
    admin
        .update(&PERSISTENTVOLUMECLAIMS, &c)
        .expect("move the claim");
    eventually(Duration::from_secs(15), "old gone", || {
        get_class(admin, &old).is_none().then_some(())
    });
    let n_class = get_class(admin, &new).expect("new stays");
    assert!(n_class["metadata"]["deletionTimestamp"].is_null());
}

scenarios! {
    class_kept_while_used => scenario_class_kept_while_used,
    class_freed_by_a_move => scenario_class_freed_by_a_move,
}
