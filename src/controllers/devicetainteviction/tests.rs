use super::state::{pod_work, rule_work, slice_source, taint_due, Out, State, RULE_STATUS_PERIOD};
use super::work::{condition, disruption_patch};
use crate::compat::timefmt::parse_rfc3339;
use crate::obj::Obj;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const ADDED: &str = "2024-01-01T00:00:00Z";

fn now() -> SystemTime {
    parse_rfc3339("2024-01-01T00:00:30Z").unwrap()
}

fn pod(name: &str, uid: &str, node: &str, claim: &str) -> Value {
    json!({"metadata": {"namespace": "ns", "name": name, "uid": uid},
        "spec": {"nodeName": node, "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}})
}

fn claim(name: &str, device: &str, reserved: &[(&str, &str)], tolerations: Value) -> Value {
    let r: Vec<Value> = reserved
        .iter()
        .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
        .collect();
    json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("c-{name}")},
        "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": "gpu.example.com",
            "pool": "node-1", "device": device, "tolerations": tolerations}]}},
            "reservedFor": r}})
}

fn taint(key: &str, effect: &str) -> Value {
    json!({"key": key, "value": "v", "effect": effect, "timeAdded": ADDED})
}

fn slice(name: &str, generation: i64, devices: Value) -> Value {
    json!({"metadata": {"name": name, "uid": "s"}, "spec": {"driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": generation, "resourceSliceCount": 1},
        "devices": devices}})
}

fn rule(name: &str, effect: &str, device: Option<&str>) -> Value {
    let mut sel = json!({"driver": "gpu.example.com"});
    if let Some(d) = device {
        sel["device"] = json!(d);
    }
    json!({"metadata": {"name": name, "uid": format!("r-{name}"), "generation": 1},
        "spec": {"deviceSelector": sel, "taint": taint("rule", effect)}})
}

/// The state and the pods its lookups find.
struct T {
    st: State,
    pods: HashMap<String, Obj>,
}

impl T {
    fn new(pods: &[Value]) -> Self {
        let pods = pods
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                    Arc::new(p.clone()),
                )
            })
            .collect();
        T {
            st: State::default(),
            pods,
        }
    }
    fn claim(&mut self, c: &Value, deleted: bool) -> Vec<Out> {
        let mut out = Vec::new();
        let pods = |_: &str, n: &str| self.pods.get(n).cloned();
        self.st.claim_changed(c, deleted, &pods, now(), &mut out);
        out
    }
    fn slice(&mut self, s: &Value, deleted: bool) -> Vec<Out> {
        let mut out = Vec::new();
        let pods = |_: &str, n: &str| self.pods.get(n).cloned();
        self.st.slice_changed(s, deleted, &pods, now(), &mut out);
        out
    }
    fn rule(&mut self, r: &Value, deleted: bool) -> Vec<Out> {
        let mut out = Vec::new();
        let pods = |_: &str, n: &str| self.pods.get(n).cloned();
        self.st.rule_changed(r, deleted, &pods, now(), &mut out);
        out
    }
}

fn due(name: &str, uid: &str, after: Duration) -> Out {
    Out::Add(pod_work(&format!("ns/{name}"), uid), after)
}

fn cancelled(name: &str, uid: &str) -> Out {
    Out::Cancelled(pod_work(&format!("ns/{name}"), uid))
}

#[test]
fn a_slice_taint_evicts_the_pods_of_claims_allocated_with_the_device() {
    let p = pod("p", "u1", "node-1", "c");
    let mut t = T::new(std::slice::from_ref(&p));
    assert!(t
        .slice(&slice("s1", 1, json!([{"name": "gpu-0"}])), false)
        .is_empty());
    assert_eq!(
        t.claim(&claim("c", "gpu-0", &[("p", "u1")], json!([])), false),
        vec![]
    );
    // Tainted: evicted at once (the taint was added before now).
    let tainted = slice(
        "s1",
        1,
        json!([{"name": "gpu-0", "taints": [taint("k", "NoExecute")]}]),
    );
    assert_eq!(
        t.slice(&tainted, false),
        vec![due("p", "u1", Duration::ZERO)]
    );
    let e = t.st.pod_eviction(&p).unwrap();
    assert_eq!(e.when, parse_rfc3339(ADDED).unwrap());
    let src = slice_source("gpu.example.com", "node-1", "gpu-0", 0);
    assert_eq!(e.reasons, vec![src]);
    // Untainted again: the deletion is cancelled.
    let clean = slice("s1", 1, json!([{"name": "gpu-0"}]));
    let r = cancelled("p", "u1");
    assert_eq!(t.slice(&clean, false), vec![r]);
    // Other effects and other devices are not looked at.
    let other = slice(
        "s1",
        1,
        json!([{"name": "gpu-0", "taints": [taint("k", "NoSchedule")]},
        {"name": "gpu-1", "taints": [taint("k", "NoExecute")]}]),
    );
    assert!(t.slice(&other, false).is_empty());
    assert!(t.st.pod_eviction(&p).is_none());
}

#[test]
fn only_the_newest_generation_of_a_pool_counts() {
    let p = pod("p", "u1", "node-1", "c");
    let mut t = T::new(std::slice::from_ref(&p));
    t.claim(&claim("c", "gpu-0", &[("p", "u1")], json!([])), false);
    let old = slice(
        "old",
        1,
        json!([{"name": "gpu-0", "taints": [taint("k", "NoExecute")]}]),
    );
    assert_eq!(t.slice(&old, false).len(), 1);
    let new = slice("new", 2, json!([{"name": "gpu-0"}]));
    assert_eq!(t.slice(&new, false).len(), 1, "cancelled");
    assert!(t.st.pod_eviction(&p).is_none());
    // The newer slice gone, the older one counts again.
    assert_eq!(t.slice(&new, true), vec![due("p", "u1", Duration::ZERO)]);
}

#[test]
fn which_pods_a_tainted_claim_hits() {
    let tainted = slice(
        "s1",
        1,
        json!([{"name": "gpu-0", "taints": [taint("k", "NoExecute")]}]),
    );
    // Not scheduled, not the one reserved, or not the owner of a generated claim: untouched.
    let unscheduled = pod("a", "ua", "", "c");
    let other = pod("b", "ub", "node-1", "c");
    let mut generated = pod("g", "ug", "node-1", "");
    generated["spec"]["resourceClaims"] =
        json!([{"name": "gpu", "resourceClaimTemplateName": "t"}]);
    generated["status"] =
        json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]});
    let mut t = T::new(&[unscheduled.clone(), other.clone(), generated.clone()]);
    t.slice(&tainted, false);
    let out = t.claim(
        &claim("c", "gpu-0", &[("a", "ua"), ("g", "ug")], json!([])),
        false,
    );
    assert!(out.is_empty(), "{out:?}");
    assert!(t.st.pod_eviction(&other).is_none());
    assert!(
        t.st.pod_eviction(&generated).is_none(),
        "the pod does not own it"
    );
    let mut owned = claim("c", "gpu-0", &[("a", "ua"), ("g", "ug")], json!([]));
    owned["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "g", "uid": "ug", "controller": true}]);
    assert_eq!(t.claim(&owned, false), vec![due("g", "ug", Duration::ZERO)]);
    // Deallocated: cancelled.
    let mut free = owned.clone();
    free["status"]["allocation"] = Value::Null;
    let r = cancelled("g", "ug");
    assert_eq!(t.claim(&free, false), vec![r]);
}

#[test]
fn tolerations_delay_or_prevent_the_eviction() {
    let t1 = taint("k", "NoExecute");
    let added = parse_rfc3339(ADDED).unwrap();
    let tol = |v: Value| vec![v];
    // None at all: at once.
    assert_eq!(taint_due(&t1, &[]), Some(Some(added)));
    // For ever.
    let forever = json!({"key": "k", "operator": "Exists", "effect": "NoExecute"});
    assert_eq!(taint_due(&t1, &tol(forever)), None);
    // For a while: the shortest; negative counts as zero.
    let secs =
        |n: i64| json!({"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": n});
    assert_eq!(
        taint_due(&t1, &[secs(60), secs(45)]),
        Some(Some(added + Duration::from_secs(45)))
    );
    assert_eq!(taint_due(&t1, &[secs(-5)]), Some(Some(added)));
    // Another value, or no NoExecute effect in the toleration: not tolerated.
    let wrong = json!({"key": "k", "value": "w", "effect": "NoExecute"});
    assert_eq!(taint_due(&t1, &tol(wrong)), Some(Some(added)));
    let any_effect = json!({"operator": "Exists"});
    assert_eq!(taint_due(&t1, &tol(any_effect)), Some(Some(added)));

    // Through a claim: delayed by the toleration.
    let p = pod("p", "u1", "node-1", "c");
    let mut t = T::new(std::slice::from_ref(&p));
    t.slice(
        &slice("s1", 1, json!([{"name": "gpu-0", "taints": [t1.clone()]}])),
        false,
    );
    let out = t.claim(
        &claim("c", "gpu-0", &[("p", "u1")], json!([secs(60)])),
        false,
    );
    assert_eq!(out, vec![due("p", "u1", Duration::from_secs(30))]);
    let mut t = T::new(std::slice::from_ref(&p));
    t.slice(
        &slice("s1", 1, json!([{"name": "gpu-0", "taints": [t1]}])),
        false,
    );
    let forever = json!([{"operator": "Exists", "effect": "NoExecute"}]);
    assert!(t
        .claim(&claim("c", "gpu-0", &[("p", "u1")], forever), false)
        .is_empty());
}

#[test]
fn rules_taint_the_devices_they_select() {
    let p = pod("p", "u1", "node-1", "c");
    let mut t = T::new(std::slice::from_ref(&p));
    t.claim(&claim("c", "gpu-0", &[("p", "u1")], json!([])), false);
    let status_now = |n: &str| Out::Add(rule_work(n, &format!("r-{n}")), Duration::ZERO);
    let status_later = |n: &str| Out::Add(rule_work(n, &format!("r-{n}")), RULE_STATUS_PERIOD);
    // Another device, or no eviction effect: only the status.
    assert_eq!(
        t.rule(&rule("other", "NoExecute", Some("gpu-1")), false),
        vec![status_now("other")]
    );
    assert_eq!(
        t.rule(&rule("none", "None", None), false),
        vec![status_now("none")]
    );
    let out = t.rule(&rule("r1", "NoExecute", None), false);
    assert_eq!(
        out,
        vec![
            status_now("r1"),
            status_later("r1"),
            due("p", "u1", Duration::ZERO)
        ]
    );
    // The same spec again: nothing.
    assert!(t.rule(&rule("r1", "NoExecute", None), false).is_empty());
    // What the None rule would do, and what the evicting one does.
    let pods = [Arc::new(p.clone())];
    assert_eq!(
        t.st.pending_pods(&rule("none", "None", None), &pods),
        (1, 1)
    );
    assert_eq!(
        t.st.pending_pods(&rule("r1", "NoExecute", None), &pods),
        (1, 1)
    );
    assert_eq!(
        t.st.pending_pods(&rule("other", "NoExecute", Some("gpu-1")), &pods),
        (0, 0)
    );
    t.slice(
        &slice("s1", 1, json!([{"name": "gpu-0"}, {"name": "gpu-1"}])),
        false,
    );
    assert_eq!(
        t.st.selected_devices(&rule("none", "None", None)["spec"]),
        (2, 1)
    );
    // The rule deleted: cancelled.
    let r = cancelled("p", "u1");
    assert_eq!(t.rule(&rule("r1", "NoExecute", None), true), vec![r]);
}

#[test]
fn rule_conditions_as_upstream_words_them() {
    let c = |e: &str, counts: [i64; 4], ev: i64| condition(e, counts, ev);
    assert_eq!(
        c("NoExecute", [1, 1, 0, 0], 0),
        (
            "True",
            "PodsPendingEviction",
            "1 pod needs to be evicted in 1 namespace.".into()
        )
    );
    assert_eq!(
        c("NoExecute", [3, 2, 0, 0], 1).2,
        "3 pods need to be evicted in 2 different namespaces. 1 pod evicted since starting the controller."
    );
    assert_eq!(
        c("NoExecute", [0, 0, 0, 0], 2),
        (
            "False",
            "Completed",
            "2 pods evicted since starting the controller.".into()
        )
    );
    assert_eq!(
        c("NoExecute", [0; 4], 0),
        ("False", "NotStarted", String::new())
    );
    assert_eq!(
        c("None", [1, 1, 0, 1], 0).2,
        "0 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update."
    );
    assert_eq!(
        c("NoSchedule", [0; 4], 0),
        (
            "False",
            "OtherEffect",
            "Eviction only happens for the NoExecute effect.".into()
        )
    );
}

#[test]
fn the_disruption_condition_has_no_generation() {
    let now = parse_rfc3339("2024-01-01T00:01:00Z").unwrap();
    let pod = json!({"metadata": {"uid": "p1", "generation": 3}, "status": {}});
    assert_eq!(
        disruption_patch(&pod, now).unwrap(),
        json!({"metadata": {"uid": "p1"}, "status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "DeletionByDeviceTaintManager",
            "message": "Device Taint manager: deleting due to NoExecute taint",
            "lastProbeTime": null, "lastTransitionTime": "2024-01-01T00:01:00Z"}]}})
    );
}

#[test]
fn evicted_pods_are_not_scheduled_again() {
    let p = pod("p", "u1", "node-1", "c");
    let mut t = T::new(std::slice::from_ref(&p));
    t.slice(
        &slice(
            "s1",
            1,
            json!([{"name": "gpu-0", "taints": [taint("k", "NoExecute")]}]),
        ),
        false,
    );
    t.claim(&claim("c", "gpu-0", &[("p", "u1")], json!([])), false);
    let r = pod_work("ns/p", "u1");
    assert!(t.st.delete_at.contains_key(&r));
    t.st.evicted(&r);
    assert!(t.st.was_evicted("u1") && t.st.delete_at.is_empty());
    let mut out = Vec::new();
    t.st.pod_changed(&p, false, now(), &mut out);
    assert!(out.is_empty() && t.st.delete_at.is_empty());
}
