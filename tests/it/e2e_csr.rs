//! certificatesigningrequest-approving-controller and -cleaner-controller scenarios, against
//! the sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, with
//! `--use-service-account-credentials=true` in `KCM_E2E_KCM_ARGS`: edgekcm then writes as
//! `certificate-controller` under the bootstrap RBAC).
//!
//! On a real cluster the requests are made as their requesters: a bootstrap token (the
//! apiserver needs `--enable-bootstrap-token-auth`) bound as kubeadm binds it
//! (`system:node-bootstrapper`, and `...:nodeclient` for auto-approval), and for a renewal a
//! node's client certificate, made with openssl from the cluster CA named by
//! `KCM_E2E_CA_CERT` and `KCM_E2E_CA_KEY` (without them that scenario fails, saying so),
//! with `...:selfnodeclient` bound to `system:nodes` as kubeadm binds it. On the sandbox the
//! requester is written into the request and SubjectAccessReviews follow its deny rules.

use crate::common::*;
use base64::Engine as _;
use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig::{self, RestConfig};
use edgekcm::api::resources::{CLUSTERROLEBINDINGS, CSRS, SECRETS};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const LIMIT: Duration = Duration::from_secs(30);
const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const NODECLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
const SELFNODECLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
const NODE_MESSAGE: &str = "Auto approving kubelet client certificate after SubjectAccessReview.";
const SELF_MESSAGE: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A PKCS#10 request as a kubelet makes it (ECDSA, O=system:nodes, CN=system:node:<node>).
fn request_pem(cn: &str, dns: &[&str]) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p =
        rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.serialize_request(&key).unwrap().pem().unwrap()
}

/// A kubelet client CSR; `username` is what the sandbox keeps (a real apiserver writes the
/// requester's identity instead).
fn csr(name: &str, cn: &str, username: &str, dns: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request_pem(cn, dns).as_bytes()), "signerName": SIGNER,
                 "usages": ["digital signature", "client auth"], "username": username,
                 "groups": ["system:authenticated"]}})
}

fn conditions(c: &Client, name: &str) -> Vec<Value> {
    c.get(&CSRS, None, name)
        .ok()
        .and_then(|o| o["status"]["conditions"].as_array().cloned())
        .unwrap_or_default()
}

fn wait_approved(admin: &Client, name: &str, message: &str) {
    let conds = eventually(LIMIT, &format!("{name} approved"), || {
        Some(conditions(admin, name)).filter(|c| !c.is_empty())
    });
    assert_eq!(conds.len(), 1, "{conds:?}");
    let c = &conds[0];
    assert_eq!(
        (&c["type"], &c["status"], &c["reason"], &c["message"]),
        (
            &json!("Approved"),
            &json!("True"),
            &json!("AutoApproved"),
            &json!(message)
        ),
        "{c}"
    );
    assert!(c["lastUpdateTime"].is_string() && c["lastTransitionTime"].is_string());
}

/// Deletes the scenario's requests, bindings and token Secrets, even when it fails.
struct Made {
    admin: Client,
    objects: Vec<(edgekcm::api::Kind, Option<&'static str>, String)>,
}
impl Drop for Made {
    fn drop(&mut self) {
        for (k, ns, name) in &self.objects {
            let _ = self.admin.delete(k, *ns, name, &Default::default());
        }
    }
}

fn bind(t: &Target, made: &mut Made, role: &str, group: &str) {
    if !t.is_real() {
        return;
    }
    let name = unique("edgekcm-e2e-bind");
    made.admin
        .create(
            &CLUSTERROLEBINDINGS,
            None,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}),
        )
        .expect("create binding");
    made.objects.push((CLUSTERROLEBINDINGS, None, name));
}

/// A client for a new bootstrap token, its user name and its extra group (bound to
/// `system:node-bootstrapper` so it may create requests, as kubeadm binds it).
fn bootstrap_identity(t: &Target, made: &mut Made) -> (Client, String, String) {
    let id: String = (0..6)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect();
    let secret: String = (0..16)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect();
    let group = format!("system:bootstrappers:edgekcm-{id}");
    if !t.is_real() {
        return (t.admin(), format!("system:bootstrap:{id}"), group);
    }
    let name = format!("bootstrap-token-{id}");
    made.admin
        .create(
            &SECRETS,
            Some("kube-system"),
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                "metadata": {"name": name},
                "stringData": {"token-id": id, "token-secret": secret,
                    "usage-bootstrap-authentication": "true", "auth-extra-groups": group}}),
        )
        .expect("create bootstrap token");
    made.objects.push((SECRETS, Some("kube-system"), name));
    bind(t, made, "system:node-bootstrapper", &group);
    let mut cfg = kubeconfig::load(Some(&t.kubeconfig()), None).expect("admin kubeconfig");
    cfg.client_cert_pem = None;
    cfg.client_key_pem = None;
    cfg.token = Some(format!("{id}.{secret}"));
    let c = Client::new(&cfg, 0.0, 1, "edgekcm-tests").expect("client");
    (c, format!("system:bootstrap:{id}"), group)
}

fn create(c: &Client, made: &mut Made, body: &Value) -> String {
    let o = c.create(&CSRS, None, body).expect("create CSR");
    let name = o["metadata"]["name"].as_str().unwrap().to_string();
    made.objects.push((CSRS, None, name.clone()));
    name
}

fn start(t: &Target, tag: &str, controllers: &str) -> Kcm {
    start_with(t, tag, controllers)
}

fn approves_bootstrap_node_client_request(t: &Target) {
    let mut made = Made {
        admin: t.admin(),
        objects: vec![],
    };
    let (client, user, group) = bootstrap_identity(t, &mut made);
    bind(t, &mut made, NODECLIENT, &group);
    let node = unique("system:node:e2e");
    let good = create(
        &client,
        &mut made,
        &csr(&unique("csr-boot"), &node, &user, &[]),
    );
    // Not a kubelet client request: a DNS name. Left alone.
    let other = create(
        &client,
        &mut made,
        &csr(&unique("csr-dns"), &node, &user, &["n.example"]),
    );
    let _kcm = start(t, "approve", "--controllers=csrapproving");
    wait_approved(&made.admin, &good, NODE_MESSAGE);
    std::thread::sleep(Duration::from_millis(500));
    assert!(conditions(&made.admin, &other).is_empty());
}

fn denied_review_waits_until_allowed(t: &Target) {
    let mut made = Made {
        admin: t.admin(),
        objects: vec![],
    };
    let (client, user, group) = bootstrap_identity(t, &mut made);
    let path = "certificatesigningrequests/nodeclient";
    if let Some(sb) = t.sandbox() {
        sb.deny_access(&user, path);
    }
    let name = create(
        &client,
        &mut made,
        &csr(&unique("csr-wait"), &unique("system:node:e2e"), &user, &[]),
    );
    let _kcm = start(t, "deny", "--controllers=csrapproving");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        conditions(&made.admin, &name).is_empty(),
        "approved while not allowed"
    );
    // Allowed now: the retry with backoff approves it.
    match t.sandbox() {
        Some(sb) => sb.allow_access(&user, path),
        None => bind(t, &mut made, NODECLIENT, &group),
    }
    wait_approved(&made.admin, &name, NODE_MESSAGE);
}

/// A node's client certificate and key (PEM) for `system:node:<node>` in `system:nodes`.
fn node_credentials(node: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let ca = std::env::var("KCM_E2E_CA_CERT").ok()?;
    let ca_key = std::env::var("KCM_E2E_CA_KEY").ok()?;
    let dir = TempDir::new("node");
    let (key, req, crt) = (
        dir.0.join("n.key"),
        dir.0.join("n.csr"),
        dir.0.join("n.crt"),
    );
    let run = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "openssl {args:?}");
    };
    let p = |p: &std::path::Path| p.display().to_string();
    run(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        &p(&key),
    ]);
    let subj = format!("/O=system:nodes/CN=system:node:{node}");
    run(&[
        "req",
        "-new",
        "-key",
        &p(&key),
        "-subj",
        &subj,
        "-out",
        &p(&req),
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&req),
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-CAserial",
        &p(&dir.0.join("ca.srl")),
        "-days",
        "1",
        "-out",
        &p(&crt),
    ]);
    Some((std::fs::read(&crt).ok()?, std::fs::read(&key).ok()?))
}

fn approves_renewal_by_the_node_itself(t: &Target) {
    let mut made = Made {
        admin: t.admin(),
        objects: vec![],
    };
    let node = unique("e2e-node");
    let cn = format!("system:node:{node}");
    let client = if t.is_real() {
        // Never a silent pass: without the CA this scenario fails, saying what it needs.
        let Some((cert, key)) = node_credentials(&node) else {
            panic!(
                "the renewal scenario needs KCM_E2E_CA_CERT and KCM_E2E_CA_KEY: the CA that \
                 signs node certificates (e.g. /etc/kubernetes/pki/ca.crt and ca.key)"
            );
        };
        bind(t, &mut made, SELFNODECLIENT, "system:nodes");
        let cfg: RestConfig = RestConfig {
            client_cert_pem: Some(cert),
            client_key_pem: Some(key),
            token: None,
            ..kubeconfig::load(Some(&t.kubeconfig()), None).expect("admin kubeconfig")
        };
        Client::new(&cfg, 0.0, 1, "edgekcm-tests").expect("node client")
    } else {
        t.admin()
    };
    let name = create(
        &client,
        &mut made,
        &csr(&unique("csr-renew"), &cn, &cn, &[]),
    );
    let _kcm = start(t, "renew", "--controllers=csrapproving");
    wait_approved(&made.admin, &name, SELF_MESSAGE);
}

/// A certificate (PEM) that expired yesterday.
fn expired_certificate() -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:old");
    let yesterday = SystemTime::now() - Duration::from_secs(86_400);
    p.not_before = (yesterday - Duration::from_secs(86_400)).into();
    p.not_after = yesterday.into();
    p.self_signed(&key).unwrap().pem()
}

fn rfc3339(ago: Duration) -> String {
    edgekcm::compat::timefmt::rfc3339(SystemTime::now() - ago)
}

/// Write `conds` (and optionally a certificate) as a signer or an admin would.
fn decide(admin: &Client, name: &str, conds: Value, certificate: Option<&str>) {
    let mut o = admin.get(&CSRS, None, name).expect("get");
    o["status"]["conditions"] = conds;
    let o = admin
        .update_subresource(&CSRS, &o, "approval")
        .expect("approval");
    if let Some(cert) = certificate {
        let mut o = o;
        o["status"]["certificate"] = json!(b64(cert.as_bytes()));
        admin.update_status(&CSRS, &o).expect("status");
    }
}

/// Run against upstream (`KCM_E2E_KCM_BINARY`), this fails at its first wait: upstream's first
/// pass runs before its informer has listed anything, so it deletes nothing for an hour.
fn cleaner_deletes_old_and_expired_requests(t: &Target) {
    let mut made = Made {
        admin: t.admin(),
        objects: vec![],
    };
    let admin = made.admin.clone();
    let hour = Duration::from_secs(3700);
    let cond = |type_: &str, ago: Duration| {
        json!([{"type": type_, "status": "True", "reason": "E2E", "message": "by the test",
                "lastUpdateTime": rfc3339(ago)}])
    };
    let mk = |made: &mut Made, prefix: &str| {
        let n = unique(prefix);
        create(&admin, made, &csr(&n, "system:node:x", "u", &[]))
    };
    let denied_old = mk(&mut made, "csr-denied-old");
    decide(&admin, &denied_old, cond("Denied", hour), None);
    let denied_new = mk(&mut made, "csr-denied-new");
    decide(&admin, &denied_new, cond("Denied", Duration::ZERO), None);
    let expired = mk(&mut made, "csr-expired");
    decide(
        &admin,
        &expired,
        cond("Approved", Duration::ZERO),
        Some(&expired_certificate()),
    );
    let approved_unissued = mk(&mut made, "csr-unissued");
    decide(&admin, &approved_unissued, cond("Approved", hour), None);
    let pending = mk(&mut made, "csr-pending");

    let _kcm = start(t, "clean", "--controllers=csrcleaner");
    for gone in [&denied_old, &expired] {
        eventually(LIMIT, &format!("{gone} deleted"), || {
            admin
                .get(&CSRS, None, gone)
                .err()
                .filter(|e| e.is_not_found())
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    for kept in [&denied_new, &approved_unissued, &pending] {
        assert!(admin.get(&CSRS, None, kept).is_ok(), "{kept} was deleted");
    }
}

scenarios! {
    approves_bootstrap_node_client_request => approves_bootstrap_node_client_request,
    denied_review_waits_until_allowed => denied_review_waits_until_allowed,
    approves_renewal_by_the_node_itself => approves_renewal_by_the_node_itself,
    cleaner_deletes_old_and_expired_requests => cleaner_deletes_old_and_expired_requests,
}
