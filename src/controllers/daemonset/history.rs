//! ControllerRevisions of a DaemonSet: what a revision holds, its hash and name, which of a
//! parent's revisions is current, and which old ones are past the history limit (upstream's
//! `constructHistory`, `snapshot`, `Match`, `cleanupHistory`). Written in terms of a parent
//! and its pod template, so it can serve any controller that keeps revisions.

use crate::api::Kind;
use crate::controllers::deployment::util::{compute_hash, semantic_eq};
use crate::controllers::refmanager::controller_owner_ref;
use crate::obj;
use crate::obj::At as _;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// The label naming a revision's hash, on the revision and on the pods made from it.
pub use crate::controllers::kit::history::{number, REVISION_LABEL as HASH_LABEL};

/// The hash of a pod template with the parent's collision count.
pub fn hash(template: &Value, collision_count: Option<i64>) -> String {
    compute_hash(template, collision_count)
}

/// A revision's name: `<parent>-<hash>`.
pub fn name(parent: &str, hash: &str) -> String {
    format!("{parent}-{hash}")
}

/// The parent's `status.collisionCount`.
pub fn collision_count(parent: &Value) -> Option<i64> {
    parent.at("/status/collisionCount").and_then(Value::as_i64)
}

/// What a DaemonSet's revision stores: its template as a strategic-merge patch that replaces
/// the whole template (`{"spec":{"template":{..., "$patch":"replace"}}}`).
pub fn data(parent: &Value) -> Value {
    let mut template = parent
        .at("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(m) = template.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// Whether a revision holds the parent's current template. Compared by meaning (absent and
/// empty alike, key order free), where upstream compares the bytes it wrote.
pub fn matches(parent: &Value, rev: &Value) -> bool {
    let Some(t) = rev.at("/data/spec/template").and_then(Value::as_object) else {
        return false;
    };
    let mut t: Map<String, Value> = t.clone();
    t.remove("$patch");
    let cur = parent
        .at("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    semantic_eq(&Value::Object(t), &cur)
}

/// A new revision of `parent` (of `kind`) with number `revision`: labelled with the
/// template's labels and the hash, annotated with the parent's annotations, controlled by it.
pub fn new_revision(kind: &Kind, parent: &Value, hash: &str, revision: i64) -> Value {
    let mut labels = parent
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), json!(hash));
    let mut meta = json!({
        "name": name(obj::name(parent), hash),
        "namespace": obj::namespace(parent),
        "labels": labels,
        "ownerReferences": [controller_owner_ref(kind, parent)],
    });
    if let Some(a) = obj::annotations(parent).filter(|a| !a.is_empty()) {
        meta["annotations"] = Value::Object(a.clone());
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": data(parent),
        "revision": revision,
    })
}

/// The current revision and the old ones among a parent's revisions.
pub struct Split<'a> {
    /// Revisions matching the template, highest number last.
    pub current: Vec<&'a Value>,
    pub old: Vec<&'a Value>,
    /// The number the current revision should carry: one past the old ones' highest.
    pub next_number: i64,
}

pub fn split<'a>(parent: &Value, revisions: &'a [obj::Obj]) -> Split<'a> {
    let (mut current, mut old): (Vec<&Value>, Vec<&Value>) = (vec![], vec![]);
    for r in revisions {
        if matches(parent, r) {
            current.push(r);
        } else {
            old.push(r);
        }
    }
    crate::sort::sort_by_key(&mut current[..], |r| number(r));
    let next_number = old.iter().map(|r| number(r)).max().unwrap_or(0) + 1;
    Split {
        current,
        old,
        next_number,
    }
}

/// The old revisions to delete to keep `limit`: lowest numbers first, never one whose hash a
/// live pod still carries.
pub fn to_truncate<'a>(
    old: &[&'a Value],
    limit: usize,
    live_hashes: &BTreeSet<String>,
) -> Vec<&'a Value> {
    let mut kill = old.len().saturating_sub(limit);
    if kill == 0 {
        return vec![];
    }
    let mut sorted = old.to_vec();
    crate::sort::sort_by_key(&mut sorted[..], |r| number(r));
    let mut out = vec![];
    for r in sorted {
        if kill == 0 {
            break;
        }
        if obj::label(r, HASH_LABEL).is_some_and(|h| live_hashes.contains(h)) {
            continue;
        }
        out.push(r);
        kill -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::DAEMONSETS;
    use std::sync::Arc;

    fn ds(image: &str) -> Value {
        json!({"metadata": {"name": "d", "namespace": "ns", "uid": "u"},
            "spec": {"template": {"metadata": {"labels": {"app": "a"}, "creationTimestamp": null},
                "spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    #[test]
    fn a_revision_matches_its_template_only() {
        let r = new_revision(&DAEMONSETS, &ds("one"), "h1", 1);
        assert_eq!(obj::name(&r), "d-h1");
        assert_eq!(obj::label(&r, HASH_LABEL), Some("h1"));
        assert_eq!(r["data"]["spec"]["template"]["$patch"], "replace");
        assert!(matches(&ds("one"), &r));
        assert!(!matches(&ds("two"), &r));
        assert_ne!(
            hash(&ds("one")["spec"]["template"], None),
            hash(&ds("two")["spec"]["template"], None)
        );
        assert_ne!(
            hash(&ds("one")["spec"]["template"], None),
            hash(&ds("one")["spec"]["template"], Some(1))
        );
    }

    #[test]
    fn truncation_keeps_the_limit_and_live_hashes() {
        let revs: Vec<Value> = (1..=4)
            .map(|i| {
                let mut r = new_revision(&DAEMONSETS, &ds(&format!("i{i}")), &format!("h{i}"), i);
                r["revision"] = json!(i);
                r
            })
            .collect();
        let objs: Vec<obj::Obj> = revs.into_iter().map(Arc::new).collect();
        let s = split(&ds("i4"), &objs);
        assert_eq!(s.current.len(), 1);
        assert_eq!(s.next_number, 4);
        let live: BTreeSet<String> = ["h1".to_string()].into();
        let gone: Vec<&str> = to_truncate(&s.old, 1, &live)
            .iter()
            .map(|r| obj::name(r))
            .collect();
        assert_eq!(gone, ["d-h2", "d-h3"]);
    }
}
