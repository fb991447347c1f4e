//! `replicaset_controller_stale_sync_skips_total` (v1.36, ALPHA; counted with the
//! StaleControllerConsistencyReplicaSet gate on): syncs of a ReplicaSet left because the cache
//! did not yet show the controller's own pod writes, labelled with the resource whose writes
//! were missing. Here that is the wait for created pods to be observed (`kit::inflight`), so
//! the label is always `group=""`, `resource="pods"`; upstream also counts its own
//! ReplicaSet status writes (edgekcm computes status from the cache and never skips for them).
//! A ReplicationController counts nothing, as upstream's RC adapter has no such check.
//!
//! `replicaset_controller_sorting_deletion_age_ratio` (ALPHA, both kinds, as upstream's shared
//! code): on a ranked scale-down, for each ready pod chosen, its age over the youngest ready
//! pod's age, in whole milliseconds divided as integers (as upstream does).

use crate::controllers::kit::pod::is_pod_ready;
use crate::controllers::kit::staleskips::StaleSkips;
use crate::metrics::{Family, Histogram, MetricType};
use crate::obj::{At as _, Obj};
use serde_json::Value;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

static SKIPS: StaleSkips = StaleSkips::new(
    "StaleControllerConsistencyReplicaSet",
    "replicaset_controller_stale_sync_skips_total",
    "Total number of ReplicaSet syncs skipped due to a stale watch cache.",
);

/// Upstream's buckets: ExponentialBuckets(0.25, 2, 6).
const AGE_RATIO_BUCKETS: [f64; 6] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0];

fn age_ratios() -> std::sync::MutexGuard<'static, Histogram> {
    static H: OnceLock<Mutex<Histogram>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(Histogram::new(&AGE_RATIO_BUCKETS)))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn created(p: &Value) -> Option<SystemTime> {
    crate::controllers::kit::pod::time_field(p.at("/metadata/creationTimestamp"))
}

/// Upstream's reportSortingDeletionAgeRatioMetric for a ranked scale-down of `pods` that
/// chose `victims`.
pub fn observe_deletion_ages(pods: &[Obj], victims: &[Obj], now: SystemTime) {
    let ms = |t: SystemTime| now.duration_since(t).map_or(0, |d| d.as_millis());
    let Some(youngest) = pods
        .iter()
        .filter(|p| is_pod_ready(p))
        .filter_map(|p| created(p))
        .max()
    else {
        return;
    };
    let base = ms(youngest);
    if base == 0 {
        return;
    }
    let mut h = age_ratios();
    for v in victims.iter().filter(|p| is_pod_ready(p)) {
        if let Some(c) = created(v) {
            h.observe((ms(c) / base) as f64);
        }
    }
}

/// A sync waited for the controller's own pod writes to reach the cache.
pub fn observe_pod_skip() {
    SKIPS.observe_pod_skip();
}

pub fn metric_families() -> Vec<Family> {
    let f = SKIPS.family();
    let mut r = Family::alpha(
        "replicaset_controller_sorting_deletion_age_ratio",
        concat!(
            "The ratio of chosen deleted pod's ages to the current youngest pod's age (at the ",
            "time). Should be <2. The intent of this metric is to measure the rough efficacy of ",
            "the sorting (and deletion) of pods when a replicaset scales down. This only ",
            "considers Ready pods when calculating and reporting."
        ),
        MetricType::Histogram,
    );
    r.push_histogram(&[], age_ratios().clone());
    vec![f, r]
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_are_counted_by_resource() {
        super::observe_pod_skip();
        let text = crate::metrics::encode(&super::metric_families());
        assert!(
            text.contains(
                "replicaset_controller_stale_sync_skips_total{group=\"\",resource=\"pods\"}"
            ),
            "{text}"
        );
    }

    #[test]
    fn deletion_age_ratio_of_ready_victims() {
        use super::{age_ratios, Obj, SystemTime};
        use serde_json::json;
        use std::sync::Arc;
        use std::time::Duration;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let pod = |age_s: u64, ready: bool| -> Obj {
            let t = crate::compat::timefmt::rfc3339(now - Duration::from_secs(age_s));
            Arc::new(json!({"metadata": {"creationTimestamp": t},
                "status": {"conditions": [{"type": "Ready",
                    "status": if ready {"True"} else {"False"}}]}}))
        };
        let (young, old, unready) = (pod(10, true), pod(35, true), pod(5, false));
        let before = age_ratios().count;
        let pods = [young.clone(), old.clone(), unready.clone()];
        super::observe_deletion_ages(&pods, &[old, unready], now);
        let h = age_ratios();
        // Only the ready victim: 35 s / 10 s = 3 (integer division), in the <= 4 bucket.
        assert_eq!(h.count - before, 1);
        assert!(h.buckets.iter().any(|(b, n)| *b == 4.0 && *n >= 1));
    }
}
