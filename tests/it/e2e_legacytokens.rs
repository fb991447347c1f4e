//! legacy-serviceaccount-token-cleaner-controller scenarios, against the sandbox always and a
//! real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with
//! `--use-service-account-credentials`, writing as `legacy-service-account-token-cleaner`).
//! The clean-up period is 1 s so that Secrets made a moment before count as unused for a
//! period; the tracking ConfigMap's date is set by the test (and put back afterwards).

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::{CONFIGMAPS, NAMESPACES, PODS, SECRETS, SERVICEACCOUNTS};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const LAST_USED: &str = "kubernetes.io/legacy-token-last-used";
const INVALID_SINCE: &str = "kubernetes.io/legacy-token-invalid-since";
const TRACKING: &str = "kube-apiserver-legacy-service-account-token-tracking";

fn today() -> String {
    edgekcm::compat::timefmt::rfc3339(SystemTime::now())[..10].to_string()
}

/// Sets the tracking ConfigMap's `since` (made when the server has none, as kube-apiserver
/// makes it); puts the old value back when dropped.
struct Tracking {
    admin: Client,
    before: Option<Value>,
}

impl Tracking {
    fn since(admin: &Client, date: &str) -> Tracking {
        let ns =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}});
        let _ = admin.create(&NAMESPACES, None, &ns);
        let before = admin.get(&CONFIGMAPS, Some("kube-system"), TRACKING).ok();
        let mut cm = before.clone().unwrap_or_else(|| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": TRACKING, "namespace": "kube-system"}})
        });
        cm["data"] = json!({"since": date});
        if before.is_some() {
            admin
                .update(&CONFIGMAPS, &cm)
                .expect("update tracking ConfigMap");
        } else {
            admin
                .create(&CONFIGMAPS, Some("kube-system"), &cm)
                .expect("create tracking ConfigMap");
        }
        Tracking {
            admin: admin.clone(),
            before,
        }
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        let Ok(mut cm) = self.admin.get(&CONFIGMAPS, Some("kube-system"), TRACKING) else {
            return;
        };
        match &self.before {
            Some(b) => {
                cm["data"] = b["data"].clone();
                let _ = self.admin.update(&CONFIGMAPS, &cm);
            }
            None => {
                let _ = self.admin.delete(
                    &CONFIGMAPS,
                    Some("kube-system"),
                    TRACKING,
                    &Default::default(),
                );
            }
        }
    }
}

fn token(admin: &Client, ns: &str, name: &str, sa: &str, labels: Value) {
    let s = json!({"apiVersion": "v1", "kind": "Secret", "type": TOKEN_TYPE,
        "metadata": {"name": name, "labels": labels,
            "annotations": {"kubernetes.io/service-account.name": sa}}});
    admin
        .create(&SECRETS, Some(ns), &s)
        .expect("create token Secret");
}

fn labels_of(admin: &Client, ns: &str, name: &str) -> Option<Value> {
    admin
        .get(&SECRETS, Some(ns), name)
        .ok()
        .map(|s| s["metadata"]["labels"].clone())
}

/// Legacy tokens in every state, made before edgekcm starts (so they are older than the
/// 1 s period).
fn tokens(ns: &Ns) {
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let listed = [
        "unused",
        "used-long-ago",
        "used-today",
        "invalid-long-ago",
        "invalid-today",
        "mounted",
    ];
    let refs: Vec<Value> = listed.iter().map(|s| json!({"name": s})).collect();
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "app"}, "secrets": refs});
    admin
        .create(&SERVICEACCOUNTS, Some(n), &sa)
        .expect("ServiceAccount");
    token(admin, n, "unused", "app", json!({}));
    token(
        admin,
        n,
        "used-long-ago",
        "app",
        json!({LAST_USED: "2020-01-01"}),
    );
    token(admin, n, "used-today", "app", json!({LAST_USED: today()}));
    token(
        admin,
        n,
        "invalid-long-ago",
        "app",
        json!({INVALID_SINCE: "2020-01-02"}),
    );
    token(
        admin,
        n,
        "invalid-today",
        "app",
        json!({INVALID_SINCE: today()}),
    );
    token(admin, n, "mounted", "app", json!({}));
    // Its ServiceAccount does not list it.
    token(admin, n, "unlisted", "app", json!({}));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"serviceAccountName": "app", "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
            "volumes": [{"name": "t", "secret": {"secretName": "mounted"}}]}});
    admin.create(&PODS, Some(n), &pod).expect("pod");
    std::thread::sleep(Duration::from_secs(2));
}

fn start(t: &Target, tag: &str) -> Kcm {
    Kcm::start(
        t,
        tag,
        &[
            "--controllers=legacy-serviceaccount-token-cleaner-controller",
            "--legacy-service-account-token-clean-up-period=1s",
        ],
    )
}

/// Tracked for long enough: unused tokens are labelled invalid since today, a token invalid
/// for longer than the period is deleted, and tokens used or labelled within the period,
/// mounted by a pod or not listed by their ServiceAccount stay as they are.
fn scenario_labels_then_deletes(t: &Target) {
    let admin = t.admin();
    let _tracking = Tracking::since(&admin, "2020-01-01");
    let ns = Ns::with_cleanup(t, "e2e-legacy", &[PODS, SECRETS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    tokens(&ns);
    let kcm = start(t, "legacy-clean");
    eventually(Duration::from_secs(20), "invalid-long-ago deleted", || {
        matches!(admin.get(&SECRETS, Some(n), "invalid-long-ago"), Err(e) if e.is_not_found())
            .then_some(())
    });
    for name in ["unused", "used-long-ago"] {
        let l = eventually(Duration::from_secs(10), name, || {
            let l = labels_of(admin, n, name)?;
            l[INVALID_SINCE].is_string().then_some(l)
        });
        assert_eq!(l[INVALID_SINCE], today(), "{name}");
    }
    assert_eq!(
        labels_of(admin, n, "used-long-ago").unwrap()[LAST_USED],
        "2020-01-01",
        "the last-used label stays"
    );
    std::thread::sleep(Duration::from_secs(2));
    for name in ["used-today", "mounted", "unlisted"] {
        let l = labels_of(admin, n, name).expect(name);
        assert!(l[INVALID_SINCE].is_null(), "{name}: {l}");
    }
    assert_eq!(
        labels_of(admin, n, "invalid-today").expect("invalid-today")[INVALID_SINCE],
        today()
    );
    let log = kcm.log_text();
    assert!(
        log.contains("Mark the auto-generated service account token as invalid"),
        "{log}"
    );
    assert!(
        log.contains("Delete auto-generated service account token"),
        "{log}"
    );
}

/// The tracking ConfigMap says last-used labels are recorded since today: nothing is
/// labelled or deleted, whatever the period.
fn scenario_waits_for_tracking(t: &Target) {
    let admin = t.admin();
    let _tracking = Tracking::since(&admin, &today());
    let ns = Ns::with_cleanup(t, "e2e-legacy-wait", &[PODS, SECRETS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    tokens(&ns);
    let kcm = start(t, "legacy-wait");
    eventually(Duration::from_secs(20), "controller started", || {
        kcm.log_text()
            .contains("Starting legacy service account token cleaner controller")
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        labels_of(admin, n, "invalid-long-ago").is_some(),
        "not deleted"
    );
    for name in ["unused", "used-long-ago"] {
        let l = labels_of(admin, n, name).expect(name);
        assert!(l[INVALID_SINCE].is_null(), "{name}: {l}");
    }
}

scenarios! {
    labels_then_deletes => scenario_labels_then_deletes,
    waits_for_tracking => scenario_waits_for_tracking,
}
