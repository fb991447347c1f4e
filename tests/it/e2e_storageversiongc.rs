//! storageversion-garbage-collector-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`; the server needs
//! `--feature-gates=StorageVersionAPI=true` and
//! `--runtime-config=internal.apiserver.k8s.io/v1alpha1=true`, and edgekcm the same gate;
//! edgekcm with `--use-service-account-credentials`, writing as
//! `storage-version-garbage-collector`). The test's identity Leases are its own, renewed for
//! an hour so that kube-apiserver's own Lease collector leaves them.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{LEASES, STORAGEVERSIONS};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

fn identity_lease(admin: &Client, name: &str) {
    let now = edgekcm::compat::timefmt::rfc3339_micro(SystemTime::now());
    let l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system",
            "labels": {"apiserver.kubernetes.io/identity": "kube-apiserver"}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 3600,
            "acquireTime": now, "renewTime": now}});
    admin
        .create(&LEASES, Some("kube-system"), &l)
        .expect("create Lease");
}

/// A StorageVersion with an entry (encoding `apps/v1`) for each server.
fn storage_version(admin: &Client, name: &str, servers: &[&str]) {
    let o = json!({"apiVersion": "internal.apiserver.k8s.io/v1alpha1",
        "kind": "StorageVersion", "metadata": {"name": name}, "spec": {}});
    let mut o = admin
        .create(&STORAGEVERSIONS, None, &o)
        .expect("create StorageVersion");
    let entries: Vec<Value> = servers
        .iter()
        .map(|s| {
            json!({"apiServerID": s, "encodingVersion": "example.com/v1",
            "decodableVersions": ["example.com/v1"], "servedVersions": ["example.com/v1"]})
        })
        .collect();
    o["status"] = json!({"storageVersions": entries, "commonEncodingVersion": "example.com/v1",
        "conditions": [{"type": "AllEncodingVersionsEqual", "status": "True",
            "reason": "CommonEncodingVersionSet", "message": "Common encoding version set",
            "lastTransitionTime": edgekcm::compat::timefmt::rfc3339(SystemTime::now())}]});
    admin
        .update_status(&STORAGEVERSIONS, &o)
        .expect("StorageVersion status");
}

fn ids(admin: &Client, name: &str) -> Option<Vec<String>> {
    let o = admin.get(&STORAGEVERSIONS, None, name).ok()?;
    Some(
        o["status"]["storageVersions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["apiServerID"].as_str().map(str::to_string))
            .collect(),
    )
}

struct Gone(Client, Vec<String>, Vec<String>);

impl Drop for Gone {
    fn drop(&mut self) {
        for l in &self.1 {
            let _ = self
                .0
                .delete(&LEASES, Some("kube-system"), l, &Default::default());
        }
        for s in &self.2 {
            let _ = self
                .0
                .delete(&STORAGEVERSIONS, None, s, &Default::default());
        }
    }
}

/// Entries of servers without an identity Lease go (all of them: the StorageVersion goes);
/// when an identity Lease is deleted, its server's entries go.
///
/// Against a kube-apiserver that does not serve StorageVersions (its gate off, the default),
/// the controller stays off with its one line instead.
fn scenario_removes_entries_of_gone_servers(t: &Target) {
    let admin = t.admin();
    if admin
        .get_path("/apis/internal.apiserver.k8s.io/v1alpha1")
        .is_err_and(|e| e.is_not_found())
    {
        let mut kcm = Kcm::start(
            t,
            "svgc-off",
            &[
                "--controllers=storageversion-garbage-collector-controller",
                "--feature-gates=StorageVersionAPI=true",
            ],
        );
        kcm.wait_for_line(
            "the line saying it stays off",
            "does not serve internal.apiserver.k8s.io/v1alpha1 storageversions",
        );
        return;
    }
    let (live, doomed) = (unique("apiserver-live"), unique("apiserver-doomed"));
    let tag = unique("e2e").replace('-', "");
    let (mixed, orphan, later) = (
        format!("{tag}.example.com.mixed"),
        format!("{tag}.example.com.orphans"),
        format!("{tag}.example.com.later"),
    );
    let _gone = Gone(
        admin.clone(),
        vec![live.clone(), doomed.clone()],
        vec![mixed.clone(), orphan.clone(), later.clone()],
    );
    identity_lease(&admin, &live);
    identity_lease(&admin, &doomed);
    let _kcm = Kcm::start(
        t,
        "svgc",
        &[
            "--controllers=storageversion-garbage-collector-controller",
            "--feature-gates=StorageVersionAPI=true",
        ],
    );
    storage_version(&admin, &mixed, &[&live, "apiserver-nowhere"]);
    storage_version(&admin, &orphan, &["apiserver-nowhere"]);
    storage_version(&admin, &later, &[&live, &doomed]);
    eventually(
        Duration::from_secs(20),
        "the unknown server's entry removed",
        || (ids(&admin, &mixed)? == [live.clone()]).then_some(()),
    );
    let m = admin.get(&STORAGEVERSIONS, None, &mixed).expect("mixed");
    assert_eq!(m["status"]["commonEncodingVersion"], "example.com/v1");
    let c = &m["status"]["conditions"][0];
    assert_eq!(c["reason"], "CommonEncodingVersionSet", "{m}");
    eventually(
        Duration::from_secs(20),
        "the StorageVersion with no server deleted",
        || ids(&admin, &orphan).is_none().then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        ids(&admin, &later).expect("later"),
        [live.clone(), doomed.clone()]
    );
    admin
        .delete(&LEASES, Some("kube-system"), &doomed, &Default::default())
        .expect("delete Lease");
    eventually(
        Duration::from_secs(20),
        "the deleted server's entry removed",
        || (ids(&admin, &later)? == [live.clone()]).then_some(()),
    );
}

/// Without its StorageVersionAPI gate (off by default) it is not started, even when named.
#[test]
fn not_started_without_its_gate() {
    let t = sandbox();
    let mut kcm = Kcm::start(
        &t,
        "svgc-gate",
        &["--controllers=storageversion-garbage-collector-controller,serviceaccount-controller"],
    );
    eventually(Duration::from_secs(20), "caches synced", || {
        assert!(kcm.exited().is_none(), "exited:\n{}", kcm.log_text());
        kcm.log_text().contains("caches synced").then_some(())
    });
    let log = kcm.log_text();
    assert!(log.contains("starting serviceaccount-controller"), "{log}");
    assert!(
        !log.contains("starting storageversion-garbage-collector-controller"),
        "{log}"
    );
}

scenarios! {
    removes_entries_of_gone_servers => scenario_removes_entries_of_gone_servers,
}
