use super::*;
use crate::api::resources::CLUSTERTRUSTBUNDLES;
use crate::controllers::testing::Harness;

const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn bundle(name: &str, contents: &str) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "spec": {"signerName": SIGNER, "trustBundle": contents}})
}

#[test]
fn name_from_the_signer_and_the_bundles_hash() {
    // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a3...
    assert_eq!(
        bundle_name(SIGNER, b"abc"),
        "kubernetes.io:kube-apiserver-serving:ba7816bf8f01cfea414140de"
    );
}

#[test]
fn creates_then_deletes_the_others() {
    let mut h = Harness::new(CtbPublisher::new(PEM.into()));
    assert_eq!(h.ctrl.initial_keys(), [KEY]);
    h.add(
        CLUSTERTRUSTBUNDLES,
        bundle("kubernetes.io:kube-apiserver-serving:old", "x"),
    );
    assert_eq!(h.take_queued(), [KEY]);
    let w = h.sync(KEY);
    assert_eq!(w.creates.len(), 1, "ours first, nothing deleted yet");
    assert!(w.deletes.is_empty());
    let o = &w.creates[0].1;
    let name = bundle_name(SIGNER, PEM.as_bytes());
    assert_eq!(o["metadata"], json!({"name": name}));
    assert_eq!(o["spec"], json!({"signerName": SIGNER, "trustBundle": PEM}));
    h.add(CLUSTERTRUSTBUNDLES, bundle(&name, PEM));
    let w = h.sync(KEY);
    assert!(w.creates.is_empty());
    assert_eq!(
        w.deletes,
        [(
            CLUSTERTRUSTBUNDLES,
            "kubernetes.io:kube-apiserver-serving:old".to_string()
        )]
    );
}

#[test]
fn other_contents_are_replaced() {
    let mut h = Harness::new(CtbPublisher::new(PEM.into()));
    let name = bundle_name(SIGNER, PEM.as_bytes());
    h.add(CLUSTERTRUSTBUNDLES, bundle(&name, "changed"));
    let w = h.sync(KEY);
    assert_eq!(w.updates.len(), 1);
    assert_eq!(w.updates[0].2["spec"]["trustBundle"], PEM);
    assert_eq!(w.updates[0].2["metadata"]["resourceVersion"], "1");
    h.update(CLUSTERTRUSTBUNDLES, {
        let mut b = bundle(&name, PEM);
        b["metadata"]["resourceVersion"] = json!("2");
        b
    });
    assert!(h.sync(KEY).is_empty());
}
