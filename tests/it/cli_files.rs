//! Key and certificate files named on the command line are checked at start, before edgekcm
//! connects, as kube-controller-manager v1.28 checks them when it starts the controllers that
//! read them; the messages are upstream's (compared with kube-controller-manager v1.28.4).

use crate::common::TempDir;
use edgekcm::certs::{generate, CertsOptions};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_edgekcm");

/// A directory with two PKIs from `edgekcm certs` (a/, b/) and a few broken files.
fn files() -> TempDir {
    let t = TempDir::new("cli-files");
    for d in ["a", "b"] {
        generate(&CertsOptions::new(t.0.join(d))).unwrap();
    }
    std::fs::write(t.0.join("bad.crt"), "not pem\n").unwrap();
    std::fs::write(t.0.join("garbage.key"), "garbage\n").unwrap();
    std::fs::write(t.0.join("empty.crt"), "").unwrap();
    let ca = std::fs::read_to_string(t.0.join("a/ca.crt")).unwrap();
    std::fs::write(t.0.join("two.crt"), format!("{ca}{ca}")).unwrap();
    t
}

/// Run edgekcm in `dir` with `flags` and a kubeconfig that does not exist (read right after
/// the files are checked); the error of its one JSON log line and its exit status.
fn failure(dir: &Path, flags: &str) -> (String, Option<i32>) {
    let out = Command::new(BIN)
        .current_dir(dir)
        .args(flags.split_whitespace())
        .args([
            "--kubeconfig=/nonexistent/kubeconfig",
            "--secure-port=0",
            "--leader-elect=false",
            "--logging-format=json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{flags}: {err}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    (
        v["err"].as_str().unwrap_or_default().to_string(),
        out.status.code(),
    )
}

#[test]
fn files_are_checked_with_upstreams_messages() {
    let t = files();
    let cases = [
        (
            "--root-ca-file=bad.crt --controllers=root-ca-cert-publisher",
            "error parsing root-ca-file at bad.crt: data does not contain any valid RSA or ECDSA certificates",
        ),
        (
            "--root-ca-file=/nonexistent/ca.crt --controllers=root-ca-cert-publisher",
            "error parsing root-ca-file at /nonexistent/ca.crt: open /nonexistent/ca.crt: no such file or directory",
        ),
        (
            "--root-ca-file=a --controllers=root-ca-cert-publisher",
            "error parsing root-ca-file at a: read a: is a directory",
        ),
        (
            "--service-account-private-key-file=/nonexistent/sa.key --controllers=serviceaccount-token",
            "error reading key for service account token controller: open /nonexistent/sa.key: no such file or directory",
        ),
        (
            "--service-account-private-key-file=garbage.key --controllers=serviceaccount-token",
            "error reading key for service account token controller: error reading private key file garbage.key: data does not contain a valid RSA or ECDSA private key",
        ),
        (
            "--service-account-private-key-file=a/sa.key --root-ca-file=bad.crt --controllers=serviceaccount-token",
            "error parsing root-ca-file at bad.crt: data does not contain any valid RSA or ECDSA certificates",
        ),
        (
            "--cluster-signing-cert-file=/nonexistent/ca.crt --cluster-signing-key-file=/nonexistent/ca.key --controllers=csrsigning",
            "failed to start kubernetes.io/kubelet-serving certificate controller: error reading CA cert file \"/nonexistent/ca.crt\": open /nonexistent/ca.crt: no such file or directory",
        ),
        (
            "--cluster-signing-cert-file=a/ca.crt --cluster-signing-key-file=b/ca.key --controllers=csrsigning",
            "failed to start kubernetes.io/kubelet-serving certificate controller: error reading CA cert file \"a/ca.crt\": tls: private key does not match public key",
        ),
        (
            "--cluster-signing-cert-file=two.crt --cluster-signing-key-file=a/ca.key --controllers=csrsigning",
            "failed to start kubernetes.io/kubelet-serving certificate controller: error reading CA cert file \"csr-controller::two.crt::a/ca.key\": expected 1 certificate, found 2",
        ),
        (
            "--cluster-signing-cert-file=a/ca.key --cluster-signing-key-file=a/ca.crt --controllers=csrsigning",
            "failed to start kubernetes.io/kubelet-serving certificate controller: error reading CA cert file \"a/ca.key\": tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched",
        ),
        (
            "--cluster-signing-cert-file=empty.crt --cluster-signing-key-file=a/ca.key --controllers=csrsigning",
            "failed to start kubernetes.io/kubelet-serving certificate controller: error reading CA cert file \"empty.crt\": missing content for serving cert \"csr-controller::empty.crt::a/ca.key\"",
        ),
        (
            "--cluster-signing-legacy-unknown-cert-file=a/ca.crt --cluster-signing-legacy-unknown-key-file=garbage.key --controllers=csrsigning",
            "failed to start kubernetes.io/legacy-unknown certificate controller: error reading CA cert file \"a/ca.crt\": tls: failed to find any PEM data in key input",
        ),
    ];
    for (flags, want) in cases {
        let (err, code) = failure(&t.0, flags);
        assert_eq!(err, want, "{flags}");
        assert_eq!(code, Some(1), "{flags}");
    }
}

#[test]
fn files_of_controllers_switched_off_are_not_read() {
    // Upstream reads a file only when it starts the controller that uses it; here the
    // check passes and edgekcm goes on to read its kubeconfig.
    let t = files();
    for flags in [
        "--root-ca-file=bad.crt --controllers=deployment",
        "--service-account-private-key-file=garbage.key --controllers=*,-serviceaccount-token",
        "--cluster-signing-cert-file=bad.crt --cluster-signing-key-file=garbage.key --controllers=*,-csrsigning",
        // The token controller without a key does not read --root-ca-file.
        "--root-ca-file=bad.crt --controllers=serviceaccount-token",
    ] {
        let (err, _) = failure(&t.0, flags);
        assert!(
            err.starts_with("kubeconfig /nonexistent/kubeconfig: "),
            "{flags}: {err}"
        );
    }
}

#[test]
fn good_files_pass() {
    // kubeadm's flags with files from `edgekcm certs`, kubeadm's RSA key forms included.
    let t = files();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rsa-pkcs1.key"),
        t.0.join("rsa.key"),
    )
    .unwrap();
    for flags in [
        "--root-ca-file=a/ca.crt --service-account-private-key-file=a/sa.key \
         --cluster-signing-cert-file=a/ca.crt --cluster-signing-key-file=a/ca.key \
         --controllers=*,bootstrapsigner,tokencleaner",
        "--service-account-private-key-file=rsa.key",
        "--cluster-signing-kubelet-serving-cert-file=a/apiserver.crt \
         --cluster-signing-kubelet-serving-key-file=a/apiserver.key \
         --cluster-signing-legacy-unknown-cert-file=b/ca.crt \
         --cluster-signing-legacy-unknown-key-file=b/ca.key",
    ] {
        let (err, _) = failure(&t.0, flags);
        assert!(
            err.starts_with("kubeconfig /nonexistent/kubeconfig: "),
            "{flags}: {err}"
        );
    }
}
