//! The cache's gauges, registered as a `/metrics` collector.

use super::Cache;
use crate::metrics::{register_collector, Family, MetricType};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `edgekcm_cache_objects{resource}` and `edgekcm_cache_bytes{resource}` for this cache
/// (informers of one resource with different field selectors are added together).
pub fn register_metrics(cache: &Arc<Cache>) {
    let weak = Arc::downgrade(cache);
    register_collector(
        "cache",
        Arc::new(move || {
            let Some(cache) = weak.upgrade() else {
                return Vec::new();
            };
            let mut per: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for (kind, objects, bytes) in cache.sizes() {
                let resource = if kind.group.is_empty() {
                    kind.plural.to_string()
                } else {
                    format!("{}.{}", kind.plural, kind.group)
                };
                let e = per.entry(resource).or_default();
                e.0 += objects;
                e.1 += bytes;
            }
            let mut objects = Family::new(
                "edgekcm_cache_objects",
                "Objects held in the shared informer cache, by resource.",
                MetricType::Gauge,
            );
            let mut bytes = Family::new(
                "edgekcm_cache_bytes",
                "Approximate bytes held by the shared informer cache, by resource.",
                MetricType::Gauge,
            );
            for (resource, (n, b)) in &per {
                objects.push(&[("resource", resource)], *n as f64);
                bytes.push(&[("resource", resource)], *b as f64);
            }
            vec![objects, bytes]
        }),
    );
}
