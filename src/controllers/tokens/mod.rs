//! serviceaccount-token-controller (upstream's `serviceaccount/tokens_controller.go`): fills
//! Secrets of type `kubernetes.io/service-account-token` that name a ServiceAccount
//! (annotation `kubernetes.io/service-account.name`, optionally `.../service-account.uid`)
//! and cleans up after deletions. Runs only with `--service-account-private-key-file`, with
//! the manager's own identity (upstream's `tokens-controller` client), as upstream.
//!
//! - A Secret whose `token` or `namespace` is empty, or whose `ca.crt` is not the root CA
//!   (`--root-ca-file`, else the kubeconfig's inline CA; none: `ca.crt` is left alone), is
//!   read live; if the live copy is the cached one (same resourceVersion) and still needs it,
//!   it is PUT with the missing parts (the legacy token of [`jwt`], the CA, the Secret's
//!   namespace) and both annotations set to the ServiceAccount's name and UID. 409 and 404
//!   are ignored (the watch brings what changed).
//! - A Secret whose ServiceAccount does not exist (not in the cache and a live GET says 404),
//!   or exists with another UID than the annotation names, is deleted with its UID as
//!   precondition (404 and 409 ignored).
//! - A deleted ServiceAccount (or one with the same name and a new UID): every token Secret of
//!   its namespace naming it (and its old UID, or no UID) is deleted.
//! - A deleted token Secret is taken out of its ServiceAccount's `secrets` list (live GET,
//!   PUT; conflicts retried).
//!
//! Keys: `secret:<ns>/<name>` for a Secret to look at, `secret-gone:<ns>/<name>:<sa>:<sa uid>`
//! for a deleted one, `sa-gone:<ns>/<name>:<uid>` for a deleted ServiceAccount. Upstream has
//! two queues (`serviceaccount_tokens_secret`, `serviceaccount_tokens_service`); here both
//! kinds of key share the first. Failures are retried with the queue's backoff, at most 10
//! times per key, as upstream. The Secret informer lists only token Secrets (field selector
//! `type=kubernetes.io/service-account-token`).

pub mod jwt;

use super::{Action, Controller, Cx, OnError, Outcome, Watch};
use crate::api::client::DeleteOptions;
use crate::api::resources::{SECRETS, SERVICEACCOUNTS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::Result;
use crate::obj;
use base64::Engine as _;
use serde_json::{json, Value};
use std::sync::Arc;

pub const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
pub const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
pub const TOKEN_KEY: &str = "token";
pub const CA_KEY: &str = "ca.crt";
pub const NAMESPACE_KEY: &str = "namespace";

/// Only token Secrets are listed and watched.
pub const SECRET_WATCH: Watch = Watch::named(SECRETS, "type=kubernetes.io/service-account-token");

/// Its row in the controller table: off without `--service-account-private-key-file`, as
/// upstream ("Controller is disabled because there is no private key").
pub fn build(cx: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    let Some(path) = &cx.cfg.sa_controller.service_account_private_key_file else {
        log::info!("Controller is disabled because there is no private key controller=\"serviceaccount-token-controller\"");
        return Ok(None);
    };
    let pem = std::fs::read(path).map_err(|e| {
        crate::Error::Config(format!(
            "error reading key for service account token controller: {}",
            crate::config::files::go_read_error(path, &e)
        ))
    })?;
    let signer = jwt::Signer::from_pem(&pem)
        .map_err(|e| crate::Error::Config(format!("failed to build token generator: {e}")))?;
    let root_ca = match &cx.cfg.sa_controller.root_ca_file {
        Some(p) => crate::config::files::read_ca(p)?,
        None => cx.rest.ca_inline.clone().unwrap_or_default(),
    };
    Ok(Some(super::Runnable::reconciles(TokensController {
        signer: Arc::new(signer),
        root_ca,
    })))
}

pub struct TokensController {
    pub signer: Arc<jwt::Signer>,
    /// `ca.crt` as every token Secret should carry it; empty: not checked.
    pub root_ca: Vec<u8>,
}

fn data_bytes(secret: &Value, key: &str) -> Vec<u8> {
    secret
        .get("data")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// What a token Secret lacks: (CA, namespace, token).
pub fn update_needed(secret: &Value, root_ca: &[u8]) -> (bool, bool, bool) {
    let needs_ca = !root_ca.is_empty() && data_bytes(secret, CA_KEY) != root_ca;
    let needs_ns = data_bytes(secret, NAMESPACE_KEY).is_empty();
    let needs_token = data_bytes(secret, TOKEN_KEY).is_empty();
    (needs_ca, needs_ns, needs_token)
}

fn is_token_of(secret: &Value, sa_name: &str, sa_uid: &str) -> bool {
    secret.get("type").and_then(Value::as_str) == Some(TOKEN_TYPE)
        && obj::annotation(secret, NAME_ANNOTATION).unwrap_or("") == sa_name
        && obj::annotation(secret, UID_ANNOTATION).is_none_or(|u| u.is_empty() || u == sa_uid)
}

fn delete_with_uid(ns: &str, name: &str, uid: &str) -> Action {
    Action::Delete {
        kind: SECRETS,
        namespace: ns.to_string(),
        name: name.to_string(),
        options: DeleteOptions {
            precondition_uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..DeleteOptions::default()
        },
    }
}

impl TokensController {
    /// upstream's `getServiceAccount`: the cached one if its UID matches (or none is asked
    /// for), else (with `live`) a GET; `None` when it does not exist with that UID.
    fn service_account(
        &self,
        cx: &Cx,
        ns: &str,
        name: &str,
        uid: &str,
        live: bool,
    ) -> Result<Option<Arc<Value>>> {
        let matches = |sa: &Value| uid.is_empty() || obj::uid(sa) == uid;
        if let Some(sa) = cx.cache.store(SERVICEACCOUNTS).get_in(ns, name) {
            if matches(&sa) {
                return Ok(Some(sa));
            }
        }
        if !live {
            return Ok(None);
        }
        match cx.client.get(&SERVICEACCOUNTS, Some(ns), name) {
            Ok(sa) if matches(&sa) => Ok(Some(Arc::new(sa))),
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sync_secret(&self, cx: &Cx, ns: &str, name: &str) -> Result<Outcome> {
        let Some(secret) = cx.cache.store_for(&SECRET_WATCH).get_in(ns, name) else {
            return Ok(Outcome::none());
        };
        let sa_name = obj::annotation(&secret, NAME_ANNOTATION).unwrap_or("");
        let sa_uid = obj::annotation(&secret, UID_ANNOTATION).unwrap_or("");
        if sa_name.is_empty() {
            return Ok(Outcome::none());
        }
        let Some(sa) = self.service_account(cx, ns, sa_name, sa_uid, true)? else {
            log::trace!("Service account does not exist, deleting token secret=\"{ns}/{name}\"");
            return Ok(Outcome::with(vec![delete_with_uid(
                ns,
                name,
                obj::uid(&secret),
            )]));
        };
        if update_needed(&secret, &self.root_ca) == (false, false, false) {
            return Ok(Outcome::none());
        }
        let mut live = match cx.client.get(&SECRETS, Some(ns), name) {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return Ok(Outcome::none()),
            Err(e) => return Err(e),
        };
        if obj::resource_version(&live) != obj::resource_version(&secret) {
            log::debug!(
                "Secret is not up to date, skipping token population secret=\"{ns}/{name}\""
            );
            return Ok(Outcome::none());
        }
        let (needs_ca, needs_ns, needs_token) = update_needed(&live, &self.root_ca);
        if !needs_ca && !needs_ns && !needs_token {
            return Ok(Outcome::none());
        }
        let b64 = |b: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(b));
        if !live.get("data").is_some_and(Value::is_object) {
            live["data"] = json!({});
        }
        if needs_ca {
            live["data"][CA_KEY] = b64(&self.root_ca);
        }
        if needs_ns {
            live["data"][NAMESPACE_KEY] = b64(ns.as_bytes());
        }
        if needs_token {
            let claims = jwt::LegacyClaims {
                namespace: obj::namespace(&sa),
                service_account_name: obj::name(&sa),
                service_account_uid: obj::uid(&sa),
                secret_name: name,
            };
            // A key that cannot sign does not sign later either: logged, not retried.
            match self.signer.legacy_token(&claims) {
                Ok(t) => live["data"][TOKEN_KEY] = b64(t.as_bytes()),
                Err(e) => {
                    log::error!("Populating serviceaccount token secret=\"{ns}/{name}\": {e}");
                    return Ok(Outcome::none());
                }
            }
        }
        let meta = &mut live["metadata"];
        if !meta.get("annotations").is_some_and(Value::is_object) {
            meta["annotations"] = json!({});
        }
        meta["annotations"][NAME_ANNOTATION] = json!(obj::name(&sa));
        meta["annotations"][UID_ANNOTATION] = json!(obj::uid(&sa));
        Ok(Outcome::with(vec![Action::Update {
            kind: SECRETS,
            object: live,
        }]))
    }

    /// A token Secret went: take it out of its ServiceAccount's `secrets`.
    fn secret_gone(
        &self,
        cx: &Cx,
        ns: &str,
        name: &str,
        sa_name: &str,
        sa_uid: &str,
    ) -> Result<Outcome> {
        if self
            .service_account(cx, ns, sa_name, sa_uid, false)?
            .is_none()
        {
            return Ok(Outcome::none());
        }
        let mut sa = match cx.client.get(&SERVICEACCOUNTS, Some(ns), sa_name) {
            Ok(sa) => sa,
            Err(e) if e.is_not_found() => return Ok(Outcome::none()),
            Err(e) => {
                // As upstream: logged, not retried.
                log::error!("Removing secret reference secret=\"{ns}/{name}\": {e}");
                return Ok(Outcome::none());
            }
        };
        if !sa_uid.is_empty() && obj::uid(&sa) != sa_uid {
            return Ok(Outcome::none());
        }
        let Some(list) = sa.get("secrets").and_then(Value::as_array) else {
            return Ok(Outcome::none());
        };
        let named = |s: &Value| s.get("name").and_then(Value::as_str) == Some(name);
        if !list.iter().any(named) {
            return Ok(Outcome::none());
        }
        let kept: Vec<Value> = list.iter().filter(|s| !named(s)).cloned().collect();
        sa["secrets"] = Value::Array(kept);
        Ok(Outcome::with(vec![Action::Update {
            kind: SERVICEACCOUNTS,
            object: sa,
        }]))
    }

    /// A ServiceAccount went (or came back with a new UID): its token Secrets go too.
    fn service_account_gone(&self, cx: &Cx, ns: &str, name: &str, uid: &str) -> Result<Outcome> {
        if self.service_account(cx, ns, name, uid, false)?.is_some() {
            return Ok(Outcome::none());
        }
        log::trace!(
            "Service account deleted, removing tokens namespace=\"{ns}\" serviceaccount=\"{name}\""
        );
        let actions = cx
            .cache
            .store_for(&SECRET_WATCH)
            .list_namespace(ns)
            .iter()
            .filter(|s| is_token_of(s, name, uid))
            .map(|s| delete_with_uid(ns, obj::name(s), obj::uid(s)))
            .collect();
        Ok(Outcome::with(actions))
    }
}

/// The parts of a key: its kind and the `:`-separated fields after it.
fn parse_key(key: &str) -> Option<(&str, (&str, &str), Vec<&str>)> {
    let (kind, rest) = key.split_once(':')?;
    let mut fields = rest.split(':');
    let (ns, name) = fields.next()?.split_once('/')?;
    if ns.is_empty() || name.is_empty() {
        return None;
    }
    Some((kind, (ns, name), fields.collect()))
}

impl TokensController {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        "serviceaccount-token-controller"
    }
}

impl Controller for TokensController {
    fn watches(&self) -> Vec<Watch> {
        vec![SECRET_WATCH, Watch::full(SERVICEACCOUNTS)]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        let (ns, name, uid) = (obj::namespace(o), obj::name(o), obj::uid(o));
        if w.kind == SERVICEACCOUNTS {
            if d.kind != DeltaKind::Deleted || uid.is_empty() {
                return vec![];
            }
            return vec![format!("sa-gone:{ns}/{name}:{uid}")];
        }
        if o.get("type").and_then(Value::as_str) != Some(TOKEN_TYPE) {
            return vec![];
        }
        let sa_name = obj::annotation(o, NAME_ANNOTATION).unwrap_or("");
        if sa_name.is_empty() || uid.is_empty() {
            return vec![];
        }
        if d.kind == DeltaKind::Deleted {
            let sa_uid = obj::annotation(o, UID_ANNOTATION).unwrap_or("");
            return vec![format!("secret-gone:{ns}/{name}:{sa_name}:{sa_uid}")];
        }
        vec![format!("secret:{ns}/{name}")]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some((kind, (ns, name), fields)) = parse_key(key) else {
            log::error!("{}: invalid key {key:?}", self.name());
            return Ok(Outcome::none());
        };
        match (kind, fields.as_slice()) {
            ("secret", []) => self.sync_secret(cx, ns, name),
            ("secret-gone", [sa_name, sa_uid]) => self.secret_gone(cx, ns, name, sa_name, sa_uid),
            ("sa-gone", [uid]) => self.service_account_gone(cx, ns, name, uid),
            _ => {
                log::error!("{}: invalid key {key:?}", self.name());
                Ok(Outcome::none())
            }
        }
    }

    fn on_error(&self, a: &Action, err: &crate::Error) -> OnError {
        match a {
            // Deletes and token writes: gone or changed meanwhile is no failure (the watch
            // brings the change).
            Action::Delete { .. } if err.is_not_found() || err.is_conflict() => OnError::Ignore,
            Action::Update { kind, .. } if *kind == SECRETS => {
                if err.is_not_found() || err.is_conflict() {
                    OnError::Ignore
                } else {
                    OnError::Retry
                }
            }
            // The ServiceAccount's reference: conflicts are retried, other failures logged
            // only, as upstream's RetryOnConflict.
            Action::Update { .. } => {
                if err.is_conflict() {
                    OnError::Retry
                } else {
                    log::error!("Removing secret reference: {err}");
                    OnError::Ignore
                }
            }
            _ => OnError::Retry,
        }
    }
}

#[cfg(test)]
mod tests;
