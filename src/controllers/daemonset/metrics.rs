//! `daemonset_controller_stale_sync_skips_total` (v1.36, ALPHA; counted with the
//! StaleControllerConsistencyDaemonSet gate on): syncs of a DaemonSet left because the cache
//! did not yet show the controller's own pod writes. Here that is the wait for created pods to
//! be observed (`kit::inflight`), so the label is always `group=""`, `resource="pods"`;
//! upstream also counts its own DaemonSet status writes.

use crate::metrics::{Family, MetricType};
use std::sync::atomic::{AtomicU64, Ordering};

static POD_SKIPS: AtomicU64 = AtomicU64::new(0);

/// A sync waited for the controller's own pod writes to reach the cache.
pub fn observe_pod_skip() {
    if crate::config::gates::enabled("StaleControllerConsistencyDaemonSet") {
        POD_SKIPS.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn metric_families() -> Vec<Family> {
    let mut f = Family::alpha(
        "daemonset_controller_stale_sync_skips_total",
        "Total number of DaemonSet syncs skipped due to a stale watch cache.",
        MetricType::Counter,
    );
    let n = POD_SKIPS.load(Ordering::Relaxed);
    if n > 0 {
        f.push(&[("group", ""), ("resource", "pods")], n as f64);
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_are_counted_by_resource() {
        super::observe_pod_skip();
        let text = crate::metrics::encode(&super::metric_families());
        assert!(
            text.contains(
                "daemonset_controller_stale_sync_skips_total{group=\"\",resource=\"pods\"}"
            ),
            "{text}"
        );
    }
}
