//! Watch framing and event decoding (`api::watch`, `api::trim`): streams of good, mutated,
//! truncated, deep, overlong and random lines, cut into chunks anywhere. Every line must come
//! out of the stream reader exactly as it decodes on its own (so chunk boundaries change
//! nothing and a bad line never takes a good one with it), and the good lines as the events
//! they are.

use std::io::BufReader;

use serde_json::{json, Value};

use super::{ChunkedReader, Gen};
use crate::api::trim::{self, Trim};
use crate::api::watch::{parse_frame_as, EventReader, EventType, Frame, MAX_EVENT_BYTES};

/// Events are decoded on the watch threads (`crate::runtime::reactor`, 512 KiB of stack); the stream
/// cases run on half of that.
const DECODE_STACK: usize = 256 * 1024;

const SHAPES: &[Option<&[&str]>] = &[
    None,
    Some(&["/spec/nodeName", "/status"]),
    Some(&[]),
    Some(&["/data", "/spec"]),
];

const DICT: &[&[u8]] = &[
    b"\"type\"",
    b"\"object\"",
    b"\"ADDED\"",
    b"\"MODIFIED\"",
    b"\"DELETED\"",
    b"\"BOOKMARK\"",
    b"\"ERROR\"",
    b"\"metadata\"",
    b"\"resourceVersion\"",
    b"\"managedFields\"",
    b"\"spec\"",
    b"\"status\"",
    b"\"nodeName\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\\uDC00\\uD800",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"18446744073709551616",
    b"\n",
    b"\r\n",
    b" ",
    b"\xef\xbb\xbf",
    b"\xc3",
];

/// A JSON string literal.
fn quoted(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A good event line and what it must decode to: (type, name, resourceVersion).
fn good_event(g: &mut Gen) -> (String, EventType, String) {
    let name = if g.one_in(3) {
        g.unicode(12)
    } else {
        format!("obj-{}", g.below(1000))
    };
    let rv = g.rng.u64(..).to_string();
    let kind = g.pick(&[
        EventType::Added,
        EventType::Modified,
        EventType::Deleted,
        EventType::Bookmark,
    ]);
    let ty = match kind {
        EventType::Added => "ADDED",
        EventType::Modified => "MODIFIED",
        EventType::Deleted => "DELETED",
        EventType::Bookmark => "BOOKMARK",
    };
    let object = match g.below(3) {
        0 => json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": "u-1",
                "labels": {"app": "x"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": "u-0", "controller": true}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }),
        1 => json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "resourceVersion": rv},
            "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n\u{0}\u{1f}\"\\é😀\n"}
        }),
        _ => json!({"kind": "Namespace", "metadata": {"resourceVersion": rv, "name": name}}),
    };
    let line = if g.one_in(4) {
        // The object before the type: kept raw, decoded once the type is known.
        format!(r#"{{"object":{object},"type":"{ty}"}}"#)
    } else {
        format!(r#"{{"type":"{ty}","object":{object}}}"#)
    };
    (line, kind, rv)
}

/// JSON nested `depth` deep inside an otherwise good event.
fn deep_event(g: &mut Gen) -> String {
    let depth = g.size(3000);
    let (open, close) = if g.one_in(2) {
        ("[", "]")
    } else {
        ("{\"a\":", "}")
    };
    let closed = !g.one_in(4);
    format!(
        r#"{{"type":"ADDED","object":{{"metadata":{{"resourceVersion":"1"}},"spec":{}1{}}}}}"#,
        open.repeat(depth),
        if closed {
            close.repeat(depth)
        } else {
            String::new()
        }
    )
}

/// One line of a stream (no newline inside unless a mutation put one there), and, for good
/// lines, the event it must give.
fn line(g: &mut Gen, max_line: usize) -> (Vec<u8>, Option<(EventType, String)>) {
    match g.below(12) {
        0..=3 => {
            let (l, kind, rv) = good_event(g);
            (l.into_bytes(), Some((kind, rv)))
        }
        4 | 5 => {
            let (l, _, _) = good_event(g);
            (g.mutate(l.as_bytes(), DICT), None)
        }
        6 => {
            let (l, _, _) = good_event(g);
            let cut = g.below(l.len());
            (l.as_bytes()[..cut].to_vec(), None)
        }
        7 => (g.bytes(300), None),
        8 => (g.pick(&[&b""[..], b" ", b"\r", b"\t \r"]).to_vec(), None),
        9 => (deep_event(g).into_bytes(), None),
        10 => {
            // Around the line limit, in a string no shape keeps.
            let pad = max_line.min(1 << 16).saturating_sub(60) + g.below(120);
            let l = format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{"resourceVersion":"7"}},"pad":"{}"}}}}"#,
                "p".repeat(pad)
            );
            (l.into_bytes(), None)
        }
        _ => {
            let odd = [
                "[1,2]".to_string(),
                quoted("ADDED"),
                r#"{"type":5,"object":{}}"#.to_string(),
                r#"{"type":"ADDED","object":null}"#.to_string(),
                r#"{"type":"ADDED","object":{"metadata":{"resourceVersion":5}}}"#.to_string(),
                r#"{"type":"ERROR","object":{"code":99999999999,"message":7}}"#.to_string(),
                r#"{"type":"ERROR"}"#.to_string(),
                r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"1"}},"type":"ADDED"}"#.to_string(),
                format!(r#"{{"type":{},"object":{{}}}}"#, quoted(&g.unicode(8))),
            ];
            let pick = g.below(odd.len());
            (odd[pick].clone().into_bytes(), None)
        }
    }
}

fn stream_case(g: &mut Gen) {
    let shape_fields = g.pick(SHAPES);
    let max_line = g.pick(&[200, 4096, 70_000, MAX_EVENT_BYTES]);
    let mut data = Vec::new();
    let mut good: Vec<(usize, EventType, String)> = Vec::new();
    let n = 1 + g.below(10);
    for i in 0..n {
        let (l, want) = line(g, max_line);
        if let Some((kind, rv)) = want {
            // Only a line with no newline of its own is one frame.
            if !l.contains(&b'\n') {
                good.push((data.len(), kind, rv));
            }
        }
        data.extend_from_slice(&l);
        if i + 1 < n || g.one_in(2) {
            data.extend_from_slice(if g.one_in(5) { b"\r\n" } else { b"\n" });
        }
    }
    g.note(String::from_utf8_lossy(&data));

    // What every line gives when decoded alone.
    let shape = |f: Option<&'static [&'static str]>| {
        f.map(|fields| Trim {
            fields: Some(fields),
        })
    };
    let mut want = Vec::new();
    let mut want_skipped = 0u64;
    let mut at = 0;
    let mut pieces = data.split(|&b| b == b'\n').peekable();
    while let Some(l) = pieces.next() {
        let start = at;
        at += l.len() + 1;
        if pieces.peek().is_none() && l.is_empty() {
            break; // after the final newline
        }
        if l.len() > max_line {
            want_skipped += 1;
            continue;
        }
        let frame = parse_frame_as(l, shape(shape_fields));
        if let Some((_, kind, rv)) = good.iter().find(|(s, _, _)| *s == start) {
            match &frame {
                Frame::Event(e) => {
                    assert_eq!(e.kind, *kind);
                    assert_eq!(e.object["metadata"]["resourceVersion"], rv.as_str());
                    if shape_fields.is_some() {
                        assert!(e.object["metadata"].get("managedFields").is_none());
                    }
                }
                other => panic!("a good line gave {other:?}"),
            }
        }
        match frame {
            Frame::Event(e) => want.push(Ok(e)),
            Frame::Error(e) => {
                assert!(!e.to_string().is_empty());
                want.push(Err(e));
            }
            Frame::Malformed(why) => {
                assert!(!why.is_empty());
                want_skipped += 1;
            }
            Frame::Empty => {}
        }
    }

    // The same bytes through the stream reader, cut anywhere.
    let sizes = g.chunks(data.len());
    let mut reader = ChunkedReader::new(data, sizes);
    let injected = g.one_in(8);
    if injected {
        reader.error_at_end = Some(std::io::ErrorKind::ConnectionReset);
    }
    let buffered = BufReader::with_capacity(1 + g.size(100), reader);
    let mut er = EventReader::new(buffered, "fuzz");
    er.decoder.shape = shape_fields.map(|f| trim::Shape {
        fields: Some(f.to_vec().into()),
    });
    er.decoder.max_line = max_line;
    let got: Vec<_> = er.by_ref().collect();
    if injected {
        // The lines before the error are the same; the last one may have been cut off.
        assert!(er.read_error.is_some());
        assert!(got.len() <= want.len());
        assert_eq!(got[..], want[..got.len()]);
    } else {
        assert!(er.read_error.is_none());
        assert_eq!(er.decoder.skipped, want_skipped);
        assert_eq!(got, want);
    }
}

#[test]
fn fuzz_watch_framing() {
    super::run_on_stack("watch-framing", 300, Some(DECODE_STACK), stream_case);
}

// ---------------------------------------------------------------------------------------------
// Trimmed decoding against decoding then shaping

const KEYS: &[&str] = &[
    "metadata",
    "spec",
    "status",
    "nodeName",
    "managedFields",
    "kind",
    "apiVersion",
    "data",
    "x",
    "",
    "é",
];

fn value(g: &mut Gen, depth: usize) -> Value {
    let leaf = depth == 0 || g.one_in(3);
    match g.below(if leaf { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(g.one_in(2)),
        2 => Value::from(g.rng.i64(..)),
        3 => Value::from(g.rng.u64(..)),
        4 => Value::from(g.rng.f64() * 1e10 - 5e9),
        5 => Value::String(g.unicode(6)),
        6 => Value::Array((0..g.below(4)).map(|_| value(g, depth - 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..g.below(5) {
                let k = g.pick(KEYS).to_string();
                m.insert(k, value(g, depth - 1));
            }
            Value::Object(m)
        }
    }
}

fn reference(v: &Value, fields: Option<&[&str]>) -> Value {
    let mut v = v.clone();
    crate::obj::compact(&mut v);
    if let Some(f) = fields {
        crate::obj::project(&mut v, f);
    }
    v
}

fn trim_case(g: &mut Gen) {
    let fields: Option<Vec<&str>> = if g.one_in(4) {
        None
    } else {
        let paths = [
            "/spec/nodeName",
            "/status",
            "/spec",
            "/data",
            "/x/x",
            "/spec/x/nodeName",
            "/status/",
            "/é",
            "/spec/*/x",
            "/*/x",
            "/spec/containers/*/ports",
            "/x/*",
            "/x/*/*",
        ];
        Some((0..g.below(4)).map(|_| g.pick(&paths)).collect())
    };
    let mut text = value(g, 5).to_string();
    if g.one_in(3) {
        // The members of two objects in one: keys given twice, at the top or below.
        let object = |g: &mut Gen| loop {
            if let v @ Value::Object(_) = value(g, 4) {
                break v.to_string();
            }
        };
        let (a, b) = (object(g), object(g));
        let (a, b) = (&a[..a.len() - 1], &b[1..]);
        let sep = if a.len() > 1 && b.len() > 1 { "," } else { "" };
        let rest = if text.starts_with('{') && text.len() > 2 {
            format!(",{}", &text[1..])
        } else {
            "}".to_string()
        };
        text = format!(r#"{{"x":1,"spec":{a}{sep}{b},"spec":{{"nodeName":"n"}}{rest}"#);
    }
    g.note((&text, &fields));
    // Valid JSON decodes to what decoding whole then shaping gives (floats compared after
    // one decoding each: serde_json's float parsing is not an exact round trip).
    let v: Value = serde_json::from_str(&text).unwrap();
    let got = trim::from_slice(text.as_bytes(), fields.as_deref());
    assert_eq!(got.unwrap(), reference(&v, fields.as_deref()));
    // Mutated text: the same as decoding whole then shaping (duplicate keys included: the
    // last one wins, as in a serde_json Value), and an error when that is one. The parts
    // trimming skips are checked for syntax only, so a number out of range or a lone
    // surrogate or bad escape there is no
    // error.
    let bad = g.mutate(text.as_bytes(), DICT);
    g.note((String::from_utf8_lossy(&bad), &fields));
    let whole = serde_json::from_slice::<Value>(&bad);
    match (trim::from_slice(&bad, fields.as_deref()), whole) {
        (Ok(t), Ok(w)) => assert_eq!(t, reference(&w, fields.as_deref())),
        (Err(e), Err(_)) => assert!(!e.to_string().is_empty()),
        (Ok(_), Err(w))
            if [
                "number out of range",
                "unicode code point",
                "surrogate",
                "escape",
            ]
            .iter()
            .any(|m| w.to_string().contains(m)) => {}
        (t, w) => panic!("trim {t:?} but whole {w:?}"),
    }
}

#[test]
fn fuzz_trim_shaping() {
    super::run_on_stack("trim-shaping", 1000, Some(DECODE_STACK), trim_case);
}
