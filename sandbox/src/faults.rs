//! Injected faults: error answers, answers carried out but never sent, pauses, dropped
//! watches, compaction and expired tokens. [`Faults`] is the handle tests hold; the connection
//! loop asks `Shared` which fault, if any, applies to a request.

use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::{lock, meta, Shared};

struct FailRule {
    remaining: usize,
    /// Until then, however many requests match (`remaining` is not counted down).
    until: Option<Instant>,
    /// 0: the request is served, then its connection is reset before the answer is written.
    code: u16,
    path_contains: Option<String>,
    method: Option<String>,
}

#[derive(Default)]
pub(super) struct FaultState {
    rules: Vec<FailRule>,
    pause_until: Option<Instant>,
}

impl Shared {
    /// Sleep while a pause is in force. False when the sandbox stopped meanwhile.
    pub(super) fn wait_unpaused(&self) -> bool {
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                return false;
            }
            let until = lock(&self.faults).pause_until;
            match until {
                Some(u) if Instant::now() < u => {
                    thread::sleep((u - Instant::now()).min(Duration::from_millis(20)));
                }
                _ => return true,
            }
        }
    }

    pub(super) fn paused(&self) -> bool {
        lock(&self.faults)
            .pause_until
            .is_some_and(|u| Instant::now() < u)
    }

    pub(super) fn take_fault(&self, method: &str, target: &str) -> Option<u16> {
        let mut f = lock(&self.faults);
        let now = Instant::now();
        f.rules
            .retain(|r| r.until.map_or(r.remaining > 0, |u| now < u));
        let rule = f.rules.iter_mut().find(|r| {
            r.path_contains
                .as_deref()
                .is_none_or(|p| target.contains(p))
                && r.method.as_deref().is_none_or(|m| m == method)
        })?;
        if rule.until.is_none() {
            rule.remaining -= 1;
        }
        Some(rule.code)
    }
}

/// A handle for injecting faults; clones share the sandbox.
#[derive(Clone)]
pub struct Faults {
    pub(super) shared: Arc<Shared>,
}

impl Faults {
    /// End every open watch stream now (a clean server-side close of the stream and its
    /// connection).
    pub fn drop_watches(&self) {
        self.shared.lock_state().drop_watchers();
    }

    /// Answer the next `n` requests whose path (with query) contains `path_contains` (all
    /// requests when `None`) with `code`: 429 (with `Retry-After: 1`), 500, 503 or any other
    /// status, as a `Status` body.
    pub fn fail_next(&self, n: usize, code: u16, path_contains: Option<&str>) {
        lock(&self.shared.faults).rules.push(FailRule {
            remaining: n,
            until: None,
            code,
            path_contains: path_contains.map(str::to_string),
            method: None,
        });
    }

    /// Answer every request whose path contains `path_contains` (all when `None`) with `code`
    /// for the next `d` (kube-apiserver answers 403 for a few seconds after it starts, while
    /// its RBAC cache warms up).
    pub fn fail_for(&self, d: Duration, code: u16, path_contains: Option<&str>) {
        lock(&self.shared.faults).rules.push(FailRule {
            remaining: 0,
            until: Some(Instant::now() + d),
            code,
            path_contains: path_contains.map(str::to_string),
            method: None,
        });
    }

    /// Carry out the next `n` requests of `method` whose path contains `path_contains`, then
    /// reset their connections instead of answering: the client cannot know whether its
    /// write happened.
    pub fn lose_answers(&self, n: usize, method: &str, path_contains: Option<&str>) {
        lock(&self.shared.faults).rules.push(FailRule {
            remaining: n,
            until: None,
            code: 0,
            path_contains: path_contains.map(str::to_string),
            method: Some(method.to_string()),
        });
    }

    /// Compact: every resourceVersion below the current one becomes too old for watches and
    /// continue tokens.
    pub fn expire_history(&self) {
        self.shared.lock_state().expire_history();
    }

    /// Make every token minted by the `token` subresource expired (requests with them get 401
    /// under `require_auth`).
    pub fn expire_tokens(&self) {
        let now = SystemTime::now();
        for (_, expiry) in self.shared.lock_state().tokens.values_mut() {
            *expiry = now;
        }
    }

    /// Requests are accepted but not answered, and watches deliver nothing, until `d` passes.
    pub fn pause(&self, d: Duration) {
        lock(&self.shared.faults).pause_until = Some(Instant::now() + d);
    }
}

/// The `Status` answer (and headers) of an injected error.
pub(super) fn fault_reply(code: u16) -> (u16, Value, Vec<(String, String)>) {
    let (reason, message) = match code {
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ("InternalError", "Internal error occurred: injected fault"),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        401 => ("Unauthorized", "Unauthorized"),
        403 => (
            "Forbidden",
            "forbidden: User \"system:kube-controller-manager\" cannot perform this request \
             (injected fault)",
        ),
        _ => ("InternalError", "injected fault"),
    };
    let mut e = meta::ApiError::new(code, reason, message);
    let mut headers = Vec::new();
    if code == 429 {
        e = e.with_details(json!({"retryAfterSeconds": 1}));
        headers.push(("Retry-After".to_string(), "1".to_string()));
    }
    (code, e.to_status(), headers)
}
