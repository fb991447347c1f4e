//! The connection of a request that no proxy stands in front of: TCP, with TLS on it for an
//! https server, as one ureq transport.
//!
//! ureq's own TCP transport under a TLS transport costs system calls that add up at a
//! controller's request rate: TLS output goes to the socket as it is made, so a request's
//! head and its body are two writes and two TCP segments (and anything over the TCP
//! transport's 4 KiB buffer more); every check that a pooled connection is still open (ureq
//! makes two per request) switches the socket to non-blocking and back around a read; and a
//! request's timeout is set on the socket again before every read and write. Here a request
//! is encrypted as it is handed over and sent in one `writev` when its answer is awaited, the
//! check is one `recv` that peeks without waiting, a timeout is set on the socket only when it
//! moves by more than a second, and the socket is read 8 KiB at a time into a buffer of the
//! connection's own (rustls asks for 4 KiB at most), in place of the TCP transport's buffers.
//!
//! Behind a proxy (`HTTPS_PROXY` and the others), ureq's connectors make the tunnel and
//! `api::tls` puts TLS on it as before.

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};

/// What is read from the socket at once, at most: most answers in one read (a TLS record is
/// at most 16 KiB and some bytes).
const READ_AHEAD: usize = 8 * 1024;
/// Encrypted bytes held back for the request's next part before they are sent anyway.
const HOLD_AT_MOST: usize = 16 * 1024;

/// TCP (and TLS for https) to the resolved address, unless an earlier connector (a proxy's)
/// made the connection already.
#[derive(Debug)]
pub(crate) struct DirectConnector(pub(crate) Arc<OnceLock<Arc<ClientConfig>>>);

impl<In: Transport> Connector<In> for DirectConnector {
    type Out = Either<In, Direct>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(c) = chained {
            return Ok(Some(Either::A(c)));
        }
        let tls = match details.needs_tls() {
            true => Some(client_connection(&self.0, details)?),
            false => None,
        };
        let stream = Arc::new(connect_tcp(details)?);
        (details.register_shutdown)(Arc::downgrade(&stream) as Weak<dyn ShutdownHandle>)?;
        let mut sock = Sock {
            stream,
            read_timeout: None,
            write_timeout: None,
            ahead: Vec::new(),
            ahead_at: 0,
            ahead_end: 0,
        };
        let mut tls = tls;
        if let Some(conn) = &mut tls {
            // The connect timeout counts from the start of the connection, TCP included.
            let timeout = remaining(details);
            sock.set_read_timeout(timeout)?;
            sock.set_write_timeout(timeout)?;
            conn.complete_io(&mut sock)
                .map_err(|e| io_error(e, details.timeout))?;
        }
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(Direct {
            sock,
            tls,
            held: 0,
            buffers,
        })))
    }
}

fn client_connection(
    config: &OnceLock<Arc<ClientConfig>>,
    details: &ConnectionDetails,
) -> Result<ClientConnection, ureq::Error> {
    let config = config
        .get()
        .ok_or(ureq::Error::Tls("no TLS configuration for an https URL"))?
        .clone();
    let host = details
        .uri
        .authority()
        .ok_or(ureq::Error::Tls("https URL without a host"))?
        .host();
    // IPv6 literals come bracketed.
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let name = ServerName::try_from(bare)
        .map_err(|_| ureq::Error::Tls("invalid server name for TLS"))?
        .to_owned();
    Ok(ClientConnection::new(config, name)?)
}

/// What is left of the connect timeout (None: none set).
fn remaining(details: &ConnectionDetails) -> Option<Duration> {
    use ureq::unversioned::transport::time::{Duration as D, Instant as I};
    let mut t = details.timeout;
    if let (D::Exact(after), I::Exact(now), I::Exact(start)) =
        (t.after, (details.current_time)(), details.now)
    {
        t.after = D::Exact(after.saturating_sub(now.saturating_duration_since(start)));
    }
    t.not_zero().map(|d| *d)
}

/// The addresses in turn, each with its share of the connect timeout (the first half of it,
/// the next a quarter, ...; ureq's split), the first that answers kept.
fn connect_tcp(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    let total = details.timeout.not_zero().map(|d| *d);
    let n = details.addrs.len() as i32;
    let weights = 2.0 * (1.0 - 0.5_f64.powi(n));
    let mut weight = 1.0_f64;
    let mut last: Option<ureq::Error> = None;
    for addr in details.addrs.iter() {
        let per_addr = total.map(|t| {
            Duration::from_secs_f64(t.as_secs_f64() * weight / weights)
                .max(Duration::from_millis(10))
        });
        match connect_one(*addr, per_addr) {
            Ok(s) => {
                if details.config.no_delay() {
                    s.set_nodelay(true)?;
                }
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                last = Some(ureq::Error::Timeout(details.timeout.reason));
            }
            Err(e) if addr_specific(&e) => last = Some(e.into()),
            Err(e) => return Err(e.into()),
        }
        weight /= 2.0;
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::ConnectionRefused, "Connection refused").into()
    }))
}

fn connect_one(addr: SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
    match timeout {
        Some(t) => TcpStream::connect_timeout(&addr, t),
        None => TcpStream::connect(addr),
    }
}

fn addr_specific(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
    )
}

/// An I/O error as ureq reports it: a socket timeout as the timeout it was set for.
fn io_error(e: io::Error, timeout: NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ureq::Error::Timeout(timeout.reason),
        _ => e.into(),
    }
}

/// The socket, with the timeouts set on it and what was read ahead of rustls.
struct Sock {
    stream: Arc<TcpStream>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Bytes read ahead of rustls: `ahead[ahead_at..ahead_end]` (allocated at the first read).
    ahead: Vec<u8>,
    ahead_at: usize,
    ahead_end: usize,
}

/// The timeout to set on the socket for `want`, or None to keep `set`: whole seconds, moved
/// only when `want` is longer than what is set or shorter by more than a second.
fn timeout_change(set: Option<Duration>, want: Option<Duration>) -> Option<Option<Duration>> {
    let want = want.map(|d| Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)));
    match (set, want) {
        (None, None) => None,
        (Some(s), Some(w)) if s >= w && s - w <= Duration::from_secs(1) => None,
        (_, w) => Some(w.map(|d| d.max(Duration::from_secs(1)))),
    }
}

impl Sock {
    fn set_read_timeout(&mut self, want: Option<Duration>) -> io::Result<()> {
        if let Some(t) = timeout_change(self.read_timeout, want) {
            self.stream.set_read_timeout(t)?;
            self.read_timeout = t;
        }
        Ok(())
    }

    fn set_write_timeout(&mut self, want: Option<Duration>) -> io::Result<()> {
        if let Some(t) = timeout_change(self.write_timeout, want) {
            self.stream.set_write_timeout(t)?;
            self.write_timeout = t;
        }
        Ok(())
    }

    fn buffered(&self) -> bool {
        self.ahead_at < self.ahead_end
    }

    /// Open and idle: nothing unread, and a read would wait (one `recv` that peeks without
    /// waiting). Bytes the server sent after an answer, or its end of the connection closed,
    /// make it unfit for another request.
    fn idle_open(&self) -> bool {
        use rustix::net::{recv, RecvFlags};
        if self.buffered() {
            return false;
        }
        let mut one = [0u8; 1];
        match recv(
            &*self.stream,
            &mut one,
            RecvFlags::PEEK | RecvFlags::DONTWAIT,
        ) {
            Err(e) => e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::AGAIN,
            Ok(_) => false,
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.buffered() {
            if buf.len() >= READ_AHEAD {
                return read_retrying(&self.stream, buf);
            }
            if self.ahead.is_empty() {
                self.ahead = vec![0; READ_AHEAD];
            }
            self.ahead_end = read_retrying(&self.stream, &mut self.ahead)?;
            self.ahead_at = 0;
        }
        let rest = &self.ahead[self.ahead_at..self.ahead_end];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.ahead_at += n;
        Ok(n)
    }
}

fn read_retrying(mut s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.stream).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        (&*self.stream).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection made by `DirectConnector`.
pub(crate) struct Direct {
    sock: Sock,
    tls: Option<ClientConnection>,
    /// Plaintext encrypted but not sent yet.
    held: usize,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("peer", &self.sock.stream.peer_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Direct {
    /// Send what TLS holds.
    fn send_held(&mut self) -> io::Result<()> {
        if let Some(conn) = &mut self.tls {
            while conn.wants_write() {
                if conn.write_tls(&mut self.sock)? == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
            }
        }
        self.held = 0;
        Ok(())
    }
}

impl Transport for Direct {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let t = timeout.for_write();
        if self.tls.is_none() {
            self.sock.set_write_timeout(t.not_zero().map(|d| *d))?;
            let out = &self.buffers.output()[..amount];
            return (&*self.sock.stream)
                .write_all(out)
                .map_err(|e| io_error(e, t));
        }
        // Encrypted now, sent with the rest of the request when its answer is awaited (or
        // once too much is held).
        let mut at = 0;
        while at < amount {
            let n = match &mut self.tls {
                Some(conn) => conn
                    .writer()
                    .write(&self.buffers.output()[at..amount])
                    .map_err(|e| io_error(e, t))?,
                None => 0,
            };
            at += n;
            self.held += n;
            if n == 0 || self.held >= HOLD_AT_MOST {
                self.send_held_for(t)?;
            }
        }
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        if self.held > 0 || self.tls.as_ref().is_some_and(|c| c.wants_write()) {
            self.send_held_for(timeout.for_write())?;
        }
        let t = timeout.for_read();
        self.sock.set_read_timeout(t.not_zero().map(|d| *d))?;
        let input = self.buffers.input_append_buf();
        let n = match &mut self.tls {
            None => self.sock.read(input).map_err(|e| io_error(e, t))?,
            Some(conn) => loop {
                match conn.reader().read(input) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io_error(e, t)),
                }
                // No plaintext yet: read more of the connection.
                if conn.read_tls(&mut self.sock).map_err(|e| io_error(e, t))? == 0 {
                    // The server closed without close_notify: the reader says so next.
                    conn.process_new_packets()
                        .map_err(|e| io_error(io::Error::new(io::ErrorKind::InvalidData, e), t))?;
                    match conn.reader().read(input) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                        Err(e) => return Err(io_error(e, t)),
                    }
                }
                if let Err(e) = conn.process_new_packets() {
                    // An alert describing the failure, when there is one, as a last word.
                    let _ = conn.write_tls(&mut self.sock);
                    return Err(io_error(io::Error::new(io::ErrorKind::InvalidData, e), t));
                }
                // Whatever TLS wants to answer (a key update) goes out at once.
                while conn.wants_write() {
                    conn.write_tls(&mut self.sock).map_err(|e| io_error(e, t))?;
                }
            },
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        if self.held > 0 {
            return false;
        }
        if let Some(conn) = &mut self.tls {
            // What was read ahead of rustls goes to it first: a TLS message that is no data
            // (a session ticket) leaves the connection fit; data or a close does not.
            while self.sock.buffered() {
                if conn.read_tls(&mut self.sock).is_err() {
                    return false;
                }
            }
            match conn.process_new_packets() {
                Ok(s) if s.plaintext_bytes_to_read() == 0 && !s.peer_has_closed() => {}
                _ => return false,
            }
        }
        self.sock.idle_open()
    }

    fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

impl Direct {
    fn send_held_for(&mut self, t: NextTimeout) -> Result<(), ureq::Error> {
        self.sock.set_write_timeout(t.not_zero().map(|d| *d))?;
        self.send_held().map_err(|e| io_error(e, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    #[test]
    fn socket_timeouts_move_only_by_more_than_a_second() {
        // First set, rounded up to whole seconds.
        assert_eq!(
            timeout_change(None, Some(Duration::from_millis(29_500))),
            Some(s(30))
        );
        // A request's countdown within the second set: kept.
        assert_eq!(
            timeout_change(s(30), Some(Duration::from_millis(29_990))),
            None
        );
        assert_eq!(timeout_change(s(30), s(30)), None);
        assert_eq!(
            timeout_change(s(30), Some(Duration::from_millis(28_100))),
            None
        );
        // Shorter by more than a second: set again.
        assert_eq!(
            timeout_change(s(30), Some(Duration::from_millis(27_500))),
            Some(s(28))
        );
        // Longer: always set again (a read must not time out early).
        assert_eq!(timeout_change(s(28), s(30)), Some(s(30)));
        // Under a second: one second, the least a socket timeout is set to here.
        assert_eq!(
            timeout_change(None, Some(Duration::from_millis(3))),
            Some(s(1))
        );
        assert_eq!(timeout_change(s(1), Some(Duration::from_millis(3))), None);
        // None clears what is set, and stays cleared.
        assert_eq!(timeout_change(s(30), None), Some(None));
        assert_eq!(timeout_change(None, None), None);
    }
}
