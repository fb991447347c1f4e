//! Controller references: which children an owner claims, adopts or releases, and the
//! strategic-merge patches that adopt or release one (the child's UID rides along as a
//! precondition, so a recreated child of the same name is never touched).
//!
//! Shared by every controller that owns children through a label selector (ReplicaSet and
//! ReplicationController own Pods, Deployment owns ReplicaSets, ...).

use crate::api::Kind;
use crate::cache::Delta;
use crate::obj;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::RwLock;

/// What an owner should do about one candidate child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Already controlled by this owner and still selected: it counts.
    Owned,
    /// An orphan the selector matches: adopt it (then it counts).
    Adopt,
    /// Controlled by this owner but no longer selected: release it (it does not count).
    Release,
    /// Not ours and not to be taken (another controller's, deleting, or not selected).
    Ignore,
}

/// Decide about `child` for `owner`, whose `selector` is a `metav1.LabelSelector`
/// (`None` selects nothing, as a nil selector does upstream).
///
/// Follows upstream's rules: a child controlled by someone else is never touched; a
/// controlled child that stopped matching is released unless the owner is being deleted;
/// an orphan is adopted only when it matches, neither side is being deleted.
pub fn claim(owner: &Value, selector: Option<&Value>, child: &Value) -> Claim {
    let matches = selector.is_some_and(|s| obj::selector_matches(s, child));
    match obj::controller_ref(child) {
        Some(r) if r.uid != obj::uid(owner) => Claim::Ignore,
        Some(_) if matches => Claim::Owned,
        Some(_) if obj::is_deleting(owner) => Claim::Ignore,
        Some(_) => Claim::Release,
        None if !matches || obj::is_deleting(owner) || obj::is_deleting(child) => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Whether `claim` would do anything with `child` (own, adopt or release it). An orphan's
/// metadata is enough to tell.
pub fn may_take(owner: &Value, selector: Option<&Value>, child: &Value) -> bool {
    claim(owner, selector, child) != Claim::Ignore
}

/// Whether `claim` would adopt an orphan with these labels (`deleting`: it is being
/// deleted), told without the orphan itself: what an index of orphans keeps is enough.
pub fn may_adopt(
    owner: &Value,
    selector: Option<&Value>,
    labels: &obj::Labels,
    deleting: bool,
) -> bool {
    !deleting && !obj::is_deleting(owner) && selector.is_some_and(|s| labels.selected_by(s))
}

/// The controller ownerReference that points at `owner` (of kind `kind`).
pub fn controller_owner_ref(kind: &Kind, owner: &Value) -> Value {
    json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "name": obj::name(owner),
        "uid": obj::uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Strategic-merge patch adopting the child with UID `child_uid`.
pub fn adopt_patch(kind: &Kind, owner: &Value, child_uid: &str) -> Value {
    json!({
        "metadata": {
            "ownerReferences": [controller_owner_ref(kind, owner)],
            "uid": child_uid,
        }
    })
}

/// Strategic-merge patch removing the reference to `owner_uid` from the child `child_uid`.
pub fn release_patch(owner_uid: &str, child_uid: &str) -> Value {
    json!({
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "uid": child_uid,
        }
    })
}

/// The write that adopts `child` (a `child_kind` in `ns`) for `owner` (a `kind`): the
/// strategic merge patch of [`adopt_patch`].
pub fn adopt_action(
    child_kind: Kind,
    ns: &str,
    child: &Value,
    kind: &Kind,
    owner: &Value,
) -> super::Action {
    super::Action::Patch {
        kind: child_kind,
        namespace: ns.to_string(),
        name: obj::name(child).to_string(),
        patch_type: crate::api::client::PatchType::Strategic,
        patch: adopt_patch(kind, owner, obj::uid(child)),
        subresource: None,
    }
}

/// The write that releases `child` (a `child_kind` in `ns`) from the owner with
/// `owner_uid`: the strategic merge patch of [`release_patch`].
pub fn release_action(child_kind: Kind, ns: &str, child: &Value, owner_uid: &str) -> super::Action {
    super::Action::Patch {
        kind: child_kind,
        namespace: ns.to_string(),
        name: obj::name(child).to_string(),
        patch_type: crate::api::client::PatchType::Strategic,
        patch: release_patch(owner_uid, obj::uid(child)),
        subresource: None,
    }
}

/// Upstream's `RecheckDeletionTimestamp`, done before adopting: read the owner live (a quorum
/// read, not the cache) and adopt only if it is the same object and not being deleted.
pub fn recheck_deletion(
    client: &crate::api::client::Client,
    kind: &Kind,
    owner: &Value,
) -> crate::Result<()> {
    let (ns, name, uid) = (obj::namespace(owner), obj::name(owner), obj::uid(owner));
    let recheck =
        |m: String| crate::Error::Transport(format!("can't recheck DeletionTimestamp: {m}"));
    let fresh = client
        .get(kind, Some(ns).filter(|n| !n.is_empty()), name)
        .map_err(|e| recheck(e.to_string()))?;
    if obj::uid(&fresh) != uid {
        return Err(recheck(format!(
            "original {} {ns}/{name} is gone: got uid {}, wanted {uid}",
            kind.kind,
            obj::uid(&fresh)
        )));
    }
    if obj::is_deleting(&fresh) {
        let at = fresh["metadata"]["deletionTimestamp"]
            .as_str()
            .unwrap_or("");
        return Err(crate::Error::Transport(format!(
            "{ns}/{name} has just been deleted at {at}"
        )));
    }
    Ok(())
}

/// The selectors of one kind of owner, by key (`namespace/name`), kept in step with the
/// owners' watch: which owners select a new orphan is answered from here, without decoding
/// every owner of the namespace for every orphan event (upstream matches over its informer's
/// objects, which cost nothing to read). Only selectors that can select something are kept.
#[derive(Default)]
pub struct SelectorIndex(RwLock<BTreeMap<String, Kept>>);

/// A selector as the index keeps it: a plain `matchLabels` as compact labels (a JSON map
/// costs a B-tree node per level however few entries it holds), anything else as it came.
enum Kept {
    Labels(obj::Labels),
    Json(Value),
}

impl Kept {
    fn new(s: Value) -> Kept {
        let Some(m) = s.as_object() else {
            return Kept::Json(s);
        };
        // What `obj::selector_matches` reads: a non-empty `matchExpressions` array, and
        // `matchLabels` (compared as strings; anything else there stays JSON).
        let exprs = m
            .get("matchExpressions")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let labels = match m.get("matchLabels") {
            None | Some(Value::Null) => Some(obj::Labels::default()),
            Some(Value::Object(l)) if l.values().all(Value::is_string) => {
                Some(obj::Labels::from_map(l))
            }
            Some(_) => None,
        };
        match labels {
            Some(l) if !exprs => Kept::Labels(l),
            _ => Kept::Json(s),
        }
    }

    fn matches(&self, child: &Value) -> bool {
        match self {
            Kept::Labels(l) => l.all_in(child),
            Kept::Json(s) => obj::selector_matches(s, child),
        }
    }
}

impl SelectorIndex {
    /// Follow one delta of the owners' watch. `selector` gives the owner's selector as
    /// `obj::selector_matches` reads it, or None when it selects nothing.
    pub fn observe(&self, d: &Delta, selector: impl Fn(&Value) -> Option<Value>) {
        let key = obj::key(d.object());
        let sel = d.new.as_deref().and_then(selector).map(Kept::new);
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        match sel {
            Some(s) => m.insert(key, s),
            None => m.remove(&key),
        };
    }

    /// Keys of the owners in `child`'s namespace whose selector matches it, in key order.
    pub fn matching(&self, child: &Value) -> Vec<String> {
        if obj::labels(child).is_none_or(|l| l.is_empty()) {
            return vec![];
        }
        let ns = obj::namespace(child);
        let (lo, hi) = (format!("{ns}/"), format!("{ns}0")); // '0' follows '/'
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        m.range(lo..hi)
            .filter(|(_, s)| s.matches(child))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::REPLICASETS;
    use crate::obj::At as _;

    fn owner(deleting: bool) -> Value {
        let mut o = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "o-1"}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        o
    }

    fn child(app: &str, controller_uid: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "c-1",
            "labels": {"app": app}}});
        if let Some(u) = controller_uid {
            c["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "x", "uid": u, "controller": true}]);
        }
        c
    }

    #[test]
    fn claim_table() {
        let sel = json!({"matchLabels": {"app": "web"}});
        let s = Some(&sel);
        let cases = [
            (owner(false), child("web", Some("o-1")), Claim::Owned),
            (owner(false), child("db", Some("o-1")), Claim::Release),
            (owner(true), child("db", Some("o-1")), Claim::Ignore),
            (owner(false), child("web", Some("other")), Claim::Ignore),
            (owner(false), child("web", None), Claim::Adopt),
            (owner(true), child("web", None), Claim::Ignore),
            (owner(false), child("db", None), Claim::Ignore),
        ];
        for (o, c, want) in cases {
            assert_eq!(claim(&o, s, &c), want, "{c}");
        }
        assert_eq!(
            claim(&owner(false), None, &child("web", None)),
            Claim::Ignore
        );
        let mut deleting_child = child("web", None);
        deleting_child["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(claim(&owner(false), s, &deleting_child), Claim::Ignore);
    }

    #[test]
    fn selector_index_follows_the_watch() {
        use crate::cache::DeltaKind;
        use std::sync::Arc;
        let owner = |ns: &str, name: &str, app: Option<&str>| {
            let spec = match app {
                Some(a) => json!({"selector": {"matchLabels": {"app": a}}}),
                None => json!({}),
            };
            Arc::new(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec}))
        };
        let delta =
            |kind, old: Option<Arc<Value>>, new: Option<Arc<Value>>| Delta { kind, old, new };
        let sel = |o: &Value| o.at("/spec/selector").cloned();
        let idx = SelectorIndex::default();
        for (ns, name, app) in [
            ("ns", "b", "web"),
            ("ns", "a", "web"),
            ("other", "c", "web"),
        ] {
            idx.observe(
                &delta(DeltaKind::Added, None, Some(owner(ns, name, Some(app)))),
                sel,
            );
        }
        idx.observe(
            &delta(DeltaKind::Added, None, Some(owner("ns", "none", None))),
            sel,
        );
        let pod = child("web", None);
        assert_eq!(idx.matching(&pod), ["ns/a", "ns/b"]);
        assert!(idx.matching(&child("db", None)).is_empty());
        let unlabeled = json!({"metadata": {"name": "p", "namespace": "ns"}});
        assert!(idx.matching(&unlabeled).is_empty());
        // A changed selector replaces the old one; a deletion drops it.
        let (old, new) = (owner("ns", "a", Some("web")), owner("ns", "a", Some("db")));
        idx.observe(
            &delta(DeltaKind::Updated, Some(old), Some(new.clone())),
            sel,
        );
        assert_eq!(idx.matching(&pod), ["ns/b"]);
        assert_eq!(idx.matching(&child("db", None)), ["ns/a"]);
        idx.observe(&delta(DeltaKind::Deleted, Some(new), None), sel);
        assert!(idx.matching(&child("db", None)).is_empty());
        idx.observe(
            &delta(
                DeltaKind::Deleted,
                Some(owner("ns", "b", Some("web"))),
                None,
            ),
            sel,
        );
        assert!(idx.matching(&pod).is_empty());
    }

    #[test]
    fn kept_selectors_match_as_the_json_does() {
        let pods = [
            child("web", None),
            child("db", None),
            json!({"metadata": {"labels": {"app": "web", "n": 1}}}),
            json!({"metadata": {}}),
        ];
        for sel in [
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchLabels": {"app": "web"}, "matchExpressions": []}),
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "app", "operator": "NotIn", "values": ["db"]}]}),
            json!({"matchLabels": {"n": 1}}),
            json!({"matchLabels": "bogus"}),
            json!({"matchLabels": null}),
            json!({}),
            json!(["not", "a", "selector"]),
        ] {
            let kept = Kept::new(sel.clone());
            for p in &pods {
                assert_eq!(kept.matches(p), obj::selector_matches(&sel, p), "{sel} {p}");
            }
        }
        assert!(matches!(
            Kept::new(json!({"matchLabels": {"a": "b"}})),
            Kept::Labels(_)
        ));
    }

    #[test]
    fn may_adopt_agrees_with_claim_for_orphans() {
        let web = json!({"matchLabels": {"app": "web"}});
        let expr = json!({"matchExpressions": [{"key": "app", "operator": "In",
            "values": ["db", "web"]}]});
        for sel in [Some(&web), Some(&expr), None] {
            for deleting_owner in [false, true] {
                for app in ["web", "db", "cache"] {
                    for deleting_child in [false, true] {
                        let o = owner(deleting_owner);
                        let mut c = child(app, None);
                        if deleting_child {
                            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                        }
                        let want = claim(&o, sel, &c) == Claim::Adopt;
                        let labels = obj::Labels::of(&c);
                        assert_eq!(may_adopt(&o, sel, &labels, deleting_child), want, "{c}");
                    }
                }
            }
        }
    }

    #[test]
    fn adopt_and_release_actions_patch_the_child() {
        use crate::api::resources::PODS;
        let child = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "c-1"}});
        match adopt_action(PODS, "ns", &child, &REPLICASETS, &owner(false)) {
            super::super::Action::Patch {
                kind,
                namespace,
                name,
                patch,
                subresource: None,
                ..
            } => {
                assert_eq!((kind, &*namespace, &*name), (PODS, "ns", "p"));
                assert_eq!(patch, adopt_patch(&REPLICASETS, &owner(false), "c-1"));
            }
            a => panic!("{a:?}"),
        }
        match release_action(PODS, "ns", &child, "o-1") {
            super::super::Action::Patch { name, patch, .. } => {
                assert_eq!(name, "p");
                assert_eq!(patch, release_patch("o-1", "c-1"));
            }
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn patches_carry_uid_precondition() {
        let p = adopt_patch(&REPLICASETS, &owner(false), "c-1");
        assert_eq!(p["metadata"]["uid"], "c-1");
        let r = &p["metadata"]["ownerReferences"][0];
        assert_eq!(r["kind"], "ReplicaSet");
        assert_eq!(r["apiVersion"], "apps/v1");
        assert_eq!(r["uid"], "o-1");
        assert_eq!(r["controller"], true);
        assert_eq!(r["blockOwnerDeletion"], true);
        let p = release_patch("o-1", "c-1");
        assert_eq!(
            p,
            json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "o-1"}], "uid": "c-1"}})
        );
    }
}
