//! Taints and tolerations: which NoSchedule taints a node's conditions call for
//! (TaintNodesByCondition), upstream's taint set operations and patches
//! (`AddOrUpdateTaintOnNode`, `RemoveTaintOffNode`, `PatchNodeTaints`). Pure.

use crate::obj::At as _;
use serde_json::{json, Value};

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// (condition type, status) -> the taint key it calls for.
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

/// Taint keys that stand for a condition (`taintKeyToNodeConditionMap`).
fn is_condition_key(key: &str) -> bool {
    CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
}

/// A taint's key and effect (what `MatchTaint` compares).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub effect: String,
}

impl Taint {
    pub fn new(key: &str, effect: &str) -> Self {
        Taint {
            key: key.into(),
            effect: effect.into(),
        }
    }

    fn matches(&self, t: &Value) -> bool {
        t.get("key").and_then(Value::as_str).unwrap_or("") == self.key
            && t.get("effect").and_then(Value::as_str).unwrap_or("") == self.effect
    }

    /// The taint as the controller adds it: `timeAdded` now (`SwapNodeControllerTaint`).
    pub fn to_json(&self, now: &str) -> Value {
        json!({"key": self.key, "effect": self.effect, "timeAdded": now})
    }
}

pub fn taints(node: &Value) -> &[Value] {
    node.at("/spec/taints")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `TaintExists`: a taint with this key and effect.
pub fn has(node: &Value, t: &Taint) -> bool {
    taints(node).iter().any(|v| t.matches(v))
}

/// What the NoSchedule tainting pass changes: (to add, to remove) (`doNoScheduleTaintingPass`).
pub fn no_schedule_diff(node: &Value) -> (Vec<Taint>, Vec<Taint>) {
    let mut want = Vec::new();
    for c in node
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (ty, st) = (
            c.get("type").and_then(Value::as_str).unwrap_or(""),
            c.get("status").and_then(Value::as_str).unwrap_or(""),
        );
        for (t, s, key) in CONDITION_TAINTS {
            if t == ty && s == st {
                want.push(Taint::new(key, NO_SCHEDULE));
            }
        }
    }
    if node.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        want.push(Taint::new(UNSCHEDULABLE, NO_SCHEDULE));
    }
    let have: Vec<Taint> = taints(node)
        .iter()
        .filter(|t| t.get("effect").and_then(Value::as_str) == Some(NO_SCHEDULE))
        .map(|t| {
            Taint::new(
                t.get("key").and_then(Value::as_str).unwrap_or(""),
                NO_SCHEDULE,
            )
        })
        .filter(|t| t.key == UNSCHEDULABLE || is_condition_key(&t.key))
        .collect();
    let add = want.iter().filter(|w| !have.contains(w)).cloned().collect();
    let del = have.iter().filter(|h| !want.contains(h)).cloned().collect();
    (add, del)
}

/// Semantic equality of a taint to add with one the node has: key, value, effect and the
/// time added (whole seconds, as the server keeps it).
fn same_taint(new: &Value, old: &Value) -> bool {
    let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    ["key", "value", "effect", "timeAdded"]
        .iter()
        .all(|f| s(new, f) == s(old, f))
}

/// `AddOrUpdateTaint` for each of `add` (a taint with the same key and effect is replaced in
/// place unless equal, else appended): the new list, or None when nothing changes.
pub fn with_added(node: &Value, add: &[Value]) -> Option<Vec<Value>> {
    let mut list: Vec<Value> = taints(node).to_vec();
    let mut changed = false;
    for t in add {
        let key = Taint::new(
            t.get("key").and_then(Value::as_str).unwrap_or(""),
            t.get("effect").and_then(Value::as_str).unwrap_or(""),
        );
        match list.iter().position(|o| key.matches(o)) {
            Some(i) if same_taint(t, &list[i]) => {}
            Some(i) => {
                list[i] = t.clone();
                changed = true;
            }
            None => {
                list.push(t.clone());
                changed = true;
            }
        }
    }
    changed.then_some(list)
}

/// `RemoveTaint` for each of `del`: the new list, or None when nothing changes.
pub fn with_removed(node: &Value, del: &[Taint]) -> Option<Vec<Value>> {
    let list = taints(node);
    let kept: Vec<Value> = list
        .iter()
        .filter(|t| !del.iter().any(|d| d.matches(t)))
        .cloned()
        .collect();
    (kept.len() != list.len()).then_some(kept)
}

/// `PatchNodeTaints`: the strategic merge patch of the node with its taints replaced, with the
/// resourceVersion it was read at as a precondition (`spec.taints` has no merge key, so the
/// list is sent whole; an empty list is `null`).
pub fn taints_patch(resource_version: &str, list: Vec<Value>) -> Value {
    let taints = if list.is_empty() {
        Value::Null
    } else {
        Value::Array(list)
    };
    json!({"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}})
}

/// The beta OS and arch labels kept equal to the stable ones (`reconcileNodeLabels`): the
/// labels to set, if any.
pub fn labels_to_reconcile(node: &Value) -> Vec<(&'static str, String)> {
    let Some(labels) = crate::obj::labels(node) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (primary, secondary) in [
        ("kubernetes.io/os", "beta.kubernetes.io/os"),
        ("kubernetes.io/arch", "beta.kubernetes.io/arch"),
    ] {
        let Some(p) = labels.get(primary).and_then(Value::as_str) else {
            continue;
        };
        match labels.get(secondary).and_then(Value::as_str) {
            Some(s) if s == p => {}
            _ => out.push((secondary, p.to_string())),
        }
    }
    out
}

/// Toleration matching lives in `kit::taints` (the taint eviction controller and the
/// node-fit predicates share it).
pub use crate::controllers::kit::taints::tolerates;
