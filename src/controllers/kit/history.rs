//! ControllerRevisions, the history of a parent's template (upstream's `controller/history`
//! package), for the StatefulSet and DaemonSet controllers: a revision's name and hash, the
//! parent's revisions, equality, ordering, the next revision number, and which old
//! revisions to delete. Generic over the parent: everything takes the parent object and its
//! kind, and the revision's data as the parent's controller builds it.
//!
//! The hash is upstream's to the bit, so a revision made by kube-controller-manager is
//! recognised here and the other way round: FNV-1 (32 bits) over the data's JSON bytes as Go
//! writes them (keys sorted, compact, `<`, `>`, `&`, U+2028 and U+2029 escaped), then the
//! collision count in decimal, the sum in decimal, each digit mapped into the alphabet of
//! `rand.SafeEncodeString`.

/// The label naming the revision a pod was made from (`controller-revision-hash`).
pub const REVISION_LABEL: &str = "controller-revision-hash";

use crate::api::Kind;
use crate::obj::{self, At as _, Obj};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The label carrying a revision's hash (upstream's `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// `rand.SafeEncodeString`'s alphabet (no vowels, no confusable digits).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `value` as Go's `json.Marshal` writes a decoded `map[string]interface{}`: keys sorted,
/// no spaces, HTML-sensitive characters escaped. These are a revision's data bytes.
pub fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go(&mut out, value);
    out
}

fn write_go(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64() {
            // Go decodes every number as a float64 and writes whole ones without a point.
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 1e21 => {
                let _ = write!(out, "{}", f as i128);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::String(s) => crate::compat::json::write_str(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            crate::sort::sort(&mut keys[..]);
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                crate::compat::json::write_str(out, k);
                out.push(':');
                write_go(out, &m[k]);
            }
            out.push('}');
        }
    }
}

/// Upstream's `HashControllerRevision`: the data bytes and the collision count (when there
/// is one), FNV-1 32, written in the safe alphabet.
pub fn hash(data: &str, collision_count: Option<i64>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h = h.wrapping_mul(0x0100_0193);
            h ^= u32::from(*b);
        }
    };
    feed(data.as_bytes());
    if let Some(c) = collision_count {
        feed(c.to_string().as_bytes());
    }
    safe_encode(&h.to_string())
}

/// `rand.SafeEncodeString`.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[c as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// `<parent>-<hash>`, the parent's name cut to 223 bytes (upstream's `ControllerRevisionName`).
pub fn revision_name(parent: &str, hash: &str) -> String {
    let mut cut = parent.len().min(223);
    while !parent.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash}", &parent[..cut])
}

/// A new revision of `parent` (of kind `kind`): `data` (a patch of the parent, as the
/// controller builds it) at number `revision`, labelled with the template's labels and the
/// hash, named after the parent and the hash, controlled by the parent. `annotations` are
/// copied onto it (the StatefulSet's own; the DaemonSet copies none).
pub fn new_revision(
    kind: &Kind,
    parent: &Value,
    template_labels: Option<&Map<String, Value>>,
    annotations: Option<&Map<String, Value>>,
    data: &Value,
    revision: i64,
    collision_count: i64,
) -> Value {
    let h = hash(&go_json(data), Some(collision_count));
    let mut labels = template_labels.cloned().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), json!(h));
    let mut meta = json!({
        "name": revision_name(obj::name(parent), &h),
        "namespace": obj::namespace(parent),
        "labels": labels,
        "ownerReferences": [crate::controllers::refmanager::controller_owner_ref(kind, parent)],
    });
    if let Some(a) = annotations.filter(|a| !a.is_empty()) {
        meta["annotations"] = Value::Object(a.clone());
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": data,
        "revision": revision,
    })
}

/// A revision's number.
pub fn number(rev: &Value) -> i64 {
    rev.at("/revision").and_then(Value::as_i64).unwrap_or(0)
}

/// The revisions of namespace `ns` that `selector` matches and that `parent_uid` controls
/// or nobody does (upstream's `ListControllerRevisions`), sorted (see [`sort`]).
pub fn owned(
    revisions: &crate::cache::Store,
    ns: &str,
    parent_uid: &str,
    selector: &Value,
) -> Vec<Obj> {
    let mut out = revisions.claimable(ns, parent_uid, |m| obj::selector_matches(selector, m));
    out.retain(|r| obj::selector_matches(selector, r));
    sort(&mut out);
    out
}

/// Oldest first: by number, then creation time, then name (upstream's `byRevision`).
pub fn sort(revs: &mut [Obj]) {
    crate::sort::sort_by(&mut revs[..], |a, b| order(a, b));
}

fn order(a: &Value, b: &Value) -> Ordering {
    number(a)
        .cmp(&number(b))
        .then_with(|| obj::creation_timestamp(a).cmp(obj::creation_timestamp(b)))
        .then_with(|| obj::name(a).cmp(obj::name(b)))
}

/// The data's bytes as the server holds them (upstream compares `Data.Raw`).
pub fn data_text(rev: &Value) -> String {
    go_json(rev.get("data").unwrap_or(&Value::Null))
}

/// Whether two revisions hold the same data (upstream's `EqualRevision`; its hash-label
/// comparison only applies to numeric labels, which safe-encoded hashes never are).
pub fn equal(a: &Value, b: &Value) -> bool {
    data_text(a) == data_text(b)
}

/// The number after the newest of `sorted` (1 for none).
pub fn next_number(sorted: &[Obj]) -> i64 {
    sorted.last().map(|r| number(r) + 1).unwrap_or(1)
}

/// The revisions to delete so at most `limit` are kept besides the `live` ones (those pods or
/// status still name): the oldest first (upstream's `truncateHistory`). `sorted` oldest first.
pub fn to_truncate<'a>(sorted: &'a [Obj], live: &BTreeSet<String>, limit: i64) -> Vec<&'a Obj> {
    let history: Vec<&Obj> = sorted
        .iter()
        .filter(|r| !live.contains(obj::name(r)))
        .collect();
    let limit = limit.max(0) as usize;
    if history.len() <= limit {
        return vec![];
    }
    let n = history.len() - limit;
    history.into_iter().take(n).collect()
}

/// The patch that makes `parent` the controller of an orphan revision (upstream's
/// `AdoptControllerRevision`).
pub fn adopt_patch(kind: &Kind, parent: &Value, rev: &Value) -> Value {
    crate::controllers::refmanager::adopt_patch(kind, parent, obj::uid(rev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json_sorts_and_escapes_as_go() {
        let v = json!({"b": 1, "a": {"z": "<&>", "y": [true, null, 2.0]}, "c": "\u{8}\u{2028}"});
        assert_eq!(
            go_json(&v),
            r#"{"a":{"y":[true,null,2],"z":"\u003c\u0026\u003e"},"b":1,"c":"\u0008\u2028"}"#
        );
    }

    #[test]
    fn hash_is_fnv1_in_the_safe_alphabet() {
        // FNV-1 32 of the empty input is the offset basis, 2166136261.
        assert_eq!(hash("", None), safe_encode("2166136261"));
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        // The collision count is part of the hash.
        assert_ne!(hash("{}", Some(0)), hash("{}", Some(1)));
    }

    #[test]
    fn names_cut_the_parent_to_223_bytes() {
        let long = "a".repeat(300);
        assert_eq!(revision_name(&long, "x").len(), 225);
        assert_eq!(revision_name("web", "abc"), "web-abc");
    }

    #[test]
    fn truncation_keeps_live_and_the_newest() {
        let revs: Vec<Obj> = (1..=5)
            .map(|i| {
                std::sync::Arc::new(json!({"metadata": {"name": format!("r{i}"),
                    "creationTimestamp": "2024-01-01T00:00:00Z"}, "revision": i}))
            })
            .collect();
        let live: BTreeSet<String> = ["r1".to_string(), "r5".to_string()].into();
        let gone: Vec<&str> = to_truncate(&revs, &live, 1)
            .into_iter()
            .map(|r| obj::name(r))
            .collect();
        assert_eq!(gone, vec!["r2", "r3"]);
        assert!(to_truncate(&revs, &live, 3).is_empty());
        assert_eq!(next_number(&revs), 6);
    }
}
