//! Authenticators: request headers from a front proxy, client certificates, and bearer
//! tokens checked with a TokenReview (answers cached).

use super::*;

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

pub(super) enum HeaderSettingsSource {
    Static(RequestHeaderSettings),
    ConfigMap(Arc<AuthConfigMap>),
}

pub(super) struct RequestHeaderAuth {
    pub(super) ca: CaProvider,
    pub(super) settings: HeaderSettingsSource,
}

pub(super) fn has_prefix_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len()
        && s.is_char_boundary(prefix.len())
        && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Go's `url.PathUnescape`; None for a malformed escape.
pub(super) fn path_unescape(s: &str) -> Option<String> {
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
    pub(super) fn settings(&self) -> RequestHeaderSettings {
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

    pub(super) fn authenticate(
        &self,
        req: &Request,
    ) -> std::result::Result<Option<UserInfo>, String> {
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

pub(super) fn x509_authenticate(
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

pub(super) type TokenOutcome = std::result::Result<UserInfo, String>;

pub(super) struct TokenAuth {
    pub(super) reviewer: Arc<dyn Reviewer>,
    pub(super) ttl: Duration,
    pub(super) cache: Mutex<HashMap<[u8; 32], (Instant, TokenOutcome)>>,
}

pub(super) fn user_from_review(user: &Value) -> UserInfo {
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

pub(super) fn insert_bounded<K: std::hash::Hash + Eq, V>(
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
    pub(super) fn authenticate(&self, token: &str) -> TokenOutcome {
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
