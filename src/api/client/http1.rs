//! The little of HTTP/1.1 a watch (`stream.rs`) and a request (`exchange.rs`) need on
//! connections of their own: the request, the response head, and the body's framing
//! (chunked, a length, or until close), stepped over in place so that body bytes go where
//! they are wanted without a copy.

use std::io;
use std::time::Duration;

/// The longest response head read (ureq's `max_response_header_size` is 64 KiB too).
const MAX_HEAD: usize = 64 * 1024;

/// A request: its head, then `body` (content type and text) when it has one. `target` is
/// the path and query.
pub(super) fn request(
    method: &str,
    target: &str,
    host: &str,
    user_agent: &str,
    accept: &str,
    authorization: Option<&str>,
    body: Option<(&str, &str)>,
) -> Vec<u8> {
    use std::io::Write as _;
    let text = body.map_or("", |(_, b)| b);
    let mut out = Vec::with_capacity(256 + target.len() + text.len());
    // Writing into a Vec does not fail.
    let _ = write!(
        out,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {user_agent}\r\nAccept: {accept}\r\n"
    );
    if let Some(a) = authorization {
        let _ = write!(out, "Authorization: {a}\r\n");
    }
    if let Some((content_type, b)) = body {
        let _ = write!(
            out,
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            b.len()
        );
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(text.as_bytes());
    out
}

/// What a response head says.
#[derive(Debug, PartialEq)]
pub(super) struct Head {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub framing: Framing,
    /// The server closes the connection after this answer (`Connection: close`, or HTTP/1.0
    /// without keep-alive).
    pub close: bool,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// While an answer's head arrives in `buf[..len]`: where it ends once it is all there, else
/// room made in `buf` to read more (an error once the head would pass `MAX_HEAD`).
pub(super) fn head_or_room(buf: &mut Vec<u8>, len: usize) -> io::Result<Option<usize>> {
    if let Some(end) = crate::http_head::end(&buf[..len]) {
        return Ok(Some(end));
    }
    if len == buf.len() {
        if buf.len() >= MAX_HEAD {
            return Err(bad("response head too large"));
        }
        buf.resize(buf.len() * 2, 0);
    }
    Ok(None)
}

/// The server closed the connection before the answer's head was complete.
pub(super) fn closed_before_answer() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before the answer",
    )
}

/// Parse a complete head (through its blank line).
pub(super) fn parse_head(head: &[u8]) -> io::Result<Head> {
    use crate::http_head::Refusal;
    let h = crate::http_head::response(head, usize::MAX).map_err(|r| match r {
        Refusal::NotUtf8 => bad("response head is not UTF-8"),
        Refusal::StatusLine => {
            let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
            bad(format!(
                "not an HTTP/1.x status line: {:?}",
                String::from_utf8_lossy(line)
            ))
        }
        _ => bad(format!("bad header line ({r:?})")),
    })?;
    let [version, status, _] = h.start;
    let status: u16 = status.parse().map_err(|_| bad("bad status"))?;
    let (mut chunked, mut length, mut retry_after) = (false, None, None);
    let mut connection = None;
    for (name, value) in h.fields {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<u64>()
                    .map_err(|_| bad("bad Content-Length"))?,
            );
        } else if name.eq_ignore_ascii_case("retry-after") {
            retry_after = value.parse::<u64>().ok().map(Duration::from_secs);
        } else if name.eq_ignore_ascii_case("connection") {
            connection = Some(value.to_ascii_lowercase());
        }
    }
    let close = match connection.as_deref() {
        Some(c) if c.contains("close") => true,
        Some(c) if c.contains("keep-alive") => false,
        _ => version == "HTTP/1.0",
    };
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked(Chunk::Size {
            n: 0,
            digits: 0,
            ext: false,
        }),
        (false, Some(n)) => Framing::Length(n),
        (false, None) if status == 204 || status == 304 => Framing::Length(0),
        (false, None) => Framing::Close,
    };
    Ok(Head {
        status,
        retry_after,
        framing,
        close,
    })
}

/// Where a chunked body is.
#[derive(Debug, PartialEq, Clone, Copy)]
pub(super) enum Chunk {
    /// Reading a chunk-size line: the size so far, its hex digits, inside an extension.
    Size { n: u64, digits: u8, ext: bool },
    /// Inside a chunk: the bytes left of it.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd { cr: bool },
    /// After the last chunk: trailer lines until a blank one (`blank`: the line so far is).
    Trailer { blank: bool },
}

/// How the body of a response is delimited.
#[derive(Debug, PartialEq, Clone, Copy)]
pub(super) enum Framing {
    Chunked(Chunk),
    /// The bytes left of a `Content-Length` body.
    Length(u64),
    /// Until the server closes the connection.
    Close,
    /// The body is complete.
    Done,
}

impl Framing {
    /// Step over framing at the front of `input`: how many bytes of framing were passed, and
    /// how many bytes of body follow them (0 when `input` ran out or the body ended). Call
    /// `consumed` with how many of those body bytes were used before stepping again.
    pub(super) fn advance(&mut self, input: &[u8]) -> io::Result<(usize, usize)> {
        let mut i = 0;
        loop {
            let rest = (input.len() - i) as u64;
            let chunk = match self {
                Framing::Done => return Ok((i, 0)),
                Framing::Close => return Ok((i, input.len() - i)),
                Framing::Length(0) => {
                    *self = Framing::Done;
                    return Ok((i, 0));
                }
                Framing::Length(n) => return Ok((i, (*n).min(rest) as usize)),
                Framing::Chunked(c) => c,
            };
            match chunk {
                Chunk::Data(0) => *chunk = Chunk::DataEnd { cr: false },
                Chunk::Data(n) => return Ok((i, (*n).min(rest) as usize)),
                _ if i == input.len() => return Ok((i, 0)),
                Chunk::Size { n, digits, ext } => {
                    let b = input[i];
                    i += 1;
                    match b {
                        b'\n' if *digits == 0 => return Err(bad("chunk without a size")),
                        b'\n' if *n == 0 => *chunk = Chunk::Trailer { blank: true },
                        b'\n' => *chunk = Chunk::Data(*n),
                        _ if *ext => {}
                        b';' => *ext = true,
                        b'\r' | b' ' | b'\t' => {}
                        _ => {
                            let d = (b as char)
                                .to_digit(16)
                                .ok_or_else(|| bad("bad chunk size"))?;
                            if *digits >= 15 {
                                return Err(bad("chunk size too large"));
                            }
                            *n = *n * 16 + u64::from(d);
                            *digits += 1;
                        }
                    }
                }
                Chunk::DataEnd { cr } => {
                    let b = input[i];
                    i += 1;
                    match (b, *cr) {
                        (b'\r', false) => *cr = true,
                        (b'\n', _) => {
                            *chunk = Chunk::Size {
                                n: 0,
                                digits: 0,
                                ext: false,
                            }
                        }
                        _ => return Err(bad("chunk data not followed by CRLF")),
                    }
                }
                Chunk::Trailer { blank } => {
                    let b = input[i];
                    i += 1;
                    match b {
                        b'\n' if *blank => {
                            *self = Framing::Done;
                            continue;
                        }
                        b'\n' => *blank = true,
                        b'\r' => {}
                        _ => *blank = false,
                    }
                }
            }
        }
    }

    /// `n` body bytes that `advance` announced were used.
    pub(super) fn consumed(&mut self, n: usize) {
        match self {
            Framing::Length(left) | Framing::Chunked(Chunk::Data(left)) => {
                *left = left.saturating_sub(n as u64)
            }
            _ => {}
        }
    }

    /// The body is complete (nothing more is to be read for it).
    pub(super) fn done(&self) -> bool {
        matches!(self, Framing::Done | Framing::Length(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body of `wire` read in pieces of `step` bytes.
    fn body_of(mut f: Framing, wire: &[u8], step: usize) -> io::Result<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        for piece in wire.chunks(step) {
            let mut at = 0;
            while at < piece.len() {
                let (skip, n) = f.advance(&piece[at..])?;
                at += skip;
                // Use at most 3 bytes at a time, as a decoder stopping at an event would.
                let used = n.min(3);
                out.extend_from_slice(&piece[at..at + used]);
                f.consumed(used);
                at += used;
                if n == 0 && f.done() {
                    break;
                }
            }
        }
        if !f.done() {
            f.advance(&[])?;
        }
        Ok((out, f.done()))
    }

    fn chunked() -> Framing {
        Framing::Chunked(Chunk::Size {
            n: 0,
            digits: 0,
            ext: false,
        })
    }

    #[test]
    fn chunked_bodies_are_joined_across_any_split() {
        let wire = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
        for step in [1, 2, 5, 7, 1000] {
            let (data, done) = body_of(chunked(), wire, step).unwrap();
            assert_eq!(data, b"hello 0123456789", "step {step}");
            assert!(done);
        }
        // Without trailers, and bare LFs.
        let (data, done) = body_of(chunked(), b"3\nabc\n0\n\n", 2).unwrap();
        assert_eq!((data.as_slice(), done), (&b"abc"[..], true));
        // An unfinished body is not done.
        let (data, done) = body_of(chunked(), b"3\r\nabc\r\n4\r\nde", 3).unwrap();
        assert_eq!((data.as_slice(), done), (&b"abcde"[..], false));
    }

    #[test]
    fn any_chunking_read_in_any_pieces_gives_the_body_back() {
        let mut rng = fastrand::Rng::new();
        for _ in 0..300 {
            let body: Vec<u8> = (0..rng.usize(0..3000)).map(|_| rng.u8(..)).collect();
            let mut wire = Vec::new();
            let mut at = 0;
            while at < body.len() {
                let n = rng.usize(1..=(body.len() - at).min(700));
                let ext = if rng.bool() { ";a=b" } else { "" };
                let size = if rng.bool() {
                    format!("{n:x}")
                } else {
                    format!("{n:X}")
                };
                wire.extend_from_slice(format!("{size}{ext}\r\n").as_bytes());
                wire.extend_from_slice(&body[at..at + n]);
                wire.extend_from_slice(b"\r\n");
                at += n;
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let (got, done) = body_of(chunked(), &wire, rng.usize(1..64)).unwrap();
            assert!(done);
            assert_eq!(got, body);
        }
    }

    #[test]
    fn bad_chunks_are_errors() {
        for wire in [
            &b"zz\r\n"[..],
            b"\r\n",
            b"3\r\nabcX",
            b"1234567890abcdef0\r\n",
        ] {
            assert!(body_of(chunked(), wire, 4).is_err(), "{wire:?}");
        }
    }

    #[test]
    fn lengths_and_close() {
        let (data, done) = body_of(Framing::Length(4), b"abcdefg", 3).unwrap();
        assert_eq!((data.as_slice(), done), (&b"abcd"[..], true));
        // Complete as soon as the last byte is used, before anything else is read.
        let mut f = Framing::Length(2);
        assert_eq!(f.advance(b"ab").unwrap(), (0, 2));
        f.consumed(2);
        assert!(f.done());
        let (data, done) = body_of(Framing::Close, b"abcdefg", 3).unwrap();
        assert_eq!((data.as_slice(), done), (&b"abcdefg"[..], false));
    }

    #[test]
    fn heads() {
        let h = parse_head(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\ncontent-length: 12\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.status, 429);
        assert_eq!(h.retry_after, Some(Duration::from_secs(3)));
        assert_eq!(h.framing, Framing::Length(12));
        let h = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert_eq!((h.status, h.framing), (200, chunked()));
        assert!(!h.close);
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::Close);
        assert!(h.close);
        let h = parse_head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
        assert!(!h.close);
        let h = parse_head(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert!(h.close);
        for bad in [
            &b"SSH-2.0\r\n\r\n"[..],
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200\r\nX\r\n\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            crate::http_head::end(b"HTTP/1.1 200 OK\r\n\r\nbody"),
            Some(19)
        );
        assert_eq!(crate::http_head::end(b"HTTP/1.1 200 OK\r\n"), None);
        let req = request(
            "GET",
            "/api/v1/pods?watch=true",
            "h:1",
            "ua",
            "application/json",
            None,
            None,
        );
        assert_eq!(
            String::from_utf8(req).unwrap(),
            "GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: h:1\r\nUser-Agent: ua\r\nAccept: application/json\r\n\r\n"
        );
        let req = request(
            "PUT",
            "/p",
            "h:1",
            "ua",
            "*/*",
            Some("Bearer t"),
            Some(("application/json", "{}")),
        );
        assert_eq!(
            String::from_utf8(req).unwrap(),
            "PUT /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: ua\r\nAccept: */*\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
