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
            let mut families = vec![objects, bytes];
            families.extend(informer_families(&cache.resource_versions()));
            families
        }),
    );
}

/// client-go's informer families as kube-controller-manager serves them, for the resources
/// this cache holds: `informer_store_resource_version` (the last 15 digits of the store's
/// resource version) and `informer_queued_items` (0: events reach the handlers as they are
/// decoded, no FIFO holds them). Their `resource` label is client-go's: the lower-case kind
/// plus "s" (`endpointss`, `ingressclasss`); `name` is the manager's.
pub fn informer_families(versions: &[(crate::api::Kind, String)]) -> Vec<Family> {
    let mut rv = Family::alpha(
        "informer_store_resource_version",
        "The 15 least significant digits of the resource version of the store.",
        MetricType::Gauge,
    );
    let mut queued = Family::alpha(
        "informer_queued_items",
        "Number of items currently queued in the FIFO.",
        MetricType::Gauge,
    );
    let mut seen = std::collections::BTreeSet::new();
    for (kind, version) in versions {
        let resource = format!("{}s", kind.kind.to_ascii_lowercase());
        if !seen.insert((kind.group, resource.clone(), kind.version)) {
            continue;
        }
        let digits = &version[version.len().saturating_sub(15)..];
        let labels = [
            ("group", kind.group),
            ("name", crate::metrics::MANAGER_NAME),
            ("resource", resource.as_str()),
            ("version", kind.version),
        ];
        if let Ok(v) = digits.parse::<u64>() {
            rv.push(&labels, v as f64);
        }
        queued.push(&labels, 0.0);
    }
    vec![rv, queued]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{ENDPOINTS, PODS};
    use crate::metrics::encode;

    #[test]
    fn informer_families_use_client_gos_resource_names() {
        let text = encode(&informer_families(&[
            (ENDPOINTS, "1234567890123456789".into()),
            (PODS, "254".into()),
            (PODS, "255".into()),
        ]));
        assert!(text.contains(
            "informer_store_resource_version{group=\"\",name=\"kube-controller-manager\",resource=\"endpointss\",version=\"v1\"} 5.67890123456789e+14"
        ), "{text}");
        assert!(
            text.contains("resource=\"pods\",version=\"v1\"} 254"),
            "{text}"
        );
        assert!(!text.contains("255"), "{text}");
        assert!(text.contains("informer_queued_items{group=\"\",name=\"kube-controller-manager\",resource=\"pods\",version=\"v1\"} 0"));
    }
}
