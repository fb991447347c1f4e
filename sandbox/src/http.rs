//! A minimal HTTP/1.1 server side: request parsing, fixed-length and chunked responses.

use std::io::{self, BufRead, Read, Write};

use edgekcm::server::query::{percent_decode, query_pairs};

const MAX_HEADER_LINE: usize = 64 * 1024;
const MAX_HEADERS: usize = 200;
const MAX_BODY: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The raw target: path and query.
    pub target: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.0 without keep-alive, or `Connection: close`.
    pub close: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The bearer token of the Authorization header.
    pub fn bearer(&self) -> Option<String> {
        let h = self.header("authorization")?.trim();
        let (scheme, rest) = h.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim().to_string())
    }
}

fn read_line_limited<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    let n = r
        .by_ref()
        .take(MAX_HEADER_LINE as u64)
        .read_until(b'\n', buf)?;
    if n == MAX_HEADER_LINE && buf.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "header line too long",
        ));
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(n)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Read one request. `Ok(None)` is a clean end of the connection.
pub fn read_request<R: BufRead>(r: &mut R) -> io::Result<Option<Request>> {
    let mut line = Vec::new();
    // Tolerate empty lines between requests.
    loop {
        if read_line_limited(r, &mut line)? == 0 {
            return Ok(None);
        }
        if !line.is_empty() {
            break;
        }
    }
    // The head's lines (each read with the line limit, CR LF or LF), for the one parser.
    let mut head = std::mem::take(&mut line);
    let mut lines = 0;
    loop {
        if read_line_limited(r, &mut line)? == 0 {
            return Err(bad("connection closed inside the headers"));
        }
        if line.is_empty() {
            break;
        }
        lines += 1;
        if lines > MAX_HEADERS {
            return Err(bad("too many headers"));
        }
        head.extend_from_slice(b"\r\n");
        head.extend_from_slice(&line);
    }
    let h = edgekcm::http_head::request(&head, MAX_HEADERS)
        .map_err(|why| bad(&format!("malformed request head: {why:?}")))?;
    let [method, target, version] = h.start;
    let mut req = Request {
        method: method.to_string(),
        target: target.to_string(),
        headers: h
            .fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Request::default()
    };
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    req.path = percent_decode(&path.replace('+', "%2B"));
    req.query = query_pairs(q);
    let conn = req.header("connection").unwrap_or("").to_ascii_lowercase();
    req.close = conn.contains("close") || (version == "HTTP/1.0" && !conn.contains("keep-alive"));
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        req.body = read_chunked(r)?;
    } else if let Some(len) = req.header("content-length") {
        let n: usize = len.trim().parse().map_err(|_| bad("bad content-length"))?;
        if n > MAX_BODY {
            return Err(bad("body too large"));
        }
        let mut body = vec![0u8; n];
        r.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(Some(req))
}

fn read_chunked<R: BufRead>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut line = Vec::new();
    loop {
        read_line_limited(r, &mut line)?;
        let text = String::from_utf8_lossy(&line);
        let size_text = text.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(size_text, 16).map_err(|_| bad("bad chunk size"))?;
        if n == 0 {
            // Trailers until the empty line.
            loop {
                if read_line_limited(r, &mut line)? == 0 || line.is_empty() {
                    return Ok(out);
                }
            }
        }
        if out.len() + n > MAX_BODY {
            return Err(bad("body too large"));
        }
        let start = out.len();
        out.resize(start + n, 0);
        r.read_exact(&mut out[start..])?;
        read_line_limited(r, &mut line)?;
    }
}

pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Write a complete response with a Content-Length.
pub fn write_response<W: Write>(
    w: &mut W,
    code: u16,
    content_type: &str,
    extra: &[(String, String)],
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-cache, private\r\n",
        reason_phrase(code),
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    w.write_all(&all)?;
    w.flush()
}

/// Start a chunked response (a watch).
pub fn write_chunked_head<W: Write>(w: &mut W, content_type: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n"
    );
    w.write_all(head.as_bytes())?;
    w.flush()
}

pub fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut buf = format!("{:x}\r\n", data.len()).into_bytes();
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    w.write_all(&buf)?;
    w.flush()
}

pub fn write_last_chunk<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    #[test]
    fn parses_requests_and_keep_alive() {
        let raw = b"GET /api/v1/pods?labelSelector=a%3Db%2Cc+in+(x)&watch=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n\
POST /x HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc\
PUT /y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n3;x=y\r\n!!!\r\n0\r\n\r\n";
        let mut r = BufReader::new(&raw[..]);
        let a = read_request(&mut r).unwrap().unwrap();
        assert_eq!(a.path, "/api/v1/pods");
        assert_eq!(a.param("labelSelector"), Some("a=b,c in (x)"));
        assert_eq!(a.param("watch"), Some("1"));
        assert_eq!(a.bearer().as_deref(), Some("tok"));
        assert!(!a.close);
        let b = read_request(&mut r).unwrap().unwrap();
        assert_eq!(b.body, b"abc");
        assert!(b.close);
        let c = read_request(&mut r).unwrap().unwrap();
        assert_eq!(c.body, b"hi!!!");
        assert!(read_request(&mut r).unwrap().is_none());
        let mut bad = BufReader::new(&b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"[..]);
        assert!(read_request(&mut bad).is_err());
    }
}
