use super::{claim_classes, VacProtection, FINALIZER};
use crate::api::resources::{PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, VOLUMEATTRIBUTESCLASSES};
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

fn class(name: &str, finalizers: &[&str], deleting: bool) -> Value {
    let mut c = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": name, "uid": "u", "resourceVersion": "1", "finalizers": finalizers},
        "driverName": "csi.example.com", "parameters": {"iops": "100"}});
    if deleting {
        c["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
    }
    c
}

fn claim(name: &str, spec: Option<&str>, current: Option<&str>, target: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {}, "status": {}});
    if let Some(s) = spec {
        c["spec"]["volumeAttributesClassName"] = json!(s);
    }
    if let Some(s) = current {
        c["status"]["currentVolumeAttributesClassName"] = json!(s);
    }
    if let Some(s) = target {
        c["status"]["modifyVolumeStatus"] =
            json!({"targetVolumeAttributesClassName": s, "status": "InProgress"});
    }
    c
}

fn volume(name: &str, class: Option<&str>) -> Value {
    let mut v = json!({"metadata": {"name": name, "uid": name}, "spec": {}});
    if let Some(c) = class {
        v["spec"]["volumeAttributesClassName"] = json!(c);
    }
    v
}

#[test]
fn a_class_gets_the_finalizer_by_a_put() {
    let mut h = Harness::new(VacProtection::default());
    h.add(VOLUMEATTRIBUTESCLASSES, class("gold", &["other"], false));
    assert_eq!(h.take_queued(), ["gold"]);
    let w = h.sync("gold");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].1, None, "the object, not a subresource");
    assert_eq!(
        w.updates[0].2["metadata"]["finalizers"],
        json!(["other", FINALIZER])
    );
    // With it: not queued, nothing written.
    let mut c = class("gold", &[FINALIZER], false);
    c["metadata"]["resourceVersion"] = "2".into();
    h.update(VOLUMEATTRIBUTESCLASSES, c);
    assert!(h.take_queued().is_empty());
    assert!(h.sync("gold").is_empty());
}

#[test]
fn a_class_in_use_keeps_the_finalizer_until_its_last_user_lets_go() {
    let mut h = Harness::new(VacProtection::default());
    h.add(
        PERSISTENTVOLUMECLAIMS,
        claim("c1", Some("gold"), None, None),
    );
    h.add(PERSISTENTVOLUMES, volume("v1", Some("gold")));
    assert!(h.take_queued().is_empty(), "additions queue nothing");
    h.add(VOLUMEATTRIBUTESCLASSES, class("gold", &[FINALIZER], true));
    assert_eq!(h.take_queued(), ["gold"]);
    assert!(h.sync("gold").is_empty(), "used by a claim and a volume");
    // The claim moves to another class: gold is queued, still used by the volume.
    h.update(
        PERSISTENTVOLUMECLAIMS,
        claim("c1", Some("silver"), Some("silver"), None),
    );
    assert_eq!(h.take_queued(), ["gold"]);
    assert!(h.sync("gold").is_empty());
    // The volume goes: the finalizer goes.
    h.delete(PERSISTENTVOLUMES, volume("v1", Some("gold")));
    assert_eq!(h.take_queued(), ["gold"]);
    let w = h.sync("gold");
    assert_eq!(w.updates[0].2["metadata"]["finalizers"], json!([]));
}

#[test]
fn a_claim_names_a_class_three_ways() {
    let c = claim("c", Some("a"), Some("b"), Some("c"));
    assert_eq!(
        claim_classes(&c).into_iter().collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    let mut h = Harness::new(VacProtection::default());
    h.add(
        PERSISTENTVOLUMECLAIMS,
        claim("c", None, None, Some("target")),
    );
    h.add(VOLUMEATTRIBUTESCLASSES, class("target", &[FINALIZER], true));
    h.take_queued();
    assert!(
        h.sync("target").is_empty(),
        "a modification's target counts"
    );
    h.delete(
        PERSISTENTVOLUMECLAIMS,
        claim("c", None, None, Some("target")),
    );
    assert_eq!(h.take_queued(), ["target"]);
    assert_eq!(h.sync("target").updates.len(), 1);
}

#[test]
fn a_class_being_deleted_without_the_finalizer_is_left_alone() {
    let mut h = Harness::new(VacProtection::default());
    h.add(VOLUMEATTRIBUTESCLASSES, class("gone", &["other"], true));
    assert!(h.take_queued().is_empty());
    assert!(h.sync("gone").is_empty());
    assert!(h.sync("missing").is_empty());
}

#[test]
fn the_resource_list_says_whether_it_runs() {
    use super::resource_listed;
    let with = json!({"kind": "APIResourceList", "groupVersion": "storage.k8s.io/v1",
        "resources": [{"name": "storageclasses"}, {"name": "volumeattributesclasses"}]});
    assert!(resource_listed(&with));
    let without = json!({"kind": "APIResourceList", "resources": [{"name": "storageclasses"}]});
    assert!(!resource_listed(&without));
    assert!(!resource_listed(&json!({})));
}
