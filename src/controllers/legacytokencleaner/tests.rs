use super::decide::*;
use super::{period_of, DEFAULT_PERIOD};
use crate::compat::timefmt::parse_rfc3339;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn secret(labels: Value) -> Value {
    json!({"type": "kubernetes.io/service-account-token",
        "metadata": {"name": "tok", "namespace": "ns", "uid": "s1", "resourceVersion": "5",
            "creationTimestamp": "2023-01-01T00:00:00Z", "labels": labels,
            "annotations": {"kubernetes.io/service-account.name": "sa",
                "kubernetes.io/service-account.uid": "u1"}}})
}

fn sa() -> Value {
    json!({"metadata": {"name": "sa", "namespace": "ns", "uid": "u1"}, "secrets": [{"name": "tok"}]})
}

fn run(secret: &Value, sa: Option<&Value>, mounted: &[&str], now: &str) -> Decision {
    let mounted: HashSet<String> = mounted.iter().map(|s| s.to_string()).collect();
    decide(&Facts {
        secret,
        service_account: sa,
        mounted: &mounted,
        now: parse_rfc3339(now).unwrap(),
        period: YEAR,
    })
}

const NOW: &str = "2025-06-15T12:00:00Z";

#[test]
fn unused_tokens_are_labelled_then_deleted() {
    let sa = sa();
    assert_eq!(
        run(&secret(json!({})), Some(&sa), &[], NOW),
        Decision::MarkInvalid("2025-06-15".into())
    );
    let old_use = secret(json!({LAST_USED: "2024-06-14"}));
    assert_eq!(
        run(&old_use, Some(&sa), &[], NOW),
        Decision::MarkInvalid("2025-06-15".into())
    );
    // Used on the cut-off day or later: kept.
    for used in ["2024-06-15", "2025-01-01"] {
        let s = secret(json!({LAST_USED: used}));
        assert_eq!(run(&s, Some(&sa), &[], NOW), Decision::Keep, "{used}");
    }
    // Invalid for a period: deleted; for less: kept.
    let s = secret(json!({INVALID_SINCE: "2024-06-14"}));
    assert_eq!(run(&s, Some(&sa), &[], NOW), Decision::Delete);
    let s = secret(json!({INVALID_SINCE: "2024-06-15"}));
    assert_eq!(run(&s, Some(&sa), &[], NOW), Decision::Keep);
    // An invalid-since label that is not a date is written again.
    let s = secret(json!({INVALID_SINCE: "yesterday"}));
    assert_eq!(
        run(&s, Some(&sa), &[], NOW),
        Decision::MarkInvalid("2025-06-15".into())
    );
}

#[test]
fn what_keeps_a_token() {
    let sa = sa();
    // Too young.
    let mut young = secret(json!({}));
    young["metadata"]["creationTimestamp"] = json!("2024-07-01T00:00:00Z");
    assert_eq!(run(&young, Some(&sa), &[], NOW), Decision::Keep);
    // Being deleted.
    let mut going = secret(json!({}));
    going["metadata"]["deletionTimestamp"] = json!("2025-06-15T00:00:00Z");
    assert_eq!(run(&going, Some(&sa), &[], NOW), Decision::Keep);
    // Its ServiceAccount gone, another one of that name, or not listing it.
    assert_eq!(run(&secret(json!({})), None, &[], NOW), Decision::Keep);
    let mut other = sa.clone();
    other["metadata"]["uid"] = json!("u2");
    assert_eq!(
        run(&secret(json!({})), Some(&other), &[], NOW),
        Decision::Keep
    );
    let mut unlisted = sa.clone();
    unlisted["secrets"] = json!([{"name": "other"}]);
    assert_eq!(
        run(&secret(json!({})), Some(&unlisted), &[], NOW),
        Decision::Keep
    );
    // Without a UID annotation any ServiceAccount of the name counts.
    let mut no_uid = secret(json!({}));
    no_uid["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io/service-account.uid");
    assert!(matches!(
        run(&no_uid, Some(&other), &[], NOW),
        Decision::MarkInvalid(_)
    ));
    // Mounted by a pod.
    assert_eq!(
        run(&secret(json!({})), Some(&sa), &["tok"], NOW),
        Decision::Keep
    );
    // A last-used label that is not a date.
    let s = secret(json!({LAST_USED: "2024-13-01"}));
    assert!(matches!(
        run(&s, Some(&sa), &[], NOW),
        Decision::BadLastUsed(_)
    ));
    // Not a token.
    let mut opaque = secret(json!({}));
    opaque["type"] = json!("Opaque");
    assert_eq!(run(&opaque, Some(&sa), &[], NOW), Decision::Keep);
}

#[test]
fn dates_as_go_parses_them() {
    assert!(parse_date("2024-02-29").is_ok());
    for bad in [
        "2023-02-29",
        "2024-2-01",
        "2024-00-10",
        "2024-01-32",
        "2024-01-01x",
        "",
        "24-01-01",
    ] {
        assert!(parse_date(bad).is_err(), "{bad}");
    }
    let cm = json!({"data": {"since": "2024-01-31"}});
    assert_eq!(
        tracked_since(&cm).unwrap(),
        parse_rfc3339("2024-02-01T00:00:00Z").unwrap()
    );
    assert_eq!(
        tracked_since(&json!({"data": {}})).unwrap_err(),
        "configMap does not have since label"
    );
    assert!(tracked_since(&json!({"data": {"since": "x"}}))
        .unwrap_err()
        .starts_with("error parsing trackedSince time: "));
}

#[test]
fn the_patch_and_the_period() {
    let p = invalid_since_patch(&secret(json!({})), "2025-06-15");
    assert_eq!(
        p,
        json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "tok",
            "namespace": "ns", "uid": "s1", "labels": {INVALID_SINCE: "2025-06-15"}}})
    );
    assert_eq!(period_of(None).unwrap(), DEFAULT_PERIOD);
    assert_eq!(period_of(Some("1h")).unwrap(), Duration::from_secs(3600));
    assert!(period_of(Some("0s")).is_err());
    assert!(period_of(Some("-1h")).is_err());
    assert!(period_of(Some("soon")).is_err());
}

#[test]
fn secret_names_a_pod_references() {
    let pod = json!({"spec": {
    "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
    "initContainers": [{"envFrom": [{"secretRef": {"name": "init-env"}}]}],
    "containers": [{"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "key", "key": "k"}}}]}],
    "ephemeralContainers": [{"envFrom": [{"configMapRef": {"name": "cm"}}]}],
    "volumes": [
        {"name": "a", "secret": {"secretName": "vol"}},
        {"name": "b", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "cm"}}]}},
        {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
        {"name": "d", "configMap": {"name": "cm"}}
    ]}});
    let mut names = Vec::new();
    pod_secret_names(&pod, &mut |n| names.push(n.to_string()));
    assert_eq!(names, ["pull", "init-env", "key", "vol", "proj", "csi"]);
}
