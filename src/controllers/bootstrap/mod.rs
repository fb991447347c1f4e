//! Bootstrap tokens (upstream's `pkg/controller/bootstrap` and `k8s.io/cluster-bootstrap`):
//! Secrets of type `bootstrap.kubernetes.io/token` named `bootstrap-token-<id>` in
//! `kube-system`. Two controllers, both off unless named in `--controllers` (kubeadm names
//! them): [`signer`] (bootstrap-signer-controller) signs `kube-public/cluster-info` with every
//! token allowed to sign, [`cleaner`] (token-cleaner-controller) deletes expired tokens.
//! Both read the same informer: Secrets listed with the field selector
//! `type=bootstrap.kubernetes.io/token` (upstream: every Secret of the cluster).

pub mod cleaner;
pub mod signer;

use crate::api::resources::SECRETS;
use crate::controller::Watch;
use crate::obj;
use base64::Engine as _;
use serde_json::Value;
use std::time::{Duration, SystemTime};

pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
pub const TOKEN_NAMESPACE: &str = "kube-system";
pub const TOKEN_ID_KEY: &str = "token-id";
pub const TOKEN_SECRET_KEY: &str = "token-secret";
pub const EXPIRATION_KEY: &str = "expiration";
pub const USAGE_SIGNING_KEY: &str = "usage-bootstrap-signing";
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO: &str = "cluster-info";
pub const KUBECONFIG_KEY: &str = "kubeconfig";
pub const JWS_PREFIX: &str = "jws-kubeconfig-";

/// Bootstrap token Secrets only.
pub const TOKEN_WATCH: Watch = Watch::named(SECRETS, "type=bootstrap.kubernetes.io/token");

/// A bootstrap token Secret in `kube-system`.
pub fn is_token_secret(s: &Value) -> bool {
    s.get("type").and_then(Value::as_str) == Some(TOKEN_SECRET_TYPE)
        && obj::namespace(s) == TOKEN_NAMESPACE
}

/// `bootstrapsecretutil.GetData`: the decoded value, empty when missing.
pub fn data(secret: &Value, key: &str) -> String {
    secret
        .get("data")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// `bootstrapsecretutil.ParseName`: the id of `bootstrap-token-[a-z0-9]{6}`.
pub fn parse_name(name: &str) -> Option<&str> {
    let id = name.strip_prefix(TOKEN_SECRET_PREFIX)?;
    (id.len() == 6
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
    .then_some(id)
}

/// When a token expires, as `bootstrapsecretutil.GetExpiration` sees it at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration`.
    Never,
    /// Expired, or the time does not parse (treated as expired, as upstream).
    Expired,
    /// Still valid for this long.
    In(Duration),
}

pub fn expiration(secret: &Value, now: SystemTime) -> Expiration {
    let text = data(secret, EXPIRATION_KEY);
    if text.is_empty() {
        return Expiration::Never;
    }
    let Some(at) = crate::compat::timefmt::parse_rfc3339(&text) else {
        log::debug!(
            "Unparseable expiration time ({text}) in {} Secret. Treating as expired.",
            obj::key(secret)
        );
        return Expiration::Expired;
    };
    match at.duration_since(now) {
        Ok(d) if !d.is_zero() => Expiration::In(d),
        _ => Expiration::Expired,
    }
}

/// upstream's `validateSecretForSigning`: the token id and secret of a valid, unexpired token
/// allowed to sign (`usage-bootstrap-signing: "true"`) whose id matches its name.
pub fn signing_token(secret: &Value, now: SystemTime) -> Option<(String, String)> {
    let name_id = parse_name(obj::name(secret))?;
    let id = data(secret, TOKEN_ID_KEY);
    if id.is_empty() || id != name_id {
        return None;
    }
    let token_secret = data(secret, TOKEN_SECRET_KEY);
    if token_secret.is_empty() {
        return None;
    }
    if expiration(secret, now) == Expiration::Expired {
        return None;
    }
    (data(secret, USAGE_SIGNING_KEY) == "true").then_some((id, token_secret))
}

#[cfg(test)]
mod tests;
