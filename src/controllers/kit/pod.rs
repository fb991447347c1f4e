//! Pods as controllers see them (upstream's `controller_utils.go` and `podutil`): whether a
//! pod is active, ready or available, and the pod an owner's template makes.

use crate::api::Kind;
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};
use std::time::{Duration, SystemTime};

/// A DNS-1123 subdomain (upstream's `IsDNS1123Subdomain`).
fn is_dns1123_subdomain(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

/// The `generateName` of an owner's pods: `<name>-`, or the bare name when `<name>-` would
/// not be a valid name prefix (upstream's `getPodsPrefix`).
pub fn pod_prefix(name: &str) -> String {
    let prefix = format!("{name}-");
    // A prefix is validated with its trailing dash masked (two bytes dropped, "a" added).
    let masked = if prefix.len() > 1 && prefix.ends_with('-') {
        format!("{}a", &prefix[..prefix.len() - 2])
    } else {
        prefix.clone()
    };
    if is_dns1123_subdomain(&masked) {
        prefix
    } else {
        name.to_string()
    }
}

/// The pod to create for `owner` (upstream's `GetPodFromTemplate` plus its checks).
pub fn pod_from_template(kind: &Kind, owner: &Value) -> std::result::Result<Value, String> {
    // A missing template is an empty one: no labels.
    let empty = json!({});
    let template = owner
        .at("/spec/template")
        .filter(|t| t.is_object())
        .unwrap_or(&empty);
    let tmeta = template.get("metadata");
    let field = |f: &str| tmeta.and_then(|m| m.get(f)).filter(|v| !v.is_null());
    let labels = field("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if labels.is_empty() {
        return Err("unable to create pods, no labels".to_string());
    }
    let mut meta = Map::new();
    meta.insert("generateName".into(), json!(pod_prefix(obj::name(owner))));
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = field("annotations").and_then(Value::as_object) {
        if !a.is_empty() {
            meta.insert("annotations".into(), Value::Object(a.clone()));
        }
    }
    if let Some(f) = field("finalizers").and_then(Value::as_array) {
        if !f.is_empty() {
            meta.insert("finalizers".into(), Value::Array(f.clone()));
        }
    }
    meta.insert(
        "ownerReferences".into(),
        json!([crate::controllers::refmanager::controller_owner_ref(
            kind, owner
        )]),
    );
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    }))
}

pub(crate) fn phase(p: &Value) -> &str {
    p.at("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// Not terminal and not being deleted (upstream's `IsPodActive`).
pub fn is_pod_active(p: &Value) -> bool {
    let ph = phase(p);
    ph != "Succeeded" && ph != "Failed" && !obj::is_deleting(p)
}

pub(crate) fn ready_condition(p: &Value) -> Option<&Value> {
    p.at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
}

pub fn is_pod_ready(p: &Value) -> bool {
    ready_condition(p)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

pub(crate) fn time_field(v: Option<&Value>) -> Option<SystemTime> {
    v.and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339)
}

/// When a ready pod became ready (None: not ready, or no transition time).
pub fn ready_time(p: &Value) -> Option<SystemTime> {
    if !is_pod_ready(p) {
        return None;
    }
    time_field(ready_condition(p).and_then(|c| c.get("lastTransitionTime")))
}

/// Ready for at least `min_ready` seconds (upstream's `IsPodAvailable`).
pub fn is_pod_available(p: &Value, min_ready: i64, now: SystemTime) -> bool {
    if !is_pod_ready(p) {
        return false;
    }
    if min_ready <= 0 {
        return true;
    }
    ready_time(p).is_some_and(|t| t + Duration::from_secs(min_ready as u64) < now)
}

/// How an owner's pod creates (`create`) or deletes are reported: upstream's
/// `SuccessfulCreate`/`FailedCreate` and `SuccessfulDelete`/`FailedDelete` Events about
/// `about`, as the replica, job and daemon controllers record them.
pub fn write_report(
    about: crate::controller::ObjectRef,
    create: bool,
) -> crate::controller::Report {
    use crate::controller::Report;
    if create {
        Report {
            about,
            success_reason: "SuccessfulCreate",
            success_prefix: "Created pod: ",
            failure_reason: "FailedCreate",
            failure_prefix: "Error creating: ".into(),
        }
    } else {
        Report {
            about,
            success_reason: "SuccessfulDelete",
            success_prefix: "Deleted pod: ",
            failure_reason: "FailedDelete",
            failure_prefix: "Error deleting: ".into(),
        }
    }
}

/// The deletes of `pods` of the owner `owner_key` in `ns`, each reported with `report` and
/// noted in `inflight` before it is sent.
pub fn delete_actions<'a>(
    inflight: &mut super::inflight::InFlight,
    owner_key: &str,
    ns: &str,
    pods: impl IntoIterator<Item = &'a crate::obj::Obj>,
    report: &crate::controller::Report,
) -> Vec<crate::controller::Action> {
    use crate::controller::Action;
    pods.into_iter()
        .map(|p| {
            inflight.deleting(owner_key, crate::obj::key(p), crate::obj::uid(p));
            Action::Reported {
                action: Box::new(Action::Delete {
                    kind: crate::api::resources::PODS,
                    namespace: ns.to_string(),
                    name: crate::obj::name(p).to_string(),
                    options: crate::api::client::DeleteOptions::default(),
                }),
                report: report.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod delete_tests {
    use super::*;
    use crate::controller::{Action, ObjectRef};
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn deletes_are_reported_and_noted_before_they_are_sent() {
        let pod = Arc::new(json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u1"}}));
        let report = write_report(
            ObjectRef::of(&crate::api::resources::REPLICASETS, &pod),
            false,
        );
        let mut f = crate::controllers::kit::inflight::InFlight::default();
        let acts = delete_actions(&mut f, "ns/rs", "ns", [&pod], &report);
        match &acts[..] {
            [Action::Reported { action, .. }] => match &**action {
                Action::Delete {
                    namespace, name, ..
                } => assert_eq!((&**namespace, &**name), ("ns", "a")),
                a => panic!("{a:?}"),
            },
            a => panic!("{a:?}"),
        }
        assert!(!f.deletes_settled("ns/rs"), "waited for until answered");
        f.delete_done("ns/rs", "ns/a");
        assert!(f.hides("ns/a", "u1"));
    }
}
