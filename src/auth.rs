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

use crate::gofmt::go_quote;
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
use crate::config::Config;
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

// ---------------------------------------------------------------------------------------------
// Certificates

/// A CA bundle ready to verify client certificate chains.
#[derive(Clone)]
pub struct CaBundle {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaBundle")
    }
}

impl CaBundle {
    /// Every certificate of the PEM bundle becomes a root; any unreadable one is an error.
    pub fn from_pem(pem: &[u8]) -> std::result::Result<CaBundle, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| format!("unable to parse the CA bundle: {e}"))?;
            roots
                .add(c)
                .map_err(|e| format!("unusable CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the CA bundle holds no certificate".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("CA bundle: {e}"))?;
        Ok(CaBundle { verifier })
    }

    /// Verify a chain (leaf first) for client authentication, as of now.
    pub fn verify(&self, chain: &[Vec<u8>]) -> std::result::Result<(), String> {
        let Some(leaf) = chain.first() else {
            return Err("no certificate".into());
        };
        let leaf = CertificateDer::from(leaf.as_slice());
        let intermediates: Vec<CertificateDer<'_>> = chain[1..]
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        self.verifier
            .verify_client_cert(&leaf, &intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| format!("verifying certificate failed: {e}"))
    }
}

/// One DER TLV: (tag, contents, rest).
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *input.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    if end > input.len() {
        return None;
    }
    Some((tag, &input[header..end], &input[end..]))
}

fn der_string(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String, T61String, NumericString
        0x0c | 0x13 | 0x16 | 0x14 | 0x12 => Some(String::from_utf8_lossy(v).into_owned()),
        // BMPString (UTF-16BE)
        0x1e => {
            let units: Vec<u16> = v
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// The subject's common name (the last one, as Go) and organizations of a DER certificate.
pub fn subject_cn_and_orgs(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (tag, cert, _) = der_next(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = der_next(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, _, mut rest) = der_next(tbs)?;
    if tag == 0xa0 {
        // [0] version, then the serial number.
        rest = der_next(rest)?.2;
    }
    // signature algorithm, issuer, validity
    for _ in 0..3 {
        rest = der_next(rest)?.2;
    }
    let (tag, mut subject, _) = der_next(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    while !subject.is_empty() {
        let (tag, mut set, r) = der_next(subject)?;
        subject = r;
        if tag != 0x31 {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, r) = der_next(set)?;
            set = r;
            if tag != 0x30 {
                return None;
            }
            let (tag, oid, r) = der_next(atv)?;
            if tag != 0x06 {
                return None;
            }
            let (vtag, value, _) = der_next(r)?;
            let Some(text) = der_string(vtag, value) else {
                continue;
            };
            if oid == OID_COMMON_NAME {
                cn = text;
            } else if oid == OID_ORGANIZATION {
                orgs.push(text);
            }
        }
    }
    Some((cn, orgs))
}

// ---------------------------------------------------------------------------------------------
// The authentication ConfigMap

/// `kube-system/extension-apiserver-authentication`, read through a reviewer client and kept
/// for [`CONFIGMAP_REFRESH`].
pub struct AuthConfigMap {
    client: Arc<dyn Reviewer>,
    refresh: Duration,
    state: Mutex<ConfigMapState>,
}

#[derive(Default)]
struct ConfigMapState {
    data: Arc<BTreeMap<String, String>>,
    fetched: Option<Instant>,
}

fn configmap_data(cm: &Value) -> BTreeMap<String, String> {
    cm.get("data")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl AuthConfigMap {
    pub fn new(client: Arc<dyn Reviewer>, refresh: Duration) -> Arc<Self> {
        Arc::new(AuthConfigMap {
            client,
            refresh,
            state: Mutex::new(ConfigMapState::default()),
        })
    }

    /// Read it now; Ok(false) when it does not exist (then its settings are empty).
    pub fn load(&self) -> Result<bool> {
        let mut st = lock(&self.state);
        self.load_locked(&mut st)
    }

    fn load_locked(&self, st: &mut ConfigMapState) -> Result<bool> {
        st.fetched = Some(Instant::now());
        let cm = self
            .client
            .get_configmap(AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME)?;
        st.data = Arc::new(cm.as_ref().map(configmap_data).unwrap_or_default());
        Ok(cm.is_some())
    }

    /// The current data, re-read first when older than the refresh period (a failed re-read
    /// keeps the last data).
    pub fn data(&self) -> Arc<BTreeMap<String, String>> {
        let mut st = lock(&self.state);
        let stale = st.fetched.is_none_or(|t| t.elapsed() >= self.refresh);
        if stale {
            if let Err(e) = self.load_locked(&mut st) {
                log::warn!(
                    "unable to read configmap/{AUTH_CONFIGMAP_NAME} in {AUTH_CONFIGMAP_NAMESPACE}: {e}"
                );
            }
        }
        st.data.clone()
    }
}

/// Where a CA bundle comes from.
pub enum CaSource {
    /// A PEM file, re-read when its modification time or size changes.
    File(PathBuf),
    /// A key of the authentication ConfigMap.
    ConfigMap(Arc<AuthConfigMap>, &'static str),
}

struct CaProvider {
    source: CaSource,
    /// (what it was built from, the bundle).
    cached: Mutex<Option<(String, Option<CaBundle>)>>,
}

fn file_stamp(p: &Path) -> String {
    match std::fs::metadata(p) {
        Ok(m) => format!(
            "{:?}/{}",
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()),
            m.len()
        ),
        Err(e) => format!("error {e}"),
    }
}

impl CaProvider {
    fn new(source: CaSource) -> Self {
        CaProvider {
            source,
            cached: Mutex::new(None),
        }
    }

    /// The bundle now; None when there is none (no verification possible).
    fn bundle(&self) -> Option<CaBundle> {
        let (stamp, pem) = match &self.source {
            CaSource::File(p) => (file_stamp(p), None),
            CaSource::ConfigMap(cm, key) => {
                let data = cm.data();
                let pem = data.get(*key).cloned().unwrap_or_default();
                (pem.clone(), Some(pem))
            }
        };
        let mut cached = lock(&self.cached);
        if let Some((s, b)) = cached.as_ref() {
            if *s == stamp {
                return b.clone();
            }
        }
        let bundle = match (&self.source, pem) {
            (CaSource::File(p), _) => match std::fs::read(p) {
                Ok(bytes) => CaBundle::from_pem(&bytes)
                    .map_err(|e| log::error!("{}: {e}", p.display()))
                    .ok(),
                Err(e) => {
                    log::error!("unable to read {}: {e}", p.display());
                    None
                }
            },
            (_, Some(pem)) if pem.trim().is_empty() => None,
            (CaSource::ConfigMap(_, key), Some(pem)) => CaBundle::from_pem(pem.as_bytes())
                .map_err(|e| log::error!("configmap key {key}: {e}"))
                .ok(),
            _ => None,
        };
        *cached = Some((stamp, bundle.clone()));
        bundle
    }
}

// ---------------------------------------------------------------------------------------------
// Authenticators

/// Request-header settings (the `--requestheader-*` flags or the ConfigMap's keys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestHeaderSettings {
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefixes: Vec<String>,
    pub allowed_names: Vec<String>,
}

impl RequestHeaderSettings {
    /// The flags' defaults (used with `--requestheader-client-ca-file`).
    pub fn flag_defaults() -> Self {
        RequestHeaderSettings {
            username_headers: vec!["x-remote-user".into()],
            group_headers: vec!["x-remote-group".into()],
            extra_headers_prefixes: vec!["x-remote-extra-".into()],
            allowed_names: Vec::new(),
        }
    }

    /// From the ConfigMap's JSON-list keys; a malformed key is an error.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> std::result::Result<Self, String> {
        let list = |key: &str| -> std::result::Result<Vec<String>, String> {
            match data.get(key).map(String::as_str) {
                None | Some("") => Ok(Vec::new()),
                Some(text) => serde_json::from_str::<Vec<String>>(text)
                    .map_err(|e| format!("configmap key {key}: {e}")),
            }
        };
        Ok(RequestHeaderSettings {
            username_headers: list("requestheader-username-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_headers_prefixes: list("requestheader-extra-headers-prefix")?,
            allowed_names: list("requestheader-allowed-names")?,
        })
    }
}

/// Request-header (front proxy) options given by flags.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeaderOptions {
    pub client_ca_file: PathBuf,
    pub settings: RequestHeaderSettings,
}

enum HeaderSettingsSource {
    Static(RequestHeaderSettings),
    ConfigMap(Arc<AuthConfigMap>),
}

struct RequestHeaderAuth {
    ca: CaProvider,
    settings: HeaderSettingsSource,
}

fn has_prefix_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len()
        && s.is_char_boundary(prefix.len())
        && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Go's `url.PathUnescape`; None for a malformed escape.
fn path_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

impl RequestHeaderAuth {
    fn settings(&self) -> RequestHeaderSettings {
        match &self.settings {
            HeaderSettingsSource::Static(s) => s.clone(),
            HeaderSettingsSource::ConfigMap(cm) => {
                RequestHeaderSettings::from_configmap(&cm.data()).unwrap_or_else(|e| {
                    log::warn!("{e}");
                    RequestHeaderSettings::default()
                })
            }
        }
    }

    fn authenticate(&self, req: &Request) -> std::result::Result<Option<UserInfo>, String> {
        if req.peer_certs.is_empty() {
            return Ok(None);
        }
        let Some(ca) = self.ca.bundle() else {
            return Ok(None);
        };
        ca.verify(&req.peer_certs)?;
        let settings = self.settings();
        if !settings.allowed_names.is_empty() {
            let cn = subject_cn_and_orgs(&req.peer_certs[0])
                .map(|(cn, _)| cn)
                .unwrap_or_default();
            if !settings.allowed_names.contains(&cn) {
                return Err(format!(
                    "x509: subject with cn={cn} is not in the allowed list"
                ));
            }
        }
        let name = settings
            .username_headers
            .iter()
            .find_map(|h| req.header(h).filter(|v| !v.is_empty()));
        let Some(name) = name else {
            return Ok(None);
        };
        let mut groups = Vec::new();
        for h in &settings.group_headers {
            for (k, v) in &req.headers {
                if k.eq_ignore_ascii_case(h) && !v.is_empty() {
                    groups.push(v.clone());
                }
            }
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for prefix in &settings.extra_headers_prefixes {
            for (k, v) in &req.headers {
                if has_prefix_ignore_case(k, prefix) {
                    let raw = k[prefix.len()..].to_ascii_lowercase();
                    let key = path_unescape(&raw).unwrap_or(raw);
                    extra.entry(key).or_default().push(v.clone());
                }
            }
        }
        Ok(Some(UserInfo {
            name: name.to_string(),
            uid: String::new(),
            groups,
            extra,
        }))
    }
}

fn x509_authenticate(
    ca: &CaProvider,
    req: &Request,
) -> std::result::Result<Option<UserInfo>, String> {
    if req.peer_certs.is_empty() {
        return Ok(None);
    }
    let Some(bundle) = ca.bundle() else {
        return Ok(None);
    };
    bundle.verify(&req.peer_certs)?;
    let Some((cn, orgs)) = subject_cn_and_orgs(&req.peer_certs[0]) else {
        return Err("unable to read the certificate's subject".into());
    };
    if cn.is_empty() {
        return Ok(None);
    }
    Ok(Some(UserInfo {
        name: cn,
        uid: String::new(),
        groups: orgs,
        extra: BTreeMap::new(),
    }))
}

/// The token of an `Authorization: Bearer <token>` header, as upstream reads it.
pub fn bearer_token(req: &Request) -> Option<&str> {
    let auth = req.header("authorization")?.trim();
    if auth.is_empty() {
        return None;
    }
    let mut parts = auth.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return None;
    }
    Some(token)
}

type TokenOutcome = std::result::Result<UserInfo, String>;

struct TokenAuth {
    reviewer: Arc<dyn Reviewer>,
    ttl: Duration,
    cache: Mutex<HashMap<[u8; 32], (Instant, TokenOutcome)>>,
}

fn user_from_review(user: &Value) -> UserInfo {
    let s = |k: &str| {
        user.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let list = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let extra = user
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), list(Some(v)))).collect())
        .unwrap_or_default();
    UserInfo {
        name: s("username"),
        uid: s("uid"),
        groups: list(user.get("groups")),
        extra,
    }
}

fn insert_bounded<K: std::hash::Hash + Eq, V>(
    cache: &mut HashMap<K, (Instant, V)>,
    key: K,
    expiry: Instant,
    v: V,
) {
    if cache.len() >= CACHE_LIMIT {
        let now = Instant::now();
        cache.retain(|_, (t, _)| *t > now);
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
    }
    cache.insert(key, (expiry, v));
}

impl TokenAuth {
    /// Ok(user), or Err(why) for a token that is not valid now or could not be checked.
    fn authenticate(&self, token: &str) -> TokenOutcome {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        if let Some((expiry, outcome)) = lock(&self.cache).get(&key) {
            if Instant::now() < *expiry {
                return outcome.clone();
            }
        }
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer = self
            .reviewer
            .create_review(&TOKENREVIEWS, &body)
            .map_err(|e| format!("TokenReview failed: {e}"))?;
        let status = answer.get("status").cloned().unwrap_or(Value::Null);
        // A rejection is cached like a success; a rejection that carries an error is not
        // (upstream caches "not authenticated" but never errors).
        let (outcome, cacheable) =
            if status.get("authenticated").and_then(Value::as_bool) == Some(true) {
                let user = user_from_review(status.get("user").unwrap_or(&Value::Null));
                (Ok(user), true)
            } else {
                match status.get("error").and_then(Value::as_str) {
                    Some(e) if !e.is_empty() => (Err(e.to_string()), false),
                    _ => (Err("invalid bearer token".to_string()), true),
                }
            };
        if cacheable && !self.ttl.is_zero() {
            insert_bounded(
                &mut lock(&self.cache),
                key,
                Instant::now() + self.ttl,
                outcome.clone(),
            );
        }
        outcome
    }
}

// ---------------------------------------------------------------------------------------------
// Authorizers

struct PathAllow {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl PathAllow {
    fn new(paths: &[String]) -> Result<Self> {
        let mut exact = HashSet::new();
        let mut prefixes = Vec::new();
        for p in paths {
            let p = p.strip_prefix('/').unwrap_or(p);
            if p.is_empty() {
                exact.insert(String::new());
                continue;
            }
            if p[..p.len() - 1].contains('*') {
                return Err(Error::config(format!("only trailing * allowed in {p:?}")));
            }
            match p.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_string()),
                None => {
                    exact.insert(p.to_string());
                }
            }
        }
        Ok(PathAllow { exact, prefixes })
    }

    fn allows(&self, path: &str) -> bool {
        let p = path.strip_prefix('/').unwrap_or(path);
        self.exact.contains(p) || self.prefixes.iter().any(|pre| p.starts_with(pre.as_str()))
    }
}

struct AccessReviewAuth {
    reviewer: Arc<dyn Reviewer>,
    allow_ttl: Duration,
    deny_ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Value)>>,
}

/// A decision with its reason and error, as Kubernetes' authorizers answer.
pub type Verdict = (Decision, String, Option<String>);

impl AccessReviewAuth {
    fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Verdict {
        let mut spec = serde_json::Map::new();
        spec.insert(
            "nonResourceAttributes".into(),
            json!({"path": path, "verb": verb}),
        );
        if !user.name.is_empty() {
            spec.insert("user".into(), json!(user.name));
        }
        if !user.groups.is_empty() {
            spec.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            spec.insert("extra".into(), json!(user.extra));
        }
        if !user.uid.is_empty() {
            spec.insert("uid".into(), json!(user.uid));
        }
        let spec = Value::Object(spec);
        let key = spec.to_string();
        let cached = lock(&self.cache)
            .get(&key)
            .filter(|(t, _)| Instant::now() < *t)
            .map(|(_, s)| s.clone());
        let status = match cached {
            Some(s) => s,
            None => {
                let body = json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                });
                let answer = match self.reviewer.create_review(&SUBJECTACCESSREVIEWS, &body) {
                    Ok(a) => a,
                    Err(e) => {
                        log::error!("Failed to make webhook authorizer request: {e}");
                        return (Decision::NoOpinion, String::new(), Some(e.to_string()));
                    }
                };
                let status = answer.get("status").cloned().unwrap_or(json!({}));
                let allowed = status.get("allowed").and_then(Value::as_bool) == Some(true);
                let ttl = if allowed {
                    self.allow_ttl
                } else {
                    self.deny_ttl
                };
                if !ttl.is_zero() {
                    insert_bounded(
                        &mut lock(&self.cache),
                        key,
                        Instant::now() + ttl,
                        status.clone(),
                    );
                }
                status
            }
        };
        let flag = |k: &str| status.get(k).and_then(Value::as_bool) == Some(true);
        let reason = status
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match (flag("allowed"), flag("denied")) {
            (true, true) => (
                Decision::Deny,
                reason,
                Some("webhook subject access review returned both allow and deny response".into()),
            ),
            (_, true) => (Decision::Deny, reason, None),
            (true, _) => (Decision::Allow, reason, None),
            _ => (Decision::NoOpinion, reason, None),
        }
    }
}

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
fn delegated_client(path: Option<&Path>, what: &str) -> Result<Option<Client>> {
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

impl AuthOptions {
    /// The options kube-controller-manager's flags give.
    pub fn from_config(cfg: &Config) -> Result<AuthOptions> {
        let authn = delegated_client(cfg.authentication_kubeconfig.as_deref(), "authentication")?;
        let authz = delegated_client(cfg.authorization_kubeconfig.as_deref(), "authorization")?;
        Ok(AuthOptions {
            authentication: authn.map(|c| Arc::new(c) as Arc<dyn Reviewer>),
            authorization: authz.map(|c| Arc::new(c) as Arc<dyn Reviewer>),
            client_ca_file: cfg.client_ca_file.clone(),
            request_header: cfg
                .requestheader_client_ca_file
                .clone()
                .map(|client_ca_file| RequestHeaderOptions {
                    client_ca_file,
                    settings: RequestHeaderSettings {
                        username_headers: cfg.requestheader_username_headers.clone(),
                        group_headers: cfg.requestheader_group_headers.clone(),
                        extra_headers_prefixes: cfg.requestheader_extra_headers_prefix.clone(),
                        allowed_names: cfg.requestheader_allowed_names.clone(),
                    },
                }),
            skip_lookup: cfg.authentication_skip_lookup,
            tolerate_lookup_failure: cfg.authentication_tolerate_lookup_failure,
            token_cache_ttl: cfg.authentication_token_webhook_cache_ttl,
            authorized_ttl: cfg.authorization_webhook_cache_authorized_ttl,
            unauthorized_ttl: cfg.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths: cfg.authorization_always_allow_paths.clone(),
            ..AuthOptions::default()
        })
    }
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A reviewer answering from tables: token -> user, (user, path) -> status.
    #[derive(Default)]
    struct Fake {
        tokens: HashMap<String, Value>,
        rules: Vec<(String, String, Value)>,
        fail: bool,
        calls: AtomicUsize,
        configmap: Option<Value>,
    }

    impl Reviewer for Fake {
        fn create_review(&self, kind: &Kind, body: &Value) -> Result<Value> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err(Error::Transport("connection refused".into()));
            }
            if kind.plural == "tokenreviews" {
                let t = body["spec"]["token"].as_str().unwrap_or("");
                let status = match self.tokens.get(t) {
                    Some(u) => json!({"authenticated": true, "user": u}),
                    None => json!({"authenticated": false}),
                };
                return Ok(json!({ "status": status }));
            }
            let user = body["spec"]["user"].as_str().unwrap_or("");
            let path = body["spec"]["nonResourceAttributes"]["path"]
                .as_str()
                .unwrap_or("");
            let verb = body["spec"]["nonResourceAttributes"]["verb"]
                .as_str()
                .unwrap_or("");
            let status = self
                .rules
                .iter()
                .find(|(u, p, _)| u == user && p == path && verb == "get")
                .map(|(_, _, s)| s.clone())
                .unwrap_or(json!({"allowed": false}));
            Ok(json!({ "status": status }))
        }
        fn get_configmap(&self, _ns: &str, _name: &str) -> Result<Option<Value>> {
            if self.fail {
                return Err(Error::api(403, "Forbidden", "no"));
            }
            Ok(self.configmap.clone())
        }
    }

    fn dynr(f: &Arc<Fake>) -> Arc<dyn Reviewer> {
        f.clone()
    }

    fn fake() -> Arc<Fake> {
        let mut f = Fake::default();
        f.tokens.insert(
            "mon".into(),
            json!({"username": "system:serviceaccount:ns:mon", "uid": "u1",
                   "groups": ["system:serviceaccounts", "system:authenticated"]}),
        );
        f.tokens.insert(
            "plain".into(),
            json!({"username": "plain", "groups": ["devs"], "extra": {"scope": ["a"]}}),
        );
        f.tokens.insert(
            "admin".into(),
            json!({"username": "root", "groups": ["system:masters"]}),
        );
        f.rules.push((
            "system:serviceaccount:ns:mon".into(),
            "/metrics".into(),
            json!({"allowed": true}),
        ));
        f.rules.push((
            "plain".into(),
            "/metrics".into(),
            json!({"allowed": false, "reason": "no RBAC policy matched"}),
        ));
        f.rules.push((
            "plain".into(),
            "/both".into(),
            json!({"allowed": true, "denied": true}),
        ));
        Arc::new(f)
    }

    fn chain(f: Arc<Fake>) -> Arc<Delegating> {
        Delegating::new(AuthOptions {
            authentication: Some(dynr(&f)),
            authorization: Some(dynr(&f)),
            skip_lookup: true,
            ..AuthOptions::default()
        })
        .unwrap()
    }

    fn req(method: &str, path: &str, token: Option<&str>) -> Request {
        let mut r = Request {
            method: method.into(),
            path: path.into(),
            ..Default::default()
        };
        if let Some(t) = token {
            r.headers
                .push(("authorization".into(), format!("Bearer {t}")));
        }
        r
    }

    fn body(r: &Response) -> String {
        String::from_utf8(r.body.clone()).unwrap()
    }

    #[test]
    fn decision_table() {
        let d = chain(fake());
        // (method, path, token, expected status or None for "passes")
        let cases: &[(&str, &str, Option<&str>, Option<u16>)] = &[
            ("GET", "/healthz", None, None),
            ("GET", "/readyz", None, None),
            ("GET", "/livez", None, None),
            ("GET", "/healthz/ping", None, Some(403)),
            ("GET", "/metrics", None, Some(403)),
            ("GET", "/healthz", Some("garbage"), Some(401)),
            ("GET", "/metrics", Some("garbage"), Some(401)),
            ("GET", "/metrics", Some("mon"), None),
            ("POST", "/metrics", Some("mon"), Some(403)),
            ("GET", "/metrics", Some("plain"), Some(403)),
            ("GET", "/both", Some("plain"), Some(500)),
            ("GET", "/anything", Some("admin"), None),
            ("DELETE", "/metrics", Some("admin"), None),
        ];
        for (m, p, t, want) in cases {
            let got = d.check(&req(m, p, *t)).map(|r| r.status);
            assert_eq!(got, *want, "{m} {p} token={t:?}");
        }
    }

    #[test]
    fn bearer_parsing() {
        let with = |h: &str| {
            let mut r = req("GET", "/", None);
            r.headers.push(("authorization".into(), h.into()));
            bearer_token(&r).map(str::to_string)
        };
        assert_eq!(with("Bearer abc"), Some("abc".into()));
        assert_eq!(with("bearer abc"), Some("abc".into()));
        assert_eq!(with("  Bearer abc  "), Some("abc".into()));
        assert_eq!(with("Bearer abc def"), Some("abc".into()));
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer  abc"), None);
        assert_eq!(with("Basic Zm9vOmJhcg=="), None);
        assert_eq!(with(""), None);
        assert_eq!(bearer_token(&req("GET", "/", None)), None);
    }

    #[test]
    fn users_and_groups() {
        let d = chain(fake());
        let u = d.authenticate(&req("GET", "/", None)).unwrap();
        assert_eq!(u, UserInfo::anonymous());
        let u = d.authenticate(&req("GET", "/", Some("plain"))).unwrap();
        assert_eq!(u.groups, vec!["devs", AUTHENTICATED_GROUP]);
        assert_eq!(u.extra["scope"], vec!["a"]);
        let u = d.authenticate(&req("GET", "/", Some("mon"))).unwrap();
        assert_eq!(u.uid, "u1");
        assert_eq!(
            u.groups
                .iter()
                .filter(|g| *g == AUTHENTICATED_GROUP)
                .count(),
            1
        );
        // An empty bearer token is no credential at all: anonymous.
        let mut r = req("GET", "/metrics", None);
        r.headers.push(("authorization".into(), "Bearer ".into()));
        assert_eq!(d.authenticate(&r).unwrap().name, ANONYMOUS_USER);
    }

    #[test]
    fn reviews_are_cached() {
        let f = fake();
        let d = chain(f.clone());
        for _ in 0..3 {
            assert!(d.check(&req("GET", "/metrics", Some("mon"))).is_none());
            assert_eq!(
                d.check(&req("GET", "/metrics", Some("garbage")))
                    .unwrap()
                    .status,
                401
            );
        }
        // One TokenReview per token, one SubjectAccessReview for mon.
        assert_eq!(f.calls.load(Ordering::SeqCst), 3);

        // TTL zero: nothing is cached.
        let f = fake();
        let d = Delegating::new(AuthOptions {
            authentication: Some(dynr(&f)),
            authorization: Some(dynr(&f)),
            skip_lookup: true,
            token_cache_ttl: Duration::ZERO,
            authorized_ttl: Duration::ZERO,
            ..AuthOptions::default()
        })
        .unwrap();
        for _ in 0..2 {
            assert!(d.check(&req("GET", "/metrics", Some("mon"))).is_none());
        }
        assert_eq!(f.calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn failures_of_the_reviewers() {
        let f = Arc::new(Fake {
            fail: true,
            ..Fake::default()
        });
        let d = chain(f.clone());
        // TokenReview unreachable: 401, not cached.
        for _ in 0..2 {
            assert_eq!(
                d.check(&req("GET", "/healthz", Some("x"))).unwrap().status,
                401
            );
        }
        assert_eq!(f.calls.load(Ordering::SeqCst), 2);
        // SubjectAccessReview unreachable: 500 with Go's text.
        let mut r = req("GET", "/metrics", None);
        r.query = "a=<b>".into();
        let resp = d.check(&r).unwrap();
        assert_eq!(resp.status, 500);
        assert_eq!(
            body(&resp),
            "Internal Server Error: \"/metrics?a=&lt;b&gt;\": transport error: connection refused\n"
        );
        // Anonymous requests to always-allowed paths never ask.
        assert!(d.check(&req("GET", "/healthz", None)).is_none());
    }

    #[test]
    fn without_kubeconfigs_only_always_allowed_pass() {
        let d = Delegating::new(AuthOptions::default()).unwrap();
        assert!(d.check(&req("GET", "/healthz", None)).is_none());
        assert_eq!(d.check(&req("GET", "/metrics", None)).unwrap().status, 403);
        // A token cannot be checked: it is ignored and the request is anonymous.
        let r = d.check(&req("GET", "/metrics", Some("anything"))).unwrap();
        assert!(body(&r).contains("User \\\"system:anonymous\\\""));
    }

    #[test]
    fn always_allow_paths_syntax() {
        let p = PathAllow::new(&["/healthz".into(), "/debug/*".into(), "/".into()]).unwrap();
        assert!(p.allows("/healthz"));
        assert!(!p.allows("/healthz/ping"));
        assert!(p.allows("/debug/pprof/heap"));
        assert!(p.allows("/"));
        assert!(!p.allows("/metrics"));
        let err = PathAllow::new(&["/a*b".into()]).err().unwrap();
        assert_eq!(err.to_string(), "only trailing * allowed in \"a*b\"");
    }

    #[test]
    fn answer_bodies_match_upstream() {
        let r = unauthorized();
        assert_eq!(
            body(&r),
            "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \
             \"status\": \"Failure\",\n  \"message\": \"Unauthorized\",\n  \"reason\": \
             \"Unauthorized\",\n  \"code\": 401\n}"
        );
        assert_eq!(r.body.len(), 157);
        assert_eq!(r.content_type, "application/json");
        assert_eq!(r.header("x-content-type-options"), None);
        let r = forbidden("system:anonymous", "get", "/metrics", "");
        assert_eq!(r.body.len(), 224);
        assert!(body(&r).contains(
            "\"message\": \"forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/metrics\\\"\""
        ));
        assert!(body(&r).contains("\"details\": {},\n  \"code\": 403\n}"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let r = forbidden("a<b", "head", "/x", "no RBAC policy matched");
        assert!(body(&r).contains(
            "forbidden: User \\\"a&lt;b\\\" cannot head path \\\"/x\\\": no RBAC policy matched"
        ));
    }

    #[test]
    fn forbidden_reason_from_the_review() {
        let d = chain(fake());
        let r = d.check(&req("GET", "/metrics", Some("plain"))).unwrap();
        assert!(body(&r).contains(
            "forbidden: User \\\"plain\\\" cannot get path \\\"/metrics\\\": no RBAC policy matched"
        ));
    }

    #[test]
    fn lookup_failure_is_fatal_unless_tolerated() {
        let f = Arc::new(Fake {
            fail: true,
            ..Fake::default()
        });
        let opts = || AuthOptions {
            authentication: Some(dynr(&f)),
            ..AuthOptions::default()
        };
        let err = Delegating::new(opts()).err().unwrap();
        assert!(err
            .to_string()
            .contains("unable to load configmap based request-header-client-ca-file"));
        let d = Delegating::new(AuthOptions {
            tolerate_lookup_failure: true,
            ..opts()
        })
        .unwrap();
        assert!(d.request_header.is_none());
        assert!(d.x509.is_some());
        // NotFound is fine.
        let ok = Arc::new(Fake::default());
        let d = Delegating::new(AuthOptions {
            authentication: Some(dynr(&ok)),
            ..AuthOptions::default()
        })
        .unwrap();
        assert!(d.request_header.is_some());
    }

    #[test]
    fn requestheader_settings_from_configmap() {
        let mut data = BTreeMap::new();
        data.insert(
            "requestheader-username-headers".to_string(),
            "[\"X-Remote-User\"]".to_string(),
        );
        data.insert(
            "requestheader-allowed-names".to_string(),
            "[\"front-proxy-client\"]".to_string(),
        );
        let s = RequestHeaderSettings::from_configmap(&data).unwrap();
        assert_eq!(s.username_headers, vec!["X-Remote-User"]);
        assert_eq!(s.allowed_names, vec!["front-proxy-client"]);
        assert!(s.group_headers.is_empty());
        data.insert("requestheader-group-headers".into(), "not json".into());
        assert!(RequestHeaderSettings::from_configmap(&data).is_err());
    }

    #[test]
    fn path_unescaping() {
        assert_eq!(path_unescape("/a%2Fb").as_deref(), Some("/a/b"));
        assert_eq!(path_unescape("a+b").as_deref(), Some("a+b"));
        assert_eq!(path_unescape("%zz"), None);
        assert_eq!(path_unescape("%4"), None);
    }

    #[test]
    fn subject_parsing() {
        use rcgen::{CertificateParams, DnType, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        p.distinguished_name
            .push(DnType::CommonName, "kubernetes-admin");
        let cert = p.self_signed(&key).unwrap();
        let (cn, orgs) = subject_cn_and_orgs(cert.der()).unwrap();
        assert_eq!(cn, "kubernetes-admin");
        assert_eq!(orgs, vec!["system:masters"]);
        assert!(subject_cn_and_orgs(b"\x30\x03\x02\x01").is_none());
        assert!(subject_cn_and_orgs(&[]).is_none());
    }
}
