//! legacy-serviceaccount-token-cleaner-controller (upstream's
//! `serviceaccount/legacy_serviceaccount_token_cleaner.go`; alpha in 1.28, beta and on in
//! 1.29, GA in 1.30): Secret-based ServiceAccount tokens nobody used for
//! `--legacy-service-account-token-clean-up-period` (default 365 days) are labelled invalid,
//! and deleted once that label is a period old too.
//!
//! Once at start and then every 24 h (`DefaultCleanerSyncInterval`), a pass:
//!
//! 1. reads `kube-system/kube-apiserver-legacy-service-account-token-tracking` live: its
//!    `since` date is the day kube-apiserver began recording `kubernetes.io/legacy-token-last-used`
//!    labels; nothing is done until a period after the day after it (a token's not having the
//!    label says nothing before that); a missing ConfigMap or date is logged and the pass ends;
//! 2. looks at every cached Secret of type `kubernetes.io/service-account-token`, and passes
//!    over those created within the period, being deleted, last used within the period (by the
//!    label's date; a date that does not parse: logged and passed over), whose ServiceAccount
//!    (annotation name, and UID when annotated) is gone or no longer lists the Secret in
//!    `secrets`, or that a pod of the namespace references (`VisitPodSecretNames`);
//! 3. labels the rest `kubernetes.io/legacy-token-invalid-since=<today, UTC>` (a merge patch
//!    carrying the Secret's UID), or, if that label holds a date older than the period,
//!    deletes the Secret with its resourceVersion as precondition (a conflict or 404 is not an
//!    error).
//!
//! Requests go out as `legacy-service-account-token-cleaner`; no Events, no work queue, as
//! upstream. Errors are logged and the pass moves on; the next pass is 24 h later, as upstream.

use crate::api::client::{Client, DeleteOptions, PatchType};
use crate::api::resources::{CONFIGMAPS, PODS, SECRETS, SERVICEACCOUNTS};
use crate::cache::Cache;
use crate::controller::{RunEnv, SelfDriven, Watch};
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

pub mod decide;

use decide::{Decision, Facts};

pub const NAME: &str = "legacy-serviceaccount-token-cleaner-controller";
pub const FLAG: &str = "legacy-service-account-token-clean-up-period";
/// `--legacy-service-account-token-clean-up-period`'s default: 365 days.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);
/// `DefaultCleanerSyncInterval`.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(24 * 3600);
pub const TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";

/// The same informer as the token controller's: token Secrets only.
pub const SECRET_WATCH: Watch = Watch::named(SECRETS, "type=kubernetes.io/service-account-token");
pub const SA_WATCH: Watch = Watch::full(SERVICEACCOUNTS);
/// Pods: what names Secrets.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/imagePullSecrets",
        "/spec/containers",
        "/spec/initContainers",
        "/spec/ephemeralContainers",
        "/spec/volumes",
    ],
);

/// The period from the flag's text, as upstream checks it (`invalid CleanUpPeriod`).
pub fn period_of(given: Option<&str>) -> crate::Result<Duration> {
    let Some(text) = given else {
        return Ok(DEFAULT_PERIOD);
    };
    let (negative, d) = crate::compat::parse::parse_go_duration_signed(text).map_err(|e| {
        crate::Error::Config(format!(
            "invalid argument {text:?} for \"--{FLAG}\" flag: {e}"
        ))
    })?;
    if negative || d.is_zero() {
        let shown = crate::compat::parse::format_go_duration(d);
        let sign = if negative && !d.is_zero() { "-" } else { "" };
        return Err(crate::Error::Config(format!(
            "failed to init the legacy service account token cleaner: invalid CleanUpPeriod: {sign}{shown}"
        )));
    }
    Ok(d)
}

/// Its row in the controller table.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> crate::Result<Option<crate::controller::Runnable>> {
    let period = period_of(cx.cfg.given.get(FLAG).map(String::as_str))?;
    Ok(Some(crate::controller::Runnable::drives(Cleaner::new(
        period,
        SYNC_INTERVAL,
    ))))
}

pub struct Cleaner {
    period: Duration,
    interval: Duration,
    stopped: Arc<AtomicBool>,
}

impl Cleaner {
    pub fn new(period: Duration, interval: Duration) -> Self {
        Cleaner {
            period,
            interval,
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The Secret names the pods of a namespace reference, read once a pass per namespace.
fn mounted<'a>(
    cache: &Cache,
    ns: &str,
    seen: &'a mut HashMap<String, HashSet<String>>,
) -> &'a HashSet<String> {
    seen.entry(ns.to_string()).or_insert_with(|| {
        let mut names = HashSet::new();
        for pod in cache.store_for(&POD_WATCH).list_namespace(ns) {
            decide::pod_secret_names(&pod, &mut |n| {
                names.insert(n.to_string());
            });
        }
        names
    })
}

/// One pass (`evaluateSATokens`).
pub fn pass(cache: &Cache, client: &Client, period: Duration, stopped: &AtomicBool) {
    let now = SystemTime::now();
    let cm = match client.get(&CONFIGMAPS, Some("kube-system"), TRACKING_CONFIGMAP) {
        Ok(cm) => cm,
        Err(e) => {
            log::error!(err:% = e.message(); "Getting lastest possible tracked_since time");
            return;
        }
    };
    let tracked = match decide::tracked_since(&cm) {
        Ok(t) => t,
        Err(e) => {
            log::error!(err:% = e; "Getting lastest possible tracked_since time");
            return;
        }
    };
    if now < tracked + period {
        log::debug!("{NAME}: legacy tokens tracked since too recently; nothing to do yet");
        return;
    }
    let sas = cache.store_for(&SA_WATCH);
    let mut seen = HashMap::new();
    for secret in cache.store_for(&SECRET_WATCH).list() {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let ns = obj::namespace(&secret);
        let sa_name = secret
            .at("/metadata/annotations/kubernetes.io~1service-account.name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let sa = (!sa_name.is_empty())
            .then(|| sas.get_in(ns, sa_name))
            .flatten();
        let facts = Facts {
            secret: &secret,
            service_account: sa.as_deref(),
            mounted: mounted(cache, ns, &mut seen),
            now,
            period,
        };
        let decision = decide::decide(&facts);
        act(cache, client, &secret, decision, sa_name);
    }
}

/// Carries a decision out, logging as upstream logs it.
fn act(cache: &Cache, client: &Client, secret: &Value, decision: Decision, sa_name: &str) {
    let (ns, name) = (obj::namespace(secret), obj::name(secret));
    let key = format!("{ns}/{name}");
    match decision {
        Decision::Keep => {}
        Decision::BadLastUsed(e) => {
            log::error!(secret:% = key, err:% = e; "Parsing lastUsed time")
        }
        Decision::MarkInvalid(since) => {
            log::info!(invalidSince:% = since, secret:% = key; "Mark the auto-generated service account token as invalid");
            let patch = decide::invalid_since_patch(secret, &since);
            match client.patch(&SECRETS, Some(ns), name, PatchType::Merge, &patch, None) {
                Ok(v) => cache.observe_write(SECRETS, &v),
                Err(e) => {
                    log::error!(err:% = e.message(); "Failed to label legacy service account token secret with invalid since date")
                }
            }
        }
        Decision::Delete => {
            let label = |k: &str| {
                obj::labels(secret)
                    .and_then(|l| l.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let created = secret
                .at("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or("");
            log::info!(
                secret:% = key, creationTime:% = created, lastUsed:% = label(decide::LAST_USED),
                invalidSince:% = label(decide::INVALID_SINCE);
                "Delete auto-generated service account token"
            );
            let opts = DeleteOptions {
                precondition_resource_version: Some(obj::resource_version(secret).to_string()),
                ..Default::default()
            };
            match client.delete(&SECRETS, Some(ns), name, &opts) {
                Ok(()) => cache.observe_delete(SECRETS, ns, name),
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => log::error!(
                    secret:% = key, serviceaccount:% = sa_name, err:% = e.message();
                    "Deleting legacy service account token"
                ),
            }
        }
    }
}

impl SelfDriven for Cleaner {
    fn register(&self, cache: &Arc<Cache>) {
        cache.informer_for(&SECRET_WATCH);
        cache.informer_for(&SA_WATCH);
        cache.informer_for(&POD_WATCH);
    }

    fn start(&self, env: &RunEnv) -> Vec<JoinHandle<()>> {
        log::info!("Starting legacy service account token cleaner controller");
        let period = self.period;
        crate::controllers::kit::periodic::start(
            env,
            self.interval,
            self.stopped.clone(),
            move |cache, client, stopped| pass(cache, client, period, stopped),
        );
        Vec::new()
    }

    fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;
