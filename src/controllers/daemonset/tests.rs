use super::history::{self, HASH_LABEL};
use super::placement::{self, target_node};
use super::*;
use crate::controllers::testing::Harness;
use serde_json::json;

fn ds(name: &str, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "generation": 1, "resourceVersion": "1",
            "annotations": {"deprecated.daemonset.template.generation": "1"}},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "revisionHistoryLimit": 10,
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {}})
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {}})
}

/// A harness with the DaemonSet, its current revision, and the nodes.
fn setup(d: &Value, nodes: &[&str]) -> (Harness<DaemonSetController>, String) {
    let mut h = Harness::new(DaemonSetController::new());
    h.add(DAEMONSETS, d.clone());
    for n in nodes {
        h.add(NODES, node(n));
    }
    let hash = history::hash(&d["spec"]["template"], None);
    let mut rev = history::new_revision(&DAEMONSETS, d, &hash, 1);
    rev["metadata"]["uid"] = json!(format!("rev-{hash}"));
    h.add(CONTROLLERREVISIONS, rev);
    h.take_queued();
    (h, hash)
}

fn pod_on(d: &Value, name: &str, node: &str, hash: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"app": obj::name(d), HASH_LABEL: hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": obj::name(d),
                "uid": obj::uid(d), "controller": true}]},
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready",
            "status": if ready {"True"} else {"False"}, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}})
}

#[test]
fn a_revision_is_made_first_then_one_pod_per_node() {
    let d = ds("agent", "v1");
    let mut h = Harness::new(DaemonSetController::new());
    h.add(DAEMONSETS, d.clone())
        .add(NODES, node("n1"))
        .add(NODES, node("n2"));
    assert_eq!(h.take_queued(), ["ns/agent"]);
    let w = h.sync("ns/agent");
    assert_eq!(w.creates.len(), 1, "{w:?}");
    let (k, rev) = &w.creates[0];
    assert_eq!(*k, CONTROLLERREVISIONS);
    assert_eq!(rev["revision"], 1);
    let hash = obj::label(rev, HASH_LABEL).unwrap().to_string();

    let (h, hash2) = setup(&d, &["n1", "n2"]);
    assert_eq!(hash, hash2);
    let w = h.sync("ns/agent");
    assert_eq!(w.creates.len(), 2, "{w:?}");
    let mut targets: Vec<String> = w
        .creates
        .iter()
        .map(|(_, p)| target_node(p).unwrap())
        .collect();
    targets.sort();
    assert_eq!(targets, ["n1", "n2"]);
    let p = &w.creates[0].1;
    assert_eq!(p["metadata"]["generateName"], "agent-");
    assert_eq!(obj::label(p, HASH_LABEL), Some(hash.as_str()));
    assert_eq!(obj::label(p, "pod-template-generation"), Some("1"));
    let tols = p["spec"]["tolerations"].as_array().unwrap();
    assert_eq!(tols.len(), 6);
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
}

#[test]
fn nodes_that_do_not_fit_get_no_pod_and_misscheduled_pods_are_counted() {
    let mut d = ds("agent", "v1");
    d["spec"]["template"]["spec"]["nodeSelector"] = json!({"role": "edge"});
    let (mut h, hash) = setup(&d, &["n1"]);
    let mut edge = node("n2");
    edge["metadata"]["labels"]["role"] = json!("edge");
    h.add(NODES, edge.clone());
    assert_eq!(
        h.take_queued(),
        ["ns/agent"],
        "a fitting node queues the set"
    );
    h.add(PODS, pod_on(&d, "agent-x", "n1", &hash, true));
    let w = h.sync("ns/agent");
    assert_eq!(w.creates.len(), 1);
    assert_eq!(target_node(&w.creates[0].1).as_deref(), Some("n2"));
    // n1 no longer matches the node selector: its pod goes.
    assert_eq!(w.deletes, [(PODS, "ns/agent-x".to_string())], "{w:?}");

    // A NoSchedule taint stops new pods; a NoExecute one removes them.
    let mut tainted = edge.clone();
    tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
    h.update(NODES, tainted.clone());
    assert_eq!(h.take_queued(), ["ns/agent"]);
    h.add(PODS, pod_on(&d, "agent-z", "n2", &hash, true));
    h.delete(PODS, pod_on(&d, "agent-x", "n1", &hash, true));
    h.take_queued();
    let w = h.sync("ns/agent");
    // A NoSchedule taint not tolerated: the pod stays, counted misscheduled.
    assert!(w.deletes.iter().all(|(_, k)| k != "ns/agent-z"), "{w:?}");
    let st = &w.updates[0].2["status"];
    assert_eq!(st["numberMisscheduled"], 1, "{st}");
    h.delete(PODS, pod_on(&d, "agent-z", "n2", &hash, true));
    tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoExecute"}]);
    h.update(NODES, tainted);
    h.add(PODS, pod_on(&d, "agent-y", "n2", &hash, true));
    h.take_queued();
    let w = h.sync("ns/agent");
    assert_eq!(w.deletes.len(), 1, "{w:?}");
    assert_eq!(w.deletes[0].1, "ns/agent-y");
}

#[test]
fn node_heartbeats_queue_nothing() {
    let d = ds("agent", "v1");
    let (mut h, _) = setup(&d, &["n1"]);
    let mut n = node("n1");
    n["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    h.update(NODES, n);
    assert!(h.take_queued().is_empty());
    h.delete(NODES, node("n1"));
    assert_eq!(h.take_queued(), ["ns/agent"]);
}

#[test]
fn status_counts_and_extra_pods() {
    let d = ds("agent", "v1");
    let (mut h, hash) = setup(&d, &["n1", "n2"]);
    h.add(PODS, pod_on(&d, "a1", "n1", &hash, true));
    h.add(PODS, pod_on(&d, "a2", "n2", "old", false));
    let w = h.sync("ns/agent");
    // n2's pod is old and not available: the rolling update replaces it at once.
    assert_eq!(w.deletes, [(PODS, "ns/a2".to_string())], "{w:?}");
    let out = h.outcome("ns/agent");
    assert!(out.status_after_writes);
    let w = Writes::of(
        &h.ctrl
            .status_after_writes(
                &Cx {
                    cache: &h.cache,
                    now: h.now,
                    client: &h.client,
                },
                "ns/agent",
            )
            .unwrap(),
    );
    let st = &w.updates[0].2["status"];
    assert_eq!(st["desiredNumberScheduled"], 2);
    assert_eq!(st["currentNumberScheduled"], 2);
    assert_eq!(st["numberReady"], 1);
    assert_eq!(st["updatedNumberScheduled"], 1);
    assert_eq!(st["numberUnavailable"], 1);
    assert_eq!(st["observedGeneration"], 1);

    // Two pods on one node: the younger goes.
    let (mut h, hash) = setup(&d, &["n1"]);
    h.add(PODS, pod_on(&d, "a1", "n1", &hash, true));
    let mut young = pod_on(&d, "a0", "n1", &hash, true);
    young["metadata"]["creationTimestamp"] = json!("2024-01-02T00:00:00Z");
    h.add(PODS, young);
    let w = h.sync("ns/agent");
    assert_eq!(w.deletes, [(PODS, "ns/a0".to_string())]);
}

use crate::controllers::testing::Writes;

#[test]
fn failed_pods_are_deleted_with_backoff() {
    let d = ds("agent", "v1");
    let (mut h, hash) = setup(&d, &["n1"]);
    let mut p = pod_on(&d, "a1", "n1", &hash, false);
    p["status"]["phase"] = json!("Failed");
    h.add(PODS, p);
    let w = h.sync("ns/agent");
    assert_eq!(w.deletes, [(PODS, "ns/a1".to_string())]);
    assert_eq!(w.events[0].1, "FailedDaemonPod");
    assert_eq!(
        w.events[0].2,
        "Found failed daemon pod ns/a1 on node n1, will try to kill it"
    );
    let w = h.sync("ns/agent");
    assert!(w.deletes.is_empty(), "in backoff: {w:?}");
    assert_eq!(w.requeue_after, Some(BACKOFF_INITIAL));
}

#[test]
fn rolling_update_respects_max_unavailable_and_surge() {
    let d = ds("agent", "v2");
    let (mut h, _hash) = setup(&d, &["n1", "n2", "n3"]);
    for (p, n) in [("a1", "n1"), ("a2", "n2"), ("a3", "n3")] {
        h.add(PODS, pod_on(&d, p, n, "old", true));
    }
    let w = h.sync("ns/agent");
    assert_eq!(w.deletes.len(), 1, "maxUnavailable 1: {w:?}");
    assert!(w.creates.is_empty());

    let mut s = ds("agent", "v2");
    s["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": "50%"});
    let (mut h, hash) = setup(&s, &["n1", "n2", "n3"]);
    for (p, n) in [("a1", "n1"), ("a2", "n2"), ("a3", "n3")] {
        h.add(PODS, pod_on(&s, p, n, "old", true));
    }
    let w = h.sync("ns/agent");
    assert!(w.deletes.is_empty(), "{w:?}");
    assert_eq!(w.creates.len(), 2, "50% of 3 rounds up to 2 surge pods");
    // A new pod available next to an old one: the old one goes (manage's surge case).
    h.add(PODS, pod_on(&s, "b1", "n1", &hash, true));
    let w = h.sync("ns/agent");
    assert_eq!(w.deletes, [(PODS, "ns/a1".to_string())], "{w:?}");
}

#[test]
fn an_unavailable_old_pod_counts_against_max_unavailable() {
    let mut d = ds("agent", "v2");
    d["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 2, "maxSurge": 0});
    let (mut h, _hash) = setup(&d, &["n1", "n2", "n3", "n4"]);
    h.add(PODS, pod_on(&d, "a1", "n1", "old", false));
    for (p, n) in [("a2", "n2"), ("a3", "n3"), ("a4", "n4")] {
        h.add(PODS, pod_on(&d, p, n, "old", true));
    }
    let w = h.sync("ns/agent");
    // The unavailable old pod goes and uses one of the two: one available old pod more
    // (v1.28 took two more, three pods down at once).
    assert_eq!(w.deletes.len(), 2, "{w:?}");
    assert!(w.deletes.contains(&(PODS, "ns/a1".to_string())), "{w:?}");
}

#[test]
fn surge_keeps_pods_on_sunset_nodes_until_enough_are_available() {
    use crate::obj::Obj;
    use std::collections::BTreeMap;
    let mut d = ds("agent", "v2");
    d["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 1});
    let now = std::time::SystemTime::now();
    let arc = |v: Value| -> Obj { std::sync::Arc::new(v) };
    // n1 no longer wants a pod (say a new NoSchedule taint); n2 and n3 do.
    let plan = |n3_ready: bool, n1_ready: bool| {
        let mut by_node: BTreeMap<String, Vec<Obj>> = BTreeMap::new();
        by_node.insert(
            "n1".into(),
            vec![arc(pod_on(&d, "a1", "n1", "old", n1_ready))],
        );
        by_node.insert("n2".into(), vec![arc(pod_on(&d, "a2", "n2", "old", true))]);
        by_node.insert(
            "n3".into(),
            vec![arc(pod_on(&d, "b3", "n3", "new", n3_ready))],
        );
        placement::rolling_update(&d, &by_node, 2, "new", |n| n != "n1", now).expect("plan")
    };
    // Three available for two wanted: the sunset node's old pod may go; n2 surges, n1 not.
    let r = plan(true, true);
    assert_eq!(r.delete, ["a1"], "{r:?}");
    assert_eq!(r.create_on, ["n2"], "{r:?}");
    // Only two available: it stays until another becomes available.
    let r = plan(false, true);
    assert!(r.delete.is_empty(), "{r:?}");
    // Not available itself: deleted at once.
    let r = plan(false, false);
    assert_eq!(r.delete, ["a1"], "{r:?}");
}

#[test]
fn on_delete_replaces_nothing() {
    let mut d = ds("agent", "v2");
    d["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    let (mut h, _) = setup(&d, &["n1"]);
    h.add(PODS, pod_on(&d, "a1", "n1", "old", true));
    let w = h.sync("ns/agent");
    assert!(w.deletes.is_empty() && w.creates.is_empty(), "{w:?}");
    assert_eq!(w.updates[0].2["status"]["updatedNumberScheduled"], 0);
}

#[test]
fn old_revisions_past_the_limit_are_deleted() {
    let mut d = ds("agent", "v3");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    let (mut h, hash) = setup(&d, &["n1"]);
    for (i, img) in ["v1", "v2"].iter().enumerate() {
        let old = ds("agent", img);
        let hh = history::hash(&old["spec"]["template"], None);
        let mut r = history::new_revision(&DAEMONSETS, &old, &hh, i as i64 + 1);
        r["metadata"]["uid"] = json!(format!("r{i}"));
        h.add(CONTROLLERREVISIONS, r);
    }
    h.add(PODS, pod_on(&d, "a1", "n1", &hash, true));
    let w = h.sync("ns/agent");
    // The current revision (number 1) is raised past the old ones, the oldest goes.
    assert_eq!(
        w.updates
            .iter()
            .filter(|u| u.0 == CONTROLLERREVISIONS)
            .count(),
        1
    );
    assert_eq!(w.deletes.len(), 1, "{w:?}");
    assert_eq!(w.deletes[0].0, CONTROLLERREVISIONS);
}

#[test]
fn a_name_collision_raises_the_collision_count() {
    let d = ds("agent", "v1");
    let mut h = Harness::new(DaemonSetController::new());
    h.add(DAEMONSETS, d.clone());
    let hash = history::hash(&d["spec"]["template"], None);
    let mut other = history::new_revision(&DAEMONSETS, &ds("agent", "zzz"), &hash, 1);
    other["metadata"]["ownerReferences"] = json!([]);
    other["metadata"]["labels"] = json!({"other": "x"});
    h.add(CONTROLLERREVISIONS, other);
    let w = h.sync("ns/agent");
    assert_eq!(w.updates[0].1, Some("status"));
    assert_eq!(w.updates[0].2["status"]["collisionCount"], 1);
}

#[test]
fn affinity_term_replaces_required_terms() {
    let mut spec = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}}});
    placement::set_node_affinity(&mut spec, "n9");
    assert_eq!(target_node(&json!({"spec": spec})).as_deref(), Some("n9"));
    let mut empty = json!({});
    placement::set_node_affinity(&mut empty, "n1");
    assert_eq!(
        empty["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
        "n1"
    );
}

#[test]
fn orphans_selected_are_adopted_and_others_released() {
    let d = ds("agent", "v1");
    let (mut h, hash) = setup(&d, &["n1", "n2"]);
    let mut orphan = pod_on(&d, "o1", "n1", &hash, true);
    orphan["metadata"]["ownerReferences"] = json!([]);
    h.add(PODS, orphan);
    assert_eq!(
        h.take_queued(),
        ["ns/agent"],
        "an orphan it selects queues the set"
    );
    let mut stray = pod_on(&d, "s1", "n2", &hash, true);
    stray["metadata"]["labels"] = json!({"app": "other"});
    h.add(PODS, stray);
    let w = h.sync("ns/agent");
    let patched: Vec<&str> = w.patches.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(patched, ["ns/o1", "ns/s1"], "{w:?}");
    assert_eq!(
        w.patches[0].2["metadata"]["ownerReferences"][0]["kind"],
        "DaemonSet"
    );
    assert_eq!(
        w.patches[1].2["metadata"]["ownerReferences"][0]["$patch"],
        "delete"
    );
    // The adopted pod counts for n1; n2 gets a new one.
    assert_eq!(w.creates.len(), 1);
    assert_eq!(target_node(&w.creates[0].1).as_deref(), Some("n2"));
}

#[test]
fn expectations_hold_back_a_second_create() {
    let d = ds("agent", "v1");
    let (h, _) = setup(&d, &["n1"]);
    h.cache.store(PODS).set_resource_version("5");
    let out = h.outcome("ns/agent");
    let created = json!({"metadata": {"name": "agent-abc", "namespace": "ns", "uid": "p1",
        "resourceVersion": "999999",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
            "uid": "uid-agent", "controller": true}]}});
    let create = match &out.actions[..] {
        [Action::SlowStart(v), ..] => match &v[0] {
            Action::Reported { action, .. } => (**action).clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    h.ctrl
        .applied("ns/agent", &create, Applied::Done(Some(&created)));
    let w = h.sync("ns/agent");
    assert!(
        w.creates.is_empty(),
        "the created pod is not yet seen: {w:?}"
    );
    assert!(w.requeue_after.is_some());
    let st = &w.updates[0].2["status"];
    assert!(st.get("observedGeneration").is_none(), "{st}");
}
