//! Serving connections: the accept loop, one thread per connection reading requests and
//! writing answers (faults, authentication and the request log applied here), and watch
//! streams.

use std::io::{self, BufReader};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::faults::fault_reply;
use super::rest::{self, Reply, WatchPlan};
use super::{http, lock, meta, store, RequestRecord, Shared};

/// The accept thread of one listener and its stop flag.
pub(super) struct ListenerCtl {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) handle: thread::JoinHandle<()>,
}

impl Shared {
    pub(super) fn shutdown_connections(&self) {
        for (_, c) in lock(&self.conns).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

pub(super) fn spawn_listener(
    shared: Arc<Shared>,
    listener: TcpListener,
) -> io::Result<ListenerCtl> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = thread::Builder::new()
        .name("sandbox-accept".into())
        .spawn(move || accept_loop(shared, listener, stop2))?;
    Ok(ListenerCtl { stop, handle })
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        if let Ok(c) = stream.try_clone() {
            lock(&shared.conns).insert(id, c);
        }
        let sh = shared.clone();
        let spawned = thread::Builder::new()
            .name("sandbox-conn".into())
            .spawn(move || {
                let _ = serve_connection(&sh, stream);
                lock(&sh.conns).remove(&id);
            });
        if spawned.is_err() {
            if let Some(c) = lock(&shared.conns).remove(&id) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

/// The request log keeps at most this many records (the oldest half goes when it is full).
const MAX_RECORDS: usize = 200_000;

fn push_record(shared: &Shared, record: RequestRecord) {
    let mut log = lock(&shared.requests);
    if log.len() >= MAX_RECORDS {
        log.drain(..MAX_RECORDS / 2);
    }
    log.push(record);
}

fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version")
}

fn serve_connection(shared: &Shared, stream: TcpStream) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let req = match http::read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let body = meta::ApiError::bad_request(e.to_string()).to_status();
                let _ = http::write_response(
                    &mut out,
                    400,
                    "application/json",
                    &[],
                    body.to_string().as_bytes(),
                    true,
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let read_at = Instant::now();
        if !shared.wait_unpaused() {
            return Ok(());
        }
        let token = req.bearer();
        let mut record = RequestRecord {
            method: req.method.clone(),
            path: req.target.clone(),
            user_agent: req.header("user-agent").map(str::to_string),
            token: token.clone(),
            content_type: req.header("content-type").map(str::to_string),
            status: 0,
            user: None,
            at: read_at,
        };
        let user = token.as_deref().and_then(|t| shared.authenticate(t));
        record.user = user.clone();
        let fault = shared.take_fault(&req.method, &req.target);
        if fault == Some(0) {
            // Carried out, never answered.
            let _ = rest::handle(shared, &req);
            record.status = 0;
            push_record(shared, record);
            let _ = out.shutdown(Shutdown::Both);
            return Ok(());
        }
        let (reply, headers) = if let Some(code) = fault {
            let (c, v, h) = fault_reply(code);
            (Reply::Json(c, v), h)
        } else if shared.opts.require_auth
            && user.is_none()
            && (token.is_some() || !is_public_path(&req.path))
        {
            // As kube-apiserver: a token that does not authenticate is refused everywhere;
            // only a request without one may read the public paths.
            let e = meta::ApiError::new(401, "Unauthorized", "Unauthorized");
            (Reply::Json(401, e.to_status()), Vec::new())
        } else {
            (rest::handle(shared, &req), Vec::new())
        };
        match reply {
            Reply::Json(code, v) => {
                record.status = code;
                push_record(shared, record);
                let body = serde_json::to_vec(&v).unwrap_or_default();
                http::write_response(
                    &mut out,
                    code,
                    "application/json",
                    &headers,
                    &body,
                    req.close,
                )?;
            }
            Reply::Bytes(code, ct, body) => {
                record.status = code;
                push_record(shared, record);
                http::write_response(&mut out, code, ct, &headers, &body, req.close)?;
            }
            Reply::Watch(plan) => {
                record.status = 200;
                push_record(shared, record);
                if !serve_watch(shared, &mut out, *plan)? {
                    let _ = out.shutdown(Shutdown::Both);
                    return Ok(());
                }
            }
        }
        if req.close {
            return Ok(());
        }
    }
}

/// Stream a watch. `Ok(true)` when it ended cleanly and the connection may be reused.
fn serve_watch(shared: &Shared, out: &mut TcpStream, plan: WatchPlan) -> io::Result<bool> {
    http::write_chunked_head(out, "application/json")?;
    if let Some(status) = &plan.error {
        let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
        let _ = serde_json::to_writer(&mut line, status);
        line.extend_from_slice(b"}\n");
        http::write_chunk(out, &line)?;
        http::write_last_chunk(out)?;
        return Ok(true);
    }
    let Some(rx) = plan.rx.as_ref() else {
        http::write_last_chunk(out)?;
        return Ok(true);
    };
    let deliver = |out: &mut TcpStream, ev: &store::Event| -> io::Result<bool> {
        if let Some(typ) = plan.translate(ev) {
            if !shared.wait_unpaused() {
                return Ok(false);
            }
            http::write_chunk(out, &plan.encode(typ, &ev.obj))?;
        }
        Ok(true)
    };
    for ev in &plan.initial {
        if !deliver(out, ev)? {
            return Ok(false);
        }
    }
    let interval = shared.opts.bookmark_interval.max(Duration::from_millis(10));
    let deadline = plan.timeout.map(|t| Instant::now() + t);
    let mut next_bookmark = Instant::now() + interval;
    loop {
        if shared.stopped.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            http::write_last_chunk(out)?;
            return Ok(true);
        }
        let mut wait = Duration::from_millis(100);
        if let Some(d) = deadline {
            wait = wait.min(d - now);
        }
        if plan.bookmarks {
            wait = wait.min(next_bookmark.saturating_duration_since(now));
        }
        match rx.recv_timeout(wait) {
            Ok(ev) => {
                if !deliver(out, &ev)? {
                    return Ok(false);
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if plan.bookmarks && Instant::now() >= next_bookmark && !shared.paused() {
                    // Everything committed up to `rv` is either delivered or drained here.
                    let (rv, pending) = {
                        let st = shared.lock_state();
                        let pending: Vec<_> = rx.try_iter().collect();
                        (st.rv, pending)
                    };
                    for ev in &pending {
                        if !deliver(out, ev)? {
                            return Ok(false);
                        }
                    }
                    http::write_chunk(out, &plan.bookmark(rv))?;
                    next_bookmark = Instant::now() + interval;
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                let _ = http::write_last_chunk(out);
                return Ok(false);
            }
        }
    }
}
