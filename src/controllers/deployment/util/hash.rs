//! The pod-template hash that names a Deployment's ReplicaSets, and template comparison
//! ignoring it (upstream's `ComputeHash` and `EqualIgnoreHash`, with semantic equality of
//! empty and absent fields).

use super::POD_TEMPLATE_HASH;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// pod-template hash

/// FNV-1a, 32 bit.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// JSON with object keys sorted at every level: a serialization that does not depend on the
/// order fields arrived in.
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            crate::sort::sort(&mut keys[..]);
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The characters upstream's rand.SafeEncodeString maps to (no vowels, no confusable digits).
pub(super) const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Upstream's SafeEncodeString.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// The `pod-template-hash` of a template: FNV-32a over its canonical JSON, followed (when the
/// Deployment has a collisionCount) by the count as 8 little-endian bytes, as upstream's
/// ComputeHash; the decimal value of the sum encoded with SafeEncodeString.
pub fn compute_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut s = String::new();
    canonical_json(template, &mut s);
    let mut bytes = s.into_bytes();
    if let Some(c) = collision_count {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&b);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// Is `v` absent in the sense of Go's semantic equality (nil/empty slices and maps, and
/// structs holding nothing else)?
fn is_empty_value(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.values().all(|v| is_empty_value(Some(v))),
        _ => false,
    }
}

/// Deep equality where null, absent, `[]` and `{}` are the same (as apimachinery's semantic
/// equality treats nil and empty slices and maps) and numbers compare by value.
pub fn semantic_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.iter().all(|(k, v)| match y.get(k) {
                Some(w) => {
                    semantic_eq(v, w) || (is_empty_value(Some(v)) && is_empty_value(Some(w)))
                }
                None => is_empty_value(Some(v)),
            }) && y
                .iter()
                .all(|(k, w)| x.contains_key(k) || is_empty_value(Some(w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| semantic_eq(v, w))
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b || (is_empty_value(Some(a)) && is_empty_value(Some(b))),
    }
}

/// Upstream's EqualIgnoreHash: two pod templates equal apart from the `pod-template-hash`
/// label. This is what finds an existing ReplicaSet for a template whatever hash it was
/// named with. Compared in place: every sync compares its Deployment's template with each
/// of its ReplicaSets', and copying both templates to drop one label was most of the cost.
pub fn equal_ignore_hash(t1: &Value, t2: &Value) -> bool {
    const HASH_LABEL: [&str; 3] = ["metadata", "labels", POD_TEMPLATE_HASH];
    semantic_eq_without(Some(t1), Some(t2), &HASH_LABEL)
}

/// `semantic_eq` of `a` and `b` (None: absent) once the key at `path` (object keys, the
/// last one the key to leave out) is taken out of both.
fn semantic_eq_without(a: Option<&Value>, b: Option<&Value>, path: &[&str]) -> bool {
    let same = |v: Option<&Value>, w: Option<&Value>| match (v, w) {
        (Some(v), Some(w)) => {
            semantic_eq(v, w) || (is_empty_value(Some(v)) && is_empty_value(Some(w)))
        }
        (v, w) => is_empty_value(v) && is_empty_value(w),
    };
    let Some((key, rest)) = path.split_first() else {
        return same(a, b);
    };
    fn as_map(v: Option<&Value>) -> Option<Option<&serde_json::Map<String, Value>>> {
        match v {
            None => Some(None),
            Some(Value::Object(m)) => Some(Some(m)),
            Some(_) => None,
        }
    }
    let (Some(x), Some(y)) = (as_map(a), as_map(b)) else {
        // Not an object here on one side: nothing is taken out of that side.
        return semantic_eq_without_by_copy(a, b, path);
    };
    let empty = serde_json::Map::new();
    let (x, y) = (x.unwrap_or(&empty), y.unwrap_or(&empty));
    let left_out = |k: &str| rest.is_empty() && k == *key;
    let going_down = |k: &str| !rest.is_empty() && k == *key;
    x.iter().filter(|(k, _)| !left_out(k)).all(|(k, v)| {
        if going_down(k) {
            semantic_eq_without(Some(v), y.get(k), rest)
        } else {
            same(Some(v), y.get(k))
        }
    }) && y
        .iter()
        .filter(|(k, _)| !left_out(k) && !x.contains_key(*k))
        .all(|(k, w)| {
            if going_down(k) {
                semantic_eq_without(None, Some(w), rest)
            } else {
                is_empty_value(Some(w))
            }
        })
}

/// `semantic_eq_without` by copying both sides and removing the key, for shapes the in-place
/// walk does not take apart (a non-object on the way to the key).
pub(super) fn semantic_eq_without_by_copy(
    a: Option<&Value>,
    b: Option<&Value>,
    path: &[&str],
) -> bool {
    let strip = |v: Option<&Value>| {
        let mut v = v.cloned().unwrap_or(Value::Null);
        if let Some((last, parents)) = path.split_last() {
            let mut at = Some(&mut v);
            for p in parents {
                at = at.and_then(|x| x.get_mut(*p));
            }
            if let Some(m) = at.and_then(Value::as_object_mut) {
                m.remove(*last);
            }
        }
        v
    };
    let (a, b) = (strip(a), strip(b));
    semantic_eq(&a, &b) || (is_empty_value(Some(&a)) && is_empty_value(Some(&b)))
}

/// A copy of `selector` whose matchLabels also require `key=value`.
pub fn selector_with_label(selector: &Value, key: &str, value: &str) -> Value {
    let mut s = selector.clone();
    if !s.is_object() {
        s = json!({});
    }
    let ml = s
        .as_object_mut()
        .map(|m| m.entry("matchLabels").or_insert_with(|| json!({})));
    if let Some(ml) = ml {
        if !ml.is_object() {
            *ml = json!({});
        }
        if let Some(m) = ml.as_object_mut() {
            m.insert(key.into(), json!(value));
        }
    }
    s
}

/// A copy of a pod template with `key=value` among its labels.
pub fn template_with_label(template: &Value, key: &str, value: &str) -> Value {
    let mut t = template.clone();
    if let Some(m) = t.as_object_mut() {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        if let Some(meta) = meta.as_object_mut() {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if !labels.is_object() {
                *labels = json!({});
            }
            if let Some(l) = labels.as_object_mut() {
                l.insert(key.into(), json!(value));
            }
        }
    }
    t
}
