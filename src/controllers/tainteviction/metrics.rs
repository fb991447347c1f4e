//! The controller's `taint_eviction_controller_*` metrics (upstream's
//! `tainteviction/metrics`): the pods it deleted, and how long after their deletion was due
//! each deletion went through (buckets 5 ms to 4 min). Both are there from the start, at zero.
//! Upstream multiplies the duration by `time.Second` before it observes it, so its samples
//! land far above the last bucket; here they are the seconds the help text speaks of.

use crate::controllers::kit::deletions::PodDeletions;
use crate::metrics::Family;
use std::time::Duration;

static M: PodDeletions = PodDeletions::new(
    (
        "taint_eviction_controller_pod_deletions_total",
        "Total number of Pods deleted by TaintEvictionController since its start.",
    ),
    (
        "taint_eviction_controller_pod_deletion_duration_seconds",
        "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
    ),
);

/// A pod was deleted `late` after its deletion was due.
pub fn pod_deleted(late: Duration) {
    M.pod_deleted(late)
}

pub fn families() -> Vec<Family> {
    M.families()
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
