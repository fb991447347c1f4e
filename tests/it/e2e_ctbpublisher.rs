//! kube-apiserver-serving-clustertrustbundle-publisher-controller scenarios, against the
//! sandbox always and a real kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`, edgekcm
//! with `--use-service-account-credentials` and the `--root-ca-file` of `KCM_E2E_KCM_ARGS`,
//! writing as `kube-apiserver-serving-clustertrustbundle-publisher`). On the sandbox the test
//! writes the CA file.

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::CLUSTERTRUSTBUNDLES;
use serde_json::{json, Value};
use std::time::Duration;

const SIGNER: &str = "kubernetes.io/kube-apiserver-serving";

/// A self-signed CA certificate, PEM.
fn some_ca() -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.self_signed(&key).expect("certificate").pem()
}

/// `kubernetes.io:kube-apiserver-serving:` and the first 12 bytes of the SHA-256, in hex.
fn bundle_name(bundle: &[u8]) -> String {
    let h = ring::digest::digest(&ring::digest::SHA256, bundle);
    let hex: String = h.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("kubernetes.io:kube-apiserver-serving:{hex}")
}

fn make(admin: &Client, name: &str, signer: &str, pem: &str) {
    let o = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
        "metadata": {"name": name}, "spec": {"signerName": signer, "trustBundle": pem}});
    admin
        .create(&CLUSTERTRUSTBUNDLES, None, &o)
        .expect("create ClusterTrustBundle");
}

fn get(admin: &Client, name: &str) -> Option<Value> {
    admin.get(&CLUSTERTRUSTBUNDLES, None, name).ok()
}

/// Removes the test's own bundles whatever happened.
struct Gone(Client, Vec<String>);

impl Drop for Gone {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = self
                .0
                .delete(&CLUSTERTRUSTBUNDLES, None, n, &Default::default());
        }
    }
}

/// The CA file is published under its hash's name; another bundle of the signer goes, one of
/// another signer stays; a bundle changed by hand gets the CA back.
fn scenario_publishes_the_serving_ca(t: &Target) {
    if !t.at_least(
        37,
        "certificates.k8s.io/v1 ClusterTrustBundles (ClusterTrustBundle GA in v1.37)",
    ) {
        return;
    }
    let admin = t.admin();
    let mut extra = vec![];
    let ca_path = match std::env::var("KCM_E2E_CA_CERT") {
        Ok(p) if t.is_real() && !p.is_empty() => std::path::PathBuf::from(p),
        _ => {
            let p = t.dir().join("serving-ca.crt");
            std::fs::write(&p, some_ca()).expect("CA file");
            extra.push(format!("--root-ca-file={}", p.display()));
            p
        }
    };
    let pem = std::fs::read(&ca_path).expect("CA");
    let name = bundle_name(&pem);
    let (stale, other) = (
        format!("kubernetes.io:kube-apiserver-serving:{}", unique("stale")),
        format!("example.com:e2e:{}", unique("other")),
    );
    let _gone = Gone(admin.clone(), vec![stale.clone(), other.clone()]);
    make(&admin, &stale, SIGNER, &some_ca());
    make(&admin, &other, "example.com/e2e", &some_ca());
    let mut args: Vec<&str> =
        vec!["--controllers=kube-apiserver-serving-clustertrustbundle-publisher-controller"];
    args.extend(extra.iter().map(String::as_str));
    let _kcm = Kcm::start(t, "ctb", &args);
    let want = String::from_utf8(pem).expect("PEM text");
    eventually(Duration::from_secs(20), "the bundle published", || {
        let b = get(&admin, &name)?;
        (b["spec"]["signerName"] == SIGNER && b["spec"]["trustBundle"] == want.as_str())
            .then_some(())
    });
    eventually(Duration::from_secs(20), "the stale bundle deleted", || {
        get(&admin, &stale).is_none().then_some(())
    });
    assert!(
        get(&admin, &other).is_some(),
        "another signer's bundle stays"
    );
    let mut b = get(&admin, &name).expect("ours");
    assert!(b["metadata"]["labels"].is_null(), "no labels: {b}");
    b["spec"]["trustBundle"] = json!(some_ca());
    admin
        .update(&CLUSTERTRUSTBUNDLES, &b)
        .expect("change it by hand");
    eventually(Duration::from_secs(20), "the CA put back", || {
        (get(&admin, &name)?["spec"]["trustBundle"] == want.as_str()).then_some(())
    });
}

scenarios! {
    publishes_the_serving_ca => scenario_publishes_the_serving_ca,
}
