//! A request and its whole answer over our own connections (`api::client::direct`), without ureq:
//! what every request but a blocking watch is when no proxy stands in front of the server.
//!
//! A request is one buffer (head and body) sent in one write; the answer's head is parsed and
//! its body unframed (`http1`: a length, chunks, or until close) into one buffer. Connections
//! are kept for the next request (`MAX_IDLE` at most, the last used first) when the answer
//! left them fit: read to its end, nothing more sent after it, no `Connection: close`, and
//! the server's end still open when taken again. ureq did the same per request with a few
//! microseconds more of its own: header maps, URI parsing, timing bookkeeping.

use super::direct::Direct;
use super::http1;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Idle connections kept (as many as the ureq agent kept).
const MAX_IDLE: usize = 16;
/// A new connection (TCP and TLS) is made within this (the ureq agent's connect timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first read of an answer: most answers whole.
const FIRST_READ: usize = 8 * 1024;

/// The server requests go to, and its idle connections.
pub(super) struct Endpoint {
    /// Where connections go (the tls-server-name's URL when one is given).
    uri: ureq::http::Uri,
    /// The address, when the URL names one (no tls-server-name): nothing to resolve.
    pub(super) addr: Option<SocketAddr>,
    /// The Host header.
    pub(super) host: String,
    /// The server URL's path, before every request's.
    prefix: String,
    /// The name TLS sends and verifies; None for plain http.
    pub(super) tls_name: Option<ServerName<'static>>,
    idle: Mutex<Vec<Direct>>,
}

/// A whole answer.
pub(super) struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

/// A request: method, path and query (after the server URL's path), headers, body.
pub(super) struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub user_agent: &'a str,
    pub accept: &'a str,
    pub authorization: Option<&'a str>,
    /// Content type and body.
    pub body: Option<(&'a str, &'a str)>,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.into())
}

impl Endpoint {
    /// For the server URL `base`; with a tls-server-name, `dial` is its URL and `host` the
    /// server's own `host[:port]` for the Host header.
    pub(super) fn new(base: &str, dial: Option<(&str, &str)>) -> io::Result<Endpoint> {
        let target = dial.map_or(base, |(d, _)| d);
        let uri: ureq::http::Uri = target.parse().map_err(|_| invalid("bad server URL"))?;
        let name = uri
            .host()
            .ok_or_else(|| invalid("server URL without a host"))?;
        let host = match (dial, uri.authority()) {
            (Some((_, h)), _) => h.to_string(),
            (None, Some(a)) => a.as_str().to_string(),
            (None, None) => name.to_string(),
        };
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
        let addr = match (bare.parse::<IpAddr>(), dial) {
            (Ok(ip), None) => Some(SocketAddr::new(ip, port)),
            _ => None,
        };
        let tls_name = match uri.scheme_str() {
            Some("https") => Some(
                ServerName::try_from(bare.to_string())
                    .map_err(|_| invalid("invalid server name for TLS"))?,
            ),
            _ => None,
        };
        let prefix = base
            .parse::<ureq::http::Uri>()
            .map(|u| u.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        Ok(Endpoint {
            uri,
            addr,
            host,
            prefix,
            tls_name,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Send `req` and read its whole answer, within `timeout`. `tls` is the configuration of
    /// an https server's connections.
    pub(super) fn exchange(
        &self,
        tls: Option<Arc<ClientConfig>>,
        req: &Request<'_>,
        timeout: Duration,
    ) -> io::Result<Answer> {
        let deadline = Instant::now() + timeout;
        let left = || {
            let d = deadline.saturating_duration_since(Instant::now());
            if d.is_zero() {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("timeout: no answer within {timeout:?}"),
                ))
            } else {
                Ok(d)
            }
        };
        let mut conn = match self.take_idle() {
            Some(c) => c,
            None => self.connect(tls, left()?.min(CONNECT_TIMEOUT))?,
        };
        let bytes = http1::request(
            req.method,
            &self.target(req.path),
            &self.host,
            req.user_agent,
            req.accept,
            req.authorization,
            req.body,
        );
        conn.send(&bytes, Some(left()?)).map_err(timed_out)?;
        let (answer, reusable) = read_answer(&mut conn, &left)?;
        if reusable {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        Ok(answer)
    }

    /// A request's path and query after the server URL's path.
    pub(super) fn target<'a>(&self, path: &'a str) -> std::borrow::Cow<'a, str> {
        match self.prefix.as_str() {
            "" => path.into(),
            prefix => format!("{prefix}{path}").into(),
        }
    }

    /// The addresses to connect to: the URL's own address, or its name resolved (a
    /// tls-server-name by our resolver, to the server's address).
    pub(super) fn addrs(&self) -> io::Result<Vec<SocketAddr>> {
        match self.addr {
            Some(a) => Ok(vec![a]),
            None => super::stream::resolve(&self.uri),
        }
    }

    /// The last connection put back that is still fit.
    fn take_idle(&self) -> Option<Direct> {
        loop {
            let mut c = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
            if c.reusable() {
                return Some(c);
            }
        }
    }

    fn connect(&self, tls: Option<Arc<ClientConfig>>, timeout: Duration) -> io::Result<Direct> {
        let addrs = self.addrs()?;
        let tls = match (&self.tls_name, tls) {
            (None, _) => None,
            (Some(name), Some(config)) => Some((config, name.clone())),
            (Some(_), None) => return Err(invalid("no TLS configuration for an https URL")),
        };
        Direct::open(&addrs, tls, timeout).map_err(timed_out)
    }
}

/// A socket timeout as the request's timeout.
fn timed_out(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            io::Error::new(io::ErrorKind::TimedOut, format!("timeout: {e}"))
        }
        _ => e,
    }
}

/// The answer on `conn`, and whether the connection is fit for another request.
fn read_answer(
    conn: &mut Direct,
    left: &dyn Fn() -> io::Result<Duration>,
) -> io::Result<(Answer, bool)> {
    let mut buf = vec![0; FIRST_READ];
    let mut len = 0;
    let end = loop {
        if let Some(end) = http1::head_or_room(&mut buf, len)? {
            break end;
        }
        let n = conn
            .read(&mut buf[len..], Some(left()?))
            .map_err(timed_out)?;
        if n == 0 {
            return Err(http1::closed_before_answer());
        }
        len += n;
    };
    let head = http1::parse_head(&buf[..end])?;
    let mut framing = head.framing;
    let until_close = framing == http1::Framing::Close;
    let mut body = match framing {
        // Sized from Content-Length (up to a bound: the header is not trusted with memory).
        http1::Framing::Length(n) => Vec::with_capacity(n.min(1 << 20) as usize),
        _ => Vec::with_capacity(len - end),
    };
    let mut pos = end;
    loop {
        let (skip, n) = framing.advance(&buf[pos..len])?;
        body.extend_from_slice(&buf[pos + skip..pos + skip + n]);
        framing.consumed(n);
        pos += skip + n;
        if framing.done() {
            break;
        }
        if pos < len {
            continue;
        }
        // Read on, into the same buffer.
        pos = 0;
        len = conn.read(&mut buf, Some(left()?)).map_err(timed_out)?;
        if len == 0 {
            if until_close {
                break;
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the middle of the answer",
            ));
        }
    }
    let reusable = !head.close && !until_close && pos == len;
    Ok((
        Answer {
            status: head.status,
            retry_after: head.retry_after,
            body,
        },
        reusable,
    ))
}
