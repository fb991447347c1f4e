//! Shared harness: a target cluster (the sandbox, or a real kube-apiserver from
//! `KCM_E2E_KUBECONFIG`), an admin client, and edgekcm running as a child process.

pub mod metrics_server;
pub mod nodes;

use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig;
use edgekcm::api::resources::{NAMESPACES, SERVICEACCOUNTS};
use edgekcm_sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub enum Target {
    Sandbox { sb: Sandbox, dir: TempDir },
    Real { kubeconfig: PathBuf, dir: TempDir },
}

pub struct TempDir(pub PathBuf);
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "edgekcm-{tag}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn sandbox_with(opts: SandboxOptions) -> Target {
    let sb = Sandbox::start(opts).expect("sandbox starts");
    let dir = TempDir::new("sb");
    sb.write_kubeconfig(&dir.0.join("kubeconfig"))
        .expect("kubeconfig");
    Target::Sandbox { sb, dir }
}

pub fn sandbox() -> Target {
    sandbox_with(SandboxOptions::default())
}

/// The real cluster of `KCM_E2E_KUBECONFIG`. The `real_*` scenarios are ignored unless asked
/// for (`just e2e`), so a missing configuration is a failure, never a silent pass.
pub fn real(scenario: &str) -> Target {
    match std::env::var("KCM_E2E_KUBECONFIG") {
        Ok(p) if !p.is_empty() => Target::Real {
            kubeconfig: PathBuf::from(p),
            dir: TempDir::new("e2e"),
        },
        _ => panic!(
            "e2e scenario {scenario:?} needs a real kube-apiserver: set KCM_E2E_KUBECONFIG \
             (and KCM_E2E_KCM_ARGS) and run `just e2e`"
        ),
    }
}

impl Target {
    pub fn kubeconfig(&self) -> PathBuf {
        match self {
            Target::Sandbox { dir, .. } => dir.0.join("kubeconfig"),
            Target::Real { kubeconfig, .. } => kubeconfig.clone(),
        }
    }
    pub fn dir(&self) -> &Path {
        match self {
            Target::Sandbox { dir, .. } | Target::Real { dir, .. } => &dir.0,
        }
    }
    pub fn sandbox(&self) -> Option<&Sandbox> {
        match self {
            Target::Sandbox { sb, .. } => Some(sb),
            Target::Real { .. } => None,
        }
    }
    pub fn is_real(&self) -> bool {
        matches!(self, Target::Real { .. })
    }

    pub fn admin(&self) -> Client {
        let cfg = kubeconfig::load(Some(&self.kubeconfig()), None).expect("admin kubeconfig");
        Client::new(&cfg, 0.0, 1, "edgekcm-tests").expect("admin client")
    }

    /// The flags edgekcm runs with against this target: for a real cluster,
    /// `KCM_E2E_KCM_ARGS` (e.g. kubeadm's flags with their paths) or just the kubeconfig.
    pub fn edgekcm_args(&self) -> Vec<String> {
        match self {
            Target::Real { kubeconfig, .. } => match std::env::var("KCM_E2E_KCM_ARGS") {
                Ok(a) if !a.trim().is_empty() => a.split_whitespace().map(str::to_string).collect(),
                _ => vec![format!("--kubeconfig={}", kubeconfig.display())],
            },
            Target::Sandbox { .. } => vec![format!("--kubeconfig={}", self.kubeconfig().display())],
        }
    }

    /// The minor version of the target's API server, from its `/version` (the sandbox says 37).
    pub fn server_minor(&self) -> u32 {
        let v: Value =
            serde_json::from_str(&self.admin().get_raw("/version").expect("GET /version"))
                .expect("/version is JSON");
        let minor = v["minor"].as_str().unwrap_or_default();
        minor
            .trim_end_matches('+')
            .parse()
            .unwrap_or_else(|_| panic!("/version's minor {minor:?}"))
    }

    /// Whether the API server is at least v1.`minor`; when not, says on stderr that `what`
    /// is not checked there (or checked as the older minor behaves), so the run shows it.
    pub fn at_least(&self, minor: u32, what: &str) -> bool {
        let have = self.server_minor();
        if have < minor {
            eprintln!(
                "kube-apiserver v1.{have}: {what} is v1.{minor}'s; the scenario checks \
                 v1.{have}'s behaviour instead or skips that part"
            );
        }
        have >= minor
    }
}

/// edgekcm as a child process; killed on drop. Its log goes to a file in the target's dir.
pub struct Kcm {
    pub child: Child,
    pub log: PathBuf,
}

impl Kcm {
    /// A new namespace (named from `prefix`) once edgekcm made its `default` ServiceAccount,
    /// within `limit`; fails if edgekcm exits meanwhile.
    pub fn served_namespace(&mut self, admin: &Client, prefix: &str, limit: Duration) -> String {
        let ns = unique(prefix);
        create_namespace(admin, &ns);
        eventually(limit, "the default ServiceAccount", || {
            assert!(
                self.exited().is_none(),
                "edgekcm exited:\n{}",
                self.log_text()
            );
            admin.get(&SERVICEACCOUNTS, Some(&ns), "default").ok()
        });
        ns
    }

    pub fn start(t: &Target, tag: &str, extra: &[&str]) -> Kcm {
        let log = t.dir().join(format!("edgekcm-{tag}.log"));
        let f = std::fs::File::create(&log).expect("log file");
        let mut args = t.edgekcm_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        if !args.iter().any(|a| a.starts_with("--secure-port")) {
            args.push("--secure-port=0".into());
        }
        if !args
            .iter()
            .any(|a| a.starts_with("--leader-elect=") || a == "--leader-elect")
        {
            args.push("--leader-elect=false".into());
        }
        // Every write in the log, unless the test asks for another verbosity.
        if !extra
            .iter()
            .any(|a| a.starts_with("--v=") || a.starts_with("-v") || *a == "--v")
        {
            args.push("--v=2".into());
        }
        // KCM_E2E_KCM_BINARY runs another controller manager (upstream's, for a side-by-side
        // comparison) with the same flags.
        let binary = std::env::var("KCM_E2E_KCM_BINARY")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_edgekcm").to_string());
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("edgekcm starts");
        Kcm { child, log }
    }
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Waits (20 s at most) for a log line containing `text` while the process runs: a
    /// gated controller's line saying it stays off.
    pub fn wait_for_line(&mut self, what: &str, text: &str) {
        eventually(Duration::from_secs(20), what, || {
            assert!(self.exited().is_none(), "exited:\n{}", self.log_text());
            self.log_text().contains(text).then_some(())
        });
    }
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Kcm {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- edgekcm log {} ----\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}

/// Poll `f` until it returns Some, or panic after `limit` with `what`.
pub fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > end {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}

pub fn create_namespace(c: &Client, name: &str) -> Value {
    c.create(
        &NAMESPACES,
        None,
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":name}}),
    )
    .expect("create namespace")
}

/// Delete a pod at once (grace period 0), as a kubelet confirming it would; the error is the
/// caller's to judge.
#[allow(dead_code)]
pub fn delete_pod_now(c: &Client, ns: &str, name: &str) -> edgekcm::Result<()> {
    let now = edgekcm::api::client::DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    c.delete(&edgekcm::api::resources::PODS, Some(ns), name, &now)
}

pub fn delete_namespace(c: &Client, name: &str) {
    let _ = c.delete(&NAMESPACES, None, name, &Default::default());
}

/// edgekcm with `controllers` (a `--controllers=...` flag) unless the target's flags already
/// name the controllers.
pub fn start_with(t: &Target, tag: &str, controllers: &str) -> Kcm {
    let named = t
        .edgekcm_args()
        .iter()
        .any(|a| a.starts_with("--controllers"));
    let extra: Vec<&str> = if named { vec![] } else { vec![controllers] };
    Kcm::start(t, tag, &extra)
}

/// A fresh namespace with its `default` ServiceAccount (a real apiserver admits pods only
/// then, and the serviceaccount-controller may not be among the controllers under test).
/// On drop, the objects of `cleanup` kinds left in it are deleted, then the namespace.
pub struct Ns {
    pub admin: Client,
    pub name: String,
    cleanup: Vec<edgekcm::api::Kind>,
}

impl Ns {
    pub fn with_cleanup(t: &Target, prefix: &str, cleanup: &[edgekcm::api::Kind]) -> Ns {
        let admin = t.admin();
        let name = unique(prefix);
        create_namespace(&admin, &name);
        let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default"}});
        let _ = admin.create(&edgekcm::api::resources::SERVICEACCOUNTS, Some(&name), &sa);
        Ns {
            admin,
            name,
            cleanup: cleanup.to_vec(),
        }
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let ns = Some(self.name.as_str());
        for kind in &self.cleanup {
            let opts = edgekcm::api::client::ListOptions::default();
            if let Ok(list) = self.admin.list(kind, ns, &opts) {
                for o in list.items {
                    let name = o["metadata"]["name"].as_str().unwrap_or("");
                    let _ = self.admin.delete(kind, ns, name, &Default::default());
                }
            }
        }
        delete_namespace(&self.admin, &self.name);
    }
}

/// Deletes what a scenario made even when it fails half-way (namespaces, CRDs; objects held
/// by the test's own finalizer are released first).
pub struct Cleanup {
    pub admin: Client,
    pub namespaces: Vec<String>,
    pub crds: Vec<String>,
    pub held: Vec<(edgekcm::api::Kind, String, String)>,
}

impl Cleanup {
    pub fn new(admin: Client) -> Self {
        Cleanup {
            admin,
            namespaces: Vec::new(),
            crds: Vec::new(),
            held: Vec::new(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (k, ns, name) in &self.held {
            let _ = self.admin.patch(
                k,
                Some(ns),
                name,
                edgekcm::api::client::PatchType::Merge,
                &serde_json::json!({"metadata": {"finalizers": null}}),
                None,
            );
        }
        for ns in &self.namespaces {
            delete_namespace(&self.admin, ns);
        }
        for c in &self.crds {
            let _ = self
                .admin
                .delete(&edgekcm::api::resources::CRDS, None, c, &Default::default());
        }
    }
}

/// A new ServiceAccount `name` in `ns`, and a token for it (TokenRequest, one hour).
pub fn service_account_token(admin: &Client, ns: &str, name: &str) -> String {
    admin
        .create(
            &edgekcm::api::resources::SERVICEACCOUNTS,
            Some(ns),
            &json!({"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":name}}),
        )
        .expect("create ServiceAccount");
    let tr = admin
        .create_subresource(
            &edgekcm::api::resources::SERVICEACCOUNTS,
            Some(ns),
            name,
            "token",
            &json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest",
                    "spec":{"expirationSeconds":3600}}),
        )
        .expect("TokenRequest");
    tr["status"]["token"].as_str().expect("token").to_string()
}

/// An HTTPS client for edgekcm's secure port that does not verify the server's (self-signed)
/// certificate, optionally presenting a client certificate `(cert PEM, key PEM)`.
pub fn insecure_https_agent(client_cert: Option<(&str, &str)>) -> ureq::Agent {
    use ureq::tls::{Certificate, ClientCert, PrivateKey, TlsConfig};
    let mut tls = TlsConfig::builder()
        .disable_verification(true)
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ));
    if let Some((cert, key)) = client_cert {
        tls = tls.client_cert(Some(ClientCert::new_with_certs(
            &[Certificate::from_pem(cert.as_bytes()).unwrap().to_owned()],
            PrivateKey::from_pem(key.as_bytes()).unwrap().to_owned(),
        )));
    }
    ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .new_agent()
}

/// A TLS 1.3 server configuration for 127.0.0.1 with a new self-signed certificate, whose PEM
/// is returned for the client to trust; client certificates are checked by `verifier` when
/// one is given.
pub fn loopback_tls_server(
    verifier: Option<std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> (std::sync::Arc<rustls::ServerConfig>, String) {
    use rustls_pki_types::pem::PemObject;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let cert = params.self_signed(&key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap();
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
    (std::sync::Arc::new(config), cert.pem())
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free loopback port")
        .local_addr()
        .expect("local address")
        .port()
}

/// The kubeconfig edgekcm runs with on `t`, also used for delegated authn/authz.
pub fn kubeconfig_arg(t: &Target) -> String {
    t.edgekcm_args()
        .iter()
        .find_map(|a| a.strip_prefix("--kubeconfig=").map(str::to_string))
        .unwrap_or_else(|| t.kubeconfig().display().to_string())
}

/// The secure port on a free loopback port with a self-signed certificate, not started yet.
pub fn loopback_server() -> edgekcm::server::Server {
    use edgekcm::server::{Health, ServeConfig, Server};
    let mut s = Server::new(
        ServeConfig {
            bind_address: "127.0.0.1".parse().expect("loopback"),
            port: 0,
            cert_dir: None,
            tls_cert_file: None,
            tls_private_key_file: None,
        },
        Health::new(),
    );
    s.set_ephemeral_port(true);
    s
}

/// One declaration per scenario: `name => function` (a `fn(&Target)` of the test file) gives the test
/// `sandbox_scenarios::name`, run by `cargo test` on the in-process sandbox, and
/// `real_scenarios::name`, run by `just e2e` against the real kube-apiserver of
/// `KCM_E2E_KUBECONFIG` and shown as ignored otherwise (never as passed).
#[macro_export]
macro_rules! scenarios {
    ($($name:ident => $f:ident),* $(,)?) => {
        mod sandbox_scenarios {
            $(
                #[test]
                fn $name() {
                    super::$f(&$crate::common::sandbox());
                }
            )*
        }
        mod real_scenarios {
            $(
                #[test]
                #[ignore = "needs a real kube-apiserver: KCM_E2E_KUBECONFIG=... just e2e"]
                fn $name() {
                    super::$f(&$crate::common::real(stringify!($name)));
                }
            )*
        }
    };
}
