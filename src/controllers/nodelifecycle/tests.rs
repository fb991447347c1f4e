use super::health::{self, look, Grace, Health, Rates, ZoneState};
use super::queue::{Limiter, ZoneQueue};
use super::taints::{self, Taint};
use crate::compat::timefmt::{parse_rfc3339, rfc3339};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

const GRACE: Grace = Grace {
    monitor: Duration::from_secs(40),
    startup: Duration::from_secs(60),
};

fn t(s: &str) -> SystemTime {
    parse_rfc3339(s).expect("time")
}

fn at(base: &str, secs: u64) -> SystemTime {
    t(base) + Duration::from_secs(secs)
}

const T0: &str = "2024-01-01T00:00:00Z";

fn node(ready: Option<(&str, &str)>) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "5", "creationTimestamp": T0},
        "spec": {}, "status": {}});
    if let Some((status, heartbeat)) = ready {
        n["status"]["conditions"] = json!([
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": T0},
            {"type": "Ready", "status": status, "reason": "KubeletReady",
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": T0}]);
    }
    n
}

fn lease(renew: &str) -> Value {
    json!({"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"renewTime": renew}})
}

#[test]
fn a_node_seen_first_is_healthy_until_the_grace_period_passes() {
    let n = node(Some(("True", T0)));
    let l = look(&n, None, None, GRACE, at(T0, 10));
    assert!(l.update.is_none());
    assert_eq!(l.health.probe, at(T0, 10));
    let l2 = look(&n, Some(&l.health), None, GRACE, at(T0, 50));
    assert!(
        l2.update.is_none(),
        "40 s after the first look is not over the grace period"
    );
    let l3 = look(&n, Some(&l2.health), None, GRACE, at(T0, 51));
    let u = l3.update.expect("Ready goes Unknown");
    let ready = health::condition(&u, "Ready").unwrap();
    assert_eq!(ready["status"], "Unknown");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert_eq!(ready["lastTransitionTime"], rfc3339(at(T0, 51)));
    assert_eq!(ready["lastHeartbeatTime"], T0, "the heartbeat stays");
    let mem = health::condition(&u, "MemoryPressure").unwrap();
    assert_eq!(mem["status"], "Unknown");
    for never in ["DiskPressure", "PIDPressure"] {
        let c = health::condition(&u, never).unwrap();
        assert_eq!(c["status"], "Unknown");
        assert_eq!(c["reason"], "NodeStatusNeverUpdated");
        assert_eq!(c["message"], "Kubelet never posted node status.");
        assert_eq!(
            c["lastHeartbeatTime"], T0,
            "{never}: the node's creation time"
        );
    }
    assert_eq!(health::cond_status(Some(&l3.observed)), "True");
    assert_eq!(health::cond_status(l3.current.as_ref()), "Unknown");
    assert_eq!(l3.health_after_update.unwrap().ready_transition, at(T0, 51));
}

#[test]
fn a_renewed_lease_or_a_new_heartbeat_keeps_a_node_alive() {
    let n = node(Some(("True", T0)));
    let l = look(
        &n,
        None,
        Some(&lease("2024-01-01T00:00:10.000000Z")),
        GRACE,
        at(T0, 10),
    );
    // The lease renews: the probe moves with each newer renew time.
    let l = look(
        &n,
        Some(&l.health),
        Some(&lease("2024-01-01T00:00:40.123456Z")),
        GRACE,
        at(T0, 45),
    );
    assert_eq!(l.health.probe, at(T0, 45));
    let l = look(
        &n,
        Some(&l.health),
        Some(&lease("2024-01-01T00:00:40.123456Z")),
        GRACE,
        at(T0, 85),
    );
    assert!(l.update.is_none());
    // The same renew time is no sign of life.
    let l = look(
        &n,
        Some(&l.health),
        Some(&lease("2024-01-01T00:00:40.123456Z")),
        GRACE,
        at(T0, 86),
    );
    assert!(l.update.is_some(), "41 s after the last renewal");
    // A new heartbeat in the status is one.
    let beat = node(Some(("True", "2024-01-01T00:01:20Z")));
    let l2 = look(&beat, Some(&l.health), None, GRACE, at(T0, 86));
    assert!(l2.update.is_none());
    assert_eq!(l2.health.probe, at(T0, 86));
}

#[test]
fn a_node_that_never_reported_gets_the_startup_grace_period() {
    let n = node(None);
    // Probed from its creation time.
    let l = look(&n, None, None, GRACE, at(T0, 59));
    assert!(l.update.is_none());
    assert_eq!(l.health.probe, t(T0));
    let l = look(&n, Some(&l.health), None, GRACE, at(T0, 61));
    let u = l.update.expect("conditions written");
    let ready = health::condition(&u, "Ready").unwrap();
    assert_eq!(ready["reason"], "NodeStatusNeverUpdated");
    assert_eq!(health::cond_status(Some(&l.observed)), "Unknown");
}

#[test]
fn an_unknown_node_is_not_written_again() {
    let mut n = node(Some(("Unknown", T0)));
    n["status"]["conditions"][1]["reason"] = json!("NodeStatusUnknown");
    n["status"]["conditions"][1]["message"] = json!("Kubelet stopped posting node status.");
    let h = Health {
        probe: t(T0),
        ready_transition: t(T0),
        ready: health::condition(&n, "Ready").cloned(),
        lease: None,
    };
    let l = look(&n, Some(&h), None, GRACE, at(T0, 100));
    assert!(l.update.is_none(), "Ready is Unknown already");
}

#[test]
fn zone_states_follow_upstream() {
    assert_eq!(
        health::zone_state(&["True", "True"], 0.55),
        (0, ZoneState::Normal)
    );
    assert_eq!(
        health::zone_state(&["False", "Unknown"], 0.55),
        (2, ZoneState::FullDisruption)
    );
    // Fewer than three not ready is never a partial disruption.
    assert_eq!(
        health::zone_state(&["True", "False", "Unknown"], 0.55).1,
        ZoneState::Normal
    );
    let s = ["True", "True", "False", "Unknown", ""];
    assert_eq!(
        health::zone_state(&s, 0.55),
        (3, ZoneState::PartialDisruption)
    );
    assert_eq!(health::zone_state(&s, 0.7).1, ZoneState::Normal);
    assert_eq!(health::zone_state(&[], 0.55), (0, ZoneState::Normal));
    let r = Rates {
        healthy: 0.1,
        secondary: 0.01,
        large_cluster_threshold: 50,
    };
    assert_eq!(r.for_state(ZoneState::Normal, 10), Some(0.1));
    assert_eq!(r.for_state(ZoneState::PartialDisruption, 50), Some(0.0));
    assert_eq!(r.for_state(ZoneState::PartialDisruption, 51), Some(0.01));
    assert_eq!(r.for_state(ZoneState::FullDisruption, 51), Some(0.1));
    assert_eq!(r.for_state(ZoneState::Initial, 51), None);
}

#[test]
fn zone_keys_and_exclusion() {
    let mut n = node(None);
    assert_eq!(health::zone_key(&n), "");
    n["metadata"]["labels"] = json!({"topology.kubernetes.io/zone": "z1",
        "failure-domain.beta.kubernetes.io/region": "r1"});
    assert_eq!(health::zone_key(&n), "r1:\u{0}:z1");
    assert!(!health::excluded_from_disruption(&n));
    n["metadata"]["labels"]["node.kubernetes.io/exclude-disruption"] = json!("");
    assert!(health::excluded_from_disruption(&n));
}

#[test]
fn the_token_bucket_allows_one_then_the_rate() {
    let t0 = Instant::now();
    let mut b = Limiter::new(0.1);
    assert!(b.try_accept(t0));
    assert!(!b.try_accept(t0 + Duration::from_secs(9)));
    assert!(b.try_accept(t0 + Duration::from_secs(10)));
    let mut never = Limiter::new(0.0);
    assert!(!never.try_accept(t0 + Duration::from_secs(1000)));
}

#[test]
fn the_zone_queue_takes_nodes_at_the_limiter_rate_once_each() {
    let t0 = Instant::now();
    let mut q = ZoneQueue::new(1.0);
    assert!(q.add("a", "ua", t0));
    assert!(q.add("b", "ub", t0));
    assert!(!q.add("a", "ua", t0), "already queued");
    let mut seen = Vec::new();
    q.try_process(t0, |v| {
        seen.push(v.value.clone());
        (true, Duration::ZERO)
    });
    assert_eq!(seen, ["a"], "one token");
    assert_eq!(q.next_due(t0), Some(Duration::from_secs(1)));
    q.try_process(t0 + Duration::from_secs(1), |v| {
        seen.push(v.value.clone());
        (true, Duration::ZERO)
    });
    assert_eq!(seen, ["a", "b"]);
    assert!(q.is_empty());
    // Processed nodes are not added again until removed.
    assert!(!q.add("a", "ua", t0));
    assert!(q.remove("a"));
    assert!(q.add("a", "ua", t0));
    // A failure puts it back for later.
    let t2 = t0 + Duration::from_secs(5);
    q.try_process(t2, |_| (false, Duration::from_millis(50)));
    assert_eq!(q.len(), 1);
    // Swapping to zero stops everything.
    q.swap_limiter(0.0, t2);
    let mut n = 0;
    q.try_process(t2 + Duration::from_secs(100), |_| {
        n += 1;
        (true, Duration::ZERO)
    });
    assert_eq!(n, 0);
    assert_eq!(q.next_due(t2), None);
}

fn taint(key: &str, value: &str, effect: &str) -> Value {
    json!({"key": key, "value": value, "effect": effect})
}

#[test]
fn no_schedule_taints_follow_conditions() {
    let mut n = node(Some(("False", T0)));
    n["status"]["conditions"][0]["status"] = json!("True");
    n["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "NetworkUnavailable", "status": "True"}));
    n["spec"]["unschedulable"] = json!(true);
    n["spec"]["taints"] = json!([
        taint(taints::UNREACHABLE, "", "NoSchedule"),
        taint("example.com/own", "", "NoSchedule"),
        taint(taints::NOT_READY, "", "NoExecute"),
    ]);
    let (add, del) = taints::no_schedule_diff(&n);
    assert_eq!(
        add,
        [
            Taint::new("node.kubernetes.io/memory-pressure", "NoSchedule"),
            Taint::new(taints::NOT_READY, "NoSchedule"),
            Taint::new("node.kubernetes.io/network-unavailable", "NoSchedule"),
            Taint::new(taints::UNSCHEDULABLE, "NoSchedule"),
        ]
    );
    assert_eq!(del, [Taint::new(taints::UNREACHABLE, "NoSchedule")]);
}

#[test]
fn taint_patches_replace_the_list_with_a_resource_version() {
    let mut n = node(None);
    n["spec"]["taints"] = json!([taint("a", "", "NoSchedule"),
        {"key": taints::UNREACHABLE, "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}]);
    let add = [Taint::new(taints::UNREACHABLE, "NoExecute").to_json("2024-01-01T00:00:09Z")];
    let list = taints::with_added(&n, &add).expect("time differs: replaced");
    assert_eq!(list[1]["timeAdded"], "2024-01-01T00:00:09Z");
    let same = [Taint::new(taints::UNREACHABLE, "NoExecute").to_json("2024-01-01T00:00:00Z")];
    assert_eq!(taints::with_added(&n, &same), None);
    let kept = taints::with_removed(&n, &[Taint::new(taints::UNREACHABLE, "NoExecute")]).unwrap();
    assert_eq!(
        taints::taints_patch("7", kept),
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"taints": [taint("a", "", "NoSchedule")]}})
    );
    assert_eq!(
        taints::taints_patch("7", vec![]),
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"taints": null}})
    );
    assert_eq!(
        taints::with_removed(&n, &[Taint::new("zzz", "NoExecute")]),
        None
    );
}

#[test]
fn beta_labels_follow_the_stable_ones() {
    let mut n = node(None);
    assert!(taints::labels_to_reconcile(&n).is_empty());
    n["metadata"]["labels"] = json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
        "beta.kubernetes.io/arch": "arm64"});
    assert_eq!(
        taints::labels_to_reconcile(&n),
        [("beta.kubernetes.io/os", "linux".to_string())]
    );
}

#[test]
fn zone_metrics_follow_the_passes() {
    use super::metrics;
    metrics::zone_seen("test-zone");
    metrics::zone("test-zone", 4, 1);
    metrics::eviction("test-zone");
    let f = metrics::families();
    let value = |name: &str| {
        let fam = f.iter().find(|x| x.name == name).expect(name);
        let s = fam
            .samples
            .iter()
            .find(|s| s.labels == [("zone".to_string(), "test-zone".to_string())])
            .expect("series");
        match s.value {
            crate::metrics::SampleValue::Scalar(v) => v,
            _ => panic!("scalar"),
        }
    };
    assert_eq!(value("node_collector_zone_size"), 4.0);
    assert_eq!(value("node_collector_zone_health"), 75.0);
    assert_eq!(value("node_collector_unhealthy_nodes_in_zone"), 1.0);
    assert!(value("node_collector_evictions_total") >= 1.0);
    metrics::zone_gone("test-zone");
    let f = metrics::families();
    let size = f
        .iter()
        .find(|x| x.name == "node_collector_zone_size")
        .unwrap();
    assert!(size.samples.iter().any(|s| s.labels[0].1 == "test-zone"
        && matches!(s.value, crate::metrics::SampleValue::Scalar(v) if v == 0.0)));
}
