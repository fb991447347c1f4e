//! Watches for async code (the reflectors on `crate::runtime::reactor`): an HTTP/1.1 GET on a
//! connection of its own, over `async_io::Async<TcpStream>` and futures-rustls, whose
//! streamed body goes through the same event decoder as the blocking watch
//! (`api::watch::Decoder`). A waiting watch costs a socket in async-io's reactor and a few
//! KiB of buffers, not a thread.
//!
//! It sends what the blocking watch (`watch.rs`) sends, through the same client: the QPS
//! limiter (waited on with a timer), the User-Agent, the bearer token (a token source is
//! asked on a helper thread, and dropped and asked again once on a 401), the client
//! certificate and CA of the client's shared rustls configuration (so sessions resume across
//! both paths), a kubeconfig's `tls-server-name` (connect to the server's address, send and
//! verify the name, Host of the server), and the same Accept header and query. Answers other
//! than 200 become the same errors (`watch::refusal`). Each read may wait 30 s more than
//! `timeoutSeconds`, so a half-open connection ends the stream. Dropping the stream (or the
//! future reading it) closes the connection.
//!
//! A proxy from the environment (`HTTPS_PROXY` and the others) is ureq's business: when one
//! applies to the server, the watch is the blocking one, read on a thread of its own and
//! handed over through a channel ([`Client::watch_async`]). Proxied edge devices are rare,
//! and this keeps one implementation of proxying.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use async_io::{Async, Timer};
use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use serde_json::Value;

use super::connect::Resolver;
use super::http1::{self, Framing};
use super::query::WatchOptions;
use super::watch::{accept, per_read, refusal, watch_path, WatchCanceller};
use super::{parse_body, Auth, Client};
use crate::api::resources::Kind;
use crate::api::watch::{Decoder, Item};
use crate::error::{Error, Result};

/// TCP connect and TLS handshake together (ureq's watches: `timeout_connect`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one read takes from the connection at most. The buffer is taken (from the thread's
/// spares, `spare`) when the connection has something to read and given back once used; the
/// decoder keeps only the part of a line that spans reads.
const READ_BUFFER: usize = 4 * 1024;

/// The most of a refusal's body read for its Status.
const MAX_REFUSAL_BODY: usize = 1 << 20;

/// A watch's event stream, for async code. `next` yields events, the error of an ERROR event
/// (after which the stream should be dropped), and None at its end or on a read error (see
/// `take_read_error`).
pub struct AsyncWatch {
    source: Source,
}

enum Source {
    Socket(Box<Body>),
    Thread(ThreadWatch),
}

impl AsyncWatch {
    pub async fn next(&mut self) -> Option<Item> {
        match &mut self.source {
            Source::Socket(b) => b.next_event().await,
            Source::Thread(t) => t.events.recv().await.ok(),
        }
    }

    /// Why the stream ended, when a read failed.
    pub fn take_read_error(&mut self) -> Option<io::Error> {
        match &mut self.source {
            Source::Socket(b) => b.read_error.take(),
            Source::Thread(_) => None,
        }
    }
}

impl Client {
    /// Open a watch for async code (see the module's documentation).
    pub async fn watch_async(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &WatchOptions,
    ) -> Result<AsyncWatch> {
        if self.inner.proxied {
            return self.watch_on_thread(kind, ns, opts).await;
        }
        let path = watch_path(kind, ns, opts);
        let url = format!("{}{}", self.inner.base, path);
        let mut refreshed = false;
        loop {
            if !opts.limiter_passed || refreshed {
                self.pass_limiter().await;
            }
            let authorization = match &self.inner.auth {
                // A token source may read a file or ask the API server.
                Auth::Source(_) => {
                    let c = self.clone();
                    crate::runtime::pool::unblock(move || c.authorization()).await?
                }
                _ => self.authorization()?,
            };
            // Boxed: the connection's set-up state (TLS handshake and all) is needed only while
            // it lasts, and the task of a watch lives for hours.
            let opened = Box::pin(self.open(
                &path,
                accept(opts),
                authorization.as_deref(),
                per_read(opts),
            ))
            .await;
            let status = opened.as_ref().ok().map(|(s, _, _)| *s);
            crate::metrics::rest_request_result(&self.inner.base, "GET", status);
            let (status, retry_after, mut body) =
                opened.map_err(|e| Error::Transport(format!("GET {url}: {e}")))?;
            if status == 200 {
                body.decoder = Decoder::new(kind.to_string());
                body.decoder.shape = opts.shape.clone();
                body.decoder.echoes = opts.echoes.clone();
                return Ok(AsyncWatch {
                    source: Source::Socket(body),
                });
            }
            let v = body
                .read_to_end(MAX_REFUSAL_BODY)
                .await
                .map(|b| parse_body(&b))
                .unwrap_or(Value::Null);
            if status == 401 && !refreshed && matches!(self.inner.auth, Auth::Source(_)) {
                refreshed = true;
                self.invalidate_token();
                continue;
            }
            return Err(refusal(status, retry_after, &v));
        }
    }

    /// Connect, send the request and read the answer's head: its status, Retry-After and body.
    pub(super) async fn open(
        &self,
        path: &str,
        accept: &str,
        authorization: Option<&str>,
        per_read: Duration,
    ) -> io::Result<(u16, Option<Duration>, Box<Body>)> {
        // With a tls-server-name, the name is dialled (our resolver connects it to the
        // server's address) and sent and verified in TLS; the Host is the server's: what
        // the client's requests do (`exchange::Endpoint`, made when no proxy applies, as
        // here).
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let endpoint = self
            .inner
            .endpoint
            .as_ref()
            .ok_or_else(|| invalid("the server is reached through a proxy"))?;
        let started = Instant::now();
        let addrs = match endpoint.addr {
            Some(a) => vec![a],
            // A name (or an overridden one): resolved as the requests' are, on a helper.
            None => {
                let e = endpoint.clone();
                crate::runtime::pool::unblock(move || e.addrs()).await?
            }
        };
        let deadline = started + CONNECT_TIMEOUT;
        let tcp = within(deadline, "connect", connect_any(&addrs)).await?;
        let mut conn = match &endpoint.tls_name {
            Some(server_name) => {
                let config = self
                    .inner
                    .connector
                    .0
                    .client_config()
                    .ok_or_else(|| invalid("no TLS configuration for an https URL"))?;
                let tls =
                    futures_rustls::TlsConnector::from(config).connect(server_name.clone(), tcp);
                Conn::Tls(Box::new(within(deadline, "TLS handshake", tls).await?))
            }
            None => Conn::Plain(tcp),
        };
        let head = http1::request(
            "GET",
            &endpoint.target(path),
            &endpoint.host,
            &self.inner.user_agent,
            accept,
            authorization,
            None,
        );
        timed(per_read, "per write", async {
            conn.write_all(&head).await?;
            conn.flush().await
        })
        .await?;
        // The head, and what came after it in the same reads.
        let mut buf = vec![0; READ_BUFFER];
        let mut len = 0;
        let end = loop {
            if let Some(end) = http1::head_or_room(&mut buf, len)? {
                break end;
            }
            let n = timed(per_read, "per read", conn.read(&mut buf[len..])).await?;
            if n == 0 {
                return Err(http1::closed_before_answer());
            }
            len += n;
        };
        let head = http1::parse_head(&buf[..end])?;
        buf.copy_within(end..len, 0);
        len -= end;
        buf.truncate(len.max(READ_BUFFER));
        buf.shrink_to_fit();
        let body = Body {
            conn,
            framing: head.framing,
            buf,
            pos: 0,
            len,
            per_read,
            decoder: Decoder::new(""),
            ended: false,
            read_error: None,
        };
        Ok((head.status, head.retry_after, Box::new(body)))
    }

    /// The blocking watch (through the proxy), read on a thread of its own.
    async fn watch_on_thread(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        opts: &WatchOptions,
    ) -> Result<AsyncWatch> {
        let (opened_tx, opened_rx) = smol::channel::bounded(1);
        let (events_tx, events) = smol::channel::bounded(64);
        let (client, kind, ns, opts) = (self.clone(), *kind, ns.map(str::to_string), opts.clone());
        std::thread::Builder::new()
            .name("watch-proxied".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut stream = match client.watch(&kind, ns.as_deref(), &opts) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = opened_tx.send_blocking(Err(e));
                        return;
                    }
                };
                // The reader gone: closing the stream is all there is to do.
                if opened_tx.send_blocking(Ok(stream.canceller())).is_err() {
                    return;
                }
                for ev in stream.events.by_ref() {
                    if events_tx.send_blocking(ev).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::Transport(format!("cannot start a watch thread: {e}")))?;
        let canceller = opened_rx.recv().await.map_err(|_| Error::Cancelled)??;
        Ok(AsyncWatch {
            source: Source::Thread(ThreadWatch { events, canceller }),
        })
    }
}

/// A blocking watch read on its own thread; dropping it ends the thread's read.
struct ThreadWatch {
    events: smol::channel::Receiver<Item>,
    canceller: WatchCanceller,
}

impl Drop for ThreadWatch {
    fn drop(&mut self) {
        self.canceller.cancel();
    }
}

/// `uri`'s addresses through our resolver (a tls-server-name override, names reused 30 s).
pub(super) fn resolve(uri: &ureq::http::Uri) -> io::Result<Vec<SocketAddr>> {
    use ureq::unversioned::resolver::Resolver as _;
    let timeout = ureq::unversioned::transport::NextTimeout {
        after: ureq::unversioned::transport::time::Duration::from_secs(10),
        reason: ureq::Timeout::Resolve,
        ..Default::default()
    };
    Resolver
        .resolve(uri, &ureq::config::Config::default(), timeout)
        .map(|a| a.to_vec())
        .map_err(|e| io::Error::other(e.to_string()))
}

async fn connect_any(addrs: &[SocketAddr]) -> io::Result<Async<TcpStream>> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
    for a in addrs {
        match Async::<TcpStream>::connect(*a).await {
            Ok(s) => {
                super::direct::keep_alive(s.get_ref())?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `f`, or a timeout error once `d` has passed.
async fn timed<T>(
    d: Duration,
    what: &str,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    within(Instant::now() + d, what, f).await
}

pub(super) async fn within<T>(
    deadline: Instant,
    what: &str,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    future::or(f, async {
        Timer::at(deadline).await;
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("timeout: {what}"),
        ))
    })
    .await
}

enum Conn {
    Plain(Async<TcpStream>),
    Tls(Box<futures_rustls::client::TlsStream<Async<TcpStream>>>),
}

impl Conn {
    /// Wait until a read would find something: bytes on the socket, or plaintext (or the
    /// peer's close) that TLS already holds.
    async fn readable(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.readable().await,
            Conn::Tls(s) => {
                let (tcp, tls) = s.get_mut();
                let state = tls
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if state.plaintext_bytes_to_read() > 0 || state.peer_has_closed() {
                    return Ok(());
                }
                tcp.readable().await
            }
        }
    }

    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf).await,
            Conn::Tls(s) => s.read(buf).await,
        }
    }

    async fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(b).await,
            Conn::Tls(s) => s.write_all(b).await,
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush().await,
            Conn::Tls(s) => s.flush().await,
        }
    }
}

/// The read buffers of the thread's idle streams. A watch drops its buffer while it waits,
/// and most waits are short (an event, then quiet): making a zeroed 4 KiB buffer for every
/// event cost about as much as decrypting it. A few spare buffers per thread (at most
/// `KEPT` x 4 KiB) are kept for the next read instead.
mod spare {
    use super::READ_BUFFER;
    use std::cell::RefCell;

    const KEPT: usize = 4;

    thread_local! {
        static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of at least `READ_BUFFER` bytes (its content is whatever was read last).
    pub(super) fn take() -> Vec<u8> {
        SPARE
            .try_with(|s| s.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| vec![0; READ_BUFFER])
    }

    /// Keep `buf` for the next `take` on this thread, unless enough are kept already.
    pub(super) fn give_back(buf: Vec<u8>) {
        if buf.len() < READ_BUFFER {
            return;
        }
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEPT {
                s.push(buf);
            }
        });
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn buffers_are_reused_and_the_spares_are_bounded() {
            let a = take();
            assert!(a.len() >= READ_BUFFER);
            let at = a.as_ptr();
            give_back(a);
            let b = take();
            assert_eq!(b.as_ptr(), at, "the spare is handed out again");
            give_back(Vec::new());
            for _ in 0..KEPT + 3 {
                give_back(vec![0; READ_BUFFER]);
            }
            assert_eq!(SPARE.with(|s| s.borrow().len()), KEPT);
            SPARE.with(|s| s.borrow_mut().clear());
            drop(b);
        }
    }
}

/// An answer's body as it arrives: `buf[pos..len]` is read and not yet used.
pub(super) struct Body {
    conn: Conn,
    framing: Framing,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    per_read: Duration,
    decoder: Decoder,
    /// The connection ended (closed, or a read failed).
    ended: bool,
    read_error: Option<io::Error>,
}

impl Body {
    /// Read more into the emptied buffer; false at the end of the connection (an error, or
    /// a close the framing did not expect, is kept in `read_error`).
    async fn fill(&mut self) -> bool {
        self.pos = 0;
        self.len = 0;
        if self.ended {
            return false;
        }
        let (conn, buf) = (&mut self.conn, &mut self.buf);
        let read = timed(self.per_read, "per read", async {
            loop {
                if buf.len() < READ_BUFFER {
                    *buf = spare::take();
                }
                // A read that finds something at once (a busy stream) keeps its buffer...
                if let Some(res) = future::poll_once(conn.read(buf)).await {
                    return res;
                }
                // ...and a watch with nothing to read waits without one.
                spare::give_back(std::mem::take(buf));
                conn.readable().await?;
            }
        });
        match read.await {
            Ok(0) => {
                self.ended = true;
                if self.framing == Framing::Close {
                    self.framing = Framing::Done;
                } else {
                    self.read_error = Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection inside the body",
                    ));
                }
                false
            }
            Ok(n) => {
                self.len = n;
                // Let the other watches' tasks run between reads of a busy stream.
                future::yield_now().await;
                true
            }
            Err(e) => {
                self.ended = true;
                self.read_error = Some(e);
                false
            }
        }
    }

    async fn next_event(&mut self) -> Option<Item> {
        loop {
            while self.pos < self.len {
                let (skip, n) = match self.framing.advance(&self.buf[self.pos..self.len]) {
                    Ok(step) => step,
                    Err(e) => {
                        self.ended = true;
                        self.len = 0;
                        self.read_error = Some(e);
                        return None;
                    }
                };
                self.pos += skip;
                if n == 0 {
                    break;
                }
                let (used, item) = self.decoder.push(&self.buf[self.pos..self.pos + n]);
                self.pos += used;
                self.framing.consumed(used);
                if item.is_some() {
                    return item;
                }
            }
            if self.framing.done() {
                // A last line without a newline, once.
                return self.decoder.finish();
            }
            if !self.fill().await && !self.framing.done() {
                return None;
            }
        }
    }

    /// The rest of the body, up to `limit` bytes.
    async fn read_to_end(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            while self.pos < self.len && out.len() < limit {
                let (skip, n) = self.framing.advance(&self.buf[self.pos..self.len])?;
                self.pos += skip;
                if n == 0 {
                    break;
                }
                let take = n.min(limit - out.len());
                out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
                self.pos += take;
                self.framing.consumed(take);
            }
            if self.framing.done() || out.len() >= limit {
                return Ok(out);
            }
            if !self.fill().await && !self.framing.done() {
                return match self.read_error.take() {
                    Some(e) => Err(e),
                    None => Ok(out),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kubeconfig::RestConfig;
    use crate::api::resources::CONFIGMAPS;
    use crate::api::watch::EventType;
    use crate::sandbox::{Sandbox, SandboxOptions};
    use serde_json::json;

    fn cm(n: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})
    }

    #[test]
    fn watch_connections_keep_alive_as_the_others() {
        use rustix::net::sockopt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = l.local_addr().expect("address");
        let s = futures_lite::future::block_on(connect_any(&[addr])).expect("connect");
        assert!(sockopt::socket_keepalive(s.get_ref()).expect("keepalive"));
        assert_eq!(
            sockopt::tcp_keepidle(s.get_ref()).expect("idle"),
            super::super::direct::KEEPALIVE_IDLE
        );
        assert_eq!(
            sockopt::tcp_keepcnt(s.get_ref()).expect("probes"),
            super::super::direct::KEEPALIVE_PROBES
        );
    }

    #[test]
    fn events_arrive_and_the_stream_ends_with_the_server_timeout() {
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let c = sb.client("stream-test");
        c.create(&CONFIGMAPS, Some("default"), &cm("a"))
            .expect("create");
        let opts = WatchOptions {
            timeout_seconds: 2,
            allow_bookmarks: true,
            ..Default::default()
        };
        let c2 = c.clone();
        let got = futures_lite::future::block_on(async move {
            let mut w = c2
                .watch_async(&CONFIGMAPS, Some("default"), &opts)
                .await
                .expect("watch");
            let first = w.next().await;
            std::thread::spawn(move || {
                c.create(&CONFIGMAPS, Some("default"), &cm("b"))
                    .expect("create");
            });
            let mut rest = Vec::new();
            while let Some(ev) = w.next().await {
                rest.push(ev);
            }
            (first, rest, w.take_read_error())
        });
        let (first, rest, err) = got;
        let first = first.expect("an event").expect("not an error");
        assert_eq!(first.kind, EventType::Added);
        assert_eq!(first.object["metadata"]["name"], "a");
        assert!(
            rest.iter().any(|e| e
                .as_ref()
                .is_ok_and(|e| e.kind == EventType::Added && e.object["metadata"]["name"] == "b")),
            "{rest:?}"
        );
        assert!(err.is_none(), "{err:?}");
    }

    #[test]
    fn refusals_are_the_errors_of_the_blocking_watch() {
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let c = sb.client("stream-test");
        let open = |opts: WatchOptions| {
            let c = c.clone();
            futures_lite::future::block_on(async move {
                match c.watch_async(&CONFIGMAPS, None, &opts).await {
                    Ok(mut w) => w.next().await.map(|r| r.map(|_| ())),
                    Err(e) => Some(Err(e)),
                }
            })
        };
        let f = sb.faults();
        for (code, retry) in [(403, None), (429, Some(Duration::from_secs(1)))] {
            f.fail_next(1, code, Some("watch=true"));
            let started = Instant::now();
            match open(WatchOptions::default()) {
                Some(Err(Error::Api {
                    code: got,
                    retry_after,
                    ..
                })) => assert_eq!((got, retry_after), (code, retry)),
                other => panic!("{code}: {other:?}"),
            }
            // Answered with a length on a kept-alive connection: not read until it closes.
            assert!(started.elapsed() < Duration::from_secs(5));
        }
        // A resourceVersion whose history is gone: the ERROR event's 410.
        f.expire_history();
        let gone = open(WatchOptions {
            resource_version: "1".into(),
            ..Default::default()
        });
        assert!(matches!(&gone, Some(Err(e)) if e.is_gone()), "{gone:?}");
    }

    #[test]
    fn a_refused_token_is_asked_for_again_once() {
        struct Tokens(std::sync::Mutex<Vec<&'static str>>);
        impl super::super::TokenSource for Tokens {
            fn token(&self) -> Result<String> {
                let t = self.0.lock().unwrap();
                Ok(t.last().copied().unwrap_or_default().to_string())
            }
            fn invalidate(&self) {
                self.0.lock().unwrap().pop();
            }
        }
        let sb = Sandbox::start(SandboxOptions {
            require_auth: true,
            ..Default::default()
        })
        .expect("sandbox");
        let cfg = RestConfig {
            server: sb.url(),
            source: "test".into(),
            ..Default::default()
        };
        let tokens = std::sync::Arc::new(Tokens(std::sync::Mutex::new(vec![
            "sandbox-admin",
            "stale",
        ])));
        let c =
            Client::with_token_source(&cfg, 0.0, 1, "stream-test", tokens.clone()).expect("client");
        let opts = WatchOptions {
            timeout_seconds: 1,
            ..Default::default()
        };
        let res = futures_lite::future::block_on(async move {
            let mut w = c.watch_async(&CONFIGMAPS, None, &opts).await?;
            while w.next().await.is_some() {}
            Ok::<_, Error>(())
        });
        assert!(res.is_ok(), "{res:?}");
        assert_eq!(*tokens.0.lock().unwrap(), ["sandbox-admin"]);
        let auths: Vec<_> = sb
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("watch=true"))
            .map(|r| (r.token, r.status))
            .collect();
        assert_eq!(
            auths,
            [
                (Some("stale".to_string()), 401),
                (Some("sandbox-admin".to_string()), 200)
            ]
        );
    }
}
