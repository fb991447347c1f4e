//! namespace-controller scenarios: a terminating namespace is emptied (Deployments,
//! ReplicaSets, ConfigMaps, Secrets, a custom resource) and removed; content held by a
//! finalizer is reported in the namespace's conditions until it goes. Run against the sandbox
//! always and against a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`).

use crate::common::*;
use edgekcm::api::client::{Client, PatchType};
use edgekcm::api::resources::{
    discovered, Kind, CONFIGMAPS, CRDS, DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS, SECRETS,
    SERVICEACCOUNTS,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);
const CONTROLLERS: &str = "--controllers=garbage-collector-controller,namespace-controller";

fn gone_ns(c: &Client, ns: &str) -> Option<()> {
    match c.get(&NAMESPACES, None, ns) {
        Err(e) if e.is_not_found() => Some(()),
        _ => None,
    }
}

fn create_crd(c: &Client, group: &str) -> Kind {
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    c.create(&CRDS, None, &crd).expect("create CRD");
    eventually(LIMIT, "CRD served", || {
        c.get_path(&format!("/apis/{group}/v1")).ok()
    });
    discovered(group, "v1", "Gadget", "gadgets", true)
}

fn fill(c: &Client, ns: &str, gadgets: &Kind) {
    for i in 0..3 {
        c.create(
            &CONFIGMAPS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")},
                    "data": {"k": "v"}}),
        )
        .expect("configmap");
    }
    for i in 0..2 {
        c.create(
            &SECRETS,
            Some(ns),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s-{i}")},
                    "stringData": {"k": "v"}}),
        )
        .expect("secret");
    }
    for i in 0..2 {
        let name = format!("web-{i}");
        let d = c
            .create(
                &DEPLOYMENTS,
                Some(ns),
                &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}}}),
            )
            .expect("deployment");
        c.create(
            &REPLICASETS,
            Some(ns),
            &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("{name}-1"), "ownerReferences": [{"apiVersion": "apps/v1",
                    "kind": "Deployment", "name": name, "uid": d["metadata"]["uid"],
                    "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}}}),
        )
        .expect("replicaset");
    }
    let body = json!({"apiVersion": gadgets.api_version(), "kind": "Gadget",
                      "metadata": {"name": "g1"}, "spec": {"size": 1}});
    eventually(LIMIT, "gadget created", || {
        c.create(gadgets, Some(ns), &body).ok()
    });
}

fn scenario_namespace_emptied(t: &Target) {
    let admin = t.admin();
    let mut cleanup = Cleanup::new(admin.clone());
    let ns = unique("e2e-nsdel");
    let group = format!("{}.example.com", unique("ns"));
    create_namespace(&admin, &ns);
    cleanup.namespaces.push(ns.clone());
    cleanup.crds.push(format!("gadgets.{group}"));
    let gadgets = create_crd(&admin, &group);
    fill(&admin, &ns, &gadgets);
    let mut kcm = Kcm::start(t, "nsdel", &[CONTROLLERS]);
    // Let the controllers sync before the deletion (the clock starts at the delete).
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    delete_namespace(&admin, &ns);
    eventually(LIMIT, "namespace removed", || {
        if let Some(st) = kcm.exited() {
            panic!("edgekcm exited: {st}");
        }
        gone_ns(&admin, &ns)
    });
    eprintln!("namespace with content removed in {:?}", t0.elapsed());
    // Nothing is left behind under the namespace's name.
    for k in [CONFIGMAPS, SECRETS, DEPLOYMENTS, REPLICASETS, gadgets] {
        let l = admin
            .list(&k, Some(&ns), &Default::default())
            .expect("list");
        assert!(l.items.is_empty(), "{k} left in {ns}: {}", l.items.len());
    }
    let _ = admin.delete(
        &CRDS,
        None,
        &format!("gadgets.{group}"),
        &Default::default(),
    );
}

fn condition<'a>(ns: &'a Value, t: &str) -> &'a Value {
    ns["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

fn scenario_conditions(t: &Target) {
    let admin = t.admin();
    let mut cleanup = Cleanup::new(admin.clone());
    let ns = unique("e2e-nscond");
    create_namespace(&admin, &ns);
    cleanup.namespaces.push(ns.clone());
    cleanup
        .held
        .push((CONFIGMAPS, ns.clone(), "held".to_string()));
    admin
        .create(
            &CONFIGMAPS,
            Some(&ns),
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .expect("configmap");
    let mut kcm = Kcm::start(t, "nscond", &[CONTROLLERS]);
    delete_namespace(&admin, &ns);
    let n = eventually(LIMIT, "conditions reported", || {
        if let Some(st) = kcm.exited() {
            panic!("edgekcm exited: {st}");
        }
        admin
            .get(&NAMESPACES, None, &ns)
            .ok()
            .filter(|n| condition(n, "NamespaceFinalizersRemaining")["status"] == "True")
    });
    assert_eq!(n["status"]["phase"], "Terminating");
    let c = condition(&n, "NamespaceContentRemaining");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "SomeResourcesRemain");
    assert_eq!(
        c["message"],
        "Some resources are remaining: configmaps. has 1 resource instances"
    );
    let f = condition(&n, "NamespaceFinalizersRemaining");
    assert_eq!(f["reason"], "SomeFinalizersRemain");
    assert_eq!(
        f["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    for (ty, reason) in [
        ("NamespaceDeletionDiscoveryFailure", "ResourcesDiscovered"),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "ParsedGroupVersions",
        ),
        ("NamespaceDeletionContentFailure", "ContentDeleted"),
    ] {
        let c = condition(&n, ty);
        assert_eq!(c["status"], "False", "{ty}: {c}");
        assert_eq!(c["reason"], reason);
    }
    assert_eq!(n["spec"]["finalizers"], json!(["kubernetes"]));
    // The finalizer goes: so do the content and the namespace.
    admin
        .patch(
            &CONFIGMAPS,
            Some(&ns),
            "held",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            None,
        )
        .expect("release");
    eventually(LIMIT, "namespace removed", || gone_ns(&admin, &ns));
}

/// Ordered deletion (v1.33 by default, v1.34 GA): the pods go first, and nothing else is
/// deleted while one remains. The conditions written meanwhile report only that pass (so
/// no remaining content, as upstream's).
fn scenario_pods_first(t: &Target) {
    let admin = t.admin();
    let mut cleanup = Cleanup::new(admin.clone());
    let ns = unique("e2e-nsorder");
    create_namespace(&admin, &ns);
    cleanup.namespaces.push(ns.clone());
    cleanup.held.push((PODS, ns.clone(), "held".to_string()));
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let _ = admin.create(&SERVICEACCOUNTS, Some(&ns), &sa);
    admin
        .create(
            &PODS,
            Some(&ns),
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}),
        )
        .expect("pod");
    admin
        .create(
            &CONFIGMAPS,
            Some(&ns),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after-pods"}}),
        )
        .expect("configmap");
    let mut kcm = Kcm::start(t, "nsorder", &[CONTROLLERS]);
    delete_namespace(&admin, &ns);
    let n = eventually(LIMIT, "the pod deleted and conditions written", || {
        if let Some(st) = kcm.exited() {
            panic!("edgekcm exited: {st}");
        }
        let p = admin.get(&PODS, Some(&ns), "held").ok()?;
        p["metadata"]["deletionTimestamp"].as_str()?;
        admin
            .get(&NAMESPACES, None, &ns)
            .ok()
            .filter(|n| condition(n, "NamespaceDeletionContentFailure")["status"] == "False")
    });
    let c = condition(&n, "NamespaceContentRemaining");
    assert_eq!(c["status"], "False", "{c}");
    assert_eq!(c["reason"], "ContentRemoved");
    // Several passes later the ConfigMap is still there.
    std::thread::sleep(Duration::from_secs(3));
    admin
        .get(&CONFIGMAPS, Some(&ns), "after-pods")
        .expect("the ConfigMap waits for the pods");
    admin
        .patch(
            &PODS,
            Some(&ns),
            "held",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            None,
        )
        .expect("release");
    eventually(LIMIT, "namespace removed", || gone_ns(&admin, &ns));
}

/// The namespace-deletion benchmark: 300 Deployments, 300 ReplicaSets and 1500 Pods (owned
/// in the usual chain), then the namespace is deleted; prints how long until it is gone.
/// Not a timed test: run with `--ignored --nocapture`.
fn bench_namespace_deletion(t: &Target) {
    use edgekcm::api::resources::PODS;
    let admin = t.admin();
    let mut cleanup = Cleanup::new(admin.clone());
    let ns = unique("bench-nsdel");
    create_namespace(&admin, &ns);
    cleanup.namespaces.push(ns.clone());
    // Pods need their ServiceAccount on a real apiserver (admission).
    let _ = admin.create(
        &edgekcm::api::resources::SERVICEACCOUNTS,
        Some(&ns),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
    );
    let t_fill = Instant::now();
    let pod_spec = json!({"containers": [{"name": "c", "image": "example.invalid/none"}],
                          "terminationGracePeriodSeconds": 30});
    for i in 0..300 {
        let name = format!("d{i}");
        let d = admin
            .create(
                &DEPLOYMENTS,
                Some(&ns),
                &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                    "spec": {"replicas": 5, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}}),
            )
            .expect("deployment");
        let rs = admin
            .create(
                &REPLICASETS,
                Some(&ns),
                &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": format!("{name}-rs"), "labels": {"app": name},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                            "uid": d["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
                    "spec": {"replicas": 5, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}}),
            )
            .expect("replicaset");
        for j in 0..5 {
            admin
                .create(
                    &PODS,
                    Some(&ns),
                    &json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("{name}-rs-{j}"), "labels": {"app": name},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                "name": format!("{name}-rs"), "uid": rs["metadata"]["uid"],
                                "controller": true, "blockOwnerDeletion": true}]},
                        "spec": pod_spec}),
                )
                .expect("pod");
        }
    }
    eprintln!("bench: 2100 objects created in {:?}", t_fill.elapsed());
    let mut kcm = Kcm::start(t, "bench", &[CONTROLLERS]);
    // Let the garbage collector's monitors sync (its graph holds the 2100 objects).
    std::thread::sleep(Duration::from_secs(5));
    let t0 = Instant::now();
    delete_namespace(&admin, &ns);
    eventually(Duration::from_secs(300), "namespace removed", || {
        if let Some(st) = kcm.exited() {
            panic!("edgekcm exited: {st}");
        }
        gone_ns(&admin, &ns)
    });
    eprintln!(
        "bench: namespace with 300 Deployments, 300 ReplicaSets, 1500 Pods removed in {:?} (grace period 5 s included)",
        t0.elapsed()
    );
    let keep = std::env::temp_dir().join("edgekcm-bench-last.log");
    let _ = std::fs::copy(&kcm.log, &keep);
    eprintln!("bench: edgekcm log kept in {}", keep.display());
}

#[test]
#[ignore]
fn sandbox_bench_namespace_deletion() {
    bench_namespace_deletion(&sandbox());
}

#[test]
#[ignore]
fn real_bench_namespace_deletion() {
    let t = real("namespace deletion benchmark");
    bench_namespace_deletion(&t);
}

// Each scenario runs on the sandbox (`sandbox_scenarios::<name>`) and, with `just e2e`,
// on a real kube-apiserver (`real_scenarios::<name>`).
scenarios! {
    namespace_is_emptied_and_removed => scenario_namespace_emptied,
    namespace_conditions_report_remaining_content => scenario_conditions,
    namespace_pods_go_first => scenario_pods_first,
}
