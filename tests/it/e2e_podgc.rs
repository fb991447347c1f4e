//! pod-garbage-collector-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`; edgekcm needs
//! `--use-service-account-credentials=true` there: its own identity may not delete pods).
//! Nodes and their status are written by the tests (no kubelet). Each scenario starts
//! edgekcm once its objects exist, so its first pass (right after the caches synced) sees them.

use crate::common::nodes::*;
use crate::common::*;
use edgekcm::api::client::{Client, ListOptions};
use edgekcm::api::resources::PODS;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CONTROLLERS: &str = "--controllers=pod-garbage-collector-controller";
/// One pass and a little: passes are 20 s apart, the first one once the caches synced.
const PASS: Duration = Duration::from_secs(30);

fn names(admin: &Client, ns: &str) -> Vec<String> {
    let mut v: Vec<String> = admin
        .list(&PODS, Some(ns), &ListOptions::default())
        .expect("list pods")
        .items
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn condition<'a>(p: &'a Value, type_: &str) -> Option<&'a Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn wait_gone(admin: &Client, ns: &str, name: &str, limit: Duration) {
    eventually(limit, &format!("pod {name} deleted"), || {
        get_pod(admin, ns, name).is_none().then_some(())
    });
}

/// Terminated pods beyond the threshold go, evicted first, then oldest first; running pods
/// and the newest terminated ones stay.
fn scenario_terminated_beyond_threshold(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-podgc-term", &[]);
    let _pods = PodsGone {
        admin: ns.admin.clone(),
        ns: ns.name.clone(),
    };
    let (admin, n) = (&ns.admin, ns.name.as_str());
    // Created a second apart (creation times have whole seconds), names against the order.
    let made = [
        ("t-f", "Succeeded", ""),
        ("t-e", "Failed", ""),
        ("t-d", "Succeeded", ""),
        ("t-c", "Failed", ""),
        ("t-b", "Succeeded", ""),
        ("t-a", "Failed", "Evicted"),
    ];
    for (i, (name, phase, reason)) in made.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(1100));
        }
        create_pod(admin, n, name, "", &[]);
        set_pod_phase(admin, n, name, phase, reason);
    }
    create_pod(admin, n, "running", "", &[]);
    set_pod_phase(admin, n, "running", "Running", "");
    let _kcm = Kcm::start(
        t,
        "podgc-term",
        &[CONTROLLERS, "--terminated-pod-gc-threshold=3"],
    );
    // Six terminated, three kept: the evicted one, then the two oldest go.
    eventually(PASS, "three terminated pods deleted", || {
        (names(admin, n) == ["running", "t-b", "t-c", "t-d"]).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(names(admin, n), ["running", "t-b", "t-c", "t-d"]);
}

fn oos_taint() -> Value {
    json!([{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}])
}

/// Terminating pods on a not-ready node with the out-of-service taint are failed and deleted
/// with grace period 0; on a node without the taint, or when not terminating, they stay.
fn scenario_terminating_on_out_of_service_node(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-podgc-oos", &[]);
    let _pods = PodsGone {
        admin: ns.admin.clone(),
        ns: ns.name.clone(),
    };
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let (oos, down) = (unique("oos"), unique("down"));
    nodes.create(&oos, Some(false), oos_taint(), json!({}));
    nodes.create(&down, Some(false), json!([]), json!({}));
    for (pod, node, hold) in [
        ("going", &oos, false),
        ("held", &oos, true),
        ("alive", &oos, false),
        ("untainted", &down, false),
    ] {
        create_pod(admin, n, pod, node, if hold { &[HOLD] } else { &[] });
        set_pod_phase(admin, n, pod, "Running", "");
        if pod != "alive" {
            // A graceful deletion that would wait for the (absent) kubelet.
            delete_pod(admin, n, pod);
            let p = get_pod(admin, n, pod).expect("still there");
            assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30, "{pod}");
        }
    }
    let _kcm = start_with(t, "podgc-oos", CONTROLLERS);
    wait_gone(admin, n, "going", PASS);
    // The held pod shows what was done: failed, no condition, grace period cut to 0.
    // The status patch comes first, the deletion with grace period 0 right after it.
    let held = eventually(PASS, "held pod failed and force-deleted", || {
        get_pod(admin, n, "held").filter(|p| {
            p["status"]["phase"] == "Failed" && p["metadata"]["deletionGracePeriodSeconds"] == 0
        })
    });
    assert!(condition(&held, "DisruptionTarget").is_none());
    assert!(condition(&held, "PodScheduled").is_some());
    let alive = get_pod(admin, n, "alive").expect("not terminating: kept");
    assert_eq!(alive["status"]["phase"], "Running");
    let untainted = get_pod(admin, n, "untainted").expect("no taint: kept");
    assert_eq!(untainted["status"]["phase"], "Running");
    assert_eq!(untainted["metadata"]["deletionGracePeriodSeconds"], 30);
    release(admin, n, "held");
    wait_gone(admin, n, "held", PASS);
}

/// Pods bound to a node that is gone are deleted once the node was missing for the 40 s
/// quarantine and a live read did not find it; one not terminal yet first gets phase Failed and
/// the DisruptionTarget condition.
fn scenario_orphaned_after_quarantine(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-podgc-orph", &[]);
    let _pods = PodsGone {
        admin: ns.admin.clone(),
        ns: ns.name.clone(),
    };
    let (admin, n) = (&ns.admin, ns.name.as_str());
    let mut nodes = Nodes::new(admin.clone());
    let (gone, here) = (unique("gone"), unique("here"));
    nodes.create(&gone, Some(true), json!([]), json!({}));
    nodes.create(&here, Some(true), json!([]), json!({}));
    for (pod, node, phase, hold) in [
        ("held", &gone, "Running", true),
        ("done", &gone, "Succeeded", false),
        ("running", &gone, "Running", false),
        ("stays", &here, "Running", false),
    ] {
        create_pod(admin, n, pod, node, if hold { &[HOLD] } else { &[] });
        set_pod_phase(admin, n, pod, phase, "");
    }
    nodes.delete(&gone);
    let started = Instant::now();
    let _kcm = start_with(t, "podgc-orphan", CONTROLLERS);
    wait_gone(admin, n, "running", Duration::from_secs(90));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(39),
        "deleted after {waited:?}"
    );
    wait_gone(admin, n, "done", PASS);
    // The orphans are failed and deleted in parallel: "running" can be gone before the
    // held one's patch and delete are through.
    let held = eventually(PASS, "held pod failed and deleted", || {
        get_pod(admin, n, "held").filter(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    assert_eq!(held["status"]["phase"], "Failed");
    let c = condition(&held, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "DeletionByPodGC");
    assert_eq!(c["message"], "PodGC: node no longer exists");
    assert!(c["lastTransitionTime"].is_string());
    // v1.34 and later: the pod's generation the condition was written for (1: the delete
    // that followed made it 2).
    assert_eq!(c["observedGeneration"], 1, "{c}");
    assert!(
        condition(&held, "PodScheduled").is_some(),
        "other conditions kept"
    );
    assert_eq!(
        get_pod(admin, n, "stays").expect("its node exists")["status"]["phase"],
        "Running"
    );
}

/// Terminating pods never scheduled are failed and deleted; pending ones stay.
fn scenario_unscheduled_terminating(t: &Target) {
    let ns = Ns::with_cleanup(t, "e2e-podgc-unsch", &[]);
    let _pods = PodsGone {
        admin: ns.admin.clone(),
        ns: ns.name.clone(),
    };
    let (admin, n) = (&ns.admin, ns.name.as_str());
    create_pod(admin, n, "held", "", &[HOLD]);
    set_pod_phase(admin, n, "held", "Pending", "");
    delete_pod(admin, n, "held");
    create_pod(admin, n, "pending", "", &[]);
    set_pod_phase(admin, n, "pending", "Pending", "");
    let _kcm = start_with(t, "podgc-unscheduled", CONTROLLERS);
    let held = eventually(PASS, "held pod failed", || {
        get_pod(admin, n, "held").filter(|p| p["status"]["phase"] == "Failed")
    });
    assert!(condition(&held, "DisruptionTarget").is_none());
    assert_eq!(held["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        get_pod(admin, n, "pending").expect("kept")["status"]["phase"],
        "Pending"
    );
    release(admin, n, "held");
    wait_gone(admin, n, "held", PASS);
}

scenarios! {
    terminated_beyond_threshold => scenario_terminated_beyond_threshold,
    terminating_on_out_of_service_node => scenario_terminating_on_out_of_service_node,
    orphaned_after_quarantine => scenario_orphaned_after_quarantine,
    unscheduled_terminating => scenario_unscheduled_terminating,
}
