use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

fn pod(name: &str, vols: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                     "resourceVersion": "1"},
        "spec": {"nodeName": "n1", "volumes": vols,
                 "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    })
}

fn eph(name: &str) -> Value {
    json!({"name": name, "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"l": "v"}, "annotations": {"a": "b"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }}})
}

fn pvc(name: &str, owner: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("c-{name}"),
                                    "resourceVersion": "1"},
                       "spec": {}});
    if let Some(o) = owner {
        c["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": o, "uid": format!("u-{o}"), "controller": true}]);
    }
    c
}

#[test]
fn a_claim_per_ephemeral_volume_owned_by_the_pod() {
    let mut h = Harness::new(Ephemeral::new());
    h.add(
        PODS,
        pod(
            "p",
            json!([{"name": "cfg", "configMap": {"name": "x"}}, eph("data"), eph("log")]),
        ),
    );
    assert_eq!(h.take_queued(), ["ns/p"]);
    let w = h.sync("ns/p");
    assert_eq!(w.created_names(), ["p-data", "p-log"]);
    let c = &w.creates[0].1;
    assert_eq!(
        c["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p",
                "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(c["metadata"]["labels"], json!({"l": "v"}));
    assert_eq!(c["metadata"]["annotations"], json!({"a": "b"}));
    assert_eq!(c["spec"]["storageClassName"], "fast");
    assert_eq!(c["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert!(w.events.is_empty());
}

#[test]
fn pods_without_ephemeral_volumes_or_being_deleted_are_not_synced() {
    let mut h = Harness::new(Ephemeral::new());
    h.add(PODS, pod("plain", json!([{"name": "e", "emptyDir": {}}])));
    let mut going = pod("going", json!([eph("d")]));
    going["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    h.add(PODS, going);
    assert!(h.take_queued().is_empty());
    assert!(h.sync("ns/going").is_empty());
    assert!(h.sync("ns/gone").is_empty());
}

#[test]
fn an_owned_claim_is_kept_and_a_foreign_one_is_a_conflict() {
    let mut h = Harness::new(Ephemeral::new());
    h.add(PERSISTENTVOLUMECLAIMS, pvc("p-data", Some("p")));
    h.add(PODS, pod("p", json!([eph("data")])));
    assert!(h.sync("ns/p").is_empty());

    h.add(PERSISTENTVOLUMECLAIMS, pvc("q-data", None));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("q-log", Some("other")));
    h.add(PODS, pod("q", json!([eph("data"), eph("log")])));
    let out = h.outcome("ns/q");
    assert!(out.retry_quietly.is_some());
    let w = h.sync("ns/q");
    assert!(w.creates.is_empty());
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "FailedBinding".to_string(),
            "ephemeral volume data: PVC ns/q-data was not created for pod ns/q (pod is not owner)"
                .to_string()
        )]
    );
}

#[test]
fn a_deleted_claim_queues_the_pods_that_name_it() {
    let mut h = Harness::new(Ephemeral::new());
    h.add(PERSISTENTVOLUMECLAIMS, pvc("p-data", Some("p")));
    h.add(PODS, pod("p", json!([eph("data")])));
    h.take_queued();
    h.delete(PERSISTENTVOLUMECLAIMS, pvc("other", None));
    assert!(h.take_queued().is_empty());
    h.delete(PERSISTENTVOLUMECLAIMS, pvc("p-data", Some("p")));
    assert_eq!(h.take_queued(), ["ns/p"]);
    assert_eq!(h.sync("ns/p").created_names(), ["p-data"]);
    // Once the pod is gone, its claims no longer point at it.
    h.delete(PODS, pod("p", json!([eph("data")])));
    h.take_queued();
    h.delete(PERSISTENTVOLUMECLAIMS, pvc("p-data", Some("p")));
    assert!(h.take_queued().is_empty());
}

#[test]
fn create_counters_are_upstreams() {
    let text = crate::metrics::encode(&metric_families());
    assert!(text.contains("# TYPE ephemeral_volume_controller_create_total counter"));
    assert!(text.contains(
        "# HELP ephemeral_volume_controller_create_failures_total [ALPHA] Number of \
         PersistenVolumeClaims creation requests"
    ));
}
