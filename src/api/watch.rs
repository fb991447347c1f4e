//! Watch stream framing: one JSON event object per line, as kube-apiserver writes them.
//!
//! A frame that is not valid JSON, or not a watch event, is logged and skipped: one bad object
//! never ends a stream or the process. So is a line longer than [`MAX_EVENT_BYTES`]: it is read
//! and dropped without being kept, so a stream that never sends a newline cannot grow the
//! buffer without bound.

use super::echo::{EchoSource, Echoes};
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
    /// Null when `echo` is given.
    pub object: Value,
    /// The object, when it is the answer to our own write an [`EchoSource`] held (the
    /// event's own text was not decoded).
    pub echo: Option<std::sync::Arc<Value>>,
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
    Echo(std::sync::Arc<Value>),
}

/// Decodes an [`Envelope`] with the watch's shape, and its echoes.
struct EnvelopeSeed<'s>(Option<Trim<'s>>, Option<&'s dyn EchoSource>);

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
                        (Some("ADDED" | "MODIFIED"), Some(tr))
                            if self.1.is_some_and(|e| e.waiting()) =>
                        {
                            let raw: &serde_json::value::RawValue = m.next_value()?;
                            let held = self.1.and_then(|e| {
                                let (ns, name, rv) = super::echo::peek_meta(raw.get())?;
                                e.take(&ns, &name, &rv)
                            });
                            match held {
                                Some(o) => Body::Echo(o),
                                None => Body::Decoded(
                                    super::trim::from_str(raw.get(), tr.fields)
                                        .map_err(serde::de::Error::custom)?,
                                ),
                            }
                        }
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
    parse_frame_echoed(line, shape, None)
}

/// As `parse_frame_as`; the object of an ADDED or MODIFIED event that `echoes` holds is
/// taken from it instead of being decoded (`api::echo`).
pub fn parse_frame_echoed(
    line: &[u8],
    shape: Option<Trim<'_>>,
    echoes: Option<&dyn EchoSource>,
) -> Frame {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Frame::Empty;
    }
    let mut de = serde_json::Deserializer::from_slice(trimmed);
    let env = match EnvelopeSeed(shape, echoes)
        .deserialize(&mut de)
        .and_then(|e| {
            de.end()?;
            Ok(e)
        }) {
        Ok(v) => v,
        Err(e) => return Frame::Malformed(format!("invalid JSON: {e}")),
    };
    let Some(t) = env.kind.as_deref() else {
        return Frame::Malformed("event without a type".into());
    };
    let body = env.object;
    let kind = match t {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        "ERROR" => return Frame::Error(status_error(&decode_body(body, None), 500)),
        other => return Frame::Malformed(format!("unknown event type {other:?}")),
    };
    let object = match body {
        Some(Body::Echo(o)) => {
            return Frame::Event(WatchEvent {
                kind,
                object: Value::Null,
                echo: Some(o),
            })
        }
        body => decode_body(body, shape),
    };
    let has_meta = object
        .get("metadata")
        .is_some_and(|m| m.get("resourceVersion").is_some_and(Value::is_string));
    if !object.is_object() || !has_meta {
        return Frame::Malformed(format!("{t} event without metadata.resourceVersion"));
    }
    Frame::Event(WatchEvent {
        kind,
        object,
        echo: None,
    })
}

/// An event's object: as decoded already, or its raw text decoded now (with `shape`).
fn decode_body(body: Option<Body<'_>>, shape: Option<Trim<'_>>) -> Value {
    match (body, shape) {
        // An echo is handed on as it is, never decoded (`parse_frame_echoed`).
        (None, _) | (Some(Body::Echo(_)), _) => Value::Null,
        (Some(Body::Decoded(v)), _) => v,
        (Some(Body::Raw(r)), Some(tr)) => {
            super::trim::from_slice(r.get().as_bytes(), tr.fields).unwrap_or(Value::Null)
        }
        (Some(Body::Raw(r)), None) => serde_json::from_str(r.get()).unwrap_or(Value::Null),
    }
}

/// The longest watch event line decoded. The apiserver stores objects of at most about
/// 1.5 MB (etcd's request limit) and takes request bodies of at most 3 MiB; even with every
/// byte escaped as `\uXXXX` an event stays well below this.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// A line buffer larger than this is given back after its line rather than kept for the
/// watch's lifetime (hundreds of idle watches each holding their largest event).
const KEEP_BUFFER_BYTES: usize = 8 * 1024;

/// What a watch stream gives: an event, or the error of an `ERROR` event (after which the
/// stream should be dropped).
pub type Item = Result<WatchEvent, Error>;

/// Turns the bytes of a watch stream into events, in whatever pieces the bytes arrive: the
/// one framing of both the blocking [`EventReader`] and the async watch of
/// `api::client::stream`. Bytes go in with [`Decoder::push`], events come out; a line is
/// decoded where it lies when it arrived whole, and copied only when it spans pieces.
pub struct Decoder {
    /// Decode objects trimmed to what the cache keeps (None: whole).
    pub shape: Option<super::trim::Shape>,
    /// Answers to our own writes, for the events that echo them (with `shape` only).
    pub echoes: Option<Echoes>,
    /// The start of a line whose end has not arrived.
    buf: Vec<u8>,
    /// The length so far of a line longer than `max_line`, dropped as it goes by.
    dropping: Option<usize>,
    label: String,
    pub skipped: u64,
    /// Lines longer than this (without the newline) are skipped ([`MAX_EVENT_BYTES`]).
    pub max_line: usize,
}

impl Decoder {
    pub fn new(label: impl Into<String>) -> Self {
        Decoder {
            shape: None,
            echoes: None,
            // Grown when a line spans pieces; an idle watch keeps none.
            buf: Vec::new(),
            dropping: None,
            label: label.into(),
            skipped: 0,
            max_line: MAX_EVENT_BYTES,
        }
    }

    /// Take bytes from the front of `data` up to the end of the first line that gives an
    /// event or an error, and return how many were taken with that item; or all of `data`
    /// and None when no line completed in it gives one (the rest is kept for the next push).
    pub fn push(&mut self, data: &[u8]) -> (usize, Option<Item>) {
        let mut at = 0;
        while let Some(i) = data[at..].iter().position(|&b| b == b'\n') {
            let line = &data[at..at + i];
            at += i + 1;
            if let Some(item) = self.line_end(line) {
                return (at, Some(item));
            }
        }
        self.keep(&data[at..]);
        (data.len(), None)
    }

    /// The stream ended: what a last line without a newline gives.
    pub fn finish(&mut self) -> Option<Item> {
        if self.dropping.is_none() && self.buf.is_empty() {
            return None;
        }
        self.line_end(&[])
    }

    /// A piece of the current line: kept, unless the line has grown past the limit.
    fn keep(&mut self, part: &[u8]) {
        match &mut self.dropping {
            Some(n) => *n += part.len(),
            None if self.buf.len() + part.len() > self.max_line => {
                self.dropping = Some(self.buf.len() + part.len());
                self.buf.clear();
            }
            None => self.buf.extend_from_slice(part),
        }
    }

    /// The current line ends with `last` (without the newline).
    fn line_end(&mut self, last: &[u8]) -> Option<Item> {
        let frame = if self.dropping.is_none() && self.buf.is_empty() && last.len() <= self.max_line
        {
            parse_frame_echoed(
                last,
                self.shape.as_ref().map(|s| s.trim()),
                self.echoes.as_ref().map(|e| &*e.0),
            )
        } else {
            self.keep(last);
            if let Some(n) = self.dropping.take() {
                self.skipped += 1;
                log::warn!(
                    "watch {}: skipping an event of {n} bytes (more than {})",
                    self.label,
                    self.max_line
                );
                return None;
            }
            let frame = parse_frame_echoed(
                &self.buf,
                self.shape.as_ref().map(|s| s.trim()),
                self.echoes.as_ref().map(|e| &*e.0),
            );
            self.buf.clear();
            if self.buf.capacity() > KEEP_BUFFER_BYTES {
                self.buf = Vec::new();
            }
            frame
        };
        match frame {
            Frame::Event(ev) => Some(Ok(ev)),
            Frame::Error(e) => Some(Err(e)),
            Frame::Empty => None,
            Frame::Malformed(why) => {
                self.skipped += 1;
                log::warn!("watch {}: skipping a malformed event: {why}", self.label);
                None
            }
        }
    }
}

/// Reads events from a blocking byte stream with a [`Decoder`]. `next()` yields `Ok(event)`,
/// `Err(e)` for an ERROR event (after which the stream should be dropped), and `None` at the
/// end of the stream or on a read error (the caller re-watches from its last resourceVersion
/// either way).
pub struct EventReader<R> {
    inner: R,
    pub decoder: Decoder,
    pub read_error: Option<std::io::Error>,
}

impl<R: BufRead> EventReader<R> {
    pub fn new(inner: R, label: impl Into<String>) -> Self {
        EventReader {
            inner,
            decoder: Decoder::new(label),
            read_error: None,
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.read_error = Some(e);
                    return None;
                }
            };
            if avail.is_empty() {
                return self.decoder.finish();
            }
            let (n, item) = self.decoder.push(avail);
            self.inner.consume(n);
            if item.is_some() {
                return item;
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
        (out, er.decoder.skipped)
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
            er.decoder.max_line = 1000;
            let evs: Vec<_> = er.by_ref().collect();
            assert_eq!(evs.len(), 2, "step {step}");
            assert!(evs.iter().all(Result::is_ok));
            assert_eq!(er.decoder.skipped, 2);
            let cap = er.decoder.buf.capacity();
            assert!(cap <= 4096, "{cap}");
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
        er.decoder.max_line = 64 * 1024;
        assert!(er.next().is_none());
        assert_eq!(er.decoder.skipped, 1);
        let cap = er.decoder.buf.capacity();
        assert!(cap <= 128 * 1024, "{cap}");
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
