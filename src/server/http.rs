//! HTTP/1.1 on the secure port: the request head (read with a size limit, then parsed), query
//! strings, and the encoding of answers.

use std::fmt::Write as _;
use std::sync::Arc;

use futures_lite::{AsyncRead, AsyncReadExt};

use super::query::query_pairs;

// ---------------------------------------------------------------------------------------------
// Requests and responses

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub method: String,
    /// The path without the query string, as sent.
    pub path: String,
    /// The raw query string without `?`.
    pub query: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// DER client certificates (leaf first), empty if the client sent none.
    pub peer_certs: Vec<Vec<u8>>,
    /// The body, for routes that read one ([`super::Server::route_body`]), decoded from
    /// chunks if it came chunked; empty for every other route.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a query parameter, percent-decoded, in order.
    pub fn query_values(&self, key: &str) -> Vec<String> {
        query_pairs(&self.query)
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    /// Whether the query names `key` at all (`?verbose`, `?verbose=0` both count, as in Go).
    pub fn has_query(&self, key: &str) -> bool {
        query_pairs(&self.query).iter().any(|(k, _)| k == key)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    /// Further headers (`Content-Type`, `Content-Length`, `Cache-Control` and `Connection`
    /// are always written).
    pub headers: Vec<(String, String)>,
}

pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

fn nosniff() -> Vec<(String, String)> {
    vec![("X-Content-Type-Options".to_string(), "nosniff".to_string())]
}

impl Response {
    /// A text answer (with `X-Content-Type-Options: nosniff`, as Go's handlers write it).
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: TEXT_PLAIN.to_string(),
            body: body.into().into_bytes(),
            headers: nosniff(),
        }
    }

    /// A JSON answer without further headers.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            content_type: "application/json".to_string(),
            body: body.into().into_bytes(),
            headers: Vec::new(),
        }
    }

    /// Add `X-Content-Type-Options: nosniff`.
    pub fn with_nosniff(mut self) -> Self {
        if !self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-content-type-options"))
        {
            self.headers.extend(nosniff());
        }
        self
    }

    /// The value of a further header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Go's `http.Error`: the message plus a newline.
    pub fn error(status: u16, msg: &str) -> Self {
        Response::text(status, format!("{msg}\n"))
    }

    /// Go's `http.NotFound`.
    pub fn not_found() -> Self {
        Response::error(404, "404 page not found")
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;
pub type Filter = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;
pub type Check = Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>;

/// What reading a request head gave.
#[derive(Debug, PartialEq)]
pub(crate) enum Head {
    /// The head without its final blank line.
    Complete(Vec<u8>),
    /// More than the limit arrived without the blank line that ends a head.
    TooLarge,
    /// The client closed the connection first.
    Closed,
}

/// Read a request head of at most `max` bytes. What follows it (a body) is read only as far
/// as it came in the same reads, and dropped.
#[cfg(test)]
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
    s: &mut S,
    max: usize,
) -> std::io::Result<Head> {
    Ok(read_head_and_rest(s, max).await?.0)
}

/// [`read_head`], and the bytes that came after the head in the same reads (the start of a
/// body).
pub(crate) async fn read_head_and_rest<S: AsyncRead + Unpin>(
    s: &mut S,
    max: usize,
) -> std::io::Result<(Head, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok((Head::Closed, Vec::new()));
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf[scan_from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(scan_from + pos + 4);
            buf.truncate(scan_from + pos);
            if buf.len() > max {
                return Ok((Head::TooLarge, Vec::new()));
            }
            return Ok((Head::Complete(buf), rest));
        }
        // Without the blank line yet, the head is all but the last three bytes, which may be
        // the start of it: a head of exactly `max` bytes is not refused for how it was cut.
        if buf.len().saturating_sub(3) > max {
            return Ok((Head::TooLarge, Vec::new()));
        }
    }
}

/// A 400 as Go's server words it (`400 Bad Request: <why>`).
fn bad_request(why: &str) -> Response {
    Response::error(400, &format!("400 Bad Request: {why}"))
}

/// Parse a request head (without the final blank line), or the answer that refuses it:
/// 400 when it is malformed (as Go's server checks it: token method and header names, no
/// control characters in values), 431 with more than `max_headers` header lines.
pub(crate) fn parse_head(head: &[u8], max_headers: usize) -> Result<Request, Response> {
    use crate::http_head::Refusal;
    let h = crate::http_head::request(head, max_headers).map_err(|r| match r {
        Refusal::TooManyFields => Response::error(
            431,
            "431 Request Header Fields Too Large: too many header lines",
        ),
        Refusal::NotUtf8 => bad_request("not UTF-8"),
        Refusal::RequestLine | Refusal::StatusLine => bad_request("malformed request line"),
        Refusal::Target => bad_request("malformed request target"),
        Refusal::HeaderLine => bad_request("malformed header line"),
        Refusal::HeaderName => bad_request("invalid header name"),
        Refusal::HeaderValue => bad_request("invalid header value"),
    })?;
    let [method, target, _] = h.start;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers: h
            .fields
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect(),
        peer_certs: Vec::new(),
        body: Vec::new(),
    })
}

/// Check what the head says of a body. Most routes read none: a body is drained and dropped
/// after the answer, so one declared larger than `max` is refused (413) before anything
/// else; a `Content-Length` that is not one number is a 400, and a transfer coding other
/// than chunked a 501, as in Go's server.
pub(crate) fn check_body(req: &Request, max: u64) -> Result<(), Response> {
    if let Some(te) = req.header("transfer-encoding") {
        return if te.eq_ignore_ascii_case("chunked") {
            Ok(()) // Go ignores Content-Length then too
        } else {
            Err(Response::error(501, "Unsupported transfer encoding"))
        };
    }
    let mut declared: Option<u64> = None;
    for (k, v) in &req.headers {
        if k != "content-length" {
            continue;
        }
        let n = (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse::<u64>().ok())
            .flatten()
            .filter(|n| declared.is_none_or(|d| d == *n))
            .ok_or_else(|| bad_request("invalid Content-Length"))?;
        declared = Some(n);
    }
    match declared {
        Some(n) if n > max => Err(Response::error(413, "413 Request Entity Too Large")),
        _ => Ok(()),
    }
}

/// The body a request announces, read from `s` after `rest` (what came with the head):
/// `Content-Length` bytes, or a chunked body decoded (trailers dropped). `Ok(Err(answer))`
/// refuses it: more than `max` bytes (413), or chunks that are not well formed (400). A
/// client that closes before the end is an error.
pub(crate) async fn read_body<S: AsyncRead + Unpin>(
    s: &mut S,
    req: &Request,
    rest: Vec<u8>,
    max: usize,
) -> std::io::Result<Result<Vec<u8>, Response>> {
    let too_large = || Response::error(413, "413 Request Entity Too Large");
    let mut r = BodyReader {
        s,
        buf: rest,
        pos: 0,
    };
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
    if !chunked {
        // check_body has vetted the length.
        let len = req
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if len > max {
            return Ok(Err(too_large()));
        }
        return Ok(Ok(r.take(len).await?.to_vec()));
    }
    let malformed = || bad_request("malformed chunked encoding");
    let mut body = Vec::new();
    loop {
        let Some(line) = r.line().await? else {
            return Ok(Err(malformed()));
        };
        // `size[;extension]`, hexadecimal.
        let size = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size)
            .ok()
            .map(|t| t.trim_end_matches([' ', '\t']))
            .filter(|t| !t.is_empty() && t.len() <= 16)
            .and_then(|t| u64::from_str_radix(t, 16).ok());
        let Some(size) = size else {
            return Ok(Err(malformed()));
        };
        if size == 0 {
            break;
        }
        if size > (max - body.len()) as u64 {
            return Ok(Err(too_large()));
        }
        body.extend_from_slice(r.take(size as usize).await?);
        if r.take(2).await? != b"\r\n" {
            return Ok(Err(malformed()));
        }
    }
    // Trailers, up to the blank line.
    loop {
        match r.line().await? {
            Some(l) if l.is_empty() => return Ok(Ok(body)),
            Some(_) => {}
            None => return Ok(Err(malformed())),
        }
    }
}

/// Reads a body from what came with the head, then from the connection.
struct BodyReader<'a, S> {
    s: &'a mut S,
    buf: Vec<u8>,
    pos: usize,
}

impl<S: AsyncRead + Unpin> BodyReader<'_, S> {
    /// Longest chunk-size or trailer line.
    const MAX_LINE: usize = 4096;

    async fn more(&mut self) -> std::io::Result<()> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 4096];
        let n = self.s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next `n` bytes.
    async fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        while self.buf.len() - self.pos < n {
            self.more().await?;
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    /// The next line without its CRLF; `None` when it is longer than `MAX_LINE`.
    async fn line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            let avail = &self.buf[self.pos..];
            if let Some(i) = avail.windows(2).position(|w| w == b"\r\n") {
                let line = avail[..i].to_vec();
                self.pos += i + 2;
                return Ok((line.len() <= Self::MAX_LINE).then_some(line));
            }
            if avail.len() > Self::MAX_LINE + 1 {
                return Ok(None);
            }
            self.more().await?;
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        413 => "Request Entity Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Header values must not break the head: CR and LF are dropped.
fn header_safe(v: &str) -> String {
    v.chars().filter(|c| *c != '\r' && *c != '\n').collect()
}

pub(crate) fn encode_response(resp: &Response, head_only: bool) -> Vec<u8> {
    // Every answer is marked private and not cacheable, as the apiserver library's
    // WithCacheControl filter does.
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nCache-Control: no-cache, private\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        resp.status,
        reason_phrase(resp.status),
        header_safe(&resp.content_type),
        resp.body.len()
    );
    for (k, v) in &resp.headers {
        let _ = write!(head, "{}: {}\r\n", header_safe(k), header_safe(v));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    out
}

#[cfg(test)]
impl Request {
    /// A GET of `path_and_query`, for tests.
    pub(crate) fn get(path_and_query: &str) -> Request {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Request {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path_and_query: &str) -> Request {
        Request::get(path_and_query)
    }

    #[test]
    fn query_parsing() {
        let r = req("/x?a=1&b&c=x%20y+z&a=2&bad=%zz&tail=%4");
        assert_eq!(r.query_values("a"), vec!["1", "2"]);
        assert!(r.has_query("b"));
        assert!(!r.has_query("d"));
        assert_eq!(r.query_values("c"), vec!["x y z"]);
        assert_eq!(r.query_values("bad"), vec!["%zz"]);
        assert_eq!(r.query_values("tail"), vec!["%4"]);
    }

    #[test]
    fn head_parsing() {
        let r = parse_head(
            b"GET /healthz?verbose HTTP/1.1\r\nHost: x\r\nX-Remote-User:  bob \t",
            100,
        )
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/healthz");
        assert_eq!(r.query, "verbose");
        assert_eq!(r.header("x-remote-user"), Some("bob"));
        assert_eq!(r.header("HOST"), Some("x"));
        for (bad, why) in [
            (&b"GET /healthz"[..], "malformed request line"),
            (b"GET /healthz HTTP/2", "malformed request line"),
            (b"G(T / HTTP/1.1", "malformed request line"),
            (b"GET healthz HTTP/1.1", "malformed request target"),
            (b"GET /a\x01 HTTP/1.1", "malformed request target"),
            (b"GET / HTTP/1.1 extra", "malformed request line"),
            (b"GET / HTTP/1.1\r\nno colon", "malformed header line"),
            (b"GET / HTTP/1.1\r\nBad Name: x", "invalid header name"),
            (b"GET / HTTP/1.1\r\n: x", "invalid header name"),
            (b"GET / HTTP/1.1\r\nX-A: a\x00b", "invalid header value"),
            (b"GET / HTTP/1.1\r\n folded: x", "invalid header name"),
            (b"\xff / HTTP/1.1", "not UTF-8"),
        ] {
            let r = parse_head(bad, 100).unwrap_err();
            assert_eq!(r.status, 400);
            assert_eq!(
                String::from_utf8(r.body).unwrap(),
                format!("400 Bad Request: {why}\n"),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let many = format!("GET / HTTP/1.1{}", "\r\na: b".repeat(3));
        assert!(parse_head(many.as_bytes(), 3).is_ok());
        assert_eq!(parse_head(many.as_bytes(), 2).unwrap_err().status, 431);
    }

    #[test]
    fn a_head_at_the_limit_is_read_however_it_arrives() {
        use futures_lite::future::block_on;
        let head = b"GET / HTTP/1.1\r\nX-A: 123456";
        let mut data = head.to_vec();
        data.extend_from_slice(b"\r\n\r\n");
        for cut in 1..data.len() {
            // Two reads: the head's end and part of the blank line may come together.
            let mut r = futures_lite::io::Cursor::new(&data[..cut]).chain(&data[cut..]);
            let got = block_on(read_head(&mut r, head.len())).unwrap();
            assert_eq!(got, Head::Complete(head.to_vec()), "cut at {cut}");
            let mut r = futures_lite::io::Cursor::new(&data[..cut]).chain(&data[cut..]);
            assert_eq!(
                block_on(read_head(&mut r, head.len() - 1)).unwrap(),
                Head::TooLarge
            );
        }
    }

    #[test]
    fn bodies() {
        let with = |headers: &[(&str, &str)]| Request {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..req("/")
        };
        let status =
            |headers: &[(&str, &str)]| check_body(&with(headers), 1000).err().map(|r| r.status);
        assert_eq!(status(&[]), None);
        assert_eq!(status(&[("content-length", "1000")]), None);
        assert_eq!(
            status(&[("content-length", "1000"), ("content-length", "1000")]),
            None
        );
        assert_eq!(status(&[("content-length", "1001")]), Some(413));
        assert_eq!(
            status(&[("content-length", "99999999999999999999999")]),
            Some(400)
        );
        for bad in ["", "+1", "-1", "1 2", "0x10"] {
            assert_eq!(status(&[("content-length", bad)]), Some(400), "{bad:?}");
        }
        assert_eq!(
            status(&[("content-length", "1"), ("content-length", "2")]),
            Some(400)
        );
        assert_eq!(
            status(&[("transfer-encoding", "chunked"), ("content-length", "9999")]),
            None
        );
        assert_eq!(status(&[("transfer-encoding", "gzip")]), Some(501));
    }

    #[test]
    fn request_bodies() {
        use futures_lite::future::block_on;
        let req = |headers: &[(&str, &str)]| Request {
            method: "PUT".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let read = |r: &Request, rest: &[u8], more: &[u8], max: usize| {
            let mut s = futures_lite::io::Cursor::new(more.to_vec());
            block_on(read_body(&mut s, r, rest.to_vec(), max))
        };
        let fixed = req(&[("content-length", "5")]);
        // What came with the head, then the connection.
        assert_eq!(
            read(&fixed, b"he", b"llo", 10).unwrap(),
            Ok(b"hello".to_vec())
        );
        assert_eq!(
            read(&fixed, b"hello", b"", 10).unwrap(),
            Ok(b"hello".to_vec())
        );
        assert_eq!(
            read(&fixed, b"hel", b"", 10).unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            read(&fixed, b"", b"hello", 4).unwrap().unwrap_err().status,
            413
        );
        assert_eq!(read(&req(&[]), b"", b"ignored", 4).unwrap(), Ok(Vec::new()));

        let chunked = req(&[("transfer-encoding", "Chunked")]);
        let body = b"3\r\nabc\r\n1 \r\nd\r\n0\r\n\r\n";
        for cut in 0..body.len() {
            assert_eq!(
                read(&chunked, &body[..cut], &body[cut..], 10).unwrap(),
                Ok(b"abcd".to_vec()),
                "cut at {cut}"
            );
        }
        assert_eq!(
            read(&chunked, b"", body, 3).unwrap().unwrap_err().status,
            413
        );
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"3\r\nabcX\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
        ] {
            assert_eq!(
                read(&chunked, b"", bad, 100).unwrap().unwrap_err().status,
                400,
                "{bad:?}"
            );
        }
        let long = format!("1;{}\r\n", "e".repeat(5000));
        assert_eq!(
            read(&chunked, b"", long.as_bytes(), 100)
                .unwrap()
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn response_encoding() {
        let r = Response::not_found();
        let wire = String::from_utf8(encode_response(&r, false)).unwrap();
        assert!(wire.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(wire.contains("Content-Length: 19\r\n"));
        assert!(wire.ends_with("\r\n\r\n404 page not found\n"));
        let head = String::from_utf8(encode_response(&r, true)).unwrap();
        assert!(head.ends_with("Connection: close\r\n\r\n"));
    }
}
