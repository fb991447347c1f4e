//! The controller's metrics, as upstream's `attachdetach/metrics` names them:
//! `attachdetach_controller_total_volumes{plugin_name,state}`, the volumes wanted on managed
//! nodes (`desired_state_of_world`) and the volumes attached there (`actual_state_of_world`),
//! as each node's last sync found them; and the forced detaches counter, whose full name
//! upstream builds from its subsystem `attach_detach_controller` and its name
//! `attachdetach_controller_forced_detaches` (label `reason`: `timeout`, `out-of-service`).
//!
//! `storage_count_attachable_volumes_in_use{node,volume_plugin}` is counted at each scrape
//! from the cache, as upstream's collector counts it from its listers: every volume of every
//! pod with a node (terminated pods and unmanaged nodes included, a volume used by two pods
//! counted twice) that resolves to an attachable plugin: a claim (or a generic ephemeral
//! volume's claim made for the pod) Bound to a volume whose `claimRef` has its UID, or an
//! inline source; `kubernetes.io/csi:<driver>`, `kubernetes.io/fc` or `kubernetes.io/iscsi`.

use super::{POD_WATCH, PVC_WATCH, PV_WATCH};
use crate::cache::{Cache, Store};
use crate::metrics::{Family, MetricType};
use crate::obj;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

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
    /// The pod, claim and volume stores the in-use count reads at a scrape.
    stores: OnceLock<[Arc<Store>; 3]>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A CSI volume's plugin name (`GetFullQualifiedPluginNameForVolume`).
pub fn plugin_name(driver: &str) -> String {
    format!("kubernetes.io/csi:{driver}")
}

/// The attachable plugin of a volume source (a pod's inline volume or a PersistentVolume's
/// spec), as upstream's attach/detach plugin manager finds it: CSI, FC, iSCSI.
fn source_plugin(src: &Value) -> Option<String> {
    if let Some(csi) = src["csi"].as_object() {
        return Some(plugin_name(
            csi.get("driver").and_then(Value::as_str).unwrap_or(""),
        ));
    }
    if src["fc"].is_object() {
        return Some("kubernetes.io/fc".into());
    }
    if src["iscsi"].is_object() {
        return Some("kubernetes.io/iscsi".into());
    }
    None
}

/// The plugin of one pod volume, resolved as upstream's `CreateVolumeSpec` does: through
/// its claim (Bound, with a volume whose `claimRef` has the claim's UID) or inline.
fn pod_volume_plugin(pod: &Value, vol: &Value, claims: &Store, pvs: &Store) -> Option<String> {
    let ephemeral = vol["ephemeral"].is_object();
    let claim = match vol["persistentVolumeClaim"]["claimName"].as_str() {
        Some(c) if !ephemeral => c.to_string(),
        _ if ephemeral => {
            super::super::ephemeral::claim_name(obj::name(pod), vol["name"].as_str().unwrap_or(""))
        }
        _ => return source_plugin(vol),
    };
    let pvc = claims.get_in(obj::namespace(pod), &claim)?;
    if ephemeral && !super::super::ephemeral::is_for_pod(pod, &pvc) {
        return None;
    }
    let pv_name = pvc["spec"]["volumeName"].as_str().unwrap_or("");
    if pvc["status"]["phase"] != "Bound" || pv_name.is_empty() {
        return None;
    }
    let pv = pvs.get(pv_name)?;
    let claim_ref = &pv["spec"]["claimRef"];
    if !claim_ref.is_object() || claim_ref["uid"].as_str().unwrap_or("") != obj::uid(&pvc) {
        return None;
    }
    source_plugin(&pv["spec"])
}

/// The parts of a pod `volumes_in_use` reads (besides its metadata).
const IN_USE_FIELDS: &[&str] = &["/spec/nodeName", "/spec/volumes"];

/// Per (node, plugin), the pod volumes in use (upstream's `getVolumeInUseCount`). The pods
/// are decoded one at a time with `IN_USE_FIELDS` only: decoding every pod whole at once
/// made a scrape after the standard workload (1,500 pods) allocate 17 MB, which the
/// allocator then kept as the process's peak.
pub fn volumes_in_use(
    pods: &Store,
    claims: &Store,
    pvs: &Store,
) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    let found = pods.scan_fields(IN_USE_FIELDS, |pod| {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        if node.is_empty() {
            return None;
        }
        let plugins: Vec<String> = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|vol| pod_volume_plugin(pod, vol, claims, pvs))
            .collect();
        (!plugins.is_empty()).then(|| (node.to_string(), plugins))
    });
    for (node, plugins) in found {
        for plugin in plugins {
            *out.entry((node.clone(), plugin)).or_default() += 1;
        }
    }
    out
}

impl Stats {
    /// The stores a scrape reads (the first call wins; the cache hands out the same ones).
    pub fn attach_cache(&self, cache: &Cache) {
        if self.stores.get().is_none() {
            let _ = self.stores.set([
                cache.store_for(&POD_WATCH),
                cache.store_for(&PVC_WATCH),
                cache.store_for(&PV_WATCH),
            ]);
        }
    }

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
        let mut in_use = Family::alpha(
            "storage_count_attachable_volumes_in_use",
            "Measure number of volumes in use",
            MetricType::Gauge,
        );
        if let Some([pods, claims, pvs]) = self.stores.get() {
            for ((node, plugin), n) in volumes_in_use(pods, claims, pvs) {
                in_use.push(&[("node", &node), ("volume_plugin", &plugin)], n as f64);
            }
        }
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
        [in_use, total, forced]
            .into_iter()
            .filter(|f| !f.samples.is_empty())
            .collect()
    }
}
