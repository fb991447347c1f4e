//! certificatesigningrequest-cleaner-controller (upstream's `cleaner/cleaner.go`): once at
//! start and then every hour, every CertificateSigningRequest in the cache is looked at and
//! deleted (plain DELETE, no options) when upstream would delete it:
//!
//! - approved and issued, the `Approved` condition's `lastUpdateTime` more than 1 h ago;
//! - denied, or failed, the condition's `lastUpdateTime` more than 1 h ago;
//! - pending (no condition at all), created more than 24 h ago;
//! - approved and issued, and the first certificate of `status.certificate` has expired.
//!
//! An approved request that was never issued is kept, as upstream keeps it. The reason is
//! logged as upstream logs it; a failed delete is logged and tried again at the next pass. No
//! work queue, no Events, one pass at a time (upstream: one worker). Unlike upstream, the
//! first pass waits for the cache to be synced (upstream lists whatever its informer has).

use super::{certificate, conditions, is_issued, CSR_WATCH};
use crate::api::client::{Client, DeleteOptions};
use crate::api::resources::CSRS;
use crate::cache::Cache;
use crate::controller::{RunEnv, SelfDriven};
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// How often upstream looks (`pollingInterval`).
pub const POLLING_INTERVAL: Duration = Duration::from_secs(3600);
const APPROVED_EXPIRATION: Duration = Duration::from_secs(3600);
const DENIED_EXPIRATION: Duration = Duration::from_secs(3600);
const PENDING_EXPIRATION: Duration = Duration::from_secs(24 * 3600);

/// Why a request goes: upstream's log message and the duration it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    IssuedPastDeadline,
    DeniedPastDeadline,
    FailedPastDeadline,
    PendingPastDeadline,
    IssuedExpired,
}

impl Reason {
    /// upstream's log line for it (its key-value pairs as text).
    pub fn describe(self, name: &str) -> String {
        match self {
            Reason::IssuedPastDeadline => format!(
                "Cleaning CSR as it is more than approvedExpiration duration old and approved. csr={name:?} approvedExpiration=\"1h0m0s\""
            ),
            Reason::DeniedPastDeadline => format!(
                "Cleaning CSR as it is more than deniedExpiration duration old and denied. csr={name:?} deniedExpiration=\"1h0m0s\""
            ),
            Reason::FailedPastDeadline => format!(
                "Cleaning CSR as it is more than deniedExpiration duration old and failed. csr={name:?} deniedExpiration=\"1h0m0s\""
            ),
            Reason::PendingPastDeadline => format!(
                "Cleaning CSR as it is more than pendingExpiration duration old and unhandled. csr={name:?} pendingExpiration=\"24h0m0s\""
            ),
            Reason::IssuedExpired => {
                format!("Cleaning CSR as the associated certificate is expired. csr={name:?}")
            }
        }
    }
}

/// upstream's `isOlderThan`: a time that is set and more than `d` before `now`.
fn older_than(t: Option<&Value>, d: Duration, now: SystemTime) -> bool {
    t.and_then(Value::as_str)
        .and_then(crate::compat::timefmt::parse_rfc3339)
        .and_then(|t| now.duration_since(t).ok())
        .is_some_and(|age| age > d)
}

fn any_condition(csr: &Value, type_: &str, d: Duration, now: SystemTime) -> bool {
    conditions(csr).iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some(type_)
            && older_than(c.get("lastUpdateTime"), d, now)
    })
}

/// upstream's `isExpired`: the first PEM block of the certificate, parsed as certificates
/// (all of them must parse), and the first one's notAfter passed.
fn certificate_expired(csr: &Value, now: SystemTime) -> bool {
    let pem = certificate(csr);
    let Some(block) = crate::pki::gopem::first_block(&pem) else {
        return false;
    };
    let mut rest = block.der.as_slice();
    let mut first = None;
    while !rest.is_empty() {
        let Some((t, r)) = crate::pki::der::read(rest) else {
            return false;
        };
        let Some(info) = crate::pki::der::parse_cert(t.raw) else {
            return false;
        };
        first.get_or_insert(info.not_after);
        rest = r;
    }
    first.is_some_and(|not_after| now > not_after)
}

/// Whether (and why) upstream's cleaner deletes this request at `now`; its checks in its order.
pub fn decide(csr: &Value, now: SystemTime) -> Option<Reason> {
    let approved = conditions(csr)
        .iter()
        .any(|c| c.get("type").and_then(Value::as_str) == Some("Approved"));
    if is_issued(csr) && any_condition(csr, "Approved", APPROVED_EXPIRATION, now) {
        return Some(Reason::IssuedPastDeadline);
    }
    if any_condition(csr, "Denied", DENIED_EXPIRATION, now) {
        return Some(Reason::DeniedPastDeadline);
    }
    if any_condition(csr, "Failed", DENIED_EXPIRATION, now) {
        return Some(Reason::FailedPastDeadline);
    }
    let created = csr.get("metadata").and_then(|m| m.get("creationTimestamp"));
    if conditions(csr).is_empty() && older_than(created, PENDING_EXPIRATION, now) {
        return Some(Reason::PendingPastDeadline);
    }
    if approved && is_issued(csr) && certificate_expired(csr, now) {
        return Some(Reason::IssuedExpired);
    }
    None
}

/// Its row in the controller table.
pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    Ok(Some(crate::controller::Runnable::drives(CsrCleaner::new(
        POLLING_INTERVAL,
    ))))
}

pub struct CsrCleaner {
    period: Duration,
    /// Set at shutdown: a pass in progress stops, no new one starts.
    stopped: Arc<AtomicBool>,
}

impl CsrCleaner {
    pub fn new(period: Duration) -> Self {
        CsrCleaner {
            period,
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// One pass over the cached requests.
fn pass(cache: &Cache, client: &Client, stopped: &AtomicBool) {
    for csr in cache.store_for(&CSR_WATCH).list() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let Some(reason) = decide(&csr, SystemTime::now()) else {
            continue;
        };
        let name = obj::name(&csr);
        log::info!("{}", reason.describe(name));
        match client.delete(&CSRS, None, name, &DeleteOptions::default()) {
            Ok(()) => cache.observe_delete(CSRS, "", name),
            Err(e) if e.is_not_found() => {}
            Err(e) => log::error!(
                "Error while attempting to clean CSR: unable to delete CSR {name:?}: {} csr={name:?}",
                e.message()
            ),
        }
    }
}

impl SelfDriven for CsrCleaner {
    fn register(&self, cache: &Arc<Cache>) {
        cache.informer_for(&CSR_WATCH);
    }
    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        let stopped = self.stopped.clone();
        crate::controllers::kit::periodic::start(env, self.period, stopped, pass);
        Vec::new()
    }
    fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
#[path = "cleaner_tests.rs"]
mod tests;
