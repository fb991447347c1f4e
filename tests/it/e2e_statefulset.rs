//! statefulset-controller scenarios, against the sandbox always and a real kube-apiserver with
//! `KCM_E2E_KUBECONFIG` (`real_*`). On a real cluster edgekcm needs
//! `--use-service-account-credentials=true` in `KCM_E2E_KCM_ARGS`. Pods stay Pending there
//! (no scheduler or kubelet); the tests play kubelet by writing Ready through `pods/status`.
//! Unbound pods are deleted at once by the API server, so scale-down needs no kubelet.

use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::{
    Kind, CONTROLLERREVISIONS, EVENTS, PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS,
};
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) const LIMIT: Duration = Duration::from_secs(40);
pub(crate) const CONTROLLERS: &str = "--controllers=statefulset-controller";

pub(crate) fn new_ns(t: &Target, prefix: &str) -> Ns {
    Ns::with_cleanup(
        t,
        prefix,
        &[
            STATEFULSETS,
            PODS,
            PERSISTENTVOLUMECLAIMS,
            CONTROLLERREVISIONS,
        ],
    )
}

pub(crate) fn sts(name: &str, replicas: i64, policy: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": format!("{name}-svc"),
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

pub(crate) fn list(admin: &Client, kind: &Kind, ns: &str) -> Vec<Value> {
    admin
        .list(kind, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
}

pub(crate) fn get(admin: &Client, kind: &Kind, ns: &str, name: &str) -> Option<Value> {
    admin.get(kind, Some(ns), name).ok()
}

pub(crate) fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

pub(crate) fn names(items: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = items
        .iter()
        .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

pub(crate) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn wait_pods(admin: &Client, ns: &str, want: &[&str]) -> Vec<Value> {
    let want = strings(want);
    eventually(LIMIT, &format!("pods {want:?}"), || {
        let pods = list(admin, &PODS, ns);
        (names(&pods) == want).then_some(pods)
    })
}

/// Play kubelet: the pod runs and is Ready.
pub(crate) fn set_ready(admin: &Client, ns: &str, name: &str) {
    eventually(LIMIT, "pod status update", || {
        let mut p = get(admin, &PODS, ns, name)?;
        let since = "2024-01-01T00:00:00Z";
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": since},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
        ]);
        admin.update_subresource(&PODS, &p, "status").ok()
    });
}

pub(crate) fn wait_status(
    admin: &Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    eventually(LIMIT, what, || {
        let o = get(admin, &STATEFULSETS, ns, name)?;
        let st = &o["status"];
        (st["observedGeneration"] == o["metadata"]["generation"] && f(st)).then_some(o)
    })
}

pub(crate) fn update_spec(admin: &Client, ns: &str, name: &str, f: impl Fn(&mut Value)) {
    eventually(LIMIT, "update the StatefulSet", || {
        let mut o = get(admin, &STATEFULSETS, ns, name)?;
        f(&mut o);
        admin.update(&STATEFULSETS, &o).ok()
    });
}

pub(crate) fn messages(admin: &Client, ns: &str, reason: &str) -> Vec<String> {
    let mut v: Vec<String> = list(admin, &EVENTS, ns)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .filter(|e| e["source"]["component"] == "statefulset-controller")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

/// OrderedReady: one pod at a time, each with its claim, then status; scale down from the top.
fn scenario_ordered(t: &Target) {
    let _kcm = start_with(t, "sts-ordered", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let set = admin
        .create(&STATEFULSETS, Some(n), &sts("web", 3, "OrderedReady"))
        .expect("create");
    let pods = wait_pods(admin, n, &["web-0"]);
    let p = &pods[0];
    let labels = &p["metadata"]["labels"];
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "web-0");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "0");
    let rev = labels["controller-revision-hash"]
        .as_str()
        .expect("revision")
        .to_string();
    assert_eq!(p["spec"]["hostname"], "web-0");
    assert_eq!(p["spec"]["subdomain"], "web-svc");
    assert_eq!(
        p["metadata"]["ownerReferences"][0]["uid"],
        set["metadata"]["uid"]
    );
    let vols = p["spec"]["volumes"].as_array().expect("volumes");
    assert!(vols
        .iter()
        .any(|v| v["persistentVolumeClaim"]["claimName"] == "data-web-0"));
    let claim = get(admin, &PERSISTENTVOLUMECLAIMS, n, "data-web-0").expect("claim");
    assert_eq!(claim["metadata"]["labels"]["app"], "web");
    assert!(claim["metadata"]["ownerReferences"].is_null());
    // The revision: named after the set, labelled with its hash, controlled by the set.
    let r = get(admin, &CONTROLLERREVISIONS, n, &rev).expect("revision");
    assert_eq!(r["revision"], 1);
    assert_eq!(
        format!(
            "web-{}",
            r["metadata"]["labels"]["controller.kubernetes.io/hash"]
                .as_str()
                .unwrap_or("")
        ),
        rev
    );
    assert_eq!(r["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(r["data"]["spec"]["template"]["$patch"], "replace");
    // web-1 waits for web-0.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(names(&list(admin, &PODS, n)), strings(&["web-0"]));
    set_ready(admin, n, "web-0");
    wait_pods(admin, n, &["web-0", "web-1"]);
    set_ready(admin, n, "web-1");
    wait_pods(admin, n, &["web-0", "web-1", "web-2"]);
    set_ready(admin, n, "web-2");
    let st = wait_status(admin, n, "web", "3 ready", |s| {
        int(&s["replicas"]) == 3
            && int(&s["readyReplicas"]) == 3
            && int(&s["availableReplicas"]) == 3
    });
    let st = &st["status"];
    assert_eq!(st["currentRevision"], rev.as_str());
    assert_eq!(st["updateRevision"], rev.as_str());
    assert_eq!(int(&st["currentReplicas"]), 3);
    assert_eq!(int(&st["updatedReplicas"]), 3);
    assert_eq!(int(&st["collisionCount"]), 0);
    let created = eventually(LIMIT, "creation events", || {
        let m = messages(admin, n, "SuccessfulCreate");
        (m.len() == 6).then_some(m)
    });
    assert!(created.contains(&"Create Pod web-1 in StatefulSet web successful".to_string()));
    assert!(created
        .contains(&"Create Claim data-web-2 Pod web-2 in StatefulSet web success".to_string()));

    // Scale down to one: the highest ordinal goes first; claims stay.
    update_spec(admin, n, "web", |o| o["spec"]["replicas"] = json!(1));
    wait_pods(admin, n, &["web-0"]);
    wait_status(admin, n, "web", "1 replica", |s| int(&s["replicas"]) == 1);
    assert_eq!(
        names(&list(admin, &PERSISTENTVOLUMECLAIMS, n)),
        strings(&["data-web-0", "data-web-1", "data-web-2"])
    );
    let deleted = eventually(LIMIT, "deletion events", || {
        let m = messages(admin, n, "SuccessfulDelete");
        (m.len() == 2).then_some(m)
    });
    assert_eq!(
        deleted,
        strings(&[
            "Delete Pod web-1 in StatefulSet web successful",
            "Delete Pod web-2 in StatefulSet web successful"
        ])
    );
}

/// RollingUpdate from the top down, a partition holding the lower ordinals, OnDelete.
fn scenario_rolling(t: &Target) {
    let _kcm = start_with(t, "sts-rolling", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    admin
        .create(&STATEFULSETS, Some(n), &sts("db", 3, "Parallel"))
        .expect("create");
    let pods = wait_pods(admin, n, &["db-0", "db-1", "db-2"]);
    let old = pods[0]["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .expect("rev")
        .to_string();
    for p in ["db-0", "db-1", "db-2"] {
        set_ready(admin, n, p);
    }
    wait_status(admin, n, "db", "3 ready", |s| int(&s["readyReplicas"]) == 3);
    update_spec(admin, n, "db", |o| {
        o["spec"]["template"]["metadata"]["annotations"] = json!({"v": "2"});
        o["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}});
    });
    let new = wait_status(admin, n, "db", "an update revision", |s| {
        s["updateRevision"].as_str().is_some_and(|r| r != old)
    })["status"]["updateRevision"]
        .as_str()
        .expect("rev")
        .to_string();
    let rev_of = |name: &str| {
        get(admin, &PODS, n, name)
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .and_then(|p| {
                p["metadata"]["labels"]["controller-revision-hash"]
                    .as_str()
                    .map(str::to_string)
            })
    };
    eventually(LIMIT, "db-2 replaced", || {
        (rev_of("db-2")? == new).then_some(())
    });
    let p = get(admin, &PODS, n, "db-2").expect("db-2");
    assert_eq!(p["metadata"]["annotations"]["v"], "2");
    // db-1 waits until db-2 is ready.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(rev_of("db-1").as_deref(), Some(old.as_str()));
    set_ready(admin, n, "db-2");
    eventually(LIMIT, "db-1 replaced", || {
        (rev_of("db-1")? == new).then_some(())
    });
    set_ready(admin, n, "db-1");
    let st = wait_status(admin, n, "db", "2 updated", |s| {
        int(&s["updatedReplicas"]) == 2 && int(&s["readyReplicas"]) == 3
    });
    // The partition keeps db-0 on the old revision.
    assert_eq!(rev_of("db-0").as_deref(), Some(old.as_str()));
    assert_eq!(st["status"]["currentRevision"], old.as_str());
    assert_eq!(int(&st["status"]["currentReplicas"]), 1);
    let revs = list(admin, &CONTROLLERREVISIONS, n);
    assert_eq!(revs.len(), 2);
    // Partition 0: db-0 follows, then current catches up with update.
    update_spec(admin, n, "db", |o| {
        o["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(0)
    });
    eventually(LIMIT, "db-0 replaced", || {
        (rev_of("db-0")? == new).then_some(())
    });
    set_ready(admin, n, "db-0");
    wait_status(admin, n, "db", "rolled out", |s| {
        s["currentRevision"] == new.as_str() && int(&s["currentReplicas"]) == 3
    });
    // Back to the old template: the old revision is renumbered, not copied.
    update_spec(admin, n, "db", |o| {
        o["spec"]["template"]["metadata"]
            .as_object_mut()
            .map(|m| m.remove("annotations"));
        o["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    });
    wait_status(admin, n, "db", "rolled back revision", |s| {
        s["updateRevision"] == old.as_str()
    });
    let r = get(admin, &CONTROLLERREVISIONS, n, &old).expect("old revision");
    assert_eq!(r["revision"], 3);
    // OnDelete: nothing is replaced until a pod is deleted.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(rev_of("db-2").as_deref(), Some(new.as_str()));
    delete_pod_now(admin, n, "db-2").expect("delete db-2");
    eventually(LIMIT, "db-2 re-created on the old revision", || {
        (rev_of("db-2")? == old).then_some(())
    });
}

/// `rollingUpdate.maxUnavailable` (MaxUnavailableStatefulSet, on in v1.37): an OrderedReady
/// set of four with maxUnavailable 2 replaces its two highest pods at once, then the next two
/// once those are available; v1.28 replaced one at a time.
fn scenario_max_unavailable(t: &Target) {
    if !t.at_least(
        37,
        "maxUnavailable (MaxUnavailableStatefulSet, on by default since v1.37)",
    ) {
        return;
    }
    let _kcm = start_with(t, "sts-maxunavailable", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut s = sts("mu", 4, "OrderedReady");
    s["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}});
    admin.create(&STATEFULSETS, Some(n), &s).expect("create");
    let all = ["mu-0", "mu-1", "mu-2", "mu-3"];
    for (i, p) in all.iter().enumerate() {
        wait_pods(admin, n, &all[..=i]);
        set_ready(admin, n, p);
    }
    let old = wait_status(admin, n, "mu", "4 ready", |s| {
        int(&s["readyReplicas"]) == 4 && int(&s["availableReplicas"]) == 4
    })["status"]["updateRevision"]
        .as_str()
        .expect("rev")
        .to_string();
    update_spec(admin, n, "mu", |o| {
        o["spec"]["template"]["metadata"]["annotations"] = json!({"v": "2"});
    });
    let new = wait_status(admin, n, "mu", "an update revision", |s| {
        s["updateRevision"].as_str().is_some_and(|r| r != old)
    })["status"]["updateRevision"]
        .as_str()
        .expect("rev")
        .to_string();
    let rev_of = |name: &str| {
        get(admin, &PODS, n, name)
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .and_then(|p| {
                p["metadata"]["labels"]["controller-revision-hash"]
                    .as_str()
                    .map(str::to_string)
            })
    };
    // mu-3 and mu-2 were deleted together: mu-2 comes back on the new revision while mu-3,
    // gone too, waits for it (OrderedReady); one at a time, mu-2 would stay old until a new
    // mu-3 was Ready.
    eventually(LIMIT, "mu-2 replaced", || {
        (rev_of("mu-2")? == new).then_some(())
    });
    assert_eq!(rev_of("mu-3"), None);
    // Two unavailable: mu-1 and mu-0 are left alone.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(rev_of("mu-1").as_deref(), Some(old.as_str()));
    assert_eq!(rev_of("mu-0").as_deref(), Some(old.as_str()));
    set_ready(admin, n, "mu-2");
    eventually(LIMIT, "mu-3 made on the new revision", || {
        (rev_of("mu-3")? == new).then_some(())
    });
    set_ready(admin, n, "mu-3");
    // Both available again: the last two go together.
    eventually(LIMIT, "mu-0 replaced", || {
        (rev_of("mu-0")? == new).then_some(())
    });
    assert_eq!(rev_of("mu-1"), None);
    set_ready(admin, n, "mu-0");
    eventually(LIMIT, "mu-1 made", || {
        (rev_of("mu-1")? == new).then_some(())
    });
    set_ready(admin, n, "mu-1");
    wait_status(admin, n, "mu", "rolled out", |s| {
        s["currentRevision"] == new.as_str()
            && int(&s["currentReplicas"]) == 4
            && int(&s["readyReplicas"]) == 4
    });
}

/// persistentVolumeClaimRetentionPolicy: claims carry the references the garbage collector
/// needs (the set's while in range under whenDeleted=Delete, the pod's once scaled away
/// under whenScaled=Delete).
fn scenario_retention(t: &Target) {
    let _kcm = start_with(t, "sts-retention", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut o = sts("kv", 2, "Parallel");
    o["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Delete"});
    let set = admin.create(&STATEFULSETS, Some(n), &o).expect("create");
    wait_pods(admin, n, &["kv-0", "kv-1"]);
    let c = eventually(LIMIT, "claim with the set's reference", || {
        get(admin, &PERSISTENTVOLUMECLAIMS, n, "data-kv-1")
            .filter(|c| c["metadata"]["ownerReferences"][0]["uid"] == set["metadata"]["uid"])
    });
    assert_eq!(c["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    // A controller reference since v1.32 (v1.28 wrote a plain one).
    assert_eq!(c["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        c["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        true
    );
    set_ready(admin, n, "kv-0");
    set_ready(admin, n, "kv-1");
    let pod1 = get(admin, &PODS, n, "kv-1").expect("kv-1");
    update_spec(admin, n, "kv", |o| o["spec"]["replicas"] = json!(1));
    let c = eventually(LIMIT, "claim moved to the pod", || {
        get(admin, &PERSISTENTVOLUMECLAIMS, n, "data-kv-1").filter(|c| {
            c["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.len() == 1 && r[0]["kind"] == "Pod")
        })
    });
    assert_eq!(
        c["metadata"]["ownerReferences"][0]["uid"],
        pod1["metadata"]["uid"]
    );
    wait_pods(admin, n, &["kv-0"]);
}

/// A claim that was there before its pod gets the retention policy's controller reference
/// as soon as the pod is made, although the OrderedReady set waits for the pod (v1.37 fixes
/// the claims of a new and of a Pending pod).
fn scenario_retention_existing_claim(t: &Target) {
    let _kcm = start_with(t, "sts-retention-existing", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    admin
        .create(
            &PERSISTENTVOLUMECLAIMS,
            Some(n),
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data-ex-0", "labels": {"app": "ex"}},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .expect("claim");
    let mut o = sts("ex", 1, "OrderedReady");
    o["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Retain"});
    let set = admin.create(&STATEFULSETS, Some(n), &o).expect("create");
    wait_pods(admin, n, &["ex-0"]);
    let c = eventually(LIMIT, "the set's reference on the old claim", || {
        get(admin, &PERSISTENTVOLUMECLAIMS, n, "data-ex-0")
            .filter(|c| c["metadata"]["ownerReferences"][0]["uid"] == set["metadata"]["uid"])
    });
    assert_eq!(c["metadata"]["ownerReferences"][0]["controller"], true);
    // The pod is still Pending: nobody made it Ready.
    let p = get(admin, &PODS, n, "ex-0").expect("ex-0");
    assert_ne!(p["status"]["phase"], "Running");
}

/// The API server goes away in the middle of a scale-up (sandbox: it stops listening and
/// its watch history expires, so the watches come back with 410 Gone; real: it is
/// restarted): afterwards every pod and claim exists exactly once and status is right.
fn scenario_restart_mid_scale(t: &Target) {
    let mut kcm = start_with(t, "sts-restart", CONTROLLERS);
    let ns = new_ns(t, "e2e-sts");
    let (admin, n) = (&ns.admin, ns.name.as_str());
    for i in 0..4 {
        admin
            .create(
                &STATEFULSETS,
                Some(n),
                &sts(&format!("s{i}"), 2, "Parallel"),
            )
            .expect("create");
    }
    eventually(LIMIT, "8 pods", || {
        (names(&list(admin, &PODS, n)).len() == 8).then_some(())
    });
    for i in 0..4 {
        update_spec(admin, n, &format!("s{i}"), |o| {
            o["spec"]["replicas"] = json!(6)
        });
    }
    match t.sandbox() {
        Some(sb) => {
            sb.stop_listening();
            std::thread::sleep(Duration::from_millis(700));
            sb.faults().expire_history();
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
    let admin = t.admin();
    let limit = Duration::from_secs(120);
    eventually(limit, "24 pods", || {
        (names(&list(&admin, &PODS, n)).len() == 24).then_some(())
    });
    let mut want_pods = Vec::new();
    let mut want_claims = Vec::new();
    for i in 0..4 {
        for o in 0..6 {
            want_pods.push(format!("s{i}-{o}"));
            want_claims.push(format!("data-s{i}-{o}"));
        }
    }
    want_pods.sort();
    want_claims.sort();
    assert_eq!(names(&list(&admin, &PODS, n)), want_pods);
    eventually(limit, "24 claims", || {
        (names(&list(&admin, &PERSISTENTVOLUMECLAIMS, n)) == want_claims).then_some(())
    });
    for p in list(&admin, &PODS, n) {
        set_ready(&admin, n, p["metadata"]["name"].as_str().unwrap_or(""));
    }
    for i in 0..4 {
        eventually(limit, "status after the restart", || {
            let o = get(&admin, &STATEFULSETS, n, &format!("s{i}"))?;
            let s = &o["status"];
            (int(&s["replicas"]) == 6
                && int(&s["readyReplicas"]) == 6
                && int(&s["updatedReplicas"]) == 6)
                .then_some(())
        });
    }
    // One revision per set, nothing more.
    assert_eq!(list(&admin, &CONTROLLERREVISIONS, n).len(), 4);
    assert!(kcm.exited().is_none(), "edgekcm exited");
}

scenarios! {
    statefulset_ordered => scenario_ordered,
    statefulset_rolling => scenario_rolling,
    statefulset_max_unavailable => scenario_max_unavailable,
    statefulset_retention => scenario_retention,
    statefulset_retention_existing_claim => scenario_retention_existing_claim,
    statefulset_restart_mid_scale => scenario_restart_mid_scale,
}
