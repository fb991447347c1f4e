use super::*;
use crate::controllers::certificates::request::request_pem;
use crate::controllers::testing::Harness;
use crate::sandbox::{Sandbox, SandboxOptions};
use base64::Engine as _;

const NODE_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];

fn csr(name: &str, pem: &str, username: &str, usages: &[&str], signer: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "resourceVersion": "5", "uid": format!("uid-{name}")},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": signer,
            "usages": usages,
            "username": username,
            "uid": "u-1",
            "groups": ["system:nodes", "system:authenticated"],
            "extra": {"k": ["v"]},
        },
        "status": {},
    })
}

fn node_csr(name: &str, username: &str) -> Value {
    let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
    csr(name, &pem, username, &NODE_USAGES, KUBELET_CLIENT_SIGNER)
}

fn subresources(d: Decision) -> Vec<&'static str> {
    match d {
        Decision::Review(r) => r.iter().map(|r| r.subresource).collect(),
        other => panic!("expected a review, got {other:?}"),
    }
}

#[test]
fn recognizes_kubelet_client_requests_as_upstream() {
    // A node renewing its own certificate: both, the node's own permission first.
    assert_eq!(
        subresources(decide(&node_csr("a", "system:node:n1"))),
        ["selfnodeclient", "nodeclient"]
    );
    // A bootstrap token asking for a node's first certificate.
    assert_eq!(
        subresources(decide(&node_csr("b", "system:bootstrap:abcdef"))),
        ["nodeclient"]
    );
    // Usages without key encipherment (ECDSA keys), and repeated usages, are the same set.
    let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
    for u in [
        &["client auth", "digital signature"][..],
        &["client auth", "digital signature", "client auth"][..],
    ] {
        let c = csr("c", &pem, "x", u, KUBELET_CLIENT_SIGNER);
        assert_eq!(subresources(decide(&c)), ["nodeclient"], "{u:?}");
    }
    let not_recognized = [
        csr(
            "d",
            &pem,
            "x",
            &NODE_USAGES,
            "kubernetes.io/kube-apiserver-client",
        ),
        csr("e", &pem, "x", &["client auth"], KUBELET_CLIENT_SIGNER),
        csr(
            "f",
            &pem,
            "x",
            &["digital signature", "client auth", "server auth"],
            KUBELET_CLIENT_SIGNER,
        ),
        csr(
            "g",
            &request_pem("system:node:n1", &["system:nodes", "x"], &[]),
            "x",
            &NODE_USAGES,
            KUBELET_CLIENT_SIGNER,
        ),
        csr(
            "h",
            &request_pem("system:node:n1", &["system:nodes"], &["n1.example"]),
            "x",
            &NODE_USAGES,
            KUBELET_CLIENT_SIGNER,
        ),
        csr(
            "i",
            &request_pem("system:node:n1", &["system:nodes"], &["10.1.2.3"]),
            "x",
            &NODE_USAGES,
            KUBELET_CLIENT_SIGNER,
        ),
        csr(
            "j",
            &request_pem("node:n1", &["system:nodes"], &[]),
            "node:n1",
            &NODE_USAGES,
            KUBELET_CLIENT_SIGNER,
        ),
        csr(
            "k",
            &request_pem("system:node:n1", &[], &[]),
            "x",
            &NODE_USAGES,
            KUBELET_CLIENT_SIGNER,
        ),
    ];
    for c in &not_recognized {
        assert_eq!(decide(c), Decision::Nothing, "{}", obj::name(c));
    }
}

#[test]
fn leaves_decided_requests_alone() {
    let mut c = node_csr("a", "system:node:n1");
    for cond in ["Approved", "Denied"] {
        c["status"] = json!({"conditions": [{"type": cond, "status": "True"}]});
        assert_eq!(decide(&c), Decision::Nothing, "{cond}");
        assert!(!pending(&c));
    }
    c["status"] = json!({"certificate": "Zm9v"});
    assert_eq!(decide(&c), Decision::Nothing);
    // Failed alone: upstream looks at it (only Approved and Denied stop it).
    c["status"] = json!({"conditions": [{"type": "Failed", "status": "True"}]});
    assert!(matches!(decide(&c), Decision::Review(_)));
    // An unparsable request is an error to retry.
    let mut bad = node_csr("bad", "x");
    bad["spec"]["request"] = json!("bm90IHBlbQ==");
    assert_eq!(
        decide(&bad),
        Decision::Unparsable(
            "unable to parse csr \"bad\": PEM block type must be CERTIFICATE REQUEST".into()
        )
    );
}

#[test]
fn review_names_the_requester() {
    let r = review_for(&node_csr("a", "system:node:n1"), "selfnodeclient");
    assert_eq!(
        r["spec"],
        json!({
            "resourceAttributes": {"verb": "create", "group": "certificates.k8s.io",
                "version": "*", "resource": "certificatesigningrequests",
                "subresource": "selfnodeclient"},
            "user": "system:node:n1", "uid": "u-1",
            "groups": ["system:nodes", "system:authenticated"], "extra": {"k": ["v"]},
        })
    );
    let mut bare = node_csr("b", "");
    bare["spec"]["groups"] = json!([]);
    bare["spec"]["uid"] = json!("");
    bare["spec"].as_object_mut().unwrap().remove("extra");
    let r = review_for(&bare, "nodeclient");
    assert_eq!(r["spec"].as_object().unwrap().len(), 1);
}

/// The approver with a sandbox answering its SubjectAccessReviews.
fn harness(sb: &Sandbox) -> Harness<CsrApprover> {
    let mut h = Harness::new(CsrApprover);
    h.client = sb.client("test");
    h
}

#[test]
fn approves_after_the_first_allowed_review() {
    let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
    let mut h = harness(&sb);
    h.add(CSRS, node_csr("renew", "system:node:n1"))
        .add(CSRS, node_csr("boot", "system:bootstrap:abc"));
    assert_eq!(h.take_queued(), ["boot", "renew"]);

    let w = h.sync("renew");
    let [(kind, Some("approval"), obj)] = &w.updates[..] else {
        panic!("expected one approval, got {w:?}");
    };
    assert_eq!(*kind, CSRS);
    assert_eq!(
        obj["status"]["conditions"],
        json!([{"type": "Approved", "status": "True", "reason": "AutoApproved",
            "message": "Auto approving self kubelet client certificate after SubjectAccessReview."}])
    );
    assert_eq!(obj["metadata"]["resourceVersion"], "5");

    // The node may not renew by itself: the nodeclient permission approves it.
    sb.deny_access(
        "system:node:n1",
        "certificatesigningrequests/selfnodeclient",
    );
    let w = h.sync("renew");
    assert_eq!(
        w.updates[0].2["status"]["conditions"][0]["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );

    // Neither: retried later with backoff, nothing written.
    sb.deny_access(
        "system:bootstrap:abc",
        "certificatesigningrequests/nodeclient",
    );
    let out = h.outcome("boot");
    assert!(out.actions.is_empty());
    assert_eq!(
        out.retry_quietly.as_deref(),
        Some("recognized csr \"boot\" as [nodeclient] but subject access review was not approved")
    );

    // Once approved (the watch brings the condition), nothing more.
    let mut done = node_csr("renew", "system:node:n1");
    done["metadata"]["resourceVersion"] = json!("6");
    done["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    h.update(CSRS, done);
    assert!(h.take_queued().is_empty());
    assert!(h.sync("renew").is_empty());
    assert!(h.sync("gone").is_empty());
}
