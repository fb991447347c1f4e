//! podcertificaterequest-cleaner-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm with
//! `--use-service-account-credentials`, writing as `podcertificaterequestcleaner`). A real
//! server sets `creationTimestamp` itself, so only the sandbox (which can backdate a request)
//! shows the deletion of one 15 minutes old; against the real one, a new request is kept
//! through the first pass.

use crate::common::*;
use base64::Engine as _;
use edgekcm::api::client::Client;
use edgekcm::api::resources::PODCERTIFICATEREQUESTS;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// A request as a kubelet would make it: a PKCS#10 stub request of a fresh P-256 key.
fn request(admin: &Client, ns: &str, name: &str) -> Value {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let csr = rcgen::CertificateParams::new(Vec::<String>::new())
        .expect("params")
        .serialize_request(&key)
        .expect("PKCS#10");
    let stub = base64::engine::general_purpose::STANDARD.encode(csr.der());
    let uid = |n: u8| format!("0b7e6a6e-1111-2222-3333-4444555566{n:02}");
    let o = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
        "metadata": {"name": name},
        "spec": {"signerName": "example.com/e2e", "podName": "p", "podUID": uid(1),
            "serviceAccountName": "default", "serviceAccountUID": uid(2),
            "nodeName": "n1", "nodeUID": uid(3), "maxExpirationSeconds": 86400,
            "stubPKCS10Request": stub}});
    admin
        .create(&PODCERTIFICATEREQUESTS, Some(ns), &o)
        .expect("create PodCertificateRequest")
}

/// A request 15 minutes old goes at the first pass, a new one stays.
fn scenario_deletes_old_requests(t: &Target) {
    if !t.at_least(
        37,
        "certificates.k8s.io/v1 PodCertificateRequests (PodCertificateRequest GA in v1.37)",
    ) {
        return;
    }
    let ns = Ns::with_cleanup(t, "e2e-pcr", &[PODCERTIFICATEREQUESTS]);
    let (admin, n) = (&ns.admin, ns.name.as_str());
    request(admin, n, "young");
    if let Some(sb) = t.sandbox() {
        request(admin, n, "old");
        let then = SystemTime::now() - Duration::from_secs(15 * 60 + 5);
        sb.backdate(
            &PODCERTIFICATEREQUESTS,
            Some(n),
            "old",
            &edgekcm::compat::timefmt::rfc3339(then),
        )
        .expect("backdate");
    }
    let mut kcm = Kcm::start(
        t,
        "pcr",
        &["--controllers=podcertificaterequest-cleaner-controller"],
    );
    eventually(Duration::from_secs(20), "the cleaner started", || {
        assert!(kcm.exited().is_none(), "exited:\n{}", kcm.log_text());
        kcm.log_text()
            .contains("Starting PodCertificateRequest cleaner controller")
            .then_some(())
    });
    if t.is_real() {
        // Its informer synced under its own identity (list and watch allowed), and the first
        // pass found nothing old enough.
        eventually(Duration::from_secs(20), "caches synced", || {
            let l = kcm.log_text();
            (l.contains("caches synced") || l.contains("Caches are synced")).then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
    } else {
        eventually(Duration::from_secs(20), "old request deleted", || {
            admin
                .get(&PODCERTIFICATEREQUESTS, Some(n), "old")
                .err()
                .filter(|e| e.is_not_found())
        });
    }
    assert!(
        admin.get(&PODCERTIFICATEREQUESTS, Some(n), "young").is_ok(),
        "a new request stays"
    );
    assert!(kcm.exited().is_none());
}

scenarios! {
    deletes_old_requests => scenario_deletes_old_requests,
}
