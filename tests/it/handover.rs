//! Leader election hand-over on SIGTERM, against the sandbox API server: a busy leader stops
//! writing, releases its Lease (an empty holder, as client-go's `ReleaseOnCancel` writes it)
//! and exits 0; a waiting standby takes over within 3 s with upstream's default lease flags
//! (15 s / 10 s / 2 s), where a lease left to expire would take 15 s. Losing the lease still
//! exits 1, and a standby that is stopped writes nothing.
//!
//! Each instance gets a kubeconfig with its own bearer token, so the sandbox's request log
//! (`Sandbox::requests`) tells their requests apart.

use crate::common::{eventually, sandbox, Target};
use edgekcm::api::resources::{LEASES, NAMESPACES, PODS, REPLICASETS, SERVICEACCOUNTS};
use edgekcm_sandbox::{RequestRecord, Sandbox};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);
const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";

/// edgekcm as a child process with its own bearer token; killed on drop.
struct Proc {
    child: Child,
    log: PathBuf,
    token: String,
}

impl Proc {
    fn start(t: &Target, tag: &str, args: &[&str]) -> Proc {
        let sb = t.sandbox().expect("sandbox");
        let token = format!("token-{tag}");
        let kubeconfig = t.dir().join(format!("kubeconfig-{tag}"));
        let yaml = sb
            .kubeconfig_yaml()
            .replace("token: sandbox-admin", &format!("token: {token}"));
        std::fs::write(&kubeconfig, yaml).expect("kubeconfig");
        let log = t.dir().join(format!("edgekcm-{tag}.log"));
        let f = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_edgekcm"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["--secure-port=0", "--v=2", "--leader-elect=true"])
            .args(args)
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("edgekcm starts");
        Proc { child, log, token }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map(|s| s.success());
        assert!(matches!(ok, Ok(true)), "kill -TERM failed");
    }

    /// The exit status within `limit`.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let child = &mut self.child;
        eventually(limit, "edgekcm to exit", || child.try_wait().ok().flatten())
    }

    /// This instance's requests, with their place in the whole log.
    fn requests(&self, sb: &Sandbox) -> Vec<(usize, RequestRecord)> {
        sb.requests()
            .into_iter()
            .enumerate()
            .filter(|(_, r)| r.token.as_deref() == Some(self.token.as_str()))
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- {} ----\n{}", self.log.display(), self.log_text());
        }
    }
}

fn holder(sb: &Sandbox) -> Option<String> {
    let lease = sb.get(&LEASES, Some("kube-system"), "kube-controller-manager")?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

fn lease_puts(reqs: &[(usize, RequestRecord)]) -> Vec<&(usize, RequestRecord)> {
    reqs.iter()
        .filter(|(_, r)| r.method == "PUT" && r.path == LEASE_PATH && r.status == 200)
        .collect()
}

fn replicaset(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}})
}

#[test]
fn busy_leader_hands_over_on_sigterm_and_writes_nothing_after_its_release() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    // Upstream's default lease flags: 15 s lease, 10 s renew deadline, 2 s retry period.
    let mut a = Proc::start(&t, "a", &[]);
    let a_id = eventually(LIMIT, "a to hold the lease", || {
        holder(sb).filter(|h| !h.is_empty())
    });
    eventually(LIMIT, "a's controllers", || {
        a.log_text()
            .contains("starting replicaset-controller")
            .then_some(())
    });
    let b = Proc::start(&t, "b", &[]);
    eventually(LIMIT, "b to look at the lease twice", || {
        let gets = b
            .requests(sb)
            .iter()
            .filter(|(_, r)| r.method == "GET" && r.path == LEASE_PATH)
            .count();
        (gets >= 2).then_some(())
    });
    assert!(lease_puts(&b.requests(sb)).is_empty(), "b is a standby");

    // Busy: ten ReplicaSets of 60 pods each, created at the default 20 requests/s.
    sb.create(&NAMESPACES, json!({"metadata": {"name": "busy"}}))
        .expect("namespace");
    sb.create(
        &SERVICEACCOUNTS,
        json!({"metadata": {"name": "default", "namespace": "busy"}}),
    )
    .expect("service account");
    for i in 0..10 {
        let mut rs = replicaset(&format!("web-{i}"), 60);
        rs["metadata"]["namespace"] = json!("busy");
        sb.create(&REPLICASETS, rs).expect("replicaset");
    }
    eventually(LIMIT, "a to be creating pods", || {
        (sb.list(&PODS, Some("busy")).len() >= 30).then_some(())
    });

    let term = Instant::now();
    a.sigterm();
    let status = a.wait_exit(Duration::from_secs(10));
    let exited = term.elapsed();
    let b_id = eventually(Duration::from_secs(10), "b to hold the lease", || {
        holder(sb).filter(|h| !h.is_empty() && *h != a_id)
    });
    assert!(status.success(), "a exits 0 on SIGTERM: {status}");

    let a_reqs = a.requests(sb);
    let (release_at, release) = (*lease_puts(&a_reqs).last().expect("a's last lease PUT")).clone();
    assert!(
        a.log_text()
            .contains("released lease kube-system/kube-controller-manager"),
        "a logs the release"
    );
    let writes_after: Vec<&RequestRecord> = a_reqs
        .iter()
        .filter(|(i, r)| *i > release_at && r.method != "GET")
        .map(|(_, r)| r)
        .collect();
    assert!(
        writes_after.is_empty(),
        "a wrote after releasing its lease: {writes_after:?}"
    );
    // Still true by the clock: nothing of a's that was not a GET arrived after the release.
    assert!(a_reqs
        .iter()
        .filter(|(_, r)| r.method != "GET" && r.path != LEASE_PATH)
        .all(|(_, r)| r.at <= release.at));
    let writes_before = a_reqs
        .iter()
        .filter(|(_, r)| r.method == "POST" && r.path.contains("/pods"))
        .count();
    assert!(
        writes_before >= 30,
        "a was busy: {writes_before} pod creations"
    );

    let b_put = b
        .requests(sb)
        .into_iter()
        .find(|(_, r)| r.method == "PUT" && r.path == LEASE_PATH && r.status == 200)
        .expect("b's acquiring PUT");
    assert!(b_put.0 > release_at, "b acquires after a released");
    let released_after = release.at.duration_since(term);
    let acquired_after = b_put.1.at.duration_since(term);
    eprintln!(
        "SIGTERM -> release {released_after:?}, -> standby acquired {acquired_after:?}, \
         -> leader exited {exited:?} ({writes_before} pods created before)"
    );
    assert!(
        released_after < Duration::from_millis(2100),
        "released {released_after:?} after SIGTERM"
    );
    assert!(
        acquired_after < Duration::from_secs(3),
        "b acquired {acquired_after:?} after SIGTERM"
    );
    let lease = sb
        .get(&LEASES, Some("kube-system"), "kube-controller-manager")
        .expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], json!(b_id));
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}

#[test]
fn standby_stopped_before_acquiring_exits_0_and_writes_nothing() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let a = Proc::start(&t, "a", &["--controllers=serviceaccount-controller"]);
    let a_id = eventually(LIMIT, "a to hold the lease", || {
        holder(sb).filter(|h| !h.is_empty())
    });
    let mut c = Proc::start(&t, "c", &["--controllers=serviceaccount-controller"]);
    eventually(LIMIT, "c to look at the lease", || {
        c.requests(sb)
            .iter()
            .any(|(_, r)| r.method == "GET" && r.path == LEASE_PATH)
            .then_some(())
    });
    let term = Instant::now();
    c.sigterm();
    let status = c.wait_exit(Duration::from_secs(5));
    eprintln!("standby exited {:?} after SIGTERM", term.elapsed());
    assert!(status.success(), "{status}");
    let writes: Vec<RequestRecord> = c
        .requests(sb)
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "the standby wrote: {writes:?}");
    assert!(!c.log_text().contains("released lease"));
    assert_eq!(holder(sb), Some(a_id));
    drop(a);
}

#[test]
fn leader_that_cannot_renew_exits_1_without_releasing() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let mut a = Proc::start(
        &t,
        "a",
        &[
            "--controllers=serviceaccount-controller",
            "--leader-elect-lease-duration=3s",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=500ms",
        ],
    );
    let a_id = eventually(LIMIT, "a to hold the lease", || {
        holder(sb).filter(|h| !h.is_empty())
    });
    eventually(LIMIT, "a's controllers", || {
        a.log_text()
            .contains("starting serviceaccount-controller")
            .then_some(())
    });
    // Every request for the lease fails from now on.
    sb.faults()
        .fail_next(1_000_000, 500, Some("/leases/kube-controller-manager"));
    let t0 = Instant::now();
    let status = a.wait_exit(LIMIT);
    eprintln!(
        "lost the lease; exited {:?} after renewals began failing",
        t0.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{status}");
    let log = a.log_text();
    assert!(log.contains("leaderelection lost"), "{log}");
    assert!(!log.contains("released lease"), "{log}");
    // The lease still names a: its successor waits it out, as upstream's would.
    assert_eq!(holder(sb), Some(a_id));
}

#[test]
fn stop_is_bounded_while_the_api_server_does_not_answer() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let mut a = Proc::start(&t, "a", &["--controllers=serviceaccount-controller"]);
    eventually(LIMIT, "a's controllers", || {
        a.log_text()
            .contains("starting serviceaccount-controller")
            .then_some(())
    });
    // Nothing is answered for 8 s; by the SIGTERM a renewal (every 2 s) waits on its answer.
    sb.faults().pause(Duration::from_secs(8));
    std::thread::sleep(Duration::from_millis(2500));
    let term = Instant::now();
    a.sigterm();
    let status = a.wait_exit(Duration::from_secs(10));
    let took = term.elapsed();
    eprintln!("exited {took:?} after SIGTERM with the API server not answering");
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(3), "stop took {took:?}");
    // The release could not be sent: the lease still names a and expires in its own time.
    std::thread::sleep(Duration::from_secs(6));
    let writes: Vec<RequestRecord> = a
        .requests(sb)
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| r.method != "GET" && r.at > term)
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert!(holder(sb).is_some_and(|h| !h.is_empty()));
}
