//! The endpointslice-controller's metrics, with upstream's names, types, buckets, labels and
//! help texts (`endpoint_slice_controller_*`, k8s.io/endpointslice v0.37 `metrics`):
//! endpoints added and removed per sync, slices changed per sync (by topology mode and
//! traffic distribution), slice writes by operation, syncs by result, and the gauges of the
//! efficiency cache (endpoints desired, slices that exist, slices perfect packing would
//! need, Services by traffic distribution).
//!
//! Counted as upstream counts them: endpoints added and removed and the efficiency cache when
//! the sync decides; `endpointslices_changed_per_sync` and `syncs` once its writes are done
//! (a sync whose write fails is `error` and its slices are not observed); `changes` counts the
//! writes the server accepted.

use crate::metrics::{Family, Histogram, MetricType};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

const SUBSYSTEM: &str = "endpoint_slice_controller";

/// What one address type of one sync gives the metrics (upstream's `reconcileByAddressType`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AddressTypeSync {
    /// Endpoints new to the slices (`EndpointsAddedPerSync`).
    pub added: usize,
    /// Endpoints taken out of slices kept for their ports (`EndpointsRemovedPerSync`).
    pub removed: usize,
    /// Port-map key -> (endpoints desired, slices once the writes are done).
    pub ports: BTreeMap<String, (usize, usize)>,
    /// The `trafficDistribution` in force (valid, no topology annotation).
    pub traffic_distribution: Option<String>,
    /// Whether topology-aware hints are on (`topology` label `Auto`).
    pub topology_auto: bool,
    /// Slices to create, update and delete (`EndpointSlicesChangedPerSync`).
    pub changed: usize,
}

/// Upstream's `numDesiredSlices`.
pub fn desired_slices(endpoints: usize, max: usize) -> usize {
    match endpoints {
        0 => 0,
        n if n <= max => 1,
        n => n.div_ceil(max.max(1)),
    }
}

/// (actual slices, desired slices, endpoints) of one Service: its ports' sums, at least one
/// desired slice (upstream's `ServicePortCache.totals`).
fn totals(ports: &BTreeMap<String, (usize, usize)>, max: usize) -> (i64, i64, i64) {
    let (mut actual, mut desired, mut endpoints) = (0i64, 0i64, 0i64);
    for (e, s) in ports.values() {
        endpoints += *e as i64;
        actual += *s as i64;
        desired += desired_slices(*e, max) as i64;
    }
    (actual, desired.max(1), endpoints)
}

/// Upstream's metrics `Cache`: the efficiency of every Service's slices, and the Services by
/// traffic distribution. A value once seen keeps its series (at 0 when no Service uses it).
#[derive(Debug, Default)]
pub struct EfficiencyCache {
    max: usize,
    /// namespace/name -> port-map key -> (endpoints, slices).
    services: BTreeMap<String, BTreeMap<String, (usize, usize)>>,
    by_distribution: BTreeMap<String, BTreeSet<String>>,
    endpoints: i64,
    actual: i64,
    desired: i64,
    /// Set once a Service was cached (upstream's gauges get their series at the first update).
    touched: bool,
}

impl EfficiencyCache {
    pub fn new(max: usize) -> Self {
        EfficiencyCache {
            max: max.max(1),
            ..Default::default()
        }
    }

    /// `UpdateServicePortCache`.
    pub fn update_service(&mut self, key: &str, ports: BTreeMap<String, (usize, usize)>) {
        let (pa, pd, pe) = self
            .services
            .get(key)
            .map_or((0, 0, 0), |p| totals(p, self.max));
        let (ca, cd, ce) = totals(&ports, self.max);
        self.endpoints += ce - pe;
        self.desired += cd - pd;
        self.actual += ca - pa;
        self.services.insert(key.to_string(), ports);
        self.touched = true;
    }

    /// `UpdateTrafficDistributionForService`.
    pub fn set_traffic_distribution(&mut self, key: &str, td: Option<&str>) {
        for set in self.by_distribution.values_mut() {
            set.remove(key);
        }
        if let Some(td) = td {
            self.by_distribution
                .entry(td.to_string())
                .or_default()
                .insert(key.to_string());
        }
        self.touched = true;
    }

    /// `DeleteService`.
    pub fn delete_service(&mut self, key: &str) {
        for set in self.by_distribution.values_mut() {
            set.remove(key);
        }
        if let Some(p) = self.services.remove(key) {
            let (a, d, e) = totals(&p, self.max);
            self.endpoints -= e;
            self.desired -= d;
            self.actual -= a;
        }
    }

    /// (num_endpoint_slices, desired_endpoint_slices, endpoints_desired).
    pub fn gauges(&self) -> (i64, i64, i64) {
        (self.actual, self.desired, self.endpoints)
    }

    /// traffic distribution -> Services using it.
    pub fn services_by_distribution(&self) -> BTreeMap<String, usize> {
        self.by_distribution
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }
}

/// `endpointslices_changed_per_sync`'s labels: (topology, traffic_distribution).
type ChangedLabels = (&'static str, String);

struct State {
    cache: EfficiencyCache,
    added: Option<Histogram>,
    removed: Option<Histogram>,
    /// (topology, traffic_distribution) -> slices changed.
    changed: BTreeMap<ChangedLabels, Histogram>,
    /// Service key -> the slices changed by each address type of its sync being applied,
    /// observed in `changed` once its writes went well.
    pending_changed: BTreeMap<String, Vec<(ChangedLabels, usize)>>,
    /// operation -> writes accepted.
    changes: BTreeMap<&'static str, u64>,
    /// result -> syncs.
    syncs: BTreeMap<&'static str, u64>,
}

/// The controller's metrics; `families` is its collector.
pub struct Metrics(Mutex<State>);

/// `ExponentialBuckets(2, 2, 15)`.
fn endpoints_histogram() -> Histogram {
    let bounds: Vec<f64> = (1..=15).map(|i| f64::from(1u32 << i)).collect();
    Histogram::new(&bounds)
}

/// `endpointslices_changed_per_sync` names no buckets: with native histograms on (the
/// `NativeHistograms` gate, beta and on in v1.37) the Prometheus client keeps no classic
/// buckets, so the text format has `+Inf` alone; with the gate off, its default buckets.
fn default_histogram() -> Histogram {
    if crate::config::gates::enabled("NativeHistograms") {
        return Histogram::new(&[]);
    }
    Histogram::new(&[
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Metrics {
    pub fn new(max: usize) -> Self {
        Metrics(Mutex::new(State {
            cache: EfficiencyCache::new(max),
            added: None,
            removed: None,
            changed: BTreeMap::new(),
            pending_changed: BTreeMap::new(),
            changes: BTreeMap::new(),
            syncs: BTreeMap::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One address type of a Service's sync, in upstream's order.
    pub fn observe(&self, key: &str, s: &AddressTypeSync) {
        let mut st = self.lock();
        st.added
            .get_or_insert_with(endpoints_histogram)
            .observe(s.added as f64);
        st.removed
            .get_or_insert_with(endpoints_histogram)
            .observe(s.removed as f64);
        st.cache.update_service(key, s.ports.clone());
        st.cache
            .set_traffic_distribution(key, s.traffic_distribution.as_deref());
        let topology = if s.topology_auto { "Auto" } else { "Disabled" };
        let td = s.traffic_distribution.clone().unwrap_or_default();
        st.pending_changed
            .entry(key.to_string())
            .or_default()
            .push(((topology, td), s.changed));
    }

    /// The Service is gone.
    pub fn delete_service(&self, key: &str) {
        self.lock().cache.delete_service(key);
    }

    /// A slice write the server accepted: `create`, `update` or `delete`.
    pub fn change(&self, operation: &'static str) {
        *self.lock().changes.entry(operation).or_insert(0) += 1;
    }

    /// A sync of `key` ended, its writes applied: `success`, `stale` or `error`. The slices it
    /// changed are observed when it succeeded (upstream observes them after its writes).
    pub fn sync(&self, key: &str, result: &'static str) {
        let mut st = self.lock();
        *st.syncs.entry(result).or_insert(0) += 1;
        let changed = st.pending_changed.remove(key).unwrap_or_default();
        if result != "success" {
            return;
        }
        for (labels, n) in changed {
            st.changed
                .entry(labels)
                .or_insert_with(default_histogram)
                .observe(n as f64);
        }
    }

    pub fn families(&self) -> Vec<Family> {
        use MetricType::*;
        let st = self.lock();
        let name = |n: &str| format!("{SUBSYSTEM}_{n}");
        let beta =
            |n: &str, help: &str, kind| Family::new(&name(n), &format!("[BETA] {help}"), kind);
        let mut added = beta(
            "endpoints_added_per_sync",
            "Number of endpoints added on each Service sync",
            Histogram,
        );
        let mut removed = beta(
            "endpoints_removed_per_sync",
            "Number of endpoints removed on each Service sync",
            Histogram,
        );
        added
            .samples
            .extend(st.added.clone().map(|h| hist_sample(&[], h)));
        removed
            .samples
            .extend(st.removed.clone().map(|h| hist_sample(&[], h)));
        let mut desired_eps = beta("endpoints_desired", "Number of endpoints desired", Gauge);
        let mut actual = beta("num_endpoint_slices", "Number of EndpointSlices", Gauge);
        let mut desired = beta(
            "desired_endpoint_slices",
            "Number of EndpointSlices that would exist with perfect endpoint allocation",
            Gauge,
        );
        if st.cache.touched {
            let (a, d, e) = st.cache.gauges();
            actual.push(&[], a as f64);
            desired.push(&[], d as f64);
            desired_eps.push(&[], e as f64);
        }
        let mut by_td = beta(
            "services_count_by_traffic_distribution",
            "Number of Services using some specific trafficDistribution",
            Gauge,
        );
        for (td, n) in st.cache.services_by_distribution() {
            by_td.push(&[("traffic_distribution", &td)], n as f64);
        }
        let mut changes =
            Family::alpha(&name("changes"), "Number of EndpointSlice changes", Counter);
        for (op, n) in &st.changes {
            changes.push(&[("operation", op)], *n as f64);
        }
        let mut changed = Family::alpha(
            &name("endpointslices_changed_per_sync"),
            "Number of EndpointSlices changed on each Service sync",
            Histogram,
        );
        for ((topology, td), h) in &st.changed {
            changed.push_histogram(
                &[("topology", topology), ("traffic_distribution", td)],
                h.clone(),
            );
        }
        let mut syncs = Family::alpha(&name("syncs"), "Number of EndpointSlice syncs", Counter);
        for (r, n) in &st.syncs {
            syncs.push(&[("result", r)], *n as f64);
        }
        vec![
            added,
            removed,
            desired_eps,
            actual,
            desired,
            changes,
            changed,
            syncs,
            by_td,
        ]
    }
}

fn hist_sample(labels: &[(&str, &str)], h: Histogram) -> crate::metrics::Sample {
    let mut f = Family::new("", "", MetricType::Histogram);
    f.push_histogram(labels, h);
    f.samples.remove(0)
}
