//! Decoding objects for the cache without building what the cache would drop.
//!
//! A watch event or list item is decoded straight into the shape the store keeps
//! (`obj::compact`, then `obj::project` when the informer's readers asked for parts only):
//! `metadata.managedFields` and every part nobody reads are skipped by the parser instead of
//! being built as JSON values and freed again. For a pod whose readers want `/spec/nodeName`
//! and `/status`, that skips the containers, volumes and tolerations of every event.
//!
//! Paths are JSON pointers through object keys (no array indexes, no `~` escapes); `*`
//! stands for every element of an array (`obj::project` has the rules).

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Decode one object as the cache keeps it. `fields`: None keeps everything but
/// `metadata.managedFields`; Some(paths) keeps `apiVersion`, `kind`, `metadata` (without
/// `managedFields`) and the subtrees at `paths`.
#[derive(Clone, Copy)]
pub struct Trim<'a> {
    pub fields: Option<&'a [&'a str]>,
}

/// An owned `Trim`: how a watch stream or list decodes its objects for the cache.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub fields: Option<std::sync::Arc<[&'static str]>>,
}

impl Shape {
    pub fn trim(&self) -> Trim<'_> {
        Trim {
            fields: self.fields.as_deref(),
        }
    }
}

/// Decode `bytes` (one JSON object) with `Trim`.
pub fn from_slice(bytes: &[u8], fields: Option<&[&str]>) -> serde_json::Result<Value> {
    decode(serde_json::Deserializer::from_slice(bytes), fields)
}

/// As `from_slice`, for text known to be UTF-8 (the cache's): its strings are not checked
/// again as they are decoded.
pub fn from_str(text: &str, fields: Option<&[&str]>) -> serde_json::Result<Value> {
    decode(serde_json::Deserializer::from_str(text), fields)
}

fn decode<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    fields: Option<&[&str]>,
) -> serde_json::Result<Value> {
    let v = Trim { fields }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

impl<'de> DeserializeSeed<'de> for Trim<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(TopVisitor(self))
    }
}

/// The scalar and array cases of a visitor that keeps a value as it is.
macro_rules! keep_as_is {
    () => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Value::Bool(v).into())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Value::from(v).into())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Value::from(v).into())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Value::from(v).into())
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Value::String(v.to_string()).into())
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Value::String(v).into())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Value::Null.into())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Value::Null.into())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(x) = seq.next_element::<Value>()? {
                out.push(x);
            }
            Ok(Value::Array(out).into())
        }
    };
}

struct TopVisitor<'a>(Trim<'a>);

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }
    keep_as_is!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => {
                    let m = map.next_value_seed(Metadata)?;
                    out.insert(key, m);
                }
                "apiVersion" | "kind" => {
                    let v = map.next_value::<Value>()?;
                    out.insert(key, v);
                }
                _ => match self.0.fields {
                    None => {
                        let v = map.next_value::<Value>()?;
                        out.insert(key, v);
                    }
                    Some(fields) => match Paths::under(fields, &key) {
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        // A key given twice counts as its last value, kept or not (as
                        // in a decoded Value).
                        Some(sub) => {
                            match map.next_value_seed(sub)? {
                                Some(v) => out.insert(key, v),
                                None => out.remove(&key),
                            };
                        }
                    },
                },
            }
        }
        Ok(Value::Object(out))
    }
}

/// `metadata` without `managedFields`.
struct Metadata;

impl<'de> DeserializeSeed<'de> for Metadata {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(MetadataVisitor)
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("object metadata")
    }
    keep_as_is!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "managedFields" {
                map.next_value::<IgnoredAny>()?;
            } else {
                let v = map.next_value::<Value>()?;
                out.insert(key, v);
            }
        }
        Ok(Value::Object(out))
    }
}

use crate::obj::KeptPaths as Paths;

/// Decodes a value below a kept path: the whole value, or (for an object) only the keys that
/// lead to kept paths. None when nothing under it is kept (a scalar or array where an object
/// was expected, or an object without any of the keys), as `obj::project` leaves it out.
impl<'de> DeserializeSeed<'de> for Paths<'_> {
    type Value = Option<Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        if self.whole {
            return Value::deserialize(d).map(Some);
        }
        d.deserialize_any(PathsVisitor(self.rest))
    }
}

use serde::Deserialize;

struct PathsVisitor<'a>(Vec<&'a str>);

impl<'de> Visitor<'de> for PathsVisitor<'_> {
    type Value = Option<Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        // Only `*` reaches into an array: each element as the paths below it say.
        let Some(each) = Paths::under(&self.0, "*") else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(None);
        };
        let mut out = Vec::new();
        while let Some(x) = seq.next_element_seed(each.clone())? {
            out.extend(x);
        }
        Ok((!out.is_empty()).then_some(Value::Array(out)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match Paths::under(&self.0, &key) {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(sub) => {
                    match map.next_value_seed(sub)? {
                        Some(v) => out.insert(key, v),
                        None => out.remove(&key),
                    };
                }
            }
        }
        Ok((!out.is_empty()).then_some(Value::Object(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::obj;
    use serde_json::json;

    /// What the store would keep after a full decode.
    fn reference(v: &Value, fields: Option<&[&str]>) -> Value {
        let mut v = v.clone();
        obj::compact(&mut v);
        if let Some(f) = fields {
            obj::project(&mut v, f);
        }
        v
    }

    fn objects() -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7",
                    "labels": {"a": "b"},
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:x": {}}}}],
                    "ownerReferences": [{"uid": "u", "controller": true}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                    "tolerations": [{"key": "k"}], "priority": 0, "x": {"nodeName": "no"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{"restartCount": 3}]}}),
            // Unscheduled: no nodeName, so no spec at all is kept.
            json!({"metadata": {"name": "q"}, "spec": {"containers": []}, "status": {}}),
            // Odd shapes: a scalar spec, an array status, null metadata pieces.
            json!({"metadata": {"name": "r", "labels": null}, "spec": "x", "status": [1, 2]}),
            json!({"metadata": null, "kind": "Status", "code": 410, "message": "gone"}),
            json!({"metadata": {"name": "s"}, "spec": {"nodeName": null, "a": 1.5, "b": -2,
                "c": true}, "status": {"nested": {"deep": {"x": "y"}}}}),
            // Arrays under `*`: elements keeping nothing dropped, an array keeping nothing
            // left out.
            json!({"metadata": {"name": "w"}, "spec": {"containers": [
                {"name": "a", "image": "i", "ports": [{"name": "http", "containerPort": 80}]},
                {"name": "b"}, 7, null, [1], {"ports": null}], "*": {"x": 1}, "y": [{"x": 2}]},
                "status": [[1], {"a": 1}, []]}),
            // Escapes and text beyond ASCII.
            json!({"metadata": {"name": "t", "annotations": {"q": "a \"b\"\\\n\u{1}", "u": "zoné ✓ 🙂"}},
                "spec": {"nodeName": "nœud"}}),
        ]
    }

    #[test]
    fn trimmed_decoding_equals_decoding_then_shaping() {
        let field_sets: [Option<&[&str]>; 6] = [
            None,
            Some(&["/spec/nodeName", "/status"]),
            Some(&[]),
            Some(&["/status/nested/deep/x", "/spec/c"]),
            Some(&["/spec", "/spec/nodeName"]),
            Some(&["/spec/containers/*/ports", "/spec/*/x", "/status/*"]),
        ];
        for o in objects() {
            let text = o.to_string();
            for fields in field_sets {
                let got = from_slice(text.as_bytes(), fields).unwrap();
                assert_eq!(got, reference(&o, fields), "{text} with {fields:?}");
                assert_eq!(
                    from_str(&text, fields).unwrap(),
                    got,
                    "{text} with {fields:?}"
                );
            }
        }
    }

    #[test]
    fn a_star_keeps_the_paths_below_it_in_every_element() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [
            {"name": "a", "image": "i", "env": [{"name": "E"}],
                "ports": [{"name": "http", "containerPort": 80}]},
            {"name": "sidecar", "image": "j"}]}});
        let fields: &[&str] = &["/spec/nodeName", "/spec/containers/*/ports"];
        let got = from_slice(pod.to_string().as_bytes(), Some(fields)).unwrap();
        assert_eq!(
            got,
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [
                {"ports": [{"name": "http", "containerPort": 80}]}]}})
        );
        assert_eq!(got, reference(&pod, Some(fields)));
    }

    #[test]
    fn a_key_given_twice_counts_with_its_last_value() {
        let text =
            r#"{"metadata":{},"spec":{"nodeName":"a"},"spec":{"x":1},"status":1,"status":{"p":2}}"#;
        let whole: Value = serde_json::from_str(text).unwrap();
        for fields in [&["/spec/nodeName", "/status/p"][..], &["/spec", "/status"]] {
            let got = from_slice(text.as_bytes(), Some(fields)).unwrap();
            assert_eq!(got, reference(&whole, Some(fields)), "{fields:?}");
        }
    }

    #[test]
    fn skipped_parts_are_still_checked_as_json() {
        assert!(from_slice(br#"{"metadata":{},"spec":{"x":[1,}}"#, Some(&["/status"])).is_err());
        assert!(from_slice(br#"{"metadata":{}} trailing"#, None).is_err());
        assert!(from_slice(b"", None).is_err());
        assert!(from_str(r#"{"metadata":{},"spec":{"x":[1,}}"#, Some(&["/status"])).is_err());
        assert!(from_str("", None).is_err());
    }
}
