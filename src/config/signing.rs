//! The CSR signer's CA files: `--cluster-signing-{cert,key}-file` and the per-signer pairs,
//! combined as upstream combines them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// A certificate/key file pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKeyFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// CSR signing files (`--cluster-signing-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSigning {
    /// `--cluster-signing-cert-file` (empty = unset).
    pub cert_file: Option<PathBuf>,
    /// `--cluster-signing-key-file` (empty = unset).
    pub key_file: Option<PathBuf>,
    pub kubelet_serving: SignerFiles,
    pub kubelet_client: SignerFiles,
    pub kube_apiserver_client: SignerFiles,
    pub legacy_unknown: SignerFiles,
    /// `--cluster-signing-duration` (8760h).
    pub duration: Duration,
}

/// The per-signer `--cluster-signing-<signer>-{cert,key}-file` pair as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignerFiles {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl ClusterSigning {
    fn specific(&self) -> [&SignerFiles; 4] {
        [
            &self.kubelet_serving,
            &self.kubelet_client,
            &self.kube_apiserver_client,
            &self.legacy_unknown,
        ]
    }

    fn any_specific(&self) -> bool {
        self.specific()
            .iter()
            .any(|s| s.cert_file.is_some() || s.key_file.is_some())
    }

    /// The files a signer uses, as upstream decides: the signer's own pair if either of its
    /// flags is set, otherwise the shared `--cluster-signing-{cert,key}-file` pair. `None` when
    /// the signer has nothing to sign with (it is then skipped).
    pub fn files_for(&self, signer: &SignerFiles) -> Option<CertKeyFiles> {
        let (cert, key) = if signer.cert_file.is_some() || signer.key_file.is_some() {
            (signer.cert_file.clone(), signer.key_file.clone())
        } else {
            (self.cert_file.clone(), self.key_file.clone())
        };
        Some(CertKeyFiles {
            cert_file: cert?,
            key_file: key?,
        })
    }

    /// kube-controller-manager's option checks: each signer's pair given whole, and either the
    /// shared pair or per-signer pairs. Upstream's words, including its names for the
    /// kubelet-client and kube-apiserver-client signers.
    pub(super) fn validate(&self) -> Result<()> {
        let mut errs = Vec::new();
        for (name, s) in [
            ("cluster-signing-kubelet-serving", &self.kubelet_serving),
            (
                "cluster-signing-kube-apiserver-client",
                &self.kubelet_client,
            ),
            (
                "cluster-signing-kube-apiserver",
                &self.kube_apiserver_client,
            ),
            ("cluster-signing-legacy-unknown", &self.legacy_unknown),
        ] {
            match (&s.cert_file, &s.key_file) {
                (None, Some(_)) => errs.push(format!("{name:?}: cannot specify key without cert")),
                (Some(_), None) => errs.push(format!("{name:?}: cannot specify cert without key")),
                _ => {}
            }
        }
        if (self.cert_file.is_some() || self.key_file.is_some()) && self.any_specific() {
            errs.push(
                "cannot specify --cluster-signing-{cert,key}-file and other --cluster-signing-*-file flags at the same time"
                    .to_string(),
            );
        }
        match errs.len() {
            0 => Ok(()),
            // utilerrors.NewAggregate's text
            1 => Err(Error::Config(errs.remove(0))),
            _ => Err(Error::Config(format!("[{}]", errs.join(", ")))),
        }
    }

    /// Whether the CSR signing controller has anything to do.
    pub fn enabled(&self) -> bool {
        (self.cert_file.is_some() && self.key_file.is_some()) || self.any_specific()
    }
}
