//! A connection of the client's own requests (`api::client::exchange`): TCP, with TLS on it
//! for an https server.
//!
//! Under ureq, a request over TLS cost system calls that add up at a controller's request
//! rate: TLS output went to the socket as it was made, so a request's head and its body were
//! two writes and two TCP segments (and more for anything over the TCP transport's 4 KiB
//! buffer); every check that a pooled connection was still open (two per request) switched
//! the socket to non-blocking and back around a read; and the request's timeout was set on
//! the socket again before every read and write. Here a request is encrypted whole and sent
//! in one `writev`, the check is one `recv` that peeks without waiting, a timeout is set on
//! the socket only when it moves by more than a second, and the socket is read 8 KiB at a
//! time into a buffer of the connection's own (rustls asks for 4 KiB at most).

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// What is read from the socket at once, at most: most answers in one read (a TLS record is
/// at most 16 KiB and some bytes).
const READ_AHEAD: usize = 8 * 1024;
/// A large request is encrypted and sent in pieces of this much (rustls holds 64 KiB of
/// encrypted output at most).
const SEND_PIECE: usize = 16 * 1024;

/// The addresses in turn, each with its share of the connect timeout (the first half of it,
/// the next a quarter, ...; ureq's split), the first that answers kept. A timeout is an error
/// of kind `TimedOut`.
fn connect_addrs(addrs: &[SocketAddr], total: Duration) -> io::Result<TcpStream> {
    let n = addrs.len() as i32;
    let weights = 2.0 * (1.0 - 0.5_f64.powi(n));
    let mut weight = 1.0_f64;
    let mut last: Option<io::Error> = None;
    for addr in addrs {
        let per_addr = Duration::from_secs_f64(total.as_secs_f64() * weight / weights)
            .max(Duration::from_millis(10));
        match TcpStream::connect_timeout(addr, per_addr) {
            Ok(s) => {
                s.set_nodelay(true)?;
                // Closing the connection drops what the kernel has not yet delivered: a
                // request given up on (timed out, or the process exiting after it lost its
                // lease) cannot reach the server later, when a dead link comes back.
                rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO))?;
                keep_alive(&s)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut || addr_specific(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
        weight /= 2.0;
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::ConnectionRefused, "Connection refused")))
}

/// A connection that has received nothing for `KEEPALIVE_IDLE` is probed every
/// `KEEPALIVE_INTERVAL`; after `KEEPALIVE_PROBES` unanswered probes the kernel ends it.
pub(super) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub(super) const KEEPALIVE_PROBES: u32 = 3;

/// TCP keepalive on an API connection, so that one whose link went dark without a reset (a
/// blackhole: no FIN, no RST, nothing) ends with an error within 45 s of its last packet
/// (`KEEPALIVE_IDLE` + `KEEPALIVE_PROBES` x `KEEPALIVE_INTERVAL`), as client-go's HTTP/2
/// health check (a ping after 30 s of silence, given 15 s) ends its connection. A watch
/// waits on its connection for minutes (timeoutSeconds plus 30 s per read): without this,
/// a watch whose link dropped would stay silent that long, and a link that came back would
/// bring its events only at the server's next retransmission.
pub(super) fn keep_alive(s: &TcpStream) -> io::Result<()> {
    use rustix::net::sockopt;
    sockopt::set_socket_keepalive(s, true)?;
    sockopt::set_tcp_keepidle(s, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(s, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(s, KEEPALIVE_PROBES)?;
    Ok(())
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

/// The socket, with the timeouts set on it and what was read ahead of rustls.
struct Sock {
    stream: TcpStream,
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
            &self.stream,
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
        (&self.stream).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        (&self.stream).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection of the client's own requests (`api::client::exchange`).
pub(crate) struct Direct {
    sock: Sock,
    tls: Option<ClientConnection>,
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
    /// Connect to the first of `addrs` that answers, with TLS to `server_name` when `tls` is
    /// given, all within `timeout`.
    pub(crate) fn open(
        addrs: &[SocketAddr],
        tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
        timeout: Duration,
    ) -> io::Result<Direct> {
        let started = std::time::Instant::now();
        let mut tls = match tls {
            Some((config, name)) => {
                Some(ClientConnection::new(config, name).map_err(io::Error::other)?)
            }
            None => None,
        };
        let mut sock = Sock {
            stream: connect_addrs(addrs, timeout)?,
            read_timeout: None,
            write_timeout: None,
            ahead: Vec::new(),
            ahead_at: 0,
            ahead_end: 0,
        };
        if let Some(conn) = &mut tls {
            let left = timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(10));
            sock.set_read_timeout(Some(left))?;
            sock.set_write_timeout(Some(left))?;
            conn.complete_io(&mut sock)?;
        }
        Ok(Direct { sock, tls })
    }

    /// Send `bytes` (a whole request) within `timeout`.
    pub(crate) fn send(&mut self, bytes: &[u8], timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(timeout)?;
        match &mut self.tls {
            None => (&self.sock.stream).write_all(bytes),
            Some(conn) => {
                // Encrypted in pieces of at most `SEND_PIECE`, each sent when made.
                for piece in bytes.chunks(SEND_PIECE) {
                    conn.writer().write_all(piece)?;
                    send_held(conn, &mut self.sock)?;
                }
                Ok(())
            }
        }
    }

    /// Read what has arrived of the answer (0: the server closed), waiting at most `timeout`.
    pub(crate) fn read(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<usize> {
        if let Some(conn) = &mut self.tls {
            // Whatever a failed send left.
            send_held(conn, &mut self.sock)?;
        }
        self.sock.set_read_timeout(timeout)?;
        read_plain(&mut self.sock, &mut self.tls, buf)
    }

    /// Fit for another request: idle and open (see `Sock::idle_open`), nothing unsent or
    /// unread.
    pub(crate) fn reusable(&mut self) -> bool {
        if let Some(conn) = &mut self.tls {
            if conn.wants_write() {
                return false;
            }
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
}

/// Send what TLS holds, in as few writes as the socket takes.
fn send_held(conn: &mut ClientConnection, sock: &mut Sock) -> io::Result<()> {
    while conn.wants_write() {
        if conn.write_tls(sock)? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// Plaintext off the connection into `buf`: what TLS has decrypted, else what the next read
/// of the socket brings (0 at the end).
fn read_plain(
    sock: &mut Sock,
    tls: &mut Option<ClientConnection>,
    buf: &mut [u8],
) -> io::Result<usize> {
    let Some(conn) = tls else {
        return sock.read(buf);
    };
    loop {
        match conn.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        // No plaintext yet: read more of the connection.
        if conn.read_tls(sock)? == 0 {
            // The server closed without close_notify: the reader says so next.
            conn.process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            return match conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                r => r,
            };
        }
        if let Err(e) = conn.process_new_packets() {
            // An alert describing the failure, when there is one, as a last word.
            let _ = conn.write_tls(sock);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Whatever TLS wants to answer (a key update) goes out at once.
        while conn.wants_write() {
            conn.write_tls(sock)?;
        }
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

    #[test]
    fn api_connections_notice_a_dead_link_within_45_s() {
        use rustix::net::sockopt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = connect_addrs(&[l.local_addr().unwrap()], Duration::from_secs(5)).unwrap();
        assert!(sockopt::socket_keepalive(&s).unwrap());
        let idle = sockopt::tcp_keepidle(&s).unwrap();
        let every = sockopt::tcp_keepintvl(&s).unwrap();
        let probes = sockopt::tcp_keepcnt(&s).unwrap();
        assert_eq!((idle, every, probes), (s_(30), s_(5), 3));
        assert!(idle + every * probes <= Duration::from_secs(45));
    }

    fn s_(n: u64) -> Duration {
        Duration::from_secs(n)
    }
}
