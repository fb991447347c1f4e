use super::pv::PvProtection;
use super::pvc::{pod_references_claim, pod_uses_claim, with_unused_condition, PvcProtection};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS};
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

fn claim(finalizers: &[&str], deleting: bool) -> Value {
    let mut c = json!({"metadata": {"name": "c", "namespace": "ns", "uid": "cu", "resourceVersion": "1",
                                    "finalizers": finalizers}, "spec": {}});
    if deleting {
        c["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    }
    c
}

fn pod(node: &str, volumes: Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pu"},
           "spec": {"nodeName": node, "volumes": volumes}, "status": {"phase": "Running"}})
}

#[test]
fn a_claim_without_the_finalizer_gets_it() {
    let mut h = Harness::new(PvcProtection);
    h.add(PERSISTENTVOLUMECLAIMS, claim(&["other"], false));
    assert_eq!(h.take_queued(), ["ns/c"]);
    let w = h.sync("ns/c");
    assert_eq!(
        w.updates[0].2["metadata"]["finalizers"],
        json!(["other", "kubernetes.io/pvc-protection"])
    );
    // With it: nothing written (it is queued, as upstream queues any claim without the
    // `Unused` condition, but an unbound claim gets none).
    let mut c = claim(&["kubernetes.io/pvc-protection"], false);
    c["metadata"]["resourceVersion"] = "2".into();
    h.update(PERSISTENTVOLUMECLAIMS, c);
    assert_eq!(h.take_queued(), ["ns/c"]);
    assert!(h.sync("ns/c").is_empty());
}

#[test]
fn a_deleted_claim_in_use_by_a_cached_pod_keeps_the_finalizer() {
    let mut h = Harness::new(PvcProtection);
    h.add(
        PODS,
        pod(
            "n1",
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
        ),
    );
    h.add(
        PERSISTENTVOLUMECLAIMS,
        claim(&["kubernetes.io/pvc-protection"], true),
    );
    assert!(h.take_queued().contains(&"ns/c".to_string()));
    // The cached pod answers: no live list, no write.
    assert!(h.sync("ns/c").is_empty());
}

#[test]
fn pods_that_free_their_claims_queue_them() {
    let mut h = Harness::new(PvcProtection);
    let vols = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}},
                      {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}]);
    // With v1.37's Unused condition every pod change queues its claims.
    h.add(PODS, pod("n1", vols.clone()));
    assert_eq!(h.take_queued(), ["ns/c", "ns/p-e"]);
    let mut done = pod("n1", vols.clone());
    done["status"]["phase"] = "Succeeded".into();
    h.update(PODS, done.clone());
    assert_eq!(h.take_queued(), ["ns/c", "ns/p-e"]);
    h.delete(PODS, done);
    assert_eq!(h.take_queued(), ["ns/c", "ns/p-e"]);
}

#[test]
fn pods_use_claims_as_upstream_decides() {
    let c = claim(&[], false);
    let named = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]);
    assert!(pod_uses_claim(&pod("n1", named.clone()), &c));
    assert!(
        !pod_uses_claim(&pod("", named), &c),
        "unscheduled pods do not count"
    );
    // An ephemeral claim counts only when the pod owns it and is not shut down.
    let mut eph = claim(&[], false);
    eph["metadata"]["name"] = "p-e".into();
    let vols = json!([{"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}]);
    assert!(!pod_uses_claim(&pod("n1", vols.clone()), &eph));
    eph["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu", "controller": true}]);
    let mut p = pod("n1", vols);
    assert!(pod_uses_claim(&p, &eph));
    p["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    p["metadata"]["deletionGracePeriodSeconds"] = 0.into();
    assert!(!pod_uses_claim(&p, &eph));
}

#[test]
fn a_volume_loses_its_finalizer_once_it_is_not_bound() {
    let mut h = Harness::new(PvProtection);
    let pv = |phase: &str, deleting: bool, fin: &[&str]| {
        let rv = match phase {
            "Available" => "1",
            "Bound" => "2",
            _ => "3",
        };
        let mut v = json!({"metadata": {"name": "v", "uid": "vu", "resourceVersion": rv,
                                        "finalizers": fin},
                           "spec": {}, "status": {"phase": phase}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
        }
        v
    };
    h.add(PERSISTENTVOLUMES, pv("Available", false, &[]));
    assert_eq!(h.take_queued(), ["v"]);
    let w = h.sync("v");
    assert_eq!(
        w.updates[0].2["metadata"]["finalizers"],
        json!(["kubernetes.io/pv-protection"])
    );
    h.update(
        PERSISTENTVOLUMES,
        pv("Bound", true, &["kubernetes.io/pv-protection"]),
    );
    assert_eq!(h.take_queued(), ["v"]);
    assert!(h.sync("v").is_empty(), "bound: kept");
    h.update(
        PERSISTENTVOLUMES,
        pv("Released", true, &["kubernetes.io/pv-protection", "x"]),
    );
    let w = h.sync("v");
    assert_eq!(w.updates[0].2["metadata"]["finalizers"], json!(["x"]));
}

fn bound(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                        "resourceVersion": "1", "finalizers": ["kubernetes.io/pvc-protection"]},
           "spec": {"volumeName": "v"}, "status": {"phase": "Bound"}})
}

#[test]
fn bound_claims_say_whether_a_pod_references_them() {
    let mut h = Harness::new(PvcProtection);
    // An unscheduled pod references its claim too (deletion needs a scheduled one).
    let mut p = pod(
        "",
        json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
    );
    p["metadata"]["resourceVersion"] = "5".into();
    h.add(PODS, p.clone());
    h.add(PERSISTENTVOLUMECLAIMS, bound("c"));
    h.take_queued();
    let w = h.sync("ns/c");
    assert_eq!(w.updates.len(), 1);
    let (_, sub, c) = &w.updates[0];
    assert_eq!(*sub, Some("status"));
    let cond = &c["status"]["conditions"][0];
    assert_eq!(cond["type"], "Unused");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "PodUsingPVC");
    assert_eq!(cond["message"], "A pod is currently referencing this PVC");
    assert!(cond["lastTransitionTime"].is_string());
    // Written: nothing more while the pod stays.
    let mut c = c.clone();
    c["metadata"]["resourceVersion"] = "2".into();
    h.update(PERSISTENTVOLUMECLAIMS, c.clone());
    assert!(
        h.take_queued().is_empty(),
        "a claim with the condition and the finalizer"
    );
    assert!(h.sync("ns/c").is_empty());
    // The pod finishes: Unused turns True.
    p["status"]["phase"] = "Succeeded".into();
    p["metadata"]["resourceVersion"] = "6".into();
    h.update(PODS, p);
    assert_eq!(h.take_queued(), ["ns/c"]);
    let next = with_unused_condition(&c, false, "2024-01-02T00:00:00Z").expect("a change");
    let cond = &next["status"]["conditions"][0];
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("True"), Some("NoPodsUsingPVC"))
    );
    assert_eq!(
        cond["message"],
        "No pods are currently referencing this PVC"
    );
    assert_eq!(cond["lastTransitionTime"], "2024-01-02T00:00:00Z");
    assert!(with_unused_condition(&next, false, "later").is_none());
    // Pending or deleting claims get no condition.
    let mut pending = bound("d");
    pending["status"]["phase"] = "Pending".into();
    h.add(PERSISTENTVOLUMECLAIMS, pending);
    assert!(h.sync("ns/d").is_empty());
}

#[test]
fn references_count_unscheduled_pods_but_not_finished_ones() {
    let c = bound("c");
    let named = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]);
    assert!(pod_references_claim(&pod("", named.clone()), &c));
    assert!(!pod_uses_claim(&pod("", named.clone()), &c));
    let mut failed = pod("n1", named);
    failed["status"]["phase"] = "Failed".into();
    assert!(!pod_references_claim(&failed, &c));
    // The ephemeral claim counts only for the pod that owns it.
    let mut e = bound("p-e");
    e["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu", "controller": true}]);
    let eph = json!([{"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}]);
    assert!(pod_references_claim(&pod("", eph.clone()), &e));
    let mut other = pod("", eph);
    other["metadata"]["uid"] = "someone-else".into();
    assert!(!pod_references_claim(&other, &e));
}
