//! resourcepoolstatusrequest-controller (upstream's `pkg/controller/resourcepoolstatusrequest`;
//! gate DRAResourcePoolStatus, alpha and off by default in 1.37; API
//! `resource.k8s.io/v1alpha3` ResourcePoolStatusRequest): answers each request once with the
//! status of a DRA driver's resource pools, computed from the ResourceSlices, the
//! ResourceClaims' allocations and the DeviceTaintRules in the cache (`pools.rs`,
//! `views.rs`), and deletes answered requests after an hour, unanswered ones after a day.
//!
//! As upstream:
//! - A request without `status` is worked on; one with a status never again (users delete
//!   and create a new one). A returned pool still missing slices of its newest generation
//!   makes the sync fail ("incomplete pools detected, requeueing") and retry through the
//!   rate limiter, five times at most, writing nothing; other validation errors are written.
//! - The status: `poolCount`, `pools` (sorted by pool name, at most `spec.limit`), and one
//!   condition `Complete`/`True`, reason `CalculationComplete`, message "Calculated status
//!   for N pools" (", (M incomplete)" when M returned pools carry a validation error), written
//!   with one update of the `status` subresource.
//! - Every 10 minutes (and at the start), requests whose `Complete` or `Failed` condition is
//!   older than an hour, or without a status and created more than 24 hours ago, are deleted
//!   with their UID as precondition (here: the periodic resync queues them; the sync deletes).
//! - One worker; the work queue has no name (upstream's is unnamed: no `workqueue_*`
//!   series); metrics in `metrics.rs`. DeviceTaintRules are read only with
//!   DRADeviceTaintRules on.
//! - Off, with one line, when the API server does not serve `resource.k8s.io/v1alpha3`
//!   resourcepoolstatusrequests, `resource.k8s.io/v1` resourceslices, or devicetaintrules
//!   while DRADeviceTaintRules is on (upstream starts and waits for its caches).

mod metrics;
mod pools;
#[cfg(test)]
mod tests;
mod views;
#[cfg(test)]
mod views_tests;

use crate::api::client::DeleteOptions;
use crate::api::resources::{
    DEVICETAINTRULES, RESOURCECLAIMS, RESOURCEPOOLSTATUSREQUESTS, RESOURCESLICES,
};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::compat::timefmt::{parse_rfc3339, rfc3339};
use crate::controllers::{Action, Applied, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

pub const NAME: &str = "resourcepoolstatusrequest-controller";
/// How often expired requests are looked for (upstream's `cleanupPollingInterval`).
pub const CLEANUP_PERIOD: Duration = Duration::from_secs(600);
/// An answered (Complete or Failed) request is kept this long.
pub const ANSWERED_TTL: Duration = Duration::from_secs(3600);
/// A request never answered is kept this long.
pub const PENDING_TTL: Duration = Duration::from_secs(24 * 3600);

pub const REQUEST_WATCH: Watch = Watch::full(RESOURCEPOOLSTATUSREQUESTS);
pub const SLICE_WATCH: Watch = Watch::fields(
    RESOURCESLICES,
    &[
        "/spec/driver",
        "/spec/pool",
        "/spec/nodeName",
        "/spec/devices",
        "/spec/sharedCounters",
        "/spec/partitionTypeAttribute",
    ],
);
pub const CLAIM_WATCH: Watch = Watch::fields(RESOURCECLAIMS, &["/status/allocation"]);
pub const RULE_WATCH: Watch = Watch::full(DEVICETAINTRULES);

/// Its row in the controller table.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    let served = super::kit::served::served;
    let rules = crate::config::gates::enabled("DRADeviceTaintRules");
    let missing = if served(
        cx.rest,
        "/apis/resource.k8s.io/v1alpha3",
        "resourcepoolstatusrequests",
    ) == Some(false)
    {
        Some("v1alpha3 resourcepoolstatusrequests")
    } else if served(cx.rest, "/apis/resource.k8s.io/v1", "resourceslices") == Some(false) {
        Some("v1 resourceslices")
    } else if rules
        && served(cx.rest, "/apis/resource.k8s.io/v1", "devicetaintrules") == Some(false)
    {
        Some("v1 devicetaintrules")
    } else {
        None
    };
    if let Some(r) = missing {
        log::info!("{NAME}: the API server does not serve resource.k8s.io/{r}; not starting it");
        return Ok(None);
    }
    crate::metrics::register_collector(NAME, Arc::new(metrics::families));
    Ok(Some(crate::controllers::Runnable::Reconciles {
        ctrl: Arc::new(PoolStatusController::new(rules)),
        resync: Some(CLEANUP_PERIOD),
    }))
}

pub struct PoolStatusController {
    rules: bool,
    /// When the sync that asked for a key's status write began.
    started: Mutex<HashMap<String, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `t` (RFC 3339) is more than `ttl` before `now`; an absent time never is.
fn older_than(t: &str, ttl: Duration, now: SystemTime) -> bool {
    parse_rfc3339(t)
        .and_then(|t| now.duration_since(t).ok())
        .is_some_and(|age| age > ttl)
}

/// Whether a request's time is up (upstream's `shouldDeleteRequest`): an answered one an
/// hour after its first Complete or Failed condition changed (its creation when it has
/// none), a pending one a day after its creation.
pub fn expired(request: &Value, now: SystemTime) -> bool {
    let status = &request["status"];
    if status.is_null() {
        return older_than(obj::creation_timestamp(request), PENDING_TTL, now);
    }
    let list = status["conditions"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let answered = list
        .iter()
        .find(|c| matches!(c["type"].as_str(), Some(pools::COMPLETE | "Failed")));
    let since = match answered {
        Some(c) => c["lastTransitionTime"].as_str().unwrap_or(""),
        None => obj::creation_timestamp(request),
    };
    older_than(since, ANSWERED_TTL, now)
}

fn refs(v: &[obj::Obj]) -> Vec<&Value> {
    v.iter().map(|o| o.as_ref()).collect()
}

/// Whether a request still waits for its answer.
fn pending(request: &Value) -> bool {
    request["status"].is_null()
}

impl PoolStatusController {
    pub fn new(rules: bool) -> Self {
        PoolStatusController {
            rules,
            started: Mutex::default(),
        }
    }

    /// The status for `request` from what the cache holds.
    fn compute(&self, cache: &Cache, request: &Value, now: SystemTime) -> pools::Computed {
        let slices = cache.store_for(&SLICE_WATCH).list();
        let claims = cache.store_for(&CLAIM_WATCH).list();
        let rules = if self.rules {
            cache.store_for(&RULE_WATCH).list()
        } else {
            Vec::new()
        };
        pools::compute(
            &pools::Query::of(request),
            &refs(&slices),
            &refs(&claims),
            &refs(&rules),
            &rfc3339(now),
        )
    }
}

impl Controller for PoolStatusController {
    fn watches(&self) -> Vec<Watch> {
        let mut w = vec![REQUEST_WATCH, SLICE_WATCH, CLAIM_WATCH];
        if self.rules {
            w.push(RULE_WATCH);
        }
        w
    }

    /// Requests without a status, as they come; any request whose time is up. The periodic
    /// resync (the same object as old and new) looks only for the latter.
    fn keys_for(&self, watch: &Watch, delta: &Delta, _cache: &Cache) -> Vec<String> {
        if watch.kind != RESOURCEPOOLSTATUSREQUESTS || delta.kind == DeltaKind::Deleted {
            return Vec::new();
        }
        let o = delta.object();
        let resync = matches!((&delta.old, &delta.new), (Some(a), Some(b)) if Arc::ptr_eq(a, b));
        if (!resync && pending(o)) || expired(o, SystemTime::now()) {
            vec![obj::name(o).to_string()]
        } else {
            Vec::new()
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let start = Instant::now();
        let Some(request) = cx.cache.store_for(&REQUEST_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        if expired(&request, cx.now) {
            log::debug!("{NAME}: deleting expired ResourcePoolStatusRequest {key}");
            return Ok(Outcome::with(vec![Action::Delete {
                kind: RESOURCEPOOLSTATUSREQUESTS,
                namespace: String::new(),
                name: key.to_string(),
                options: DeleteOptions {
                    precondition_uid: Some(obj::uid(&request).to_string()),
                    ..Default::default()
                },
            }]));
        }
        if !pending(&request) {
            log::trace!("{NAME}: request {key} already processed, skipping");
            return Ok(Outcome::none());
        }
        log::debug!(
            "{NAME}: processing ResourcePoolStatusRequest {key} for driver {}",
            request["spec"]["driver"].as_str().unwrap_or("")
        );
        let computed = self.compute(cx.cache, &request, cx.now);
        if computed.incomplete {
            return Err(crate::Error::Config(
                "incomplete pools detected, requeueing".into(),
            ));
        }
        let mut object = (*request).clone();
        object["status"] = computed.status;
        lock(&self.started).insert(key.to_string(), start);
        Ok(Outcome::with(vec![Action::UpdateSubresource {
            kind: RESOURCEPOOLSTATUSREQUESTS,
            object,
            subresource: "status",
        }]))
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let Action::UpdateSubresource { object, .. } = action else {
            if let (Action::Delete { .. }, Applied::Done(_)) = (action, result) {
                log::debug!("{NAME}: deleted expired ResourcePoolStatusRequest {key}");
            }
            return;
        };
        let took = lock(&self.started)
            .remove(key)
            .map_or(Duration::ZERO, |s| s.elapsed());
        let driver = object["spec"]["driver"].as_str().unwrap_or("");
        let ok = matches!(result, Applied::Done(_));
        metrics::processed(driver, ok, took);
        if ok {
            let n = object["status"]["pools"].as_array().map_or(0, Vec::len);
            log::debug!("{NAME}: processed ResourcePoolStatusRequest {key}: {n} pools");
        }
    }
}
