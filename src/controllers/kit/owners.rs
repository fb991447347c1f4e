//! From a change of a child (a pod, a ReplicaSet) to the keys of the owners to sync: the
//! event handlers upstream writes for every controller that owns children (the ReplicaSet's
//! `addPod`/`updatePod`/`deletePod`, the Deployment's `addReplicaSet`/..., the DaemonSet's,
//! the StatefulSet's), once.

use crate::api::Kind;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::obj::{self, OwnerRefView};
use serde_json::Value;
use std::collections::BTreeSet;

/// The owner of kind `owner` that a controller reference names, by key, if the cache holds
/// it with that UID (a reference to a deleted and re-created owner resolves to nothing).
pub fn resolve(cache: &Cache, owner: Kind, ns: &str, r: &OwnerRefView) -> Option<String> {
    if r.kind != owner.kind {
        return None;
    }
    let key = obj::make_key(ns, r.name);
    let uid = cache.store(owner).uid_of(&key)?;
    (uid == r.uid).then_some(key)
}

/// How a controller's handlers treat a child that is being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleting {
    /// An update of a child being deleted is handled as its deletion: its controller, and
    /// the old controller when the labels changed too (the ReplicaSet's `updatePod`).
    AsDeletion,
    /// As any other update (the Deployment's `updateReplicaSet`).
    AsUpdate,
}

/// The owners to sync after `d`, a change of a child. `resolve` turns a controller reference
/// into an owner key (see [`resolve`]); `matching` lists the owners whose selector matches an
/// orphan (an index lookup: this runs on the watch path).
///
/// - added: its controller; an orphan (not being deleted): every owner selecting it;
/// - deleted: its controller;
/// - updated: a controller that let it go and its current controller; an orphan whose labels
///   or reference changed: every owner selecting it now.
pub fn owner_keys(
    d: &Delta,
    deleting: Deleting,
    resolve: impl Fn(&Value, &OwnerRefView) -> Option<String>,
    matching: impl Fn(&Value) -> Vec<String>,
) -> Vec<String> {
    let by_ref = |o: &Value| obj::controller_ref(o).and_then(|r| resolve(o, &r));
    let mut keys = BTreeSet::new();
    match (d.kind, &d.old, &d.new) {
        (DeltaKind::Updated, Some(old), Some(cur)) => {
            let labels_changed = obj::labels(old) != obj::labels(cur);
            if deleting == Deleting::AsDeletion && obj::is_deleting(cur) {
                keys.extend(by_ref(cur));
                if labels_changed {
                    keys.extend(by_ref(old));
                }
                return keys.into_iter().collect();
            }
            let (old_ref, cur_ref) = (obj::controller_ref(old), obj::controller_ref(cur));
            let ref_changed = old_ref != cur_ref;
            if ref_changed && old_ref.is_some() {
                keys.extend(by_ref(old));
            }
            if cur_ref.is_some() {
                keys.extend(by_ref(cur));
            } else if labels_changed || ref_changed {
                keys.extend(matching(cur));
            }
        }
        _ => {
            let o = d.object();
            if obj::controller_ref(o).is_some() {
                keys.extend(by_ref(o));
            } else if d.kind != DeltaKind::Deleted && !obj::is_deleting(o) {
                keys.extend(matching(o));
            }
        }
    }
    keys.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn child(labels: Value, owner: Option<&str>, deleting: bool) -> Arc<Value> {
        let mut m = json!({"metadata": {"name": "c", "namespace": "ns", "labels": labels}});
        if let Some(o) = owner {
            m["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "RS", "name": o, "uid": format!("u-{o}"), "controller": true}]);
        }
        if deleting {
            m["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        Arc::new(m)
    }

    fn keys(d: &Delta, mode: Deleting) -> Vec<String> {
        owner_keys(
            d,
            mode,
            |_, r| (r.name != "gone").then(|| format!("ns/{}", r.name)),
            |_| vec!["ns/selecting".to_string()],
        )
    }

    fn delta(kind: DeltaKind, old: Option<Arc<Value>>, new: Option<Arc<Value>>) -> Delta {
        Delta { kind, old, new }
    }

    #[test]
    fn adds_and_deletes() {
        let owned = child(json!({"a": "1"}), Some("rs1"), false);
        let orphan = child(json!({"a": "1"}), None, false);
        let m = Deleting::AsDeletion;
        assert_eq!(
            keys(&delta(DeltaKind::Added, None, Some(owned.clone())), m),
            ["ns/rs1"]
        );
        assert_eq!(
            keys(&delta(DeltaKind::Added, None, Some(orphan.clone())), m),
            ["ns/selecting"]
        );
        let dying = child(json!({"a": "1"}), None, true);
        assert!(keys(&delta(DeltaKind::Added, None, Some(dying)), m).is_empty());
        assert_eq!(
            keys(&delta(DeltaKind::Deleted, Some(owned), None), m),
            ["ns/rs1"]
        );
        assert!(keys(&delta(DeltaKind::Deleted, Some(orphan), None), m).is_empty());
        let stale = child(json!({}), Some("gone"), false);
        assert!(keys(&delta(DeltaKind::Added, None, Some(stale)), m).is_empty());
    }

    #[test]
    fn updates() {
        let m = Deleting::AsUpdate;
        let a = child(json!({"a": "1"}), Some("rs1"), false);
        let b = child(json!({"a": "1"}), Some("rs2"), false);
        let released = child(json!({"a": "1"}), None, false);
        let relabelled = child(json!({"a": "2"}), None, false);
        let up = |o: &Arc<Value>, n: &Arc<Value>, m| {
            keys(
                &delta(DeltaKind::Updated, Some(o.clone()), Some(n.clone())),
                m,
            )
        };
        assert_eq!(up(&a, &b, m), ["ns/rs1", "ns/rs2"]);
        assert_eq!(up(&a, &a, m), ["ns/rs1"]);
        assert_eq!(up(&a, &released, m), ["ns/rs1", "ns/selecting"]);
        assert_eq!(up(&released, &relabelled, m), ["ns/selecting"]);
        assert!(up(&released, &released, m).is_empty());
        // Being deleted: as a deletion (the old controller too when the labels changed), or
        // as an update.
        let dying = child(json!({"a": "2"}), Some("rs2"), true);
        assert_eq!(up(&a, &dying, Deleting::AsDeletion), ["ns/rs1", "ns/rs2"]);
        let dying_same = child(json!({"a": "1"}), Some("rs2"), true);
        assert_eq!(up(&a, &dying_same, Deleting::AsDeletion), ["ns/rs2"]);
        assert_eq!(
            up(&a, &dying_same, Deleting::AsUpdate),
            ["ns/rs1", "ns/rs2"]
        );
    }
}
