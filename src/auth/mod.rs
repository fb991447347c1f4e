//! Delegated authentication and authorization of the secure port, with the behaviour of the
//! apiserver library's delegating options as kube-controller-manager configures them.
//!
//! Authentication (first success wins; if none succeeds but one failed: 401; if none applied:
//! the request is `system:anonymous` in group `system:unauthenticated`):
//! 1. request-header (front proxy): a client certificate verified against the request-header
//!    CA, with a common name in the allowed list (if any), and a user name in one of the
//!    username headers; groups and extra from the group headers and extra prefixes.
//! 2. client certificate verified against `--client-ca-file`, or the `client-ca-file` key of
//!    ConfigMap `kube-system/extension-apiserver-authentication`: user = CN, groups = O.
//! 3. `Authorization: Bearer <token>` checked with a TokenReview (authentication.k8s.io/v1),
//!    answers cached for `--authentication-token-webhook-cache-ttl` (errors are not cached).
//!
//! Authenticated users get group `system:authenticated` added. Authorization: group
//! `system:masters` is allowed, `--authorization-always-allow-paths` are allowed, else a
//! SubjectAccessReview (authorization.k8s.io/v1) on the non-resource URL with the lower-cased
//! HTTP method as verb, cached for the authorized / unauthorized TTLs. Not allowed: 403 with
//! upstream's Status body; an authorizer error: 500.
//!
//! Both ConfigMap-derived settings are read at start (a failure other than NotFound is fatal
//! unless `--authentication-tolerate-lookup-failure`) and re-read when a request needs them and
//! they are older than [`CONFIGMAP_REFRESH`]; `--client-ca-file` is re-read when it changes.

use crate::compat::quote::go_quote;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};
use serde::Serialize;
use serde_json::{json, Value};

use crate::api::client::{user_agent_base, Client};
use crate::api::kubeconfig::{self, RestConfig};
use crate::api::resources::{Kind, CONFIGMAPS, SUBJECTACCESSREVIEWS, TOKENREVIEWS};
use crate::error::{Error, Result};
use crate::server::{Filter, Request, Response};

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
pub const MASTERS_GROUP: &str = "system:masters";
pub const AUTH_CONFIGMAP_NAMESPACE: &str = "kube-system";
pub const AUTH_CONFIGMAP_NAME: &str = "extension-apiserver-authentication";
/// How old the ConfigMap-derived settings may get before a request re-reads them.
pub const CONFIGMAP_REFRESH: Duration = Duration::from_secs(30);
/// Request timeout of the TokenReview / SubjectAccessReview clients (upstream's 10 s).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Entries kept in each review cache.
const CACHE_LIMIT: usize = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS_USER.to_string(),
            groups: vec![UNAUTHENTICATED_GROUP.to_string()],
            ..UserInfo::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    NoOpinion,
}

/// Creates review objects on an API server (a [`Client`] does; tests may fake it).
pub trait Reviewer: Send + Sync {
    /// POST `body` to the collection of `kind` and return the answer.
    fn create_review(&self, kind: &Kind, body: &Value) -> Result<Value>;
    /// GET a ConfigMap; None when it does not exist.
    fn get_configmap(&self, namespace: &str, name: &str) -> Result<Option<Value>>;
}

impl Reviewer for Client {
    fn create_review(&self, kind: &Kind, body: &Value) -> Result<Value> {
        self.create(kind, None, body)
    }
    fn get_configmap(&self, namespace: &str, name: &str) -> Result<Option<Value>> {
        match self.get(&CONFIGMAPS, Some(namespace), name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

mod authn;
mod authz;
mod certs;
mod sources;

pub use authn::*;
pub use authz::*;
pub use certs::*;
pub use sources::*;

// ---------------------------------------------------------------------------------------------
// The whole chain

/// Everything the delegating chain is built from.
pub struct AuthOptions {
    /// TokenReviews and the ConfigMap lookup; None: no token authentication, no lookup.
    pub authentication: Option<Arc<dyn Reviewer>>,
    /// SubjectAccessReviews; None: only the always-allowed paths and groups pass.
    pub authorization: Option<Arc<dyn Reviewer>>,
    pub client_ca_file: Option<PathBuf>,
    pub request_header: Option<RequestHeaderOptions>,
    pub skip_lookup: bool,
    pub tolerate_lookup_failure: bool,
    pub token_cache_ttl: Duration,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    pub always_allow_paths: Vec<String>,
    pub always_allow_groups: Vec<String>,
    pub configmap_refresh: Duration,
}

impl Default for AuthOptions {
    fn default() -> Self {
        AuthOptions {
            authentication: None,
            authorization: None,
            client_ca_file: None,
            request_header: None,
            skip_lookup: false,
            tolerate_lookup_failure: false,
            token_cache_ttl: Duration::from_secs(10),
            authorized_ttl: Duration::from_secs(10),
            unauthorized_ttl: Duration::from_secs(10),
            always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            always_allow_groups: vec![MASTERS_GROUP.into()],
            configmap_refresh: CONFIGMAP_REFRESH,
        }
    }
}

/// The client for a delegated-auth kubeconfig: the file if given, else in-cluster if this
/// runs in a cluster, else None (with a warning when the in-cluster files are unusable).
pub(crate) fn delegated_client(path: Option<&Path>, what: &str) -> Result<Option<Client>> {
    let rest: RestConfig = match path.filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => kubeconfig::load(Some(p), None).map_err(|e| {
            Error::config(format!("failed to get delegated {what} kubeconfig: {e}"))
        })?,
        None => {
            let host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
            let port = std::env::var("KUBERNETES_SERVICE_PORT").ok();
            if host.as_deref().unwrap_or("").is_empty() || port.as_deref().unwrap_or("").is_empty()
            {
                return Ok(None);
            }
            match kubeconfig::in_cluster_from(
                host,
                port,
                Path::new(kubeconfig::SERVICE_ACCOUNT_DIR),
            ) {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("failed to read in-cluster kubeconfig for delegated {what}: {e}");
                    return Ok(None);
                }
            }
        }
    };
    let ua = format!("{} delegated-{what}", user_agent_base());
    Client::new_with_timeout(&rest, 200.0, 400, &ua, REVIEW_TIMEOUT).map(Some)
}

/// The delegating authenticator and authorizer in front of every secure-port route.
pub struct Delegating {
    request_header: Option<RequestHeaderAuth>,
    x509: Option<CaProvider>,
    tokens: Option<TokenAuth>,
    always_allow_groups: Vec<String>,
    always_allow_paths: PathAllow,
    access: Option<AccessReviewAuth>,
}

const LOOKUP_WARNING: &str = "No authentication-kubeconfig provided in order to lookup";

impl Delegating {
    /// Build the chain; reads the authentication ConfigMap once when it is to be used.
    pub fn new(opts: AuthOptions) -> Result<Arc<Delegating>> {
        let cm_location = format!("configmap/{AUTH_CONFIGMAP_NAME} in {AUTH_CONFIGMAP_NAMESPACE}");
        let configmap = match (&opts.authentication, opts.skip_lookup) {
            (Some(c), false) => Some(AuthConfigMap::new(c.clone(), opts.configmap_refresh)),
            _ => None,
        };

        let x509 = match (&opts.client_ca_file, &configmap) {
            (Some(f), _) => {
                // A file that cannot be used is fatal at start, as upstream.
                let bytes = std::fs::read(f).map_err(|e| {
                    Error::config(format!(
                        "unable to load client CA provider: {}: {e}",
                        f.display()
                    ))
                })?;
                CaBundle::from_pem(&bytes).map_err(|e| {
                    Error::config(format!(
                        "unable to load client CA provider: {}: {e}",
                        f.display()
                    ))
                })?;
                Some(CaProvider::new(CaSource::File(f.clone())))
            }
            (None, Some(cm)) => Some(CaProvider::new(CaSource::ConfigMap(
                cm.clone(),
                "client-ca-file",
            ))),
            (None, None) => {
                if !opts.skip_lookup {
                    log::warn!("{LOOKUP_WARNING} client-ca-file in {cm_location}, so client certificate authentication won't work.");
                }
                None
            }
        };

        let request_header = match (&opts.request_header, &configmap) {
            (Some(rh), _) => {
                let bytes = std::fs::read(&rh.client_ca_file).map_err(|e| {
                    Error::config(format!(
                        "unable to load request-header-client-ca-file: {}: {e}",
                        rh.client_ca_file.display()
                    ))
                })?;
                CaBundle::from_pem(&bytes).map_err(|e| {
                    Error::config(format!(
                        "unable to load request-header-client-ca-file: {}: {e}",
                        rh.client_ca_file.display()
                    ))
                })?;
                Some(RequestHeaderAuth {
                    ca: CaProvider::new(CaSource::File(rh.client_ca_file.clone())),
                    settings: HeaderSettingsSource::Static(rh.settings.clone()),
                })
            }
            (None, Some(cm)) => {
                let looked_up = cm
                    .load()
                    .map_err(|e| e.to_string())
                    .and_then(|_| RequestHeaderSettings::from_configmap(&cm.data()).map(|_| ()));
                match looked_up {
                    Ok(()) => Some(RequestHeaderAuth {
                        ca: CaProvider::new(CaSource::ConfigMap(
                            cm.clone(),
                            "requestheader-client-ca-file",
                        )),
                        settings: HeaderSettingsSource::ConfigMap(cm.clone()),
                    }),
                    Err(e) if opts.tolerate_lookup_failure => {
                        log::warn!("Error looking up in-cluster authentication configuration: {e}");
                        log::warn!("Continuing without authentication configuration. This may treat all requests as anonymous.");
                        log::warn!("To require authentication configuration lookup to succeed, set --authentication-tolerate-lookup-failure=false");
                        None
                    }
                    Err(e) => {
                        return Err(Error::config(format!(
                            "unable to load configmap based request-header-client-ca-file: {e}"
                        )))
                    }
                }
            }
            (None, None) => {
                if !opts.skip_lookup {
                    log::warn!("{LOOKUP_WARNING} requestheader-client-ca-file in {cm_location}, so request-header client certificate authentication won't work.");
                }
                None
            }
        };

        let tokens = opts.authentication.as_ref().map(|r| TokenAuth {
            reviewer: r.clone(),
            ttl: opts.token_cache_ttl,
            cache: Mutex::new(HashMap::new()),
        });
        let access = match &opts.authorization {
            Some(r) => Some(AccessReviewAuth {
                reviewer: r.clone(),
                allow_ttl: opts.authorized_ttl,
                deny_ttl: opts.unauthorized_ttl,
                cache: Mutex::new(HashMap::new()),
            }),
            None => {
                log::warn!("No authorization-kubeconfig provided, so SubjectAccessReview of authorization tokens won't work.");
                None
            }
        };
        Ok(Arc::new(Delegating {
            request_header,
            x509,
            tokens,
            always_allow_groups: opts.always_allow_groups,
            always_allow_paths: PathAllow::new(&opts.always_allow_paths)?,
            access,
        }))
    }

    /// Who sent the request: Ok(user) (possibly anonymous) or Err(why) for a 401.
    pub fn authenticate(&self, req: &Request) -> std::result::Result<UserInfo, String> {
        let mut errors: Vec<String> = Vec::new();
        let mut found: Option<UserInfo> = None;
        if let Some(rh) = &self.request_header {
            match rh.authenticate(req) {
                Ok(Some(u)) => found = Some(u),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if found.is_none() {
            if let Some(ca) = &self.x509 {
                match x509_authenticate(ca, req) {
                    Ok(Some(u)) => found = Some(u),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
        }
        if found.is_none() {
            if let (Some(t), Some(token)) = (&self.tokens, bearer_token(req)) {
                match t.authenticate(token) {
                    Ok(u) => found = Some(u),
                    Err(e) => errors.push(e),
                }
            }
        }
        match found {
            Some(mut u) => {
                let marked = u.name == ANONYMOUS_USER
                    || u.groups
                        .iter()
                        .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
                if !marked {
                    u.groups.push(AUTHENTICATED_GROUP.to_string());
                }
                Ok(u)
            }
            None if !errors.is_empty() => Err(errors.join("; ")),
            None => Ok(UserInfo::anonymous()),
        }
    }

    /// May `user` do `verb` (lower-case HTTP method) on the non-resource URL `path`?
    pub fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Verdict {
        if user
            .groups
            .iter()
            .any(|g| self.always_allow_groups.contains(g))
        {
            return (Decision::Allow, String::new(), None);
        }
        if self.always_allow_paths.allows(path) {
            return (Decision::Allow, String::new(), None);
        }
        match &self.access {
            Some(a) => a.authorize(user, verb, path),
            None => (Decision::NoOpinion, String::new(), None),
        }
    }

    /// The filter for the secure port: None lets the request through.
    pub fn check(&self, req: &Request) -> Option<Response> {
        let user = match self.authenticate(req) {
            Ok(u) => u,
            Err(e) => {
                log::error!("Unable to authenticate the request: {e}");
                return Some(unauthorized());
            }
        };
        let path = path_unescape(&req.path).unwrap_or_else(|| req.path.clone());
        let verb = req.method.to_ascii_lowercase();
        match self.authorize(&user, &verb, &path) {
            (Decision::Allow, _, _) => None,
            (_, _, Some(err)) => Some(internal_error(req, &err)),
            (_, reason, None) => {
                log::debug!(
                    "Forbidden: {} {path} for {}: {reason}",
                    req.method,
                    user.name
                );
                Some(forbidden(&user.name, &verb, &path, &reason))
            }
        }
    }

    pub fn filter(self: &Arc<Self>) -> Filter {
        let me = self.clone();
        Arc::new(move |req: &Request| me.check(req))
    }
}

// ---------------------------------------------------------------------------------------------
// Answers

#[derive(Serialize)]
struct Status<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: BTreeMap<String, String>,
    status: &'static str,
    message: &'a str,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<BTreeMap<String, String>>,
    code: u16,
}

fn status_json(code: u16, reason: &'static str, message: &str, details: bool) -> String {
    let s = Status {
        kind: "Status",
        api_version: "v1",
        metadata: BTreeMap::new(),
        status: "Failure",
        message,
        reason,
        details: details.then(BTreeMap::new),
        code,
    };
    serde_json::to_string_pretty(&s).unwrap_or_default()
}

/// 401 as the apiserver library writes it.
pub fn unauthorized() -> Response {
    Response::json(401, status_json(401, "Unauthorized", "Unauthorized", false))
}

/// Markup characters are replaced so that an error never looks like HTML.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// 403 for a non-resource request, with upstream's message.
pub fn forbidden(user: &str, verb: &str, path: &str, reason: &str) -> Response {
    let mut msg = sanitize(&format!(
        "User {} cannot {verb} path {}",
        go_quote(user),
        go_quote(path)
    ));
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let message = format!("forbidden: {msg}");
    Response::json(403, status_json(403, "Forbidden", &message, true)).with_nosniff()
}

/// 500 for an authorizer that failed (Go's `http.Error` text).
pub fn internal_error(req: &Request, err: &str) -> Response {
    let uri = if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    };
    Response::error(
        500,
        &sanitize(&format!("Internal Server Error: {}: {err}", go_quote(&uri))),
    )
}

#[cfg(test)]
mod tests;
