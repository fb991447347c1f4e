//! `<controller>_stale_sync_skips_total` (v1.36, ALPHA), shared by the controllers that wait
//! for their own pod writes to reach the cache (`kit::inflight`) before syncing: counted while
//! the controller's StaleControllerConsistency gate is on, labelled `group=""`,
//! `resource="pods"` (upstream also counts its own status writes, which edgekcm never waits
//! for).

use crate::metrics::{Family, MetricType};
use std::sync::atomic::{AtomicU64, Ordering};

/// One controller's counter: its gate, metric name and help text, and the resource whose
/// writes it waits for (its `group` and `resource` labels).
pub struct StaleSkips {
    gate: &'static str,
    name: &'static str,
    help: &'static str,
    group: &'static str,
    resource: &'static str,
    pods: AtomicU64,
}

impl StaleSkips {
    /// A counter of waits for the controller's own pod writes.
    pub const fn new(gate: &'static str, name: &'static str, help: &'static str) -> Self {
        Self::of(gate, name, help, "", "pods")
    }

    /// A counter of waits for the controller's own writes of `group`/`resource`.
    pub const fn of(
        gate: &'static str,
        name: &'static str,
        help: &'static str,
        group: &'static str,
        resource: &'static str,
    ) -> Self {
        StaleSkips {
            gate,
            name,
            help,
            group,
            resource,
            pods: AtomicU64::new(0),
        }
    }

    /// Whether the controller's gate is on (it waits, and counts, only then).
    pub fn gate_on(&self) -> bool {
        crate::config::gates::enabled(self.gate)
    }

    /// A sync waited for the controller's own writes to reach the cache.
    pub fn observe_pod_skip(&self) {
        if self.gate_on() {
            self.pods.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counter's family (no sample until a skip was counted).
    pub fn family(&self) -> Family {
        let mut f = Family::alpha(self.name, self.help, MetricType::Counter);
        let n = self.pods.load(Ordering::Relaxed);
        if n > 0 {
            f.push(
                &[("group", self.group), ("resource", self.resource)],
                n as f64,
            );
        }
        f
    }
}
