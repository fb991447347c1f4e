use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

fn pvc(req: &str, cap: &str, rv: u32) -> Value {
    json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u-c",
                        "resourceVersion": rv.to_string()},
           "spec": {"volumeName": "v", "resources": {"requests": {"storage": req}}},
           "status": {"phase": "Bound", "capacity": {"storage": cap}}})
}

fn pv(source: Value) -> Value {
    let mut p = json!({"metadata": {"name": "v", "resourceVersion": "1"},
           "spec": {"claimRef": {"namespace": "ns", "name": "c", "uid": "u-c"}}});
    let (k, v) = source.as_object().unwrap().iter().next().unwrap();
    p["spec"][k] = v.clone();
    p
}

fn csi() -> Value {
    json!({"csi": {"driver": "d.example.com", "volumeHandle": "h"}})
}

#[test]
fn claims_are_queued_when_they_grow() {
    let mut h = Harness::new(Expander::default());
    h.add(PERSISTENTVOLUMECLAIMS, pvc("1Gi", "1Gi", 1));
    assert_eq!(h.take_queued(), ["ns/c"]);
    h.update(PERSISTENTVOLUMECLAIMS, pvc("1Gi", "1Gi", 2));
    assert!(h.take_queued().is_empty());
    h.update(PERSISTENTVOLUMECLAIMS, pvc("2Gi", "1Gi", 3));
    assert_eq!(h.take_queued(), ["ns/c"]);
    h.update(PERSISTENTVOLUMECLAIMS, pvc("2Gi", "2Gi", 4));
    assert_eq!(h.take_queued(), ["ns/c"]);
    h.update(PERSISTENTVOLUMECLAIMS, pvc("1Gi", "2Gi", 5));
    assert!(h.take_queued().is_empty());
    h.delete(PERSISTENTVOLUMECLAIMS, pvc("1Gi", "2Gi", 5));
    assert_eq!(h.take_queued(), ["ns/c"]);
    assert!(h.sync("ns/c").is_empty());
}

#[test]
fn a_csi_volume_is_left_to_the_external_resizer() {
    let mut h = Harness::new(Expander::default());
    h.add(PERSISTENTVOLUMES, pv(csi()));
    h.add(PERSISTENTVOLUMECLAIMS, pvc("1Gi", "1Gi", 1));
    assert!(h.sync("ns/c").is_empty());
    h.update(PERSISTENTVOLUMECLAIMS, pvc("2Gi", "1Gi", 2));
    let w = h.sync("ns/c");
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "ExternalExpanding".to_string(),
            "waiting for an external controller to expand this PVC".to_string()
        )]
    );
    assert!(w.patches.is_empty());
}

#[test]
fn a_migrated_volume_gets_the_csi_resizer_annotation() {
    let mut h = Harness::new(Expander::default());
    h.add(
        PERSISTENTVOLUMES,
        pv(json!({"awsElasticBlockStore": {"volumeID": "vol-1"}})),
    );
    h.add(PERSISTENTVOLUMECLAIMS, pvc("2Gi", "1Gi", 7));
    let w = h.sync("ns/c");
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "ExternalExpanding".to_string(),
            "CSI migration enabled for kubernetes.io/aws-ebs; waiting for external resizer to \
             expand the pvc"
                .to_string()
        )]
    );
    assert_eq!(
        w.patches,
        [(
            PERSISTENTVOLUMECLAIMS,
            "ns/c".to_string(),
            json!({"metadata": {"annotations": {STORAGE_RESIZER: "ebs.csi.aws.com"},
                                "resourceVersion": "7"}})
        )]
    );
}

#[test]
fn a_volume_bound_elsewhere_or_missing_is_retried() {
    let mut h = Harness::new(Expander::default());
    h.add(PERSISTENTVOLUMECLAIMS, pvc("2Gi", "1Gi", 1));
    assert!(h.outcome("ns/c").retry_quietly.is_some());
    let mut other = pv(csi());
    other["spec"]["claimRef"]["uid"] = "u-other".into();
    h.add(PERSISTENTVOLUMES, other);
    let out = h.outcome("ns/c");
    assert_eq!(
        out.retry_quietly.as_deref(),
        Some("persistent Volume is not bound to PVC being updated : ns/c")
    );
    assert!(out.actions.is_empty());
}

#[test]
fn in_tree_plugins_are_told_apart() {
    assert_eq!(handoff(&pv(csi())), Handoff::External);
    assert_eq!(
        handoff(&pv(json!({"gcePersistentDisk": {"pdName": "x"}}))),
        Handoff::Migrated("kubernetes.io/gce-pd", "pd.csi.storage.gke.io")
    );
    assert_eq!(
        handoff(&pv(json!({"fc": {"wwids": ["x"]}}))),
        Handoff::InTree("kubernetes.io/fc")
    );
    assert_eq!(
        handoff(&pv(json!({"hostPath": {"path": "/x"}}))),
        Handoff::External
    );
}
