//! What a request asks for: patch types, list/watch/delete options and query strings.

use serde_json::Value;

use super::json_text;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    /// Ask for `PartialObjectMetadataList` (metadata only).
    pub metadata_only: bool,
    /// Decode items trimmed to what the cache keeps (`list_all`/`list` only).
    pub shape: Option<crate::api::trim::Shape>,
    /// The caller retries with its own backoff (a reflector): a transport error or 5xx is
    /// returned at once instead of being retried here.
    pub caller_retries: bool,
    /// The caller has taken the client's QPS limiter token for the first request already
    /// (`Client::pass_limiter`, awaited by an async caller without holding a thread).
    pub limiter_passed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: String,
    pub timeout_seconds: u64,
    pub allow_bookmarks: bool,
    pub metadata_only: bool,
    /// Decode objects trimmed to what the cache keeps.
    pub shape: Option<crate::api::trim::Shape>,
    /// Where the objects of events echoing our own writes are found decoded (`api::echo`).
    pub echoes: Option<crate::api::echo::Echoes>,
    /// Open without taking a token of the client's QPS limiter (`watch_async` only): a
    /// reflector's first watch after its server came back (`cache::ready`).
    pub limiter_passed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation_policy: Option<&'static str>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

impl DeleteOptions {
    pub(super) fn body(&self) -> Option<String> {
        let mut m = serde_json::Map::new();
        if let Some(p) = self.propagation_policy {
            m.insert("propagationPolicy".into(), p.into());
        }
        if let Some(g) = self.grace_period_seconds {
            m.insert("gracePeriodSeconds".into(), g.into());
        }
        let mut pre = serde_json::Map::new();
        if let Some(u) = &self.precondition_uid {
            pre.insert("uid".into(), u.clone().into());
        }
        if let Some(rv) = &self.precondition_resource_version {
            pre.insert("resourceVersion".into(), rv.clone().into());
        }
        if !pre.is_empty() {
            m.insert("preconditions".into(), Value::Object(pre));
        }
        if m.is_empty() {
            return None;
        }
        m.insert("kind".into(), "DeleteOptions".into());
        m.insert("apiVersion".into(), "v1".into());
        Some(json_text(&Value::Object(m)))
    }
}

/// A query string builder with percent-encoding.
#[derive(Default)]
pub(super) struct Query(String);

impl Query {
    pub(super) fn push(&mut self, k: &str, v: &str) {
        self.0.push(if self.0.is_empty() { '?' } else { '&' });
        self.0.push_str(k);
        self.0.push('=');
        self.0.push_str(&percent_encode(v));
    }
    pub(super) fn opt(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.push(k, v);
        }
    }
    pub(super) fn finish(self) -> String {
        self.0
    }
}

pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
