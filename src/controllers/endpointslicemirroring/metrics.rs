//! The endpointslice-mirroring-controller's metrics, with upstream's names, types, buckets,
//! help texts and stability (`endpoint_slice_mirroring_controller_*`, all ALPHA): endpoints
//! added, updated and removed and addresses skipped per sync, the sync's duration, slice
//! writes by operation, and the gauges of its cache (endpoints desired, slices that exist,
//! slices perfect packing would need).
//!
//! As upstream counts them: a sync's duration includes its writes; `changes` counts the writes
//! the server accepted.

use crate::metrics::{Family, Histogram, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const SUBSYSTEM: &str = "endpoint_slice_mirroring_controller";

/// What one sync of one Endpoints gives the metrics.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MirrorSync {
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
    /// Addresses not mirrored: not IPs, or past the subset's maximum.
    pub skipped: usize,
    /// Address type and port-map key -> (endpoints desired, slices once the writes are done).
    pub ports: BTreeMap<String, (usize, usize)>,
}

/// Upstream's mirroring `Cache`: endpoints summed as Endpoints are updated; slices counted
/// over every cached Endpoints' ports (`ceil(endpoints / max)` desired per set of ports).
#[derive(Debug, Default)]
pub struct MirrorCache {
    max: usize,
    entries: BTreeMap<String, BTreeMap<String, (usize, usize)>>,
    endpoints: i64,
    touched: bool,
}

impl MirrorCache {
    pub fn new(max: usize) -> Self {
        MirrorCache {
            max: max.max(1),
            ..Default::default()
        }
    }

    fn endpoints_of(p: &BTreeMap<String, (usize, usize)>) -> i64 {
        p.values().map(|(e, _)| *e as i64).sum()
    }

    /// `UpdateEndpointPortCache`.
    pub fn update(&mut self, key: &str, ports: BTreeMap<String, (usize, usize)>) {
        let prev = self.entries.get(key).map_or(0, Self::endpoints_of);
        self.endpoints += Self::endpoints_of(&ports) - prev;
        self.entries.insert(key.to_string(), ports);
        self.touched = true;
    }

    /// `DeleteEndpoints`.
    pub fn delete(&mut self, key: &str) {
        if let Some(p) = self.entries.remove(key) {
            self.endpoints -= Self::endpoints_of(&p);
        }
    }

    /// (num_endpoint_slices, desired_endpoint_slices, endpoints_desired).
    pub fn gauges(&self) -> (i64, i64, i64) {
        let (mut actual, mut desired) = (0i64, 0i64);
        for p in self.entries.values() {
            for (e, s) in p.values() {
                actual += *s as i64;
                desired += e.div_ceil(self.max) as i64;
            }
        }
        (actual, desired, self.endpoints)
    }
}

#[derive(Default)]
struct State {
    cache: MirrorCache,
    /// added, updated, removed, skipped, duration.
    hists: Option<[Histogram; 5]>,
    changes: BTreeMap<&'static str, u64>,
}

pub struct Metrics(Mutex<State>);

/// `ExponentialBuckets(start, 2, 15)`.
fn doubling(start: f64) -> Histogram {
    let mut b = Vec::with_capacity(15);
    let mut v = start;
    for _ in 0..15 {
        b.push(v);
        v *= 2.0;
    }
    Histogram::new(&b)
}

impl Metrics {
    pub fn new(max: usize) -> Self {
        Metrics(Mutex::new(State {
            cache: MirrorCache::new(max),
            ..Default::default()
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hists(st: &mut State) -> &mut [Histogram; 5] {
        st.hists.get_or_insert_with(|| {
            [
                doubling(2.0),
                doubling(2.0),
                doubling(2.0),
                doubling(2.0),
                doubling(0.001),
            ]
        })
    }

    /// A reconcile of `key`, in upstream's order.
    pub fn observe(&self, key: &str, s: &MirrorSync) {
        let mut st = self.lock();
        let h = Self::hists(&mut st);
        h[3].observe(s.skipped as f64);
        h[0].observe(s.added as f64);
        h[1].observe(s.updated as f64);
        h[2].observe(s.removed as f64);
        st.cache.update(key, s.ports.clone());
    }

    /// The Endpoints is not mirrored (any more).
    pub fn delete(&self, key: &str) {
        self.lock().cache.delete(key);
    }

    /// One sync took `took` (upstream counts whole milliseconds).
    pub fn sync_duration(&self, took: Duration) {
        let mut st = self.lock();
        Self::hists(&mut st)[4].observe(took.as_millis() as f64 / 1000.0);
    }

    /// A slice write the server accepted: `create`, `update` or `delete`.
    pub fn change(&self, operation: &'static str) {
        *self.lock().changes.entry(operation).or_insert(0) += 1;
    }

    pub fn families(&self) -> Vec<Family> {
        use MetricType::*;
        let st = self.lock();
        let fam =
            |n: &str, help: &str, kind| Family::alpha(&format!("{SUBSYSTEM}_{n}"), help, kind);
        let mut hists = [
            fam(
                "endpoints_added_per_sync",
                "Number of endpoints added on each Endpoints sync",
                Histogram,
            ),
            fam(
                "endpoints_updated_per_sync",
                "Number of endpoints updated on each Endpoints sync",
                Histogram,
            ),
            fam(
                "endpoints_removed_per_sync",
                "Number of endpoints removed on each Endpoints sync",
                Histogram,
            ),
            fam(
                "addresses_skipped_per_sync",
                "Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset",
                Histogram,
            ),
            fam(
                "endpoints_sync_duration",
                "Duration of syncEndpoints() in seconds",
                Histogram,
            ),
        ];
        if let Some(h) = &st.hists {
            for (f, h) in hists.iter_mut().zip(h) {
                f.push_histogram(&[], h.clone());
            }
        }
        let mut desired_eps = fam("endpoints_desired", "Number of endpoints desired", Gauge);
        let mut actual = fam("num_endpoint_slices", "Number of EndpointSlices", Gauge);
        let mut desired = fam(
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
        let mut changes = fam("changes", "Number of EndpointSlice changes", Counter);
        for (op, n) in &st.changes {
            changes.push(&[("operation", op)], *n as f64);
        }
        let mut out: Vec<Family> = hists.into_iter().collect();
        out.extend([desired_eps, actual, desired, changes]);
        out
    }
}
