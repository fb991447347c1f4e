//! The Recreate update strategy (StatefulSetRecreateStrategy) and the status conditions.

use super::identity::revision_data;
use super::*;
use crate::controllers::kit::history;
use crate::controllers::testing::{Harness, Writes};
use crate::obj::At as _;
use serde_json::json;

fn set(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web", "resourceVersion": "5",
            "generation": 2},
        "spec": {"replicas": 3, "serviceName": "web", "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "web"}}, "updateStrategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {"replicas": 3}})
}

fn revision(s: &Value, n: i64) -> Value {
    let mut r = history::new_revision(
        &STATEFULSETS,
        s,
        s.at("/spec/template/metadata/labels")
            .and_then(Value::as_object),
        None,
        &revision_data(s),
        n,
        0,
    );
    r["metadata"]["uid"] = json!(format!("rev-{n}"));
    r
}

fn pod(s: &Value, ord: i64, rev: &str, terminating: bool) -> Value {
    let mut p = identity::new_pod(s, ord, rev).expect("pod");
    p["metadata"]["uid"] = json!(format!("p-{ord}"));
    p["metadata"]["resourceVersion"] = json!("9");
    if terminating {
        p["metadata"]["deletionTimestamp"] = json!("2024-06-01T11:59:00Z");
    }
    p["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
        "lastTransitionTime": "2024-06-01T11:00:00Z"}]});
    p
}

fn run(gate: bool, objs: &[(crate::api::Kind, Value)]) -> (Outcome, Writes) {
    let mut ctrl = StatefulSetController::new();
    ctrl.recreate_gate = gate;
    let mut h = Harness::new(ctrl).at("2024-06-01T12:00:00Z");
    for (k, o) in objs {
        h.add(*k, o.clone());
    }
    let o = h.outcome("ns/web");
    let w = Writes::of(&o);
    (o, w)
}

fn status(w: &Writes) -> Option<Value> {
    w.updates
        .iter()
        .find(|(k, sub, _)| *k == STATEFULSETS && *sub == Some("status"))
        .map(|(_, _, o)| o["status"].clone())
}

fn deleted(w: &Writes) -> Vec<String> {
    let mut d: Vec<String> = w.deletes.iter().map(|(_, n)| n.clone()).collect();
    d.sort();
    d
}

/// The old set (image 1) with its three pods, the set now at image 2.
fn rollout(old_pods_terminating: &[bool]) -> (Value, String, Vec<(crate::api::Kind, Value)>) {
    let old = set("img:1");
    let r1 = revision(&old, 1);
    let n1 = obj::name(&r1).to_string();
    let mut s = set("img:2");
    s["status"] = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
        "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": n1,
        "updateRevision": n1, "observedGeneration": 1, "collisionCount": 0});
    let mut objs = vec![(STATEFULSETS, s.clone()), (CONTROLLERREVISIONS, r1)];
    for (ord, t) in old_pods_terminating.iter().enumerate() {
        objs.push((PODS, pod(&old, ord as i64, &n1, *t)));
    }
    (s, n1, objs)
}

#[test]
fn gate_off_a_recreate_set_gets_unknown_strategy_and_nothing_else() {
    let (_, _, objs) = rollout(&[false, false, false]);
    let (o, w) = run(false, &objs);
    assert!(deleted(&w).is_empty());
    assert!(status(&w).is_none(), "no status write");
    let ev: Vec<_> = w
        .events
        .iter()
        .filter(|e| e.1 == "UnknownStrategy")
        .collect();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].0, crate::controllers::EventType::Warning);
    assert_eq!(
        ev[0].2,
        "statefulset ns/web uses Recreate strategy but feature gate StatefulSetRecreateStrategy is disabled"
    );
    assert!(o.retry_quietly.is_some(), "retried as upstream's error");
    // The new revision is still made (upstream makes it before looking at the strategy).
    assert_eq!(
        w.creates
            .iter()
            .filter(|(k, _)| *k == CONTROLLERREVISIONS)
            .count(),
        1
    );
}

#[test]
fn every_old_pod_is_deleted_at_once_and_nothing_is_made_meanwhile() {
    let (_, n1, objs) = rollout(&[false, false, false]);
    let (_, w) = run(true, &objs);
    assert_eq!(deleted(&w), vec!["ns/web-0", "ns/web-1", "ns/web-2"]);
    assert!(!w.creates.iter().any(|(k, _)| *k == PODS));
    let st = status(&w).expect("status");
    assert_eq!(st["currentRevision"], n1);
    let c = &st["conditions"][0];
    assert_eq!(c["type"], "Progressing");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "RecreateInProgress");
    assert_eq!(c["message"], "Deleting old revision pods");
    assert_eq!(c["lastTransitionTime"], "2024-06-01T12:00:00Z");

    // Terminating old pods: waited for, not deleted again, nothing made.
    let (_, _, objs) = rollout(&[true, true, false]);
    let (_, w) = run(true, &objs);
    assert_eq!(deleted(&w), vec!["ns/web-2"]);
    assert!(!w.creates.iter().any(|(k, _)| *k == PODS));
}

#[test]
fn once_the_old_pods_are_gone_new_ones_are_made_and_completion_turns_progressing_false() {
    let (mut s, _, mut objs) = rollout(&[]);
    let r2 = revision(&s, 2);
    let n2 = obj::name(&r2).to_string();
    objs.push((CONTROLLERREVISIONS, r2));
    s["status"]["conditions"] = json!([{"type": "Progressing", "status": "True",
        "reason": "RecreateInProgress", "message": "Deleting old revision pods",
        "lastTransitionTime": "2024-06-01T11:00:00Z"}]);
    objs[0] = (STATEFULSETS, s.clone());
    let (_, w) = run(true, &objs);
    let made: Vec<&Value> = w
        .creates
        .iter()
        .filter(|(k, _)| *k == PODS)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(made.len(), 1, "OrderedReady: web-0 first");
    assert_eq!(made[0]["metadata"]["labels"][REVISION_LABEL], n2);
    let st = status(&w).expect("status");
    let c = &st["conditions"][0];
    assert_eq!(c["message"], "Waiting for new-revision pods to be created");
    assert_eq!(
        c["lastTransitionTime"], "2024-06-01T11:00:00Z",
        "same status"
    );

    // All three updated and ready: complete.
    for ord in 0..3 {
        objs.push((PODS, pod(&s, ord, &n2, false)));
    }
    let (_, w) = run(true, &objs);
    let st = status(&w).expect("status");
    assert_eq!(st["currentRevision"], n2);
    assert_eq!(st["currentReplicas"], 3);
    let c = &st["conditions"][0];
    assert_eq!(
        (&c["status"], &c["reason"], &c["message"]),
        (
            &json!("False"),
            &json!("RecreateCompleted"),
            &json!("All pods recreated successfully")
        )
    );
    assert_eq!(c["lastTransitionTime"], "2024-06-01T12:00:00Z");
}

#[test]
fn on_delete_completes_its_update_as_v1_37_and_conditions_are_kept() {
    let (mut s, _, mut objs) = rollout(&[]);
    s["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    let r2 = revision(&s, 2);
    let n2 = obj::name(&r2).to_string();
    s["status"]["conditions"] = json!([{"type": "Custom", "status": "True",
        "lastTransitionTime": "2024-06-01T11:00:00Z"}]);
    objs[0] = (STATEFULSETS, s.clone());
    objs.push((CONTROLLERREVISIONS, r2));
    for ord in 0..3 {
        objs.push((PODS, pod(&s, ord, &n2, false)));
    }
    let (_, w) = run(false, &objs);
    let st = status(&w).expect("status");
    assert_eq!(st["currentRevision"], n2);
    assert_eq!(st["conditions"], s["status"]["conditions"]);
}
