//! `clustertrustbundle_publisher_sync_total` and `..._sync_duration_seconds` (upstream's
//! `clustertrustbundlepublisher/metrics.go`): each sync, by its HTTP code (200 when it
//! succeeded, the API's code of its failure, 500 when there is none); buckets 1 ms doubling
//! 15 times. No series until the first sync, as upstream's vectors.

use crate::metrics::{Family, Histogram, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

fn buckets() -> Vec<f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect()
}

/// code -> (syncs, durations).
type Values = BTreeMap<u16, (u64, Histogram)>;

fn values() -> MutexGuard<'static, Values> {
    static V: OnceLock<Mutex<Values>> = OnceLock::new();
    V.get_or_init(|| Mutex::new(BTreeMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A sync ended with `code` after `took`.
pub fn synced(code: u16, took: Duration) {
    let mut v = values();
    let e = v
        .entry(code)
        .or_insert_with(|| (0, Histogram::new(&buckets())));
    e.0 += 1;
    e.1.observe(took.as_secs_f64());
}

pub fn families() -> Vec<Family> {
    let v = values();
    let mut total = Family::alpha(
        "clustertrustbundle_publisher_sync_total",
        "Number of syncs that occurred in cluster trust bundle publisher.",
        MetricType::Counter,
    );
    let mut latency = Family::alpha(
        "clustertrustbundle_publisher_sync_duration_seconds",
        "The time it took to sync a cluster trust bundle.",
        MetricType::Histogram,
    );
    for (code, (n, h)) in v.iter() {
        let c = code.to_string();
        total.push(&[("code", &c)], *n as f64);
        latency.push_histogram(&[("code", &c)], h.clone());
    }
    vec![latency, total]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_code_with_upstreams_buckets() {
        synced(200, Duration::from_millis(3));
        synced(409, Duration::from_millis(1));
        let text = crate::metrics::encode(&families());
        assert!(
            text.contains("clustertrustbundle_publisher_sync_total{code=\"200\"}"),
            "{text}"
        );
        assert!(text.contains("clustertrustbundle_publisher_sync_total{code=\"409\"}"));
        assert!(text.contains(
            "clustertrustbundle_publisher_sync_duration_seconds_bucket{code=\"200\",le=\"16.384\"}"
        ), "{text}");
    }
}
