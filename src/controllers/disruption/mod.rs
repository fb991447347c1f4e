//! disruption-controller: the status of every PodDisruptionBudget, and the reset of stale
//! `DisruptionTarget` pod conditions (upstream's `pkg/controller/disruption`).
//!
//! As upstream v1.37 (its v1.29-v1.37 changes are listed in `docs/controllers/disruption.md`):
//! - A budget's pods are those of its namespace its `spec.selector` selects (policy/v1: an
//!   empty selector selects every pod, a missing one none). None: a Normal `NoPods` Event
//!   ("No matching pods found") on every sync.
//! - `spec.maxUnavailable` (int or percentage) or a percentage `spec.minAvailable` needs the
//!   expected number of pods: the sum of the replicas of the pods' controllers, found in the
//!   order upstream's finders look: ReplicationController, Deployment (through the pod's
//!   ReplicaSet), ReplicaSet, StatefulSet (from the cache), then any resource with a `scale`
//!   subresource (its REST mapping from discovery, then GET `.../scale`). Percentages round
//!   up. Pods without a controller get a Warning `UnmanagedPods` Event; a controller found
//!   nowhere is an error. An integer `minAvailable` expects the number of selected pods.
//! - `currentHealthy`: Ready pods not being deleted and not in `status.disruptedPods` (the
//!   eviction API's record) for less than 2 minutes. A recorded pod still there after 2
//!   minutes is dropped from the record with a Warning `NotDeleted` Event on it; the budget is
//!   looked at again when the next record runs out.
//! - `disruptionsAllowed` = currentHealthy - desiredHealthy (never below 0; 0 when no pod is
//!   expected). The status is written (PUT `poddisruptionbudgets/<name>/status`) only when a
//!   number, the record, `observedGeneration` or the `DisruptionAllowed` condition
//!   (`SufficientPods` / `InsufficientPods`) would change; a written status carries only
//!   that condition, with a new transition time, as upstream's does.
//! - A failure to count (bad selector, a controller not found, a scale that cannot be read)
//!   is a Warning Event (`NoPods` "Failed to get pods: ..." or
//!   `CalculateExpectedPodCountFailed`) and the fail-safe status: `disruptionsAllowed` 0,
//!   `DisruptionAllowed` False for `SyncFailed` with the error's text. It is tried again when
//!   the budget or one of its pods changes, as upstream.
//! - A pod with `DisruptionTarget=True` (not set by the kubelet) that is neither being
//!   deleted nor terminal has the condition set to False, without reason or message, 2
//!   minutes after its transition: the eviction that set it did not go through; with the
//!   pod's generation as `observedGeneration` (PodObservedGenerationTracking).
//! - Events from `controllermanager`, as upstream's recorder; `--concurrent-disruption-syncs`
//!   workers (1).
//!
//! Unlike upstream: a pod change queues every budget that selects the pod (upstream queues one
//! of them, chosen arbitrarily; both record a `MultiplePodDisruptionBudgets` Warning on the
//! pod naming one, here the first by name); the stale-condition pods and the rechecks go through the one
//! queue `disruption` (upstream: `stale_pod_disruption` and `disruption_recheck` besides); the
//! stale condition is reset with a strategic merge patch of `pods/<name>/status` carrying the
//! pod's resourceVersion (upstream: a PUT of the whole pod; both are allowed by the bootstrap
//! role, and the result is the same condition), so pods are cached with only their metadata,
//! phase and conditions. `spec.unhealthyPodEvictionPolicy` is the eviction API's (the
//! apiserver's) business: no controller reads it.

pub mod decide;
pub mod scale;

use super::{Action, Controller, Cx, EventSpec, EventType, ObjectRef, Outcome, Watch};
use crate::api::client::PatchType;
use crate::api::resources::{
    DEPLOYMENTS, PODDISRUPTIONBUDGETS, PODS, REPLICASETS, REPLICATIONCONTROLLERS, STATEFULSETS,
};
use crate::cache::{Cache, Delta};
use crate::controllers::kit::conditions::{pod_status_patch, Condition};
use crate::controllers::kit::selector;
use crate::controllers::refmanager::SelectorIndex;
use crate::error::Result;
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;
use std::time::{Duration, SystemTime};

pub const NAME: &str = "disruption-controller";
/// Keys of pods whose `DisruptionTarget` condition may be stale (pod keys are otherwise
/// PodDisruptionBudget keys; a namespace never holds a `:`).
pub const POD_KEY_PREFIX: &str = "pod:";
/// Keys of pods that more than one budget selects, for upstream's Warning about them.
pub const MULTIPLE_KEY_PREFIX: &str = "multiple:";

pub const PDB_WATCH: Watch = Watch::full(PODDISRUPTIONBUDGETS);
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/status/phase", "/status/conditions"]);
const REPLICAS: &[&str] = &["/spec/replicas"];
pub const RS_WATCH: Watch = Watch::fields(REPLICASETS, REPLICAS);
pub const DEPLOYMENT_WATCH: Watch = Watch::fields(DEPLOYMENTS, REPLICAS);
pub const STATEFULSET_WATCH: Watch = Watch::fields(STATEFULSETS, REPLICAS);
pub const RC_WATCH: Watch = Watch::fields(REPLICATIONCONTROLLERS, REPLICAS);

/// Its row in the controller table.
pub fn build(_: &super::BuildCx<'_, crate::config::Config>) -> Result<Option<super::Runnable>> {
    Ok(Some(super::Runnable::reconciles(
        DisruptionController::default(),
    )))
}

/// Besides the cache, two indexes kept from the watches (so a pod change does not decode
/// every budget of its namespace, nor a budget's sync every pod): the budgets' selectors, and
/// each pod's labels in the namespaces that hold a budget.
#[derive(Default)]
pub struct DisruptionController {
    mapper: scale::Mapper,
    selectors: SelectorIndex,
    pod_labels: RwLock<Labelled>,
}

/// Pods' labels by key, kept for the namespaces in `namespaces` only (those that have held a
/// budget since it was seen), so a cluster without budgets costs nothing here.
#[derive(Default)]
struct Labelled {
    namespaces: BTreeSet<String>,
    pods: BTreeMap<String, obj::Labels>,
}

impl DisruptionController {
    /// Keys of the budgets that select `pod`.
    fn budgets_for(&self, cache: &Cache, pod: &Value) -> Vec<String> {
        if obj::labels(pod).is_none_or(|l| l.is_empty()) {
            // Only an empty selector takes a pod without labels: rare, looked up in the cache.
            return budgets_for(cache, pod);
        }
        self.selectors.matching(pod)
    }

    /// The pods of `ns` that `sel` selects, in name order, read from the cache.
    fn selected_pods(&self, cache: &Cache, ns: &str, sel: &Value) -> Vec<Obj> {
        let (lo, hi) = (format!("{ns}/"), format!("{ns}0")); // '0' follows '/'
        let keys: Vec<String> = {
            let m = self.pod_labels.read().unwrap_or_else(|p| p.into_inner());
            m.pods
                .range(lo..hi)
                .filter(|(_, l)| selector::matches_with(sel, |k| l.get(k)))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let store = cache.store_for(&POD_WATCH);
        keys.iter().filter_map(|k| store.get(k)).collect()
    }

    fn note_pod(&self, d: &Delta) {
        let key = obj::key(d.object());
        let mut m = self.pod_labels.write().unwrap_or_else(|p| p.into_inner());
        match &d.new {
            Some(p) if m.namespaces.contains(obj::namespace(p)) => {
                m.pods.insert(key, obj::Labels::of(p));
            }
            _ => {
                m.pods.remove(&key);
            }
        }
    }

    /// A budget in `ns`: its pods' labels are kept from now on (the pods already cached read
    /// once, as metadata).
    fn cover_namespace(&self, cache: &Cache, ns: &str) {
        let mut m = self.pod_labels.write().unwrap_or_else(|p| p.into_inner());
        if !m.namespaces.insert(ns.to_string()) {
            return;
        }
        let store = cache.store_for(&POD_WATCH);
        for key in store
            .keys()
            .into_iter()
            .filter(|k| obj::split_key(k).0 == ns)
        {
            let (pns, name) = obj::split_key(&key);
            if let Some(p) = store.get_metadata_in(pns, name) {
                m.pods.insert(key.clone(), obj::Labels::of(&p));
            }
        }
    }
}

/// The keys of the budgets of `pod`'s namespace that select it, from the cache.
fn budgets_for(cache: &Cache, pod: &Value) -> Vec<String> {
    cache
        .store_for(&PDB_WATCH)
        .list_namespace(obj::namespace(pod))
        .iter()
        .filter(|b| {
            b.at("/spec/selector")
                .is_some_and(|s| selector::matches(s, pod))
        })
        .map(|b| obj::key(b))
        .collect()
}

/// Upstream's Warning on a pod that more than one budget selects (it names the budget it
/// happened to pick; here the first by name, and every one of them is synced).
fn multiple_budgets(ctrl: &DisruptionController, cache: &Cache, key: &str) -> Vec<Action> {
    let Some(pod) = cache.store_for(&POD_WATCH).get(key) else {
        return Vec::new();
    };
    let budgets = ctrl.budgets_for(cache, &pod);
    if budgets.len() < 2 {
        return Vec::new();
    }
    let first = obj::split_key(&budgets[0]).1;
    let message = format!(
        "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {first:?} arbitrarily.",
        obj::namespace(&pod),
        obj::name(&pod)
    );
    log::info!("{NAME}: {message}");
    vec![Action::Event(EventSpec {
        involved: ObjectRef::of(&PODS, &pod),
        event_type: EventType::Warning,
        reason: "MultiplePodDisruptionBudgets".into(),
        message,
    })]
}

fn pdb_event(pdb: &Value, t: EventType, reason: &str, message: String) -> Action {
    Action::Event(EventSpec {
        involved: ObjectRef::of(&PODDISRUPTIONBUDGETS, pdb),
        event_type: t,
        reason: reason.to_string(),
        message,
    })
}

impl DisruptionController {
    /// Upstream's `sync` and `trySync` for one budget.
    fn sync_budget(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pdb) = cx.cache.store_for(&PDB_WATCH).get(key) else {
            log::debug!("{NAME}: podDisruptionBudget {key} has been deleted");
            return Ok(Outcome::none());
        };
        let mut actions = Vec::new();
        match self.try_sync(cx, &pdb, &mut actions) {
            Ok(recheck) => Ok(Outcome {
                actions,
                requeue_after: recheck,
                ..Outcome::default()
            }),
            Err(message) => {
                log::error!("{NAME}: failed to sync PDB {key}: {message}");
                actions.push(Action::UpdateSubresource {
                    kind: PODDISRUPTIONBUDGETS,
                    object: decide::fail_safe(&pdb, &message, cx.now),
                    subresource: "status",
                });
                Ok(Outcome::with(actions))
            }
        }
    }

    /// The status writes and Events for `pdb`; Err with the failure's text (its Event already
    /// in `actions`) for the fail-safe status. Ok gives when to look again.
    fn try_sync(
        &self,
        cx: &Cx,
        pdb: &Obj,
        actions: &mut Vec<Action>,
    ) -> std::result::Result<Option<Duration>, String> {
        let sel = pdb.at("/spec/selector").filter(|s| !s.is_null());
        if let Some(s) = sel.filter(|s| !selector::is_valid(s)) {
            let err = format!("invalid label selector: {s}");
            actions.push(pdb_event(
                pdb,
                EventType::Warning,
                "NoPods",
                format!("Failed to get pods: {err}"),
            ));
            return Err(err);
        }
        let listed = match sel {
            Some(s) => self.selected_pods(cx.cache, obj::namespace(pdb), s),
            None => Vec::new(),
        };
        let pods: Vec<&Value> = listed.iter().map(|p| &**p).collect();
        if pods.is_empty() {
            actions.push(pdb_event(
                pdb,
                EventType::Normal,
                "NoPods",
                "No matching pods found".into(),
            ));
        }

        let budget = decide::Budget::of(pdb);
        let counted = if budget.needs_scale() {
            scale::expected_scale(cx.cache, cx.client, &self.mapper, &pods)
                .and_then(|(n, unmanaged)| budget.counts(n, pods.len()).map(|c| (c, unmanaged)))
        } else {
            budget.counts(0, pods.len()).map(|c| (c, Vec::new()))
        };
        let ((expected, desired), unmanaged) = match counted {
            Ok(c) => c,
            Err(e) => {
                actions.push(pdb_event(
                    pdb,
                    EventType::Warning,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {e}"),
                ));
                return Err(e);
            }
        };
        if !unmanaged.is_empty() {
            log::debug!(
                "{NAME}: found unmanaged pods associated with {}: {unmanaged:?}",
                obj::key(pdb)
            );
            actions.push(pdb_event(
                pdb,
                EventType::Warning,
                "UnmanagedPods",
                format!(
                    "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. \
                     As a result, the status of the PDB cannot be calculated correctly, which may result in \
                     undefined behavior. To account for these pods please set \".spec.minAvailable\" field \
                     of the PDB to an integer value.",
                    decide::go_selector(sel)
                ),
            ));
        }

        let disrupted = decide::disrupted_pods(pdb, &pods, cx.now);
        for name in &disrupted.expired {
            log::info!(
                "{NAME}: pod {}/{name} was expected to be deleted but it wasn't, updating PDB",
                obj::namespace(pdb)
            );
            if let Some(p) = pods.iter().find(|p| obj::name(p) == name) {
                actions.push(Action::Event(EventSpec {
                    involved: ObjectRef::of(&PODS, p),
                    event_type: EventType::Warning,
                    reason: "NotDeleted".into(),
                    // Upstream prints the namespace twice.
                    message: format!(
                        "Pod was expected by PDB {ns}/{ns} to be deleted but it wasn't",
                        ns = obj::namespace(pdb)
                    ),
                }));
            }
        }
        let healthy = decide::healthy_pods(&pods, &disrupted.holding, cx.now);
        let counts = decide::Counts::new(healthy, desired, expected);
        if let Some(object) = decide::status_update(pdb, &counts, &disrupted.holding, cx.now) {
            actions.push(Action::UpdateSubresource {
                kind: PODDISRUPTIONBUDGETS,
                object,
                subresource: "status",
            });
        }
        Ok(disrupted
            .recheck
            .map(|t| t.duration_since(cx.now).unwrap_or(Duration::ZERO)))
    }

    /// Upstream's `syncStalePodDisruption` for one pod.
    fn sync_pod(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pod) = cx.cache.store_for(&POD_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        match decide::stale_disruption(&pod, cx.now) {
            None => Ok(Outcome::none()),
            Some(wait) if !wait.is_zero() => Ok(Outcome {
                requeue_after: Some(wait),
                ..Outcome::default()
            }),
            Some(_) => {
                let cond = Condition {
                    type_: decide::DISRUPTION_TARGET,
                    status: "False",
                    reason: "",
                    message: "",
                };
                let Some(mut status) = pod_status_patch(&pod, &cond, cx.now) else {
                    return Ok(Outcome::none());
                };
                observe_generation(&mut status, &pod);
                log::info!("{NAME}: reset stale DisruptionTarget condition to False for pod {key}");
                Ok(Outcome::with(vec![Action::Patch {
                    kind: PODS,
                    namespace: obj::namespace(&pod).to_string(),
                    name: obj::name(&pod).to_string(),
                    patch_type: PatchType::Strategic,
                    patch: json!({
                        "metadata": {"resourceVersion": obj::resource_version(&pod)},
                        "status": status,
                    }),
                    subresource: Some("status"),
                }]))
            }
        }
    }
}

impl Controller for DisruptionController {
    fn watches(&self) -> Vec<Watch> {
        vec![
            PDB_WATCH,
            POD_WATCH,
            RC_WATCH,
            RS_WATCH,
            DEPLOYMENT_WATCH,
            STATEFULSET_WATCH,
        ]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        self.delayed_keys_for(w, d, cache)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    fn delayed_keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<(String, Duration)> {
        if w.kind == PODDISRUPTIONBUDGETS {
            self.selectors.observe(d, |b| {
                b.at("/spec/selector").filter(|s| !s.is_null()).cloned()
            });
            if d.new.is_some() {
                self.cover_namespace(cache, obj::namespace(d.object()));
            }
            return vec![(obj::key(d.object()), Duration::ZERO)];
        }
        if w.kind != PODS {
            // The controllers' replicas are read when a budget syncs; their changes queue
            // nothing, as upstream.
            return Vec::new();
        }
        self.note_pod(d);
        let pod = d.object();
        let mut keys: Vec<(String, Duration)> = self
            .budgets_for(cache, pod)
            .into_iter()
            .map(|k| (k, Duration::ZERO))
            .collect();
        if d.new.is_some() && keys.len() > 1 {
            keys.push((
                format!("{MULTIPLE_KEY_PREFIX}{}", obj::key(pod)),
                Duration::ZERO,
            ));
        }
        if d.new.is_some() {
            if let Some(wait) = decide::stale_disruption(pod, SystemTime::now()) {
                keys.push((format!("{POD_KEY_PREFIX}{}", obj::key(pod)), wait));
            }
        }
        keys
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        if let Some(pod) = key.strip_prefix(POD_KEY_PREFIX) {
            return self.sync_pod(cx, pod);
        }
        if let Some(pod) = key.strip_prefix(MULTIPLE_KEY_PREFIX) {
            return Ok(Outcome::with(multiple_budgets(self, cx.cache, pod)));
        }
        self.sync_budget(cx, key)
    }
}

#[cfg(test)]
mod tests;

/// The reset condition's `observedGeneration`: the pod's `metadata.generation` while
/// PodObservedGenerationTracking is on (beta 1.34, GA 1.35) or the condition had one before
/// (upstream's `CalculatePodConditionObservedGeneration`).
fn observe_generation(status: &mut serde_json::Map<String, Value>, pod: &Value) {
    use crate::obj::At as _;
    let generation = pod
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let had = pod
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == decide::DISRUPTION_TARGET
                && c["observedGeneration"].as_i64().unwrap_or(0) != 0
        });
    let tracked = crate::config::gates::enabled("PodObservedGenerationTracking") || had;
    if !tracked || generation == 0 {
        return;
    }
    for c in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == decide::DISRUPTION_TARGET)
    {
        c["observedGeneration"] = json!(generation);
    }
}
