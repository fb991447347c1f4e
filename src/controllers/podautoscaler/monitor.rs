//! The controller's metrics (upstream's `podautoscaler/monitor`):
//! `horizontal_pod_autoscaler_controller_reconciliations_total` and
//! `_reconciliation_duration_seconds` by `action` (scale_up, scale_down, none) and `error`
//! (spec, internal, none); `_metric_computation_total` and `_metric_computation_duration_seconds`
//! by those and `metric_type`; `_num_horizontal_pod_autoscalers`; `_desired_replicas` by
//! `namespace` and `hpa_name` (a series stays after its HPA is deleted, as upstream's);
//! `_stale_sync_skips_total` (StaleControllerConsistencyHPA).

use crate::metrics::{Family, Histogram, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

const PREFIX: &str = "horizontal_pod_autoscaler_controller_";

/// Syncs skipped because the cache had not shown the HPA's last status write yet.
pub static SKIPS: crate::controllers::kit::staleskips::StaleSkips =
    crate::controllers::kit::staleskips::StaleSkips::of(
        "StaleControllerConsistencyHPA",
        "horizontal_pod_autoscaler_controller_stale_sync_skips_total",
        "Total number of HPA syncs skipped due to a stale watch cache.",
        "autoscaling",
        "horizontalpodautoscalers",
    );

#[derive(Default)]
struct State {
    reconciliations: BTreeMap<(&'static str, &'static str), (u64, Histogram)>,
    computations: BTreeMap<(&'static str, &'static str, String), (u64, Histogram)>,
    hpas: i64,
    desired: BTreeMap<(String, String), f64>,
}

fn state() -> MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// 1 ms doubling 15 times (`ExponentialBuckets(0.001, 2, 15)`).
fn buckets() -> Histogram {
    let b: Vec<f64> = (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect();
    Histogram::new(&b)
}

/// The action label of a replica count against the current one.
pub fn action(proposed: i32, current: i32) -> &'static str {
    match proposed.cmp(&current) {
        std::cmp::Ordering::Greater => "scale_up",
        std::cmp::Ordering::Less => "scale_down",
        std::cmp::Ordering::Equal => "none",
    }
}

pub fn observe_reconciliation(action: &'static str, error: &'static str, took: Duration) {
    let mut s = state();
    let e = s
        .reconciliations
        .entry((action, error))
        .or_insert_with(|| (0, buckets()));
    e.0 += 1;
    e.1.observe(took.as_secs_f64());
}

pub fn observe_metric(action: &'static str, error: &'static str, took: Duration, kind: &str) {
    let mut s = state();
    let e = s
        .computations
        .entry((action, error, kind.to_string()))
        .or_insert_with(|| (0, buckets()));
    e.0 += 1;
    e.1.observe(took.as_secs_f64());
}

pub fn hpa_added() {
    state().hpas += 1;
}

pub fn hpa_deleted() {
    state().hpas -= 1;
}

pub fn set_desired(ns: &str, name: &str, replicas: i32) {
    state()
        .desired
        .insert((ns.to_string(), name.to_string()), f64::from(replicas));
}

fn family(name: &str, stability: &str, help: &str, kind: MetricType) -> Family {
    Family::new(
        &format!("{PREFIX}{name}"),
        &format!("[{stability}] {help}"),
        kind,
    )
}

const ACTION_HELP: &str =
    "The label 'action' should be either 'scale_down', 'scale_up', or 'none'.";

pub fn families() -> Vec<Family> {
    let s = state();
    let mut out = Vec::new();
    let mut total = family(
        "reconciliations_total",
        "BETA",
        &format!("Number of reconciliations of HPA controller. {ACTION_HELP} Also, the label 'error' should be either 'spec', 'internal', or 'none'. Note that if both spec and internal errors happen during a reconciliation, the first one to occur is reported in `error` label."),
        MetricType::Counter,
    );
    let mut dur = family(
        "reconciliation_duration_seconds",
        "BETA",
        &format!("The time(seconds) that the HPA controller takes to reconcile once. {ACTION_HELP} Also, the label 'error' should be either 'spec', 'internal', or 'none'. Note that if both spec and internal errors happen during a reconciliation, the first one to occur is reported in `error` label."),
        MetricType::Histogram,
    );
    for ((a, e), (n, h)) in &s.reconciliations {
        total.push(&[("action", a), ("error", e)], *n as f64);
        dur.push_histogram(&[("action", a), ("error", e)], h.clone());
    }
    let mut mtotal = family(
        "metric_computation_total",
        "BETA",
        &format!("Number of metric computations. {ACTION_HELP} Also, the label 'error' should be either 'spec', 'internal', or 'none'. The label 'metric_type' corresponds to HPA.spec.metrics[*].type"),
        MetricType::Counter,
    );
    let mut mdur = family(
        "metric_computation_duration_seconds",
        "BETA",
        &format!("The time(seconds) that the HPA controller takes to calculate one metric. {ACTION_HELP} The label 'error' should be either 'spec', 'internal', or 'none'. The label 'metric_type' corresponds to HPA.spec.metrics[*].type"),
        MetricType::Histogram,
    );
    for ((a, e, t), (n, h)) in &s.computations {
        let l = [("action", *a), ("error", *e), ("metric_type", t.as_str())];
        mtotal.push(&l, *n as f64);
        mdur.push_histogram(&l, h.clone());
    }
    for f in [total, dur, mtotal, mdur] {
        if !f.samples.is_empty() {
            out.push(f);
        }
    }
    let mut num = family(
        "num_horizontal_pod_autoscalers",
        "ALPHA",
        "Current number of controlled HPA objects.",
        MetricType::Gauge,
    );
    num.push(&[], s.hpas as f64);
    out.push(num);
    let mut desired = family(
        "desired_replicas",
        "ALPHA",
        "Current desired replica count for HPA objects.",
        MetricType::Gauge,
    );
    for ((ns, n), v) in &s.desired {
        desired.push(&[("hpa_name", n), ("namespace", ns)], *v);
    }
    if !desired.samples.is_empty() {
        out.push(desired);
    }
    out.push(SKIPS.family());
    out
}
