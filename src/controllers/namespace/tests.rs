//! Tests of the conditions and their messages, the judgement of remaining content, pod
//! estimates, finalizing and the timing of looks again.

use super::deleter::{remaining_key, ListedMeta, ListedPod};
use super::*;
use crate::api::resources::{CONFIGMAPS, DEPLOYMENTS, PODS};
use std::collections::BTreeMap;

fn cond<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

#[test]
fn all_well_conditions_and_transitions() {
    let mut status = json!({"phase": "Terminating"});
    let c = Conditions::default();
    assert!(c.apply(&mut status, "t1"));
    assert_eq!(status["conditions"].as_array().map(Vec::len), Some(5));
    let d = cond(&status, DISCOVERY_FAILURE);
    assert_eq!(d["status"], "False");
    assert_eq!(d["reason"], "ResourcesDiscovered");
    assert_eq!(d["message"], "All resources successfully discovered");
    assert_eq!(d["lastTransitionTime"], "t1");
    assert_eq!(
        cond(&status, FINALIZERS_REMAINING)["message"],
        "All content-preserving finalizers finished"
    );
    // Nothing new: no change.
    assert!(!Conditions::default().apply(&mut status, "t2"));

    // Content remains with finalizers: two conditions flip, their times move.
    let mut c = Conditions::default();
    let remaining = BTreeMap::from([
        ("pods.".to_string(), 2usize),
        ("widgets.example.com".to_string(), 1),
    ]);
    let fins = BTreeMap::from([("example.com/hold".to_string(), 3usize)]);
    c.content_totals(&remaining, &fins);
    assert!(c.apply(&mut status, "t3"));
    let r = cond(&status, CONTENT_REMAINING);
    assert_eq!(r["status"], "True");
    assert_eq!(r["reason"], "SomeResourcesRemain");
    assert_eq!(
        r["message"],
        "Some resources are remaining: pods. has 2 resource instances, widgets.example.com has 1 resource instances"
    );
    assert_eq!(r["lastTransitionTime"], "t3");
    let f = cond(&status, FINALIZERS_REMAINING);
    assert_eq!(f["reason"], "SomeFinalizersRemain");
    assert_eq!(
        f["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 3 resource instances"
    );
    assert_eq!(cond(&status, DISCOVERY_FAILURE)["lastTransitionTime"], "t1");

    // Same status, another message: the message changes, the time does not.
    let mut c = Conditions::default();
    c.content_totals(&BTreeMap::from([("pods.".to_string(), 1usize)]), &fins);
    assert!(c.apply(&mut status, "t4"));
    assert_eq!(
        cond(&status, CONTENT_REMAINING)["message"],
        "Some resources are remaining: pods. has 1 resource instances"
    );
    assert_eq!(cond(&status, CONTENT_REMAINING)["lastTransitionTime"], "t3");
}

#[test]
fn failure_conditions() {
    let mut c = Conditions::default();
    c.discovery_failed(
        "unable to retrieve the complete list of server APIs: metrics.k8s.io/v1beta1: stale",
        Some(1),
    );
    c.group_version_failed("unexpected GroupVersion string: a/b/c");
    c.delete_failed("b failed".into());
    c.delete_failed("a failed".into());
    let mut status = json!(null);
    assert!(c.apply(&mut status, "t"));
    let d = cond(&status, DISCOVERY_FAILURE);
    assert_eq!(d["status"], "True");
    assert_eq!(d["reason"], "DiscoveryFailed");
    assert_eq!(d["message"], "Discovery failed for some groups, 1 failing: unable to retrieve the complete list of server APIs: metrics.k8s.io/v1beta1: stale");
    let g = cond(&status, GV_PARSING_FAILURE);
    assert_eq!(g["reason"], "GroupVersionParsingFailed");
    let x = cond(&status, CONTENT_FAILURE);
    assert_eq!(x["reason"], "ContentDeletionFailed");
    assert_eq!(
        x["message"],
        "Failed to delete all resource types, 2 remaining: a failed, b failed"
    );
    let mut c = Conditions::default();
    c.discovery_failed("connection refused", None);
    assert_eq!(c.failing()[0].message, "connection refused");
}

#[test]
fn remaining_content_judgement() {
    let plain = Remnant {
        name: "a".into(),
        ..Remnant::default()
    };
    let held = Remnant {
        name: "b".into(),
        finalizers: vec!["x/y".into(), "z".into()],
        ..Remnant::default()
    };
    assert_eq!(
        judge_remaining(0, &[], "ns", &CONFIGMAPS),
        (Leftover::default(), None)
    );
    // A pod grace estimate wins.
    let (l, e) = judge_remaining(30, std::slice::from_ref(&plain), "ns", &PODS);
    assert_eq!((l.estimate, l.remaining, e), (30, 1, None));
    // Finalizers: the default estimate.
    let (l, e) = judge_remaining(0, &[plain.clone(), held], "ns", &DEPLOYMENTS);
    assert_eq!(l.estimate, FINALIZER_ESTIMATE_SECONDS);
    assert_eq!(l.remaining, 2);
    assert_eq!(l.finalizers.get("x/y"), Some(&1));
    assert!(e.is_none());
    // Nothing explains it: an error, as upstream words it.
    let (l, e) = judge_remaining(0, &[plain], "ns", &CONFIGMAPS);
    assert_eq!(l.estimate, 0);
    assert_eq!(
        e.as_deref(),
        Some("unexpected items still remain in namespace: ns for gvr: /v1, Resource=configmaps")
    );
    assert_eq!(remaining_key(&PODS), "pods.");
    assert_eq!(remaining_key(&DEPLOYMENTS), "deployments.apps");
}

#[test]
fn listed_pods_keep_only_what_the_estimate_and_judgement_read() {
    let listed = r#"{"metadata":{"name":"p","namespace":"n","uid":"u","labels":{"a":"b"},
        "finalizers":["x/y"]},"spec":{"containers":[{"name":"c","image":"i"}],
        "terminationGracePeriodSeconds":30},"status":{"phase":"Running","podIP":"1.2.3.4"}}"#;
    let v: Remnant = serde_json::from_str::<ListedPod>(listed).unwrap().into();
    assert_eq!(
        v,
        Remnant {
            name: "p".into(),
            finalizers: vec!["x/y".into()],
            grace: Some(30),
            phase: Some("Running".into()),
        }
    );
    assert_eq!(pod_estimate(std::slice::from_ref(&v), Duration::ZERO), 30);
    let (left, _) = judge_remaining(0, &[v], "n", &PODS);
    assert_eq!(left.finalizers.get("x/y"), Some(&1));
    // Any other kind: name and finalizers; a null or missing finalizer list is none.
    let r: ListedMeta =
        serde_json::from_str(r#"{"metadata":{"name":"c","finalizers":null},"spec":"x"}"#).unwrap();
    assert_eq!(
        Remnant::from(r.metadata),
        Remnant {
            name: "c".into(),
            ..Remnant::default()
        }
    );
}

#[test]
fn pod_estimates() {
    let pod = |grace, phase: &str| Remnant {
        grace,
        phase: Some(phase.into()),
        ..Remnant::default()
    };
    let pods = vec![
        pod(Some(30), "Running"),
        pod(Some(90), "Succeeded"),
        Remnant::default(),
    ];
    assert_eq!(pod_estimate(&pods, Duration::from_secs(3)), 30);
    assert_eq!(pod_estimate(&pods, Duration::from_secs(30)), 0);
    assert_eq!(pod_estimate(&[], Duration::ZERO), 0);
}

#[test]
fn finalize_keeps_other_finalizers_sorted() {
    let ns = json!({"spec": {"finalizers": ["z/x", "kubernetes", "a/b", "z/x"]}});
    assert_eq!(finalizers_without_ours(&ns), vec!["a/b", "z/x"]);
    assert!(finalizers_without_ours(&json!({})).is_empty());
}

#[test]
fn rechecks_back_off_and_meet_the_end_of_the_grace_period() {
    let ms = Duration::from_millis;
    let waits: Vec<_> = (1..=6).map(|n| recheck_wait(n, 0, None)).collect();
    assert_eq!(
        waits,
        [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
    );
    // Pods still terminating for 30 s: upstream's estimate/2 + 1 caps the backoff.
    assert_eq!(recheck_wait(9, 30, None), Duration::from_secs(16));
    assert_eq!(recheck_wait(5, 30, None), ms(1600));
    // Content left 1.3 s before the grace period ends: look again when it ends, not later.
    assert_eq!(recheck_wait(6, 30, Some(ms(1300))), ms(1300));
    assert_eq!(recheck_wait(1, 30, Some(ms(1300))), ms(100));
}
