//! Watch events that echo our own writes.
//!
//! Most events an informer sees in a busy controller manager are the echoes of its own
//! writes: the pods it created, the statuses and slices it wrote. The answer to each write
//! was decoded already, in the cache's shape, to record it (`Cache::observe_write_shared`);
//! its watch event carries the same object at the same resourceVersion. A watch given an
//! [`EchoSource`] reads only the event object's metadata, and when the source holds the
//! answer for that name and resourceVersion, hands that on instead of decoding the object
//! again.

use serde::de::{self, Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// Where a watch finds the decoded objects of events that answer our own writes.
pub trait EchoSource: Send + Sync {
    /// Whether any answer is held (when none is, events are decoded without looking).
    fn waiting(&self) -> bool;
    /// The answer held for `namespace/name` at `resource_version`, taken from the source.
    fn take(&self, namespace: &str, name: &str, resource_version: &str) -> Option<Arc<Value>>;
}

/// An [`EchoSource`] for `WatchOptions`.
#[derive(Clone)]
pub struct Echoes(pub Arc<dyn EchoSource>);

impl std::fmt::Debug for Echoes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Echoes")
    }
}

/// What `peek_meta` reads of an object's metadata.
#[derive(serde::Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
}

/// An object's namespace, name and resourceVersion (namespace "" when it has none), read
/// without going past its metadata. None when the text has no such metadata or is not JSON.
pub fn peek_meta(text: &str) -> Option<(Cow<'_, str>, Cow<'_, str>, Cow<'_, str>)> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_str(text);
    // The visitor stops at the metadata with an error of its own; what it found is kept.
    let _ = de.deserialize_map(Peek(&mut found));
    let m = found?;
    Some((
        m.namespace.unwrap_or_default(),
        m.name?,
        m.resource_version?,
    ))
}

struct Peek<'f, 'a>(&'f mut Option<Meta<'a>>);

impl<'de> Visitor<'de> for Peek<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<(), M::Error> {
        while let Some(key) = m.next_key::<Cow<'de, str>>()? {
            if key == "metadata" {
                *self.0 = Some(m.next_value()?);
                return Err(de::Error::custom("metadata read"));
            }
            m.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_read_and_nothing_after_it() {
        let text = r#"{"kind":"Pod","metadata":{"name":"p","namespace":"ns","labels":{"a":"b"},
            "managedFields":[{"manager":"m"}],"resourceVersion":"42"},"spec":{"x":[1,2"#;
        let (ns, name, rv) = peek_meta(text).expect("metadata");
        assert_eq!((&*ns, &*name, &*rv), ("ns", "p", "42"));
    }

    /// Namespace, name, resourceVersion and the answer.
    type Answer = (String, String, String, Arc<Value>);

    /// Holds one answer.
    struct One(std::sync::Mutex<Option<Answer>>);

    impl EchoSource for One {
        fn waiting(&self) -> bool {
            self.0.lock().unwrap().is_some()
        }
        fn take(&self, ns: &str, name: &str, rv: &str) -> Option<Arc<Value>> {
            let mut g = self.0.lock().unwrap();
            let hit = g
                .as_ref()
                .is_some_and(|(n, m, r, _)| (n.as_str(), m.as_str(), r.as_str()) == (ns, name, rv));
            hit.then(|| g.take().unwrap().3)
        }
    }

    #[test]
    fn a_held_answer_stands_for_its_event_and_for_no_other() {
        use crate::api::trim::Trim;
        use crate::api::watch::{parse_frame_echoed, EventType, Frame};
        let answer = Arc::new(serde_json::json!({"metadata": {"name": "p"}, "answered": true}));
        let src = One(std::sync::Mutex::new(Some((
            "ns".into(),
            "p".into(),
            "8".into(),
            answer.clone(),
        ))));
        let shape = Some(Trim {
            fields: Some(&["/status"]),
        });
        let line = |t: &str, rv: &str| {
            format!(
                r#"{{"type":"{t}","object":{{"metadata":{{"name":"p","namespace":"ns","resourceVersion":"{rv}"}},"status":{{"s":1}},"spec":{{"x":1}}}}}}"#
            )
        };
        // Another version, and a deletion: decoded as they are; the answer stays held.
        for (t, rv) in [("MODIFIED", "7"), ("DELETED", "8")] {
            match parse_frame_echoed(line(t, rv).as_bytes(), shape, Some(&src)) {
                Frame::Event(ev) => {
                    assert!(ev.echo.is_none());
                    assert_eq!(ev.object["status"]["s"], 1);
                    assert!(ev.object.get("spec").is_none(), "trimmed as without echoes");
                }
                f => panic!("{f:?}"),
            }
        }
        match parse_frame_echoed(line("MODIFIED", "8").as_bytes(), shape, Some(&src)) {
            Frame::Event(ev) => {
                assert_eq!(ev.kind, EventType::Modified);
                assert!(Arc::ptr_eq(ev.echo.as_ref().unwrap(), &answer));
                assert!(ev.object.is_null());
            }
            f => panic!("{f:?}"),
        }
        // Taken: the same event again is decoded.
        match parse_frame_echoed(line("ADDED", "8").as_bytes(), shape, Some(&src)) {
            Frame::Event(ev) => assert!(ev.echo.is_none() && ev.object["status"]["s"] == 1),
            f => panic!("{f:?}"),
        }
        // A malformed object is reported as without echoes.
        src.0
            .lock()
            .unwrap()
            .replace(("ns".into(), "p".into(), "9".into(), answer));
        let bad = br#"{"type":"ADDED","object":{"metadata":{"name":"p","resourceVersion":"9"},"spec":[1,}}"#;
        assert!(matches!(
            parse_frame_echoed(bad, shape, Some(&src)),
            Frame::Malformed(_)
        ));
    }

    #[test]
    fn escaped_cluster_scoped_and_missing() {
        let (ns, name, rv) =
            peek_meta(r#"{"metadata":{"name":"a\u002fb","resourceVersion":"7"}}"#).unwrap();
        assert_eq!((&*ns, &*name, &*rv), ("", "a/b", "7"));
        assert!(peek_meta(r#"{"metadata":{"name":"a"}}"#).is_none());
        assert!(peek_meta(r#"{"metadata":{"resourceVersion":"1"}}"#).is_none());
        assert!(peek_meta(r#"{"spec":{}}"#).is_none());
        assert!(peek_meta(r#"{"metadata":{"name":1,"resourceVersion":"1"}}"#).is_none());
        assert!(peek_meta("not json").is_none());
        assert!(peek_meta("").is_none());
    }
}
