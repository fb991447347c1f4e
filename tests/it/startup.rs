//! The wait for the API server at start: failures that cannot heal end it at once with their
//! cause, the others are reported while edgekcm waits (upstream's 10 s, then upstream's
//! message), and a stop signal during the wait exits 0 without an error.

use crate::common::{create_namespace, eventually, free_port, unique, TempDir};
use edgekcm::api::resources::SERVICEACCOUNTS;
use edgekcm_sandbox::{Sandbox, SandboxOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_edgekcm");

fn kubeconfig(dir: &Path, server: &str, user: &str, ca: Option<&Path>) -> PathBuf {
    let ca = ca
        .map(|p| format!("    certificate-authority: {}\n", p.display()))
        .unwrap_or_default();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{ca}\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
         users:\n- name: u\n  user:\n{user}\n"
    );
    let p = dir.join(format!("kubeconfig-{}", fastrand::u32(..)));
    std::fs::write(&p, text).unwrap();
    p
}

fn start(kubeconfig: &Path, log: &Path) -> Child {
    let f = std::fs::File::create(log).unwrap();
    Command::new(BIN)
        .args([
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--secure-port=0",
            "--leader-elect=false",
            "--controllers=serviceaccount",
        ])
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap()
}

/// Run to the end; (exit status, log, how long it took).
fn run(kubeconfig: &Path, dir: &Path) -> (Option<i32>, String, Duration) {
    let log = dir.join("edgekcm.log");
    let t0 = Instant::now();
    let st = start(kubeconfig, &log).wait().unwrap();
    (
        st.code(),
        std::fs::read_to_string(&log).unwrap(),
        t0.elapsed(),
    )
}

fn error_line(log: &str) -> &str {
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with('E')).collect();
    assert_eq!(errors.len(), 1, "{log}");
    errors[0]
}

#[test]
fn refused_credentials_fail_at_once() {
    let sb = Sandbox::start(SandboxOptions {
        require_auth: true,
        ..Default::default()
    })
    .unwrap();
    let t = TempDir::new("startup-401");
    let kc = kubeconfig(&t.0, &sb.url(), "    token: not-a-token", None);
    let (code, log, took) = run(&kc, &t.0);
    assert_eq!(code, Some(1), "{log}");
    assert!(took < Duration::from_secs(3), "{took:?}\n{log}");
    let e = error_line(&log);
    assert!(
        e.contains(&format!(
            "the API server at {} refuses edgekcm's credentials (kubeconfig {}): 401 Unauthorized",
            sb.url(),
            kc.display()
        )),
        "{e}"
    );
    assert!(
        !log.contains("not-a-token"),
        "the token is in the log:\n{log}"
    );
}

/// A TLS server with a self-signed certificate that completes no handshake with a client that
/// does not trust it.
fn untrusted_tls_server() -> u16 {
    edgekcm::api::client::install_crypto_provider();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let _ = tls.read(&mut [0u8; 64]);
        }
    });
    port
}

#[test]
fn an_untrusted_certificate_fails_at_once() {
    let t = TempDir::new("startup-ca");
    edgekcm::certs::generate(&edgekcm::certs::CertsOptions::new(t.0.join("pki"))).unwrap();
    let port = untrusted_tls_server();
    let server = format!("https://127.0.0.1:{port}");
    let kc = kubeconfig(&t.0, &server, "    token: x", Some(&t.0.join("pki/ca.crt")));
    let (code, log, took) = run(&kc, &t.0);
    assert_eq!(code, Some(1), "{log}");
    assert!(took < Duration::from_secs(3), "{took:?}\n{log}");
    let e = error_line(&log);
    assert!(
        e.contains(&format!(
            "edgekcm does not trust the certificate of the API server at {server} (kubeconfig {}): ",
            kc.display()
        )) && e.contains("UnknownIssuer"),
        "{e}"
    );
}

#[test]
fn an_absent_server_is_waited_for_with_progress_then_upstreams_message() {
    let t = TempDir::new("startup-absent");
    let server = format!("http://127.0.0.1:{}", free_port());
    let kc = kubeconfig(&t.0, &server, "    token: x", None);
    let (code, log, took) = run(&kc, &t.0);
    assert_eq!(code, Some(1), "{log}");
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(14),
        "{took:?}"
    );
    let waiting: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.starts_with('W') && l.contains(&format!("waiting for the API server at {server} ("))
        })
        .collect();
    // The first failure at once, then every 3 s: 0, 3, 6, 9 s.
    assert!((3..=5).contains(&waiting.len()), "{log}");
    assert!(waiting[0].contains("(0s of 10s)"), "{log}");
    let e = error_line(&log);
    assert!(
        e.contains("err=\"failed to wait for apiserver being healthy: timed out waiting for the condition: failed to get apiserver /healthz status: "),
        "{e}"
    );
}

#[test]
fn a_server_that_comes_back_within_the_wait_is_used() {
    let sb = Sandbox::start(SandboxOptions::default()).unwrap();
    let t = TempDir::new("startup-back");
    let kc = t.0.join("kubeconfig");
    sb.write_kubeconfig(&kc).unwrap();
    sb.stop_listening();
    let log = t.0.join("edgekcm.log");
    let mut child = start(&kc, &log);
    std::thread::sleep(Duration::from_millis(2500));
    sb.resume_listening();
    let admin = {
        let cfg = edgekcm::api::kubeconfig::load(Some(&kc), None).unwrap();
        edgekcm::api::client::Client::new(&cfg, 0.0, 1, "startup-test").unwrap()
    };
    let ns = unique("back");
    create_namespace(&admin, &ns);
    eventually(
        Duration::from_secs(20),
        "the default ServiceAccount",
        || {
            assert!(child.try_wait().unwrap().is_none(), "edgekcm exited");
            admin.get(&SERVICEACCOUNTS, Some(&ns), "default").ok()
        },
    );
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("waiting for the API server at"), "{text}");
    assert!(
        text.contains(&format!("the API server at {} is healthy", sb.url())),
        "{text}"
    );
}

#[test]
fn a_stop_signal_during_the_wait_exits_0_quietly() {
    let t = TempDir::new("startup-stop");
    let kc = kubeconfig(
        &t.0,
        &format!("http://127.0.0.1:{}", free_port()),
        "    token: x",
        None,
    );
    let log = t.0.join("edgekcm.log");
    let mut child = start(&kc, &log);
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let st = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(st.code(), Some(0), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(!text.lines().any(|l| l.starts_with('E')), "{text}");
}

/// edgekcm against a sandbox whose `/version` says `git_version`, with `extra` flags, until
/// the `default` ServiceAccount of a new namespace exists (it runs) or it exits: the log, and
/// the exit code if it exited.
fn against_version(git_version: &str, extra: &[&str]) -> (Option<i32>, String) {
    let sb = Sandbox::start(SandboxOptions::default()).unwrap();
    sb.set_version(git_version);
    let t = TempDir::new("startup-version");
    let kc = t.0.join("kubeconfig");
    sb.write_kubeconfig(&kc).unwrap();
    let log = t.0.join("edgekcm.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(BIN)
        .args([
            &format!("--kubeconfig={}", kc.display()),
            "--secure-port=0",
            "--leader-elect=false",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let admin = sb.client("startup-test");
    let ns = unique("version");
    create_namespace(&admin, &ns);
    let code = eventually(Duration::from_secs(20), "a start or an exit", || {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st.code());
        }
        admin
            .get(&SERVICEACCOUNTS, Some(&ns), "default")
            .ok()
            .map(|_| None)
    });
    let _ = child.kill();
    let _ = child.wait();
    (code, std::fs::read_to_string(&log).unwrap())
}

fn emulation_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.contains("emulating Kubernetes v"))
        .unwrap_or_else(|| panic!("no emulation line:\n{log}"))
}

#[test]
fn the_version_window_follows_the_api_server() {
    // v1.36 and v1.37 get v1.37; the gated controllers on in v1.37 are named as missing.
    let (code, log) = against_version("v1.36.3", &[]);
    assert_eq!(code, None, "{log}");
    assert!(
        emulation_line(&log).ends_with(
            "emulating Kubernetes v1.37 (min compatibility v1.36): kube-apiserver v1.36.3 is served by a v1.37 controller manager"
        ),
        "{log}"
    );
    // The storage version migrator (GA in v1.37) runs: a warning, if any, does not name it.
    if let Some(missing) = log
        .lines()
        .find(|l| l.contains("would run with these flags are not in edgekcm yet"))
    {
        assert!(
            missing.contains("kube-controller-manager v1.37 would run"),
            "{missing}"
        );
        assert!(!missing.contains("svm"), "{missing}");
    }

    // v1.34 and v1.35 get their own minor: StorageVersionMigrator is off there.
    let (code, log) = against_version("v1.35.0", &[]);
    assert_eq!(code, None, "{log}");
    assert!(
        emulation_line(&log).ends_with(
            "emulating Kubernetes v1.35 (min compatibility v1.34): kube-apiserver v1.35.0 is older than v1.36: --emulated-version defaults to its minor"
        ),
        "{log}"
    );
    // svm is off there, and every controller v1.35 would start is in edgekcm: no warning,
    // or one that does not name svm.
    let missing = log
        .lines()
        .find(|l| l.contains("would run with these flags are not in edgekcm yet"));
    if let Some(missing) = missing {
        assert!(
            missing.contains("kube-controller-manager v1.35 would run"),
            "{missing}"
        );
        assert!(!missing.contains("svm"), "{missing}");
    }
}

#[test]
fn outside_the_window_only_with_emulated_version() {
    for v in ["v1.33.4", "v1.38.0"] {
        let (code, log) = against_version(v, &[]);
        assert_eq!(code, Some(1), "{log}");
        let e = error_line(&log);
        assert!(
            e.contains(&format!("kube-apiserver {v} is outside the versions edgekcm serves (v1.34 to v1.37); give --emulated-version=1.34..1.37 to run against it anyway")),
            "{e}"
        );
    }
    let (code, log) = against_version("v1.33.4", &["--emulated-version=kube=1.34"]);
    assert_eq!(code, None, "{log}");
    assert!(
        emulation_line(&log).ends_with(
            "emulating Kubernetes v1.34 (min compatibility v1.34): --emulated-version=1.34; kube-apiserver v1.33.4 is outside the versions edgekcm follows by itself (v1.34 to v1.37)"
        ),
        "{log}"
    );
    // A value checked again at the version chosen: locked to its default from 1.35 on.
    let (code, log) = against_version("v1.37.0", &["--feature-gates=JobManagedBy=false"]);
    assert_eq!(code, Some(1), "{log}");
    assert!(
        error_line(&log)
            .contains("cannot set feature gate JobManagedBy to false, feature is locked to true"),
        "{log}"
    );
    let (code, log) = against_version("v1.34.2", &["--feature-gates=JobManagedBy=false"]);
    assert_eq!(code, None, "{log}");
}

/// Against the real kube-apiserver of `KCM_E2E_KUBECONFIG`: the start-up line names the
/// version it emulates from the server's own `/version`.
#[test]
#[ignore = "needs a real kube-apiserver (just e2e)"]
fn real_version_window() {
    let t = crate::common::real("real_version_window");
    let admin = t.admin();
    let v: serde_json::Value = serde_json::from_str(&admin.get_raw("/version").unwrap()).unwrap();
    let git = v["gitVersion"].as_str().unwrap().to_string();
    let minor: u32 = v["minor"]
        .as_str()
        .unwrap()
        .trim_end_matches('+')
        .parse()
        .unwrap();
    let mut kcm = crate::common::Kcm::start(&t, "version", &["--controllers=serviceaccount"]);
    kcm.served_namespace(&admin, "version", Duration::from_secs(30));
    let log = kcm.log_text();
    let line = emulation_line(&log);
    let want = match minor {
        36 | 37 => format!("emulating Kubernetes v1.37 (min compatibility v1.36): kube-apiserver {git} is served by a v1.37 controller manager"),
        34 | 35 => format!("emulating Kubernetes v1.{minor} (min compatibility v1.34): kube-apiserver {git} is older than v1.36: --emulated-version defaults to its minor"),
        _ => panic!("kube-apiserver {git} is outside the window this scenario checks"),
    };
    assert!(line.ends_with(&want), "{line}");
}

/// An API server whose authorizer is still warming up answers 403 for a few seconds, also
/// on `/version` right after `/healthz` answered: edgekcm asks again (saying so) and starts.
#[test]
fn a_403_burst_on_version_is_waited_out() {
    let t = crate::common::sandbox();
    t.sandbox()
        .expect("sandbox")
        .faults()
        .fail_for(Duration::from_secs(3), 403, Some("/version"));
    let mut kcm = crate::common::Kcm::start(
        &t,
        "version403",
        &["--controllers=serviceaccount", "--leader-elect=false"],
    );
    kcm.served_namespace(&t.admin(), "v403", Duration::from_secs(30));
    let log = kcm.log_text();
    assert!(
        log.contains("reading the API server's /version (0s of 10s): 403"),
        "{log}"
    );
    assert!(log.contains("emulating Kubernetes v1.37"), "{log}");
}
