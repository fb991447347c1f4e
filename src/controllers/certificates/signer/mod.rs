//! certificatesigningrequest-signing-controller (upstream's `signer` package): the built-in
//! signers `kubernetes.io/kubelet-serving`, `kube-apiserver-client-kubelet`,
//! `kube-apiserver-client` and `legacy-unknown`, each with the CA of its
//! `--cluster-signing-<signer>-{cert,key}-file` pair or of the shared
//! `--cluster-signing-{cert,key}-file` pair (upstream's rules for which; a signer without files
//! is not run). A request is signed once it is approved, not denied, not `Failed`, not yet
//! issued and for a signer that runs: a request its signer refuses (upstream's per-signer
//! checks of subject, names and usages) gets `Failed`/`SignerValidationFailure`, any other a
//! certificate in `status.certificate` (PEM), both through the `status` subresource. A request
//! that does not parse, whose signature does not hold, or that cannot be signed now (an
//! expired CA) is retried with the queue's backoff and logged, as upstream.
//!
//! The CA files are looked at before every signature and re-read when they changed
//! (upstream's `dynamiccertificates`, which watches them); a change that does not make a
//! usable pair keeps the CA in use.
//!
//! Upstream runs one controller per signer, each with its own queue (`csrsigning-<signer>`)
//! and 5 workers; edgekcm runs one queue (`csrsigning`) with 5 workers for all of them and
//! queues only requests one of its signers would sign.

pub mod authority;
pub mod policy;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::{approval, conditions, is_issued, request, request_bytes, CSR_WATCH};
use crate::api::resources::CSRS;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{Action, Controller, Cx, Outcome, Watch};
use crate::error::{Error, Result};
use crate::obj::{self, At as _};
use crate::queue::RateLimiter;
use authority::CaFiles;

/// One running signer: its name and CA.
pub struct Signer {
    pub name: &'static str,
    pub ca: CaFiles,
}

pub struct CsrSigner {
    signers: Vec<Signer>,
    /// `--cluster-signing-duration`.
    max_duration: Duration,
}

/// Its row in the controller table: the signers that have files, or nothing when none has
/// (upstream: "Skipping CSR signer controller because no csr cert/key was specified").
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    let cs = &cx.cfg.cluster_signing;
    if !cs.enabled() {
        log::info!("Skipping CSR signer controller because no csr cert/key was specified");
        return Ok(None);
    }
    let mut signers = Vec::new();
    for (name, own) in [
        (policy::KUBELET_SERVING, &cs.kubelet_serving),
        (policy::KUBELET_CLIENT, &cs.kubelet_client),
        (policy::KUBE_APISERVER_CLIENT, &cs.kube_apiserver_client),
        (policy::LEGACY_UNKNOWN, &cs.legacy_unknown),
    ] {
        let Some(files) = cs.files_for(own) else {
            log::info!("Skipping CSR signer controller because specific files were specified for other signers and not this one controller={name:?}");
            continue;
        };
        let ca = CaFiles::load(&files.cert_file, &files.key_file).map_err(|e| {
            Error::Config(format!(
                "failed to start {name} certificate controller: error reading CA cert file {:?}: {e}",
                files.cert_file.display().to_string()
            ))
        })?;
        signers.push(Signer { name, ca });
    }
    Ok(Some(crate::controller::Runnable::reconciles(
        CsrSigner::new(signers, cs.duration),
    )))
}

impl CsrSigner {
    pub fn new(signers: Vec<Signer>, max_duration: Duration) -> CsrSigner {
        CsrSigner {
            signers,
            max_duration,
        }
    }

    /// One signer from files (for tests and tools).
    pub fn with_files(name: &'static str, cert: &Path, key: &Path, max: Duration) -> Result<Self> {
        let ca = CaFiles::load(cert, key).map_err(Error::Config)?;
        Ok(CsrSigner::new(vec![Signer { name, ca }], max))
    }

    fn signer(&self, csr: &Value) -> Option<&Signer> {
        let name = csr.at("/spec/signerName").and_then(Value::as_str)?;
        self.signers.iter().find(|s| s.name == name)
    }

    /// upstream's `handle` preconditions: approved and not denied, not `Failed` (True), not
    /// issued, and for one of these signers.
    fn wants(&self, csr: &Value) -> bool {
        let (approved, denied) = approval(csr);
        let failed = conditions(csr).iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Failed")
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
        approved && !denied && !failed && !is_issued(csr) && self.signer(csr).is_some()
    }
}

/// What the signer does with one request.
#[derive(Debug, PartialEq)]
pub enum Decision {
    Nothing,
    /// The `Failed` condition's message.
    Fail(String),
    /// The certificate, PEM.
    Issue(String),
}

impl CsrSigner {
    /// upstream's `handle` up to its write: an error is retried with backoff.
    pub fn decide(&self, csr: &Value, now: std::time::SystemTime) -> Result<Decision> {
        if !self.wants(csr) {
            return Ok(Decision::Nothing);
        }
        let Some(signer) = self.signer(csr) else {
            return Ok(Decision::Nothing);
        };
        let name = obj::name(csr);
        let req = request_bytes(csr)
            .and_then(|pem| request::parse_pem(&pem))
            .map_err(|e| Error::Decode(format!("unable to parse csr {name:?}: {e}")))?;
        let usages: Vec<&str> = csr
            .at("/spec/usages")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Err(why) = policy::validate(signer.name, &req, &usages) {
            return Ok(Decision::Fail(why));
        }
        let ttl = policy::duration(
            self.max_duration,
            csr.at("/spec/expirationSeconds").and_then(Value::as_i64),
        );
        let der = signer
            .ca
            .current()
            .sign(&req, &usages, ttl, now)
            .map_err(|e| Error::Config(format!("error auto signing csr: {e}")))?;
        Ok(Decision::Issue(crate::certs::pem_encode(
            "CERTIFICATE",
            &der,
        )))
    }
}

/// The request with `Failed`/`SignerValidationFailure` appended, as upstream writes it.
pub fn failed(csr: &Value, message: &str, now: std::time::SystemTime) -> Value {
    let mut out = csr.clone();
    if !out.get("status").is_some_and(Value::is_object) {
        out["status"] = json!({});
    }
    if !out["status"].get("conditions").is_some_and(Value::is_array) {
        out["status"]["conditions"] = json!([]);
    }
    if let Some(list) = out["status"]["conditions"].as_array_mut() {
        list.push(json!({"type": "Failed", "status": "True",
            "reason": "SignerValidationFailure", "message": message,
            "lastUpdateTime": crate::compat::timefmt::rfc3339(now)}));
    }
    out
}

/// The request with its certificate.
pub fn issued(csr: &Value, pem: &str) -> Value {
    let mut out = csr.clone();
    if !out.get("status").is_some_and(Value::is_object) {
        out["status"] = json!({});
    }
    out["status"]["certificate"] =
        json!(base64::engine::general_purpose::STANDARD.encode(pem.as_bytes()));
    out
}

impl CsrSigner {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        "certificatesigningrequest-signing-controller"
    }
}

impl Controller for CsrSigner {
    fn watches(&self) -> Vec<Watch> {
        vec![CSR_WATCH]
    }
    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        if d.kind == DeltaKind::Deleted || !self.wants(d.object()) {
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
        let object = match self.decide(&csr, cx.now)? {
            Decision::Nothing => return Ok(Outcome::none()),
            Decision::Fail(why) => {
                log::info!("{}: {key} cannot be signed: {why}", self.name());
                failed(&csr, &why, cx.now)
            }
            Decision::Issue(pem) => issued(&csr, &pem),
        };
        Ok(Outcome::with(vec![Action::UpdateSubresource {
            kind: CSRS,
            object,
            subresource: "status",
        }]))
    }
}

/// A directory with a new CA (`ca.crt`, `ca.key`) for tests.
#[cfg(test)]
pub(crate) fn test_ca_files() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "edgekcm-ca-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).expect("CA");
    std::fs::write(d.join("ca.crt"), cert.pem()).expect("write");
    std::fs::write(d.join("ca.key"), key.serialize_pem()).expect("write");
    d
}

#[cfg(test)]
mod tests;
