//! daemonset-controller: one pod of each DaemonSet on every node its template fits
//! (nodeName, nodeSelector, required node affinity, taints against its tolerations and the
//! daemon defaults), as upstream v1.37 (the changes since v1.28 are listed in
//! docs/controllers/daemonset.md):
//! - pods are made from the template with the default daemon tolerations, the
//!   `controller-revision-hash` (and `pod-template-generation`) labels and a required node
//!   affinity term `matchFields metadata.name In [<node>]`, at most 250 creations or deletions
//!   per sync, creations in slow-start batches; Events `SuccessfulCreate` / `FailedCreate` /
//!   `SuccessfulDelete` / `FailedDelete`, `FailedDaemonPod` (a failed pod is deleted, with a
//!   per-node backoff of 1 s doubling to 15 min), `SucceededDaemonPod`, `SelectingAll`;
//! - extra pods on a node (the oldest scheduled one stays), pods on nodes they no longer fit
//!   (NoExecute taints not tolerated) and unscheduled pods for nodes that are gone are deleted;
//! - RollingUpdate with `maxUnavailable` and `maxSurge`, OnDelete;
//! - ControllerRevisions (`history`): one per template, `revisionHistoryLimit`,
//!   `collisionCount`;
//! - status: desired/current/misscheduled/ready/updated/available/unavailable counts and
//!   `observedGeneration`, written with `PUT .../status`.
//!
//! Node changes are judged against each DaemonSet's placement (kept per DaemonSet), so a node
//! heartbeat queues nothing and a node whose labels or taints change queues only the
//! DaemonSets whose decision for it changed; no pod is listed per node. A deleted node queues
//! the DaemonSets that ran there (upstream waits for their pods to go).

mod history;
mod metrics;
mod placement;
mod sync;

use super::kit::inflight::InFlight;
use super::kit::nodefit::NodeView;
use super::kit::{self, pod::is_pod_active, selector};
use super::{Action, Applied, Controller, Cx, OnError, Outcome, Watch};
use crate::api::resources::{CONTROLLERREVISIONS, DAEMONSETS, NODES, PODS};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::error::{Error, Result};
use crate::obj::{self, At as _};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Creations or deletions at most per sync (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 250;
/// Upstream's failed-pod backoff: 1 s, doubling, at most 15 minutes.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// What the controller reads of pods: where they run or are meant to run, their phase and
/// conditions.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/nodeName",
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
        "/status/phase",
        "/status/conditions",
    ],
);
/// Of nodes: metadata (name, labels) and taints.
pub const NODE_WATCH: Watch = Watch::fields(NODES, &["/spec/taints"]);

#[derive(Default)]
struct Tracking {
    inflight: InFlight,
    /// Failed-pod backoff per `<ds uid>/<observedGeneration>/<node>`: (delay, last update).
    backoff: HashMap<String, (Duration, SystemTime)>,
    /// Namespace -> names of pods without a controller (candidates for adoption).
    orphans: HashMap<String, BTreeSet<String>>,
    /// Each node as last seen, as the predicates read it (an update's old version carries
    /// metadata only, and a sync reads these instead of decoding every node).
    nodes: BTreeMap<String, Arc<Node>>,
    /// DaemonSet key -> its placement (see `placement::placement`).
    placements: BTreeMap<String, Value>,
}

/// A node as the predicates read it: name, labels and taints.
pub(crate) struct Node {
    pub name: String,
    pub labels: Option<serde_json::Map<String, Value>>,
    pub taints: Vec<Value>,
}

impl Node {
    pub fn view(&self) -> NodeView<'_> {
        NodeView {
            name: &self.name,
            labels: self.labels.as_ref(),
            taints: &self.taints,
        }
    }
}

pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("daemonset", std::sync::Arc::new(metrics::metric_families));
    Ok(Some(
        super::Runnable::reconciles(DaemonSetController::new()),
    ))
}

pub struct DaemonSetController {
    track: Mutex<Tracking>,
    selectors: super::refmanager::SelectorIndex,
}

impl Default for DaemonSetController {
    fn default() -> Self {
        Self::new()
    }
}

impl DaemonSetController {
    pub fn new() -> Self {
        DaemonSetController {
            track: Mutex::new(Tracking::default()),
            selectors: Default::default(),
        }
    }

    fn track(&self) -> std::sync::MutexGuard<'_, Tracking> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every node as last seen, in name order.
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.track().nodes.values().cloned().collect()
    }

    fn forget(&self, key: &str) {
        self.track().inflight.forget(key);
    }

    fn ds_keys(&self, d: &Delta) -> Vec<String> {
        self.selectors.observe(d, |o| {
            o.at("/spec/selector")
                .filter(|s| !s.is_null() && !selector::is_empty(s))
                .cloned()
        });
        let key = obj::key(d.object());
        let replaced = matches!((&d.old, &d.new), (Some(o), Some(n)) if obj::uid(o) != obj::uid(n));
        let mut t = self.track();
        match &d.new {
            Some(n) if d.kind != DeltaKind::Deleted => {
                t.placements.insert(key.clone(), placement::placement(n));
            }
            _ => {
                t.placements.remove(&key);
            }
        }
        if d.kind == DeltaKind::Deleted || replaced {
            t.inflight.forget(&key);
        }
        vec![key]
    }

    fn node_keys(&self, d: &Delta) -> Vec<String> {
        let mut t = self.track();
        let n = d.object();
        let name = obj::name(n).to_string();
        let now_taints: Vec<Value> = n
            .at("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let judge =
            |labels: Option<&serde_json::Map<String, Value>>, taints: &[Value], p: &Value| {
                placement::should_run(
                    p,
                    &NodeView {
                        name: &name,
                        labels,
                        taints,
                    },
                )
            };
        let keys: Vec<String> = match (d.kind, &d.old) {
            (DeltaKind::Added, _) => t
                .placements
                .iter()
                .filter(|(_, p)| judge(obj::labels(n), &now_taints, p).0)
                .map(|(k, _)| k.clone())
                .collect(),
            (DeltaKind::Updated, Some(old)) => {
                let old_taints = t
                    .nodes
                    .get(&name)
                    .map(|n| n.taints.clone())
                    .unwrap_or_default();
                if old_taints == now_taints && obj::labels(old) == obj::labels(n) {
                    vec![]
                } else {
                    t.placements
                        .iter()
                        .filter(|(_, p)| {
                            judge(obj::labels(old), &old_taints, p)
                                != judge(obj::labels(n), &now_taints, p)
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                }
            }
            _ => t
                .placements
                .iter()
                .filter(|(_, p)| judge(obj::labels(n), &now_taints, p).1)
                .map(|(k, _)| k.clone())
                .collect(),
        };
        if d.kind == DeltaKind::Deleted {
            t.nodes.remove(&name);
        } else {
            let node = Node {
                name: name.clone(),
                labels: obj::labels(n).cloned(),
                taints: now_taints,
            };
            t.nodes.insert(name, Arc::new(node));
        }
        keys
    }

    fn note_pod(&self, d: &Delta) {
        let p = d.object();
        let (ns, name) = (obj::namespace(p), obj::name(p));
        let mut t = self.track();
        if d.kind != DeltaKind::Deleted && obj::controller_ref(p).is_none() {
            t.orphans
                .entry(ns.to_string())
                .or_default()
                .insert(name.to_string());
        } else if let Some(set) = t.orphans.get_mut(ns) {
            set.remove(name);
            if set.is_empty() {
                t.orphans.remove(ns);
            }
        }
        t.inflight.observe(d, is_pod_active);
    }

    /// Upstream's failed-pod backoff: Err(delay) while in backoff, else Ok after taking the
    /// next step.
    fn backoff_step(&self, key: String, now: SystemTime) -> std::result::Result<(), Duration> {
        let mut t = self.track();
        let since = |at: SystemTime| now.duration_since(at).unwrap_or_default();
        if let Some((delay, at)) = t.backoff.get(&key) {
            let expired = since(*at) > BACKOFF_MAX * 2;
            if !expired && since(*at) < *delay {
                return Err(*delay);
            }
        }
        let next = match t.backoff.get(&key) {
            Some((delay, at)) if since(*at) <= BACKOFF_MAX * 2 => (*delay * 2).min(BACKOFF_MAX),
            _ => BACKOFF_INITIAL,
        };
        if t.backoff.len() > 10_000 {
            t.backoff.retain(|_, (_, at)| since(*at) <= BACKOFF_MAX * 2);
        }
        t.backoff.insert(key, (next, now));
        Ok(())
    }
}

pub fn min_ready_seconds(ds: &Value) -> i64 {
    ds.at("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .max(0)
}

impl DaemonSetController {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        "daemonset-controller"
    }
}

impl Controller for DaemonSetController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            Watch::full(DAEMONSETS),
            Watch::full(CONTROLLERREVISIONS),
            POD_WATCH,
            NODE_WATCH,
        ]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        let resolve = |o: &Value, r: &obj::OwnerRefView| {
            kit::owners::resolve(cache, DAEMONSETS, obj::namespace(o), r)
        };
        match w.kind {
            k if k == DAEMONSETS => self.ds_keys(d),
            k if k == NODES => self.node_keys(d),
            k if k == PODS => {
                self.note_pod(d);
                kit::owners::owner_keys(d, kit::owners::Deleting::AsDeletion, resolve, |p| {
                    self.selectors.matching(p)
                })
            }
            k if k == CONTROLLERREVISIONS => {
                kit::owners::owner_keys(d, kit::owners::Deleting::AsDeletion, resolve, |r| {
                    self.selectors.matching(r)
                })
            }
            _ => vec![],
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, true)
    }

    fn status_after_writes(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, false)
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        match (action, result) {
            (Action::Create { kind, .. }, Applied::Done(Some(pod))) if *kind == PODS => {
                self.track().inflight.created(key, pod);
            }
            (
                Action::Delete {
                    kind,
                    namespace,
                    name,
                    ..
                },
                res,
            ) if *kind == PODS => {
                let pk = obj::make_key(namespace, name);
                let mut t = self.track();
                match res {
                    Applied::Done(_) => t.inflight.delete_done(key, &pk),
                    _ => t.inflight.delete_failed(key, &pk),
                }
            }
            _ => {}
        }
    }

    fn on_error(&self, action: &Action, err: &Error) -> OnError {
        match action {
            Action::Patch { .. } if err.is_not_found() || err.code() == Some(422) => {
                OnError::Ignore
            }
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

#[cfg(test)]
mod tests;
