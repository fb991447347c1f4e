//! `daemonset_controller_stale_sync_skips_total` (v1.36, ALPHA; counted with the
//! StaleControllerConsistencyDaemonSet gate on): syncs of a DaemonSet left because the cache
//! did not yet show the controller's own pod writes. Here that is the wait for created pods to
//! be observed (`kit::inflight`), so the label is always `group=""`, `resource="pods"`;
//! upstream also counts its own DaemonSet status writes.

use crate::controllers::kit::staleskips::StaleSkips;
use crate::metrics::Family;

static SKIPS: StaleSkips = StaleSkips::new(
    "StaleControllerConsistencyDaemonSet",
    "daemonset_controller_stale_sync_skips_total",
    "Total number of DaemonSet syncs skipped due to a stale watch cache.",
);

/// A sync waited for the controller's own pod writes to reach the cache.
pub fn observe_pod_skip() {
    SKIPS.observe_pod_skip();
}

pub fn metric_families() -> Vec<Family> {
    vec![SKIPS.family()]
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
