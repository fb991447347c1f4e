//! systemd notifications over real datagram sockets: the protocol (path and abstract
//! sockets), the watchdog pinger, and edgekcm itself under a `NOTIFY_SOCKET` against the
//! sandbox API server (READY=1 once caches synced, WATCHDOG=1, STOPPING=1; a leader-election
//! standby is ready once it has seen the leader; a leader says STOPPING=1 and releases its
//! lease on SIGTERM).

use crate::common::{sandbox, Target, TempDir};
use edgekcm::runtime::notify::{self, Notifier};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A bound notification socket and its `NOTIFY_SOCKET` spelling.
struct Listener {
    sock: UnixDatagram,
    env: String,
    _dir: Option<TempDir>,
}

impl Listener {
    fn path() -> Listener {
        let dir = TempDir::new("notify");
        let p = dir.0.join("notify.sock");
        let sock = UnixDatagram::bind(&p).unwrap();
        Listener {
            sock,
            env: p.display().to_string(),
            _dir: Some(dir),
        }
    }

    fn abstract_ns() -> Listener {
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "edgekcm-test-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        Listener {
            sock,
            env: format!("@{name}"),
            _dir: None,
        }
    }

    fn notifier(&self) -> Notifier {
        Notifier::new(notify::Target::parse(&self.env))
    }

    /// The next datagram within `limit`, or None.
    fn recv(&self, limit: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => None,
        }
    }

    /// Read datagrams until one satisfies `pred`; panics after `limit`.
    fn wait_for(&self, limit: Duration, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + limit;
        let mut seen = Vec::new();
        while Instant::now() < end {
            if let Some(m) = self.recv(Duration::from_millis(200)) {
                if pred(&m) {
                    return m;
                }
                seen.push(m);
            }
        }
        panic!("no {what} within {limit:?}; got {seen:?}");
    }

    fn drain(&self) {
        while self.recv(Duration::from_millis(1)).is_some() {}
    }
}

#[test]
fn path_socket_protocol() {
    let l = Listener::path();
    let n = l.notifier();
    assert!(n.enabled());
    n.ready("caches synced");
    assert_eq!(
        l.recv(Duration::from_secs(2)).unwrap(),
        "READY=1\nSTATUS=caches synced"
    );
    // READY=1 is sent once; later calls only update the status.
    n.ready("2 controllers\nrunning");
    assert_eq!(
        l.recv(Duration::from_secs(2)).unwrap(),
        "STATUS=2 controllers running"
    );
    n.watchdog();
    assert_eq!(l.recv(Duration::from_secs(2)).unwrap(), "WATCHDOG=1");
    n.stopping();
    assert_eq!(
        l.recv(Duration::from_secs(2)).unwrap(),
        "STOPPING=1\nSTATUS=shutting down"
    );
}

#[test]
fn abstract_socket_protocol() {
    let l = Listener::abstract_ns();
    assert!(l.env.starts_with('@'));
    let n = l.notifier();
    n.ready("up");
    assert_eq!(
        l.recv(Duration::from_secs(2)).unwrap(),
        "READY=1\nSTATUS=up"
    );
    n.watchdog();
    assert_eq!(l.recv(Duration::from_secs(2)).unwrap(), "WATCHDOG=1");
}

#[test]
fn a_missing_socket_is_an_error_not_a_panic() {
    let dir = TempDir::new("notify-missing");
    let n = Notifier::new(Some(notify::Target::Path(dir.0.join("nobody-listens"))));
    assert!(n.send("READY=1").is_err());
    n.ready("x");
    n.watchdog();
    n.stopping();
}

#[test]
fn watchdog_pings_only_while_healthy() {
    let l = Listener::abstract_ns();
    let n: &'static Notifier = Box::leak(Box::new(l.notifier()));
    let healthy = Arc::new(AtomicBool::new(true));
    let h = healthy.clone();
    let guard = notify::spawn_watchdog(n, Duration::from_millis(20), move || {
        h.load(Ordering::SeqCst)
    })
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            l.recv(Duration::from_secs(2)).as_deref(),
            Some("WATCHDOG=1")
        );
    }
    healthy.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(60));
    l.drain();
    assert_eq!(
        l.recv(Duration::from_millis(200)),
        None,
        "no ping while unhealthy"
    );
    healthy.store(true, Ordering::SeqCst);
    assert_eq!(
        l.recv(Duration::from_secs(2)).as_deref(),
        Some("WATCHDOG=1")
    );
    drop(guard);
    l.drain();
    assert_eq!(
        l.recv(Duration::from_millis(100)),
        None,
        "stopped when dropped"
    );
}

/// edgekcm as a child with a notification socket; SIGTERM and reaped on drop.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn start(t: &Target, tag: &str, args: &[&str], env: &[(&str, String)]) -> Proc {
        let log = t.dir().join(format!("edgekcm-{tag}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_edgekcm"));
        cmd.arg(format!("--kubeconfig={}", t.kubeconfig().display()))
            .args(["--secure-port=0", "--v=2"])
            .args(args)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc {
            child: cmd.spawn().unwrap(),
            log,
        }
    }

    fn term(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("edgekcm did not stop on SIGTERM");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- {} ----\n{}",
                self.log.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn edgekcm_notifies_systemd() {
    let t = sandbox();
    let l = Listener::abstract_ns();
    let mut kcm = Proc::start(
        &t,
        "notify",
        &["--leader-elect=false"],
        &[
            ("NOTIFY_SOCKET", l.env.clone()),
            ("WATCHDOG_USEC", "400000".into()),
        ],
    );
    // Watchdog pings start with the process; READY=1 comes once caches synced.
    let ready = l.wait_for(LIMIT, "READY=1", |m| m.starts_with("READY=1"));
    assert!(
        ready.contains("STATUS=caches synced; ") && ready.contains(" controllers running"),
        "{ready}"
    );
    l.wait_for(LIMIT, "WATCHDOG=1", |m| m == "WATCHDOG=1");
    l.wait_for(LIMIT, "another WATCHDOG=1", |m| m == "WATCHDOG=1");
    let st = kcm.term();
    assert!(st.success(), "{st}");
    l.wait_for(Duration::from_secs(2), "STOPPING=1", |m| {
        m.starts_with("STOPPING=1")
    });
}

#[test]
fn standby_is_ready_once_it_sees_the_leader() {
    let t = sandbox();
    let (la, lb) = (Listener::abstract_ns(), Listener::path());
    let _leader = Proc::start(
        &t,
        "leader",
        &["--leader-elect=true"],
        &[("NOTIFY_SOCKET", la.env.clone())],
    );
    let ready = la.wait_for(LIMIT, "leader READY=1", |m| m.starts_with("READY=1"));
    assert!(ready.contains("controllers running"), "{ready}");
    // The standby's watchdog is meant for some other process: no pings.
    let _standby = Proc::start(
        &t,
        "standby",
        &["--leader-elect=true"],
        &[
            ("NOTIFY_SOCKET", lb.env.clone()),
            ("WATCHDOG_USEC", "200000".into()),
            ("WATCHDOG_PID", "1".into()),
        ],
    );
    let ready = lb.wait_for(LIMIT, "standby READY=1", |m| m.starts_with("READY=1"));
    assert!(
        ready.contains("STATUS=standby; the lease is held by"),
        "{ready}"
    );
    assert_eq!(lb.recv(Duration::from_millis(600)), None);
}

#[test]
fn leader_says_stopping_then_releases_its_lease() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let l = Listener::path();
    let mut leader = Proc::start(
        &t,
        "leader-stop",
        &["--leader-elect=true"],
        &[("NOTIFY_SOCKET", l.env.clone())],
    );
    let ready = l.wait_for(LIMIT, "leader READY=1", |m| m.starts_with("READY=1"));
    assert!(ready.contains("controllers running"), "{ready}");
    let lease = || {
        sb.get(
            &edgekcm::api::resources::LEASES,
            Some("kube-system"),
            "kube-controller-manager",
        )
        .expect("lease")
    };
    assert_ne!(lease()["spec"]["holderIdentity"], "");
    let st = leader.term();
    assert!(st.success(), "{st}");
    let stopping = l.wait_for(Duration::from_secs(2), "STOPPING=1", |m| {
        m.starts_with("STOPPING=1")
    });
    assert_eq!(stopping, "STOPPING=1\nSTATUS=shutting down");
    let spec = lease()["spec"].clone();
    assert_eq!(spec["holderIdentity"], "");
    assert_eq!(spec["leaseDurationSeconds"], 1);
}
