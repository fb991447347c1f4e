//! podcertificaterequest-cleaner-controller (upstream's `cleaner/pcrcleaner.go`; alpha in
//! 1.34, beta in 1.35, GA in 1.37, gate PodCertificateRequest): once at start and then every
//! 5 minutes, every PodCertificateRequest created 15 minutes ago or more is deleted, with
//! its UID as a precondition (a request made again under the same name is not touched).
//!
//! - No work queue, no Events; one pass at a time. Writes as `podcertificaterequestcleaner`
//!   with `--use-service-account-credentials`.
//! - A request already gone is no error; another failure is logged, and the request is tried
//!   again at the next pass.
//! - Unlike upstream, the first pass waits for the cache to be synced (upstream's first pass
//!   lists whatever its informer has, at start nothing: its first deletions come 5 minutes
//!   after the start).

use crate::api::client::{Client, DeleteOptions};
use crate::api::resources::PODCERTIFICATEREQUESTS;
use crate::cache::{Cache, Watch};
use crate::controller::{RunEnv, SelfDriven};
use crate::error::Result;
use crate::obj;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

pub const NAME: &str = "podcertificaterequest-cleaner-controller";
/// How often upstream looks (`pollingInterval`).
pub const POLLING_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How old a request is when it goes (`threshold`).
pub const THRESHOLD: Duration = Duration::from_secs(15 * 60);

/// Requests: metadata is all it reads.
pub const PCR_WATCH: Watch = Watch::fields(PODCERTIFICATEREQUESTS, &[]);

/// Its row in the controller table. Off, with one line, when the API server does not serve
/// `certificates.k8s.io/v1` podcertificaterequests (kube-apiserver before 1.37, or with the
/// gate off).
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    if crate::controllers::kit::served::served(
        cx.rest,
        "/apis/certificates.k8s.io/v1",
        "podcertificaterequests",
    ) == Some(false)
    {
        log::info!(
            "{NAME}: the API server does not serve certificates.k8s.io/v1 podcertificaterequests; not starting it"
        );
        return Ok(None);
    }
    Ok(Some(crate::controller::Runnable::drives(PcrCleaner::new(
        POLLING_INTERVAL,
    ))))
}

/// Whether upstream deletes a request created at `created` (RFC 3339) at `now`: not before
/// `created + THRESHOLD`. A request without a readable creation time is as old as the epoch
/// (Go's zero time): it goes.
pub fn due(created: &str, now: SystemTime) -> bool {
    let t = crate::compat::timefmt::parse_rfc3339(created).unwrap_or(SystemTime::UNIX_EPOCH);
    now >= t + THRESHOLD
}

pub struct PcrCleaner {
    period: Duration,
    /// Set at shutdown: a pass in progress stops, no new one starts.
    stopped: Arc<AtomicBool>,
}

impl PcrCleaner {
    pub fn new(period: Duration) -> Self {
        PcrCleaner {
            period,
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// One pass over the cached requests.
fn pass(cache: &Cache, client: &Client, stopped: &AtomicBool) {
    for pcr in cache.store_for(&PCR_WATCH).list() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        if !due(obj::creation_timestamp(&pcr), SystemTime::now()) {
            continue;
        }
        let (ns, name) = (obj::namespace(&pcr), obj::name(&pcr));
        let opts = DeleteOptions {
            precondition_uid: Some(obj::uid(&pcr).to_string()),
            ..DeleteOptions::default()
        };
        match client.delete(&PODCERTIFICATEREQUESTS, Some(ns), name, &opts) {
            Ok(()) => cache.observe_delete(PODCERTIFICATEREQUESTS, ns, name),
            Err(e) if e.is_not_found() => {}
            Err(e) => log::error!(
                "Error while attempting to clean PodCertificateRequest err=\"unable to delete PodCertificateRequest \\\"{ns}/{name}\\\": {}\" pcr=\"{ns}/{name}\"",
                e.message()
            ),
        }
    }
}

impl SelfDriven for PcrCleaner {
    fn register(&self, cache: &Arc<Cache>) {
        cache.informer_for(&PCR_WATCH);
    }
    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        log::info!("Starting PodCertificateRequest cleaner controller");
        let stopped = self.stopped.clone();
        crate::controllers::kit::periodic::start(env, self.period, stopped, pass);
        Vec::new()
    }
    fn shutdown(&self) {
        log::info!("Shutting down PodCertificateRequest cleaner controller");
        self.stopped.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        crate::compat::timefmt::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn due_after_fifteen_minutes() {
        let c = "2026-01-01T00:00:00Z";
        assert!(!due(c, at("2026-01-01T00:14:59Z")));
        assert!(due(c, at("2026-01-01T00:15:00Z")));
        assert!(due(c, at("2026-01-02T00:00:00Z")));
        assert!(due("", at("2026-01-01T00:00:00Z")), "the zero time");
    }
}
