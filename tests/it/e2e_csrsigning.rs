//! certificatesigningrequest-signing-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`). Requests are approved by the test
//! through the `approval` subresource; edgekcm signs with `--cluster-signing-*` files.
//!
//! On a real cluster the signing CA is the cluster's (`KCM_E2E_CA_CERT`, `KCM_E2E_CA_KEY`), so
//! that a kubelet client certificate it signs is accepted by the apiserver as
//! `system:node:<name>` (checked with a SelfSubjectReview); on the sandbox a CA made by the
//! test. Certificates are checked against their CA with `openssl verify`.

use crate::common::*;
use base64::Engine as _;
use edgekcm::api::client::Client;
use edgekcm::api::resources::CSRS;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A new CA (EC P-256) in `dir` as `<name>.crt`/`<name>.key`.
fn new_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("edgekcm-e2e-{name}"));
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

/// The cluster's CA on a real apiserver (its client certificates must be accepted), a new one
/// on the sandbox.
fn cluster_ca(t: &Target) -> (PathBuf, PathBuf) {
    if !t.is_real() {
        return new_ca(t.dir(), "cluster-ca");
    }
    match (
        std::env::var("KCM_E2E_CA_CERT"),
        std::env::var("KCM_E2E_CA_KEY"),
    ) {
        (Ok(c), Ok(k)) if !c.is_empty() && !k.is_empty() => (c.into(), k.into()),
        _ => panic!(
            "the signing scenarios need KCM_E2E_CA_CERT and KCM_E2E_CA_KEY: the cluster CA \
             (e.g. /etc/kubernetes/pki/ca.crt and ca.key)"
        ),
    }
}

/// A request (PEM) and its key (PEM).
fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p =
        rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    for o in orgs {
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, *o);
    }
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    (
        p.serialize_request(&key).unwrap().pem().unwrap(),
        key.serialize_pem(),
    )
}

/// Deletes the scenario's requests, even when it fails.
struct Made {
    admin: Client,
    names: Vec<String>,
}
impl Drop for Made {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self.admin.delete(&CSRS, None, n, &Default::default());
        }
    }
}

/// Create a request and approve it as an administrator would; returns its name.
fn approved(made: &mut Made, prefix: &str, pem: &str, signer: &str, usages: &[&str]) -> String {
    let name = unique(prefix);
    let body = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(pem.as_bytes()), "signerName": signer, "usages": usages,
                 "expirationSeconds": 3600}});
    let mut o = made.admin.create(&CSRS, None, &body).expect("create CSR");
    made.names.push(name.clone());
    o["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "E2E", "message": "approved by the test"}]);
    made.admin
        .update_subresource(&CSRS, &o, "approval")
        .expect("approve");
    name
}

fn certificate(admin: &Client, name: &str) -> String {
    let pem = eventually(LIMIT, &format!("{name} signed"), || {
        let o = admin.get(&CSRS, None, name).ok()?;
        let c = o["status"]["certificate"]
            .as_str()
            .filter(|c| !c.is_empty())?;
        base64::engine::general_purpose::STANDARD.decode(c).ok()
    });
    String::from_utf8(pem).expect("PEM")
}

/// `openssl verify` of `cert` against the CA file.
fn verifies(dir: &Path, ca: &Path, cert: &str) -> bool {
    let p = dir.join(format!("{}.crt", unique("leaf")));
    std::fs::write(&p, cert).unwrap();
    Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(ca)
        .arg(&p)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn openssl_text(dir: &Path, cert: &str) -> String {
    let p = dir.join(format!("{}.crt", unique("text")));
    std::fs::write(&p, cert).unwrap();
    let o = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&p)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn signing_flags(cert: &Path, key: &Path) -> Vec<String> {
    vec![
        "--controllers=csrsigning".into(),
        format!("--cluster-signing-cert-file={}", cert.display()),
        format!("--cluster-signing-key-file={}", key.display()),
    ]
}

fn start(t: &Target, tag: &str, flags: &[String]) -> Kcm {
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    Kcm::start(t, tag, &refs)
}

/// The user a client certificate authenticates as on a real apiserver: the name in the
/// answer to a request that user may not make (listing Secrets in kube-system).
fn authenticated_as(t: &Target, cert: &str, key: &str) -> String {
    let server = edgekcm::api::kubeconfig::load(Some(&t.kubeconfig()), None)
        .expect("kubeconfig")
        .server;
    let agent = insecure_https_agent(Some((cert, key)));
    let mut resp = agent
        .get(format!("{server}/api/v1/namespaces/kube-system/secrets"))
        .call()
        .expect("request");
    let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap_or_default())
        .unwrap_or_default();
    let message = v["message"].as_str().unwrap_or_default();
    message
        .split('"')
        .nth(1)
        .filter(|_| message.contains("User \""))
        .unwrap_or(message)
        .to_string()
}

fn signs_approved_kubelet_client_request(t: &Target) {
    let (ca, ca_key) = cluster_ca(t);
    let mut made = Made {
        admin: t.admin(),
        names: vec![],
    };
    let node = unique("e2e-node");
    let (pem, key) = request(&format!("system:node:{node}"), &["system:nodes"], &[]);
    let usages = ["digital signature", "client auth"];
    let name = approved(&mut made, "csr-sign", &pem, KUBELET_CLIENT, &usages);
    // Not approved: left alone.
    let (pem2, _) = request("system:node:other", &["system:nodes"], &[]);
    let pending = unique("csr-pending");
    let body = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": pending},
        "spec": {"request": b64(pem2.as_bytes()), "signerName": KUBELET_CLIENT, "usages": usages}});
    made.admin.create(&CSRS, None, &body).expect("create");
    made.names.push(pending.clone());

    let _kcm = start(t, "sign", &signing_flags(&ca, &ca_key));
    let cert = certificate(&made.admin, &name);
    assert!(
        verifies(t.dir(), &ca, &cert),
        "not signed by the CA:\n{cert}"
    );
    let text = openssl_text(t.dir(), &cert);
    assert!(
        text.contains(&format!(
            "Subject: O = system:nodes, CN = system:node:{node}"
        )),
        "{text}"
    );
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    assert!(text.contains("CA:FALSE"), "{text}");
    if t.is_real() {
        assert_eq!(
            authenticated_as(t, &cert, &key),
            format!("system:node:{node}")
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let o = made.admin.get(&CSRS, None, &pending).expect("get");
    assert!(o["status"]["certificate"].is_null(), "{o}");
}

fn refused_request_gets_failed_condition(t: &Target) {
    let (ca, ca_key) = cluster_ca(t);
    let mut made = Made {
        admin: t.admin(),
        names: vec![],
    };
    // A kubelet client request must not carry DNS names.
    let (pem, _) = request("system:node:n1", &["system:nodes"], &["n1.example"]);
    let name = approved(
        &mut made,
        "csr-refused",
        &pem,
        KUBELET_CLIENT,
        &["digital signature", "client auth"],
    );
    let _kcm = start(t, "fail", &signing_flags(&ca, &ca_key));
    let cond = eventually(LIMIT, "Failed condition", || {
        let o = made.admin.get(&CSRS, None, &name).ok()?;
        o["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Failed")
            .cloned()
    });
    assert_eq!(
        (&cond["status"], &cond["reason"], &cond["message"]),
        (
            &json!("True"),
            &json!("SignerValidationFailure"),
            &json!("DNS subjectAltNames are not allowed")
        )
    );
    assert!(cond["lastUpdateTime"].is_string());
    let o = made.admin.get(&CSRS, None, &name).expect("get");
    assert!(o["status"]["certificate"].is_null());
}

fn per_signer_files(t: &Target) {
    let dir = t.dir().to_path_buf();
    let (ca, ca_key) = new_ca(&dir, "apiserver-client-ca");
    let mut made = Made {
        admin: t.admin(),
        names: vec![],
    };
    let (pem, _) = request("jane", &["devs"], &[]);
    let client = approved(
        &mut made,
        "csr-jane",
        &pem,
        APISERVER_CLIENT,
        &["client auth", "digital signature"],
    );
    let (pem, _) = request("system:node:n9", &["system:nodes"], &[]);
    let kubelet = approved(
        &mut made,
        "csr-kubelet",
        &pem,
        KUBELET_CLIENT,
        &["digital signature", "client auth"],
    );
    let _kcm = start(
        t,
        "per-signer",
        &[
            "--controllers=csrsigning".into(),
            format!(
                "--cluster-signing-kube-apiserver-client-cert-file={}",
                ca.display()
            ),
            format!(
                "--cluster-signing-kube-apiserver-client-key-file={}",
                ca_key.display()
            ),
            // Shorter than the request's expirationSeconds (1 h): the flag wins.
            "--cluster-signing-duration=30m".into(),
        ],
    );
    let cert = certificate(&made.admin, &client);
    assert!(verifies(&dir, &ca, &cert));
    // Backdated 5 minutes, not shortened at the end (under 8 h).
    let der = rustls_pki_types::pem::PemObject::from_pem_slice(cert.as_bytes())
        .map(|c: rustls_pki_types::CertificateDer<'static>| c.to_vec())
        .expect("PEM certificate");
    let info = edgekcm::pki::der::parse_cert(&der).expect("certificate");
    let life = info.not_after.duration_since(info.not_before).unwrap();
    assert_eq!(life, Duration::from_secs(35 * 60));
    // The kubelet client signer has no files of its own: it does not run.
    std::thread::sleep(Duration::from_secs(2));
    let o = made.admin.get(&CSRS, None, &kubelet).expect("get");
    assert!(o["status"]["certificate"].is_null(), "{o}");
    assert!(o["status"]["conditions"].as_array().unwrap().len() == 1);
}

fn new_ca_on_disk_signs_next_request(t: &Target) {
    let dir = t.dir().to_path_buf();
    let (a, a_key) = new_ca(&dir, "ca-a");
    let (b, b_key) = new_ca(&dir, "ca-b");
    let (cert_file, key_file) = (dir.join("signing.crt"), dir.join("signing.key"));
    std::fs::copy(&a, &cert_file).unwrap();
    std::fs::copy(&a_key, &key_file).unwrap();
    let mut made = Made {
        admin: t.admin(),
        names: vec![],
    };
    let usages = ["client auth"];
    let _kcm = start(t, "reload", &signing_flags(&cert_file, &key_file));
    let (pem, _) = request("first", &[], &[]);
    let first = approved(&mut made, "csr-first", &pem, APISERVER_CLIENT, &usages);
    let cert = certificate(&made.admin, &first);
    assert!(verifies(&dir, &a, &cert));
    // Replaced on disk (key first, as a rotation would write them).
    std::fs::copy(&b_key, &key_file).unwrap();
    std::fs::copy(&b, &cert_file).unwrap();
    let (pem, _) = request("second", &[], &[]);
    let second = approved(&mut made, "csr-second", &pem, APISERVER_CLIENT, &usages);
    let cert = certificate(&made.admin, &second);
    assert!(verifies(&dir, &b, &cert), "not signed by the new CA");
    assert!(!verifies(&dir, &a, &cert));
}

scenarios! {
    signs_approved_kubelet_client_request => signs_approved_kubelet_client_request,
    refused_request_gets_failed_condition => refused_request_gets_failed_condition,
    per_signer_files => per_signer_files,
    new_ca_on_disk_signs_next_request => new_ca_on_disk_signs_next_request,
}
