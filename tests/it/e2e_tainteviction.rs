//! taint-eviction-controller scenarios (split out of node-lifecycle-controller in 1.29),
//! against the sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`,
//! edgekcm with `--use-service-account-credentials`, writing as `node-controller`). It runs
//! alone here: the NoExecute taints are the test's, as a user's or another controller's.

use crate::common::*;
use crate::e2e_nodelifecycle::{condition, deleted, events, running_pod, TwoNodes};
use edgekcm::api::client::PatchType;
use edgekcm::api::resources::{NODES, PODS};
use serde_json::json;
use std::time::{Duration, Instant};

const ONLY: &str = "--controllers=taint-eviction-controller";

/// A NoExecute taint a user puts on a healthy node, with taint-eviction-controller alone
/// (node-lifecycle-controller off): a pod that does not tolerate it is deleted at once, with
/// `DisruptionTarget` and its Event; one tolerating it for 30 s is scheduled and the deletion
/// cancelled (with its Event) when the taint goes; one tolerating it for ever stays.
fn scenario_user_taint(t: &Target) {
    let two = TwoNodes::new(t, "e2e-tec-ut", ["ut-a", "ut-b"]);
    let (admin, n) = (&two.ns.admin, two.ns.name.as_str());
    let [a, _] = two.names.clone();
    let tol = |secs: Option<i64>| {
        let mut t =
            json!({"key": "example.com/drain", "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = secs {
            t["tolerationSeconds"] = json!(s);
        }
        json!([t])
    };
    running_pod(admin, n, "intolerant", &a, json!([]));
    running_pod(admin, n, "for30", &a, tol(Some(30)));
    running_pod(admin, n, "forever", &a, tol(None));
    let _kcm = Kcm::start(t, "tec-ut", &[ONLY]);
    std::thread::sleep(Duration::from_secs(3));
    let taint = json!({"spec": {"taints": [{"key": "example.com/drain", "effect": "NoExecute"}]}});
    admin
        .patch(&NODES, None, &a, PatchType::Merge, &taint, None)
        .expect("taint");
    let gone = eventually(Duration::from_secs(10), "intolerant deleted", || {
        deleted(admin, n, "intolerant")
    });
    // Deleted gracefully with no kubelet to finish it: the condition can be read.
    if let Some(p) = gone {
        let c = condition(&p, "DisruptionTarget").expect("DisruptionTarget");
        assert_eq!(c["reason"], "DeletionByTaintManager");
        assert_eq!(
            c["message"],
            "Taint manager: deleting due to NoExecute taint"
        );
        if let Some(g) = p["metadata"]["generation"].as_i64() {
            // The generation it was read at; a graceful deletion moves it on afterwards.
            let seen = c["observedGeneration"]
                .as_i64()
                .expect("observedGeneration");
            assert!((1..=g).contains(&seen), "{c} at generation {g}");
        }
    }
    let ev = eventually(Duration::from_secs(10), "marked", || {
        let e = events(admin, n, "TaintManagerEviction", "intolerant");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(
        ev[0]["message"],
        format!("Marking for deletion Pod {n}/intolerant")
    );
    assert_eq!(ev[0]["source"]["component"], "taint-eviction-controller");
    assert_eq!(ev[0]["type"], "Normal");
    std::thread::sleep(Duration::from_secs(2));
    let untaint = json!({"spec": {"taints": null}});
    admin
        .patch(&NODES, None, &a, PatchType::Merge, &untaint, None)
        .expect("untaint");
    let ev = eventually(Duration::from_secs(10), "cancelled", || {
        let e = events(admin, n, "TaintManagerEviction", "for30");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(
        ev[0]["message"],
        format!("Cancelling deletion of Pod {n}/for30")
    );
    assert_eq!(ev[0]["source"]["component"], "taint-eviction-controller");
    assert!(deleted(admin, n, "for30").is_none());
    assert!(deleted(admin, n, "forever").is_none());
    assert!(events(admin, n, "TaintManagerEviction", "forever").is_empty());
}

/// A pod bound to a node that is already tainted, and a toleration that changes: the pod's
/// own changes start and move its deletion (`handlePodUpdate`).
fn scenario_pod_on_a_tainted_node(t: &Target) {
    let two = TwoNodes::new(t, "e2e-tec-pod", ["tp-a", "tp-b"]);
    let (admin, n) = (&two.ns.admin, two.ns.name.as_str());
    let [a, _] = two.names.clone();
    let taint = json!({"spec": {"taints": [{"key": "example.com/gone", "effect": "NoExecute"}]}});
    admin
        .patch(&NODES, None, &a, PatchType::Merge, &taint, None)
        .expect("taint");
    let _kcm = Kcm::start(t, "tec-pod", &[ONLY]);
    std::thread::sleep(Duration::from_secs(2));
    let tol = |secs: i64| {
        json!([{"key": "example.com/gone", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": secs}])
    };
    let placed = Instant::now();
    running_pod(admin, n, "for4", &a, tol(4));
    eventually(Duration::from_secs(15), "for4 deleted", || {
        deleted(admin, n, "for4")
    });
    assert!(
        placed.elapsed() >= Duration::from_secs(3),
        "for4 went early"
    );
    // A pod tolerating for ever stays; it is not deleted when nothing changes.
    let forever = json!([{"key": "example.com/gone", "operator": "Exists", "effect": "NoExecute"}]);
    running_pod(admin, n, "forever", &a, forever);
    std::thread::sleep(Duration::from_secs(4));
    assert!(deleted(admin, n, "forever").is_none());
    assert!(events(admin, n, "TaintManagerEviction", "forever").is_empty());
    let _ = admin.delete(&PODS, Some(n), "forever", &Default::default());
}

scenarios! {
    user_taint => scenario_user_taint,
    pod_on_a_tainted_node => scenario_pod_on_a_tainted_node,
}
