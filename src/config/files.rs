//! The key and certificate files of the command line, checked at start as
//! kube-controller-manager v1.28 checks them when it starts the controllers that read them,
//! and refused with its messages:
//!
//! - `--service-account-private-key-file`, when the token controller is enabled:
//!   `error reading key for service account token controller: ...`;
//! - `--root-ca-file`, when the token controller (with a key) or the root CA publisher is
//!   enabled: `error parsing root-ca-file at <path>: ...`;
//! - the `--cluster-signing-*` files, when the CSR signer is enabled and has files, for each
//!   signer in upstream's order: `failed to start kubernetes.io/<signer> certificate
//!   controller: error reading CA cert file "<cert>": ...`.
//!
//! Upstream finds these only once it has waited for the API server and won leader election;
//! edgekcm checks them before it connects. The controllers these files are for are not all in
//! edgekcm yet; the files are refused all the same, so a command line that kube-controller-manager
//! would refuse is refused here too.

use std::path::Path;

use super::{Config, SignerFiles};
use crate::error::{Error, Result};
use crate::pki::gopem;

/// Go's words for a file that cannot be read (`open /x: no such file or directory`).
pub fn go_read_error(path: &Path, e: &std::io::Error) -> String {
    let op = if e.kind() == std::io::ErrorKind::IsADirectory {
        "read"
    } else {
        "open"
    };
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::IsADirectory => "is a directory".to_string(),
        _ => {
            // "Too many open files (os error 24)" -> "too many open files"
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            let mut chars = text.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => text,
            }
        }
    };
    format!("{op} {}: {why}", path.display())
}

fn read(path: &Path) -> std::result::Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| go_read_error(path, &e))
}

/// kube-controller-manager's `readCA`: the file's bytes if they hold a certificate.
pub fn read_ca(path: &Path) -> Result<Vec<u8>> {
    let fail = |why: String| {
        Error::Config(format!(
            "error parsing root-ca-file at {}: {why}",
            path.display()
        ))
    };
    let data = read(path).map_err(fail)?;
    gopem::parse_certs_pem(&data).map_err(fail)?;
    Ok(data)
}

/// `keyutil.PrivateKeyFromFile` and the token generator's key types.
fn check_service_account_key(path: &Path) -> Result<()> {
    let fail = |why: String| {
        Error::Config(format!(
            "error reading key for service account token controller: {why}"
        ))
    };
    let data = read(path).map_err(fail)?;
    let key = gopem::parse_private_key_pem(&data).map_err(|e| {
        fail(format!(
            "error reading private key file {}: {e}",
            path.display()
        ))
    })?;
    let go_type = match key {
        gopem::PrivateKey::Ed25519 => "ed25519.PrivateKey",
        gopem::PrivateKey::X25519 => "*ecdh.PrivateKey",
        _ => return Ok(()),
    };
    Err(Error::Config(format!(
        "failed to build token generator: unknown private key type {go_type}, must be *rsa.PrivateKey, *ecdsa.PrivateKey, or jose.OpaqueSigner"
    )))
}

/// The CSR signer's `newCAProvider` for one signer's pair.
fn check_signer(cert: &str, key: &str) -> std::result::Result<(), String> {
    let wrap = |why: String| format!("error reading CA cert file {cert:?}: {why}");
    if cert.is_empty() || key.is_empty() {
        return Err(wrap("missing filename for serving cert".into()));
    }
    let name = format!("csr-controller::{cert}::{key}");
    let cert_pem = read(Path::new(cert)).map_err(wrap)?;
    let key_pem = read(Path::new(key)).map_err(wrap)?;
    if cert_pem.is_empty() || key_pem.is_empty() {
        return Err(wrap(format!("missing content for serving cert {name:?}")));
    }
    gopem::x509_key_pair(&cert_pem, &key_pem).map_err(wrap)?;
    // setCA: exactly one certificate, a usable key.
    let n = gopem::parse_certs_pem(&cert_pem)
        .map_err(|e| format!("error reading CA cert file {name:?}: {e}"))?;
    if n != 1 {
        return Err(format!(
            "error reading CA cert file {name:?}: expected 1 certificate, found {n}"
        ));
    }
    gopem::parse_private_key_pem(&key_pem)
        .map_err(|e| format!("error reading CA key file {name:?}: {e}"))?;
    Ok(())
}

fn path_text(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn check_signing(cfg: &Config) -> Result<()> {
    let cs = &cfg.cluster_signing;
    let signers: [(&str, &SignerFiles); 4] = [
        ("kubernetes.io/kubelet-serving", &cs.kubelet_serving),
        (
            "kubernetes.io/kube-apiserver-client-kubelet",
            &cs.kubelet_client,
        ),
        (
            "kubernetes.io/kube-apiserver-client",
            &cs.kube_apiserver_client,
        ),
        ("kubernetes.io/legacy-unknown", &cs.legacy_unknown),
    ];
    let specific = signers
        .iter()
        .any(|(_, s)| s.cert_file.is_some() || s.key_file.is_some());
    for (signer, own) in signers {
        let (cert, key) = if specific {
            (path_text(&own.cert_file), path_text(&own.key_file))
        } else {
            (path_text(&cs.cert_file), path_text(&cs.key_file))
        };
        if cert.is_empty() && key.is_empty() {
            continue;
        }
        check_signer(&cert, &key).map_err(|why| {
            Error::Config(format!(
                "failed to start {signer} certificate controller: {why}"
            ))
        })?;
    }
    Ok(())
}

/// Check every file an enabled controller of kube-controller-manager would read at start.
/// `enabled` says whether a controller runs (`ControllerSelection::is_enabled`).
pub fn check(cfg: &Config, enabled: impl Fn(&str) -> bool) -> Result<()> {
    let token_controller = enabled("serviceaccount-token-controller")
        && cfg.sa_controller.service_account_private_key_file.is_some();
    if token_controller {
        if let Some(p) = &cfg.sa_controller.service_account_private_key_file {
            check_service_account_key(p)?;
        }
    }
    if token_controller || enabled("root-ca-certificate-publisher-controller") {
        if let Some(p) = &cfg.sa_controller.root_ca_file {
            read_ca(p)?;
        }
    }
    if enabled("certificatesigningrequest-signing-controller") && cfg.cluster_signing.enabled() {
        check_signing(cfg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_io_errors() {
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            go_read_error(Path::new("/x/y"), &e),
            "open /x/y: no such file or directory"
        );
        let e = std::fs::read("/").unwrap_err();
        assert_eq!(go_read_error(Path::new("/"), &e), "read /: is a directory");
        let e = std::io::Error::from_raw_os_error(24);
        assert_eq!(
            go_read_error(Path::new("/f"), &e),
            "open /f: too many open files"
        );
    }
}
