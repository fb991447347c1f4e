use super::*;
use crate::controllers::testing::{Harness, Writes};
use crate::controllers::EventType;
use serde_json::json;

fn binder() -> Harness<PvBinder> {
    Harness::new(PvBinder::new(true))
}

fn pv(name: &str, size: &str, class: &str) -> Value {
    json!({"metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1"},
           "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
                    "volumeMode": "Filesystem", "hostPath": {"path": "/tmp/x"}},
           "status": {"phase": "Available"}})
}

fn pvc(name: &str, size: &str, class: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                                    "resourceVersion": "1"},
           "spec": {"resources": {"requests": {"storage": size}}, "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Filesystem"},
           "status": {"phase": "Pending"}});
    if let Some(cl) = class {
        c["spec"]["storageClassName"] = cl.into();
    }
    c
}

fn sc(name: &str, provisioner: &str, mode: &str) -> Value {
    json!({"metadata": {"name": name, "creationTimestamp": "2024-01-01T00:00:00Z"},
           "provisioner": provisioner, "volumeBindingMode": mode})
}

fn reasons(w: &Writes) -> Vec<&str> {
    w.events.iter().map(|(_, r, _)| r.as_str()).collect()
}

/// Sync `key` and feed each write back as the watch would, until nothing is left; the
/// writes in order.
fn drive(h: &mut Harness<PvBinder>, key: &str) -> Vec<(Kind, Option<&'static str>, Value)> {
    let mut all = Vec::new();
    for _ in 0..10 {
        let w = h.sync(key);
        if w.updates.is_empty() {
            break;
        }
        for (k, sub, v) in &w.updates {
            let mut v = v.clone();
            let rv: u64 = crate::obj::resource_version(&v).parse().unwrap_or(1);
            v["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
            h.update(*k, v.clone());
            all.push((*k, *sub, v));
        }
    }
    all
}

use crate::api::resources::PODS;
use crate::api::Kind;

#[test]
fn binds_the_smallest_fitting_volume_in_upstreams_four_writes() {
    let mut h = binder();
    h.add(PERSISTENTVOLUMES, pv("big", "10Gi", "gold"));
    h.add(PERSISTENTVOLUMES, pv("small", "2Gi", "gold"));
    h.add(PERSISTENTVOLUMES, pv("tiny", "500Mi", "gold"));
    h.add(PERSISTENTVOLUMES, pv("other", "2Gi", "silver"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("gold")));
    assert!(h.take_queued().contains(&"ns/c".to_string()));
    let writes = drive(&mut h, "ns/c");
    let steps: Vec<(&str, Option<&str>)> = writes.iter().map(|(k, s, _)| (k.kind, *s)).collect();
    assert_eq!(
        steps,
        [
            ("PersistentVolume", None),
            ("PersistentVolume", Some("status")),
            ("PersistentVolumeClaim", None),
            ("PersistentVolumeClaim", Some("status")),
        ]
    );
    let v = &writes[0].2;
    assert_eq!(crate::obj::name(v), "small");
    assert_eq!(v["spec"]["claimRef"]["uid"], "uid-c");
    assert_eq!(v["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
    assert_eq!(
        v["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    assert_eq!(writes[1].2["status"]["phase"], "Bound");
    let c = &writes[2].2;
    assert_eq!(c["spec"]["volumeName"], "small");
    assert_eq!(
        c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    assert_eq!(
        c["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    let st = &writes[3].2["status"];
    assert_eq!(st["phase"], "Bound");
    assert_eq!(st["capacity"]["storage"], "2Gi");
    assert_eq!(st["accessModes"], json!(["ReadWriteOnce"]));
    // Done: a further sync writes nothing.
    assert!(h.sync("ns/c").is_empty());
}

#[test]
fn matching_honours_modes_selector_volume_mode_and_prebinding() {
    let mut h = binder();
    let mut rox = pv("rox", "1Gi", "");
    rox["spec"]["accessModes"] = json!(["ReadOnlyMany"]);
    h.add(PERSISTENTVOLUMES, rox);
    let mut block = pv("block", "1Gi", "");
    block["spec"]["volumeMode"] = "Block".into();
    h.add(PERSISTENTVOLUMES, block);
    let mut labelled = pv("labelled", "5Gi", "");
    labelled["metadata"]["labels"] = json!({"tier": "db"});
    h.add(PERSISTENTVOLUMES, labelled);
    h.add(PERSISTENTVOLUMES, pv("plain", "1Gi", ""));
    let mut c = pvc("c", "1Gi", Some(""));
    c["spec"]["selector"] = json!({"matchLabels": {"tier": "db"}});
    h.add(PERSISTENTVOLUMECLAIMS, c);
    let w = h.sync("ns/c");
    assert_eq!(crate::obj::name(&w.updates[0].2), "labelled");

    // A volume pre-bound to the claim wins over a smaller free one; no bound-by annotation.
    let mut pre = pv("pre", "8Gi", "");
    pre["spec"]["claimRef"] = json!({"namespace": "ns", "name": "d"});
    h.add(PERSISTENTVOLUMES, pre);
    h.add(PERSISTENTVOLUMECLAIMS, pvc("d", "1Gi", Some("")));
    let w = h.sync("ns/d");
    let v = &w.updates[0].2;
    assert_eq!(crate::obj::name(v), "pre");
    assert_eq!(v["spec"]["claimRef"]["uid"], "uid-d");
    assert!(v["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"].is_null());
}

#[test]
fn a_claim_without_volume_or_class_waits_with_failed_binding() {
    let mut h = binder();
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", None));
    let w = h.sync("ns/c");
    assert!(w.updates.is_empty());
    assert_eq!(reasons(&w), ["FailedBinding"]);
    assert_eq!(
        w.events[0].2,
        "no persistent volumes available for this claim and no storage class is set"
    );
}

#[test]
fn a_claim_without_class_gets_the_default_class() {
    let mut h = binder();
    let mut d = sc("std", "csi.example.com", "Immediate");
    d["metadata"]["annotations"] = json!({"storageclass.kubernetes.io/is-default-class": "true"});
    h.add(STORAGECLASSES, d);
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", None));
    let w = h.sync("ns/c");
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["spec"]["storageClassName"], "std");
    assert!(w.events.is_empty());
}

#[test]
fn provisioning_is_handed_to_the_external_provisioner() {
    let mut h = binder();
    h.add(STORAGECLASSES, sc("fast", "csi.example.com", "Immediate"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("fast")));
    let w = h.sync("ns/c");
    let ann = &w.updates[0].2["metadata"]["annotations"];
    assert_eq!(
        ann["volume.kubernetes.io/storage-provisioner"],
        "csi.example.com"
    );
    assert_eq!(
        ann["volume.beta.kubernetes.io/storage-provisioner"],
        "csi.example.com"
    );
    assert_eq!(reasons(&w), ["ExternalProvisioning"]);
    assert!(w.events[0].2.starts_with(
        "Waiting for a volume to be created either by the external provisioner 'csi.example.com' or"
    ));
    // A missing class, an in-tree provisioner: ProvisioningFailed.
    h.add(PERSISTENTVOLUMECLAIMS, pvc("d", "1Gi", Some("nope")));
    let w = h.sync("ns/d");
    assert_eq!(reasons(&w), ["ProvisioningFailed"]);
    assert_eq!(w.events[0].0, EventType::Warning);
    assert_eq!(
        w.events[0].2,
        "storageclass.storage.k8s.io \"nope\" not found"
    );
    h.add(
        STORAGECLASSES,
        sc("intree", "kubernetes.io/gce-pd", "Immediate"),
    );
    h.add(PERSISTENTVOLUMECLAIMS, pvc("e", "1Gi", Some("intree")));
    assert_eq!(reasons(&h.sync("ns/e")), ["ProvisioningFailed"]);
    // Provisioning off: nothing at all.
    let mut off = Harness::new(PvBinder::new(false));
    off.add(STORAGECLASSES, sc("fast", "csi.example.com", "Immediate"));
    off.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("fast")));
    assert!(off.sync("ns/c").is_empty());
}

#[test]
fn wait_for_first_consumer_claims_wait_for_a_node() {
    let mut h = binder();
    h.add(
        STORAGECLASSES,
        sc("local", "csi.example.com", "WaitForFirstConsumer"),
    );
    h.add(PERSISTENTVOLUMES, pv("v", "1Gi", "local"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("local")));
    let w = h.sync("ns/c");
    assert!(w.updates.is_empty());
    assert_eq!(reasons(&w), ["WaitForFirstConsumer"]);
    h.add(
        PODS,
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
               "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]},
               "status": {"phase": "Pending"}}),
    );
    let w = h.sync("ns/c");
    assert_eq!(reasons(&w), ["WaitForPodScheduled"]);
    assert_eq!(w.events[0].2, "waiting for pod p to be scheduled");
    // Once the scheduler picked a node, provisioning starts (no static volume binds
    // without the scheduler).
    let mut c = pvc("c", "1Gi", Some("local"));
    c["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "n1"});
    c["metadata"]["resourceVersion"] = "2".into();
    h.update(PERSISTENTVOLUMECLAIMS, c);
    assert_eq!(reasons(&h.sync("ns/c")), ["ExternalProvisioning"]);
}

#[test]
fn a_requested_volume_that_does_not_fit_is_a_mismatch() {
    let mut h = binder();
    h.add(PERSISTENTVOLUMES, pv("v", "1Gi", "gold"));
    let mut c = pvc("c", "5Gi", Some("gold"));
    c["spec"]["volumeName"] = "v".into();
    h.add(PERSISTENTVOLUMECLAIMS, c);
    let w = h.sync("ns/c");
    assert_eq!(reasons(&w), ["VolumeMismatch"]);
    assert_eq!(
        w.events[0].2,
        "Cannot bind to requested volume \"v\": requested PV is too small"
    );
}

#[test]
fn a_bound_claim_whose_volume_is_gone_is_lost() {
    let mut h = binder();
    let mut c = pvc("c", "1Gi", Some(""));
    c["spec"]["volumeName"] = "v".into();
    c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    c["status"]["phase"] = "Bound".into();
    h.add(PERSISTENTVOLUMECLAIMS, c);
    let w = h.sync("ns/c");
    assert_eq!(w.updates[0].2["status"]["phase"], "Lost");
    assert_eq!(reasons(&w), ["ClaimLost"]);
    assert_eq!(
        w.events[0].2,
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
    );
}

#[test]
fn volumes_become_available_and_bound() {
    let mut h = binder();
    let mut v = pv("v", "1Gi", "");
    v["status"]["phase"] = "Pending".into();
    h.add(PERSISTENTVOLUMES, v);
    assert_eq!(h.take_queued(), ["v"]);
    let w = h.sync("v");
    assert_eq!(w.updates[0].2["status"]["phase"], "Available");
    assert_eq!(w.updates[0].1, Some("status"));
}

#[test]
fn a_volume_whose_claim_bound_elsewhere_is_unbound() {
    let mut h = binder();
    let mut v = pv("v", "1Gi", "");
    v["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c", "uid": "uid-c"});
    v["metadata"]["annotations"] = json!({"pv.kubernetes.io/bound-by-controller": "yes"});
    v["status"]["phase"] = "Bound".into();
    h.add(PERSISTENTVOLUMES, v);
    let mut c = pvc("c", "1Gi", Some(""));
    c["spec"]["volumeName"] = "other".into();
    h.add(PERSISTENTVOLUMECLAIMS, c);
    let w = h.sync("v");
    let u = &w.updates[0].2;
    assert!(u["spec"]["claimRef"].is_null());
    assert!(u["metadata"]["annotations"].is_null());
    assert_eq!(w.requeue_after, Some(Duration::ZERO));
}

#[test]
fn keys_reach_the_other_side_of_a_binding() {
    let mut h = binder();
    let mut v = pv("v", "1Gi", "");
    v["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c", "uid": "uid-c"});
    h.add(PERSISTENTVOLUMES, v.clone());
    assert_eq!(h.take_queued(), ["ns/c", "v"]);
    h.delete(PERSISTENTVOLUMES, v);
    assert_eq!(h.take_queued(), ["ns/c"]);
    let mut c = pvc("c", "1Gi", Some(""));
    c["spec"]["volumeName"] = "v".into();
    h.add(PERSISTENTVOLUMECLAIMS, c.clone());
    assert_eq!(h.take_queued(), ["ns/c"]);
    h.delete(PERSISTENTVOLUMECLAIMS, c);
    assert_eq!(h.take_queued(), ["v"]);
}

#[test]
fn a_failed_volume_whose_claim_is_gone_stays_failed() {
    let mut h = binder();
    let mut v = pv("v", "1Gi", "");
    v["spec"]["claimRef"] = json!({"namespace": "ns", "name": "gone", "uid": "uid-gone"});
    v["spec"]["persistentVolumeReclaimPolicy"] = "Delete".into();
    v["status"] = json!({"phase": "Failed", "message": "no deleter"});
    h.add(PERSISTENTVOLUMES, v.clone());
    // No write of Released over Failed (the live re-read of the reclaim fails here: nothing).
    assert!(h.sync("v").updates.is_empty());
}

#[test]
fn volumes_the_handlers_have_not_seen_yet_still_match() {
    let mut h = binder();
    // In the cache before any handler ran (as right after the first list).
    h.cache
        .store_for(&VOLUME_WATCH)
        .apply(crate::cache::DeltaKind::Added, pv("early", "1Gi", "gold"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("gold")));
    let w = h.sync("ns/c");
    assert!(w.events.is_empty(), "{:?}", w.events);
    assert_eq!(crate::obj::name(&w.updates[0].2), "early");
}

fn scrape(h: &Harness<PvBinder>) -> String {
    crate::metrics::encode(&h.ctrl.stats.families())
}

#[test]
fn pv_collector_counts_volumes_and_claims_as_upstream_names_them() {
    let mut h = binder();
    h.add(PERSISTENTVOLUMES, pv("a", "1Gi", "gold"));
    let mut b = pv("b", "1Gi", "gold");
    b["status"]["phase"] = "Bound".into();
    b["spec"]["csi"] = json!({"driver": "csi.example.com", "volumeHandle": "h"});
    b["spec"].as_object_mut().unwrap().remove("hostPath");
    h.add(PERSISTENTVOLUMES, b);
    h.add(PERSISTENTVOLUMES, pv("c", "1Gi", "silver"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("x", "1Gi", Some("gold")));
    let mut y = pvc("y", "1Gi", Some("gold"));
    y["status"]["phase"] = "Bound".into();
    h.add(PERSISTENTVOLUMECLAIMS, y.clone());
    let text = scrape(&h);
    for line in [
        "# HELP pv_collector_bound_pv_count [ALPHA] Gauge measuring number of persistent volume currently bound",
        "# TYPE pv_collector_bound_pv_count gauge",
        "pv_collector_bound_pv_count{storage_class=\"gold\"} 1",
        "pv_collector_unbound_pv_count{storage_class=\"gold\"} 1",
        "pv_collector_unbound_pv_count{storage_class=\"silver\"} 1",
        "pv_collector_bound_pvc_count{namespace=\"ns\"} 1",
        "pv_collector_unbound_pvc_count{namespace=\"ns\"} 1",
        "pv_collector_total_pv_count{plugin_name=\"kubernetes.io/csi:csi.example.com\",volume_mode=\"Filesystem\"} 1",
        "pv_collector_total_pv_count{plugin_name=\"kubernetes.io/host-path\",volume_mode=\"Filesystem\"} 2",
        "retroactive_storageclass_total 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // A claim deleted, a volume deleted: counted no more.
    h.delete(PERSISTENTVOLUMECLAIMS, y);
    h.delete(PERSISTENTVOLUMES, pv("c", "1Gi", "silver"));
    let text = scrape(&h);
    assert!(!text.contains("pv_collector_bound_pvc_count"), "{text}");
    assert!(!text.contains("silver"), "{text}");
}

#[test]
fn a_default_class_assignment_is_counted_once_written() {
    let mut h = binder();
    let mut d = sc("std", "csi.example.com", "Immediate");
    d["metadata"]["annotations"] = json!({"storageclass.kubernetes.io/is-default-class": "true"});
    h.add(STORAGECLASSES, d);
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", None));
    let o = h.outcome("ns/c");
    let err = crate::Error::config("conflict");
    h.ctrl.applied("ns/c", &o.actions[0], Applied::Failed(&err));
    let o = h.outcome("ns/c");
    h.ctrl.applied("ns/c", &o.actions[0], Applied::Done(None));
    // A bind's claim write is no class assignment.
    h.ctrl.applied("ns/c", &o.actions[0], Applied::Done(None));
    let text = scrape(&h);
    assert!(text.contains("retroactive_storageclass_total 2"), "{text}");
    assert!(
        text.contains("retroactive_storageclass_errors_total 1"),
        "{text}"
    );
}

#[test]
fn provisioning_and_delete_operations_are_timed_and_their_failures_counted() {
    let mut h = binder();
    h.add(STORAGECLASSES, sc("fast", "csi.example.com", "Immediate"));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("c", "1Gi", Some("fast")));
    let o = h.outcome("ns/c");
    let Action::Reported { action, .. } = &o.actions[0] else {
        panic!("{o:?}")
    };
    let err = crate::Error::config("conflict");
    h.ctrl.applied("ns/c", action, Applied::Failed(&err));
    let text = scrape(&h);
    assert!(
        text.contains("# HELP volume_operation_total_errors [ALPHA] Total volume operation errors"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE volume_operation_total_errors counter"),
        "{text}"
    );
    assert!(text.contains(
        "volume_operation_total_errors{operation_name=\"provision\",plugin_name=\"csi.example.com\"} 1"
    ));
    assert!(!text.contains("volume_operation_total_seconds"), "{text}");
    // The provisioner's volume, pre-bound to the claim, is bound: the provisioning is over.
    let mut v = pv("v", "1Gi", "fast");
    v["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c", "uid": "uid-c"});
    v["spec"]["persistentVolumeReclaimPolicy"] = "Delete".into();
    v["metadata"]["annotations"] = json!({"pv.kubernetes.io/provisioned-by": "csi.example.com"});
    h.add(PERSISTENTVOLUMES, v);
    drive(&mut h, "ns/c");
    let text = scrape(&h);
    assert!(
        text.contains("# HELP volume_operation_total_seconds [ALPHA] Storage operation end to end duration in seconds"),
        "{text}"
    );
    assert!(text.contains(
        "volume_operation_total_seconds_bucket{operation_name=\"provision\",plugin_name=\"csi.example.com\",le=\"0.1\"} 1"
    ), "{text}");
    assert!(text.contains(
        "volume_operation_total_seconds_bucket{operation_name=\"provision\",plugin_name=\"csi.example.com\",le=\"600\"} 1"
    ), "{text}");
    assert!(text.contains(
        "volume_operation_total_seconds_count{operation_name=\"provision\",plugin_name=\"csi.example.com\"} 1"
    ), "{text}");
    // Bound once more (a resync): nothing more is observed.
    drive(&mut h, "ns/c");
    assert!(scrape(&h).contains("plugin_name=\"csi.example.com\"} 1"));
    // A reclaim of an externally provisioned volume (left to its provisioner) is timed until
    // the volume is gone. (The live re-read of the reclaim fails here, as nothing serves it.)
    let mut x = pv("x", "1Gi", "fast");
    x["spec"]["claimRef"] = json!({"namespace": "ns", "name": "gone", "uid": "uid-gone"});
    x["spec"]["persistentVolumeReclaimPolicy"] = "Delete".into();
    x["metadata"]["annotations"] = json!({"pv.kubernetes.io/provisioned-by": "csi.example.com"});
    x["status"] = json!({"phase": "Failed"});
    h.add(PERSISTENTVOLUMES, x.clone());
    h.sync("x");
    assert!(h.ctrl.stats.op_pending("x", super::metrics::DELETE));
    h.delete(PERSISTENTVOLUMES, x);
    assert!(scrape(&h).contains(
        "volume_operation_total_seconds_count{operation_name=\"delete\",plugin_name=\"csi.example.com\"} 1"
    ));
    // A claim deleted before its provisioning ended: nothing is observed for it.
    h.add(PERSISTENTVOLUMECLAIMS, pvc("d", "1Gi", Some("fast")));
    h.sync("ns/d");
    h.delete(PERSISTENTVOLUMECLAIMS, pvc("d", "1Gi", Some("fast")));
    assert!(!h.ctrl.stats.op_pending("ns/d", super::metrics::PROVISION));
}

#[test]
fn volume_attributes_classes_must_match_and_the_bound_claim_reports_its_class() {
    let mut h = binder();
    h.add(PERSISTENTVOLUMES, pv("plain", "1Gi", "gold"));
    let mut fast = pv("fast", "5Gi", "gold");
    fast["spec"]["volumeAttributesClassName"] = "fast-io".into();
    h.add(PERSISTENTVOLUMES, fast);
    // A claim with a class takes only a volume of that class, however larger.
    let mut c = pvc("c", "1Gi", Some("gold"));
    c["spec"]["volumeAttributesClassName"] = "fast-io".into();
    h.add(PERSISTENTVOLUMECLAIMS, c);
    let writes = drive(&mut h, "ns/c");
    assert_eq!(crate::obj::name(&writes[0].2), "fast");
    let st = &writes[3].2["status"];
    assert_eq!(st["phase"], "Bound");
    assert_eq!(st["currentVolumeAttributesClassName"], "fast-io");
    // A claim without one does not take a volume with one.
    h.add(PERSISTENTVOLUMECLAIMS, pvc("d", "1Gi", Some("gold")));
    let writes = drive(&mut h, "ns/d");
    assert_eq!(crate::obj::name(&writes[0].2), "plain");
    assert!(writes[3].2["status"]
        .get("currentVolumeAttributesClassName")
        .is_none());
    // A requested volume of another class is a mismatch.
    let mut slow = pv("slow", "1Gi", "gold");
    slow["spec"]["volumeAttributesClassName"] = "slow-io".into();
    h.add(PERSISTENTVOLUMES, slow);
    let mut e = pvc("e", "1Gi", Some("gold"));
    e["spec"]["volumeAttributesClassName"] = "fast-io".into();
    e["spec"]["volumeName"] = "slow".into();
    h.add(PERSISTENTVOLUMECLAIMS, e);
    let w = h.sync("ns/e");
    assert_eq!(reasons(&w), ["VolumeMismatch"]);
    assert_eq!(
        w.events[0].2,
        "Cannot bind to requested volume \"slow\": volumeAttributesClassName does not match"
    );
}
