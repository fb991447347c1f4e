//! kube-apiserver-serving-clustertrustbundle-publisher-controller (upstream's
//! `certificates/clustertrustbundlepublisher`; alpha in 1.32, beta in 1.33, GA in 1.37, gate
//! ClusterTrustBundle): the CA bundle kube-apiserver's serving certificates chain to (the
//! `--root-ca-file`, else the kubeconfig's inline CA) published as the ClusterTrustBundle
//! of signer `kubernetes.io/kube-apiserver-serving`, named
//! `kubernetes.io:kube-apiserver-serving:<first 12 bytes of the bundle's SHA-256, in hex>`;
//! every other bundle of that signer is deleted.
//!
//! - Queue `ca_cert_publisher_cluster_trust_bundles`, one worker, one key (upstream's ""),
//!   queued at start and on any change of a bundle of the signer (its informer is scoped by
//!   `spec.signerName`). A missing bundle is created, one with other contents is replaced by a
//!   PUT; the other bundles are deleted once ours is in place (upstream returns before its
//!   deletions when the create or update fails; here the deletions come with the sync the
//!   create's watch event queues).
//! - Metrics `clustertrustbundle_publisher_sync_total` and
//!   `clustertrustbundle_publisher_sync_duration_seconds`, by the sync's HTTP code.
//! - No Events. Writes as `kube-apiserver-serving-clustertrustbundle-publisher`.

use crate::api::client::DeleteOptions;
use crate::api::resources::CLUSTERTRUSTBUNDLES;
use crate::cache::{Cache, Delta, Watch};
use crate::controller::{Action, Applied, Controller, Cx, Outcome, SyncEnd};
use crate::controllers::kit::syncsbycode::SyncsByCode;
use crate::error::Result;
use crate::obj::{self, At as _};
use serde_json::{json, Value};
use std::time::Instant;

pub const NAME: &str = "kube-apiserver-serving-clustertrustbundle-publisher-controller";
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-serving";
/// Its one key.
pub const KEY: &str = "";

/// The signer's bundles, whole (their contents are compared and written back).
pub const CTB_WATCH: Watch = Watch::named(
    CLUSTERTRUSTBUNDLES,
    "spec.signerName=kubernetes.io/kube-apiserver-serving",
);

/// Its row in the controller table: nothing to publish without a CA (upstream starts
/// nothing either); off, with one line, when the API server does not serve
/// `certificates.k8s.io/v1` clustertrustbundles.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    let bundle = match &cx.cfg.sa_controller.root_ca_file {
        Some(p) => crate::config::files::read_ca(p)?,
        None => cx.rest.ca_inline.clone().unwrap_or_default(),
    };
    if bundle.is_empty() {
        return Ok(None);
    }
    if crate::controllers::kit::served::served(
        cx.rest,
        "/apis/certificates.k8s.io/v1",
        "clustertrustbundles",
    ) == Some(false)
    {
        log::info!(
            "no known scheme version was found for clustertrustbundles, cannot start {NAME}"
        );
        return Ok(None);
    }
    crate::metrics::register_collector("ctbpublisher", std::sync::Arc::new(|| METRICS.families()));
    Ok(Some(crate::controller::Runnable::reconciles(
        CtbPublisher::new(String::from_utf8_lossy(&bundle).into_owned()),
    )))
}

/// `constructBundleName`.
pub fn bundle_name(signer: &str, bundle: &[u8]) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, bundle);
    let hex: String = hash.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}:{hex}", signer.replace('/', ":"))
}

/// `clustertrustbundle_publisher_sync_total` and `..._sync_duration_seconds`.
pub static METRICS: SyncsByCode = SyncsByCode::new(
    "clustertrustbundle_publisher",
    "Number of syncs that occurred in cluster trust bundle publisher.",
    "The time it took to sync a cluster trust bundle.",
);

pub struct CtbPublisher {
    bundle: String,
    name: String,
}

impl CtbPublisher {
    pub fn new(bundle: String) -> Self {
        let name = bundle_name(SIGNER, bundle.as_bytes());
        CtbPublisher { bundle, name }
    }

    /// The actions of a sync, given the signer's bundles.
    pub fn decide(&self, bundles: &[obj::Obj]) -> Vec<Action> {
        let ours = bundles.iter().find(|b| obj::name(b) == self.name);
        match ours {
            None => {
                return vec![Action::Create {
                    kind: CLUSTERTRUSTBUNDLES,
                    namespace: String::new(),
                    object: json!({"apiVersion": "certificates.k8s.io/v1",
                        "kind": "ClusterTrustBundle", "metadata": {"name": self.name},
                        "spec": {"signerName": SIGNER, "trustBundle": self.bundle}}),
                }]
            }
            Some(b) if b.at("/spec/trustBundle").and_then(Value::as_str) != Some(&self.bundle) => {
                let mut next = (**b).clone();
                next["spec"]["trustBundle"] = json!(self.bundle);
                return vec![Action::Update {
                    kind: CLUSTERTRUSTBUNDLES,
                    object: next,
                }];
            }
            Some(_) => {}
        }
        bundles
            .iter()
            .filter(|b| obj::name(b) != self.name)
            .map(|b| Action::Delete {
                kind: CLUSTERTRUSTBUNDLES,
                namespace: String::new(),
                name: obj::name(b).to_string(),
                options: DeleteOptions::default(),
            })
            .collect()
    }
}

impl Controller for CtbPublisher {
    fn watches(&self) -> Vec<Watch> {
        vec![CTB_WATCH]
    }

    fn keys_for(&self, _: &Watch, _: &Delta, _: &Cache) -> Vec<String> {
        vec![KEY.to_string()]
    }

    fn initial_keys(&self) -> Vec<String> {
        vec![KEY.to_string()]
    }

    fn reconcile(&self, cx: &Cx, _: &str) -> Result<Outcome> {
        Ok(Outcome::with(
            self.decide(&cx.cache.store_for(&CTB_WATCH).list()),
        ))
    }

    fn applied(&self, _: &str, action: &Action, result: Applied<'_>) {
        if let (Applied::Failed(e), Action::Delete { name, .. }) = (result, action) {
            log::error!(
                "failed to remove a cluster trust bundle err=\"{}\" bundleName=\"{name}\"",
                e.message()
            );
        }
    }

    fn synced(&self, _: &str, began: Instant, end: SyncEnd<'_>) {
        METRICS.synced(SyncsByCode::code(&end), began.elapsed());
    }
}

#[cfg(test)]
mod tests;
