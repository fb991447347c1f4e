//! The controller's gauges while MaxUnavailableStatefulSet is on (v1.35 on):
//! `statefulset_controller_statefulset_max_unavailable` (each sync) and
//! `statefulset_controller_statefulset_unavailable_replicas` (each rolling-update step), by
//! namespace, name and pod management policy. As upstream's, a series stays after its set
//! is deleted. And `statefulset_controller_stale_sync_skips_total` (v1.36), by group and
//! resource, while StaleControllerConsistencyStatefulSet is on (`consistency`).

use super::consistency::Res;
use crate::controllers::kit::staleskips::StaleSkips;
use crate::metrics::{Family, MetricType};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

static SKIPS: StaleSkips = StaleSkips::new(
    "StaleControllerConsistencyStatefulSet",
    "statefulset_controller_stale_sync_skips_total",
    "Total number of StatefulSet syncs skipped due to a stale watch cache.",
);

/// Whether the controller waits for its own writes (and counts the waits).
pub fn consistency_gate_on() -> bool {
    SKIPS.gate_on()
}

/// A sync skipped: the cache of `res` is older than the set's last write of it.
pub fn observe_stale_skip(res: Res) {
    SKIPS.observe_skip_of(res.group(), res.resource());
}

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
    .chain([SKIPS.family()])
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_skips_are_counted_by_group_and_resource_while_the_gate_is_on() {
        // The gate is on by default at v1.37 (beta since 1.36).
        assert!(consistency_gate_on());
        observe_stale_skip(Res::Sets);
        observe_stale_skip(Res::Pods);
        let text = crate::metrics::encode(&families());
        for want in [
            "statefulset_controller_stale_sync_skips_total{group=\"\",resource=\"pods\"}",
            "statefulset_controller_stale_sync_skips_total{group=\"apps\",resource=\"statefulsets\"}",
        ] {
            assert!(text.contains(want), "{text}");
        }
    }
}
