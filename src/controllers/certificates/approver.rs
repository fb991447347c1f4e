//! certificatesigningrequest-approving-controller (upstream's `approver/sarapprove.go` on the
//! shared certificate controller base): a kubelet's client certificate request (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, subject `O=system:nodes`,
//! `CN=system:node:<name>`, no DNS, email, IP or URI names, usages `client auth` and `digital
//! signature`, `key encipherment` optional) is approved when a SubjectAccessReview says its
//! requester may `create certificatesigningrequests/selfnodeclient` (a node renewing its own
//! certificate: the requester is the request's CN) or `.../nodeclient`. Approval is a PUT of
//! the `approval` subresource adding `Approved`/`AutoApproved` with upstream's message.
//!
//! As upstream: requests already issued, approved or denied are left alone (a `Failed`
//! condition alone is not looked at); a request recognized but not allowed is looked at again
//! with the queue's backoff (200 ms doubling to 1000 s), logged at `-v 4` only; one that does
//! not parse is retried the same way, logged as a failure. No Events. 5 workers, queue
//! `certificate`. Unlike upstream, only requests that could still be approved are queued
//! (upstream queues every change, deletions included, and drops the others when it syncs).

use super::request::{self, Request};
use super::{approval, is_issued, request_bytes, CSR_WATCH};
use crate::api::client::Client;
use crate::api::resources::{CSRS, SUBJECTACCESSREVIEWS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{Action, Controller, Cx, Outcome, Watch};
use crate::error::{Error, Result};
use crate::obj::{self, At as _};
use crate::queue::RateLimiter;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// One kind of request the approver knows, the permission that approves it, and the message.
pub struct Recognizer {
    /// The subresource of `certificatesigningrequests` the requester must be allowed to create.
    pub subresource: &'static str,
    pub message: &'static str,
    pub recognize: fn(&Value, &Request) -> bool,
}

/// upstream's recognizers, in its order: a renewal by the node itself first.
pub const RECOGNIZERS: [Recognizer; 2] = [
    Recognizer {
        subresource: "selfnodeclient",
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
        recognize: is_self_node_client_cert,
    },
    Recognizer {
        subresource: "nodeclient",
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
        recognize: is_node_client_cert,
    },
];

fn spec_str<'a>(csr: &'a Value, field: &str) -> &'a str {
    csr.get("spec")
        .and_then(|s| s.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// upstream's `ValidateKubeletClientCSR` (`pkg/apis/certificates`), as a yes or no.
pub fn is_kubelet_client_request(req: &Request, usages: &BTreeSet<&str>) -> bool {
    const WITH_RSA: [&str; 3] = ["client auth", "digital signature", "key encipherment"];
    const NO_RSA: [&str; 2] = ["client auth", "digital signature"];
    req.organizations == ["system:nodes"]
        && req.dns_names.is_empty()
        && req.email_addresses.is_empty()
        && req.ip_addresses.is_empty()
        && req.uris.is_empty()
        && req.common_name.starts_with("system:node:")
        && (usages.iter().eq(WITH_RSA.iter()) || usages.iter().eq(NO_RSA.iter()))
}

/// The request's usages as a set (duplicates count once, as upstream's `sets.String`).
fn usages(csr: &Value) -> BTreeSet<&str> {
    csr.at("/spec/usages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// upstream's `isNodeClientCert`.
pub fn is_node_client_cert(csr: &Value, req: &Request) -> bool {
    spec_str(csr, "signerName") == KUBELET_CLIENT_SIGNER
        && is_kubelet_client_request(req, &usages(csr))
}

/// upstream's `isSelfNodeClientCert`: the requester is the node the certificate is for.
pub fn is_self_node_client_cert(csr: &Value, req: &Request) -> bool {
    spec_str(csr, "username") == req.common_name && is_node_client_cert(csr, req)
}

/// What to do with a request before any SubjectAccessReview.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Issued, approved, denied, or no recognizer knows it.
    Nothing,
    /// `spec.request` does not parse (upstream retries it with backoff, logging the error).
    Unparsable(String),
    /// Ask for these recognizers' permissions, in this order; the first allowed approves.
    Review(Vec<&'static Recognizer>),
}

impl PartialEq for Recognizer {
    fn eq(&self, o: &Self) -> bool {
        self.subresource == o.subresource
    }
}
impl std::fmt::Debug for Recognizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.subresource)
    }
}

/// Whether a request could still be approved (not issued, approved or denied).
pub fn pending(csr: &Value) -> bool {
    let (approved, denied) = approval(csr);
    !is_issued(csr) && !approved && !denied
}

/// upstream's `handle` up to its SubjectAccessReviews.
pub fn decide(csr: &Value) -> Decision {
    if !pending(csr) {
        return Decision::Nothing;
    }
    let parsed = request_bytes(csr).and_then(|pem| request::parse_pem(&pem));
    let req = match parsed {
        Ok(r) => r,
        Err(e) => {
            return Decision::Unparsable(format!("unable to parse csr {:?}: {e}", obj::name(csr)))
        }
    };
    let tried: Vec<&'static Recognizer> = RECOGNIZERS
        .iter()
        .filter(|r| (r.recognize)(csr, &req))
        .collect();
    if tried.is_empty() {
        Decision::Nothing
    } else {
        Decision::Review(tried)
    }
}

/// The SubjectAccessReview upstream sends: the requester of the CSR (user, uid, groups, extra)
/// asking to create `certificatesigningrequests/<subresource>` in any version.
pub fn review_for(csr: &Value, subresource: &str) -> Value {
    let mut spec = Map::new();
    spec.insert(
        "resourceAttributes".into(),
        json!({"verb": "create", "group": "certificates.k8s.io", "version": "*",
               "resource": "certificatesigningrequests", "subresource": subresource}),
    );
    for (from, to) in [("username", "user"), ("uid", "uid")] {
        let v = spec_str(csr, from);
        if !v.is_empty() {
            spec.insert(to.into(), json!(v));
        }
    }
    for field in ["groups", "extra"] {
        let v = csr.get("spec").and_then(|s| s.get(field));
        let non_empty = match v {
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(m)) => !m.is_empty(),
            _ => false,
        };
        if let (true, Some(v)) = (non_empty, v) {
            spec.insert(field.into(), v.clone());
        }
    }
    json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": false},
    })
}

/// The request with upstream's approval condition appended (the apiserver fills its times).
pub fn approved(csr: &Value, message: &str) -> Value {
    let mut out = csr.clone();
    if !out.get("status").is_some_and(Value::is_object) {
        out["status"] = json!({});
    }
    let status = &mut out["status"];
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    if let Some(list) = status["conditions"].as_array_mut() {
        list.push(
            json!({"type": "Approved", "status": "True", "reason": "AutoApproved",
                         "message": message}),
        );
    }
    out
}

fn allowed(client: &Client, csr: &Value, subresource: &str) -> Result<bool> {
    let answer = client.create(&SUBJECTACCESSREVIEWS, None, &review_for(csr, subresource))?;
    Ok(answer.at("/status/allowed").and_then(Value::as_bool) == Some(true))
}

/// Its row in the controller table: 5 workers, as upstream starts it.
pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    Ok(Some(crate::controller::Runnable::reconciles(CsrApprover)))
}

pub struct CsrApprover;

impl CsrApprover {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        "certificatesigningrequest-approving-controller"
    }
}

impl Controller for CsrApprover {
    fn watches(&self) -> Vec<Watch> {
        vec![CSR_WATCH]
    }
    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if d.kind == DeltaKind::Deleted || !pending(d.object()) {
            return vec![];
        }
        vec![obj::name(d.object()).to_string()]
    }
    fn rate_limiter(&self) -> Option<Box<dyn RateLimiter<String>>> {
        Some(super::queue_rate_limiter())
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(csr) = cx.cache.store(CSRS).get(key) else {
            return Ok(Outcome::none());
        };
        let tried = match decide(&csr) {
            Decision::Nothing => return Ok(Outcome::none()),
            Decision::Unparsable(e) => return Err(Error::Decode(e)),
            Decision::Review(r) => r,
        };
        for r in &tried {
            if allowed(cx.client, &csr, r.subresource)? {
                log::debug!("{}: approving {key} ({})", self.name(), r.subresource);
                return Ok(Outcome::with(vec![Action::UpdateSubresource {
                    kind: CSRS,
                    object: approved(&csr, r.message),
                    subresource: "approval",
                }]));
            }
        }
        let names: Vec<&str> = tried.iter().map(|r| r.subresource).collect();
        Ok(Outcome {
            retry_quietly: Some(format!(
                "recognized csr {key:?} as [{}] but subject access review was not approved",
                names.join(" ")
            )),
            ..Outcome::default()
        })
    }
}

#[cfg(test)]
#[path = "approver_tests.rs"]
mod tests;
