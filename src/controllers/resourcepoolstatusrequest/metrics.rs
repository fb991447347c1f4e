//! The controller's three metrics, by `driver_name`, as upstream's
//! `resourcepoolstatusrequest/metrics` names them: `..._requests_processed_total` (every
//! status write tried), `..._request_processing_errors_total` (those that failed) and
//! `..._request_processing_duration_seconds` (from the start of the sync to the write's
//! answer; buckets 1 ms doubling 15 times). A series appears with its first request.

use crate::metrics::{Family, Histogram, MetricType};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

const PREFIX: &str = "resourcepoolstatusrequest_controller_";

/// Prometheus' `ExponentialBuckets(0.001, 2, 15)`, by repeated multiplication as it does.
fn buckets() -> Vec<f64> {
    let mut v = 0.001;
    (0..15)
        .map(|_| {
            let b = v;
            v *= 2.0;
            b
        })
        .collect()
}

/// driver -> (processed, errors, duration).
type Values = Vec<(String, (u64, u64, Histogram))>;

fn values() -> MutexGuard<'static, Values> {
    static V: OnceLock<Mutex<Values>> = OnceLock::new();
    V.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A status write for a request of `driver` went (`ok`) or failed, `took` after its sync began.
pub fn processed(driver: &str, ok: bool, took: Duration) {
    let mut m = values();
    let e = super::views::slot(&mut m, driver.to_string(), || {
        (0, 0, Histogram::new(&buckets()))
    });
    e.0 += 1;
    if !ok {
        e.1 += 1;
    }
    e.2.observe(took.as_secs_f64());
}

pub fn families() -> Vec<Family> {
    let m = values();
    let name = |n: &str| format!("{PREFIX}{n}");
    let mut total = Family::alpha(
        &name("requests_processed_total"),
        "Total number of ResourcePoolStatusRequests processed",
        MetricType::Counter,
    );
    let mut errors = Family::alpha(
        &name("request_processing_errors_total"),
        "Total number of errors encountered while processing ResourcePoolStatusRequests",
        MetricType::Counter,
    );
    let mut duration = Family::alpha(
        &name("request_processing_duration_seconds"),
        "Time taken to process a ResourcePoolStatusRequest",
        MetricType::Histogram,
    );
    for (driver, (n, e, h)) in m.iter() {
        let l = [("driver_name", driver.as_str())];
        total.push(&l, *n as f64);
        if *e > 0 {
            errors.push(&l, *e as f64);
        }
        duration.push_histogram(&l, h.clone());
    }
    [duration, errors, total]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_prometheus_exponential() {
        let b = buckets();
        assert_eq!(b.len(), 15);
        assert_eq!(b[0], 0.001);
        assert_eq!(b[14], 0.001 * 16384.0);
    }

    #[test]
    fn series_by_driver_errors_only_once_failed() {
        processed("m1.example.com", true, Duration::from_millis(3));
        let f = families();
        let find = |n: &str| f.iter().find(|x| x.name == format!("{PREFIX}{n}")).cloned();
        let total = find("requests_processed_total").unwrap();
        assert!(total.help.starts_with("[ALPHA] "));
        assert!(total
            .samples
            .iter()
            .any(|s| s.labels == vec![("driver_name".into(), "m1.example.com".into())]));
        let errs = find("request_processing_errors_total");
        assert!(errs.is_none_or(|e| e.samples.iter().all(|s| s.labels[0].1 != "m1.example.com")));
        processed("m1.example.com", false, Duration::from_millis(3));
        let f = families();
        let errs = f
            .iter()
            .find(|x| x.name.ends_with("request_processing_errors_total"))
            .unwrap();
        assert!(errs
            .samples
            .iter()
            .any(|s| s.labels[0].1 == "m1.example.com"));
    }
}
