//! The cache's gauges, registered as a `/metrics` collector.

use super::Cache;
use crate::metrics::{register_collector, Family, Histogram, MetricType};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// client-go's `informer_processing_latency_seconds` buckets.
const LATENCY_BOUNDS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How long an informer takes to process each event: the store updated and every handler
/// called (client-go times the same step, the FIFO's pop: the store and the notifications).
/// Lock-free; each event adds to one bucket, made cumulative when read.
#[derive(Default)]
pub struct Latency {
    /// Events per bucket (not cumulative); the last one is over 10 s.
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Latency {
    pub fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let i = LATENCY_BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Add what was observed to `h` (made with [`latency_histogram`]).
    pub fn add_to(&self, h: &mut Histogram) {
        let mut cumulative = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            cumulative += n;
            if let Some(b) = h.buckets.get_mut(i) {
                b.1 += cumulative;
            }
            h.count += n;
        }
        h.sum += self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
    }
}

/// An empty histogram with client-go's processing latency buckets.
pub fn latency_histogram() -> Histogram {
    Histogram::new(&LATENCY_BOUNDS)
}

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
            families.extend(informer_families(&cache.informer_stats()));
            families
        }),
    );
}

/// One informer as the informer families see it: its kind, its store's resource version and
/// its processing latency.
pub type InformerStats = (crate::api::Kind, String, Histogram);

/// client-go's informer families as kube-controller-manager serves them, for the resources
/// this cache holds: `informer_store_resource_version` (the last 15 digits of the store's
/// resource version), `informer_queued_items` (0: events reach the handlers as they are
/// decoded, no FIFO holds them) and `informer_processing_latency_seconds` (informers of one
/// resource with different field selectors added together). Their `resource` label is
/// client-go's: the lower-case kind plus "s" (`endpointss`, `ingressclasss`); `name` is the
/// manager's.
pub fn informer_families(informers: &[InformerStats]) -> Vec<Family> {
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
    let mut latency = Family::alpha(
        "informer_processing_latency_seconds",
        "Time taken to process events after popping from the queue.",
        MetricType::Histogram,
    );
    let mut latencies: BTreeMap<(&str, String, &str), Histogram> = BTreeMap::new();
    for (kind, _, h) in informers {
        let resource = format!("{}s", kind.kind.to_ascii_lowercase());
        latencies
            .entry((kind.group, resource, kind.version))
            .or_insert_with(latency_histogram)
            .merge(h);
    }
    let mut seen = std::collections::BTreeSet::new();
    for (kind, version, _) in informers {
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
        if let Some(h) = latencies.remove(&(kind.group, resource.clone(), kind.version)) {
            latency.push_histogram(&labels, h);
        }
    }
    vec![rv, queued, latency]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{ENDPOINTS, PODS};
    use crate::metrics::encode;

    #[test]
    fn informer_families_use_client_gos_resource_names() {
        let slow = Latency::default();
        slow.observe(Duration::from_millis(30));
        slow.observe(Duration::from_micros(200));
        let mut pods = latency_histogram();
        slow.add_to(&mut pods);
        let mut scoped_pods = latency_histogram();
        Latency::default().add_to(&mut scoped_pods);
        let text = encode(&informer_families(&[
            (ENDPOINTS, "1234567890123456789".into(), latency_histogram()),
            (PODS, "254".into(), pods),
            (PODS, "255".into(), scoped_pods),
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
        let l = "informer_processing_latency_seconds";
        let pods = "group=\"\",name=\"kube-controller-manager\",resource=\"pods\",version=\"v1\"";
        for line in [
            format!("# TYPE {l} histogram"),
            format!("{l}_bucket{{{pods},le=\"0.001\"}} 1"),
            format!("{l}_bucket{{{pods},le=\"0.025\"}} 1"),
            format!("{l}_bucket{{{pods},le=\"0.05\"}} 2"),
            format!("{l}_bucket{{{pods},le=\"+Inf\"}} 2"),
            format!("{l}_count{{{pods}}} 2"),
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line}\n{text}");
        }
    }
}
