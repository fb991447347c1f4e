//! The CertificateSigningRequest controllers (upstream's `pkg/controller/certificates`):
//! `approver` (certificatesigningrequest-approving-controller) auto-approves kubelet client
//! certificates after a SubjectAccessReview, `cleaner`
//! (certificatesigningrequest-cleaner-controller) deletes old and expired requests. Both write
//! as `certificate-controller` with `--use-service-account-credentials`; `request` reads the
//! PKCS#10 requests. `pcrcleaner` (podcertificaterequest-cleaner-controller) deletes old
//! PodCertificateRequests; `ctbpublisher`
//! (kube-apiserver-serving-clustertrustbundle-publisher-controller) publishes the serving CA
//! as a ClusterTrustBundle.

pub mod approver;
pub mod cleaner;
pub mod ctbpublisher;
pub mod pcrcleaner;
pub mod request;
pub mod signer;

use crate::api::resources::CSRS;
use crate::cache::Watch;
use crate::obj::At as _;
use base64::Engine as _;
use serde_json::Value;

pub use approver::CsrApprover;
pub use cleaner::CsrCleaner;

/// Both read whole requests (the request itself, the conditions, the certificate).
pub const CSR_WATCH: Watch = Watch::full(CSRS);

/// The conditions of a request (none when missing or not a list).
pub fn conditions(csr: &Value) -> &[Value] {
    csr.at("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn condition_type(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

/// upstream's `GetCertApprovalCondition`: is there an `Approved`, a `Denied` condition (of any
/// status)?
pub fn approval(csr: &Value) -> (bool, bool) {
    let conds = conditions(csr);
    (
        conds.iter().any(|c| condition_type(c) == "Approved"),
        conds.iter().any(|c| condition_type(c) == "Denied"),
    )
}

/// `status.certificate` as bytes (base64 in JSON); empty when there is none or it does not
/// decode.
pub fn certificate(csr: &Value) -> Vec<u8> {
    csr.at("/status/certificate")
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// Whether a certificate was issued (`status.certificate` is not empty).
pub fn is_issued(csr: &Value) -> bool {
    csr.at("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// `spec.request` as bytes (the PEM text of the PKCS#10 request).
pub fn request_bytes(csr: &Value) -> Result<Vec<u8>, String> {
    let s = csr
        .at("/spec/request")
        .and_then(Value::as_str)
        .unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("spec.request is not base64: {e}"))
}

/// upstream's certificate queue (approver and signers): 200 ms doubling to 1000 s per request,
/// 10/s overall (burst 100).
fn queue_rate_limiter() -> Box<dyn crate::queue::RateLimiter<String>> {
    use crate::queue::{Bucket, ItemExponential, MaxOf};
    use std::time::Duration;
    Box::new(MaxOf::new(vec![
        Box::new(ItemExponential::new(
            Duration::from_millis(200),
            Duration::from_secs(1000),
        )),
        Box::new(Bucket::new(10.0, 100)),
    ]))
}
