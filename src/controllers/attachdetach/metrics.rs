//! The controller's metrics, as upstream's `attachdetach/metrics` names them:
//! `attachdetach_controller_total_volumes{plugin_name,state}`, the volumes wanted on managed
//! nodes (`desired_state_of_world`) and the volumes attached there (`actual_state_of_world`),
//! as each node's last sync found them; and the forced detaches counter, whose full name
//! upstream builds from its subsystem `attach_detach_controller` and its name
//! `attachdetach_controller_forced_detaches` (label `reason`: `timeout`, `out-of-service`).

use crate::metrics::{Family, MetricType};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Upstream's `ForceDetachReasonTimeout` and `ForceDetachReasonOutOfService`.
pub const TIMEOUT: &str = "timeout";
pub const OUT_OF_SERVICE: &str = "out-of-service";

/// Per plugin name, a count of volumes.
pub type PerPlugin = BTreeMap<String, u64>;

#[derive(Default)]
pub struct Stats {
    /// node -> (desired, actual)
    nodes: Mutex<HashMap<String, (PerPlugin, PerPlugin)>>,
    forced: Mutex<BTreeMap<&'static str, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A CSI volume's plugin name (`GetFullQualifiedPluginNameForVolume`).
pub fn plugin_name(driver: &str) -> String {
    format!("kubernetes.io/csi:{driver}")
}

impl Stats {
    /// What a sync of `node` found wanted and attached there.
    pub fn node(&self, node: &str, desired: PerPlugin, actual: PerPlugin) {
        let mut nodes = lock(&self.nodes);
        if desired.is_empty() && actual.is_empty() {
            nodes.remove(node);
        } else {
            nodes.insert(node.to_string(), (desired, actual));
        }
    }

    /// A node that is gone or not managed: nothing of it counts.
    pub fn node_gone(&self, node: &str) {
        lock(&self.nodes).remove(node);
    }

    /// A detach started without waiting for the volume to be unmounted.
    pub fn forced_detach(&self, reason: &'static str) {
        *lock(&self.forced).entry(reason).or_default() += 1;
    }

    /// The families of a scrape (each appears with its first series, as upstream's).
    pub fn families(&self) -> Vec<Family> {
        let mut totals: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        let nodes = lock(&self.nodes);
        for (desired, actual) in nodes.values() {
            for (state, m) in [
                ("desired_state_of_world", desired),
                ("actual_state_of_world", actual),
            ] {
                for (plugin, n) in m {
                    *totals.entry((plugin, state)).or_default() += n;
                }
            }
        }
        let mut total = Family::alpha(
            "attachdetach_controller_total_volumes",
            "Number of volumes in A/D Controller",
            MetricType::Gauge,
        );
        for ((plugin, state), n) in &totals {
            total.push(&[("plugin_name", plugin), ("state", state)], *n as f64);
        }
        let mut forced = Family::alpha(
            "attach_detach_controller_attachdetach_controller_forced_detaches",
            "Number of times the A/D Controller performed a forced detach",
            MetricType::Counter,
        );
        for (reason, n) in lock(&self.forced).iter() {
            forced.push(&[("reason", reason)], *n as f64);
        }
        [total, forced]
            .into_iter()
            .filter(|f| !f.samples.is_empty())
            .collect()
    }
}
