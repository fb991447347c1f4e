//! The API client's request metrics: `rest_client_requests_total` (every attempt) and
//! `rest_client_request_duration_seconds` (a whole call with its retries).

use std::time::Duration;

use super::Histogram;
use super::{lock, registry, Family, MetricType};

/// Buckets of `rest_client_request_duration_seconds`.
pub const REST_LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// `host[:port]` of a base URL, client-go's `host` label.
pub fn host_of(base_url: &str) -> &str {
    let rest = base_url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(base_url);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    // Credentials in the URL are not part of the host.
    host.rsplit_once('@').map(|(_, h)| h).unwrap_or(host)
}

/// One HTTP attempt made by the API client; `status` None when no answer came.
pub fn rest_request_result(base_url: &str, method: &str, status: Option<u16>) {
    let code = status.map_or_else(|| "<error>".to_string(), |s| s.to_string());
    let key = (code, host_of(base_url).to_string(), method.to_string());
    *lock(&registry().rest_results).entry(key).or_insert(0) += 1;
}

/// One whole API call (retries and waits included).
pub fn rest_request_latency(base_url: &str, verb: &str, took: Duration) {
    let key = (host_of(base_url).to_string(), verb.to_string());
    lock(&registry().rest_latency)
        .entry(key)
        .or_insert_with(|| Histogram::new(&REST_LATENCY_BUCKETS))
        .observe(took.as_secs_f64());
}

pub(super) fn rest_client_families() -> Vec<Family> {
    let mut results = Family::alpha(
        "rest_client_requests_total",
        "Number of HTTP requests, partitioned by status code, method, and host.",
        MetricType::Counter,
    );
    for ((code, host, method), n) in lock(&registry().rest_results).iter() {
        results.push(
            &[("code", code), ("host", host), ("method", method)],
            *n as f64,
        );
    }
    let mut latency = Family::alpha(
        "rest_client_request_duration_seconds",
        "Request latency in seconds. Broken down by verb, and host.",
        MetricType::Histogram,
    );
    for ((host, verb), h) in lock(&registry().rest_latency).iter() {
        latency.push_histogram(&[("host", host), ("verb", verb)], h.clone());
    }
    vec![results, latency]
}
