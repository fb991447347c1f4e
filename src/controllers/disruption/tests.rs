use super::decide::*;
use super::*;
use crate::controllers::testing::Harness;
use serde_json::{json, Value};

const T0: &str = "2024-01-01T00:00:00Z";

fn at(s: &str) -> SystemTime {
    crate::compat::timefmt::parse_rfc3339(s).expect("time")
}

fn pdb(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "5", "generation": 1},
        "spec": spec,
    })
}

fn pod(name: &str, ready: bool, owner: Option<(&str, &str, &str)>) -> Value {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "7", "labels": {"app": "web"}},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    });
    if let Some((api_version, kind, name)) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind,
            "name": name, "uid": format!("uid-{name}"), "controller": true}]);
    }
    p
}

fn owned(
    kind: &str,
    api_version: &str,
    name: &str,
    replicas: i64,
    owner: Option<(&str, &str)>,
) -> Value {
    let mut o = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"replicas": replicas},
    });
    if let Some((k, n)) = owner {
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": k,
            "name": n, "uid": format!("uid-{n}"), "controller": true}]);
    }
    o
}

fn harness() -> Harness<DisruptionController> {
    Harness::new(DisruptionController::default()).at(T0)
}

fn status_of(h: &Harness<DisruptionController>, key: &str) -> Value {
    let w = h.sync(key);
    assert_eq!(w.updates.len(), 1, "one status write: {w:?}");
    assert_eq!(w.updates[0].1, Some("status"));
    w.updates[0].2["status"].clone()
}

fn web_selector() -> Value {
    json!({"matchLabels": {"app": "web"}})
}

#[test]
fn min_available_int_counts_selected_pods() {
    let mut h = harness();
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("b", json!({"minAvailable": 2, "selector": web_selector()})),
    );
    assert_eq!(h.take_queued(), ["ns/b"]);
    for (n, r) in [("a", true), ("b", true), ("c", true), ("d", false)] {
        h.add(PODS, pod(n, r, None));
    }
    assert_eq!(h.take_queued(), ["ns/b"]);
    let s = status_of(&h, "ns/b");
    assert_eq!(s["currentHealthy"], 3);
    assert_eq!(s["desiredHealthy"], 2);
    assert_eq!(s["expectedPods"], 4);
    assert_eq!(s["disruptionsAllowed"], 1);
    assert_eq!(s["observedGeneration"], 1);
    assert_eq!(
        s["conditions"],
        json!([{"type": "DisruptionAllowed", "status": "True", "observedGeneration": 1,
            "lastTransitionTime": T0, "reason": "SufficientPods", "message": ""}])
    );
    assert!(s.get("disruptedPods").is_none());
    // Unmanaged pods are fine with an integer minAvailable.
    assert!(h.sync("ns/b").events.is_empty());
}

#[test]
fn an_up_to_date_status_is_not_written_again() {
    let mut h = harness();
    let mut b = pdb("b", json!({"minAvailable": 1, "selector": web_selector()}));
    h.add(PODS, pod("a", true, None));
    b["status"] = json!({"observedGeneration": 1, "currentHealthy": 1, "desiredHealthy": 1,
        "expectedPods": 1, "disruptionsAllowed": 0,
        "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
            "message": "", "lastTransitionTime": "2023-01-01T00:00:00Z", "observedGeneration": 1}]});
    h.add(PODDISRUPTIONBUDGETS, b.clone());
    assert!(h.sync("ns/b").updates.is_empty());
    // A new generation is observed.
    b["metadata"]["generation"] = json!(2);
    b["metadata"]["resourceVersion"] = json!("6");
    h.update(PODDISRUPTIONBUDGETS, b);
    let s = status_of(&h, "ns/b");
    assert_eq!(s["observedGeneration"], 2);
    assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
    assert_eq!(s["conditions"][0]["status"], "False");
}

#[test]
fn max_unavailable_percent_uses_the_deployment_scale_and_rounds_up() {
    let mut h = harness();
    h.add(DEPLOYMENTS, owned("Deployment", "apps/v1", "d", 5, None));
    h.add(
        REPLICASETS,
        owned("ReplicaSet", "apps/v1", "d-1", 3, Some(("Deployment", "d"))),
    );
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb(
            "b",
            json!({"maxUnavailable": "30%", "selector": web_selector()}),
        ),
    );
    for n in ["p1", "p2", "p3", "p4"] {
        h.add(PODS, pod(n, true, Some(("apps/v1", "ReplicaSet", "d-1"))));
    }
    let s = status_of(&h, "ns/b");
    // 30 % of 5 rounds up to 2: 3 must stay healthy.
    assert_eq!(s["expectedPods"], 5);
    assert_eq!(s["desiredHealthy"], 3);
    assert_eq!(s["currentHealthy"], 4);
    assert_eq!(s["disruptionsAllowed"], 1);
}

#[test]
fn min_available_percent_sums_replicasets_statefulsets_and_rcs() {
    let mut h = harness();
    h.add(REPLICASETS, owned("ReplicaSet", "apps/v1", "rs", 2, None));
    h.add(STATEFULSETS, owned("StatefulSet", "apps/v1", "ss", 3, None));
    h.add(
        REPLICATIONCONTROLLERS,
        owned("ReplicationController", "v1", "rc", 5, None),
    );
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("b", json!({"minAvailable": "50%", "selector": {}})),
    );
    h.add(PODS, pod("r1", true, Some(("apps/v1", "ReplicaSet", "rs"))));
    h.add(PODS, pod("r2", true, Some(("apps/v1", "ReplicaSet", "rs"))));
    h.add(
        PODS,
        pod("s0", true, Some(("apps/v1", "StatefulSet", "ss"))),
    );
    h.add(
        PODS,
        pod("c1", false, Some(("v1", "ReplicationController", "rc"))),
    );
    let s = status_of(&h, "ns/b");
    assert_eq!(s["expectedPods"], 10);
    assert_eq!(s["desiredHealthy"], 5);
    assert_eq!(s["currentHealthy"], 3);
    assert_eq!(s["disruptionsAllowed"], 0);
    assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
}

#[test]
fn unmanaged_pods_are_reported_with_a_percentage() {
    let mut h = harness();
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb(
            "b",
            json!({"maxUnavailable": 1, "selector": web_selector()}),
        ),
    );
    h.add(PODS, pod("a", true, None));
    let w = h.sync("ns/b");
    assert_eq!(w.events.len(), 1);
    assert_eq!(w.events[0].1, "UnmanagedPods");
    assert!(w.events[0].2.contains(
        "(selector: &LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},})"
    ));
    // No controller: nothing expected, nothing allowed.
    assert_eq!(w.updates[0].2["status"]["expectedPods"], 0);
    assert_eq!(w.updates[0].2["status"]["disruptionsAllowed"], 0);
}

#[test]
fn no_pods_is_an_event_every_sync() {
    let mut h = harness();
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("b", json!({"minAvailable": 1, "selector": web_selector()})),
    );
    let w = h.sync("ns/b");
    assert_eq!(
        w.events,
        [(
            EventType::Normal,
            "NoPods".into(),
            "No matching pods found".into()
        )]
    );
    assert_eq!(w.updates[0].2["status"]["disruptionsAllowed"], 0);
    // A budget without a selector selects nothing, even with pods around.
    h.add(PODS, pod("a", true, None));
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("none", json!({"minAvailable": 1})),
    );
    assert_eq!(h.sync("ns/none").events[0].1, "NoPods");
}

#[test]
fn a_controller_found_nowhere_fails_safe() {
    let mut h = harness();
    let mut b = pdb(
        "b",
        json!({"maxUnavailable": 1, "selector": web_selector()}),
    );
    b["status"] = json!({"observedGeneration": 1, "disruptionsAllowed": 2, "currentHealthy": 3,
        "desiredHealthy": 1, "expectedPods": 3,
        "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
            "message": "", "lastTransitionTime": "2023-01-01T00:00:00Z", "observedGeneration": 1}]});
    h.add(PODDISRUPTIONBUDGETS, b);
    // Its ReplicaSet is not in the cache, and a ReplicaSet has a scale subresource: upstream
    // reads it live; here the client reaches nothing, so reading fails.
    h.add(
        PODS,
        pod("a", true, Some(("apps/v1", "ReplicaSet", "gone"))),
    );
    let w = h.sync("ns/b");
    assert_eq!(w.events.len(), 1);
    assert_eq!(w.events[0].0, EventType::Warning);
    assert_eq!(w.events[0].1, "CalculateExpectedPodCountFailed");
    assert!(w.events[0]
        .2
        .starts_with("Failed to calculate the number of expected pods: "));
    let s = &w.updates[0].2["status"];
    assert_eq!(s["disruptionsAllowed"], 0);
    // Everything else stays as it was.
    assert_eq!(s["currentHealthy"], 3);
    let c = &s["conditions"][0];
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "SyncFailed");
    assert_eq!(c["lastTransitionTime"], T0);
    assert_eq!(c["observedGeneration"], 1);
}

#[test]
fn an_invalid_selector_fails_safe_with_a_no_pods_warning() {
    let mut h = harness();
    let sel = json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]});
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("b", json!({"minAvailable": 1, "selector": sel})),
    );
    let w = h.sync("ns/b");
    assert_eq!(w.events[0].0, EventType::Warning);
    assert_eq!(w.events[0].1, "NoPods");
    assert!(w.events[0].2.starts_with("Failed to get pods: "));
    assert_eq!(
        w.updates[0].2["status"]["conditions"][0]["reason"],
        "SyncFailed"
    );
}

#[test]
fn disrupted_pods_hold_for_two_minutes_then_expire() {
    let mut b = pdb("b", json!({"minAvailable": 1, "selector": web_selector()}));
    b["status"] = json!({"observedGeneration": 1,
        "disruptedPods": {"a": "2024-01-01T00:00:00Z", "gone": "2024-01-01T00:00:00Z"}});
    let mut h = harness().at("2024-01-01T00:01:00Z");
    h.add(PODDISRUPTIONBUDGETS, b);
    h.add(PODS, pod("a", true, None));
    h.add(PODS, pod("c", true, None));
    let w = h.sync("ns/b");
    let s = &w.updates[0].2["status"];
    // "a" is disrupted (not healthy) for another minute; "gone" is not a selected pod.
    assert_eq!(s["disruptedPods"], json!({"a": "2024-01-01T00:00:00Z"}));
    assert_eq!(s["currentHealthy"], 1);
    assert_eq!(s["disruptionsAllowed"], 0);
    // Looked at again when the record runs out.
    assert_eq!(w.requeue_after, Some(Duration::from_secs(60)));
    assert!(w.events.is_empty());

    // Past two minutes: dropped, with NotDeleted on the pod, and healthy again.
    h.now = at("2024-01-01T00:02:01Z");
    let w = h.sync("ns/b");
    assert_eq!(
        w.events,
        [(
            EventType::Warning,
            "NotDeleted".into(),
            "Pod was expected by PDB ns/ns to be deleted but it wasn't".into()
        )]
    );
    let s = &w.updates[0].2["status"];
    assert!(s.get("disruptedPods").is_none());
    assert_eq!(s["currentHealthy"], 2);
    assert_eq!(s["disruptionsAllowed"], 1);
    assert_eq!(w.requeue_after, None);
}

#[test]
fn pods_being_deleted_are_neither_healthy_nor_recorded() {
    let mut b = pdb("b", json!({"minAvailable": 0, "selector": web_selector()}));
    b["status"] = json!({"disruptedPods": {"a": T0}});
    let mut h = harness();
    h.add(PODDISRUPTIONBUDGETS, b);
    let mut p = pod("a", true, None);
    p["metadata"]["deletionTimestamp"] = json!(T0);
    h.add(PODS, p);
    let s = status_of(&h, "ns/b");
    assert_eq!(s["currentHealthy"], 0);
    assert!(s.get("disruptedPods").is_none());
}

#[test]
fn pod_changes_queue_every_budget_selecting_it() {
    let mut h = harness();
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb(
            "web",
            json!({"minAvailable": 1, "selector": web_selector()}),
        ),
    );
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("all", json!({"minAvailable": 1, "selector": {}})),
    );
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb(
            "db",
            json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}),
        ),
    );
    h.add(
        PODDISRUPTIONBUDGETS,
        pdb("nothing", json!({"minAvailable": 1})),
    );
    h.take_queued();
    h.add(PODS, pod("a", true, None));
    assert_eq!(h.take_queued(), ["multiple:ns/a", "ns/all", "ns/web"]);
    assert_eq!(
        h.sync("multiple:ns/a").events,
        [(
            EventType::Warning,
            "MultiplePodDisruptionBudgets".into(),
            "Pod \"ns\"/\"a\" matches multiple PodDisruptionBudgets.  Chose \"all\" arbitrarily."
                .into()
        )]
    );
    h.delete(PODS, pod("a", true, None));
    assert_eq!(h.take_queued(), ["ns/all", "ns/web"]);
    // Controllers' changes queue nothing.
    h.add(REPLICASETS, owned("ReplicaSet", "apps/v1", "rs", 2, None));
    assert!(h.take_queued().is_empty());
}

fn disrupted_pod(reason: &str, since: &str) -> Value {
    let mut p = pod("a", true, None);
    p["status"]["conditions"] = json!([
        {"type": "Ready", "status": "True", "lastTransitionTime": T0},
        {"type": "DisruptionTarget", "status": "True", "reason": reason,
            "message": "Eviction API: evicting", "lastTransitionTime": since},
    ]);
    p
}

#[test]
fn a_stale_disruption_target_is_reset_after_two_minutes() {
    let mut h = harness().at("2024-01-01T00:01:30Z");
    h.add(PODS, disrupted_pod("EvictionByEvictionAPI", T0));
    assert_eq!(h.take_queued(), ["pod:ns/a"]);
    // Not yet: looked at again when it becomes stale.
    let w = h.sync("pod:ns/a");
    assert!(w.patches.is_empty());
    assert_eq!(w.requeue_after, Some(Duration::from_secs(30)));

    h.now = at("2024-01-01T00:02:00Z");
    let w = h.sync("pod:ns/a");
    assert_eq!(w.patches.len(), 1);
    let (kind, key, patch) = &w.patches[0];
    assert_eq!((*kind, key.as_str()), (PODS, "ns/a"));
    assert_eq!(
        patch,
        &json!({
            "metadata": {"resourceVersion": "7"},
            "status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "DisruptionTarget"}],
                "conditions": [{"type": "DisruptionTarget", "status": "False",
                    "lastTransitionTime": "2024-01-01T00:02:00Z", "reason": null, "message": null}],
            },
        })
    );
    // A pod with a generation: the reset condition observes it (PodObservedGenerationTracking).
    let mut g = harness().at("2024-01-01T00:02:00Z");
    let mut p = disrupted_pod("EvictionByEvictionAPI", T0);
    p["metadata"]["generation"] = json!(3);
    g.add(PODS, p);
    let w = g.sync("pod:ns/a");
    assert_eq!(
        w.patches[0].2["status"]["conditions"][0]["observedGeneration"],
        3
    );
}

#[test]
fn disruption_targets_left_alone() {
    let now = at("2024-01-01T01:00:00Z");
    // Set by the kubelet.
    assert_eq!(
        stale_disruption(&disrupted_pod("TerminationByKubelet", T0), now),
        None
    );
    // Terminal.
    let mut p = disrupted_pod("EvictionByEvictionAPI", T0);
    p["status"]["phase"] = json!("Failed");
    assert_eq!(stale_disruption(&p, now), None);
    // Being deleted.
    let mut p = disrupted_pod("EvictionByEvictionAPI", T0);
    p["metadata"]["deletionTimestamp"] = json!(T0);
    assert_eq!(stale_disruption(&p, now), None);
    // False already.
    let mut p = disrupted_pod("EvictionByEvictionAPI", T0);
    p["status"]["conditions"][1]["status"] = json!("False");
    assert_eq!(stale_disruption(&p, now), None);
    // Stale.
    assert_eq!(
        stale_disruption(&disrupted_pod("DeletionByTaintManager", T0), now),
        Some(Duration::ZERO)
    );
    // A pod gone from the cache: nothing to do.
    let h = harness();
    assert!(h.sync("pod:ns/a").patches.is_empty());
}

#[test]
fn scaled_values_as_upstream() {
    assert_eq!(scaled_value(&json!(3), 10), Ok(3));
    assert_eq!(scaled_value(&json!("25%"), 10), Ok(3));
    assert_eq!(scaled_value(&json!("0%"), 10), Ok(0));
    assert_eq!(scaled_value(&json!("100%"), 7), Ok(7));
    assert_eq!(
        scaled_value(&json!("3"), 10),
        Err("invalid value for IntOrString: invalid type: string is not a percentage".into())
    );
    assert!(scaled_value(&json!("x%"), 10)
        .unwrap_err()
        .contains("invalid syntax"));
    // maxUnavailable above the scale wants nobody healthy.
    assert_eq!(Budget::MaxUnavailable(json!(9)).counts(3, 0), Ok((3, 0)));
    assert_eq!(Budget::None.counts(3, 4), Ok((0, 0)));
}

#[test]
fn go_selector_text() {
    let sel = json!({"matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]}]});
    assert_eq!(
        go_selector(Some(&sel)),
        "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],},},}"
    );
    assert_eq!(go_selector(None), "nil");
}
