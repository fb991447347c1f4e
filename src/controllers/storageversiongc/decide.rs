//! The storage version collector's pure decisions: which Leases are API server identities,
//! which entries of a StorageVersion stay, and the common encoding version the API server's
//! updater (`storageversion.SetCommonEncodingVersion`) derives from them.

use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::time::SystemTime;

pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";

/// An identity Lease of a kube-apiserver.
pub fn identity_lease(l: &Value) -> bool {
    obj::label(l, IDENTITY_LABEL) == Some("kube-apiserver")
}

fn entries(sv: &Value) -> &[Value] {
    sv.at("/status/storageVersions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn server_id(e: &Value) -> &str {
    e.get("apiServerID").and_then(Value::as_str).unwrap_or("")
}

/// The `apiServerID` of each entry.
pub fn server_ids(sv: &Value) -> Vec<&str> {
    entries(sv).iter().map(server_id).collect()
}

/// The entries to keep when those whose server `gone` says is gone are removed; None when
/// none is.
pub fn entries_without(sv: &Value, gone: impl Fn(&str) -> bool) -> Option<Vec<Value>> {
    let mut stale = false;
    let mut keep = vec![];
    for e in entries(sv) {
        if gone(server_id(e)) {
            stale = true;
        } else {
            keep.push(e.clone());
        }
    }
    stale.then_some(keep)
}

/// `SetCommonEncodingVersion`: `status.commonEncodingVersion` when every entry has the same
/// `encodingVersion` (unset otherwise), and the `AllEncodingVersionsEqual` condition: True,
/// `CommonEncodingVersionSet`, or False, `CommonEncodingVersionUnset`, its
/// `observedGeneration` the object's generation; its transition time moves when its status
/// changes, or the common version changes from one set value to another.
pub fn set_common_encoding_version(sv: &mut Value, now: SystemTime) {
    let old = sv
        .at("/status/commonEncodingVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let versions: Vec<&str> = entries(sv)
        .iter()
        .map(|e| {
            e.get("encodingVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
        })
        .collect();
    let common = versions
        .first()
        .filter(|f| versions.iter().all(|v| v == *f))
        .map(|f| f.to_string());
    let status = &mut sv["status"];
    match &common {
        Some(c) => status["commonEncodingVersion"] = json!(c),
        None => {
            if let Some(m) = status.as_object_mut() {
                m.remove("commonEncodingVersion");
            }
        }
    }
    let (st, reason, message) = if common.is_some() {
        (
            "True",
            "CommonEncodingVersionSet",
            "Common encoding version set",
        )
    } else {
        (
            "False",
            "CommonEncodingVersionUnset",
            "Common encoding version unset",
        )
    };
    let generation = sv
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let force = matches!((&old, &common), (Some(o), Some(c)) if o != c);
    let now = crate::compat::timefmt::rfc3339(now);
    let status = &mut sv["status"];
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let conds = status["conditions"].as_array_mut().expect("an array");
    match conds
        .iter_mut()
        .find(|c| c["type"] == "AllEncodingVersionsEqual")
    {
        None => conds.push(json!({"type": "AllEncodingVersionsEqual", "status": st,
            "observedGeneration": generation, "lastTransitionTime": now,
            "reason": reason, "message": message})),
        Some(c) => {
            if c["status"] != st || force {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(st);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            c["observedGeneration"] = json!(generation);
        }
    }
}
