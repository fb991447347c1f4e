//! Syncs counted and timed by their HTTP code, as upstream's two CA publishers count them
//! (`root_ca_cert_publisher_*` and `clustertrustbundle_publisher_*`): a counter and a
//! histogram (buckets 1 ms doubling 15 times) labelled `code`: 200 when the sync succeeded,
//! the API's code of its failure, 500 when there is none. No series until the first sync, as
//! upstream's vectors. Recorded from [`Controller::synced`](crate::controller::Controller),
//! so a sync's duration and code include its writes.

use crate::controller::SyncEnd;
use crate::metrics::{Family, Histogram, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

fn buckets() -> Vec<f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect()
}

/// One controller's pair of families (process-wide, as upstream's are registered once).
pub struct SyncsByCode {
    /// `<prefix>_sync_total` and `<prefix>_sync_duration_seconds`.
    prefix: &'static str,
    total_help: &'static str,
    duration_help: &'static str,
    /// code -> (syncs, durations).
    values: Mutex<BTreeMap<u16, (u64, Histogram)>>,
}

impl SyncsByCode {
    pub const fn new(
        prefix: &'static str,
        total_help: &'static str,
        duration_help: &'static str,
    ) -> Self {
        SyncsByCode {
            prefix,
            total_help,
            duration_help,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    fn values(&self) -> MutexGuard<'_, BTreeMap<u16, (u64, Histogram)>> {
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The code a sync that ended so is counted under.
    pub fn code(end: &SyncEnd<'_>) -> u16 {
        match end {
            SyncEnd::Failed(e) => e.code().unwrap_or(500),
            SyncEnd::RetryQuietly(_) => 500,
            SyncEnd::Done => 200,
        }
    }

    /// A sync ended with `code` after `took`.
    pub fn synced(&self, code: u16, took: Duration) {
        let mut v = self.values();
        let e = v
            .entry(code)
            .or_insert_with(|| (0, Histogram::new(&buckets())));
        e.0 += 1;
        e.1.observe(took.as_secs_f64());
    }

    pub fn families(&self) -> Vec<Family> {
        let v = self.values();
        let mut total = Family::alpha(
            &format!("{}_sync_total", self.prefix),
            self.total_help,
            MetricType::Counter,
        );
        let mut latency = Family::alpha(
            &format!("{}_sync_duration_seconds", self.prefix),
            self.duration_help,
            MetricType::Histogram,
        );
        for (code, (n, h)) in v.iter() {
            let c = code.to_string();
            total.push(&[("code", &c)], *n as f64);
            latency.push_histogram(&[("code", &c)], h.clone());
        }
        vec![latency, total]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_code_with_upstreams_buckets() {
        let m = SyncsByCode::new("x_publisher", "syncs", "durations");
        m.synced(200, Duration::from_millis(3));
        m.synced(409, Duration::from_millis(1));
        let text = crate::metrics::encode(&m.families());
        assert!(
            text.contains("x_publisher_sync_total{code=\"200\"} 1"),
            "{text}"
        );
        assert!(text.contains("x_publisher_sync_total{code=\"409\"} 1"));
        assert!(
            text.contains("x_publisher_sync_duration_seconds_bucket{code=\"200\",le=\"16.384\"}"),
            "{text}"
        );
        assert!(text.contains("# HELP x_publisher_sync_total [ALPHA] syncs"));
    }

    #[test]
    fn codes_of_ends() {
        assert_eq!(SyncsByCode::code(&SyncEnd::Done), 200);
        let conflict = crate::Error::api(409, "Conflict", "m");
        assert_eq!(SyncsByCode::code(&SyncEnd::Failed(&conflict)), 409);
        assert_eq!(
            SyncsByCode::code(&SyncEnd::Failed(&crate::Error::Cancelled)),
            500
        );
    }
}
