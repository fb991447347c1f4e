//! systemd's service notification protocol (sd_notify(3)) without libsystemd.
//!
//! Under a `Type=notify` unit systemd puts the path of a datagram socket into `NOTIFY_SOCKET`
//! (a file system path, or `@name` for a socket in the abstract namespace). A message is one
//! datagram of `KEY=value` lines: `READY=1` once start-up is complete, `STATUS=...` free text for
//! `systemctl status`, `STOPPING=1` when shutting down, and `WATCHDOG=1` at least every
//! `WATCHDOG_USEC` microseconds when the unit has `WatchdogSec=` (only for the process named by
//! `WATCHDOG_PID`, if that is set). Outside systemd nothing is sent.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A socket bound to a file system path.
    Path(PathBuf),
    /// A socket in Linux's abstract namespace (`@name` in `NOTIFY_SOCKET`), name without `@`.
    Abstract(Vec<u8>),
}

impl Target {
    /// Parse a `NOTIFY_SOCKET` value; None for forms this build does not speak (`vsock:`).
    pub fn parse(s: &str) -> Option<Target> {
        if let Some(name) = s.strip_prefix('@') {
            (!name.is_empty()).then(|| Target::Abstract(name.as_bytes().to_vec()))
        } else if s.starts_with('/') {
            Some(Target::Path(PathBuf::from(s)))
        } else {
            None
        }
    }
}

/// Sends notifications to one target (or nowhere).
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<Target>,
    ready_sent: AtomicBool,
    warned: AtomicBool,
}

impl Notifier {
    pub fn new(target: Option<Target>) -> Self {
        Notifier {
            target,
            ..Notifier::default()
        }
    }

    /// From `NOTIFY_SOCKET`; sends nothing when it is unset or not understood.
    pub fn from_env() -> Self {
        let Some(raw) = std::env::var_os("NOTIFY_SOCKET") else {
            return Notifier::default();
        };
        let raw = raw.to_string_lossy();
        let target = Target::parse(&raw);
        if target.is_none() {
            log::warn!(
                "NOTIFY_SOCKET={raw:?} is not a unix socket path or @name; not notifying systemd"
            );
        }
        Notifier::new(target)
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Send one message (newline-separated `KEY=value` lines) as one datagram.
    pub fn send(&self, message: &str) -> io::Result<()> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        match target {
            Target::Path(p) => sock.send_to(message.as_bytes(), p)?,
            Target::Abstract(name) => send_abstract(&sock, name, message.as_bytes())?,
        };
        Ok(())
    }

    /// Send, logging a failure once (later failures at debug level).
    fn send_logged(&self, message: &str) {
        if let Err(e) = self.send(message) {
            let first = !self.warned.swap(true, Ordering::SeqCst);
            let what = message.lines().next().unwrap_or("");
            if first {
                log::warn!("cannot notify systemd ({what}): {e}");
            } else {
                log::debug!("cannot notify systemd ({what}): {e}");
            }
        }
    }

    /// `READY=1` with a status line the first time; only the status afterwards.
    pub fn ready(&self, status: &str) {
        if !self.enabled() {
            return;
        }
        let status = one_line(status);
        if self.ready_sent.swap(true, Ordering::SeqCst) {
            self.send_logged(&format!("STATUS={status}"));
        } else {
            log::info!("notifying systemd: ready ({status})");
            self.send_logged(&format!("READY=1\nSTATUS={status}"));
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready_sent.load(Ordering::SeqCst)
    }

    pub fn status(&self, status: &str) {
        if self.enabled() {
            self.send_logged(&format!("STATUS={}", one_line(status)));
        }
    }

    pub fn stopping(&self) {
        if self.enabled() {
            self.send_logged("STOPPING=1\nSTATUS=shutting down");
        }
    }

    pub fn watchdog(&self) {
        if self.enabled() {
            self.send_logged("WATCHDOG=1");
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn send_abstract(
    sock: &std::os::unix::net::UnixDatagram,
    name: &[u8],
    msg: &[u8],
) -> io::Result<usize> {
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt as _;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt as _;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    sock.send_to_addr(msg, &addr)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn send_abstract(
    _sock: &std::os::unix::net::UnixDatagram,
    _name: &[u8],
    _msg: &[u8],
) -> io::Result<usize> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract sockets exist only on Linux",
    ))
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Half the watchdog timeout, when the watchdog is meant for this process: `WATCHDOG_USEC`
/// set to a positive number and `WATCHDOG_PID` unset or equal to `pid`.
pub fn watchdog_interval(
    usec: Option<&str>,
    watchdog_pid: Option<&str>,
    pid: u32,
) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(p) = watchdog_pid {
        if p.trim().parse::<u32>().ok()? != pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// The process-wide notifier, from the environment at first use.
pub fn global() -> &'static Notifier {
    static N: OnceLock<Notifier> = OnceLock::new();
    N.get_or_init(Notifier::from_env)
}

pub fn ready(status: &str) {
    global().ready(status)
}

pub fn stopping() {
    global().stopping()
}

/// Pings the watchdog until dropped.
pub struct Watchdog {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Ping `WATCHDOG=1` every `interval` while `healthy()` says so. A failing check skips the
/// ping, so systemd restarts a process whose health checks keep failing (as kubelet's
/// liveness probe on /healthz would).
pub fn spawn_watchdog(
    notifier: &'static Notifier,
    interval: Duration,
    healthy: impl Fn() -> bool + Send + 'static,
) -> io::Result<Watchdog> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let thread = std::thread::Builder::new()
        .name("watchdog".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            const SLICE: Duration = Duration::from_millis(50);
            while !d.load(Ordering::SeqCst) {
                if healthy() {
                    notifier.watchdog();
                } else {
                    log::warn!("health checks fail; skipping the systemd watchdog ping");
                }
                let mut left = interval;
                while !left.is_zero() && !d.load(Ordering::SeqCst) {
                    let step = left.min(SLICE);
                    std::thread::sleep(step);
                    left -= step;
                }
            }
        })?;
    Ok(Watchdog {
        done,
        thread: Some(thread),
    })
}

/// Start the watchdog pinger when systemd asked for one (`WATCHDOG_USEC`).
pub fn start_watchdog(healthy: impl Fn() -> bool + Send + 'static) -> Option<Watchdog> {
    let n = global();
    if !n.enabled() {
        return None;
    }
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    let interval = watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id())?;
    log::info!("systemd watchdog: pinging every {interval:?}");
    match spawn_watchdog(n, interval, healthy) {
        Ok(w) => Some(w),
        Err(e) => {
            log::warn!("cannot start the systemd watchdog thread: {e}");
            None
        }
    }
}

/// Send `READY=1` with the status `cond` returns, polling until it returns one, readiness was
/// sent some other way, or `stop`. Used for a leader-election standby, which is ready once it
/// has seen who holds the lease.
pub fn ready_when(stop: Arc<AtomicBool>, cond: impl Fn() -> Option<String> + Send + 'static) {
    let n = global();
    if !n.enabled() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("notify-ready".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) && !n.is_ready() {
                if let Some(status) = cond() {
                    n.ready(&status);
                    return;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the readiness thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            Target::parse("/run/systemd/notify"),
            Some(Target::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            Target::parse("@/org/freedesktop/systemd1/notify/123"),
            Some(Target::Abstract(
                b"/org/freedesktop/systemd1/notify/123".to_vec()
            ))
        );
        assert_eq!(Target::parse("@"), None);
        assert_eq!(Target::parse("vsock:2:1234"), None);
        assert_eq!(Target::parse(""), None);
    }

    #[test]
    fn watchdog_intervals() {
        assert_eq!(
            watchdog_interval(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_interval(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(watchdog_interval(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("30000000"), Some("x"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("-5"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(
            watchdog_interval(Some("1"), None, 7),
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn disabled_notifier_sends_nothing() {
        let n = Notifier::new(None);
        assert!(!n.enabled());
        n.ready("x");
        assert!(!n.is_ready());
        assert!(n.send("READY=1").is_ok());
    }

    #[test]
    fn status_is_one_line() {
        assert_eq!(one_line("a\nb\rc"), "a b c");
    }
}
