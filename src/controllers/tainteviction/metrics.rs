//! The controller's `taint_eviction_controller_*` metrics (upstream's
//! `tainteviction/metrics`): the pods it deleted, and how long after their deletion was due
//! each deletion went through (buckets 5 ms to 4 min). Both are there from the start, at zero.
//! Upstream multiplies the duration by `time.Second` before it observes it, so its samples
//! land far above the last bucket; here they are the seconds the help text speaks of.

use crate::metrics::{Family, Histogram, MetricType};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
];

struct Values {
    deletions: u64,
    latency: Histogram,
}

fn values() -> MutexGuard<'static, Values> {
    static V: OnceLock<Mutex<Values>> = OnceLock::new();
    V.get_or_init(|| {
        Mutex::new(Values {
            deletions: 0,
            latency: Histogram::new(&BUCKETS),
        })
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

/// A pod was deleted `late` after its deletion was due.
pub fn pod_deleted(late: Duration) {
    let mut v = values();
    v.deletions += 1;
    v.latency.observe(late.as_secs_f64());
}

pub fn families() -> Vec<Family> {
    let v = values();
    let mut total = Family::alpha(
        "taint_eviction_controller_pod_deletions_total",
        "Total number of Pods deleted by TaintEvictionController since its start.",
        MetricType::Counter,
    );
    total.push(&[], v.deletions as f64);
    let mut latency = Family::alpha(
        "taint_eviction_controller_pod_deletion_duration_seconds",
        "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
        MetricType::Histogram,
    );
    latency.push_histogram(&[], v.latency.clone());
    vec![latency, total]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_families_from_the_start_with_upstreams_buckets() {
        pod_deleted(Duration::from_millis(300));
        let text = crate::metrics::encode(&families());
        assert!(text.contains("# TYPE taint_eviction_controller_pod_deletions_total counter"));
        assert!(text
            .contains("# TYPE taint_eviction_controller_pod_deletion_duration_seconds histogram"));
        for le in ["0.005", "0.025", "0.1", "0.5", "2.5", "240"] {
            assert!(
                text.contains(&format!(
                    "taint_eviction_controller_pod_deletion_duration_seconds_bucket{{le=\"{le}\"}}"
                )),
                "{le}\n{text}"
            );
        }
        let line = text
            .lines()
            .find(|l| l.starts_with("taint_eviction_controller_pod_deletions_total "))
            .expect("total");
        assert!(line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() >= 1.0);
    }
}
