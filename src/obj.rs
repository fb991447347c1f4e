//! Small accessors over API objects kept as `serde_json::Value`.
//!
//! Objects are read through these helpers (or through small typed views) and written with
//! patches or status updates of the full object, so no field is ever lost by a round trip.

use serde_json::{Map, Value};
use std::sync::Arc;

/// A cached object, shared by reference.
pub type Obj = Arc<Value>;

/// JSON-pointer lookups (`/spec/template/metadata/labels`) that allocate nothing.
/// `serde_json`'s own `pointer` builds two `String`s per token to undo `~1`/`~0` escapes; the
/// controllers look things up this way on every sync, so the escapes are undone only in a
/// token that has them.
pub trait At {
    fn at(&self, pointer: &str) -> Option<&Value>;
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

/// The tokens of a JSON pointer, unescaped (None: not a pointer).
fn tokens(pointer: &str) -> Option<impl Iterator<Item = std::borrow::Cow<'_, str>>> {
    let rest = pointer.strip_prefix('/')?;
    Some(rest.split('/').map(|t| {
        if t.contains('~') {
            std::borrow::Cow::Owned(t.replace("~1", "/").replace("~0", "~"))
        } else {
            std::borrow::Cow::Borrowed(t)
        }
    }))
}

/// An array index token as RFC 6901 spells it: digits, no leading zero but "0" itself.
fn index(token: &str) -> Option<usize> {
    if token.is_empty()
        || !token.bytes().all(|b| b.is_ascii_digit())
        || (token.len() > 1 && token.starts_with('0'))
    {
        return None;
    }
    token.parse().ok()
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        tokens(pointer)?.try_fold(self, |v, t| match v {
            Value::Object(m) => m.get(&*t),
            Value::Array(a) => a.get(index(&t)?),
            _ => None,
        })
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        tokens(pointer)?.try_fold(self, |v, t| match v {
            Value::Object(m) => m.get_mut(&*t),
            Value::Array(a) => a.get_mut(index(&t)?),
            _ => None,
        })
    }
}

fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata")?.as_object()
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    meta(v)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn name(v: &Value) -> &str {
    meta_str(v, "name")
}
pub fn namespace(v: &Value) -> &str {
    meta_str(v, "namespace")
}
pub fn uid(v: &Value) -> &str {
    meta_str(v, "uid")
}
pub fn resource_version(v: &Value) -> &str {
    meta_str(v, "resourceVersion")
}
pub fn creation_timestamp(v: &Value) -> &str {
    meta_str(v, "creationTimestamp")
}
pub fn is_deleting(v: &Value) -> bool {
    meta(v).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

pub fn labels(v: &Value) -> Option<&Map<String, Value>> {
    meta(v)?.get("labels")?.as_object()
}
pub fn annotations(v: &Value) -> Option<&Map<String, Value>> {
    meta(v)?.get("annotations")?.as_object()
}
pub fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    annotations(v)?.get(key)?.as_str()
}
pub fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    labels(v)?.get(key)?.as_str()
}

/// A label or annotation map (`v`) as Go decodes it into `map[string]string`: the entries
/// with string values; empty when absent or not a map.
pub fn string_map(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, x)| x.is_string())
                .map(|(k, x)| (k.clone(), x.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// `ns/name` for namespaced objects, `name` for cluster-scoped ones (client-go's
/// MetaNamespaceKeyFunc).
pub fn key(v: &Value) -> String {
    make_key(namespace(v), name(v))
}

pub fn make_key(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// Split a key into (namespace, name).
pub fn split_key(key: &str) -> (&str, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("", key),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

/// An owner reference as the object holds it, borrowed: reading one allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerRefView<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

impl OwnerRefView<'_> {
    pub fn to_owned(&self) -> OwnerRef {
        OwnerRef {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// The well-formed owner references of `v` (those naming apiVersion, kind, name and uid).
pub fn owner_ref_views(v: &Value) -> impl Iterator<Item = OwnerRefView<'_>> {
    meta(v)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(OwnerRefView {
                api_version: r.get("apiVersion")?.as_str()?,
                kind: r.get("kind")?.as_str()?,
                name: r.get("name")?.as_str()?,
                uid: r.get("uid")?.as_str()?,
                controller: r.get("controller").and_then(Value::as_bool) == Some(true),
                block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool)
                    == Some(true),
            })
        })
}

pub fn owner_refs(v: &Value) -> Vec<OwnerRef> {
    owner_ref_views(v).map(|r| r.to_owned()).collect()
}

/// The controller reference, if any (the first that says `controller: true`).
pub fn controller_ref(v: &Value) -> Option<OwnerRefView<'_>> {
    owner_ref_views(v).find(|r| r.controller)
}

/// Drop what nothing in edgekcm reads, before an object enters the cache.
pub fn compact(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

/// Keep of `v` only `apiVersion`, `kind`, `metadata` and the subtrees at the JSON pointers
/// `keep` (e.g. `/spec/nodeName`, `/status`), dropping the rest. A `*` token stands for every
/// element of an array (`/spec/containers/*/ports`: the ports of each container; elements
/// that keep nothing are dropped). A path through a scalar, or through an array without `*`,
/// keeps nothing; an object or array that keeps nothing is left out.
pub fn project(v: &mut Value, keep: &[&str]) {
    let Value::Object(old) = v else {
        return;
    };
    let mut out = Map::new();
    for (k, x) in std::mem::take(old) {
        match k.as_str() {
            "apiVersion" | "kind" | "metadata" => {
                out.insert(k, x);
            }
            _ => {
                if let Some(kept) = KeptPaths::under(keep, &k).and_then(|p| p.keep(x)) {
                    out.insert(k, kept);
                }
            }
        }
    }
    *v = Value::Object(out);
}

/// The paths of a projection below one key: `whole` when the key itself is kept, else the
/// remainders (each starting with `/`). `api::trim` decodes by the same rules.
#[derive(Clone, Debug)]
pub struct KeptPaths<'a> {
    pub whole: bool,
    pub rest: Vec<&'a str>,
}

impl<'a> KeptPaths<'a> {
    /// The paths of `paths` that go through `key` (`*` for the elements of an array), or
    /// None when none does.
    pub fn under(paths: &[&'a str], key: &str) -> Option<KeptPaths<'a>> {
        let mut p = KeptPaths {
            whole: false,
            rest: Vec::new(),
        };
        for f in paths {
            let Some(after) = f.strip_prefix('/').and_then(|f| f.strip_prefix(key)) else {
                continue;
            };
            if after.is_empty() {
                p.whole = true;
            } else if after.starts_with('/') {
                p.rest.push(after);
            }
        }
        (p.whole || !p.rest.is_empty()).then_some(p)
    }

    /// What is kept of `v`; None when nothing is.
    pub fn keep(&self, v: Value) -> Option<Value> {
        if self.whole {
            return Some(v);
        }
        match v {
            Value::Object(m) => {
                let out: Map<String, Value> = m
                    .into_iter()
                    .filter_map(|(k, x)| {
                        let kept = KeptPaths::under(&self.rest, &k)?.keep(x)?;
                        Some((k, kept))
                    })
                    .collect();
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Value::Array(a) => {
                let each = KeptPaths::under(&self.rest, "*")?;
                let out: Vec<Value> = a.into_iter().filter_map(|x| each.keep(x)).collect();
                (!out.is_empty()).then_some(Value::Array(out))
            }
            _ => None,
        }
    }
}

/// Evaluate a `metav1.LabelSelector` (`matchLabels` + `matchExpressions`) against an object.
/// An empty selector matches everything; a malformed one matches nothing (as upstream's
/// `LabelSelectorAsSelector` fails closed).
pub fn selector_matches(selector: &Value, v: &Value) -> bool {
    let labels = labels(v);
    selector_matches_with(selector, |k| {
        labels.and_then(|l| l.get(k)).and_then(Value::as_str)
    })
}

/// `selector_matches` over any label lookup (`get` gives a label's value by key).
pub fn selector_matches_with<'a>(selector: &Value, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    let Some(sel) = selector.as_object() else {
        return false;
    };
    if let Some(ml) = sel.get("matchLabels") {
        match ml.as_object() {
            Some(ml) => {
                let all = ml
                    .iter()
                    .all(|(k, want)| want.as_str().is_some_and(|w| get(k) == Some(w)));
                if !all {
                    return false;
                }
            }
            None if ml.is_null() => {}
            None => return false,
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let ok = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => get(key).is_some_and(|x| values.contains(&x)),
                "NotIn" => !get(key).is_some_and(|x| values.contains(&x)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

/// An object's labels in a compact form, for indexes that keep many of them (a JSON map
/// costs a B-tree node of eleven slots however few labels it holds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The string-valued labels of `v`.
    pub fn of(v: &Value) -> Self {
        labels(v).map(Labels::from_map).unwrap_or_default()
    }

    /// The string-valued entries of a label map.
    pub fn from_map(m: &Map<String, Value>) -> Self {
        Labels(
            m.iter()
                .filter_map(|(k, x)| Some((k.as_str().into(), x.as_str()?.into())))
                .collect(),
        )
    }

    /// Does every label here appear in `v`'s labels with the same value?
    pub fn all_in(&self, v: &Value) -> bool {
        let have = labels(v);
        self.0.iter().all(|(k, want)| {
            have.and_then(|l| l.get(&**k))
                .and_then(Value::as_str)
                .is_some_and(|x| x == &**want)
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Does `selector` (a `metav1.LabelSelector`) match these labels?
    pub fn selected_by(&self, selector: &Value) -> bool {
        selector_matches_with(selector, |k| self.get(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_map_keeps_the_string_entries() {
        let v = json!({"a": "1", "b": 2, "c": null, "d": ""});
        assert_eq!(
            Value::Object(string_map(Some(&v))),
            json!({"a": "1", "d": ""})
        );
        assert!(string_map(Some(&json!("x"))).is_empty());
        assert!(string_map(None).is_empty());
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn at_finds_what_serde_json_pointer_finds() {
        let mut v = json!({
            "spec": {"template": {"metadata": {"labels": {"a/b": "slash", "m~n": "tilde"}}},
                     "list": [10, {"x": 11}, [12]], "": {"": "empty"}},
            "n": null
        });
        for p in [
            "",
            "/",
            "/spec",
            "/spec/template/metadata/labels",
            "/spec/template/metadata/labels/a~1b",
            "/spec/template/metadata/labels/m~0n",
            "/spec/template/metadata/labels/a/b",
            "/spec/list/0",
            "/spec/list/1/x",
            "/spec/list/2/0",
            "/spec/list/3",
            "/spec/list/01",
            "/spec/list/-1",
            "/spec/list/+1",
            "/spec/list/x",
            "/spec//",
            "/spec/",
            "/n",
            "/n/x",
            "spec",
            "/missing/deeper",
            "/spec/list/1/x/y",
        ] {
            assert_eq!(v.at(p), v.pointer(p), "{p:?}");
            let want = v.clone().pointer_mut(p).map(|x| x.clone());
            assert_eq!(v.at_mut(p).map(|x| x.clone()), want, "{p:?}");
        }
        *v.at_mut("/spec/list/1/x").unwrap() = json!(99);
        assert_eq!(v["spec"]["list"][1]["x"], 99);
    }

    #[test]
    fn compact_labels_match_as_the_object_does() {
        let v = json!({"metadata": {"labels": {"app": "web", "tier": "front", "n": 1}}});
        let l = Labels::of(&v);
        assert_eq!(l.get("app"), Some("web"));
        assert_eq!(l.get("n"), None, "non-string values are not labels");
        for sel in [
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchLabels": {"app": "db"}}),
            json!({"matchLabels": {"app": "web", "tier": "back"}}),
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}),
            json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
            json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
            json!({}),
            json!("not a selector"),
        ] {
            assert_eq!(l.selected_by(&sel), selector_matches(&sel, &v), "{sel}");
        }
        assert!(Labels::of(&json!({"metadata": {}})).is_empty());
    }

    #[test]
    fn accessors_and_keys() {
        let v = json!({"metadata":{"name":"a","namespace":"ns","uid":"u1","labels":{"x":"1"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"o1","controller":true}],
            "managedFields":[{}]}});
        assert_eq!(key(&v), "ns/a");
        assert_eq!(split_key("ns/a"), ("ns", "a"));
        assert_eq!(split_key("node1"), ("", "node1"));
        assert_eq!(controller_ref(&v).map(|r| r.uid), Some("o1"));
        assert_eq!(label(&v, "x"), Some("1"));
        let mut c = v.clone();
        compact(&mut c);
        assert!(c["metadata"].get("managedFields").is_none());
        assert!(!is_deleting(&v));
    }

    #[test]
    fn projection_keeps_identity_metadata_and_the_chosen_subtrees() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}], "volumes": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}});
        project(
            &mut pod,
            &["/spec/nodeName", "/status", "/spec/absent", "/no/such"],
        );
        assert_eq!(
            pod,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"a": "b"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}})
        );
        // The order and repeats of the paths change nothing.
        let pod = json!({"metadata": {}, "data": {"x": 1, "y": 2}, "z": true});
        for keep in [
            &["/data/x", "/data"][..],
            &["/data", "/data/x"],
            &["/data", "/data"],
            &["/z", "/data", "/z"],
        ] {
            let mut p = pod.clone();
            project(&mut p, keep);
            assert_eq!(p["data"], json!({"x": 1, "y": 2}), "{keep:?}");
        }
        // Nothing to keep: only identity and metadata remain.
        let mut unscheduled = json!({"metadata": {"name": "q"}, "spec": {"containers": []}});
        project(&mut unscheduled, &["/spec/nodeName", "/status"]);
        assert_eq!(unscheduled, json!({"metadata": {"name": "q"}}));
    }

    #[test]
    fn selectors() {
        let pod = json!({"metadata":{"labels":{"app":"web","tier":"fe"}}});
        assert!(selector_matches(&json!({}), &pod));
        assert!(selector_matches(
            &json!({"matchLabels":{"app":"web"}}),
            &pod
        ));
        assert!(!selector_matches(
            &json!({"matchLabels":{"app":"db"}}),
            &pod
        ));
        assert!(selector_matches(
            &json!({"matchExpressions":[{"key":"tier","operator":"In","values":["fe","be"]}]}),
            &pod
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions":[{"key":"tier","operator":"DoesNotExist"}]}),
            &pod
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions":[{"key":"tier","operator":"Bogus"}]}),
            &pod
        ));
    }
}
