use super::pv::PvProtection;
use super::pvc::{pod_uses_claim, PvcProtection};
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
    // With it: nothing queued, nothing written.
    let mut c = claim(&["kubernetes.io/pvc-protection"], false);
    c["metadata"]["resourceVersion"] = "2".into();
    h.update(PERSISTENTVOLUMECLAIMS, c);
    assert!(h.take_queued().is_empty());
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
    h.add(PODS, pod("n1", vols.clone()));
    assert!(
        h.take_queued().is_empty(),
        "a running scheduled pod frees nothing"
    );
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
