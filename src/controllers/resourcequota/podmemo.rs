//! What each pod contributes to a quota without scopes, kept per pod and version, so that a
//! sync reads the namespace's pod versions from the cache (nothing decoded) and decodes and
//! evaluates only the pods that changed since the last sync. Recomputing every pod of the
//! namespace on every sync (decoding it from the cache, parsing its quantities) was about a
//! fifth of the manager's CPU in the quota benchmark.
//!
//! Only pods of namespaces some quota was synced for are kept; a pod gone from the cache is
//! forgotten at the next sync of its namespace. Whether a pod counts still depends on the
//! time (past its deletion grace period), so that is decided at each sync, as before.

use super::usage::{pod_compute_usage, pod_deletion_end, ResourceList};
use crate::cache::Store;
use crate::compat::quantity::Quantity;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

/// One pod as a quota without scopes reads it.
struct Facts {
    resource_version: Box<str>,
    /// Finished (Succeeded or Failed): never counts.
    done: bool,
    /// The end of its deletion grace period, when being deleted.
    deletion_end: Option<SystemTime>,
    /// What it adds while it counts (`pods`, requests, limits, ...), by name.
    compute: Box<[(Box<str>, Quantity)]>,
}

impl Facts {
    fn of(pod: &Value) -> Facts {
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        Facts {
            resource_version: crate::obj::resource_version(pod).into(),
            done: phase == "Failed" || phase == "Succeeded",
            deletion_end: pod_deletion_end(pod),
            compute: pod_compute_usage(pod)
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v))
                .collect(),
        }
    }

    /// As `usage::pod_counts`.
    fn counts(&self, now: SystemTime) -> bool {
        !self.done && self.deletion_end.is_none_or(|end| now <= end)
    }
}

/// Pod key -> what it contributes.
#[derive(Default)]
pub struct PodMemo {
    pods: Mutex<BTreeMap<String, Facts>>,
}

impl PodMemo {
    /// The usage of the pods of `ns` in `store` for `resources` (each reported, zero when
    /// nothing uses it), as `Evaluator::Pods.usage_stats` computes it for a quota without
    /// scopes.
    pub fn usage(
        &self,
        store: &Store,
        ns: &str,
        resources: &[String],
        now: SystemTime,
    ) -> ResourceList {
        let versions = store.versions_namespace(ns);
        // The pods that changed since they were last evaluated, decoded outside the lock.
        let stale: Vec<String> = {
            let pods = self.lock();
            versions
                .iter()
                .filter(|(k, rv)| pods.get(k).is_none_or(|f| f.resource_version != *rv))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let fresh: Vec<(String, Facts)> = stale
            .into_iter()
            .filter_map(|k| store.get(&k).map(|p| (k, Facts::of(&p))))
            .collect();
        let mut used: ResourceList = resources
            .iter()
            .map(|r| (r.clone(), Quantity::ZERO))
            .collect();
        let one = Quantity::from_int(1);
        let mut pods = self.lock();
        for (k, f) in fresh {
            pods.insert(k, f);
        }
        // Forget the namespace's pods the cache no longer holds.
        let lo = format!("{ns}/");
        let hi = format!("{ns}0"); // '0' follows '/'
        let gone: Vec<String> = {
            let mut listed = versions.iter().map(|(k, _)| k.as_str()).peekable();
            pods.range(lo..hi)
                .map(|(k, _)| k)
                .filter(|k| {
                    while listed.next_if(|l| *l < k.as_str()).is_some() {}
                    listed.peek() != Some(&k.as_str())
                })
                .cloned()
                .collect()
        };
        for k in gone {
            pods.remove(&k);
        }
        // Summed in the cache's order, as the pods were before (a sum takes the format of
        // its first term). Names the quota does not ask for are left out: they would be
        // dropped from the usage anyway.
        for (k, _) in &versions {
            let Some(f) = pods.get(k) else { continue };
            if let Some(q) = used.get_mut("count/pods") {
                q.add(&one);
            }
            if f.counts(now) {
                for (name, q) in f.compute.iter() {
                    if let Some(have) = used.get_mut(&**name) {
                        have.add(q);
                    }
                }
            }
        }
        used
    }

    /// How many pods are kept (for tests).
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Facts>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }
}
