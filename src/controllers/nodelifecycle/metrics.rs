//! The controller's `node_collector_*` metric families (upstream's `nodelifecycle/metrics.go`):
//! per zone its size, the share of healthy nodes and the count of unhealthy ones (a zone that
//! is gone stays at 0, 100 and 0, as upstream sets it), and the NoExecute taintings counted
//! per zone. The two duration histograms are not kept.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

#[derive(Default)]
struct Values {
    /// zone -> (size, health percent, unhealthy)
    zones: BTreeMap<String, (f64, f64, f64)>,
    evictions: BTreeMap<String, u64>,
}

fn values() -> MutexGuard<'static, Values> {
    static V: OnceLock<Mutex<Values>> = OnceLock::new();
    V.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A zone's size and unhealthy count after a pass.
pub fn zone(zone: &str, size: usize, unhealthy: usize) {
    let health = if size == 0 {
        100.0
    } else {
        100.0 * (size - unhealthy) as f64 / size as f64
    };
    values()
        .zones
        .insert(zone.to_string(), (size as f64, health, unhealthy as f64));
}

/// A zone no node is in any more.
pub fn zone_gone(zone: &str) {
    values().zones.insert(zone.to_string(), (0.0, 100.0, 0.0));
}

/// A zone's counter starts at 0 when the zone is first seen.
pub fn zone_seen(zone: &str) {
    values().evictions.entry(zone.to_string()).or_insert(0);
}

/// A node of `zone` was tainted NoExecute.
pub fn eviction(zone: &str) {
    *values().evictions.entry(zone.to_string()).or_insert(0) += 1;
}

pub fn families() -> Vec<crate::metrics::Family> {
    use crate::metrics::{Family, MetricType};
    let v = values();
    let mut size = Family::alpha(
        "node_collector_zone_size",
        "Gauge measuring number of registered Nodes per zones.",
        MetricType::Gauge,
    );
    let mut health = Family::alpha(
        "node_collector_zone_health",
        "Gauge measuring percentage of healthy nodes per zone.",
        MetricType::Gauge,
    );
    let mut unhealthy = Family::alpha(
        "node_collector_unhealthy_nodes_in_zone",
        "Gauge measuring number of not Ready Nodes per zones.",
        MetricType::Gauge,
    );
    let mut evictions = Family::new(
        "node_collector_evictions_total",
        "[STABLE] Number of Node evictions that happened since current instance of NodeController started.",
        MetricType::Counter,
    );
    for (z, (s, h, u)) in &v.zones {
        size.push(&[("zone", z)], *s);
        health.push(&[("zone", z)], *h);
        unhealthy.push(&[("zone", z)], *u);
    }
    for (z, n) in &v.evictions {
        evictions.push(&[("zone", z)], *n as f64);
    }
    [health, size, unhealthy, evictions]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}
