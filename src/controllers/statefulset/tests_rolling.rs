//! Which pods a rolling update deletes (upstream v1.37's `updateStatefulSet` tail and
//! `updateStatefulSetAfterInvariantEstablished`), with MaxUnavailableStatefulSet on and off.

use super::identity::{self as id, max_unavailable};
use super::rolling::rolling_targets;
use super::sync::Slot;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2024-06-01T12:00:00Z.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_717_243_200)
}

fn set(replicas: i64, policy: &str, rolling: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": replicas, "podManagementPolicy": policy,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}})
}

/// How a pod looks: `A` available, `U` running but not ready, `T` terminating and ready;
/// lower case: at the update revision.
fn slots(states: &str) -> Vec<Slot> {
    states
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let rev = if c.is_lowercase() { "new" } else { "old" };
            let ready = matches!(c.to_ascii_uppercase(), 'A' | 'T');
            let mut p = json!({"metadata": {"name": format!("web-{i}"), "namespace": "ns",
                    "labels": {"controller-revision-hash": rev}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready",
                    "status": if ready { "True" } else { "False" },
                    "lastTransitionTime": "2024-06-01T11:00:00Z"}]}});
            if c.eq_ignore_ascii_case(&'T') {
                p["metadata"]["deletionTimestamp"] = json!("2024-06-01T11:59:00Z");
            }
            Slot {
                ord: i as i64,
                pod: (c != '-').then(|| Arc::new(p)),
                revision: rev.to_string(),
            }
        })
        .collect()
}

fn targets(set: &Value, states: &str, gate: bool) -> Vec<String> {
    rolling_targets(set, &slots(states), "new", gate, now()).expect("targets")
}

#[test]
fn max_unavailable_scales_down_and_is_at_least_one() {
    let s = |v: Value| set(5, "OrderedReady", json!({"maxUnavailable": v}));
    assert_eq!(max_unavailable(&s(json!(3)), 5), Ok(3));
    assert_eq!(max_unavailable(&s(json!("50%")), 5), Ok(2));
    assert_eq!(max_unavailable(&s(json!("10%")), 5), Ok(1));
    assert_eq!(max_unavailable(&s(Value::Null), 5), Ok(1));
    assert_eq!(
        max_unavailable(&set(5, "OrderedReady", json!({})), 5),
        Ok(1)
    );
    assert!(max_unavailable(&s(json!("x%")), 5).is_err());
}

#[test]
fn ordered_ready_deletes_up_to_max_unavailable_from_the_top() {
    let s = set(
        5,
        "OrderedReady",
        json!({"partition": 0, "maxUnavailable": 2}),
    );
    assert_eq!(targets(&s, "AAAAA", true), vec!["web-4", "web-3"]);
    // One already unavailable (terminating): one more.
    assert_eq!(targets(&s, "AAAAt", true), vec!["web-3"]);
    // Two unavailable anywhere in the range: none.
    assert!(targets(&s, "UAAAt", true).is_empty());
    // Done pods are passed over.
    assert_eq!(targets(&s, "AAAaa", true), vec!["web-2", "web-1"]);
    // Not past the partition.
    let p = set(
        5,
        "OrderedReady",
        json!({"partition": 4, "maxUnavailable": 3}),
    );
    assert_eq!(targets(&p, "AAAAA", true), vec!["web-4"]);
}

#[test]
fn the_gate_off_replaces_one_pod_at_a_time() {
    let s = set(
        5,
        "OrderedReady",
        json!({"partition": 0, "maxUnavailable": 3}),
    );
    assert_eq!(targets(&s, "AAAAA", false), vec!["web-4"]);
    // An updated pod above that is not available yet holds the update.
    assert!(targets(&s, "AAAAu", false).is_empty());
    assert_eq!(targets(&s, "AAAAa", false), vec!["web-3"]);
}

#[test]
fn parallel_deletes_unavailable_old_pods_first_then_within_the_budget() {
    let s = set(5, "Parallel", json!({"partition": 0, "maxUnavailable": 2}));
    // web-1 is old and not ready: it goes whatever the budget; one more available one.
    assert_eq!(targets(&s, "AUAAA", true), vec!["web-1", "web-4"]);
    // Budget spent by two unavailable old pods: both replaced, nothing else.
    assert_eq!(targets(&s, "UUAAA", true), vec!["web-1", "web-0"]);
    // Unavailable pods already updated block further deletions.
    assert!(targets(&s, "AAAuu", true).is_empty());
    // A missing pod counts as unavailable.
    assert_eq!(targets(&s, "AAAA-", true), vec!["web-3"]);
}

#[test]
fn unavailable_means_not_yet_available_for_min_ready_seconds() {
    let mut s = set(3, "OrderedReady", json!({"partition": 0}));
    // Ready for an hour; 7200 s are asked.
    s["spec"]["minReadySeconds"] = json!(7200);
    let sl = slots("AAa");
    assert!(id::is_unavailable(sl[2].pod.as_deref(), 7200, now()));
    assert!(targets(&s, "AAa", false).is_empty());
    assert!(targets(&s, "AAa", true).is_empty());
    s["spec"]["minReadySeconds"] = json!(0);
    assert_eq!(targets(&s, "AAa", true), vec!["web-1"]);
}
