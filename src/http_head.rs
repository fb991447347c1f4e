//! HTTP/1.x message heads: the one parser of the secure port's requests (`server::http`), the
//! API client's answers (`api::client::http1`) and the sandbox's requests.
//!
//! A head is taken whole (its end found by the reader, which also enforces the size limit)
//! and checked as Go's server checks a request: a start line of three parts, header names
//! that are tokens, no control characters in values; values lose their surrounding blanks;
//! lines end at CR LF only. What a field means is the caller's.
//!
//! `httparse` (linked already, through ureq) parses a typical head in about 1 us against 2.5
//! here (a 7-field request or answer, opt-level "s"): 0.03 CPU-s over the endpoints
//! workload's 22,500 requests. It is not used because it would change what the secure port
//! answers: it takes a bare LF as a line end, and it gives one error for a bad method and a
//! bad target (and one for a line without a colon and a bad name), which the port's 400s
//! tell apart as Go's server does.

/// A parsed head, borrowing its text.
#[derive(Debug, PartialEq)]
pub struct Head<'a> {
    /// A request's method, target and version; an answer's version, status and reason (the
    /// reason may be empty).
    pub start: [&'a str; 3],
    /// The header fields in order: the name as sent, the value without surrounding blanks.
    pub fields: Vec<(&'a str, &'a str)>,
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotUtf8,
    /// A request line that is not `token SP target SP HTTP/1.x`.
    RequestLine,
    /// A request target that is not a path (`/...`) or holds control characters.
    Target,
    /// A status line that is not `HTTP/1.x SP status [SP reason]`.
    StatusLine,
    /// A header line without a colon.
    HeaderLine,
    HeaderName,
    HeaderValue,
    /// More header lines than allowed.
    TooManyFields,
}

/// The end of a head in `buf` (the index after its blank line), once it has arrived.
pub fn end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The bytes of an RFC 9110 token.
const TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(c, b'!' | b'#'..=b'\'' | b'*' | b'+' | b'-' | b'.' | b'^'..=b'`' | b'|' | b'~');
        b += 1;
    }
    t
};

/// An RFC 9110 token (method, header name).
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| TOKEN[usize::from(b)])
}

/// A request head, without the blank line that ends it, with at most `max_fields` header
/// lines.
pub fn request(head: &[u8], max_fields: usize) -> Result<Head<'_>, Refusal> {
    let (line, rest) = split_start(head)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::RequestLine);
    };
    if !is_token(method) || !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Err(Refusal::RequestLine);
    }
    if !target.starts_with('/') || target.bytes().any(|b| b.is_ascii_control()) {
        return Err(Refusal::Target);
    }
    Ok(Head {
        start: [method, target, version],
        fields: fields(rest, max_fields)?,
    })
}

/// An answer's head, with or without the blank line that ends it, with at most `max_fields`
/// header lines. `start[1]` is a status of three digits.
pub fn response(head: &[u8], max_fields: usize) -> Result<Head<'_>, Refusal> {
    let head = head.strip_suffix(b"\r\n\r\n").unwrap_or(head);
    let (line, rest) = split_start(head)?;
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let status = parts.next().unwrap_or_default();
    let status_ok = status
        .parse::<u16>()
        .is_ok_and(|s| (100..1000).contains(&s));
    if !status_ok || !version.starts_with("HTTP/1.") {
        return Err(Refusal::StatusLine);
    }
    Ok(Head {
        start: [version, status, parts.next().unwrap_or_default()],
        fields: fields(rest, max_fields)?,
    })
}

/// The start line and the header lines after it.
fn split_start(head: &[u8]) -> Result<(&str, Option<&str>), Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| Refusal::NotUtf8)?;
    Ok(split_line(text))
}

/// The text up to the first CRLF, and what follows it (lines end at CRLF only: a bare CR or
/// LF stays in its line, where it is a control character).
fn split_line(text: &str) -> (&str, Option<&str>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&c| c == b'\n') {
        let i = from + i;
        if i > 0 && b[i - 1] == b'\r' {
            return (&text[..i - 1], Some(&text[i + 1..]));
        }
        from = i + 1;
    }
    (text, None)
}

fn fields(mut rest: Option<&str>, max: usize) -> Result<Vec<(&str, &str)>, Refusal> {
    let mut fields = Vec::with_capacity(16);
    while let Some(text) = rest {
        let (line, next) = split_line(text);
        rest = next;
        if fields.len() == max {
            return Err(Refusal::TooManyFields);
        }
        let (name, value) = line.split_once(':').ok_or(Refusal::HeaderLine)?;
        if !is_token(name) {
            return Err(Refusal::HeaderName);
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Refusal::HeaderValue);
        }
        fields.push((name, value));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let h = request(b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-U:  bob \t", 10).unwrap();
        assert_eq!(h.start, ["GET", "/a?b", "HTTP/1.1"]);
        assert_eq!(h.fields, vec![("Host", "x"), ("X-U", "bob")]);
        assert_eq!(request(b"GET / HTTP/1.0", 0).unwrap().fields, vec![]);
        for (bad, why) in [
            (&b"GET /"[..], Refusal::RequestLine),
            (b"GET  / HTTP/1.1", Refusal::RequestLine),
            (b"GET / HTTP/1.1\nX: y", Refusal::RequestLine),
            (b"GET x HTTP/1.1", Refusal::Target),
            (b"GET / HTTP/1.1\r\nX", Refusal::HeaderLine),
            (b"GET / HTTP/1.1\r\n", Refusal::HeaderLine),
            (b"GET / HTTP/1.1\r\nX Y: z", Refusal::HeaderName),
            (b"GET / HTTP/1.1\r\nX: \x7f", Refusal::HeaderValue),
            (b"GET / HTTP/1.1\r\na: 1\r\nb: 2", Refusal::TooManyFields),
            (b"G\xff / HTTP/1.1", Refusal::NotUtf8),
        ] {
            assert_eq!(
                request(bad, 1),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn answers() {
        let h = response(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\n\r\n",
            9,
        )
        .unwrap();
        assert_eq!(h.start, ["HTTP/1.1", "429", "Too Many Requests"]);
        assert_eq!(h.fields, vec![("Retry-After", "3")]);
        assert_eq!(response(b"HTTP/1.0 204", 9).unwrap().start[2], "");
        for bad in [
            &b"SSH-2.0"[..],
            b"HTTP/1.1 abc",
            b"HTTP/2 200 OK",
            b"HTTP/1.1 99 X",
        ] {
            assert_eq!(response(bad, 9), Err(Refusal::StatusLine));
        }
        assert_eq!(
            response(b"HTTP/1.1 200 OK\r\nX\r\n\r\n", 9),
            Err(Refusal::HeaderLine)
        );
        assert_eq!(end(b"HTTP/1.1 200 OK\r\n\r\nbody"), Some(19));
        assert_eq!(end(b"HTTP/1.1 200 OK\r\n"), None);
    }
}
