//! resourceclaim-controller (upstream's `pkg/controller/resourceclaim`; Dynamic Resource
//! Allocation, `resource.k8s.io/v1`, GA in 1.34, gate DynamicResourceAllocation): the
//! ResourceClaims a pod's `spec.resourceClaims[].resourceClaimTemplateName` asks for, and the
//! reservations and clean-up of claims whose pods are done.
//!
//! As upstream:
//! - A pod's template entry gets a claim made from the template: `generateName`
//!   `<pod>-<entry>-` (both cut in proportion past 57 characters), the pod as its controller
//!   owner, the template's labels and annotations plus `resource.kubernetes.io/pod-claim-name:
//!   <entry>`, the template's spec. A claim already generated for that entry (found by owner
//!   and annotation, after a create whose pod status write failed) is used instead. The
//!   claim names are then recorded in `status.resourceClaimStatuses` by one server-side apply
//!   of the pod's status (field manager `ResourceClaimController`), merged with the names
//!   recorded before and sorted by entry. A recorded claim that is gone, or no longer the
//!   pod's, is made again, unless it was created here and the cache has not shown it since
//!   (upstream's mutation cache: this is what stops a finished pod's deleted claim from being
//!   made again and again). A missing template, or a template asking for admin access or a
//!   prioritized list while DRAAdminAccess or DRAPrioritizedList is off, is a Warning
//!   `FailedResourceClaimCreation` Event on the pod (`PodResourceClaim <entry>: ...`) and a
//!   retry; so is a failed create.
//! - A scheduled pod (`spec.nodeName`) whose allocated claim does not list it in
//!   `status.reservedFor` is added there (the scheduler reserves claims before binding; this
//!   covers pods bound otherwise). Pods not scheduled are left to the scheduler.
//! - A claim's `reservedFor` loses pods that are gone (deleted, or replaced by a pod of the
//!   same name), finished (`Succeeded`, `Failed`), or deleted before being scheduled. A claim
//!   left with no consumer and the `resource.kubernetes.io/delete-protection` finalizer is
//!   deallocated (`status.allocation` removed) and the finalizer removed; a claim being
//!   deleted with the finalizer and no consumers likewise. A generated claim with no
//!   consumers whose pod is done or replaced is deleted.
//! - One queue, `resource_claim`, keyed `pod:<ns>/<name>` and `claim:<ns>/<name>`;
//!   `--concurrent-resourceclaim-syncs` workers (50); Events from `resource_claim`; the
//!   metrics `dynamic_resource_allocation_resourceclaim_creates_total` and
//!   `dynamic_resource_allocation_resource_claims` (v1.37's names).
//! - Off, with one line, when the API server does not serve `resource.k8s.io/v1`
//!   resourceclaims.
//!
//! Not here: PodGroup claims (gates GenericWorkload and DRAWorkloadResourceClaims, both off
//! by default in v1.37); a pod naming a PodGroup is not worked on, as upstream with the gates
//! off. Extended resource claims the scheduler makes are released and deleted as others
//! (they are listed in `status.extendedResourceClaimStatus`).

pub mod decide;
pub mod metrics;
mod sync;
#[cfg(test)]
mod tests;

use crate::api::resources::{PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES};
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::{Action, Applied, Controller, Cx, Outcome, Watch};
use crate::error::Result;
use crate::obj;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

pub const NAME: &str = "resourceclaim-controller";
/// The field manager of the pod status apply.
pub const FIELD_MANAGER: &str = "ResourceClaimController";
const CLAIM_PREFIX: &str = "claim:";
const POD_PREFIX: &str = "pod:";
/// Pods known to be deleted, at most (upstream's `maxUIDCacheEntries`).
const MAX_DELETED: usize = 500;
/// Claims remembered as created here, at most (upstream's `claimMutationCacheSize`).
const MAX_CREATED: usize = 1000;

/// Pods: their claims, node, phase and the claim names recorded in their status.
pub const POD_WATCH: Watch = Watch::fields(
    PODS,
    &[
        "/spec/resourceClaims",
        "/spec/nodeName",
        "/spec/schedulingGroup",
        "/status/phase",
        "/status/resourceClaimStatuses",
        "/status/extendedResourceClaimStatus",
    ],
);
/// Claims, whole (their status is written back).
pub const CLAIM_WATCH: Watch = Watch::full(RESOURCECLAIMS);
/// Templates, whole (their spec is copied).
pub const TEMPLATE_WATCH: Watch = Watch::full(RESOURCECLAIMTEMPLATES);

/// Its row in the controller table. Off, with one line, when the API server does not serve
/// `resource.k8s.io/v1` resourceclaims: the informers would never sync.
pub fn build(
    cx: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    if super::kit::served::served(cx.rest, "/apis/resource.k8s.io/v1", "resourceclaims")
        == Some(false)
    {
        log::info!(
            "{NAME}: the API server does not serve resource.k8s.io/v1 resourceclaims; not starting it"
        );
        return Ok(None);
    }
    crate::metrics::register_collector("resourceclaim", std::sync::Arc::new(metrics::families));
    Ok(Some(crate::controllers::Runnable::reconciles(
        ResourceClaimController::new(
            crate::config::gates::enabled("DRAAdminAccess"),
            crate::config::gates::enabled("DRAPrioritizedList"),
        ),
    )))
}

/// Pod key -> the values it is indexed under, and value -> pod keys (upstream's informer
/// indexes by claim and by template).
#[derive(Default)]
struct Index {
    of: HashMap<String, BTreeSet<String>>,
    by: HashMap<String, BTreeSet<String>>,
}

impl Index {
    fn set(&mut self, pod: &str, now: BTreeSet<String>) {
        let before = if now.is_empty() {
            self.of.remove(pod).unwrap_or_default()
        } else {
            self.of
                .insert(pod.to_string(), now.clone())
                .unwrap_or_default()
        };
        for v in before.difference(&now) {
            if let Some(s) = self.by.get_mut(v) {
                s.remove(pod);
                if s.is_empty() {
                    self.by.remove(v);
                }
            }
        }
        for v in now.difference(&before) {
            self.by
                .entry(v.clone())
                .or_default()
                .insert(pod.to_string());
        }
    }

    fn pods(&self, v: &str) -> Vec<String> {
        self.by
            .get(v)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The UIDs of pods seen deleted, the oldest forgotten first.
#[derive(Default)]
struct Deleted {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Deleted {
    fn add(&mut self, uid: &str) {
        if uid.is_empty() || !self.set.insert(uid.to_string()) {
            return;
        }
        self.order.push_back(uid.to_string());
        while self.order.len() > MAX_DELETED {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// The claims this controller created, until the cache shows them (upstream's mutation
/// cache over the claim informer, `IncludeAdds`, at most 1000 entries): a claim created here
/// and not (or no longer) in the cache counts as existing, without asking the server.
#[derive(Default)]
struct Created {
    order: VecDeque<String>,
    keys: HashSet<String>,
}

impl Created {
    fn add(&mut self, key: String) {
        if self.keys.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.order.len() > MAX_CREATED {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }

    fn remove(&mut self, key: &str) -> bool {
        if !self.keys.remove(key) {
            return false;
        }
        self.order.retain(|k| k != key);
        true
    }
}

/// What a claim sync left for after its status write.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ClaimStep {
    /// Consumers were removed; `none_left`: none remain.
    Removed { none_left: bool },
    /// A claim being deleted was deallocated.
    Deallocated,
}

pub struct ResourceClaimController {
    admin_access: bool,
    prioritized_list: bool,
    by_claim: Mutex<Index>,
    by_template: Mutex<Index>,
    deleted: Mutex<Deleted>,
    /// Keys with a failed write in the current sync.
    failed: Mutex<HashSet<String>>,
    created: Mutex<Created>,
    /// Claim keys whose status write is being applied.
    steps: Mutex<HashMap<String, ClaimStep>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ResourceClaimController {
    /// `admin_access`, `prioritized_list`: whether DRAAdminAccess and DRAPrioritizedList are on.
    pub fn new(admin_access: bool, prioritized_list: bool) -> Self {
        ResourceClaimController {
            admin_access,
            prioritized_list,
            by_claim: Mutex::default(),
            by_template: Mutex::default(),
            deleted: Mutex::default(),
            failed: Mutex::default(),
            created: Mutex::default(),
            steps: Mutex::default(),
        }
    }

    /// Whether a claim not in the cache was created here (and not seen in the cache since).
    fn created_here(&self, key: &str) -> bool {
        lock(&self.created).keys.contains(key)
    }

    /// The cache shows the claim: it is no longer remembered as created here.
    fn seen(&self, key: &str) {
        lock(&self.created).remove(key);
    }

    fn was_deleted(&self, uid: &str) -> bool {
        lock(&self.deleted).set.contains(uid)
    }

    /// `enqueuePod`: the claims whose reservations may go, and the pod when it needs work.
    fn pod_keys(&self, pod: &Value, deleted: bool, cache: &Cache) -> Vec<String> {
        if !decide::has_claims(pod) {
            return vec![];
        }
        if deleted {
            lock(&self.deleted).add(obj::uid(pod));
        }
        let ns = obj::namespace(pod);
        let mut keys = Vec::new();
        let (needs, why) = decide::pod_needs_claims(pod, deleted);
        if !needs {
            log::trace!("{NAME}: claims of pod {} to check: {why}", obj::key(pod));
            for c in decide::pod_claims(pod) {
                keys.push(format!("{CLAIM_PREFIX}{}", obj::make_key(ns, &c)));
            }
        }
        if self.pod_needs_work(pod, cache) {
            keys.push(format!("{POD_PREFIX}{}", obj::key(pod)));
        }
        keys
    }

    /// `podNeedsWork`.
    fn pod_needs_work(&self, pod: &Value, cache: &Cache) -> bool {
        if obj::is_deleting(pod) {
            return false;
        }
        let claims = cache.store_for(&CLAIM_WATCH);
        for e in decide::entries(pod) {
            let (name, check) = match decide::claim_name(pod, e) {
                Err(_) => return true,
                Ok((None, _)) => continue,
                Ok((Some(n), check)) => (n, check),
            };
            let Some(claim) = claims.get_in(obj::namespace(pod), &name) else {
                if e.get("resourceClaimTemplateName").is_some() {
                    return true;
                }
                continue;
            };
            if check && decide::not_for_pod(pod, &claim).is_some() {
                continue;
            }
            if !decide::is_scheduled(pod) {
                continue;
            }
            if decide::is_allocated(&claim) && !decide::is_reserved_for(pod, &claim) {
                return true;
            }
        }
        false
    }

    fn index_pod(&self, pod: &Value, gone: bool) {
        let key = obj::key(pod);
        let ns = obj::namespace(pod);
        let (mut claims, mut templates) = (BTreeSet::new(), BTreeSet::new());
        if !gone {
            for e in decide::entries(pod) {
                if let Ok((Some(n), _)) = decide::claim_name(pod, e) {
                    claims.insert(obj::make_key(ns, &n));
                }
                if let Some(t) = e.get("resourceClaimTemplateName").and_then(Value::as_str) {
                    templates.insert(obj::make_key(ns, t));
                }
            }
        }
        lock(&self.by_claim).set(&key, claims);
        lock(&self.by_template).set(&key, templates);
    }

    /// The keys of the pods indexed under `value`, as `enqueuePod` gives them.
    fn indexed_pod_keys(&self, index: &Mutex<Index>, value: &str, cache: &Cache) -> Vec<String> {
        let pods = cache.store_for(&POD_WATCH);
        let keys = lock(index).pods(value);
        keys.iter()
            .filter_map(|k| pods.get(k))
            .flat_map(|p| self.pod_keys(&p, false, cache))
            .collect()
    }
}

impl Controller for ResourceClaimController {
    fn watches(&self) -> Vec<Watch> {
        vec![POD_WATCH, CLAIM_WATCH, TEMPLATE_WATCH]
    }

    fn keys_for(&self, w: &Watch, d: &Delta, cache: &Cache) -> Vec<String> {
        let o = d.object();
        let gone = d.kind == DeltaKind::Deleted;
        if w.kind == PODS {
            self.index_pod(o, gone);
            return self.pod_keys(o, gone, cache);
        }
        let key = obj::key(o);
        if w.kind == RESOURCECLAIMS {
            metrics::claim_seen(&key, (!gone).then_some(o));
            let mut keys = Vec::new();
            if !gone {
                keys.push(format!("{CLAIM_PREFIX}{key}"));
            }
            keys.extend(self.indexed_pod_keys(&self.by_claim, &key, cache));
            return keys;
        }
        if gone {
            return vec![];
        }
        self.indexed_pod_keys(&self.by_template, &key, cache)
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        lock(&self.failed).remove(key);
        if let Some(k) = key.strip_prefix(POD_PREFIX) {
            let (ns, name) = obj::split_key(k);
            return self.sync_pod(cx, key, ns, name, true);
        }
        if let Some(k) = key.strip_prefix(CLAIM_PREFIX) {
            let (ns, name) = obj::split_key(k);
            return self.sync_claim(cx, key, ns, name);
        }
        log::warn!("{NAME}: unexpected key {key}");
        Ok(Outcome::none())
    }

    fn status_after_writes(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let step = lock(&self.steps).remove(key);
        if lock(&self.failed).remove(key) {
            return Ok(Outcome::none());
        }
        if let Some(k) = key.strip_prefix(POD_PREFIX) {
            let (ns, name) = obj::split_key(k);
            return self.sync_pod(cx, key, ns, name, false);
        }
        match (key.strip_prefix(CLAIM_PREFIX), step) {
            (Some(k), Some(step)) => {
                let (ns, name) = obj::split_key(k);
                Ok(self.after_claim_status(cx, ns, name, step))
            }
            _ => Ok(Outcome::none()),
        }
    }

    fn applied(&self, key: &str, action: &Action, result: Applied<'_>) {
        let failed = matches!(result, Applied::Failed(_) | Applied::Skipped);
        if let Action::Create { kind, object, .. } = action {
            if *kind == RESOURCECLAIMS && !matches!(result, Applied::Skipped) {
                metrics::created(object, !failed);
            }
            if let Applied::Done(Some(answer)) = result {
                lock(&self.created).add(obj::key(answer));
            }
        }
        if failed {
            lock(&self.failed).insert(key.to_string());
        }
    }
}
