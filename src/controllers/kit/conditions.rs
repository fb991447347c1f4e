//! Status conditions, in the two ways upstream's controllers write them.
//!
//! - [`set_in_place`]: apimachinery's `meta.SetStatusCondition` and the namespace controller:
//!   the condition keeps its place; `lastTransitionTime` moves only when the status changes;
//!   any change of reason or message is written.
//! - [`set_replacing`]: the apps controllers' `SetDeploymentCondition` / ReplicaSet
//!   `SetCondition` (and the Job's pattern): nothing happens when status and reason are the
//!   same; the old condition is removed and the new one appended, keeping the old
//!   `lastTransitionTime` when only the reason changed.
//!
//! Both work on a status's `conditions` array as JSON, so a controller needs no typed copy.
//! [`pod_status_patch`] is the third way: a pod condition set by upstream's
//! `UpdatePodCondition` and sent as `PatchPodStatus` sends it (a strategic merge patch).

use serde_json::{json, Map, Value};

/// A condition to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition<'a> {
    pub type_: &'a str,
    /// "True", "False" or "Unknown".
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

fn field<'a>(c: &'a Value, f: &str) -> &'a str {
    c.get(f).and_then(Value::as_str).unwrap_or("")
}

fn is_type(c: &Value, type_: &str) -> bool {
    field(c, "type") == type_
}

/// The condition of this type, if any.
pub fn get<'a>(list: &'a [Value], type_: &str) -> Option<&'a Value> {
    list.iter().find(|c| is_type(c, type_))
}

/// Its status ("True", "False", "Unknown"), or "" when there is no such condition.
pub fn status<'a>(list: &'a [Value], type_: &str) -> &'a str {
    get(list, type_).map_or("", |c| field(c, "status"))
}

/// Remove the condition of this type; true if there was one.
pub fn remove(list: &mut Vec<Value>, type_: &str) -> bool {
    let n = list.len();
    list.retain(|c| !is_type(c, type_));
    list.len() != n
}

/// The `conditions` array of `status` (an object), created empty when missing or not an array.
pub fn list_mut(status: &mut Value) -> &mut Vec<Value> {
    if !status.is_object() {
        *status = json!({});
    }
    let m = status.as_object_mut().expect("an object was just made");
    let conds = m.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    conds.as_array_mut().expect("an array was just made")
}

fn build(c: &Condition, transition: &str, update: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!(c.type_));
    m.insert("status".into(), json!(c.status));
    if let Some(u) = update {
        m.insert("lastUpdateTime".into(), json!(u));
    }
    m.insert("lastTransitionTime".into(), json!(transition));
    if !c.reason.is_empty() {
        m.insert("reason".into(), json!(c.reason));
    }
    if !c.message.is_empty() {
        m.insert("message".into(), json!(c.message));
    }
    Value::Object(m)
}

/// `meta.SetStatusCondition`'s way (see the module docs); true when anything changed.
pub fn set_in_place(list: &mut Vec<Value>, c: &Condition, now: &str) -> bool {
    let Some(old) = list.iter_mut().find(|o| is_type(o, c.type_)) else {
        list.push(build(c, now, None));
        return true;
    };
    let same = field(old, "status") == c.status
        && field(old, "reason") == c.reason
        && field(old, "message") == c.message;
    if same {
        return false;
    }
    if field(old, "status") != c.status {
        old["lastTransitionTime"] = json!(now);
    }
    old["status"] = json!(c.status);
    old["reason"] = json!(c.reason);
    old["message"] = json!(c.message);
    true
}

/// What [`set_replacing`] does to a condition that is there (`old`: its status, reason and
/// `lastTransitionTime`) for a new status and reason: None to leave it, else the
/// `lastTransitionTime` the new condition gets (`now`, or the old one when only the reason
/// changed). For controllers that keep typed conditions.
pub fn replacing_transition<'a>(
    old: Option<(&str, &str, &'a str)>,
    status: &str,
    reason: &str,
    now: &'a str,
) -> Option<&'a str> {
    match old {
        Some((s, r, _)) if s == status && r == reason => None,
        Some((s, _, t)) if s == status => Some(t),
        _ => Some(now),
    }
}

/// The apps controllers' way (see the module docs); true when anything changed.
/// `with_update_time` writes `lastUpdateTime` too (Deployment conditions have one).
pub fn set_replacing(
    list: &mut Vec<Value>,
    c: &Condition,
    now: &str,
    with_update_time: bool,
) -> bool {
    let old = get(list, c.type_).map(|o| {
        (
            field(o, "status").to_string(),
            field(o, "reason").to_string(),
            field(o, "lastTransitionTime").to_string(),
        )
    });
    let old_view = old
        .as_ref()
        .map(|(s, r, t)| (s.as_str(), r.as_str(), t.as_str()));
    let Some(transition) = replacing_transition(old_view, c.status, c.reason, now) else {
        return false;
    };
    let new = build(c, transition, with_update_time.then_some(now));
    remove(list, c.type_);
    list.push(new);
    true
}

/// A condition as Go writes a `v1.PodCondition`: type and status always, both times (null
/// when unset), reason and message when not empty.
fn go_pod_condition(c: &Value) -> Map<String, Value> {
    let t = |f: &str| {
        c.get(f)
            .filter(|v| v.is_string())
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut m = Map::new();
    m.insert("type".into(), json!(field(c, "type")));
    m.insert("status".into(), json!(field(c, "status")));
    m.insert("lastProbeTime".into(), t("lastProbeTime"));
    m.insert("lastTransitionTime".into(), t("lastTransitionTime"));
    for f in ["reason", "message"] {
        if !field(c, f).is_empty() {
            m.insert(f.into(), json!(field(c, f)));
        }
    }
    m
}

/// The `status` part of the strategic merge patch upstream's `PatchPodStatus` sends when
/// `UpdatePodCondition` sets condition `c` on `pod` at `now` (the transition time kept while the
/// status stays): the condition list when there was none, the new condition with the list's
/// order when it is new, the changed fields when it was there. None when nothing changes.
pub fn pod_status_patch(
    pod: &Value,
    c: &Condition,
    now: std::time::SystemTime,
) -> Option<Map<String, Value>> {
    use crate::obj::At;
    let old: &[Value] = pod
        .at("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut new = go_pod_condition(&json!({
        "type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
        "lastTransitionTime": crate::compat::timefmt::rfc3339(now),
    }));
    let order = |types: Vec<&str>| -> Value {
        Value::Array(types.into_iter().map(|t| json!({"type": t})).collect())
    };
    let types = || -> Vec<&str> { old.iter().map(|o| field(o, "type")).collect() };
    let mut status = Map::new();
    match old.iter().position(|o| is_type(o, c.type_)) {
        // No conditions before: the list is the patch.
        None if old.is_empty() => {
            status.insert("conditions".into(), json!([new]));
        }
        None => {
            let mut all = types();
            all.push(c.type_);
            status.insert("$setElementOrder/conditions".into(), order(all));
            status.insert("conditions".into(), json!([new]));
        }
        Some(i) => {
            let was = go_pod_condition(&old[i]);
            if was.get("status") == new.get("status") {
                let t = was
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or(Value::Null);
                new.insert("lastTransitionTime".into(), t);
            }
            let mut diff = Map::new();
            for (k, v) in &new {
                if was.get(k) != Some(v) {
                    diff.insert(k.clone(), v.clone());
                }
            }
            for k in was.keys() {
                if !new.contains_key(k) {
                    diff.insert(k.clone(), Value::Null);
                }
            }
            if diff.is_empty() {
                return None;
            }
            diff.insert("type".into(), json!(c.type_));
            status.insert("$setElementOrder/conditions".into(), order(types()));
            status.insert("conditions".into(), json!([diff]));
        }
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00Z";
    const T1: &str = "2024-01-01T00:01:00Z";

    fn cond<'a>(status: &'a str, reason: &'a str, message: &'a str) -> Condition<'a> {
        Condition {
            type_: "Ready",
            status,
            reason,
            message,
        }
    }

    #[test]
    fn in_place_keeps_position_and_moves_transition_on_status_only() {
        let mut l = vec![json!({"type": "Other", "status": "True"})];
        assert!(set_in_place(&mut l, &cond("False", "A", "m"), T0));
        assert!(!set_in_place(&mut l, &cond("False", "A", "m"), T1));
        assert!(set_in_place(&mut l, &cond("False", "A", "m2"), T1));
        assert_eq!(l[1]["lastTransitionTime"], T0);
        assert_eq!(l[1]["message"], "m2");
        assert!(set_in_place(&mut l, &cond("True", "B", "m2"), T1));
        assert_eq!(l[1]["lastTransitionTime"], T1);
        assert_eq!(status(&l, "Ready"), "True");
        assert_eq!(l[0]["type"], "Other");
    }

    #[test]
    fn replacing_skips_same_reason_keeps_transition_and_appends() {
        let mut l = Vec::new();
        assert!(set_replacing(&mut l, &cond("True", "A", "m"), T0, true));
        l.push(json!({"type": "Other", "status": "True"}));
        // Same status and reason: a new message is not written (upstream's rule).
        assert!(!set_replacing(
            &mut l,
            &cond("True", "A", "other"),
            T1,
            true
        ));
        assert!(set_replacing(&mut l, &cond("True", "B", "m"), T1, true));
        assert_eq!(l[1]["type"], "Ready");
        assert_eq!(l[1]["lastTransitionTime"], T0);
        assert_eq!(l[1]["lastUpdateTime"], T1);
        assert!(set_replacing(&mut l, &cond("False", "B", "m"), T1, false));
        assert_eq!(l[1]["lastTransitionTime"], T1);
        assert!(l[1].get("lastUpdateTime").is_none());
        assert!(remove(&mut l, "Ready"));
        assert!(!remove(&mut l, "Ready"));
    }

    #[test]
    fn list_mut_repairs_odd_status() {
        let mut s = json!(null);
        list_mut(&mut s).push(json!({"type": "X"}));
        assert_eq!(s, json!({"conditions": [{"type": "X"}]}));
        let mut s = json!({"conditions": "bad"});
        assert!(list_mut(&mut s).is_empty());
    }
}
