//! Connections: accepting them into a bounded table, the TLS handshake and request head under
//! one deadline, the answer, and the drain before closing.
//!
//! Everything here runs on the serving thread's local executor, so the table is a `RefCell`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::{Async, Timer};
use futures_lite::{future, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsAcceptor;

use super::http::{
    check_body, encode_response, parse_head, read_body, read_head_and_rest, Head, Response,
};
use super::{App, Limits};

/// After answering, how long and how much unread client input is drained before closing.
const LINGER_TIME: Duration = Duration::from_secs(1);
pub(super) const LINGER_BYTES: usize = 256 * 1024;

/// The connections being served. Those still waiting for their request head are kept in
/// arrival order with a way to end them: when the table is full, the one that has waited
/// longest is dropped to make room, so idle or slow connections cannot lock out a health
/// probe. A connection past its head (running its handler, writing, draining) is never
/// dropped; if all are, a new connection is closed at once.
#[derive(Default)]
struct Table {
    open: usize,
    next_id: u64,
    waiting: BTreeMap<u64, smol::channel::Sender<()>>,
}

/// A connection's place in the table; leaving it when dropped.
struct Slot {
    table: Rc<RefCell<Table>>,
    id: u64,
}

impl Slot {
    /// The head has arrived: no longer one to drop for room.
    fn busy(&self) {
        self.table.borrow_mut().waiting.remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.borrow_mut();
        t.open -= 1;
        t.waiting.remove(&self.id);
    }
}

pub(super) async fn accept_loop(
    ex: &smol::LocalExecutor<'_>,
    listener: Async<TcpListener>,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    limits: Limits,
    stop_rx: smol::channel::Receiver<()>,
) {
    let table = Rc::new(RefCell::new(Table::default()));
    loop {
        let next = future::or(async { Some(listener.accept().await) }, async {
            let _ = stop_rx.recv().await;
            None
        })
        .await;
        let (stream, peer) = match next {
            None => return,
            Some(Ok(accepted)) => accepted,
            Some(Err(e)) => {
                // E.g. out of file descriptors: back off instead of spinning.
                log::warn!("accept failed: {e}");
                Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        let deadline = Instant::now() + limits.head_timeout;
        let (evict_tx, evict_rx) = smol::channel::bounded::<()>(1);
        let slot = {
            let mut t = table.borrow_mut();
            if t.open >= limits.max_connections {
                match t.waiting.pop_first() {
                    Some((_, oldest)) => {
                        let _ = oldest.try_send(());
                    }
                    None => {
                        log::debug!("connection from {peer} closed: every connection is busy");
                        continue;
                    }
                }
            }
            t.open += 1;
            t.next_id += 1;
            let id = t.next_id;
            t.waiting.insert(id, evict_tx);
            Slot {
                table: table.clone(),
                id,
            }
        };
        let (tls, app) = (tls.clone(), app.clone());
        ex.spawn(async move {
            let evicted = async {
                match evict_rx.recv().await {
                    Ok(()) => Err(std::io::Error::other("dropped to make room")),
                    // Out of the table's waiting list: never evicted.
                    Err(_) => future::pending().await,
                }
            };
            let served = serve_connection(stream, tls, app, limits, deadline, &slot);
            if let Err(e) = future::or(served, evicted).await {
                log::debug!("connection from {peer}: {e}");
            }
            drop(slot);
        })
        .detach();
    }
}

async fn until<T>(
    what: &str,
    deadline: Instant,
    fut: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    future::or(fut, async {
        Timer::at(deadline).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} timed out"),
        ))
    })
    .await
}

async fn serve_connection(
    stream: Async<TcpStream>,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    limits: Limits,
    deadline: Instant,
    slot: &Slot,
) -> std::io::Result<()> {
    // Nothing is set up for a connection before its client sends something: a silent one
    // costs a socket and this small future, not the TLS state and buffers (about 7 KiB).
    until("waiting for the client", deadline, stream.readable()).await?;
    Box::pin(serve_ready(stream, tls, app, limits, deadline, slot)).await
}

async fn serve_ready(
    stream: Async<TcpStream>,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    limits: Limits,
    deadline: Instant,
    slot: &Slot,
) -> std::io::Result<()> {
    match tls {
        None => {
            let mut stream = stream;
            exchange(&mut stream, Vec::new(), app, limits, deadline, slot).await?;
            linger(stream).await;
        }
        Some(acceptor) => {
            let mut stream = until("TLS handshake", deadline, acceptor.accept(stream)).await?;
            let peer_certs = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|certs| certs.iter().map(|c| c.to_vec()).collect())
                .unwrap_or_default();
            exchange(&mut stream, peer_certs, app, limits, deadline, slot).await?;
            linger(stream.into_inner().0).await;
        }
    }
    Ok(())
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    peer_certs: Vec<Vec<u8>>,
    app: Arc<App>,
    limits: Limits,
    deadline: Instant,
    slot: &Slot,
) -> std::io::Result<()> {
    let (head, rest) = until(
        "reading request",
        deadline,
        read_head_and_rest(&mut s, limits.max_head_bytes),
    )
    .await?;
    slot.busy();
    let (resp, head_only) = match head {
        Head::Closed => return Ok(()),
        Head::TooLarge => (
            Response::error(431, "431 Request Header Fields Too Large"),
            false,
        ),
        Head::Complete(raw) => match parse_head(&raw, limits.max_headers)
            .and_then(|req| check_body(&req, limits.max_body_bytes).map(|()| req))
        {
            Err(refusal) => (refusal, false),
            Ok(mut req) => {
                req.peer_certs = peer_certs;
                let head_only = req.method == "HEAD";
                let resp = if app.reads_body(&req.path) {
                    with_body(&mut s, req, rest, app, limits).await?
                } else {
                    smol::unblock(move || app.dispatch(&req)).await
                };
                (resp, head_only)
            }
        },
    };
    let bytes = encode_response(&resp, head_only);
    let write_deadline = Instant::now() + limits.write_timeout;
    until("writing response", write_deadline, async {
        s.write_all(&bytes).await?;
        s.flush().await?;
        s.close().await
    })
    .await
}

/// The answer of a route that reads the body: the filter first, then the body (a
/// `100 Continue` first if the client waits for one), then the route.
async fn with_body<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    req: super::Request,
    rest: Vec<u8>,
    app: Arc<App>,
    limits: Limits,
) -> std::io::Result<Response> {
    let app2 = app.clone();
    let (mut req, refused) = smol::unblock(move || {
        let refused = app2.filter(&req);
        (req, refused)
    })
    .await;
    if let Some(refused) = refused {
        return Ok(refused);
    }
    let deadline = Instant::now() + limits.head_timeout;
    if req
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        until("writing 100 Continue", deadline, async {
            s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            s.flush().await
        })
        .await?;
    }
    let max = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    match until(
        "reading request body",
        deadline,
        read_body(s, &req, rest, max),
    )
    .await?
    {
        Ok(body) => {
            req.body = body;
            Ok(smol::unblock(move || app.route(&req)).await)
        }
        Err(refused) => Ok(refused),
    }
}

/// Half-close, then read and discard what the client still sends (an ignored body, the rest
/// of an oversized head) until it closes: closing with unread input makes the kernel answer
/// with a reset, which can destroy the response before the client has read it.
async fn linger(tcp: Async<TcpStream>) {
    let _ = tcp.get_ref().shutdown(std::net::Shutdown::Write);
    let mut tcp = tcp;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    future::or(drain, async {
        Timer::after(LINGER_TIME).await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_connection_costs_a_small_future() {
        let table = Rc::new(RefCell::new(Table::default()));
        table.borrow_mut().open = 1;
        let slot = Slot { table, id: 1 };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let stream = Async::new(listener.accept().unwrap().0).unwrap();
        let app = Arc::new(App {
            health: super::super::Health::new(),
            routes: Default::default(),
            body_routes: Default::default(),
            trees: Vec::new(),
            filter: None,
        });
        let f = serve_connection(stream, None, app, Limits::default(), Instant::now(), &slot);
        // The TLS state and buffers come in a box once the client sends something.
        assert!(
            std::mem::size_of_val(&f) <= 1024,
            "{}",
            std::mem::size_of_val(&f)
        );
    }
}
