//! bootstrap-signer-controller (upstream's `bootstrap/bootstrapsigner.go`): the ConfigMap
//! `kube-public/cluster-info` carries, beside its `kubeconfig`, one `jws-kubeconfig-<id>`
//! entry per bootstrap token allowed to sign: the detached HS256 JWS of the kubeconfig text
//! keyed by the token (see `crate::compat::jws`). Entries of tokens that are gone, expired or no longer
//! allowed to sign are removed; the ConfigMap is PUT only when an entry changes.
//!
//! As upstream: one key (`kube-public/cluster-info`), looked at when the ConfigMap is added or
//! changed and when a token Secret in `kube-system` is added, changed or deleted; a ConfigMap
//! without `kubeconfig` is left alone; of two Secrets with the same token id the first (here:
//! by name) is used. Queue `bootstrap_signer_queue`, one worker, identity `bootstrap-signer`.
//! Unlike upstream, the ConfigMap is looked at again when the first signing token expires
//! (upstream waits for the token cleaner to delete the Secret), and a failed update other than
//! a 404 or 409 is retried with the queue's backoff (upstream logs it at `-v 3` and waits for
//! the next change).

use super::{is_token_secret, signing_token, Expiration, CLUSTER_INFO, CLUSTER_INFO_NAMESPACE};
use super::{JWS_PREFIX, KUBECONFIG_KEY, TOKEN_NAMESPACE, TOKEN_WATCH};
use crate::api::resources::CONFIGMAPS;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{sooner, Action, Controller, Cx, OnError, Outcome, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Only `cluster-info` ConfigMaps are watched.
pub const CLUSTER_INFO_WATCH: Watch = Watch::named(CONFIGMAPS, "metadata.name=cluster-info");

const KEY: &str = "kube-public/cluster-info";

pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    Ok(Some(crate::controller::Runnable::reconciles(
        BootstrapSigner,
    )))
}

pub struct BootstrapSigner;

/// The signatures `cluster-info` should carry (token id -> JWS), and when the first signing
/// token expires.
pub fn signatures(
    content: &str,
    tokens: &[std::sync::Arc<Value>],
    now: std::time::SystemTime,
) -> (BTreeMap<String, String>, Option<std::time::Duration>) {
    let mut sigs = BTreeMap::new();
    let mut next = None;
    for s in tokens.iter().filter(|s| is_token_secret(s)) {
        let Some((id, secret)) = signing_token(s, now) else {
            continue;
        };
        if sigs.contains_key(&id) {
            log::info!("Duplicate bootstrap tokens found for id, ignoring on the duplicate secret tokenID=\"{id}\" ignoredSecret=\"{}\"", obj::key(s));
            continue;
        }
        if let Expiration::In(d) = super::expiration(s, now) {
            next = sooner(next, Some(d));
        }
        sigs.insert(
            id.clone(),
            crate::compat::jws::detached_hs256(content, &id, &secret),
        );
    }
    (sigs, next)
}

impl Controller for BootstrapSigner {
    fn watches(&self) -> Vec<Watch> {
        vec![CLUSTER_INFO_WATCH, TOKEN_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        let wanted = if w.kind == CONFIGMAPS {
            d.kind != DeltaKind::Deleted
                && obj::namespace(o) == CLUSTER_INFO_NAMESPACE
                && obj::name(o) == CLUSTER_INFO
        } else {
            is_token_secret(o)
        };
        if wanted {
            vec![KEY.to_string()]
        } else {
            vec![]
        }
    }

    fn reconcile(&self, cx: &Cx, _key: &str) -> Result<Outcome> {
        let Some(cm) = cx
            .cache
            .store_for(&CLUSTER_INFO_WATCH)
            .get_in(CLUSTER_INFO_NAMESPACE, CLUSTER_INFO)
        else {
            return Ok(Outcome::none());
        };
        let Some(content) = cm
            .get("data")
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .and_then(Value::as_str)
        else {
            log::debug!("No key in ConfigMap key=\"{KUBECONFIG_KEY}\" configMap=\"{KEY}\"");
            return Ok(Outcome::none());
        };
        let mut tokens = cx
            .cache
            .store_for(&TOKEN_WATCH)
            .list_namespace(TOKEN_NAMESPACE);
        crate::sort::sort_by(&mut tokens[..], |a, b| obj::name(a).cmp(obj::name(b)));
        let (want, next) = signatures(content, &tokens, cx.now);
        let data = cm.get("data").and_then(Value::as_object);
        let have: BTreeMap<&str, &str> = data
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.strip_prefix(JWS_PREFIX)?, v.as_str().unwrap_or(""))))
            .collect();
        let same = have.len() == want.len()
            && want
                .iter()
                .all(|(id, sig)| have.get(id.as_str()) == Some(&sig.as_str()));
        let mut out = Outcome {
            requeue_after: next,
            ..Outcome::default()
        };
        if same {
            return Ok(out);
        }
        let mut new_data: Map<String, Value> = data
            .into_iter()
            .flatten()
            .filter(|(k, _)| !k.starts_with(JWS_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (id, sig) in want {
            new_data.insert(format!("{JWS_PREFIX}{id}"), Value::String(sig));
        }
        let mut updated = (*cm).clone();
        updated["data"] = Value::Object(new_data);
        out.actions.push(Action::Update {
            kind: CONFIGMAPS,
            object: updated,
        });
        Ok(out)
    }

    fn on_error(&self, _a: &Action, err: &crate::Error) -> OnError {
        if err.is_not_found() {
            OnError::Ignore
        } else {
            OnError::Retry
        }
    }
}
