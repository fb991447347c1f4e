//! Scenarios for the first controllers and the runtime, run against the sandbox API server
//! always, and against a real kube-apiserver when `KCM_E2E_KUBECONFIG` is set (`real_*`).
//!
//! Real-cluster environment:
//! - `KCM_E2E_KUBECONFIG`: an admin kubeconfig for the test's own reads and writes.
//! - `KCM_E2E_KCM_ARGS`: edgekcm's flags (default `--kubeconfig=$KCM_E2E_KUBECONFIG`), e.g.
//!   kubeadm's set with `--use-service-account-credentials=true`.
//! - `KCM_E2E_APISERVER_STOP` / `KCM_E2E_APISERVER_START`: shell commands that stop and start
//!   the apiserver, for the outage scenario (skipped without them).

use crate::common::*;
use edgekcm::api::resources::{CONFIGMAPS, LEASES, SERVICEACCOUNTS};
use edgekcm_sandbox::SandboxOptions;
use serde_json::json;
use std::time::{Duration, Instant};

/// A real certificate: edgekcm refuses a --root-ca-file without one, as upstream does.
const ROOT_CA: &str = include_str!("../fixtures/test-only-v1-ca.crt");
const LIMIT: Duration = Duration::from_secs(30);
/// From the apiserver's /readyz after an outage until a new namespace is served.
const RECOVERY_LIMIT: Duration = Duration::from_secs(20);

fn root_ca_flag(t: &Target) -> Vec<String> {
    if t.is_real() {
        return vec![];
    }
    let p = t.dir().join("ca.crt");
    std::fs::write(&p, ROOT_CA).expect("ca file");
    vec![format!("--root-ca-file={}", p.display())]
}

/// The CA bundle edgekcm is expected to publish on this target.
fn expected_ca(t: &Target) -> Option<String> {
    if !t.is_real() {
        return Some(ROOT_CA.to_string());
    }
    let args = t.edgekcm_args();
    if let Some(p) = args.iter().find_map(|a| a.strip_prefix("--root-ca-file=")) {
        return std::fs::read_to_string(p).ok();
    }
    None
}

fn start(t: &Target, tag: &str, extra: &[&str]) -> Kcm {
    let mut args: Vec<String> = root_ca_flag(t);
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Kcm::start(t, tag, &refs)
}

/// Wait until edgekcm serves namespaces at all (its caches synced and workers running).
fn wait_serving(t: &Target, kcm: &mut Kcm) {
    let admin = t.admin();
    eventually(LIMIT, "edgekcm to publish into kube-public", || {
        if let Some(st) = kcm.exited() {
            panic!("edgekcm exited: {st}\n{}", kcm.log_text());
        }
        admin
            .get(&CONFIGMAPS, Some("kube-public"), "kube-root-ca.crt")
            .ok()
    });
}

/// Create a namespace; return how long until its ServiceAccount and ConfigMap both existed.
fn namespace_served(t: &Target) -> (String, Duration) {
    namespace_served_within(t, LIMIT)
}

/// As `namespace_served`, failing when either takes longer than `limit`.
fn namespace_served_within(t: &Target, limit: Duration) -> (String, Duration) {
    let admin = t.admin();
    let ns = unique("e2e-ns");
    let t0 = Instant::now();
    create_namespace(&admin, &ns);
    eventually(limit, "default ServiceAccount", || {
        admin.get(&SERVICEACCOUNTS, Some(&ns), "default").ok()
    });
    let cm = eventually(limit, "kube-root-ca.crt", || {
        admin.get(&CONFIGMAPS, Some(&ns), "kube-root-ca.crt").ok()
    });
    let took = t0.elapsed();
    assert_eq!(
        cm["metadata"]["annotations"]["kubernetes.io/description"],
        edgekcm::controllers::rootca::DESCRIPTION
    );
    if let Some(ca) = expected_ca(t) {
        assert_eq!(cm["data"]["ca.crt"], ca.as_str());
    }
    (ns, took)
}

fn scenario_new_namespace(t: &Target) {
    let mut kcm = start(t, "ns", &[]);
    wait_serving(t, &mut kcm);
    let mut worst = Duration::ZERO;
    let admin = t.admin();
    for _ in 0..5 {
        let (ns, took) = namespace_served(t);
        worst = worst.max(took);
        delete_namespace(&admin, &ns);
    }
    eprintln!("new namespace served (ServiceAccount + ConfigMap), worst of 5: {worst:?}");
}

fn scenario_repair(t: &Target) {
    let mut kcm = start(t, "repair", &[]);
    wait_serving(t, &mut kcm);
    let admin = t.admin();
    let (ns, _) = namespace_served(t);
    // A deleted default ServiceAccount comes back.
    let old_uid = admin
        .get(&SERVICEACCOUNTS, Some(&ns), "default")
        .expect("sa")["metadata"]["uid"]
        .clone();
    admin
        .delete(&SERVICEACCOUNTS, Some(&ns), "default", &Default::default())
        .expect("delete sa");
    eventually(LIMIT, "re-created ServiceAccount", || {
        admin
            .get(&SERVICEACCOUNTS, Some(&ns), "default")
            .ok()
            .filter(|sa| sa["metadata"]["uid"] != old_uid)
    });
    // A tampered ConfigMap is put back, keeping what else was added to it.
    let mut cm = admin
        .get(&CONFIGMAPS, Some(&ns), "kube-root-ca.crt")
        .expect("cm");
    let good = cm["data"]["ca.crt"].clone();
    cm["data"]["ca.crt"] = json!("tampered");
    cm["metadata"]["labels"] = json!({"keep": "me"});
    admin.update(&CONFIGMAPS, &cm).expect("tamper");
    eventually(LIMIT, "repaired ConfigMap", || {
        admin
            .get(&CONFIGMAPS, Some(&ns), "kube-root-ca.crt")
            .ok()
            .filter(|c| c["data"]["ca.crt"] == good && c["metadata"]["labels"]["keep"] == "me")
    });
    // A deleted ConfigMap comes back.
    admin
        .delete(
            &CONFIGMAPS,
            Some(&ns),
            "kube-root-ca.crt",
            &Default::default(),
        )
        .expect("delete cm");
    eventually(LIMIT, "re-created ConfigMap", || {
        admin.get(&CONFIGMAPS, Some(&ns), "kube-root-ca.crt").ok()
    });
    delete_namespace(&admin, &ns);
}

#[test]
fn sandbox_relists_after_expired_history() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let mut kcm = start(&t, "410", &[]);
    wait_serving(&t, &mut kcm);
    sb.clear_requests();
    sb.faults().expire_history();
    sb.faults().drop_watches();
    let (_, took) = namespace_served(&t);
    eprintln!("served after 410 re-list in {took:?}");
    let relisted = sb.requests().iter().any(|r| {
        r.method == "GET"
            && r.path.starts_with("/api/v1/namespaces?")
            && !r.path.contains("watch=true")
    });
    assert!(
        relisted,
        "edgekcm re-listed namespaces after its watch expired"
    );
    assert!(kcm.exited().is_none());
}

#[test]
fn sandbox_survives_outage_and_pause() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let mut kcm = start(&t, "outage", &[]);
    wait_serving(&t, &mut kcm);
    // The apiserver goes away for 10 s.
    sb.stop_listening();
    std::thread::sleep(Duration::from_secs(10));
    sb.try_resume_listening().expect("listen again");
    let (_, took) = namespace_served(&t);
    eprintln!("after a 10 s outage, a new namespace was served in {took:?}");
    // The apiserver hangs for 10 s (accepts, does not answer).
    sb.faults().pause(Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(10));
    let (_, took) = namespace_served(&t);
    eprintln!("after a 10 s pause, a new namespace was served in {took:?}");
    assert!(kcm.exited().is_none(), "edgekcm kept running");
}

#[test]
#[ignore = "needs a real kube-apiserver: KCM_E2E_KUBECONFIG=... just e2e"]
fn real_survives_apiserver_restart() {
    let t = real("apiserver outage");
    let (Ok(stop), Ok(startcmd)) = (
        std::env::var("KCM_E2E_APISERVER_STOP"),
        std::env::var("KCM_E2E_APISERVER_START"),
    ) else {
        panic!("the outage scenario needs KCM_E2E_APISERVER_STOP and KCM_E2E_APISERVER_START");
    };
    let sh = |c: &str| {
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(c)
            .status()
            .map(|s| s.success());
        assert!(matches!(ok, Ok(true)), "command failed: {c}");
    };
    let mut kcm = start(&t, "outage", &[]);
    wait_serving(&t, &mut kcm);
    sh(&stop);
    std::thread::sleep(Duration::from_secs(10));
    sh(&startcmd);
    let admin = t.admin();
    eventually(Duration::from_secs(60), "apiserver back", || {
        admin.get_raw("/readyz").ok()
    });
    // Its caches come back within a couple of seconds of /readyz (their readiness probe);
    // the bound here is generous, for a loaded machine (`just bench-recovery` measures).
    let ready = Instant::now();
    let (ns, took) = namespace_served_within(&t, RECOVERY_LIMIT);
    eprintln!("after a 10 s apiserver outage, a new namespace was served in {took:?}");
    assert!(
        ready.elapsed() <= RECOVERY_LIMIT,
        "served {:?} after /readyz answered",
        ready.elapsed()
    );
    assert!(kcm.exited().is_none(), "edgekcm kept running");
    delete_namespace(&admin, &ns);
}

#[test]
fn sandbox_conflicts_and_server_errors_are_retried() {
    let t = sandbox();
    let sb = t.sandbox().expect("sandbox");
    let mut kcm = start(&t, "faults", &[]);
    wait_serving(&t, &mut kcm);
    // The next writes of ServiceAccounts fail with 500, then 429: edgekcm retries.
    sb.faults().fail_next(3, 500, Some("/serviceaccounts"));
    sb.faults().fail_next(2, 429, Some("/serviceaccounts"));
    let (_, took) = namespace_served(&t);
    eprintln!("served through 500s and 429s in {took:?}");
}

fn scenario_leader_election(t: &Target, lease: &[&str], limit: Duration) {
    let admin = t.admin();
    // On a real cluster RBAC lets the controller manager touch only the lease named
    // kube-controller-manager (no other controller manager may run meanwhile).
    let lease_name = if t.is_real() {
        "kube-controller-manager".to_string()
    } else {
        unique("edgekcm-e2e")
    };
    let _ = admin.delete(
        &LEASES,
        Some("kube-system"),
        &lease_name,
        &Default::default(),
    );
    let name_flag = format!("--leader-elect-resource-name={lease_name}");
    let mut flags = vec!["--leader-elect=true", name_flag.as_str()];
    flags.extend_from_slice(lease);
    let mut a = start(t, "leader-a", &flags);
    let mut b = start(t, "leader-b", &flags);
    let holder = eventually(Duration::from_secs(60), "a lease holder", || {
        admin
            .get(&LEASES, Some("kube-system"), &lease_name)
            .ok()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .filter(|h| !h.is_empty())
    });
    // Exactly one of them runs controllers.
    let started = |k: &Kcm| k.log_text().contains("starting serviceaccount-controller");
    eventually(LIMIT, "the leader to start its controllers", || {
        (started(&a) || started(&b)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(started(&a) ^ started(&b), "exactly one instance acts");
    let (leader, standby) = if started(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    // Kill the leader: the standby takes over.
    let t0 = Instant::now();
    leader.kill();
    eventually(limit, "the standby to take over", || {
        let l = admin.get(&LEASES, Some("kube-system"), &lease_name).ok()?;
        let h = l["spec"]["holderIdentity"].as_str()?;
        (h != holder && started(standby)).then_some(())
    });
    eprintln!(
        "leadership handed over {:?} after the leader was killed",
        t0.elapsed()
    );
    let _ = admin.delete(
        &LEASES,
        Some("kube-system"),
        &lease_name,
        &Default::default(),
    );
}

#[test]
fn sandbox_leader_election_hands_over() {
    let t = sandbox();
    scenario_leader_election(
        &t,
        &[
            "--leader-elect-lease-duration=3s",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=500ms",
        ],
        Duration::from_secs(20),
    );
}

#[test]
#[ignore = "needs a real kube-apiserver: KCM_E2E_KUBECONFIG=... just e2e"]
fn real_leader_election_hands_over() {
    let t = real("leader election");
    // Upstream defaults (15 s / 10 s / 2 s): a successor must act within 17 s.
    scenario_leader_election(&t, &[], Duration::from_secs(17));
}

#[test]
fn sandbox_service_account_credentials() {
    let t = sandbox_with(SandboxOptions {
        require_auth: true,
        ..Default::default()
    });
    let sb = t.sandbox().expect("sandbox");
    let mut kcm = start(&t, "sacreds", &["--use-service-account-credentials=true"]);
    wait_serving(&t, &mut kcm);
    namespace_served(&t);
    let reqs = sb.requests();
    let by = |path: &str, method: &str| -> Vec<Option<String>> {
        reqs.iter()
            .filter(|r| r.method == method && r.path.contains(path) && r.status < 300)
            .map(|r| r.user.clone())
            .collect()
    };
    let sa_creates = by("/serviceaccounts", "POST");
    assert!(
        sa_creates.iter().any(|u| u.as_deref()
            == Some("system:serviceaccount:kube-system:service-account-controller")),
        "ServiceAccounts were created as the controller's own ServiceAccount: {sa_creates:?}"
    );
    let cm_creates = by("/configmaps", "POST");
    assert!(
        cm_creates
            .iter()
            .all(|u| u.as_deref()
                == Some("system:serviceaccount:kube-system:root-ca-cert-publisher")),
        "ConfigMaps were created as root-ca-cert-publisher: {cm_creates:?}"
    );
    // Informers keep the root identity.
    let watches: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.contains("watch=true"))
        .collect();
    assert!(!watches.is_empty());
    assert!(watches.iter().all(|r| r.user.as_deref() == Some("admin")));
}

#[test]
fn bad_kubeconfig_exits_with_a_message() {
    let dir = TempDir::new("badkc");
    let p = dir.0.join("broken.conf");
    std::fs::write(&p, "apiVersion: v1\nclusters: [\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgekcm"))
        .arg(format!("--kubeconfig={}", p.display()))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.conf"), "message names the file: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unknown_flag_exits_with_a_message() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgekcm"))
        .arg("--no-such-flag=1")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-such-flag"), "{err}");
}

// Each scenario runs on the sandbox (`sandbox_scenarios::<name>`) and, with `just e2e`,
// on a real kube-apiserver (`real_scenarios::<name>`).
scenarios! {
    new_namespace_gets_serviceaccount_and_configmap => scenario_new_namespace,
    deleted_or_tampered_objects_are_repaired => scenario_repair,
}
