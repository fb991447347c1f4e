//! replicaset-controller and replicationcontroller-controller: keep `spec.replicas` active pods
//! for every ReplicaSet (apps/v1) and ReplicationController (core/v1, whose selector is a
//! plain label map), adopt matching orphans, release pods that stopped matching, and report
//! counts and the `ReplicaFailure` condition in status.
//!
//! One implementation serves both kinds, as upstream's does (the RC manager is the RS
//! controller behind a conversion layer). Upstream v1.37 behaviour (the changes since v1.28
//! are listed in docs/controllers/replicaset.md):
//! - pods are made from the template with `generateName: <owner>-`, the template's labels,
//!   annotations, finalizers and spec, and a controller ownerReference;
//! - at most 500 creations or deletions per sync; creations in slow-start batches (1, 2, 4,
//!   ...), deletions all in parallel, chosen by upstream's ranking;
//! - Events `SuccessfulCreate` / `FailedCreate` / `SuccessfulDelete` / `FailedDelete` on the
//!   owner;
//! - while pods it created are not yet visible in the watch cache, no new decision about
//!   replicas is taken (upstream's expectations), so a lagging watch never leads to extra pods;
//! - ReplicaSets report `status.terminatingReplicas` (their pods being deleted) with the
//!   DeploymentReplicaSetTerminatingReplicas gate; ReplicationControllers never do.
//!
//! Own writes are tracked with `kit::inflight` (its docs say how that differs in form from
//! upstream's expectations).

mod metrics;
mod status;

pub use status::{calculate_status, is_pod_terminating, status_update};

use super::kit::inflight::InFlight;
use super::kit::pod::{
    is_pod_active, is_pod_available, is_pod_ready, pod_from_template, ready_time,
};
use super::kit::ranking::pods_to_delete_by_node;
use super::kit::{self, selector};
use super::refmanager::{self, Claim};
use super::{Action, Applied, Controller, Cx, ObjectRef, OnError, Outcome, Report, Watch};
use crate::api::resources::{PODS, REPLICASETS, REPLICATIONCONTROLLERS};
use crate::api::Kind;
use crate::cache::{Cache, Delta, DeltaKind, Store};
use crate::error::{Error, Result};
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// Creations or deletions at most per sync (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;
pub use super::kit::inflight::EXPECTATIONS_TIMEOUT;
pub use super::kit::ranking::POD_DELETION_COST;
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Which of the two kinds an instance manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    ReplicaSet,
    ReplicationController,
}

impl Flavor {
    pub fn kind(self) -> Kind {
        match self {
            Flavor::ReplicaSet => REPLICASETS,
            Flavor::ReplicationController => REPLICATIONCONTROLLERS,
        }
    }

    /// Whether `status.terminatingReplicas` is reported: ReplicaSets with the
    /// DeploymentReplicaSetTerminatingReplicas gate on (beta, on from v1.35); never for a
    /// ReplicationController, whose API has no such field (upstream's RC adapter turns it off).
    pub fn reports_terminating(self) -> bool {
        self == Flavor::ReplicaSet
            && crate::config::gates::enabled("DeploymentReplicaSetTerminatingReplicas")
    }

    /// The owner's selector as a `metav1.LabelSelector`; None selects nothing.
    pub fn selector(self, owner: &Value) -> Option<Value> {
        let sel = owner.at("/spec/selector").filter(|s| !s.is_null())?;
        match self {
            Flavor::ReplicaSet => Some(sel.clone()),
            // The RC's label map is the selector's matchLabels.
            Flavor::ReplicationController => Some(json!({ "matchLabels": sel })),
        }
    }
}

#[derive(Default)]
struct Tracking {
    /// Pods created and deleted, not yet confirmed by the watch.
    inflight: InFlight,
    /// Per owner key: the error of the last attempt to create or delete pods.
    manage_err: HashMap<String, String>,
    /// Namespace -> name -> labels (and deletion mark) of pods without a controller: the
    /// candidates for adoption.
    orphans: HashMap<String, BTreeMap<String, Orphan>>,
    /// Namespace -> name -> where each pod runs (ReplicaSets only): the related pods of a
    /// scale-down's "doubled up on a node" rank.
    placed: HashMap<String, BTreeMap<String, Placed>>,
}

/// What the orphan index keeps of a pod without a controller: all `refmanager::may_adopt`
/// needs to tell whether an owner would adopt it.
struct Orphan {
    labels: obj::Labels,
    deleting: bool,
}

/// What the placement index keeps of a pod: enough for upstream's related-pods rank (pods
/// any ReplicaSet of the same controller selects, active ones counted per node). Taken from
/// the cache instead, each scale-down decoded every pod of the namespace: a rolling update of
/// 300 Deployments x 5 held ~90 MB of decoded pods and spent most of its CPU there.
struct Placed {
    /// `label_pair` of each string-valued label: enough to pass over pods a selector's
    /// `matchLabels` cannot take; the few it may take are checked against the cache.
    pairs: Box<[u64]>,
    node: Box<str>,
    active: bool,
}

/// A label `key=value` as a number.
fn label_pair(key: &str, value: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (key, value).hash(&mut h);
    h.finish()
}

/// The replicaset-controller's row in the controller table.
pub fn build_replicaset(
    _: &super::BuildCx<'_, crate::config::Config>,
) -> Result<Option<super::Runnable>> {
    crate::metrics::register_collector("replicaset", std::sync::Arc::new(metrics::metric_families));
    Ok(Some(super::Runnable::reconciles(
        ReplicaSetController::new(Flavor::ReplicaSet),
    )))
}

/// The replica controllers' metrics (one collector for both kinds, as upstream's registry).
fn register_metrics() {
    crate::metrics::register_collector("replicaset", std::sync::Arc::new(metrics::metric_families));
}

/// The replicationcontroller-controller's row in the controller table.
pub fn build_replicationcontroller(
    _: &super::BuildCx<'_, crate::config::Config>,
) -> Result<Option<super::Runnable>> {
    register_metrics();
    Ok(Some(super::Runnable::reconciles(
        ReplicaSetController::new(Flavor::ReplicationController),
    )))
}

pub struct ReplicaSetController {
    flavor: Flavor,
    track: Mutex<Tracking>,
    /// The owners' selectors, for finding who selects an orphan pod.
    selectors: refmanager::SelectorIndex,
}

impl ReplicaSetController {
    /// One sync. With `act` it decides creates, deletes, adoptions and releases; when it
    /// creates or deletes, the status is left to a second call without `act` right after
    /// those writes ([`Controller::status_after_writes`]), which counts the pods the cache
    /// then holds. Without `act` it only reports: the status from the cache, including a
    /// failure the writes just met (upstream reports it in the same sync too).
    fn sync(&self, cx: &Cx, key: &str, act: bool) -> Result<Outcome> {
        let kind = self.flavor.kind();
        let Some(owner) = cx.cache.store(kind).get(key) else {
            self.forget(key);
            return Ok(Outcome::none());
        };
        let ns = obj::namespace(&owner).to_string();
        let uid = obj::uid(&owner).to_string();
        let selector = self.flavor.selector(&owner);
        if let Some(s) = &selector {
            if !selector::is_valid(s) {
                log::warn!("{}: {key}: invalid selector {s}", self.name());
                return Ok(Outcome::none());
            }
        }
        let pods = cx.cache.store(PODS);
        let settled = self.creations_settled(key, &uid, &ns, &pods);

        let candidates = self.candidates(&owner, selector.as_ref(), &pods, &ns, &uid);

        let mut actions = Vec::new();
        let mut claimed: Vec<Obj> = Vec::new();
        let mut adopt: Vec<Obj> = Vec::new();
        for p in candidates.into_values() {
            match refmanager::claim(&owner, selector.as_ref(), &p) {
                Claim::Owned => claimed.push(p),
                Claim::Adopt | Claim::Release if !act => {}
                Claim::Adopt => adopt.push(p),
                Claim::Release => {
                    log::debug!(
                        "{}: {key}: releasing pod {} (no longer selected)",
                        self.name(),
                        obj::name(&p)
                    );
                    actions.push(refmanager::release_action(PODS, &ns, &p, &uid));
                }
                Claim::Ignore => {}
            }
        }
        if !adopt.is_empty() {
            if let Err(e) = refmanager::recheck_deletion(cx.client, &kind, &owner) {
                let p = &adopt[0];
                return Err(Error::Config(format!(
                    "can't adopt Pod {ns}/{} ({}): {e}",
                    obj::name(p),
                    obj::uid(p)
                )));
            }
            for p in adopt {
                log::debug!("{}: {key}: adopting pod {}", self.name(), obj::name(&p));
                actions.push(refmanager::adopt_action(PODS, &ns, &p, &kind, &owner));
                claimed.push(p);
            }
        }

        // Upstream's terminating pods: controlled by this owner, selected by it, being deleted
        // and not terminal (pods it deleted itself count as soon as the watch shows them so).
        let terminating = self.flavor.reports_terminating().then(|| {
            pods.by_owner(&uid)
                .into_iter()
                .filter(|p| obj::namespace(p) == ns && is_pod_terminating(p))
                .filter(|p| refmanager::claim(&owner, selector.as_ref(), p) == Claim::Owned)
                .count()
        });

        let replicas = spec_replicas(&owner);
        // The outcome of the previous attempt is what status reports (see `applied`).
        let mut manage_err = self.track().manage_err.get(key).cloned();
        let mut requeue: Option<Duration> = None;
        let mut status_after_writes = false;
        match settled {
            _ if !act => {}
            Err(wait) => {
                log::debug!(
                    "{}: {key}: waiting for created pods to be observed",
                    self.name()
                );
                if self.flavor == Flavor::ReplicaSet {
                    metrics::observe_pod_skip();
                }
                requeue = Some(wait);
            }
            Ok(()) if !obj::is_deleting(&owner) => {
                self.track().manage_err.remove(key);
                let (acts, err) = self.manage(cx, &owner, &claimed, replicas);
                status_after_writes = !acts.is_empty();
                actions.extend(acts);
                if err.is_some() {
                    manage_err = err.clone();
                    if let Some(e) = err {
                        self.track().manage_err.insert(key.to_string(), e);
                    }
                } else if claimed.len() == replicas {
                    manage_err = None;
                }
            }
            Ok(()) => {}
        }

        // After creates or deletes the status follows those writes (see `sync`).
        let status = (!status_after_writes)
            .then(|| calculate_status(&owner, &claimed, terminating, manage_err.as_deref(), cx.now))
            .and_then(|st| status_update(&owner, st));
        if let Some(updated) = status {
            actions.push(Action::UpdateSubresource {
                kind,
                object: updated,
                subresource: "status",
            });
        }
        let min_ready = min_ready_seconds(&owner);
        if min_ready > 0 {
            let next = claimed
                .iter()
                .filter(|p| is_pod_ready(p) && !is_pod_available(p, min_ready, cx.now))
                .filter_map(|p| ready_time(p))
                .map(|t| {
                    (t + Duration::from_secs(min_ready as u64))
                        .duration_since(cx.now)
                        .unwrap_or_default()
                        + Duration::from_millis(100)
                })
                .min();
            requeue = super::sooner(requeue, next);
        }
        Ok(Outcome {
            actions,
            requeue_after: requeue,
            status_after_writes,
            ..Outcome::default()
        })
    }

    /// The pods a sync claims from (upstream's `getPodsForReplicaSet`): the active pods
    /// naming this owner and the orphans of the namespace it may adopt, by name, without the
    /// ones it deleted and the watch has not confirmed yet.
    fn candidates(
        &self,
        owner: &Value,
        selector: Option<&Value>,
        pods: &Store,
        ns: &str,
        uid: &str,
    ) -> BTreeMap<String, Obj> {
        // Candidates: pods naming this owner, and orphans of the namespace.
        let mut candidates: BTreeMap<String, Obj> = BTreeMap::new();
        for p in pods.by_owner(uid) {
            if obj::namespace(&p) == ns {
                candidates.insert(obj::name(&p).to_string(), p);
            }
        }
        // Only orphans this owner may take are decoded whole and kept: the others of the
        // namespace (a thousand pods of other owners' selectors, say) would otherwise be
        // decoded and held by every sync of every owner there. Which ones is told by the
        // labels the orphan index keeps, without touching the cache.
        let takeable: Vec<String> = self
            .track()
            .orphans
            .get(ns)
            .map(|m| {
                m.iter()
                    .filter(|(_, o)| refmanager::may_adopt(owner, selector, &o.labels, o.deleting))
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default();
        for name in takeable {
            if let std::collections::btree_map::Entry::Vacant(e) = candidates.entry(name) {
                if let Some(p) = pods.get_in(ns, e.key()) {
                    e.insert(p);
                }
            }
        }
        {
            let mut t = self.track();
            candidates.retain(|name, p| {
                if !is_pod_active(p) {
                    return false;
                }
                !t.inflight.hides(&obj::make_key(ns, name), obj::uid(p))
            });
        }
        candidates
    }

    pub fn new(flavor: Flavor) -> Self {
        ReplicaSetController {
            flavor,
            track: Mutex::new(Tracking::default()),
            selectors: Default::default(),
        }
    }

    fn track(&self) -> std::sync::MutexGuard<'_, Tracking> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kind_name(&self) -> &'static str {
        self.flavor.kind().kind
    }

    /// Owners in the pod's namespace whose (non-empty) selector matches it.
    fn matching_owners(&self, pod: &Value) -> Vec<String> {
        let found = self.selectors.matching(pod);
        if found.len() > 1 {
            log::warn!(
                "user error! more than one {} is selecting pods with labels: {:?}",
                self.kind_name(),
                obj::labels(pod)
            );
        }
        found
    }

    /// Keep the orphan and placement indexes and the deleted-pod list in step with the pod
    /// watch.
    fn note_pod(&self, d: &Delta) {
        let p = d.object();
        let (ns, name) = (obj::namespace(p), obj::name(p));
        let gone = d.kind == DeltaKind::Deleted;
        let mut t = self.track();
        if self.flavor == Flavor::ReplicaSet && gone {
            remove_in(&mut t.placed, ns, name);
        } else if self.flavor == Flavor::ReplicaSet {
            let node = p.at("/spec/nodeName").and_then(Value::as_str);
            let pairs = obj::labels(p)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some(label_pair(k, v.as_str()?)))
                .collect();
            let placed = Placed {
                pairs,
                node: node.unwrap_or("").into(),
                active: is_pod_active(p),
            };
            t.placed
                .entry(ns.to_string())
                .or_default()
                .insert(name.to_string(), placed);
        }
        if !gone && obj::controller_ref(p).is_none() {
            let orphan = Orphan {
                labels: obj::Labels::of(p),
                deleting: obj::is_deleting(p),
            };
            t.orphans
                .entry(ns.to_string())
                .or_default()
                .insert(name.to_string(), orphan);
        } else {
            remove_in(&mut t.orphans, ns, name);
        }
        t.inflight.observe(d, is_pod_active);
    }

    /// Forget everything about an owner that is gone (or was replaced by another UID).
    fn forget(&self, key: &str) {
        let mut t = self.track();
        t.inflight.forget(key);
        t.manage_err.remove(key);
    }

    /// Are the pods this owner created all visible, or confirmed by the watch? If not, how
    /// long until waiting for them expires.
    fn creations_settled(
        &self,
        key: &str,
        owner_uid: &str,
        ns: &str,
        pods: &Store,
    ) -> std::result::Result<(), Duration> {
        self.track().inflight.settled(key, owner_uid, ns, pods)
    }

    /// The Events of this owner's pod creates or deletes.
    fn report(&self, owner: &Value, create: bool) -> Report {
        kit::pod::write_report(ObjectRef::of(&self.flavor.kind(), owner), create)
    }

    /// Create or delete pods to reach `spec.replicas`. Returns the actions, or an error
    /// found before any request (reported like a failed create).
    fn manage(
        &self,
        cx: &Cx,
        owner: &Value,
        pods: &[Obj],
        replicas: usize,
    ) -> (Vec<Action>, Option<String>) {
        let ns = obj::namespace(owner);
        if pods.len() < replicas {
            let n = (replicas - pods.len()).min(BURST_REPLICAS);
            let pod = match pod_from_template(&self.flavor.kind(), owner) {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("{}: {}: {e}", self.name(), obj::key(owner));
                    return (vec![], Some(e));
                }
            };
            log::debug!(
                "{}: too few replicas for {}: need {replicas}, creating {n}",
                self.name(),
                obj::key(owner)
            );
            let report = self.report(owner, true);
            let creates = (0..n)
                .map(|_| Action::Reported {
                    action: Box::new(Action::Create {
                        kind: PODS,
                        namespace: ns.to_string(),
                        object: pod.clone(),
                    }),
                    report: report.clone(),
                })
                .collect();
            (vec![Action::SlowStart(creates)], None)
        } else if pods.len() > replicas {
            let n = (pods.len() - replicas).min(BURST_REPLICAS);
            log::debug!(
                "{}: too many replicas for {}: need {replicas}, deleting {n}",
                self.name(),
                obj::key(owner)
            );
            let on_node = if n < pods.len() {
                self.related_on_node(cx, owner)
            } else {
                HashMap::new()
            };
            let count = |node: &str| on_node.get(node).copied().unwrap_or(0);
            let victims = pods_to_delete_by_node(pods, count, n, cx.now);
            if n < pods.len() {
                metrics::observe_deletion_ages(pods, &victims, cx.now);
            }
            let report = self.report(owner, false);
            let owner_key = obj::key(owner);
            let mut t = self.track();
            let deletes =
                kit::pod::delete_actions(&mut t.inflight, &owner_key, ns, &victims, &report);
            (vec![Action::Parallel(deletes)], None)
        } else {
            (vec![], None)
        }
    }

    /// The active pods any ReplicaSet sharing this one's controller (this one included)
    /// selects, counted per node, for the "doubled up on a node" rank (upstream's
    /// getIndirectlyRelatedPods). Empty for an uncontrolled owner or an RC, as upstream (its
    /// RC adapter has no such index). Read from the placement index, not the cache.
    fn related_on_node(&self, cx: &Cx, owner: &Value) -> HashMap<String, usize> {
        let mut on_node = HashMap::new();
        if self.flavor != Flavor::ReplicaSet {
            return on_node;
        }
        let Some(ctrl) = obj::controller_ref(owner) else {
            return on_node;
        };
        let ns = obj::namespace(owner);
        let selectors: Vec<Value> = cx
            .cache
            .store(REPLICASETS)
            .by_owner(ctrl.uid)
            .iter()
            .filter(|rs| {
                obj::namespace(rs) == ns
                    && obj::controller_ref(rs).is_some_and(|r| r.uid == ctrl.uid)
            })
            .filter_map(|rs| self.flavor.selector(rs))
            .filter(selector::is_valid)
            .collect();
        if selectors.is_empty() {
            return on_node;
        }
        // Each selector's `matchLabels` pairs, which a pod it takes must all carry.
        let wanted: Vec<Vec<u64>> = selectors
            .iter()
            .map(|s| {
                s.get("matchLabels")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some(label_pair(k, v.as_str()?)))
                    .collect()
            })
            .collect();
        let candidates: Vec<(String, Box<str>)> = {
            let t = self.track();
            t.placed
                .get(ns)
                .into_iter()
                .flatten()
                .filter(|(_, p)| {
                    p.active && wanted.iter().any(|w| w.iter().all(|h| p.pairs.contains(h)))
                })
                .map(|(name, p)| (name.clone(), p.node.clone()))
                .collect()
        };
        let pods = cx.cache.store(PODS);
        for (name, node) in candidates {
            let Some(meta) = pods.get_metadata_in(ns, &name) else {
                continue;
            };
            if selectors.iter().any(|s| obj::selector_matches(s, &meta)) {
                *on_node.entry(node.into()).or_default() += 1;
            }
        }
        on_node
    }
}

/// Drop `name` from a per-namespace index, and the namespace once it is empty.
fn remove_in<T>(index: &mut HashMap<String, BTreeMap<String, T>>, ns: &str, name: &str) {
    if let Some(set) = index.get_mut(ns) {
        set.remove(name);
        if set.is_empty() {
            index.remove(ns);
        }
    }
}

/// What the replica controllers (and the deployment controller) read of a pod beyond its
/// metadata: where it runs, and its status (phase, conditions, restart counts). The pod cache
/// keeps nothing else unless another controller asks for more.
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/nodeName", "/status"]);

impl ReplicaSetController {
    /// The prefix of its log lines (its row's name).
    fn name(&self) -> &'static str {
        match self.flavor {
            Flavor::ReplicaSet => "replicaset-controller",
            Flavor::ReplicationController => "replicationcontroller-controller",
        }
    }
}

impl Controller for ReplicaSetController {
    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(self.flavor.kind()), POD_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == self.flavor.kind() {
            let flavor = self.flavor;
            self.selectors
                .observe(d, |o| flavor.selector(o).filter(|s| !selector::is_empty(s)));
            let key = obj::key(d.object());
            let replaced =
                matches!((&d.old, &d.new), (Some(o), Some(n)) if obj::uid(o) != obj::uid(n));
            if d.kind == DeltaKind::Deleted || replaced {
                self.forget(&key);
            }
            return vec![key];
        }
        if w.kind != PODS {
            return vec![];
        }
        self.note_pod(d);
        let owner = self.flavor.kind();
        kit::owners::owner_keys(
            d,
            kit::owners::Deleting::AsDeletion,
            |p, r| kit::owners::resolve(cache, owner, obj::namespace(p), r),
            |p| self.matching_owners(p),
        )
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, true)
    }

    fn status_after_writes(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        self.sync(cx, key, false)
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        match (action, result) {
            (Action::Create { .. }, Applied::Done(Some(pod))) => {
                self.track().inflight.created(key, pod);
            }
            (Action::Create { .. }, Applied::Failed(e)) if !e.is_namespace_terminating() => {
                self.track()
                    .manage_err
                    .entry(key.to_string())
                    .or_insert_with(|| e.message());
            }
            (
                Action::Delete {
                    namespace, name, ..
                },
                res,
            ) => {
                let pk = obj::make_key(namespace, name);
                let mut t = self.track();
                match res {
                    Applied::Done(_) => t.inflight.delete_done(key, &pk),
                    Applied::Failed(e) => {
                        t.inflight.delete_failed(key, &pk);
                        t.manage_err
                            .entry(key.to_string())
                            .or_insert_with(|| format!("unable to delete pods: {}", e.message()));
                    }
                    Applied::Skipped => t.inflight.delete_failed(key, &pk),
                }
            }
            _ => {}
        }
    }

    fn on_error(&self, action: &Action, err: &Error) -> OnError {
        match action {
            // A pod gone (or its owner reference already invalid) needs nothing more.
            Action::Patch { .. } if err.is_not_found() || err.code() == Some(422) => {
                OnError::Ignore
            }
            Action::Create { .. } if err.is_namespace_terminating() => OnError::Ignore,
            _ => OnError::Retry,
        }
    }
}

// ---- pure logic -------------------------------------------------------------------------

pub fn spec_replicas(owner: &Value) -> usize {
    owner
        .at("/spec/replicas")
        .map(|v| v.as_i64().unwrap_or(0))
        .unwrap_or(1)
        .max(0) as usize
}

pub fn min_ready_seconds(owner: &Value) -> i64 {
    owner
        .at("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .max(0)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_terminating;
