//! What to do with an object whose owners were looked up (upstream's attemptToDeleteItem after
//! classifyReferences), and the patches the garbage collector sends.

use super::graph::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
use crate::obj::At as _;
use crate::obj::OwnerRef;
use serde_json::{json, Value};

/// What a live look at one owner found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Not found, or found with another UID.
    Dangling,
    /// Exists and is not waiting for its dependents.
    Solid,
    /// Being deleted with the `foregroundDeletion` finalizer.
    WaitingForDependents,
}

impl OwnerState {
    /// Classify an owner's live metadata.
    pub fn of_owner(owner: &Value) -> OwnerState {
        let deleting = crate::obj::is_deleting(owner);
        if deleting && finalizers(owner).iter().any(|f| f == FINALIZER_FOREGROUND) {
            OwnerState::WaitingForDependents
        } else {
            OwnerState::Solid
        }
    }
}

/// The decision for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Keep it as it is.
    Keep,
    /// Keep it, dropping the references to these owner UIDs (dangling, or waiting for their
    /// dependents while another owner stays).
    RemoveRefs(Vec<String>),
    /// An owner waits for its dependents and this object has dependents of its own: delete it
    /// in the foreground, after making its own references non-blocking when one of its
    /// dependents also deletes in the foreground (to break a cycle).
    DeleteForeground { unblock_first: bool },
    /// No owner stays: delete it with this propagation policy.
    Delete(&'static str),
}

pub fn finalizers(o: &Value) -> Vec<String> {
    o.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Decide from the classified references of an object.
/// `has_dependents`/`dependent_deleting_dependents` come from the graph.
pub fn decide(
    refs: &[(OwnerRef, OwnerState)],
    has_dependents: bool,
    dependent_deleting_dependents: bool,
    object_finalizers: &[String],
) -> Decision {
    if refs.is_empty() {
        return Decision::Keep;
    }
    let uids = |s: OwnerState| -> Vec<String> {
        refs.iter()
            .filter(|(_, st)| *st == s)
            .map(|(r, _)| r.uid.clone())
            .collect()
    };
    let (solid, dangling, waiting) = (
        uids(OwnerState::Solid),
        uids(OwnerState::Dangling),
        uids(OwnerState::WaitingForDependents),
    );
    if !solid.is_empty() {
        if dangling.is_empty() && waiting.is_empty() {
            return Decision::Keep;
        }
        let mut remove = dangling;
        remove.extend(waiting);
        return Decision::RemoveRefs(remove);
    }
    if !waiting.is_empty() && has_dependents {
        return Decision::DeleteForeground {
            unblock_first: dependent_deleting_dependents,
        };
    }
    let has = |f: &str| object_finalizers.iter().any(|x| x == f);
    let policy = if has(FINALIZER_ORPHAN) {
        "Orphan"
    } else if has(FINALIZER_FOREGROUND) {
        "Foreground"
    } else {
        "Background"
    };
    Decision::Delete(policy)
}

/// Strategic merge patch removing owner references by UID; the dependent's UID in the patch
/// makes it apply only to that object (`GenerateDeleteOwnerRefStrategicMergeBytes`).
pub fn delete_refs_smp(dependent_uid: &str, owner_uids: &[String]) -> Value {
    let refs: Vec<Value> = owner_uids
        .iter()
        .map(|u| json!({"$patch": "delete", "uid": u}))
        .collect();
    json!({"metadata": {"ownerReferences": refs, "uid": dependent_uid}})
}

/// JSON merge patch fallback (custom resources answer 415 to strategic merge patches): the
/// remaining references in full, guarded by the resourceVersion they were read at.
pub fn delete_refs_merge(current: &Value, owner_uids: &[String]) -> Value {
    let keep: Vec<Value> = current
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| {
            let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
            !owner_uids.iter().any(|u| u == uid)
        })
        .cloned()
        .collect();
    let refs = if keep.is_empty() {
        Value::Null
    } else {
        Value::Array(keep)
    };
    json!({"metadata": {"resourceVersion": crate::obj::resource_version(current),
                        "ownerReferences": refs}})
}

fn ref_json(r: &OwnerRef, block: bool) -> Value {
    let mut v = json!({"apiVersion": r.api_version, "kind": r.kind, "name": r.name,
                       "uid": r.uid, "blockOwnerDeletion": block});
    if r.controller {
        v["controller"] = json!(true);
    }
    v
}

/// Strategic merge patch making the blocking references of an object non-blocking.
pub fn unblock_smp(uid: &str, owners: &[OwnerRef]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .filter(|o| o.block_owner_deletion)
        .map(|o| ref_json(o, false))
        .collect();
    json!({"metadata": {"ownerReferences": refs, "uid": uid}})
}

/// JSON merge patch fallback: every reference, none blocking.
pub fn unblock_merge(resource_version: &str, owners: &[OwnerRef]) -> Value {
    let refs: Vec<Value> = owners.iter().map(|o| ref_json(o, false)).collect();
    json!({"metadata": {"resourceVersion": resource_version, "ownerReferences": refs}})
}

/// JSON merge patch removing one finalizer, guarded by the resourceVersion; None when the
/// object does not carry it.
pub fn remove_finalizer_patch(current: &Value, finalizer: &str) -> Option<Value> {
    let all = finalizers(current);
    if !all.iter().any(|f| f == finalizer) {
        return None;
    }
    let rest: Vec<&String> = all.iter().filter(|f| *f != finalizer).collect();
    let fins = if rest.is_empty() {
        Value::Null
    } else {
        json!(rest)
    };
    Some(
        json!({"metadata": {"resourceVersion": crate::obj::resource_version(current),
                             "finalizers": fins}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(uid: &str, block: bool) -> OwnerRef {
        OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            controller: uid == "1",
            block_owner_deletion: block,
        }
    }

    use OwnerState::*;

    #[test]
    fn which_dependents_are_deleted() {
        // Every owner gone: delete, in the background by default.
        assert_eq!(
            decide(&[(r("1", true), Dangling)], false, false, &[]),
            Decision::Delete("Background")
        );
        // An orphan or foreground finalizer already there is honoured.
        assert_eq!(
            decide(
                &[(r("1", true), Dangling)],
                false,
                false,
                &["orphan".into()]
            ),
            Decision::Delete("Orphan")
        );
        assert_eq!(
            decide(
                &[(r("1", true), Dangling)],
                true,
                false,
                &["foregroundDeletion".into()]
            ),
            Decision::Delete("Foreground")
        );
        // No references: nothing to do.
        assert_eq!(decide(&[], true, true, &[]), Decision::Keep);
        // An owner stays: keep.
        assert_eq!(
            decide(&[(r("1", true), Solid)], false, false, &[]),
            Decision::Keep
        );
    }

    #[test]
    fn dangling_references_are_removed_when_an_owner_stays() {
        assert_eq!(
            decide(
                &[
                    (r("1", true), Solid),
                    (r("2", false), Dangling),
                    (r("3", true), WaitingForDependents)
                ],
                false,
                false,
                &[]
            ),
            Decision::RemoveRefs(vec!["2".into(), "3".into()])
        );
    }

    #[test]
    fn foreground_owner_blocks_and_cascades() {
        // Owner deleting in the foreground, dependent has dependents: foreground too.
        assert_eq!(
            decide(&[(r("1", true), WaitingForDependents)], true, false, &[]),
            Decision::DeleteForeground {
                unblock_first: false
            }
        );
        // One of its dependents deletes in the foreground as well: unblock first.
        assert_eq!(
            decide(&[(r("1", true), WaitingForDependents)], true, true, &[]),
            Decision::DeleteForeground {
                unblock_first: true
            }
        );
        // A leaf: deleted in the background.
        assert_eq!(
            decide(
                &[
                    (r("1", true), WaitingForDependents),
                    (r("2", false), Dangling)
                ],
                false,
                false,
                &[]
            ),
            Decision::Delete("Background")
        );
    }

    #[test]
    fn owner_states() {
        let fg = serde_json::json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z",
            "finalizers": ["foregroundDeletion"]}});
        assert_eq!(OwnerState::of_owner(&fg), WaitingForDependents);
        let bg = serde_json::json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z",
            "finalizers": ["x"]}});
        assert_eq!(OwnerState::of_owner(&bg), Solid);
        assert_eq!(OwnerState::of_owner(&serde_json::json!({})), Solid);
    }

    #[test]
    fn patches() {
        assert_eq!(
            delete_refs_smp("d", &["1".into()]),
            serde_json::json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "1"}], "uid": "d"}})
        );
        let cur = serde_json::json!({"metadata": {"resourceVersion": "7", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "1"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "2", "controller": true}]}});
        assert_eq!(
            delete_refs_merge(&cur, &["1".into()]),
            serde_json::json!({"metadata": {"resourceVersion": "7", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "2", "controller": true}]}})
        );
        assert_eq!(
            delete_refs_merge(&cur, &["1".into(), "2".into()]),
            serde_json::json!({"metadata": {"resourceVersion": "7", "ownerReferences": null}})
        );
        let owners = [r("1", true), r("2", false)];
        assert_eq!(
            unblock_smp("u", &owners)["metadata"]["ownerReferences"],
            serde_json::json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-1",
                "uid": "1", "blockOwnerDeletion": false, "controller": true}])
        );
        assert_eq!(
            unblock_merge("9", &owners)["metadata"]["ownerReferences"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        let fin = serde_json::json!({"metadata": {"resourceVersion": "3",
            "finalizers": ["orphan", "x/y"]}});
        assert_eq!(
            remove_finalizer_patch(&fin, "orphan"),
            Some(serde_json::json!({"metadata": {"resourceVersion": "3", "finalizers": ["x/y"]}}))
        );
        assert_eq!(remove_finalizer_patch(&fin, "foregroundDeletion"), None);
        let only =
            serde_json::json!({"metadata": {"resourceVersion": "3", "finalizers": ["orphan"]}});
        assert_eq!(
            remove_finalizer_patch(&only, "orphan"),
            Some(serde_json::json!({"metadata": {"resourceVersion": "3", "finalizers": null}}))
        );
    }
}
