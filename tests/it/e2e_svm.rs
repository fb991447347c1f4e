//! storage-version-migrator-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`; `storagemigration.k8s.io/v1` is
//! served by default from v1.37). The garbage collector runs beside it: the migrator reads
//! its monitors, as upstream's does.

use crate::common::*;
use crate::e2e_gc::{create_crd, widget};
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CONFIGMAPS, CRDS, STORAGEVERSIONMIGRATIONS};
use serde_json::{json, Value};
use std::time::Duration;

const FLAGS: &[&str] = &["--controllers=garbage-collector-controller,svm"];

fn migration(admin: &Client, name: &str, group: &str, resource: &str) {
    let o = json!({"apiVersion": "storagemigration.k8s.io/v1",
        "kind": "StorageVersionMigration", "metadata": {"name": name},
        "spec": {"resource": {"group": group, "resource": resource}}});
    admin
        .create(&STORAGEVERSIONMIGRATIONS, None, &o)
        .expect("create StorageVersionMigration");
}

fn condition(o: &Value, type_: &str) -> Option<Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits until the migration has its resource version, then changes an object of the
/// resource (`nudge`): the garbage collector's monitor passes that resource version with the
/// change's event instead of the next watch bookmark (up to a minute or more later).
fn recorded_then(admin: &Client, name: &str, nudge: impl Fn()) {
    eventually(Duration::from_secs(30), "resource version recorded", || {
        let o = admin.get(&STORAGEVERSIONMIGRATIONS, None, name).ok()?;
        o["status"]["resourceVersion"].is_string().then_some(())
    });
    nudge();
}

/// Waits until the migration's Running condition is False (the runner cleaned it up after
/// it ended) and returns it.
fn finished(admin: &Client, name: &str) -> Value {
    eventually(Duration::from_secs(60), "migration finished", || {
        let o = admin.get(&STORAGEVERSIONMIGRATIONS, None, name).ok()?;
        (condition(&o, "Running")?["status"] == "False").then_some(o)
    })
}

struct Gone {
    admin: Client,
    migrations: Vec<String>,
    crd: Option<String>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        for m in &self.migrations {
            let _ = self
                .admin
                .delete(&STORAGEVERSIONMIGRATIONS, None, m, &Default::default());
        }
        if let Some(c) = &self.crd {
            let _ = self.admin.delete(&CRDS, None, c, &Default::default());
        }
    }
}

/// ConfigMaps, then a custom resource: each migration gets its resource version, runs,
/// succeeds with the count of objects verified, and is cleaned up; the CRD's
/// `StorageMigrating` condition ends False and its stored versions are the storage version.
fn scenario_migrates_builtin_and_custom(t: &Target) {
    if !t.at_least(
        37,
        "storagemigration.k8s.io/v1 (StorageVersionMigrator GA in v1.37)",
    ) {
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-svm", &[CONFIGMAPS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let (cm, cr) = (unique("svm-cm"), unique("svm-cr"));
    let group = format!("{}.example.com", unique("svm").replace('-', ""));
    let _gone = Gone {
        admin: admin.clone(),
        migrations: vec![cm.clone(), cr.clone()],
        crd: Some(format!("widgets.{group}")),
    };
    for i in 0..3 {
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("m{i}")}, "data": {"k": "v"}});
        admin.create(&CONFIGMAPS, Some(n), &o).expect("configmap");
    }
    let kind = create_crd(admin, &group);
    widget(admin, &kind, n, "w1", vec![]);
    let _kcm = Kcm::start(t, "svm", FLAGS);
    migration(admin, &cm, "", "configmaps");
    recorded_then(admin, &cm, || {
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "nudge"}, "data": {"k": "v"}});
        admin.create(&CONFIGMAPS, Some(n), &o).expect("configmap");
    });
    let o = finished(admin, &cm);
    let ok = condition(&o, "Succeeded").expect("Succeeded");
    assert_eq!(ok["status"], "True", "{o}");
    assert_eq!(ok["reason"], "StorageVersionMigrationSucceeded");
    assert_eq!(ok["message"], "Migration completed");
    assert!(o["status"]["resourceVersion"].is_string(), "{o}");
    let running = condition(&o, "Running").expect("Running");
    assert_eq!(running["reason"], "MigrationCompleted");
    assert_eq!(running["message"], "Migration completed");
    assert!(condition(&o, "Failed").is_none(), "{o}");

    migration(admin, &cr, &group, "widgets");
    recorded_then(admin, &cr, || {
        widget(admin, &kind, n, "w2", vec![]);
    });
    let o = finished(admin, &cr);
    assert_eq!(
        condition(&o, "Succeeded").expect("Succeeded")["status"],
        "True"
    );
    let crd = admin
        .get(&CRDS, None, &format!("widgets.{group}"))
        .expect("CRD");
    let c = crd["status"]["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == "StorageMigrating"))
        .cloned()
        .unwrap_or_else(|| panic!("no StorageMigrating condition: {crd}"));
    assert_eq!(c["status"], "False", "{c}");
    assert_eq!(c["reason"], "MigrationSucceeded");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
}

/// A resource nobody serves: after the minute upstream waits for discovery, Failed.
fn scenario_unknown_resource_fails(t: &Target) {
    if !t.at_least(
        37,
        "storagemigration.k8s.io/v1 (StorageVersionMigrator GA in v1.37)",
    ) {
        return;
    }
    let admin = t.admin();
    let name = unique("svm-none");
    let _gone = Gone {
        admin: admin.clone(),
        migrations: vec![name.clone()],
        crd: None,
    };
    let _kcm = Kcm::start(t, "svm-none", FLAGS);
    migration(&admin, &name, "nothing.example.com", "ghosts");
    let o = eventually(Duration::from_secs(120), "migration failed", || {
        let o = admin.get(&STORAGEVERSIONMIGRATIONS, None, &name).ok()?;
        (condition(&o, "Failed")?["status"] == "True").then_some(o)
    });
    let f = condition(&o, "Failed").expect("Failed");
    assert_eq!(f["reason"], "StorageVersionMigrationFailed");
    assert_eq!(f["message"], "resource does not exist in discovery");
}

crate::scenarios! {
    svm_migrates_builtin_and_custom => scenario_migrates_builtin_and_custom,
    svm_unknown_resource_fails => scenario_unknown_resource_fails,
}
