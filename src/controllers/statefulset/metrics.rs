//! The controller's gauges while MaxUnavailableStatefulSet is on (v1.35 on):
//! `statefulset_controller_statefulset_max_unavailable` (each sync) and
//! `statefulset_controller_statefulset_unavailable_replicas` (each rolling-update step), by
//! namespace, name and pod management policy. As upstream's, a series stays after its set
//! is deleted.

use crate::metrics::{Family, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

type Key = (String, String, String);

#[derive(Default)]
struct Gauges {
    max_unavailable: BTreeMap<Key, f64>,
    unavailable: BTreeMap<Key, f64>,
}

fn gauges() -> MutexGuard<'static, Gauges> {
    static G: OnceLock<Mutex<Gauges>> = OnceLock::new();
    G.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn key(ns: &str, name: &str, policy: &str) -> Key {
    (ns.to_string(), name.to_string(), policy.to_string())
}

pub fn set_max_unavailable(ns: &str, name: &str, policy: &str, v: i64) {
    gauges()
        .max_unavailable
        .insert(key(ns, name, policy), v as f64);
}

pub fn set_unavailable(ns: &str, name: &str, policy: &str, v: i64) {
    gauges().unavailable.insert(key(ns, name, policy), v as f64);
}

/// The families, each once it has a series (an empty vector shows nothing upstream either).
pub fn families() -> Vec<Family> {
    let g = gauges();
    let family = |name: &str, help: &str, series: &BTreeMap<Key, f64>| {
        let mut f = Family::alpha(
            &format!("statefulset_controller_{name}"),
            help,
            MetricType::Gauge,
        );
        for ((ns, n, p), v) in series {
            f.push(
                &[
                    ("pod_management_policy", p),
                    ("statefulset_name", n),
                    ("statefulset_namespace", ns),
                ],
                *v,
            );
        }
        (!series.is_empty()).then_some(f)
    };
    [
        family(
            "statefulset_max_unavailable",
            "Maximum number of unavailable pods allowed during StatefulSet rolling updates",
            &g.max_unavailable,
        ),
        family(
            "statefulset_unavailable_replicas",
            "Current number of unavailable pods in StatefulSet",
            &g.unavailable,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
