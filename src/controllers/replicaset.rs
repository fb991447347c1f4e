//! replicaset-controller and replicationcontroller-controller: keep `spec.replicas` active pods
//! for every ReplicaSet (apps/v1) and ReplicationController (core/v1, whose selector is a
//! plain label map), adopt matching orphans, release pods that stopped matching, and report
//! counts and the `ReplicaFailure` condition in status.
//!
//! One implementation serves both kinds, as upstream's does (the RC manager is the RS
//! controller behind a conversion layer). Upstream v1.28 behaviour:
//! - pods are made from the template with `generateName: <owner>-`, the template's labels,
//!   annotations, finalizers and spec, and a controller ownerReference;
//! - at most 500 creations or deletions per sync; creations in slow-start batches (1, 2, 4,
//!   ...), deletions all in parallel, chosen by upstream's ranking;
//! - Events `SuccessfulCreate` / `FailedCreate` / `SuccessfulDelete` / `FailedDelete` on the
//!   owner;
//! - while pods it created are not yet visible in the watch cache, no new decision about
//!   replicas is taken (upstream's expectations), so a lagging watch never leads to extra pods.
//!
//! Own-write tracking differs in form from upstream's expectations because the manager writes
//! the answers of our own writes into the cache at once: a created pod counts from the moment
//! it is created, and stays "expected" until the pod watch has passed its resourceVersion (so
//! a re-list from a stale snapshot cannot hide it); a pod we deleted is ignored even if a late,
//! older watch event brings it back into the cache.

use super::refmanager::{self, Claim};
use super::{Action, Applied, Controller, Cx, ObjectRef, OnError, Outcome, Report, Watch};
use crate::api::client::{DeleteOptions, PatchType};
use crate::api::resources::{PODS, REPLICASETS, REPLICATIONCONTROLLERS};
use crate::api::Kind;
use crate::cache::{Cache, Delta, DeltaKind, Store};
use crate::error::{Error, Result};
use crate::obj::At as _;
use crate::obj::{self, Obj};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Creations or deletions at most per sync (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;
/// How long own writes are waited for before deciding anyway (upstream's
/// `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Pod annotation lowering (or raising) a pod's preference for deletion on scale-down.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
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

/// A pod we created, waited for until the pod watch has gone past it.
struct Created {
    owner_uid: String,
    name: String,
    rv: Option<u64>,
    at: Instant,
}

#[derive(Default)]
struct Tracking {
    /// Per owner key: pods created and not yet confirmed by the watch.
    created: HashMap<String, Vec<Created>>,
    /// Pod key -> (uid, when) of pods we deleted: ignored while the cache may still show them.
    deleted: HashMap<String, (String, Instant)>,
    /// Pod key -> uid of deletions decided and not applied yet.
    deleting: HashMap<String, String>,
    /// Per owner key: the error of the last attempt to create or delete pods.
    manage_err: HashMap<String, String>,
    /// Namespace -> name -> labels (and deletion mark) of pods without a controller: the
    /// candidates for adoption.
    orphans: HashMap<String, BTreeMap<String, Orphan>>,
}

/// What the orphan index keeps of a pod without a controller: all `refmanager::may_adopt`
/// needs to tell whether an owner would adopt it.
struct Orphan {
    labels: obj::Labels,
    deleting: bool,
}

pub struct ReplicaSetController {
    flavor: Flavor,
    workers: usize,
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
            if !selector_valid(s) {
                log::warn!("{}: {key}: invalid selector {s}", self.name());
                return Ok(Outcome::none());
            }
        }
        let pods = cx.cache.store(PODS);
        let settled = self.creations_settled(key, &uid, &ns, &pods);

        // Candidates: pods naming this owner, and orphans of the namespace.
        let mut candidates: BTreeMap<String, Obj> = BTreeMap::new();
        for p in pods.by_owner(&uid) {
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
            .get(&ns)
            .map(|m| {
                m.iter()
                    .filter(|(_, o)| {
                        refmanager::may_adopt(&owner, selector.as_ref(), &o.labels, o.deleting)
                    })
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default();
        for name in takeable {
            if let std::collections::btree_map::Entry::Vacant(e) = candidates.entry(name) {
                if let Some(p) = pods.get_in(&ns, e.key()) {
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
                let pk = obj::make_key(&ns, name);
                match t.deleted.get(&pk) {
                    Some((u, at)) if u == obj::uid(p) && at.elapsed() < EXPECTATIONS_TIMEOUT => {
                        false
                    }
                    Some(_) => {
                        t.deleted.remove(&pk);
                        true
                    }
                    None => true,
                }
            });
        }

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
                    actions.push(Action::Patch {
                        kind: PODS,
                        namespace: ns.clone(),
                        name: obj::name(&p).to_string(),
                        patch_type: PatchType::Strategic,
                        patch: refmanager::release_patch(&uid, obj::uid(&p)),
                        subresource: None,
                    });
                }
                Claim::Ignore => {}
            }
        }
        if !adopt.is_empty() {
            if let Err(e) = self.can_adopt(cx, &owner) {
                let p = &adopt[0];
                return Err(Error::Config(format!(
                    "can't adopt Pod {ns}/{} ({}): {e}",
                    obj::name(p),
                    obj::uid(p)
                )));
            }
            for p in adopt {
                log::debug!("{}: {key}: adopting pod {}", self.name(), obj::name(&p));
                actions.push(Action::Patch {
                    kind: PODS,
                    namespace: ns.clone(),
                    name: obj::name(&p).to_string(),
                    patch_type: PatchType::Strategic,
                    patch: refmanager::adopt_patch(&kind, &owner, obj::uid(&p)),
                    subresource: None,
                });
                claimed.push(p);
            }
        }

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
            .then(|| calculate_status(&owner, &claimed, manage_err.as_deref(), cx.now))
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
        })
    }

    pub fn new(flavor: Flavor, workers: usize) -> Self {
        ReplicaSetController {
            flavor,
            workers,
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

    /// The owner a controller reference points to, if it is ours and still exists.
    fn resolve(&self, cache: &Cache, ns: &str, r: &obj::OwnerRefView) -> Option<String> {
        if r.kind != self.kind_name() {
            return None;
        }
        let key = obj::make_key(ns, r.name);
        let uid = cache.store(self.flavor.kind()).uid_of(&key)?;
        (uid == r.uid).then_some(key)
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

    /// Keep the orphan index and the deleted-pod list in step with the pod watch.
    fn note_pod(&self, d: &Delta) {
        let p = d.object();
        let (ns, name) = (obj::namespace(p), obj::name(p));
        let key = obj::key(p);
        let mut t = self.track();
        let orphan = d.kind != DeltaKind::Deleted && obj::controller_ref(p).is_none();
        if orphan {
            t.orphans.entry(ns.to_string()).or_default().insert(
                name.to_string(),
                Orphan {
                    labels: obj::Labels::of(p),
                    deleting: obj::is_deleting(p),
                },
            );
        } else if let Some(set) = t.orphans.get_mut(ns) {
            set.remove(name);
            if set.is_empty() {
                t.orphans.remove(ns);
            }
        }
        let confirmed = match t.deleted.get(&key) {
            Some((uid, _)) => {
                d.kind == DeltaKind::Deleted || uid != obj::uid(p) || !is_pod_active(p)
            }
            None => false,
        };
        if confirmed {
            t.deleted.remove(&key);
        }
    }

    /// Forget everything about an owner that is gone (or was replaced by another UID).
    fn forget(&self, key: &str) {
        let mut t = self.track();
        t.created.remove(key);
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
        let store_rv: Option<u64> = pods.resource_version().parse().ok();
        let mut t = self.track();
        let Some(list) = t.created.get_mut(key) else {
            return Ok(());
        };
        list.retain(|c| {
            let confirmed = match (store_rv, c.rv) {
                (Some(s), Some(r)) => s >= r,
                _ => true,
            };
            c.owner_uid == owner_uid && !confirmed && c.at.elapsed() < EXPECTATIONS_TIMEOUT
        });
        let waiting = list
            .iter()
            .filter(|c| pods.get_in(ns, &c.name).is_none())
            .map(|c| EXPECTATIONS_TIMEOUT.saturating_sub(c.at.elapsed()))
            .min();
        if list.is_empty() {
            t.created.remove(key);
        }
        match waiting {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    /// Upstream re-reads the owner from the API server once before adopting anything.
    fn can_adopt(&self, cx: &Cx, owner: &Value) -> Result<()> {
        let (ns, name, uid) = (obj::namespace(owner), obj::name(owner), obj::uid(owner));
        let fresh = cx.client.get(&self.flavor.kind(), Some(ns), name)?;
        if obj::uid(&fresh) != uid {
            return Err(Error::Config(format!(
                "original {} {ns}/{name} is gone: got uid {}, wanted {uid}",
                self.kind_name(),
                obj::uid(&fresh)
            )));
        }
        if obj::is_deleting(&fresh) {
            let at = fresh
                .at("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(Error::Config(format!(
                "{ns}/{name} has just been deleted at {at}"
            )));
        }
        Ok(())
    }

    fn report(&self, owner: &Value, create: bool) -> Report {
        let about = ObjectRef::of(&self.flavor.kind(), owner);
        if create {
            Report {
                about,
                success_reason: "SuccessfulCreate",
                success_prefix: "Created pod: ",
                failure_reason: "FailedCreate",
                failure_prefix: "Error creating: ",
            }
        } else {
            Report {
                about,
                success_reason: "SuccessfulDelete",
                success_prefix: "Deleted pod: ",
                failure_reason: "FailedDelete",
                failure_prefix: "Error deleting: ",
            }
        }
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
            let related = if n < pods.len() {
                self.related_pods(cx, owner)
            } else {
                vec![]
            };
            let victims = pods_to_delete(pods, &related, n, cx.now);
            let report = self.report(owner, false);
            let mut t = self.track();
            let deletes = victims
                .iter()
                .map(|p| {
                    t.deleting.insert(obj::key(p), obj::uid(p).to_string());
                    Action::Reported {
                        action: Box::new(Action::Delete {
                            kind: PODS,
                            namespace: ns.to_string(),
                            name: obj::name(p).to_string(),
                            options: DeleteOptions::default(),
                        }),
                        report: report.clone(),
                    }
                })
                .collect();
            (vec![Action::Parallel(deletes)], None)
        } else {
            (vec![], None)
        }
    }

    /// Pods selected by every ReplicaSet sharing this one's controller (this one included),
    /// for the "doubled up on a node" rank. None for an uncontrolled owner or an RC, as
    /// upstream (its RC adapter has no such index).
    fn related_pods(&self, cx: &Cx, owner: &Value) -> Vec<Obj> {
        if self.flavor != Flavor::ReplicaSet {
            return vec![];
        }
        let Some(ctrl) = obj::controller_ref(owner) else {
            return vec![];
        };
        let ns = obj::namespace(owner);
        let siblings: Vec<Obj> = cx
            .cache
            .store(REPLICASETS)
            .by_owner(ctrl.uid)
            .into_iter()
            .filter(|rs| {
                obj::namespace(rs) == ns
                    && obj::controller_ref(rs).is_some_and(|r| r.uid == ctrl.uid)
            })
            .collect();
        let selectors: Vec<Value> = siblings
            .iter()
            .filter_map(|rs| self.flavor.selector(rs))
            .filter(selector_valid)
            .collect();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for p in cx.cache.store(PODS).list_namespace(ns) {
            if selectors.iter().any(|s| obj::selector_matches(s, &p))
                && seen.insert(obj::uid(&p).to_string())
            {
                out.push(p);
            }
        }
        out
    }
}

/// What the replica controllers (and the deployment controller) read of a pod beyond its
/// metadata: where it runs, and its status (phase, conditions, restart counts). The pod cache
/// keeps nothing else unless another controller asks for more.
pub const POD_WATCH: Watch = Watch::fields(PODS, &["/spec/nodeName", "/status"]);

impl Controller for ReplicaSetController {
    fn name(&self) -> &'static str {
        match self.flavor {
            Flavor::ReplicaSet => "replicaset-controller",
            Flavor::ReplicationController => "replicationcontroller-controller",
        }
    }
    fn queue_name(&self) -> &'static str {
        match self.flavor {
            Flavor::ReplicaSet => "replicaset",
            Flavor::ReplicationController => "replicationmanager",
        }
    }

    fn event_component(&self) -> &'static str {
        match self.flavor {
            Flavor::ReplicaSet => "replicaset-controller",
            Flavor::ReplicationController => "replication-controller",
        }
    }

    fn watches(&self) -> Vec<Watch> {
        vec![Watch::full(self.flavor.kind()), POD_WATCH]
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        if w.kind == self.flavor.kind() {
            let flavor = self.flavor;
            self.selectors
                .observe(d, |o| flavor.selector(o).filter(|s| !selector_is_empty(s)));
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
        let mut keys = BTreeSet::new();
        let owner_of = |p: &Value| {
            obj::controller_ref(p).and_then(|r| self.resolve(cache, obj::namespace(p), &r))
        };
        match (&d.old, &d.new) {
            (_, None) | (None, Some(_)) => {
                // Added or deleted: its controller, or (a new orphan) every owner selecting it.
                let p = d.object();
                match obj::controller_ref(p) {
                    Some(_) => keys.extend(owner_of(p)),
                    None if d.kind != DeltaKind::Deleted && !obj::is_deleting(p) => {
                        keys.extend(self.matching_owners(p))
                    }
                    None => {}
                }
            }
            (Some(old), Some(cur)) => {
                let label_changed = obj::labels(old) != obj::labels(cur);
                let (old_ref, cur_ref) = (obj::controller_ref(old), obj::controller_ref(cur));
                if obj::is_deleting(cur) {
                    keys.extend(owner_of(cur));
                    if label_changed {
                        keys.extend(owner_of(old));
                    }
                } else {
                    let ref_changed = old_ref != cur_ref;
                    if ref_changed && old_ref.is_some() {
                        keys.extend(owner_of(old));
                    }
                    if cur_ref.is_some() {
                        keys.extend(owner_of(cur));
                    } else if label_changed || ref_changed {
                        keys.extend(self.matching_owners(cur));
                    }
                }
            }
        }
        keys.into_iter().collect()
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
                let owner_uid = obj::controller_ref(pod)
                    .map(|r| r.uid.to_string())
                    .unwrap_or_default();
                let created = Created {
                    owner_uid,
                    name: obj::name(pod).to_string(),
                    rv: obj::resource_version(pod).parse().ok(),
                    at: Instant::now(),
                };
                self.track()
                    .created
                    .entry(key.to_string())
                    .or_default()
                    .push(created);
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
                let uid = t.deleting.remove(&pk);
                match res {
                    Applied::Done(_) => {
                        if let Some(uid) = uid {
                            if t.deleted.len() > 10_000 {
                                t.deleted
                                    .retain(|_, (_, at)| at.elapsed() < EXPECTATIONS_TIMEOUT);
                            }
                            t.deleted.insert(pk, (uid, Instant::now()));
                        }
                    }
                    Applied::Failed(e) => {
                        t.manage_err
                            .entry(key.to_string())
                            .or_insert_with(|| format!("unable to delete pods: {}", e.message()));
                    }
                    Applied::Skipped => {}
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

fn selector_is_empty(sel: &Value) -> bool {
    let ml = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty());
    let me = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty());
    ml && me
}

/// Would upstream's `LabelSelectorAsSelector` accept it?
pub fn selector_valid(sel: &Value) -> bool {
    let Some(m) = sel.as_object() else {
        return false;
    };
    if let Some(ml) = m.get("matchLabels").filter(|v| !v.is_null()) {
        match ml.as_object() {
            Some(ml) if ml.values().all(Value::is_string) => {}
            _ => return false,
        }
    }
    if let Some(me) = m.get("matchExpressions").filter(|v| !v.is_null()) {
        let Some(list) = me.as_array() else {
            return false;
        };
        for e in list {
            let values = e
                .get("values")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            let ok = match e.get("operator").and_then(Value::as_str) {
                Some("In") | Some("NotIn") => values > 0,
                Some("Exists") | Some("DoesNotExist") => values == 0,
                _ => false,
            };
            if !ok
                || e.get("key")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                return false;
            }
        }
    }
    true
}

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

/// A DNS-1123 subdomain (upstream's `IsDNS1123Subdomain`).
fn is_dns1123_subdomain(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

/// The `generateName` of an owner's pods: `<name>-`, or the bare name when `<name>-` would
/// not be a valid name prefix (upstream's `getPodsPrefix`).
pub fn pod_prefix(name: &str) -> String {
    let prefix = format!("{name}-");
    // A prefix is validated with its trailing dash masked (two bytes dropped, "a" added).
    let masked = if prefix.len() > 1 && prefix.ends_with('-') {
        format!("{}a", &prefix[..prefix.len() - 2])
    } else {
        prefix.clone()
    };
    if is_dns1123_subdomain(&masked) {
        prefix
    } else {
        name.to_string()
    }
}

/// The pod to create for `owner` (upstream's `GetPodFromTemplate` plus its checks).
pub fn pod_from_template(kind: &Kind, owner: &Value) -> std::result::Result<Value, String> {
    // A missing template is an empty one: no labels.
    let empty = json!({});
    let template = owner
        .at("/spec/template")
        .filter(|t| t.is_object())
        .unwrap_or(&empty);
    let tmeta = template.get("metadata");
    let field = |f: &str| tmeta.and_then(|m| m.get(f)).filter(|v| !v.is_null());
    let labels = field("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if labels.is_empty() {
        return Err("unable to create pods, no labels".to_string());
    }
    let mut meta = Map::new();
    meta.insert("generateName".into(), json!(pod_prefix(obj::name(owner))));
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = field("annotations").and_then(Value::as_object) {
        if !a.is_empty() {
            meta.insert("annotations".into(), Value::Object(a.clone()));
        }
    }
    if let Some(f) = field("finalizers").and_then(Value::as_array) {
        if !f.is_empty() {
            meta.insert("finalizers".into(), Value::Array(f.clone()));
        }
    }
    meta.insert(
        "ownerReferences".into(),
        json!([refmanager::controller_owner_ref(kind, owner)]),
    );
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    }))
}

fn phase(p: &Value) -> &str {
    p.at("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// Not terminal and not being deleted (upstream's `IsPodActive`).
pub fn is_pod_active(p: &Value) -> bool {
    let ph = phase(p);
    ph != "Succeeded" && ph != "Failed" && !obj::is_deleting(p)
}

fn ready_condition(p: &Value) -> Option<&Value> {
    p.at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
}

pub fn is_pod_ready(p: &Value) -> bool {
    ready_condition(p)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

fn time_field(v: Option<&Value>) -> Option<SystemTime> {
    v.and_then(Value::as_str)
        .and_then(crate::timefmt::parse_rfc3339)
}

/// When a ready pod became ready (None: not ready, or no transition time).
pub fn ready_time(p: &Value) -> Option<SystemTime> {
    if !is_pod_ready(p) {
        return None;
    }
    time_field(ready_condition(p).and_then(|c| c.get("lastTransitionTime")))
}

/// Ready for at least `min_ready` seconds (upstream's `IsPodAvailable`).
pub fn is_pod_available(p: &Value, min_ready: i64, now: SystemTime) -> bool {
    if !is_pod_ready(p) {
        return false;
    }
    if min_ready <= 0 {
        return true;
    }
    ready_time(p).is_some_and(|t| t + Duration::from_secs(min_ready as u64) < now)
}

fn deletion_cost(p: &Value) -> i32 {
    let Some(v) = obj::annotation(p, POD_DELETION_COST) else {
        return 0;
    };
    let b = v.as_bytes();
    let first_ok = match b.first() {
        Some(b'-') => true,
        Some(b'0') => v == "0",
        Some(c) => c.is_ascii_digit(),
        None => false,
    };
    if !first_ok {
        return 0;
    }
    v.parse::<i32>().unwrap_or(0)
}

/// What the ranking compares, read once per pod.
struct Ranked<'a> {
    pod: &'a Obj,
    rank: usize,
    assigned: bool,
    node: &'a str,
    phase: u8,
    ready: bool,
    ready_time: Option<SystemTime>,
    cost: i32,
    restarts: i64,
    created: Option<SystemTime>,
    uid: &'a str,
}

impl<'a> Ranked<'a> {
    fn new(pod: &'a Obj, rank: usize) -> Self {
        let node = pod
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let phase = match phase(pod) {
            "Unknown" => 1,
            "Running" => 2,
            _ => 0,
        };
        let ready = is_pod_ready(pod);
        let ready_time = if ready {
            time_field(ready_condition(pod).and_then(|c| c.get("lastTransitionTime")))
        } else {
            None
        };
        let restarts = pod
            .at("/status/containerStatuses")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .fold(0, i64::max)
            })
            .unwrap_or(0);
        Ranked {
            pod,
            rank,
            assigned: !node.is_empty(),
            node,
            phase,
            ready,
            ready_time,
            cost: deletion_cost(pod),
            restarts,
            created: time_field(pod.at("/metadata/creationTimestamp")),
            uid: obj::uid(pod),
        }
    }
}

/// t1 after t2, a missing (zero) time counting as after any other.
fn after_or_zero(t1: Option<SystemTime>, t2: Option<SystemTime>) -> bool {
    match (t1, t2) {
        (Some(a), Some(b)) => a > b,
        (a, _) => a.is_none(),
    }
}

/// The difference of the base-2 logarithms of the ages (in nanoseconds) of two times.
fn log_rank_diff(t1: SystemTime, t2: SystemTime, now: SystemTime) -> i64 {
    let rank = |t: SystemTime| match now.duration_since(t) {
        Ok(d) if !d.is_zero() => (d.as_nanos() as f64).log2() as i64,
        _ => -1,
    };
    rank(t1) - rank(t2)
}

/// Compare two times newer-first, on a logarithmic scale with the UID as tie-break.
fn newer_first(
    a: &Ranked,
    b: &Ranked,
    t1: Option<SystemTime>,
    t2: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    match (t1, t2) {
        (Some(x), Some(y)) => match log_rank_diff(x, y, now) {
            0 => a.uid < b.uid,
            d => d < 0,
        },
        _ => after_or_zero(t1, t2),
    }
}

/// Upstream's `ActivePodsWithRanks.Less`: true when `a` should be deleted before `b`.
fn delete_first(a: &Ranked, b: &Ranked, now: SystemTime) -> bool {
    if a.node != b.node && (!a.assigned || !b.assigned) {
        return !a.assigned;
    }
    if a.phase != b.phase {
        return a.phase < b.phase;
    }
    if a.ready != b.ready {
        return !a.ready;
    }
    if a.cost != b.cost {
        return a.cost < b.cost;
    }
    if a.rank != b.rank {
        return a.rank > b.rank;
    }
    if a.ready && b.ready && a.ready_time != b.ready_time {
        return newer_first(a, b, a.ready_time, b.ready_time, now);
    }
    if a.restarts != b.restarts {
        return a.restarts > b.restarts;
    }
    if a.created != b.created {
        return newer_first(a, b, a.created, b.created, now);
    }
    false
}

/// Stable merge sort by a "less" function that need not be a total order (a comparator
/// that is not one may make the standard sorts panic).
fn merge_sort_by<T>(v: Vec<T>, less: &impl Fn(&T, &T) -> bool) -> Vec<T> {
    if v.len() <= 1 {
        return v;
    }
    let mut left = v;
    let right = left.split_off(left.len() / 2);
    let (left, right) = (merge_sort_by(left, less), merge_sort_by(right, less));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_right = match (l.peek(), r.peek()) {
            (Some(a), Some(b)) => less(b, a),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => break,
        };
        let next = if take_right { r.next() } else { l.next() };
        out.extend(next);
    }
    out
}

/// The `n` pods to delete first: ranked by upstream's rules, with the rank of a pod the
/// number of active related pods on its node.
pub fn pods_to_delete(pods: &[Obj], related: &[Obj], n: usize, now: SystemTime) -> Vec<Obj> {
    if n >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| is_pod_active(p)) {
        let node = p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        *on_node.entry(node).or_default() += 1;
    }
    let ranked: Vec<Ranked> = pods
        .iter()
        .map(|p| {
            let node = p.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
            Ranked::new(p, on_node.get(node).copied().unwrap_or(0))
        })
        .collect();
    merge_sort_by(ranked, &|a: &Ranked, b: &Ranked| delete_first(a, b, now))
        .into_iter()
        .take(n)
        .map(|r| r.pod.clone())
        .collect()
}

fn status_i64(owner: &Value, field: &str) -> i64 {
    owner
        .get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The status upstream's `calculateStatus` computes from the owner's active claimed pods and
/// the error of the last attempt to create or delete pods.
pub fn calculate_status(
    owner: &Value,
    pods: &[Obj],
    manage_err: Option<&str>,
    now: SystemTime,
) -> Value {
    let mut status = owner
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let template_labels = owner
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .map(obj::Labels::from_map)
        .unwrap_or_default();
    let min_ready = min_ready_seconds(owner);
    let (mut fully, mut ready, mut available) = (0i64, 0i64, 0i64);
    for p in pods {
        if template_labels.all_in(p) {
            fully += 1;
        }
        if is_pod_ready(p) {
            ready += 1;
            if is_pod_available(p, min_ready, now) {
                available += 1;
            }
        }
    }
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_failure = |c: &Value| c.get("type").and_then(Value::as_str) == Some(REPLICA_FAILURE);
    let has_failure = conditions.iter().any(is_failure);
    match manage_err {
        Some(msg) if !has_failure => {
            let replicas = spec_replicas(owner);
            let reason = match pods.len().cmp(&replicas) {
                std::cmp::Ordering::Less => "FailedCreate",
                std::cmp::Ordering::Greater => "FailedDelete",
                std::cmp::Ordering::Equal => "",
            };
            conditions.push(json!({
                "type": REPLICA_FAILURE,
                "status": "True",
                "lastTransitionTime": crate::timefmt::rfc3339(now),
                "reason": reason,
                "message": msg,
            }));
        }
        None if has_failure => conditions.retain(|c| !is_failure(c)),
        _ => {}
    }
    let mut set = |k: &str, v: i64, always: bool| {
        if v != 0 || always {
            status.insert(k.into(), json!(v));
        } else {
            status.remove(k);
        }
    };
    set("replicas", pods.len() as i64, true);
    set("fullyLabeledReplicas", fully, false);
    set("readyReplicas", ready, false);
    set("availableReplicas", available, false);
    if conditions.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    Value::Object(status)
}

/// The owner with its new status to PUT, or None when nothing changed (upstream's
/// comparison: the four counts, observedGeneration == generation, and the conditions).
pub fn status_update(owner: &Value, new_status: Value) -> Option<Value> {
    let generation = owner
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let conds = |s: Option<&Value>| {
        s.and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let same = [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .all(|f| status_i64(owner, f) == new_status.get(*f).and_then(Value::as_i64).unwrap_or(0))
        && status_i64(owner, "observedGeneration") == generation
        && conds(owner.get("status")) == conds(Some(&new_status));
    if same {
        return None;
    }
    let mut status = new_status;
    if let Some(m) = status.as_object_mut() {
        if generation != 0 {
            m.insert("observedGeneration".into(), json!(generation));
        } else {
            m.remove("observedGeneration");
        }
    }
    let mut updated = owner.clone();
    updated["status"] = status;
    Some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testutil::cx_with;
    use std::sync::Arc;

    fn t(s: &str) -> SystemTime {
        crate::timefmt::parse_rfc3339(s).expect("time")
    }

    const NOW: &str = "2024-06-01T12:00:00Z";

    fn rs(name: &str, replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "resourceVersion": "5", "generation": 2},
            "spec": {"replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name, "tier": "fe"},
                    "annotations": {"a": "b"}, "finalizers": ["x/y"]},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 0}
        })
    }

    fn pod(name: &str, owner: Option<&Value>, labels: Value) -> Value {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("p-{name}"),
                "resourceVersion": "7", "labels": labels,
                "creationTimestamp": "2024-06-01T11:00:00Z"},
            "spec": {}, "status": {"phase": "Pending"}
        });
        if let Some(o) = owner {
            p["metadata"]["ownerReferences"] =
                json!([refmanager::controller_owner_ref(&REPLICASETS, o)]);
        }
        p
    }

    fn ready(mut p: Value, since: &str) -> Value {
        p["status"]["phase"] = json!("Running");
        p["status"]["conditions"] =
            json!([{"type": "Ready", "status": "True", "lastTransitionTime": since}]);
        p
    }

    #[test]
    fn prefix_rule() {
        assert_eq!(pod_prefix("web"), "web-");
        assert_eq!(pod_prefix("a.b"), "a.b-");
        assert_eq!(pod_prefix("x"), "x-");
        // Not a valid name prefix: the bare name.
        assert_eq!(pod_prefix("Web"), "Web");
        let long = "a".repeat(253);
        assert_eq!(pod_prefix(&long), format!("{long}-"));
        let longer = "a".repeat(254);
        assert_eq!(pod_prefix(&longer), longer);
    }

    #[test]
    fn pod_from_template_copies_template() {
        let o = rs("web", 3);
        let p = pod_from_template(&REPLICASETS, &o).expect("pod");
        assert_eq!(p["metadata"]["generateName"], "web-");
        assert_eq!(p["metadata"]["labels"], json!({"app": "web", "tier": "fe"}));
        assert_eq!(p["metadata"]["annotations"], json!({"a": "b"}));
        assert_eq!(p["metadata"]["finalizers"], json!(["x/y"]));
        assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
        let r = &p["metadata"]["ownerReferences"][0];
        assert_eq!(r["kind"], "ReplicaSet");
        assert_eq!(r["uid"], "uid-web");
        assert_eq!(r["controller"], true);
        assert_eq!(r["blockOwnerDeletion"], true);
        assert!(p["metadata"].get("name").is_none());
        let mut nolabels = o.clone();
        nolabels["spec"]["template"]["metadata"]["labels"] = json!({});
        assert_eq!(
            pod_from_template(&REPLICASETS, &nolabels).unwrap_err(),
            "unable to create pods, no labels"
        );
    }

    #[test]
    fn rc_selector_is_a_label_map() {
        let rc = json!({"spec": {"selector": {"app": "x"}}});
        let sel = Flavor::ReplicationController
            .selector(&rc)
            .expect("selector");
        assert_eq!(sel, json!({"matchLabels": {"app": "x"}}));
        assert!(Flavor::ReplicationController
            .selector(&json!({"spec": {}}))
            .is_none());
        assert!(selector_valid(&sel));
        assert!(!selector_valid(
            &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
        ));
        assert!(!selector_valid(
            &json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]})
        ));
    }

    fn names(v: &[Obj]) -> Vec<String> {
        v.iter().map(|p| obj::name(p).to_string()).collect()
    }

    fn arcs(v: Vec<Value>) -> Vec<Obj> {
        v.into_iter().map(Arc::new).collect()
    }

    #[test]
    fn ranking_rules_in_order() {
        let now = t(NOW);
        let l = json!({"app": "web"});
        let base = |n: &str| pod(n, None, l.clone());
        let on = |mut p: Value, node: &str| {
            p["spec"]["nodeName"] = json!(node);
            p
        };
        // 1. unassigned before assigned
        let pods = arcs(vec![on(base("assigned"), "n1"), base("unassigned")]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["unassigned"]);
        // 2. Pending < Unknown < Running
        let mut running = base("running");
        running["status"]["phase"] = json!("Running");
        let mut unknown = base("unknown");
        unknown["status"]["phase"] = json!("Unknown");
        let pods = arcs(vec![running.clone(), unknown, base("pending")]);
        assert_eq!(
            names(&pods_to_delete(&pods, &[], 2, now)),
            ["pending", "unknown"]
        );
        // 3. not ready before ready
        let pods = arcs(vec![ready(base("r"), "2024-06-01T11:00:00Z"), running]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["running"]);
        // 4. lower deletion cost first (beats readiness time)
        let mut cheap = ready(base("cheap"), "2024-06-01T09:00:00Z");
        cheap["metadata"]["annotations"] = json!({POD_DELETION_COST: "-5"});
        let mut invalid = ready(base("invalid"), "2024-06-01T11:59:00Z");
        invalid["metadata"]["annotations"] = json!({POD_DELETION_COST: "+7"});
        let pods = arcs(vec![invalid, cheap]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["cheap"]);
        // 5. more related pods on the same node first
        let a = on(base("a"), "n1");
        let b = on(base("b"), "n2");
        let related = arcs(vec![a.clone(), b.clone(), on(base("c"), "n2")]);
        let pods = arcs(vec![a, b]);
        assert_eq!(names(&pods_to_delete(&pods, &related, 1, now)), ["b"]);
        // 6. ready for a shorter time first, on a log scale: 1 min vs 2 h
        let pods = arcs(vec![
            ready(base("old"), "2024-06-01T10:00:00Z"),
            ready(base("new"), "2024-06-01T11:59:00Z"),
        ]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["new"]);
        // 7. more restarts first
        let mut crashy = base("crashy");
        crashy["status"]["containerStatuses"] = json!([{"restartCount": 1}, {"restartCount": 4}]);
        let pods = arcs(vec![base("calm"), crashy]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["crashy"]);
        // 8. newer first; within one log bucket the UID decides
        let mut young = base("young");
        young["metadata"]["creationTimestamp"] = json!("2024-06-01T11:59:50Z");
        let pods = arcs(vec![base("elder"), young]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["young"]);
        let mut x = base("x");
        x["metadata"]["creationTimestamp"] = json!("2024-06-01T11:00:01Z");
        x["metadata"]["uid"] = json!("b");
        let mut y = base("y");
        y["metadata"]["uid"] = json!("a");
        let pods = arcs(vec![x, y]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), ["y"]);
        // all requested: everything, in the given order
        let pods = arcs(vec![base("p1"), base("p2")]);
        assert_eq!(names(&pods_to_delete(&pods, &[], 5, now)), ["p1", "p2"]);
    }

    #[test]
    fn log_scale_buckets() {
        let now = t(NOW);
        // 60 s and 61 s old share a bucket; 1 s and 100 s do not.
        assert_eq!(
            log_rank_diff(t("2024-06-01T11:59:00Z"), t("2024-06-01T11:58:59Z"), now),
            0
        );
        assert!(log_rank_diff(t("2024-06-01T11:59:59Z"), t("2024-06-01T11:58:20Z"), now) < 0);
        assert_eq!(log_rank_diff(now, now, now), 0);
    }

    #[test]
    fn status_counts_and_failure_condition() {
        let now = t(NOW);
        let mut o = rs("web", 3);
        o["spec"]["minReadySeconds"] = json!(30);
        let sel = json!({"app": "web", "tier": "fe"});
        let pods = arcs(vec![
            ready(pod("a", Some(&o), sel.clone()), "2024-06-01T11:00:00Z"),
            ready(pod("b", Some(&o), sel.clone()), "2024-06-01T11:59:50Z"),
            pod("c", Some(&o), json!({"app": "web"})),
        ]);
        let st = calculate_status(&o, &pods, None, now);
        assert_eq!(st["replicas"], 3);
        assert_eq!(st["fullyLabeledReplicas"], 2);
        assert_eq!(st["readyReplicas"], 2);
        assert_eq!(st["availableReplicas"], 1);
        let upd = status_update(&o, st.clone()).expect("changed");
        assert_eq!(upd["status"]["observedGeneration"], 2);
        assert!(status_update(&upd, st).is_none(), "no change, no write");

        let st = calculate_status(&o, &pods[..1], Some("quota exceeded"), now);
        let c = &st["conditions"][0];
        assert_eq!(c["type"], "ReplicaFailure");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "FailedCreate");
        assert_eq!(c["message"], "quota exceeded");
        // healthy again: the condition goes
        let mut failed = o.clone();
        failed["status"] = st;
        let st = calculate_status(&failed, &pods, None, now);
        assert!(st.get("conditions").is_none());
        // too many pods failing to go: FailedDelete
        let mut one = o.clone();
        one["spec"]["replicas"] = json!(1);
        let st = calculate_status(&one, &pods, Some("unable to delete pods: x"), now);
        assert_eq!(st["conditions"][0]["reason"], "FailedDelete");
        // zero counts are omitted, replicas is always there
        let st = calculate_status(&o, &[], None, now);
        assert_eq!(st, json!({"replicas": 0}));
    }

    #[test]
    fn availability() {
        let now = t(NOW);
        let p = ready(pod("a", None, json!({})), "2024-06-01T11:59:30Z");
        assert!(is_pod_available(&p, 0, now));
        assert!(is_pod_available(&p, 29, now));
        assert!(!is_pod_available(&p, 30, now));
        assert!(!is_pod_available(&pod("b", None, json!({})), 0, now));
        let mut gone = p.clone();
        gone["metadata"]["deletionTimestamp"] = json!(NOW);
        assert!(!is_pod_active(&gone));
        let mut done = p;
        done["status"]["phase"] = json!("Succeeded");
        assert!(!is_pod_active(&done));
    }

    fn cx<'a>(cache: &'a Cache, client: &'a crate::api::client::Client) -> Cx<'a> {
        Cx {
            cache,
            now: t(NOW),
            client,
        }
    }

    /// Feed the controller the deltas a store change produces, as the informer would.
    fn feed(c: &ReplicaSetController, cache: &Cache, kind: Kind, dk: DeltaKind, v: Value) {
        if let Some(d) = cache.store(kind).apply(dk, v) {
            c.keys_for(&Watch::full(kind), &d, cache);
        }
    }

    fn creates(out: &Outcome) -> usize {
        out.actions
            .iter()
            .map(|a| match a {
                Action::SlowStart(l) => l.len(),
                _ => 0,
            })
            .sum()
    }

    fn deletes(out: &Outcome) -> Vec<String> {
        let mut v = vec![];
        for a in &out.actions {
            if let Action::Parallel(l) = a {
                for d in l {
                    if let Action::Reported { action, .. } = d {
                        if let Action::Delete { name, .. } = &**action {
                            v.push(name.clone());
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn creates_missing_pods_with_events_and_status() {
        let o = rs("web", 3);
        let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 3);
        let Action::SlowStart(l) = &out.actions[0] else {
            panic!("{:?}", out.actions)
        };
        let Action::Reported { action, report } = &l[0] else {
            panic!()
        };
        assert_eq!(report.success_reason, "SuccessfulCreate");
        assert_eq!(report.success_prefix, "Created pod: ");
        assert_eq!(report.failure_prefix, "Error creating: ");
        assert_eq!(report.about.kind, "ReplicaSet");
        assert!(matches!(&**action, Action::Create { kind, .. } if *kind == PODS));
        // The status waits for the creates, then counts the pods they left in the cache.
        assert!(out.status_after_writes);
        assert!(!out
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateSubresource { .. })));
        for name in ["web-a", "web-b"] {
            cache.observe_write(PODS, &pod(name, Some(&o), json!({"app": "web"})));
        }
        let rep = c
            .status_after_writes(&cx(&cache, &client), "ns/web")
            .expect("status");
        let [Action::UpdateSubresource { object, .. }] = &rep.actions[..] else {
            panic!("{:?}", rep.actions)
        };
        assert_eq!(object["status"]["replicas"], 2);
        assert_eq!(object["status"]["observedGeneration"], 2);
        assert!(!rep.status_after_writes);
        assert_eq!(creates(&rep), 0, "a report never creates");
    }

    #[test]
    fn without_writes_the_status_comes_with_the_decision() {
        let o = rs("web", 1);
        let p = pod("web-a", Some(&o), json!({"app": "web"}));
        let (cache, client) = cx_with(&[(REPLICASETS, o), (PODS, p)]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert!(!out.status_after_writes);
        let [Action::UpdateSubresource { object, .. }] = &out.actions[..] else {
            panic!("{:?}", out.actions)
        };
        // observedGeneration moves to 2 with nothing to create
        assert_eq!(object["status"]["observedGeneration"], 2);
        assert_eq!(object["status"]["replicas"], 1);
    }

    #[test]
    fn burst_limit() {
        let o = rs("big", 2000);
        let (cache, client) = cx_with(&[(REPLICASETS, o)]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let out = c
            .reconcile(&cx(&cache, &client), "ns/big")
            .expect("reconcile");
        assert_eq!(creates(&out), BURST_REPLICAS);
    }

    #[test]
    fn own_creations_gate_the_next_decision_until_the_watch_passes_them() {
        let o = rs("web", 2);
        let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
        let pods = cache.store(PODS);
        pods.set_resource_version("10");
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 2);
        // The manager creates two pods (rv 11, 12) and writes them into the cache.
        let l = json!({"app": "web", "tier": "fe"});
        let mut made = vec![];
        for (n, rv) in [("web-a", "11"), ("web-b", "12")] {
            let mut p = pod(n, Some(&o), l.clone());
            p["metadata"]["resourceVersion"] = json!(rv);
            cache.observe_write(PODS, &p);
            let create = Action::Create {
                kind: PODS,
                namespace: "ns".into(),
                object: json!({}),
            };
            c.applied("ns/web", &create, Applied::Done(Some(&p)));
            made.push(p);
        }
        // Seen: nothing more to do.
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 0);
        // A re-list from a snapshot older than our writes hides one of them: no new pod.
        pods.replace(vec![made[0].clone()], "11");
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 0, "must wait for its own pod");
        assert!(out.requeue_after.is_some());
        // The watch delivers it: fine again.
        feed(&c, &cache, PODS, DeltaKind::Added, made[1].clone());
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 0);
        // Once the watch has gone past them, a pod that disappears is replaced.
        feed(&c, &cache, PODS, DeltaKind::Deleted, made[1].clone());
        pods.set_resource_version("20");
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 1);
    }

    #[test]
    fn deleted_pods_stay_deleted_despite_late_events() {
        let o = rs("web", 1);
        let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let l = json!({"app": "web", "tier": "fe"});
        let p1 = pod("web-1", Some(&o), l.clone());
        let mut p2 = pod("web-2", Some(&o), l.clone());
        p2["metadata"]["creationTimestamp"] = json!("2024-06-01T11:59:00Z");
        feed(&c, &cache, PODS, DeltaKind::Added, p1.clone());
        feed(&c, &cache, PODS, DeltaKind::Added, p2.clone());
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(deletes(&out), ["web-2"], "the newer pod goes first");
        // The manager deletes it and forgets it in the cache.
        cache.observe_delete(PODS, "ns", "web-2");
        let del = Action::Delete {
            kind: PODS,
            namespace: "ns".into(),
            name: "web-2".into(),
            options: DeleteOptions::default(),
        };
        c.applied("ns/web", &del, Applied::Done(None));
        // A late, older update: the store keeps it out, and it would not count either way.
        let mut late = p2.clone();
        late["metadata"]["resourceVersion"] = json!("6");
        feed(&c, &cache, PODS, DeltaKind::Updated, late);
        assert!(cache.store(PODS).get("ns/web-2").is_none());
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert!(
            deletes(&out).is_empty(),
            "no second victim: {:?}",
            out.actions
        );
        assert_eq!(creates(&out), 0);
        // The real deletion arrives.
        feed(&c, &cache, PODS, DeltaKind::Deleted, p2);
        assert!(c.track().deleted.is_empty());
    }

    #[test]
    fn adoption_and_release_decisions() {
        let o = rs("web", 2);
        let (cache, client) = cx_with(&[(REPLICASETS, o.clone())]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        // owned, but relabelled: released; owned by us and matching: kept
        feed(
            &c,
            &cache,
            PODS,
            DeltaKind::Added,
            pod("moved", Some(&o), json!({"app": "other"})),
        );
        feed(
            &c,
            &cache,
            PODS,
            DeltaKind::Added,
            pod("mine", Some(&o), json!({"app": "web"})),
        );
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        let patch = out
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Patch { name, patch, .. } if name == "moved" => Some(patch.clone()),
                _ => None,
            })
            .expect("release patch");
        assert_eq!(patch["metadata"]["uid"], "p-moved");
        assert_eq!(patch["metadata"]["ownerReferences"][0]["$patch"], "delete");
        assert_eq!(creates(&out), 1, "the released pod does not count");
        feed(
            &c,
            &cache,
            PODS,
            DeltaKind::Added,
            pod("orphan", None, json!({"app": "web"})),
        );
        assert!(c.track().orphans["ns"].contains_key("orphan"));
        feed(
            &c,
            &cache,
            PODS,
            DeltaKind::Deleted,
            pod("orphan", None, json!({"app": "web"})),
        );
        assert!(!c.track().orphans.contains_key("ns"));
    }

    #[test]
    fn adoption_rereads_the_owner() {
        use crate::sandbox::{Sandbox, SandboxOptions};
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let client = crate::api::client::Client::new(
            &crate::api::kubeconfig::RestConfig {
                server: sb.url(),
                source: "test".into(),
                ..Default::default()
            },
            0.0,
            1,
            "test",
        )
        .expect("client");
        let mut o = rs("web", 1);
        o["metadata"]["namespace"] = json!("default");
        o["metadata"].as_object_mut().map(|m| m.remove("uid"));
        let live = sb.create(&REPLICASETS, o).expect("create rs");
        let cache = Cache::new(client.clone());
        cache
            .store(REPLICASETS)
            .apply(DeltaKind::Added, live.clone());
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let mut orphan = pod("orphan", None, json!({"app": "web"}));
        orphan["metadata"]["namespace"] = json!("default");
        feed(&c, &cache, PODS, DeltaKind::Added, orphan);
        let out = c
            .reconcile(&cx(&cache, &client), "default/web")
            .expect("reconcile");
        let patch = out
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Patch { name, patch, .. } if name == "orphan" => Some(patch.clone()),
                _ => None,
            })
            .expect("adopt patch");
        assert_eq!(patch["metadata"]["uid"], "p-orphan");
        assert_eq!(
            patch["metadata"]["ownerReferences"][0]["uid"],
            live["metadata"]["uid"]
        );
        assert_eq!(creates(&out), 0, "the adopted pod counts");
        // The owner was replaced meanwhile (same name, another UID): no adoption.
        sb.delete(&REPLICASETS, Some("default"), "web")
            .expect("delete");
        let mut again = rs("web", 1);
        again["metadata"]["namespace"] = json!("default");
        again["metadata"].as_object_mut().map(|m| m.remove("uid"));
        sb.create(&REPLICASETS, again).expect("recreate");
        let err = c
            .reconcile(&cx(&cache, &client), "default/web")
            .expect_err("stale owner");
        assert!(
            err.to_string().contains("can't adopt Pod default/orphan"),
            "{err}"
        );
    }

    #[test]
    fn pod_events_map_to_owner_keys() {
        let o = rs("web", 1);
        let other = rs("db", 1);
        let (cache, _) = cx_with(&[(REPLICASETS, o.clone()), (REPLICASETS, other.clone())]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let w = Watch::full(PODS);
        let d = |kind, old: Option<Value>, new: Option<Value>| Delta {
            kind,
            old: old.map(Arc::new),
            new: new.map(Arc::new),
        };
        // The owners' watch events, as the manager delivers them, feed the selector index.
        for owner in [&o, &other] {
            let added = d(DeltaKind::Added, None, Some(owner.clone()));
            let keys = c.keys_for(&Watch::full(REPLICASETS), &added, &cache);
            assert_eq!(keys, [obj::key(owner)]);
        }
        let owned = pod("a", Some(&o), json!({"app": "web"}));
        assert_eq!(
            c.keys_for(&w, &d(DeltaKind::Added, None, Some(owned.clone())), &cache),
            ["ns/web"]
        );
        assert_eq!(
            c.keys_for(
                &w,
                &d(DeltaKind::Deleted, Some(owned.clone()), None),
                &cache
            ),
            ["ns/web"]
        );
        // an orphan: every owner whose selector matches
        let orphan = pod("b", None, json!({"app": "db"}));
        assert_eq!(
            c.keys_for(&w, &d(DeltaKind::Added, None, Some(orphan.clone())), &cache),
            ["ns/db"]
        );
        // relabelled orphan: owners matching the new labels
        let mut moved = orphan.clone();
        moved["metadata"]["labels"] = json!({"app": "web"});
        assert_eq!(
            c.keys_for(
                &w,
                &d(DeltaKind::Updated, Some(orphan), Some(moved)),
                &cache
            ),
            ["ns/web"]
        );
        // a pod whose owner is unknown (other kind or other uid): nothing
        let mut stranger = owned.clone();
        stranger["metadata"]["ownerReferences"][0]["uid"] = json!("nope");
        assert!(c
            .keys_for(&w, &d(DeltaKind::Added, None, Some(stranger)), &cache)
            .is_empty());
        // released from web: web looks again
        let mut released = owned.clone();
        released["metadata"]["ownerReferences"] = json!([]);
        released["metadata"]["labels"] = json!({"app": "none"});
        assert_eq!(
            c.keys_for(
                &w,
                &d(DeltaKind::Updated, Some(owned), Some(released)),
                &cache
            ),
            ["ns/web"]
        );
    }

    #[test]
    fn replication_controller_flavor() {
        let rc = json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "old", "namespace": "ns", "uid": "rc-1", "generation": 1},
            "spec": {"replicas": 2, "selector": {"app": "old"},
                "template": {"metadata": {"labels": {"app": "old"}}, "spec": {}}}
        });
        let (cache, client) = cx_with(&[(REPLICATIONCONTROLLERS, rc)]);
        let c = ReplicaSetController::new(Flavor::ReplicationController, 1);
        assert_eq!(c.name(), "replicationcontroller-controller");
        assert_eq!(c.event_component(), "replication-controller");
        let out = c
            .reconcile(&cx(&cache, &client), "ns/old")
            .expect("reconcile");
        assert_eq!(creates(&out), 2);
        let Action::SlowStart(l) = &out.actions[0] else {
            panic!()
        };
        let Action::Reported { action, report } = &l[0] else {
            panic!()
        };
        assert_eq!(report.about.kind, "ReplicationController");
        let Action::Create { object, .. } = &**action else {
            panic!()
        };
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["kind"],
            "ReplicationController"
        );
        assert_eq!(object["metadata"]["ownerReferences"][0]["apiVersion"], "v1");
    }

    #[test]
    fn failed_attempt_shows_in_status_right_after() {
        let o = rs("web", 1);
        let (cache, client) = cx_with(&[(REPLICASETS, o)]);
        let c = ReplicaSetController::new(Flavor::ReplicaSet, 1);
        let out = c
            .reconcile(&cx(&cache, &client), "ns/web")
            .expect("reconcile");
        assert_eq!(creates(&out), 1);
        let create = Action::Create {
            kind: PODS,
            namespace: "ns".into(),
            object: json!({}),
        };
        let err = Error::api(
            403,
            "Forbidden",
            "pods \"web-x\" is forbidden: exceeded quota",
        );
        c.applied("ns/web", &create, Applied::Failed(&err));
        let out = c
            .status_after_writes(&cx(&cache, &client), "ns/web")
            .expect("status");
        let Some(Action::UpdateSubresource { object, .. }) = out.actions.last() else {
            panic!("{:?}", out.actions)
        };
        let cond = &object["status"]["conditions"][0];
        assert_eq!(cond["reason"], "FailedCreate");
        assert_eq!(
            cond["message"],
            "pods \"web-x\" is forbidden: exceeded quota"
        );
    }
}
