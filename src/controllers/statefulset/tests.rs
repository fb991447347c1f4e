//! The statefulset-controller's decisions, on a cache built from objects.

use super::identity::revision_data;
use super::*;
use crate::controllers::kit::history;
use crate::controllers::testing::{Harness, Writes};
use serde_json::json;

const NOW: &str = "2024-06-01T12:00:00Z";

fn set(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web",
            "resourceVersion": "5", "generation": 1},
        "spec": {"replicas": replicas, "serviceName": "web-svc",
            "selector": {"matchLabels": {"app": "web"}},
            "podManagementPolicy": "OrderedReady",
            "revisionHistoryLimit": 10,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "template": {"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}]},
        "status": {"replicas": 0}
    })
}

/// The revision the set's current template makes (number 1, no collision).
fn revision_of(s: &Value) -> Value {
    let mut r = history::new_revision(
        &STATEFULSETS,
        s,
        s.at("/spec/template/metadata/labels")
            .and_then(Value::as_object),
        None,
        &revision_data(s),
        1,
        0,
    );
    r["metadata"]["uid"] = json!(format!("rev-{}", obj::name(&r)));
    r["metadata"]["creationTimestamp"] = json!("2024-06-01T10:00:00Z");
    r
}

fn pod(s: &Value, ord: i64, rev: &str, ready: bool) -> Value {
    let mut p = identity::new_pod(s, ord, rev).expect("pod");
    p["metadata"]["uid"] = json!(format!("p-{ord}"));
    p["metadata"]["resourceVersion"] = json!("9");
    p["status"] = if ready {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2024-06-01T11:00:00Z"}]})
    } else {
        json!({"phase": "Pending"})
    };
    p
}

fn harness(objects: &[(crate::api::Kind, Value)]) -> Harness<StatefulSetController> {
    let mut h = Harness::new(StatefulSetController::new()).at(NOW);
    for (k, o) in objects {
        h.add(*k, o.clone());
    }
    h
}

fn created(w: &Writes, kind: crate::api::Kind) -> Vec<String> {
    w.creates
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, o)| obj::name(o).to_string())
        .collect()
}

fn deleted(w: &Writes, kind: crate::api::Kind) -> Vec<String> {
    w.deletes
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, n)| n.clone())
        .collect()
}

fn status(w: &Writes) -> Value {
    w.updates
        .iter()
        .find(|(k, sub, _)| *k == STATEFULSETS && *sub == Some("status"))
        .map(|(_, _, o)| o["status"].clone())
        .expect("a status write")
}

#[test]
fn first_sync_makes_the_revision_the_claim_and_pod_zero_only() {
    let s = set(3);
    let h = harness(&[(STATEFULSETS, s.clone())]);
    let w = h.sync("ns/web");
    let revs = created(&w, CONTROLLERREVISIONS);
    assert_eq!(revs.len(), 1);
    let rev = &w.creates[0].1;
    assert!(revs[0].starts_with("web-"));
    assert_eq!(rev["revision"], 1);
    assert_eq!(rev["metadata"]["labels"]["app"], "web");
    assert_eq!(rev["data"]["spec"]["template"]["$patch"], "replace");
    assert_eq!(rev["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(created(&w, PERSISTENTVOLUMECLAIMS), vec!["data-web-0"]);
    assert_eq!(created(&w, PODS), vec!["web-0"]);
    let p = &w.creates.iter().find(|(k, _)| *k == PODS).expect("pod").1;
    let hash = obj::name(rev).trim_start_matches("web-").to_string();
    assert_eq!(p["metadata"]["labels"][REVISION_LABEL], obj::name(rev));
    assert_eq!(p["metadata"]["labels"][POD_NAME_LABEL], "web-0");
    assert_eq!(p["metadata"]["labels"][POD_INDEX_LABEL], "0");
    assert_eq!(rev["metadata"]["labels"][history::HASH_LABEL], hash);
    assert_eq!(p["spec"]["hostname"], "web-0");
    assert_eq!(p["metadata"]["generateName"], "web-");
    assert_eq!(p["spec"]["subdomain"], "web-svc");
    assert_eq!(
        p["spec"]["volumes"],
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}])
    );
    let claim = &w
        .creates
        .iter()
        .find(|(k, _)| *k == PERSISTENTVOLUMECLAIMS)
        .expect("pvc")
        .1;
    assert_eq!(claim["metadata"]["labels"]["app"], "web");
    assert!(claim["metadata"]["ownerReferences"].is_null());
    // Events: the claim's and the pod's.
    let reasons: Vec<&str> = w.events.iter().map(|(_, r, _)| r.as_str()).collect();
    assert_eq!(reasons, vec!["SuccessfulCreate", "SuccessfulCreate"]);
    assert_eq!(
        w.events[1].2,
        "Create Pod web-0 in StatefulSet web successful"
    );
    assert_eq!(
        w.events[0].2,
        "Create Claim data-web-0 Pod web-0 in StatefulSet web success"
    );
    let st = status(&w);
    assert_eq!(st["updateRevision"], obj::name(rev));
    assert_eq!(st["currentRevision"], obj::name(rev));
    assert_eq!(st["collisionCount"], 0);
    assert_eq!(st["observedGeneration"], 1);
}

#[test]
fn ordered_ready_waits_for_each_pod() {
    let s = set(3);
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let pvc = |o: i64| json!({"metadata": {"name": format!("data-web-{o}"), "namespace": "ns", "uid": format!("c{o}")}});
    let h = harness(&[
        (STATEFULSETS, s.clone()),
        (CONTROLLERREVISIONS, rev.clone()),
        (PERSISTENTVOLUMECLAIMS, pvc(0)),
        (PODS, pod(&s, 0, &rn, false)),
    ]);
    let w = h.sync("ns/web");
    assert!(w.creates.is_empty(), "{:?}", w.creates);
    let h = harness(&[
        (STATEFULSETS, s.clone()),
        (CONTROLLERREVISIONS, rev.clone()),
        (PERSISTENTVOLUMECLAIMS, pvc(0)),
        (PODS, pod(&s, 0, &rn, true)),
    ]);
    let w = h.sync("ns/web");
    assert_eq!(created(&w, PODS), vec!["web-1"]);
    assert_eq!(created(&w, PERSISTENTVOLUMECLAIMS), vec!["data-web-1"]);
    let st = status(&w);
    assert_eq!(st["replicas"], 1);
    assert_eq!(st["readyReplicas"], 1);
    assert_eq!(st["availableReplicas"], 1);
    assert_eq!(st["currentReplicas"], 1);
    assert_eq!(st["updatedReplicas"], 1);
}

#[test]
fn parallel_creates_every_missing_pod() {
    let mut s = set(3);
    s["spec"]["podManagementPolicy"] = json!("Parallel");
    let rev = revision_of(&s);
    let h = harness(&[(STATEFULSETS, s.clone()), (CONTROLLERREVISIONS, rev)]);
    let w = h.sync("ns/web");
    assert_eq!(created(&w, PODS), vec!["web-0", "web-1", "web-2"]);
    assert!(created(&w, CONTROLLERREVISIONS).is_empty());
}

#[test]
fn scale_down_deletes_the_highest_ordinal_first_and_keeps_claims() {
    let s = set(1);
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let mut objs = vec![(STATEFULSETS, s.clone()), (CONTROLLERREVISIONS, rev)];
    for o in 0..3 {
        objs.push((PODS, pod(&s, o, &rn, true)));
    }
    let w = harness(&objs).sync("ns/web");
    assert_eq!(deleted(&w, PODS), vec!["ns/web-2"]);
    assert!(deleted(&w, PERSISTENTVOLUMECLAIMS).is_empty());
    assert_eq!(
        w.events.last().expect("event").2,
        "Delete Pod web-2 in StatefulSet web successful"
    );

    let mut p = s.clone();
    p["spec"]["podManagementPolicy"] = json!("Parallel");
    objs[0] = (STATEFULSETS, p);
    let mut d = deleted(&harness(&objs).sync("ns/web"), PODS);
    d.sort();
    assert_eq!(d, vec!["ns/web-1", "ns/web-2"]);
}

#[test]
fn rolling_update_replaces_from_the_top_down_to_the_partition() {
    let old = set(3);
    let old_rev = revision_of(&old);
    let on = obj::name(&old_rev).to_string();
    let mut s = old.clone();
    s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    s["metadata"]["generation"] = json!(2);
    s["status"] = json!({"currentRevision": on, "updateRevision": on, "replicas": 3,
        "currentReplicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3,
        "observedGeneration": 1, "collisionCount": 0});
    let mut objs = vec![(STATEFULSETS, s.clone()), (CONTROLLERREVISIONS, old_rev)];
    for o in 0..3 {
        objs.push((PODS, pod(&old, o, &on, true)));
    }
    let w = harness(&objs).sync("ns/web");
    let new = created(&w, CONTROLLERREVISIONS);
    assert_eq!(new.len(), 1);
    assert_ne!(new[0], on);
    assert_eq!(w.creates[0].1["revision"], 2);
    assert_eq!(deleted(&w, PODS), vec!["ns/web-2"]);
    let st = status(&w);
    assert_eq!(st["currentReplicas"], 2);
    assert_eq!(st["currentRevision"], on);
    assert_eq!(st["updateRevision"], new[0]);

    // Partition 3: nothing is replaced.
    s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(3);
    objs[0] = (STATEFULSETS, s.clone());
    assert!(deleted(&harness(&objs).sync("ns/web"), PODS).is_empty());
    // OnDelete: nothing is replaced either.
    s["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    objs[0] = (STATEFULSETS, s);
    assert!(deleted(&harness(&objs).sync("ns/web"), PODS).is_empty());
}

#[test]
fn a_missing_pod_below_the_partition_gets_the_current_revision() {
    let old = set(3);
    let old_rev = revision_of(&old);
    let on = obj::name(&old_rev).to_string();
    let mut s = old.clone();
    s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
    s["spec"]["podManagementPolicy"] = json!("Parallel");
    s["status"] = json!({"currentRevision": on});
    let w = harness(&[(STATEFULSETS, s), (CONTROLLERREVISIONS, old_rev)]).sync("ns/web");
    let pods: Vec<&Value> = w
        .creates
        .iter()
        .filter(|(k, _)| *k == PODS)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(pods[0]["metadata"]["labels"][REVISION_LABEL], on);
    assert_eq!(pods[0]["spec"]["containers"][0]["image"], "nginx");
    assert_ne!(pods[2]["metadata"]["labels"][REVISION_LABEL], on);
    assert_eq!(pods[2]["spec"]["containers"][0]["image"], "nginx:2");
}

#[test]
fn start_ordinal_shifts_names() {
    let mut s = set(2);
    s["spec"]["ordinals"] = json!({"start": 5});
    s["spec"]["podManagementPolicy"] = json!("Parallel");
    let w = harness(&[(STATEFULSETS, s)]).sync("ns/web");
    assert_eq!(created(&w, PODS), vec!["web-5", "web-6"]);
    assert_eq!(
        w.creates.iter().find(|(k, _)| *k == PODS).expect("pod").1["metadata"]["labels"]
            [POD_INDEX_LABEL],
        "5"
    );
}

#[test]
fn retention_policy_sets_claim_owners() {
    let mut s = set(1);
    s["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Delete"});
    let w = harness(&[(STATEFULSETS, s.clone())]).sync("ns/web");
    let claim = &w
        .creates
        .iter()
        .find(|(k, _)| *k == PERSISTENTVOLUMECLAIMS)
        .expect("pvc")
        .1;
    assert_eq!(
        claim["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "uid-web",
            "controller": true, "blockOwnerDeletion": true}])
    );
    // A condemned pod's claim moves from the set to the pod.
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let mut c1 = claim.clone();
    c1["metadata"]["name"] = json!("data-web-1");
    c1["metadata"]["uid"] = json!("c1");
    let w = harness(&[
        (STATEFULSETS, s.clone()),
        (CONTROLLERREVISIONS, rev),
        (PODS, pod(&s, 0, &rn, true)),
        (PODS, pod(&s, 1, &rn, true)),
        (PERSISTENTVOLUMECLAIMS, c1),
    ])
    .sync("ns/web");
    let upd = w
        .updates
        .iter()
        .find(|(k, _, _)| *k == PERSISTENTVOLUMECLAIMS)
        .expect("claim update");
    assert_eq!(
        upd.2["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "p-1",
            "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(deleted(&w, PODS), vec!["ns/web-1"]);
}

#[test]
fn claim_references_as_v1_37_keeps_them() {
    let mut s = set(1);
    s["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Retain"});
    let p = pod(&s, 0, "r", true);
    let claim = |refs: Value| json!({"metadata": {"name": "data-web-0", "ownerReferences": refs}});
    let set_ref = |controller: bool| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": "web", "uid": "uid-web", "controller": controller, "blockOwnerDeletion": true})
    };
    // v1.28's plain reference is made a controller reference.
    let plain = claim(
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
        "uid": "uid-web"}]),
    );
    assert!(!identity::claim_refs_match(&s, &plain, &p));
    let fixed = identity::fix_claim_refs(&s, &plain, &p).expect("fixed");
    assert_eq!(fixed["metadata"]["ownerReferences"], json!([set_ref(true)]));
    assert!(identity::claim_refs_match(&s, &fixed, &p));
    // Another controller: ours are removed and none added.
    let other = json!({"apiVersion": "x/v1", "kind": "Keeper", "name": "k", "uid": "k",
        "controller": true});
    let c = claim(json!([other.clone(), set_ref(true)]));
    assert!(identity::has_unexpected_controller(&s, &c, &p));
    assert!(!identity::claim_refs_match(&s, &c, &p));
    let fixed = identity::fix_claim_refs(&s, &c, &p).expect("fixed");
    assert_eq!(fixed["metadata"]["ownerReferences"], json!([other.clone()]));
    assert!(identity::claim_refs_match(&s, &fixed, &p));
    // A reference to an earlier set of the same name: left alone.
    let mut old = set_ref(true);
    old["uid"] = json!("earlier");
    assert!(identity::claim_refs_match(&s, &claim(json!([old])), &p));
}

#[test]
fn a_claim_held_by_another_controller_gets_a_warning() {
    let mut s = set(1);
    s["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Delete"});
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let claim = json!({"metadata": {"name": "data-web-0", "namespace": "ns", "uid": "c0",
        "ownerReferences": [
            {"apiVersion": "x/v1", "kind": "Keeper", "name": "k", "uid": "k", "controller": true},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "uid-web",
                "controller": true, "blockOwnerDeletion": true}]}});
    let p0 = pod(&s, 0, &rn, true);
    let w = harness(&[
        (STATEFULSETS, s),
        (CONTROLLERREVISIONS, rev),
        (PODS, p0),
        (PERSISTENTVOLUMECLAIMS, claim),
    ])
    .sync("ns/web");
    let e = w
        .events
        .iter()
        .find(|e| e.1 == "ConflictingController")
        .expect("event");
    assert_eq!(
        e.2,
        "PersistentVolumeClaim data-web-0 has a conflicting OwnerReference that acts as a \
         manging controller, the retention policy is ignored for this claim"
    );
    let upd = w
        .updates
        .iter()
        .find(|u| u.0 == PERSISTENTVOLUMECLAIMS)
        .expect("update");
    assert_eq!(
        upd.2["metadata"]["ownerReferences"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn history_is_truncated_to_the_limit() {
    let mut s = set(0);
    s["spec"]["revisionHistoryLimit"] = json!(1);
    let mut objs = vec![];
    for i in 1..=3 {
        let mut t = s.clone();
        t["spec"]["template"]["spec"]["containers"][0]["image"] = json!(format!("nginx:{i}"));
        let mut r = revision_of(&t);
        r["revision"] = json!(i);
        objs.push((CONTROLLERREVISIONS, r));
    }
    objs.push((STATEFULSETS, s));
    let w = harness(&objs).sync("ns/web");
    // A new revision for the current template; of the three old ones one stays.
    assert_eq!(created(&w, CONTROLLERREVISIONS).len(), 1);
    assert_eq!(deleted(&w, CONTROLLERREVISIONS).len(), 2);
}

#[test]
fn a_pod_change_queues_its_set() {
    let s = set(1);
    let mut h = harness(&[(STATEFULSETS, s.clone())]);
    h.take_queued();
    h.add(PODS, pod(&s, 0, "x", false));
    assert_eq!(h.take_queued(), vec!["ns/web"]);
    // Claims and revisions queue nothing.
    h.add(
        PERSISTENTVOLUMECLAIMS,
        json!({"metadata": {"name": "c", "namespace": "ns", "uid": "c"}}),
    );
    assert!(h.take_queued().is_empty());
}

#[test]
fn failed_and_succeeded_pods_are_deleted_without_an_event() {
    // v1.28 recorded `RecreatingFailedPod`; v1.37 deletes quietly and makes the pod again
    // once it is gone.
    for phase in ["Failed", "Succeeded"] {
        let s = set(1);
        let rev = revision_of(&s);
        let rn = obj::name(&rev).to_string();
        let mut p = pod(&s, 0, &rn, false);
        p["status"]["phase"] = json!(phase);
        let w = harness(&[(STATEFULSETS, s), (CONTROLLERREVISIONS, rev), (PODS, p)]).sync("ns/web");
        assert_eq!(deleted(&w, PODS), vec!["ns/web-0"], "{phase}");
        assert!(created(&w, PODS).is_empty(), "{phase}");
        let reasons: Vec<&str> = w.events.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(reasons, vec!["SuccessfulDelete"], "{phase}");
    }
}

#[test]
fn identity_labels_are_repaired() {
    let s = set(1);
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let mut p = pod(&s, 0, &rn, true);
    p["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove(POD_NAME_LABEL);
    let claim = json!({"metadata": {"name": "data-web-0", "namespace": "ns", "uid": "c0"}});
    let w = harness(&[
        (STATEFULSETS, s),
        (CONTROLLERREVISIONS, rev),
        (PODS, p),
        (PERSISTENTVOLUMECLAIMS, claim),
    ])
    .sync("ns/web");
    assert_eq!(w.patches.len(), 1);
    assert_eq!(
        w.patches[0].2["metadata"]["labels"][POD_NAME_LABEL],
        "web-0"
    );
    assert_eq!(w.events[0].1, "SuccessfulUpdate");
}

#[test]
fn max_unavailable_gauges_follow_the_syncs() {
    let mut s = set(4);
    s["metadata"]["name"] = json!("gauged");
    s["spec"]["selector"] = json!({"matchLabels": {"app": "gauged"}});
    s["spec"]["template"]["metadata"]["labels"] = json!({"app": "gauged"});
    s["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!("50%");
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let mut objs = vec![(STATEFULSETS, s.clone()), (CONTROLLERREVISIONS, rev)];
    for o in 0..4 {
        objs.push((PODS, pod(&s, o, &rn, o != 3)));
    }
    harness(&objs).sync("ns/gauged");
    let series = |family: &str| -> Vec<f64> {
        metrics::families()
            .into_iter()
            .filter(|f| f.name == family)
            .flat_map(|f| f.samples)
            .filter(|x| {
                x.labels
                    .iter()
                    .any(|(k, v)| k == "statefulset_name" && v == "gauged")
            })
            .map(|x| match x.value {
                crate::metrics::SampleValue::Scalar(v) => v,
                _ => f64::NAN,
            })
            .collect()
    };
    assert_eq!(
        series("statefulset_controller_statefulset_max_unavailable"),
        [2.0]
    );
    // web-3 is not ready: one unavailable. (OrderedReady stops at it before the rolling
    // update, so the gauge is only set once the range is healthy.)
    let mut objs = objs.clone();
    objs[5] = (PODS, pod(&s, 3, &rn, true));
    harness(&objs).sync("ns/gauged");
    assert_eq!(
        series("statefulset_controller_statefulset_unavailable_replicas"),
        [0.0]
    );
}

#[test]
fn existing_claims_of_new_and_pending_pods_get_their_references() {
    let mut s = set(1);
    s["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Delete", "whenScaled": "Retain"});
    let rev = revision_of(&s);
    let rn = obj::name(&rev).to_string();
    let claim = json!({"metadata": {"name": "data-web-0", "namespace": "ns", "uid": "c0"}});
    let want = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
        "uid": "uid-web", "controller": true, "blockOwnerDeletion": true}]);
    let claim_update = |w: &Writes| {
        w.updates
            .iter()
            .find(|u| u.0 == PERSISTENTVOLUMECLAIMS)
            .map(|u| u.2["metadata"]["ownerReferences"].clone())
    };
    // The pod is made: the claim that was there gets the set's reference.
    let w = harness(&[
        (STATEFULSETS, s.clone()),
        (CONTROLLERREVISIONS, rev.clone()),
        (PERSISTENTVOLUMECLAIMS, claim.clone()),
    ])
    .sync("ns/web");
    assert_eq!(created(&w, PODS), vec!["web-0"]);
    assert_eq!(claim_update(&w), Some(want.clone()));
    // A Pending pod (OrderedReady waits for it): fixed too.
    let w = harness(&[
        (STATEFULSETS, s.clone()),
        (CONTROLLERREVISIONS, rev),
        (PODS, pod(&s, 0, &rn, false)),
        (PERSISTENTVOLUMECLAIMS, claim),
    ])
    .sync("ns/web");
    assert_eq!(claim_update(&w), Some(want));
}
