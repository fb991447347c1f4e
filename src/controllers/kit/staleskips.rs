//! `<controller>_stale_sync_skips_total` (v1.36, ALPHA), shared by the controllers that wait
//! for their own pod writes to reach the cache (`kit::inflight`) before syncing: counted while
//! the controller's StaleControllerConsistency gate is on, labelled `group=""`,
//! `resource="pods"` (upstream also counts its own status writes, which edgekcm never waits
//! for). A controller that waits for several resources counts each with
//! [`StaleSkips::observe_skip_of`].

use crate::metrics::{Family, MetricType};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One controller's counter: its gate, metric name and help text, and the resource whose
/// writes it waits for (its `group` and `resource` labels).
pub struct StaleSkips {
    gate: &'static str,
    name: &'static str,
    help: &'static str,
    group: &'static str,
    resource: &'static str,
    pods: AtomicU64,
    /// Skips counted for other resources, by (group, resource).
    others: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
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
            others: Mutex::new(BTreeMap::new()),
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

    /// A sync waited for the controller's own writes of `group`/`resource`.
    pub fn observe_skip_of(&self, group: &'static str, resource: &'static str) {
        if !self.gate_on() {
            return;
        }
        if (group, resource) == (self.group, self.resource) {
            self.pods.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut m = self.others.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((group, resource)).or_insert(0) += 1;
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
        let m = self.others.lock().unwrap_or_else(|p| p.into_inner());
        for ((g, r), n) in m.iter() {
            f.push(&[("group", g), ("resource", r)], *n as f64);
        }
        f
    }
}
