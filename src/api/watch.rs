//! Watch stream framing: one JSON event object per line, as kube-apiserver writes them.
//!
//! A frame that is not valid JSON, or not a watch event, is logged and skipped: one bad object
//! never ends a stream or the process. So is a line longer than [`MAX_EVENT_BYTES`]: it is read
//! and dropped without being kept, so a stream that never sends a newline cannot grow the
//! buffer without bound.

use super::trim::Trim;
use crate::error::Error;
use serde::de::DeserializeSeed as _;
use serde_json::Value;
use std::io::BufRead;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub kind: EventType,
    pub object: Value,
}

/// Turn an `ERROR` event's `Status` (or any Status body) into an `Error::Api`.
pub fn status_error(status: &Value, fallback_code: u16) -> Error {
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(fallback_code);
    let text = |f: &str| {
        status
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    Error::Api {
        code,
        reason: text("reason"),
        message: text("message"),
        retry_after: None,
    }
}

/// What one frame turned out to be.
#[derive(Debug, PartialEq)]
pub enum Frame {
    Event(WatchEvent),
    /// An `ERROR` event: the server ends the watch with this status (410 Expired, ...).
    Error(Error),
    /// Not a usable frame; the reason is for the log.
    Malformed(String),
    Empty,
}

pub fn parse_frame(line: &[u8]) -> Frame {
    parse_frame_as(line, None)
}

/// One event as it arrives. The object is decoded in the same pass when `type` comes first
/// (as the apiserver sends it): trimmed with the shape, or whole for an ERROR. Otherwise it
/// is kept as raw text and decoded once the type is known.
struct Envelope<'a> {
    kind: Option<std::borrow::Cow<'a, str>>,
    object: Option<Body<'a>>,
}

enum Body<'a> {
    Decoded(Value),
    Raw(&'a serde_json::value::RawValue),
}

/// Decodes an [`Envelope`] with the watch's shape.
struct EnvelopeSeed<'s>(Option<Trim<'s>>);

impl<'de> serde::de::DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Envelope<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a watch event object")
    }
    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Envelope<'de>, M::Error> {
        let mut env = Envelope {
            kind: None,
            object: None,
        };
        while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "type" => env.kind = m.next_value()?,
                "object" => {
                    env.object = Some(match (env.kind.as_deref(), self.0) {
                        (None, _) => Body::Raw(m.next_value()?),
                        (Some("ERROR"), _) | (Some(_), None) => Body::Decoded(m.next_value()?),
                        (Some(_), Some(tr)) => Body::Decoded(m.next_value_seed(tr)?),
                    })
                }
                _ => {
                    m.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(env)
    }
}

/// As `parse_frame`; with `shape`, the objects of ADDED/MODIFIED/DELETED/BOOKMARK events are
/// decoded already trimmed (see `trim`). An ERROR event's Status is always decoded whole.
pub fn parse_frame_as(line: &[u8], shape: Option<Trim<'_>>) -> Frame {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Frame::Empty;
    }
    let mut de = serde_json::Deserializer::from_slice(trimmed);
    let env = match EnvelopeSeed(shape).deserialize(&mut de).and_then(|e| {
        de.end()?;
        Ok(e)
    }) {
        Ok(v) => v,
        Err(e) => return Frame::Malformed(format!("invalid JSON: {e}")),
    };
    let Some(t) = env.kind.as_deref() else {
        return Frame::Malformed("event without a type".into());
    };
    let mut body = env.object;
    let mut decode = |shape: Option<Trim<'_>>| -> Value {
        match (body.take(), shape) {
            (None, _) => Value::Null,
            (Some(Body::Decoded(v)), _) => v,
            (Some(Body::Raw(r)), Some(tr)) => {
                super::trim::from_slice(r.get().as_bytes(), tr.fields).unwrap_or(Value::Null)
            }
            (Some(Body::Raw(r)), None) => serde_json::from_str(r.get()).unwrap_or(Value::Null),
        }
    };
    let kind = match t {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        "ERROR" => return Frame::Error(status_error(&decode(None), 500)),
        other => return Frame::Malformed(format!("unknown event type {other:?}")),
    };
    let object = decode(shape);
    let has_meta = object
        .get("metadata")
        .is_some_and(|m| m.get("resourceVersion").is_some_and(Value::is_string));
    if !object.is_object() || !has_meta {
        return Frame::Malformed(format!("{t} event without metadata.resourceVersion"));
    }
    Frame::Event(WatchEvent { kind, object })
}

/// The longest watch event line decoded. The apiserver stores objects of at most about
/// 1.5 MB (etcd's request limit) and takes request bodies of at most 3 MiB; even with every
/// byte escaped as `\uXXXX` an event stays well below this.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// After an event this large, the line buffer is given back rather than kept for the
/// watch's lifetime.
const KEEP_BUFFER_BYTES: usize = 1024 * 1024;

/// What [`EventReader`] read into its buffer.
enum Line {
    Data,
    /// A line longer than the limit, dropped while reading; its length.
    TooLong(usize),
    End,
}

/// Reads events from a byte stream. `next()` yields `Ok(event)`, `Err(e)` for an ERROR event
/// (after which the stream should be dropped), and `None` at the end of the stream or on a read
/// error (the caller re-watches from its last resourceVersion either way).
pub struct EventReader<R> {
    inner: R,
    /// Decode objects trimmed to what the cache keeps (None: whole).
    pub shape: Option<super::trim::Shape>,
    buf: Vec<u8>,
    label: String,
    pub skipped: u64,
    pub read_error: Option<std::io::Error>,
    /// Lines longer than this (without the newline) are skipped ([`MAX_EVENT_BYTES`]).
    pub max_line: usize,
}

impl<R: BufRead> EventReader<R> {
    pub fn new(inner: R, label: impl Into<String>) -> Self {
        EventReader {
            inner,
            shape: None,
            buf: Vec::with_capacity(4096),
            label: label.into(),
            skipped: 0,
            read_error: None,
            max_line: MAX_EVENT_BYTES,
        }
    }

    /// Read up to and including the next newline into `buf`, unless the line is longer than
    /// `max_line`: then it is consumed without being kept.
    fn read_line(&mut self) -> std::io::Result<Line> {
        self.buf.clear();
        if self.buf.capacity() > KEEP_BUFFER_BYTES {
            self.buf.shrink_to(64 * 1024);
        }
        let mut dropped: Option<usize> = None;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                return Ok(match dropped {
                    Some(n) => Line::TooLong(n),
                    None if self.buf.is_empty() => Line::End,
                    None => Line::Data,
                });
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            let content = take - usize::from(done);
            match &mut dropped {
                Some(n) => *n += content,
                None if self.buf.len() + content > self.max_line => {
                    dropped = Some(self.buf.len() + content);
                    self.buf.clear();
                }
                None => self.buf.extend_from_slice(&avail[..take]),
            }
            self.inner.consume(take);
            if done {
                return Ok(match dropped {
                    Some(n) => Line::TooLong(n),
                    None => Line::Data,
                });
            }
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<WatchEvent, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.read_line() {
                Ok(Line::End) => return None,
                Ok(Line::Data) => {}
                Ok(Line::TooLong(n)) => {
                    self.skipped += 1;
                    log::warn!(
                        "watch {}: skipping an event of {n} bytes (more than {})",
                        self.label,
                        self.max_line
                    );
                    continue;
                }
                Err(e) => {
                    self.read_error = Some(e);
                    return None;
                }
            }
            match parse_frame_as(&self.buf, self.shape.as_ref().map(|s| s.trim())) {
                Frame::Event(ev) => return Some(Ok(ev)),
                Frame::Error(e) => return Some(Err(e)),
                Frame::Empty => continue,
                Frame::Malformed(why) => {
                    self.skipped += 1;
                    log::warn!("watch {}: skipping a malformed event: {why}", self.label);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};

    /// A reader that hands out its data in fixed small pieces, to split frames anywhere.
    struct Chunked {
        data: Vec<u8>,
        pos: usize,
        step: usize,
    }
    impl Read for Chunked {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len() - self.pos);
            out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn events(data: &str, step: usize) -> (Vec<Result<WatchEvent, Error>>, u64) {
        let r = Chunked {
            data: data.as_bytes().to_vec(),
            pos: 0,
            step,
        };
        let mut er = EventReader::new(BufReader::with_capacity(7, r), "test");
        let out: Vec<_> = er.by_ref().collect();
        (out, er.skipped)
    }

    const A: &str =
        r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#;
    const B: &str =
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#;

    #[test]
    fn split_frames_are_joined() {
        let data = format!("{A}\n{B}\n");
        for step in [1, 3, 17, 1000] {
            let (evs, skipped) = events(&data, step);
            assert_eq!(skipped, 0);
            assert_eq!(evs.len(), 2, "step {step}");
            let first = evs[0].as_ref().expect("event");
            assert_eq!(first.kind, EventType::Added);
            assert_eq!(first.object["metadata"]["name"], "a");
            assert_eq!(
                evs[1].as_ref().map(|e| e.kind).ok(),
                Some(EventType::Bookmark)
            );
        }
    }

    #[test]
    fn last_frame_without_newline() {
        let (evs, _) = events(A, 4);
        assert_eq!(evs.len(), 1);
    }

    #[test]
    fn malformed_frames_are_skipped() {
        let data = format!(
            "{{not json\n{A}\n{{\"type\":\"WHAT\",\"object\":{{}}}}\n{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Pod\"}}}}\n\n[1,2]\n{B}\n"
        );
        let (evs, skipped) = events(&data, 5);
        assert_eq!(skipped, 4);
        assert_eq!(evs.len(), 2);
        assert!(evs.iter().all(Result::is_ok));
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_next_events_still_decoded() {
        let long = format!(
            r#"{{"type":"ADDED","object":{{"metadata":{{"resourceVersion":"1"}},"pad":"{}"}}}}"#,
            "x".repeat(5000)
        );
        for step in [1, 100, 10_000] {
            let r = Chunked {
                data: format!("{A}\n{long}\n{B}\n{long}").into_bytes(),
                pos: 0,
                step,
            };
            let mut er = EventReader::new(BufReader::with_capacity(64, r), "test");
            er.max_line = 1000;
            let evs: Vec<_> = er.by_ref().collect();
            assert_eq!(evs.len(), 2, "step {step}");
            assert!(evs.iter().all(Result::is_ok));
            assert_eq!(er.skipped, 2);
            assert!(er.buf.capacity() <= 4096, "{}", er.buf.capacity());
        }
    }

    #[test]
    fn a_stream_without_newlines_does_not_grow_the_buffer() {
        struct Endless(usize);
        impl Read for Endless {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = out.len().min(self.0);
                out[..n].fill(b'x');
                self.0 -= n;
                Ok(n)
            }
        }
        let mut er = EventReader::new(BufReader::new(Endless(32 << 20)), "test");
        er.max_line = 64 * 1024;
        assert!(er.next().is_none());
        assert_eq!(er.skipped, 1);
        assert!(er.buf.capacity() <= 128 * 1024, "{}", er.buf.capacity());
    }

    #[test]
    fn error_event_becomes_gone() {
        let data = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let (evs, _) = events(&format!("{data}\n"), 64);
        let err = evs[0].as_ref().expect_err("error event");
        assert!(err.is_gone());
    }

    #[test]
    fn the_object_is_decoded_in_the_shape_whichever_key_comes_first() {
        let shape: &[&str] = &["/spec/nodeName"];
        let pod = r#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5","managedFields":[{}]},"spec":{"nodeName":"n","containers":[{}]}}"#;
        let want = serde_json::json!({"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"},"spec":{"nodeName":"n"}});
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{pod}}}"#),
            format!(r#"{{"object":{pod},"extra":[1,{{}}],"type":"MODIFIED"}}"#),
        ] {
            let trim = Trim {
                fields: Some(shape),
            };
            match parse_frame_as(line.as_bytes(), Some(trim)) {
                Frame::Event(e) => {
                    assert_eq!(e.kind, EventType::Modified);
                    assert_eq!(e.object, want, "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        // An ERROR's Status is decoded whole, shape or not, before or after its type.
        let status = r#"{"kind":"Status","status":"Failure","message":"gone","reason":"Expired","code":410}"#;
        for line in [
            format!(r#"{{"type":"ERROR","object":{status}}}"#),
            format!(r#"{{"object":{status},"type":"ERROR"}}"#),
        ] {
            let trim = Trim {
                fields: Some(shape),
            };
            match parse_frame_as(line.as_bytes(), Some(trim)) {
                Frame::Error(e) => assert!(e.is_gone() && e.to_string().contains("gone"), "{e}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        // Trailing bytes after the event make it malformed.
        let line = format!(r#"{{"type":"ADDED","object":{pod}}} x"#);
        assert!(matches!(
            parse_frame_as(
                line.as_bytes(),
                Some(Trim {
                    fields: Some(shape)
                })
            ),
            Frame::Malformed(_)
        ));
    }
}
