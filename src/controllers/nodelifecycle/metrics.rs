//! The controller's `node_collector_*` metric families (upstream's `nodelifecycle/metrics.go`):
//! per zone its size, the share of healthy nodes and the count of unhealthy ones (a zone that
//! is gone stays at 0, 100 and 0, as upstream sets it), and the NoExecute taintings counted
//! per zone, and the two duration histograms of the health pass (one node's part, the whole
//! pass), exposed from the start with zero counts as upstream's registered histograms are.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::metrics::Histogram;

#[derive(Default)]
struct Values {
    /// zone -> (size, health percent, unhealthy)
    zones: BTreeMap<String, (f64, f64, f64)>,
    evictions: BTreeMap<String, u64>,
    /// `update_node_health_duration_seconds`, `update_all_nodes_health_duration_seconds`
    durations: Option<(Histogram, Histogram)>,
}

/// Upstream's `ExponentialBuckets(start, 4, 8)`, multiplied out as Go does.
fn exponential(start: f64) -> Histogram {
    let mut bounds = vec![start];
    for _ in 1..8 {
        let last = bounds[bounds.len() - 1];
        bounds.push(last * 4.0);
    }
    Histogram::new(&bounds)
}

fn durations(v: &mut Values) -> &mut (Histogram, Histogram) {
    v.durations
        .get_or_insert_with(|| (exponential(0.001), exponential(0.01)))
}

/// How long one node's part of a health pass took.
pub fn node_health_took(d: Duration) {
    durations(&mut values()).0.observe(d.as_secs_f64());
}

/// How long a whole health pass took.
pub fn all_nodes_health_took(d: Duration) {
    durations(&mut values()).1.observe(d.as_secs_f64());
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
    let mut v = values();
    let (one, all) = durations(&mut v).clone();
    let mut one_f = Family::alpha(
        "node_collector_update_node_health_duration_seconds",
        "Duration in seconds for NodeController to update the health of a single node.",
        MetricType::Histogram,
    );
    one_f.push_histogram(&[], one);
    let mut all_f = Family::alpha(
        "node_collector_update_all_nodes_health_duration_seconds",
        "Duration in seconds for NodeController to update the health of all nodes.",
        MetricType::Histogram,
    );
    all_f.push_histogram(&[], all);
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
    [health, size, unhealthy, evictions, one_f, all_f]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_histograms_have_upstreams_buckets_from_the_start() {
        let text = crate::metrics::encode(&families());
        assert!(
            text.contains("# TYPE node_collector_update_node_health_duration_seconds histogram")
        );
        assert!(text.contains(
            "node_collector_update_all_nodes_health_duration_seconds_bucket{le=\"163.84\"}"
        ));
        node_health_took(Duration::from_millis(3));
        all_nodes_health_took(Duration::from_millis(30));
        let text = crate::metrics::encode(&families());
        for le in [
            "0.001", "0.004", "0.016", "0.064", "0.256", "1.024", "4.096", "16.384",
        ] {
            assert!(
                text.contains(&format!(
                    "node_collector_update_node_health_duration_seconds_bucket{{le=\"{le}\"}}"
                )),
                "{le}"
            );
        }
        assert!(text
            .contains("node_collector_update_node_health_duration_seconds_bucket{le=\"0.004\"} "));
        let count = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name}_count")))
                .expect(name);
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(count("node_collector_update_node_health_duration_seconds") >= 1.0);
        assert!(count("node_collector_update_all_nodes_health_duration_seconds") >= 1.0);
    }
}
