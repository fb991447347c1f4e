//! The secure port's request parsing (`server::http`): heads read in chunks cut anywhere,
//! mutated and random heads, bodies' declarations, query strings, and answers with hostile
//! header values. Reading a head gives what the bytes say whatever the chunking; parsing
//! gives a request that holds only what HTTP allows, or a 400/431 with a message; a valid
//! request parses back to its parts; no answer header can break the head.

use futures_lite::future::block_on;

use super::{ChunkedReader, Gen};
use crate::server::http::{check_body, encode_response, parse_head, read_head, Head};
use crate::server::{Request, Response};

const DICT: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"\r",
    b":",
    b": ",
    b" ",
    b"\t",
    b"\x00",
    b"\x7f",
    b"GET ",
    b"HEAD ",
    b" HTTP/1.1",
    b" HTTP/1.0",
    b" HTTP/2",
    b"/healthz",
    b"?verbose&exclude=a%2Db",
    b"%",
    b"%zz",
    b"%c3%a9",
    b"+",
    b"Content-Length: ",
    b"Content-Length: 18446744073709551616",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip",
    b"Authorization: Bearer ",
    b"X-Remote-User: ",
    b"X-Remote-Extra-",
    b"\xc3\xa9",
    b"\xff",
];

fn valid_head(g: &mut Gen) -> (Vec<u8>, Request, Vec<(String, String)>) {
    let method = g.pick(&[
        "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "M-SEARCH",
    ]);
    let path = g.pick(&[
        "/",
        "/healthz",
        "/readyz",
        "/livez",
        "/metrics",
        "/debug/x/y",
        "/a%20b",
    ]);
    // A query of percent-encoded pairs, and what they decode to.
    let mut pairs = Vec::new();
    let mut query = String::new();
    for i in 0..g.below(4) {
        let (k, v) = (format!("k{i}"), g.unicode(6));
        if i > 0 {
            query.push('&');
        }
        query.push_str(&k);
        query.push('=');
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() {
                query.push(char::from(b));
            } else {
                query.push_str(&format!("%{b:02X}"));
            }
        }
        pairs.push((k, v));
    }
    let mut headers = Vec::new();
    for i in 0..g.below(6) {
        let name = g.pick(&[
            "Host",
            "X-Remote-User",
            "x-remote-group",
            "Authorization",
            "X_Odd!#$",
        ]);
        let value: String = g
            .unicode(10)
            .chars()
            .filter(|c| !c.is_control() && *c != '\u{85}')
            .collect();
        headers.push((
            format!("{name}{i}"),
            value.trim_matches([' ', '\t']).to_string(),
        ));
    }
    let target = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    };
    let mut text = format!("{method} {target} HTTP/1.1");
    for (k, v) in &headers {
        let pad = g.pick(&["", " ", "  ", "\t"]);
        text.push_str(&format!("\r\n{k}:{pad}{v}{pad}"));
    }
    let want = Request {
        method: method.to_string(),
        path: path.to_string(),
        query,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect(),
        peer_certs: Vec::new(),
        body: Vec::new(),
    };
    (text.into_bytes(), want, pairs)
}

/// What a head read of `data` must give, chunks or not.
fn expected_head(data: &[u8], max: usize) -> Head {
    match data.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(p) if p <= max => Head::Complete(data[..p].to_vec()),
        Some(_) => Head::TooLarge,
        // The last three bytes could still have begun the blank line.
        None if data.len().saturating_sub(3) > max => Head::TooLarge,
        None => Head::Closed,
    }
}

fn check_parsed(parsed: &Result<Request, Response>, max_headers: usize) {
    match parsed {
        Ok(req) => {
            assert!(!req.method.is_empty() && req.path.starts_with('/'));
            assert!(req.headers.len() <= max_headers);
            for (k, v) in &req.headers {
                assert!(
                    !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase())
                );
                assert!(
                    !v.bytes().any(|b| b.is_ascii_control() && b != b'\t'),
                    "{v:?}"
                );
            }
            let _ = req.query_values("k0");
            let _ = req.has_query("verbose");
            if let Err(r) = check_body(req, 256 * 1024) {
                assert!(matches!(r.status, 400 | 413 | 501), "{}", r.status);
                assert!(!r.body.is_empty());
            }
        }
        Err(r) => {
            assert!(matches!(r.status, 400 | 431), "{}", r.status);
            assert!(r.body.len() > 4);
        }
    }
}

fn case(g: &mut Gen) {
    let max_headers = g.pick(&[2, 16, 256]);
    match g.below(5) {
        0 => {
            // A valid request parses back to its parts; its query decodes to what was encoded.
            let (head, want, pairs) = valid_head(g);
            g.note(String::from_utf8_lossy(&head));
            let got = parse_head(&head, 256)
                .unwrap_or_else(|r| panic!("{}", String::from_utf8_lossy(&r.body)));
            assert_eq!(got, want);
            for (k, v) in pairs {
                assert_eq!(got.query_values(&k), vec![v]);
            }
        }
        1 | 2 => {
            let (head, _, _) = valid_head(g);
            let bad = g.mutate(&head, DICT);
            g.note(String::from_utf8_lossy(&bad));
            check_parsed(&parse_head(&bad, max_headers), max_headers);
        }
        3 => {
            // Reading: the same head whatever the chunks, never more than the limit kept.
            let (head, _, _) = valid_head(g);
            let mut data = head;
            data.extend_from_slice(b"\r\n\r\n");
            data.extend(g.bytes(40));
            let data = if g.one_in(2) {
                g.mutate(&data, DICT)
            } else {
                data
            };
            let max = g.pick(&[8, 64, 300, 16 * 1024]);
            g.note((String::from_utf8_lossy(&data), max));
            let sizes = g.chunks(data.len());
            let mut reader = ChunkedReader::new(data.clone(), sizes);
            let got = block_on(read_head(&mut reader, max)).unwrap();
            assert_eq!(got, expected_head(&data, max));
            if let Head::Complete(h) = &got {
                check_parsed(&parse_head(h, max_headers), max_headers);
            }
        }
        _ => {
            // Answers: whatever the handler puts in a header, the head stays what it is.
            let status = g.pick(&[200, 400, 404, 431, 500, 599, 0, 1000]);
            let mut resp = Response::text(status, g.unicode(20));
            resp.content_type = g.unicode(10);
            for _ in 0..g.below(4) {
                resp.headers.push((g.unicode(8), g.unicode(12)));
            }
            g.note(&resp);
            let head_only = g.one_in(2);
            let wire = encode_response(&resp, head_only);
            let end = wire
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("a blank line ends the head");
            let head = &wire[..end];
            let lines = head.split(|&b| b == b'\n').count();
            // Status, Cache-Control, Content-Type, Content-Length, the headers, Connection.
            assert_eq!(lines, 5 + resp.headers.len());
            assert!(head.windows(2).all(|w| w[0] != b'\r' || w[1] == b'\n'));
            assert!(head.last() != Some(&b'\r'));
            let body = &wire[end + 4..];
            assert_eq!(body.len(), if head_only { 0 } else { resp.body.len() });
        }
    }
}

#[test]
fn fuzz_http_request_head() {
    super::run("http-head", 2000, case);
}
