//! The two metric families of a controller that evicts pods by deleting them (upstream's
//! `tainteviction/metrics` and `devicetainteviction/metrics`, alike but for names and help
//! texts): a counter of the pods deleted and a histogram of how long after its deletion was
//! due each went through (buckets 5 ms to 4 min). Both are there from the start, at zero.

use crate::metrics::{Family, Histogram, MetricType};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
];

/// One controller's pair: `(name, help)` of the counter and of the histogram.
pub struct PodDeletions {
    total: (&'static str, &'static str),
    latency: (&'static str, &'static str),
    values: OnceLock<Mutex<(u64, Histogram)>>,
}

impl PodDeletions {
    pub const fn new(
        total: (&'static str, &'static str),
        latency: (&'static str, &'static str),
    ) -> Self {
        PodDeletions {
            total,
            latency,
            values: OnceLock::new(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut (u64, Histogram)) -> T) -> T {
        let m = self
            .values
            .get_or_init(|| Mutex::new((0, Histogram::new(&BUCKETS))));
        f(&mut m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A pod was deleted `late` after its deletion was due.
    pub fn pod_deleted(&self, late: Duration) {
        self.with(|v| {
            v.0 += 1;
            v.1.observe(late.as_secs_f64());
        })
    }

    pub fn families(&self) -> Vec<Family> {
        let (n, h) = self.with(|v| (v.0, v.1.clone()));
        let mut total = Family::alpha(self.total.0, self.total.1, MetricType::Counter);
        total.push(&[], n as f64);
        let mut latency = Family::alpha(self.latency.0, self.latency.1, MetricType::Histogram);
        latency.push_histogram(&[], h);
        vec![latency, total]
    }
}
