//! `status.terminatingReplicas` (v1.33, DeploymentReplicaSetTerminatingReplicas): which pods
//! count, how the field is written and compared, and which kind reports it.

use super::tests::{arcs, pod, rs, t, NOW};
use super::*;
use serde_json::json;

#[test]
fn terminating_replicas_reported_as_a_pointer() {
    let now = t(NOW);
    let o = rs("web", 1);
    let sel = json!({"app": "web", "tier": "fe"});
    let pods = arcs(vec![pod("a", Some(&o), sel.clone())]);
    // Reported: 0 is written, not omitted, and absent -> 0 is a change worth a write.
    let st = calculate_status(&o, &pods, Some(0), None, now);
    assert_eq!(st["terminatingReplicas"], 0);
    let upd = status_update(&o, st.clone()).expect("changed");
    assert!(status_update(&upd, st).is_none());
    let st = calculate_status(&upd, &pods, Some(2), None, now);
    assert_eq!(st["terminatingReplicas"], 2);
    let upd = status_update(&upd, st).expect("2 terminating is a change");
    // Not reported (gate off, or a ReplicationController): the field is cleared.
    let st = calculate_status(&upd, &pods, None, None, now);
    assert!(st.get("terminatingReplicas").is_none());
    assert!(status_update(&upd, st).is_some(), "clearing it is a change");
}

#[test]
fn terminating_pods() {
    let mut p = pod("a", None, json!({}));
    assert!(!is_pod_terminating(&p));
    p["metadata"]["deletionTimestamp"] = json!("2024-06-01T12:00:00Z");
    assert!(is_pod_terminating(&p));
    p["status"]["phase"] = json!("Running");
    assert!(is_pod_terminating(&p));
    for terminal in ["Succeeded", "Failed"] {
        p["status"]["phase"] = json!(terminal);
        assert!(
            !is_pod_terminating(&p),
            "{terminal} pods are not terminating"
        );
    }
}

#[test]
fn only_replica_sets_report_terminating_replicas() {
    assert!(
        Flavor::ReplicaSet.reports_terminating(),
        "on by default at v1.37"
    );
    assert!(!Flavor::ReplicationController.reports_terminating());
}
