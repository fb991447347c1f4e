//! `metav1.LabelSelector` checks controllers share: is it empty (selects everything), would
//! upstream's `LabelSelectorAsSelector` accept it, does it select an object.

use serde_json::Value;

pub use crate::obj::{selector_matches as matches, selector_matches_with as matches_with};

/// Nothing in it: `{}`, or `matchLabels` and `matchExpressions` empty or null. Such a selector
/// selects everything, which workload controllers refuse.
pub fn is_empty(sel: &Value) -> bool {
    let Some(m) = sel.as_object() else {
        return false;
    };
    let none = |k: &str| match m.get(k) {
        None | Some(Value::Null) => true,
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    none("matchLabels") && none("matchExpressions")
}

/// Would upstream's `LabelSelectorAsSelector` accept it? (shape, keys and operators)
pub fn is_valid(sel: &Value) -> bool {
    let Some(m) = sel.as_object() else {
        return false;
    };
    if let Some(ml) = m.get("matchLabels").filter(|v| !v.is_null()) {
        match ml.as_object() {
            Some(ml) if ml.values().all(Value::is_string) => {}
            _ => return false,
        }
    }
    let Some(exprs) = m.get("matchExpressions").filter(|v| !v.is_null()) else {
        return true;
    };
    let Some(exprs) = exprs.as_array() else {
        return false;
    };
    exprs.iter().all(|e| {
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let has_key = e
            .get("key")
            .and_then(Value::as_str)
            .is_some_and(|k| !k.is_empty());
        has_key
            && match e.get("operator").and_then(Value::as_str) {
                Some("In" | "NotIn") => values > 0,
                Some("Exists" | "DoesNotExist") => values == 0,
                _ => false,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_and_valid() {
        assert!(is_empty(&json!({})));
        assert!(is_empty(&json!({"matchLabels": {}})));
        assert!(is_empty(
            &json!({"matchLabels": null, "matchExpressions": []})
        ));
        assert!(!is_empty(&json!({"matchLabels": {"a": "b"}})));
        assert!(!is_empty(&json!(null)));
        assert!(is_valid(&json!({"matchLabels": {"a": "b"}})));
        assert!(is_valid(&json!({})));
        assert!(!is_valid(&json!({"matchLabels": {"a": 1}})));
        assert!(!is_valid(
            &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
        ));
        assert!(!is_valid(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})
        ));
        assert!(!is_valid(
            &json!({"matchExpressions": [{"key": "", "operator": "Exists"}]})
        ));
        assert!(!is_valid(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})
        ));
        assert!(!is_valid(&json!("app=web")));
    }
}
