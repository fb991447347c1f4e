//! A replica controller's status: the counts and the `ReplicaFailure` condition upstream's
//! `calculateStatus` reports, and whether it changed.

use super::{min_ready_seconds, spec_replicas, REPLICA_FAILURE};
use crate::controllers::kit::conditions;
use crate::controllers::kit::pod::{is_pod_available, is_pod_ready};
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::{json, Value};
use std::time::SystemTime;

fn status_i64(owner: &Value, field: &str) -> i64 {
    owner
        .get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Whether a pod is terminating (upstream's `IsPodTerminating`): being deleted and not yet
/// Succeeded or Failed.
pub fn is_pod_terminating(p: &Value) -> bool {
    let phase = p.at("/status/phase").and_then(Value::as_str).unwrap_or("");
    obj::is_deleting(p) && phase != "Succeeded" && phase != "Failed"
}

/// The status upstream's `calculateStatus` computes from the owner's active claimed pods,
/// the number of its terminating pods (None: `terminatingReplicas` is not reported, so it is
/// cleared) and the error of the last attempt to create or delete pods.
pub fn calculate_status(
    owner: &Value,
    pods: &[Obj],
    terminating: Option<usize>,
    manage_err: Option<&str>,
    now: SystemTime,
) -> Value {
    let mut status = owner
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let template_labels = owner
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .map(obj::Labels::from_map)
        .unwrap_or_default();
    let min_ready = min_ready_seconds(owner);
    let (mut fully, mut ready, mut available) = (0i64, 0i64, 0i64);
    for p in pods {
        if template_labels.all_in(p) {
            fully += 1;
        }
        if is_pod_ready(p) {
            ready += 1;
            if is_pod_available(p, min_ready, now) {
                available += 1;
            }
        }
    }
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Upstream sets ReplicaFailure only when there is none (a later failure's message does
    // not replace the first), and removes it once a sync manages the replicas.
    let has_failure = conditions::get(&conditions, REPLICA_FAILURE).is_some();
    match manage_err {
        Some(msg) if !has_failure => {
            let replicas = spec_replicas(owner);
            let reason = match pods.len().cmp(&replicas) {
                std::cmp::Ordering::Less => "FailedCreate",
                std::cmp::Ordering::Greater => "FailedDelete",
                std::cmp::Ordering::Equal => "",
            };
            let c = conditions::Condition {
                type_: REPLICA_FAILURE,
                status: "True",
                reason,
                message: msg,
            };
            conditions::set_replacing(
                &mut conditions,
                &c,
                &crate::compat::timefmt::rfc3339(now),
                false,
            );
        }
        None if has_failure => {
            conditions::remove(&mut conditions, REPLICA_FAILURE);
        }
        _ => {}
    }
    let mut set = |k: &str, v: i64, always: bool| {
        if v != 0 || always {
            status.insert(k.into(), json!(v));
        } else {
            status.remove(k);
        }
    };
    set("replicas", pods.len() as i64, true);
    set("fullyLabeledReplicas", fully, false);
    set("readyReplicas", ready, false);
    set("availableReplicas", available, false);
    match terminating {
        // A pointer upstream: 0 is written, not omitted.
        Some(n) => {
            status.insert("terminatingReplicas".into(), json!(n));
        }
        None => {
            status.remove("terminatingReplicas");
        }
    }
    if conditions.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    Value::Object(status)
}

/// The owner with its new status to PUT, or None when nothing changed (upstream's
/// comparison: the four counts, `terminatingReplicas` (absent and 0 differ),
/// observedGeneration == generation, and the conditions).
pub fn status_update(owner: &Value, new_status: Value) -> Option<Value> {
    let generation = owner
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let conds = |s: Option<&Value>| {
        s.and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let same = [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .all(|f| status_i64(owner, f) == new_status.get(*f).and_then(Value::as_i64).unwrap_or(0))
        && owner
            .at("/status/terminatingReplicas")
            .and_then(Value::as_i64)
            == new_status
                .get("terminatingReplicas")
                .and_then(Value::as_i64)
        && status_i64(owner, "observedGeneration") == generation
        && conds(owner.get("status")) == conds(Some(&new_status));
    if same {
        return None;
    }
    let mut status = new_status;
    if let Some(m) = status.as_object_mut() {
        if generation != 0 {
            m.insert("observedGeneration".into(), json!(generation));
        } else {
            m.remove("observedGeneration");
        }
    }
    let mut updated = owner.clone();
    updated["status"] = status;
    Some(updated)
}
