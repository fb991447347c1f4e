//! The queues' metrics: duration histograms and the `workqueue_*` snapshot of one queue.

/// Upper bounds of client-go's workqueue duration histograms: 1e-8 s .. 10 s, factor 10,
/// computed by repeated multiplication as Prometheus' `ExponentialBuckets` does (so the `le`
/// labels read exactly as upstream's, e.g. `9.999999999999999e-06`).
pub const DURATION_BUCKETS: [f64; 10] = exponential_buckets(10e-9, 10.0);

const fn exponential_buckets<const N: usize>(start: f64, factor: f64) -> [f64; N] {
    let mut b = [0.0; N];
    let mut v = start;
    let mut i = 0;
    while i < N {
        b[i] = v;
        v *= factor;
        i += 1;
    }
    b
}

/// A histogram with cumulative bucket counts (Prometheus `le` semantics).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// (upper bound in seconds, observations <= bound); `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Histogram {
            buckets: bounds.iter().map(|b| (*b, 0)).collect(),
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (le, c) in &mut self.buckets {
            if v <= *le {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    /// Add `h`'s observations (same buckets; one with other buckets is left out).
    pub fn merge(&mut self, h: &Histogram) {
        if self.buckets.len() != h.buckets.len() {
            return;
        }
        for (a, b) in self.buckets.iter_mut().zip(&h.buckets) {
            a.1 += b.1;
        }
        self.sum += h.sum;
        self.count += h.count;
    }
}

/// A snapshot of a queue's metrics (the `workqueue_*` family, labelled by `name`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    pub name: String,
    /// workqueue_adds_total
    pub adds_total: u64,
    /// workqueue_depth
    pub depth: usize,
    /// workqueue_retries_total
    pub retries_total: u64,
    /// workqueue_queue_duration_seconds
    pub queue_duration: Histogram,
    /// workqueue_work_duration_seconds
    pub work_duration: Histogram,
    /// workqueue_unfinished_work_seconds
    pub unfinished_work_seconds: f64,
    /// workqueue_longest_running_processor_seconds
    pub longest_running_processor_seconds: f64,
}
