//! Where the API server is and how to authenticate: kubeconfig files, `--master`, and the
//! in-cluster service-account configuration.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

use crate::error::{Error, Result};

/// Default service-account mount of a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Connection settings for the API server.
#[derive(Clone, Default, PartialEq)]
pub struct RestConfig {
    /// `https://host:port` or `http://host:port`, without a trailing slash.
    pub server: String,
    /// CA bundle (PEM) to trust: `certificate-authority-data` or the `certificate-authority` file.
    pub ca_pem: Option<Vec<u8>>,
    /// Only `certificate-authority-data` (what the root-CA publisher falls back to).
    pub ca_inline: Option<Vec<u8>>,
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
    pub token: Option<String>,
    /// A token file the client re-reads when it changes (in-cluster rotation, `tokenFile`).
    pub token_file: Option<PathBuf>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
    /// `kubeconfig /etc/x.conf`, `--master`, or `in-cluster config`: for messages.
    pub source: String,
}

impl fmt::Debug for RestConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn bytes(v: &Option<Vec<u8>>) -> String {
            match v {
                Some(b) => format!("<{} bytes>", b.len()),
                None => "None".to_string(),
            }
        }
        fn secret<T>(v: &Option<T>) -> &'static str {
            if v.is_some() {
                "<redacted>"
            } else {
                "None"
            }
        }
        f.debug_struct("RestConfig")
            .field("server", &self.server)
            .field("ca_pem", &bytes(&self.ca_pem))
            .field("ca_inline", &bytes(&self.ca_inline))
            .field("client_cert_pem", &bytes(&self.client_cert_pem))
            .field("client_key_pem", &secret(&self.client_key_pem))
            .field("token", &secret(&self.token))
            .field("token_file", &self.token_file)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("tls_server_name", &self.tls_server_name)
            .field("source", &self.source)
            .finish()
    }
}

/// Text of an I/O error without the `(os error N)` suffix, as Go prints it.
pub(crate) fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Build the configuration like client-go's `BuildConfigFromFlags`: a kubeconfig file if given
/// (its current context; `master` replaces the server); only `master`: that URL without
/// credentials; neither: the in-cluster configuration.
pub fn load(kubeconfig: Option<&Path>, master: Option<&str>) -> Result<RestConfig> {
    let master = master.filter(|m| !m.is_empty());
    let kubeconfig = kubeconfig.filter(|p| !p.as_os_str().is_empty());
    match (kubeconfig, master) {
        (Some(path), master) => {
            let origin = format!("kubeconfig {}", path.display());
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Config(format!("{origin}: cannot read: {}", io_text(&e))))?;
            let base = path.parent().unwrap_or_else(|| Path::new("."));
            let mut cfg = from_kubeconfig_str(&text, base, &origin)?;
            if let Some(m) = master {
                cfg.server = normalize_server(m, has_tls_settings(&cfg));
            }
            Ok(cfg)
        }
        (None, Some(m)) => Ok(RestConfig {
            server: normalize_server(m, false),
            source: "--master".to_string(),
            ..RestConfig::default()
        }),
        (None, None) => in_cluster_from(
            std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            Path::new(SERVICE_ACCOUNT_DIR),
        )
        .map_err(|e| {
            Error::Config(format!(
                "neither --kubeconfig nor --master was given and the in-cluster configuration is not usable: {e}"
            ))
        }),
    }
}

fn has_tls_settings(cfg: &RestConfig) -> bool {
    cfg.ca_pem.is_some() || cfg.client_cert_pem.is_some() || cfg.insecure_skip_tls_verify
}

/// Add a scheme when the server has none (https when TLS settings exist, as client-go does)
/// and drop trailing slashes.
fn normalize_server(server: &str, tls: bool) -> String {
    let s = server.trim();
    let s = if s.contains("://") {
        s.to_string()
    } else if tls {
        format!("https://{s}")
    } else {
        format!("http://{s}")
    };
    s.trim_end_matches('/').to_string()
}

/// The in-cluster configuration from the service environment and a service-account directory.
pub fn in_cluster_from(
    env_host: Option<String>,
    env_port: Option<String>,
    sa_dir: &Path,
) -> Result<RestConfig> {
    let (host, port) = match (env_host, env_port) {
        (Some(h), Some(p)) if !h.is_empty() && !p.is_empty() => (h, p),
        _ => {
            return Err(Error::Config(
                "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined".to_string(),
            ))
        }
    };
    let token_path = sa_dir.join("token");
    let token = std::fs::read_to_string(&token_path).map_err(|e| {
        Error::Config(format!(
            "in-cluster config: cannot read token {}: {}",
            token_path.display(),
            io_text(&e)
        ))
    })?;
    if token.trim().is_empty() {
        return Err(Error::Config(format!(
            "in-cluster config: token file {} is empty",
            token_path.display()
        )));
    }
    let ca_path = sa_dir.join("ca.crt");
    // As upstream, a missing CA file is not fatal here; the client then has nothing to trust.
    let ca_pem = std::fs::read(&ca_path).ok();
    let host_port = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(RestConfig {
        server: format!("https://{host_port}"),
        ca_pem,
        ca_inline: None,
        token_file: Some(token_path),
        source: "in-cluster config".to_string(),
        ..RestConfig::default()
    })
}

/// Find `name` in a kubeconfig list (`clusters`, `contexts`, `users`) and return its inner
/// object (`cluster`, `context`, `user`).
fn find_named<'a>(doc: &'a Value, list: &str, inner: &str, name: &str) -> Option<&'a Value> {
    doc.get(list)?
        .as_array()?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
        .map(|e| e.get(inner).unwrap_or(&Value::Null))
}

fn str_field<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn bool_field(obj: &Value, key: &str) -> bool {
    match obj.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

/// The first way of authenticating a kubeconfig user that edgekcm does not support, set
/// (non-empty) in `user`: its key and what it is.
fn unsupported_auth(user: &Value) -> Option<(&'static str, &'static str)> {
    [
        ("exec", "exec credential plugins"),
        ("auth-provider", "auth-provider plugins"),
        ("username", "basic authentication (username/password)"),
        ("password", "basic authentication (username/password)"),
        ("as", "impersonation"),
        ("as-groups", "impersonation"),
        ("as-uid", "impersonation"),
        ("as-user-extra", "impersonation"),
    ]
    .into_iter()
    .find(|(key, _)| match user.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    })
}

/// Parse the text of a kubeconfig (YAML or JSON). Relative file paths are resolved against
/// `base_dir`; `origin` names the file in messages (`kubeconfig /etc/kubernetes/x.conf`).
pub fn from_kubeconfig_str(text: &str, base_dir: &Path, origin: &str) -> Result<RestConfig> {
    let err = |msg: String| Error::Config(format!("{origin}: {msg}"));
    let doc = super::yaml::first_document(text).map_err(|e| err(format!("not valid YAML: {e}")))?;
    if !doc.is_object() {
        return Err(err("no configuration has been provided".to_string()));
    }
    let ctx_name = str_field(&doc, "current-context")
        .ok_or_else(|| err("current-context is not set".to_string()))?;
    let ctx = find_named(&doc, "contexts", "context", ctx_name)
        .ok_or_else(|| err(format!("context {ctx_name:?} not found")))?;
    let cluster_name = str_field(ctx, "cluster")
        .ok_or_else(|| err(format!("context {ctx_name:?} names no cluster")))?;
    let cluster = find_named(&doc, "clusters", "cluster", cluster_name)
        .ok_or_else(|| err(format!("cluster {cluster_name:?} not found")))?;

    let resolve = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base_dir.join(p)
        }
    };
    let read_file = |what: &str, who: &str, p: &str| -> Result<Vec<u8>> {
        let path = resolve(p);
        std::fs::read(&path).map_err(|e| {
            err(format!(
                "{who}cannot read {what} {}: {}",
                path.display(),
                io_text(&e)
            ))
        })
    };
    let decode = |what: &str, who: &str, data: &str| -> Result<Vec<u8>> {
        let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|_| err(format!("{who}{what} is not valid base64")))
    };

    let cluster_who = format!("cluster {cluster_name:?}: ");
    let server = str_field(cluster, "server")
        .ok_or_else(|| err(format!("cluster {cluster_name:?} has no server")))?;
    if str_field(cluster, "proxy-url").is_some() {
        return Err(err(format!(
            "cluster {cluster_name:?}: proxy-url is not supported by edgekcm"
        )));
    }
    let insecure = bool_field(cluster, "insecure-skip-tls-verify");
    let ca_data = str_field(cluster, "certificate-authority-data");
    let ca_file = str_field(cluster, "certificate-authority");
    if insecure && (ca_data.is_some() || ca_file.is_some()) {
        return Err(err(format!(
            "cluster {cluster_name:?}: insecure-skip-tls-verify: specifying a root certificates file with the insecure flag is not allowed"
        )));
    }
    let ca_inline = match ca_data {
        Some(d) => Some(decode("certificate-authority-data", &cluster_who, d)?),
        None => None,
    };
    let ca_pem = match (&ca_inline, ca_file) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(f)) => Some(read_file("certificate-authority", &cluster_who, f)?),
        (None, None) => None,
    };
    let tls_server_name = str_field(cluster, "tls-server-name").map(str::to_string);

    let mut cfg = RestConfig {
        server: String::new(),
        ca_pem,
        ca_inline,
        insecure_skip_tls_verify: insecure,
        tls_server_name,
        source: origin.to_string(),
        ..RestConfig::default()
    };

    if let Some(user_name) = str_field(ctx, "user") {
        let user = find_named(&doc, "users", "user", user_name)
            .ok_or_else(|| err(format!("user {user_name:?} not found")))?;
        let who = format!("user {user_name:?}: ");
        if let Some((key, what)) = unsupported_auth(user) {
            return Err(err(format!(
                "{who}edgekcm does not support {what} ({key}); use a client certificate or a token"
            )));
        }
        let cert = match (
            str_field(user, "client-certificate-data"),
            str_field(user, "client-certificate"),
        ) {
            (Some(d), _) => Some(decode("client-certificate-data", &who, d)?),
            (None, Some(f)) => Some(read_file("client-certificate", &who, f)?),
            (None, None) => None,
        };
        let key = match (
            str_field(user, "client-key-data"),
            str_field(user, "client-key"),
        ) {
            (Some(d), _) => Some(decode("client-key-data", &who, d)?),
            (None, Some(f)) => Some(read_file("client-key", &who, f)?),
            (None, None) => None,
        };
        match (&cert, &key) {
            (Some(_), None) => {
                return Err(err(format!(
                    "{who}client-key-data or client-key must be specified to use the clientCert authentication method"
                )))
            }
            (None, Some(_)) => {
                return Err(err(format!(
                    "{who}client-certificate-data or client-certificate must be specified to use the clientCert authentication method"
                )))
            }
            _ => {}
        }
        cfg.client_cert_pem = cert;
        cfg.client_key_pem = key;
        if let Some(t) = str_field(user, "token") {
            cfg.token = Some(t.to_string());
        } else if let Some(f) = str_field(user, "tokenFile") {
            let path = resolve(f);
            // Read once now so a wrong path fails at start-up, as upstream does.
            std::fs::read(&path).map_err(|e| {
                err(format!(
                    "{who}cannot read tokenFile {}: {}",
                    path.display(),
                    io_text(&e)
                ))
            })?;
            cfg.token_file = Some(path);
        }
    }
    cfg.server = normalize_server(server, has_tls_settings(&cfg));
    Ok(cfg)
}

impl RestConfig {
    /// Check that the CA bundle and the client certificate/key parse, and that the client
    /// certificate matches its key (the HTTP client would otherwise fail on first use).
    pub fn validate(&self) -> Result<()> {
        let src = &self.source;
        if !(self.server.starts_with("https://") || self.server.starts_with("http://")) {
            return Err(Error::Config(format!(
                "{src}: server {:?} must be an http:// or https:// URL",
                self.server
            )));
        }
        super::tls::check(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::PrivateKeyDer;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    struct Pair {
        cert: String,
        key: String,
    }

    fn pair(alg: &'static rcgen::SignatureAlgorithm) -> Pair {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "edgekcm-kubeconfig-{tag}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\nclusters:\n- name: c\n  cluster:\n{cluster}users:\n- name: u\n  user:\n{user}"
        )
    }

    #[test]
    fn inline_data() {
        let ca = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let client = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let text = kubeconfig(
            &format!(
                "    server: https://10.0.0.1:6443/\n    certificate-authority-data: {}\n    tls-server-name: api.local\n",
                b64(ca.cert.as_bytes())
            ),
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(client.cert.as_bytes()),
                b64(client.key.as_bytes())
            ),
        );
        let cfg = from_kubeconfig_str(&text, Path::new("/nowhere"), "kubeconfig /x").unwrap();
        assert_eq!(cfg.server, "https://10.0.0.1:6443");
        assert_eq!(cfg.ca_pem.as_deref(), Some(ca.cert.as_bytes()));
        assert_eq!(cfg.ca_inline.as_deref(), Some(ca.cert.as_bytes()));
        assert_eq!(cfg.tls_server_name.as_deref(), Some("api.local"));
        assert_eq!(cfg.source, "kubeconfig /x");
        cfg.validate().unwrap();
        let dbg = format!("{cfg:?}");
        assert!(dbg.contains("<redacted>"));
        assert!(!dbg.contains("PRIVATE KEY"));
    }

    #[test]
    fn relative_files_and_token_file() {
        let dir = tmpdir("files");
        let ca = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let client = pair(&rcgen::PKCS_ECDSA_P384_SHA384);
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        std::fs::write(dir.join("pki/ca.crt"), &ca.cert).unwrap();
        std::fs::write(dir.join("pki/c.crt"), &client.cert).unwrap();
        std::fs::write(dir.join("pki/c.key"), &client.key).unwrap();
        std::fs::write(dir.join("tok"), "abc\n").unwrap();
        let text = kubeconfig(
            "    server: https://127.0.0.1:6443\n    certificate-authority: pki/ca.crt\n",
            "    client-certificate: pki/c.crt\n    client-key: pki/c.key\n    tokenFile: tok\n",
        );
        let path = dir.join("admin.conf");
        std::fs::write(&path, &text).unwrap();
        let cfg = load(Some(&path), None).unwrap();
        assert_eq!(cfg.ca_pem.as_deref(), Some(ca.cert.as_bytes()));
        assert_eq!(cfg.ca_inline, None);
        assert_eq!(cfg.token_file, Some(dir.join("tok")));
        assert_eq!(cfg.token, None);
        assert_eq!(cfg.source, format!("kubeconfig {}", path.display()));
        cfg.validate().unwrap();

        let cfg = load(Some(&path), Some("https://192.168.1.1:6443/")).unwrap();
        assert_eq!(cfg.server, "https://192.168.1.1:6443");
        assert!(cfg.ca_pem.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_file_names_it() {
        let text = kubeconfig(
            "    server: https://127.0.0.1:6443\n    certificate-authority: /definitely/not/here.crt\n",
            "    token: t\n",
        );
        let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubeconfig /x: cluster \"c\": cannot read certificate-authority /definitely/not/here.crt: No such file or directory"
        );
    }

    #[test]
    fn token_and_insecure() {
        let text = kubeconfig(
            "    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\n",
            "    token: sekret\n",
        );
        let cfg = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap();
        assert!(cfg.insecure_skip_tls_verify);
        assert_eq!(cfg.token.as_deref(), Some("sekret"));
        assert!(!format!("{cfg:?}").contains("sekret"));
        cfg.validate().unwrap();
    }

    #[test]
    fn insecure_with_ca_is_refused() {
        let text = kubeconfig(
            "    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\n    certificate-authority-data: AAAA\n",
            "    token: t\n",
        );
        let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
        assert!(err
            .to_string()
            .contains("specifying a root certificates file with the insecure flag is not allowed"));
    }

    #[test]
    fn context_errors() {
        let text = kubeconfig("    server: https://h:1\n", "    token: t\n")
            .replace("current-context: ctx", "current-context: foo");
        let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
        assert_eq!(err.to_string(), "kubeconfig /x: context \"foo\" not found");
        let text = kubeconfig("    server: https://h:1\n", "    token: t\n")
            .replace("current-context: ctx\n", "");
        let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
        assert_eq!(err.to_string(), "kubeconfig /x: current-context is not set");
        let err = from_kubeconfig_str("", Path::new("/"), "kubeconfig /x").unwrap_err();
        assert!(err.to_string().starts_with("kubeconfig /x: "));
    }

    #[test]
    fn bad_base64() {
        let text = kubeconfig(
            "    server: https://h:1\n",
            "    client-certificate-data: AAAA\n    client-key-data: '!!notbase64'\n",
        );
        let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubeconfig /x: user \"u\": client-key-data is not valid base64"
        );
    }

    #[test]
    fn unsupported_auth_names_user() {
        for user in [
            "    exec:\n      command: aws\n      apiVersion: client.authentication.k8s.io/v1\n",
            "    auth-provider:\n      name: gcp\n",
            "    username: admin\n    password: pw\n",
        ] {
            let text = kubeconfig("    server: https://h:1\n", user);
            let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.starts_with("kubeconfig /x: user \"u\": edgekcm does not support"),
                "{msg}"
            );
        }
    }

    #[test]
    fn unsupported_auth_is_the_first_set_key() {
        let u = serde_json::json!({"token": "t", "as": "", "as-groups": ["g"], "exec": null});
        assert_eq!(unsupported_auth(&u), Some(("as-groups", "impersonation")));
        let u = serde_json::json!({"username": "a", "exec": {"command": "x"}});
        assert_eq!(
            unsupported_auth(&u),
            Some(("exec", "exec credential plugins"))
        );
        assert_eq!(unsupported_auth(&serde_json::json!({"token": "t"})), None);
    }

    #[test]
    fn cert_key_mismatch_is_an_error_not_a_panic() {
        let a = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let b = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        let cfg = RestConfig {
            server: "https://h:1".into(),
            client_cert_pem: Some(a.cert.into_bytes()),
            client_key_pem: Some(b.key.into_bytes()),
            source: "kubeconfig /x".into(),
            ..RestConfig::default()
        };
        let err = cfg.validate().unwrap_err();
        assert!(err
            .to_string()
            .starts_with("kubeconfig /x: client certificate and key cannot be used together"));
    }

    #[test]
    fn key_forms_pkcs8_sec1_pkcs1() {
        // PKCS#8 as rcgen writes it.
        let p8 = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert!(p8.key.contains("BEGIN PRIVATE KEY"));
        let cfg = RestConfig {
            server: "https://h:1".into(),
            client_cert_pem: Some(p8.cert.clone().into_bytes()),
            client_key_pem: Some(p8.key.clone().into_bytes()),
            ..RestConfig::default()
        };
        cfg.validate().unwrap();

        // SEC1: the PKCS#8 wrapper of a P-256 key carries the SEC1 structure in its last
        // OCTET STRING; take it out and re-wrap it as "EC PRIVATE KEY".
        let der = match PrivateKeyDer::from_pem_slice(p8.key.as_bytes()).unwrap() {
            PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
            _ => unreachable!(),
        };
        let sec1 = pkcs8_inner(&der);
        let sec1_pem = crate::certs::pem_encode("EC PRIVATE KEY", &sec1);
        let cfg = RestConfig {
            client_key_pem: Some(sec1_pem.into_bytes()),
            ..cfg
        };
        cfg.validate().unwrap();

        // PKCS#1 RSA, checked in as a fixture; its certificate is made at test time.
        let rsa_pem = include_str!("../../tests/fixtures/rsa-pkcs1.key");
        assert!(rsa_pem.contains("BEGIN RSA PRIVATE KEY"));
        let pkcs1 = match PrivateKeyDer::from_pem_slice(rsa_pem.as_bytes()).unwrap() {
            PrivateKeyDer::Pkcs1(k) => k.secret_pkcs1_der().to_vec(),
            _ => unreachable!(),
        };
        let p8 = pkcs8_from_pkcs1(&pkcs1);
        let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
            &rustls_pki_types::PrivatePkcs8KeyDer::from(p8),
            &rcgen::PKCS_RSA_SHA256,
        )
        .unwrap();
        let cert = rcgen::CertificateParams::new(vec!["rsa".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cfg = RestConfig {
            server: "https://h:1".into(),
            client_cert_pem: Some(cert.pem().into_bytes()),
            client_key_pem: Some(rsa_pem.as_bytes().to_vec()),
            ..RestConfig::default()
        };
        cfg.validate().unwrap();
    }

    /// Contents of the last top-level OCTET STRING of a PKCS#8 structure.
    fn pkcs8_inner(der: &[u8]) -> Vec<u8> {
        let (body, _) = tlv(der);
        let mut rest = body;
        let mut last = Vec::new();
        while !rest.is_empty() {
            let tag = rest[0];
            let (content, after) = tlv(rest);
            if tag == 0x04 {
                last = content.to_vec();
            }
            rest = after;
        }
        last
    }

    /// Split one DER TLV: (contents, remaining bytes).
    fn tlv(b: &[u8]) -> (&[u8], &[u8]) {
        let (len, hdr) = if b[1] & 0x80 == 0 {
            (b[1] as usize, 2)
        } else {
            let n = (b[1] & 0x7f) as usize;
            let mut l = 0usize;
            for i in 0..n {
                l = (l << 8) | b[2 + i] as usize;
            }
            (l, 2 + n)
        };
        (&b[hdr..hdr + len], &b[hdr + len..])
    }

    fn der_len(n: usize) -> Vec<u8> {
        if n < 0x80 {
            vec![n as u8]
        } else if n < 0x100 {
            vec![0x81, n as u8]
        } else {
            vec![0x82, (n >> 8) as u8, n as u8]
        }
    }

    fn der(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend(der_len(body.len()));
        v.extend_from_slice(body);
        v
    }

    fn pkcs8_from_pkcs1(pkcs1: &[u8]) -> Vec<u8> {
        let version = [0x02, 0x01, 0x00];
        let alg = der(
            0x30,
            &[
                0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
            ],
        );
        let key = der(0x04, pkcs1);
        let mut body = version.to_vec();
        body.extend(alg);
        body.extend(key);
        der(0x30, &body)
    }

    #[test]
    fn in_cluster() {
        let dir = tmpdir("incluster");
        std::fs::write(dir.join("token"), "tok").unwrap();
        std::fs::write(dir.join("ca.crt"), "ca").unwrap();
        let cfg = in_cluster_from(Some("10.96.0.1".into()), Some("443".into()), &dir).unwrap();
        assert_eq!(cfg.server, "https://10.96.0.1:443");
        assert_eq!(cfg.token_file, Some(dir.join("token")));
        assert_eq!(cfg.ca_pem.as_deref(), Some(&b"ca"[..]));
        assert_eq!(cfg.ca_inline, None);
        assert_eq!(cfg.source, "in-cluster config");
        let cfg = in_cluster_from(Some("fd00::1".into()), Some("443".into()), &dir).unwrap();
        assert_eq!(cfg.server, "https://[fd00::1]:443");
        assert!(in_cluster_from(None, Some("443".into()), &dir).is_err());
        let err =
            in_cluster_from(Some("h".into()), Some("1".into()), &dir.join("nope")).unwrap_err();
        assert!(err.to_string().contains("cannot read token"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deep_or_exploding_yaml_is_a_config_error() {
        let deep = format!("current-context: {}x\n", "- ".repeat(100_000));
        let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let alias = format!("*a{}", i - 1);
            laughs += &format!("a{i}: &a{i} [{}]\n", [alias.as_str(); 10].join(", "));
        }
        for text in [deep, laughs] {
            let err = from_kubeconfig_str(&text, Path::new("/"), "kubeconfig /x").unwrap_err();
            assert!(
                matches!(&err, Error::Config(m) if m.starts_with("kubeconfig /x: not valid YAML: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn master_only_and_json() {
        let cfg = load(None, Some("http://127.0.0.1:8080/")).unwrap();
        assert_eq!(cfg.server, "http://127.0.0.1:8080");
        assert_eq!(cfg.token, None);
        let json = r#"{"apiVersion":"v1","kind":"Config","current-context":"a",
            "contexts":[{"name":"a","context":{"cluster":"c"}}],
            "clusters":[{"name":"c","cluster":{"server":"10.0.0.1:6443"}}]}"#;
        let cfg = from_kubeconfig_str(json, Path::new("/"), "kubeconfig /j").unwrap();
        assert_eq!(cfg.server, "http://10.0.0.1:6443");
    }
}
