//! The binder's metrics, as upstream's `persistentvolume/metrics` names them: the
//! `pv_collector_*` gauges, counted at each scrape from what the binder has seen of every
//! volume and claim (its watch, and the answers of its own writes), and the
//! `retroactive_storageclass_total` / `retroactive_storageclass_errors_total` counters of the
//! default class assignment.
//!
//! Operations, as upstream's `OperationStartTimeCache`: a provisioning hand-off (key: the
//! claim, plugin: the class's provisioner) or a Delete reclaim (key: the volume, plugin: the
//! class's provisioner of an externally provisioned volume, else `N/A`) is remembered from
//! its first attempt; each failed attempt counts in `volume_operation_total_errors`, and its
//! end (the claim bound, the volume gone) is observed once in `volume_operation_total_seconds`
//! (`pkg/volume/util`'s histogram). A deleted claim forgets its provisioning.

use crate::metrics::{Family, MetricType};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Upstream's operation names.
pub const PROVISION: &str = "provision";
pub const DELETE: &str = "delete";

/// `volume_operation_total_seconds` buckets (`pkg/volume/util/metrics.go`).
const OPERATION_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// (plugin, operation)
type OpLabels = (&'static str, &'static str);

/// What the gauges read of one volume.
struct Vol {
    class: String,
    bound: bool,
    plugin: &'static str,
    mode: String,
}

/// The volumes and claims as last seen, and the counters.
#[derive(Default)]
pub struct Stats {
    volumes: Mutex<HashMap<String, Vol>>,
    /// claim key -> (namespace, bound)
    claims: Mutex<HashMap<String, (String, bool)>>,
    retroactive: AtomicU64,
    retroactive_errors: AtomicU64,
    /// Operations under way: key -> (plugin, operation, first attempt).
    ops: Mutex<HashMap<String, (&'static str, &'static str, Instant)>>,
    op_errors: Mutex<BTreeMap<OpLabels, u64>>,
    op_seconds: Mutex<BTreeMap<OpLabels, crate::metrics::Histogram>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The volume plugin of a volume as upstream's controller plugin manager finds it
/// (`GetFullQualifiedPluginNameForVolume`): host path, NFS, local, CSI (with its driver), else
/// `N/A`.
pub fn plugin_name(pv: &Value) -> String {
    let spec = &pv["spec"];
    let found: Vec<&str> = [
        ("hostPath", "kubernetes.io/host-path"),
        ("nfs", "kubernetes.io/nfs"),
        ("local", "kubernetes.io/local-volume"),
        ("csi", "kubernetes.io/csi"),
    ]
    .into_iter()
    .filter(|(f, _)| spec[*f].is_object())
    .map(|(_, p)| p)
    .collect();
    match found.as_slice() {
        ["kubernetes.io/csi"] => format!(
            "kubernetes.io/csi:{}",
            spec["csi"]["driver"].as_str().unwrap_or("")
        ),
        [one] => one.to_string(),
        _ => "N/A".to_string(),
    }
}

/// The plugin name kept once per distinct value (few: one per CSI driver).
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = lock(&NAMES);
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.into_boxed_str());
    names.push(n);
    n
}

impl Stats {
    pub fn volume(&self, pv: &Value) {
        let v = Vol {
            class: pv["spec"]["storageClassName"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            bound: pv["status"]["phase"] == "Bound",
            plugin: intern(plugin_name(pv)),
            mode: crate::controllers::kit::volume::volume_mode(pv).to_string(),
        };
        lock(&self.volumes).insert(crate::obj::name(pv).to_string(), v);
    }

    pub fn volume_gone(&self, name: &str) {
        lock(&self.volumes).remove(name);
    }

    pub fn claim(&self, pvc: &Value) {
        let bound = pvc["status"]["phase"] == "Bound";
        let ns = crate::obj::namespace(pvc).to_string();
        lock(&self.claims).insert(crate::obj::key(pvc), (ns, bound));
    }

    pub fn claim_gone(&self, key: &str) {
        lock(&self.claims).remove(key);
    }

    /// A default class assignment was written (`ok`) or failed.
    pub fn retroactive(&self, ok: bool) {
        self.retroactive.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.retroactive_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An operation's attempt starts (upstream's `AddIfNotExist`: the first one counts).
    pub fn op_started(&self, key: &str, plugin: &str, op: &'static str) {
        let plugin = intern(if plugin.is_empty() {
            "N/A".into()
        } else {
            plugin.into()
        });
        lock(&self.ops)
            .entry(key.to_string())
            .or_insert_with(|| (plugin, op, Instant::now()));
    }

    /// An attempt of the operation under way for `key` failed (nothing under way: nothing).
    pub fn op_failed(&self, key: &str) {
        let Some(&(plugin, op, _)) = lock(&self.ops).get(key) else {
            return;
        };
        *lock(&self.op_errors).entry((plugin, op)).or_default() += 1;
    }

    /// The operation under way for `key` is over: its time since the first attempt.
    pub fn op_done(&self, key: &str) {
        let Some((plugin, op, started)) = lock(&self.ops).remove(key) else {
            return;
        };
        lock(&self.op_seconds)
            .entry((plugin, op))
            .or_insert_with(|| crate::metrics::Histogram::new(&OPERATION_BUCKETS))
            .observe(started.elapsed().as_secs_f64());
    }

    /// Forget the operation under way for `key` (a deleted claim's provisioning).
    pub fn op_forget(&self, key: &str) {
        lock(&self.ops).remove(key);
    }

    /// Whether an operation of `op` is under way for `key`.
    pub fn op_pending(&self, key: &str, op: &str) -> bool {
        lock(&self.ops).get(key).is_some_and(|o| o.1 == op)
    }

    /// The families of a scrape (a gauge family appears with its first series, as upstream's
    /// collector; the counters always).
    pub fn families(&self) -> Vec<Family> {
        let mut bound_pv: BTreeMap<&str, u64> = BTreeMap::new();
        let mut unbound_pv: BTreeMap<&str, u64> = BTreeMap::new();
        let mut total: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        let vols = lock(&self.volumes);
        for v in vols.values() {
            let m = if v.bound {
                &mut bound_pv
            } else {
                &mut unbound_pv
            };
            *m.entry(&v.class).or_default() += 1;
            *total.entry((v.plugin, &v.mode)).or_default() += 1;
        }
        let mut bound_pvc: BTreeMap<&str, u64> = BTreeMap::new();
        let mut unbound_pvc: BTreeMap<&str, u64> = BTreeMap::new();
        let claims = lock(&self.claims);
        for (ns, bound) in claims.values() {
            let m = if *bound {
                &mut bound_pvc
            } else {
                &mut unbound_pvc
            };
            *m.entry(ns).or_default() += 1;
        }
        let gauge = |name, help, label, counts: &BTreeMap<&str, u64>| {
            let mut f = Family::alpha(name, help, MetricType::Gauge);
            for (v, n) in counts {
                f.push(&[(label, v)], *n as f64);
            }
            f
        };
        let mut totals = Family::alpha(
            "pv_collector_total_pv_count",
            "Gauge measuring total number of persistent volumes",
            MetricType::Gauge,
        );
        for ((plugin, mode), n) in &total {
            totals.push(&[("plugin_name", plugin), ("volume_mode", mode)], *n as f64);
        }
        let counter = |name, help, c: &AtomicU64| {
            let mut f = Family::alpha(name, help, MetricType::Counter);
            f.push(&[], c.load(Ordering::Relaxed) as f64);
            f
        };
        let mut out: Vec<Family> = [
            gauge(
                "pv_collector_bound_pv_count",
                "Gauge measuring number of persistent volume currently bound",
                "storage_class",
                &bound_pv,
            ),
            gauge(
                "pv_collector_unbound_pv_count",
                "Gauge measuring number of persistent volume currently unbound",
                "storage_class",
                &unbound_pv,
            ),
            gauge(
                "pv_collector_bound_pvc_count",
                "Gauge measuring number of persistent volume claim currently bound",
                "namespace",
                &bound_pvc,
            ),
            gauge(
                "pv_collector_unbound_pvc_count",
                "Gauge measuring number of persistent volume claim currently unbound",
                "namespace",
                &unbound_pvc,
            ),
            totals,
        ]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect();
        let mut errors = Family::alpha(
            "volume_operation_total_errors",
            "Total volume operation errors",
            MetricType::Counter,
        );
        for ((plugin, op), n) in lock(&self.op_errors).iter() {
            errors.push(
                &[("plugin_name", plugin), ("operation_name", op)],
                *n as f64,
            );
        }
        let mut seconds = Family::alpha(
            "volume_operation_total_seconds",
            "Storage operation end to end duration in seconds",
            MetricType::Histogram,
        );
        for ((plugin, op), h) in lock(&self.op_seconds).iter() {
            seconds.push_histogram(
                &[("plugin_name", plugin), ("operation_name", op)],
                h.clone(),
            );
        }
        out.extend(
            [errors, seconds]
                .into_iter()
                .filter(|f| !f.samples.is_empty()),
        );
        out.push(counter(
            "retroactive_storageclass_total",
            "Total number of retroactive StorageClass assignments to persistent volume claim",
            &self.retroactive,
        ));
        out.push(counter(
            "retroactive_storageclass_errors_total",
            "Total number of failed retroactive StorageClass assignments to persistent volume claim",
            &self.retroactive_errors,
        ));
        out
    }
}
